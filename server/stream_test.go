package server_test

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
)

// TestStreamReplayThenLive: a stream opened mid-session replays the log
// after the cursor, then continues live with the next run, and every frame
// matches GET events exactly.
func TestStreamReplayThenLive(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	first := s.send("", sid, "one", nil)["run_id"].(string)
	s.completion("", sid, first)
	before := s.events("", sid)

	st := s.stream("", sid, "after=2", "")
	replayed := st.until(is(rein.EventRunCompleted, first))
	if len(replayed) != len(before)-2 || replayed[0].Seq != 3 {
		t.Fatalf("replay after=2 gave %d events from seq %d; log has %d", len(replayed), replayed[0].Seq, len(before))
	}
	second := s.send("", sid, "two", afterRun)["run_id"].(string)
	live := st.until(is(rein.EventRunCompleted, second))
	got := append(replayed, live...)
	all := s.events("", sid)
	checkLog(t, all)
	if len(got) != len(all)-2 {
		t.Fatalf("stream gave %d events, log has %d after seq 2", len(got), len(all)-2)
	}
	for i, e := range got {
		if want := all[i+2]; e.Seq != want.Seq || e.ID != want.ID || e.Type != want.Type || string(e.Payload) != string(want.Payload) {
			t.Fatalf("stream event %d = %+v, GET events has %+v", i, e, want)
		}
	}
}

// TestStreamReconnectMidRun: a client drops its stream in the middle of a
// streaming run and reconnects with Last-Event-ID; together the two
// connections deliver the log exactly — no gap, no duplicate — and the run
// never noticed.
func TestStreamReconnectMidRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	runID := s.send("", sid, "stream please", nil)["run_id"].(string)

	first := s.stream("", sid, "", "")
	deltas := 0
	got := first.until(func(e rein.Event) bool {
		if e.Type == rein.EventMessageDelta {
			deltas++
		}
		return deltas == 2
	})
	first.close()
	last := got[len(got)-1].Seq

	// after=0 is ignored: Last-Event-ID wins.
	second := s.stream("", sid, "after=0", strconv.FormatInt(last, 10))
	got = append(got, second.until(is(rein.EventRunCompleted, runID))...)

	all := s.events("", sid)
	checkLog(t, all)
	if len(got) != len(all) {
		t.Fatalf("two connections gave %d events, the log has %d", len(got), len(all))
	}
	var text strings.Builder
	for i, e := range got {
		if e.Seq != all[i].Seq || e.ID != all[i].ID {
			t.Fatalf("event %d: stream seq %d id %s, log seq %d id %s", i, e.Seq, e.ID, all[i].Seq, all[i].ID)
		}
		if e.Type == rein.EventMessageDelta {
			text.WriteString(payloadOf(t, e)["text"].(string))
		}
	}
	p := s.completion("", sid, runID)
	if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("closing a stream affected the run: %+v", p)
	}
	if want := "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"; text.String() != want {
		t.Fatalf("deltas concatenate to %q", text.String())
	}
}

// TestStreamCloseNeverStopsRun: a run whose only observer hangs up runs to
// its normal end.
func TestStreamCloseNeverStopsRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	st := s.stream("", sid, "", "")
	runID := s.send("", sid, "stream away", nil)["run_id"].(string)
	st.until(is(rein.EventRunStarted, runID))
	st.close()
	if p := s.completion("", sid, runID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("run after its stream closed: %+v", p)
	}
}

func TestStreamHeartbeat(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{heartbeat: 20 * time.Millisecond})
	sid := s.createSession("")
	st := s.stream("", sid, "", "")
	for range 2 {
		f, err := st.next()
		if err != nil || f.comment != "keepalive" {
			t.Fatalf("idle stream gave %+v, %v; want a keepalive comment", f, err)
		}
	}
	// Events still flow between heartbeats.
	s.results("", sid, ev("system.message", map[string]any{"text": "x"}))
	if e := st.event(); e.Type != rein.EventSystemMessage || e.Seq != 1 {
		t.Fatalf("event after heartbeats: %+v", e)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	for _, c := range []struct{ query, lastID string }{
		{"after=-1", ""}, {"after=abc", ""}, {"", "x"}, {"", "-5"}, {"after=1", "1.5"},
	} {
		resp, cancel := s.openStream("", sid, c.query, c.lastID)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		r := reply{status: resp.StatusCode, header: resp.Header, body: b}
		if r.status != 400 || r.errorCode(t) != "invalid_argument" {
			t.Fatalf("query %q Last-Event-ID %q: %d %s", c.query, c.lastID, r.status, b)
		}
	}
	resp, cancel := s.openStream("", "ses_missing", "", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if resp.StatusCode != 404 || (reply{status: 404, body: b}).errorCode(t) != "not_found" {
		t.Fatalf("stream of a missing session: %d %s", resp.StatusCode, b)
	}
}

// TestServerCloseEndsStreams: Close ends open streams (after a last read)
// and later stream requests are refused, while runs are untouched.
func TestServerCloseEndsStreams(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	st := s.stream("", sid, "", "")
	runID := s.send("", sid, "long A", nil)["run_id"].(string)
	st.until(is(rein.EventToolUse, runID))
	if err := s.srv.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := st.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream after Close: %v", err)
		}
		_ = f
	}
	resp, cancel := s.openStream("", sid, "", "")
	resp.Body.Close()
	cancel()
	if resp.StatusCode != 503 {
		t.Fatalf("stream after Close: %d", resp.StatusCode)
	}
	if st := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+runID, "", nil)["status"]; st != "RUNNING" {
		t.Fatalf("run after Close: %v", st)
	}
}

func TestMessageTimeout(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	runID := s.send("", sid, "long with a deadline", map[string]any{"timeout_s": 0.05})["run_id"].(string)
	if p := s.completion("", sid, runID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonTimeout {
		t.Fatalf("timed-out run: %+v", p)
	}
}
