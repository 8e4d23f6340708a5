package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// Bounds of the waits. A resumed run needs the killed holder's lease to
// expire (leaseTTL) and the next look for lost runs (leaseTTL/3), then its
// own work: a few seconds at most.
const (
	startTimeout = 20 * time.Second
	cutTimeout   = 10 * time.Second
	runTimeout   = 20 * time.Second
)

// streamText is what the "stream" rule of testdata/chaos.yaml answers to
// the input streamInput.
const (
	streamInput = "stream please"
	streamText  = streamInput + ": one two three four five six seven eight nine ten " +
		"eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen " +
		"nineteen twenty twenty-one twenty-two twenty-three twenty-four " +
		"twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty."
	// cutAfterDeltas is how many deltas the client reads before the kill:
	// a few of the step's 80, so the kill lands in the middle of the
	// model request.
	cutAfterDeltas = 3
)

// TestKillMidStream kills `rein serve` while a run's model request is
// streaming, restarts it on the same store and checks that the run is
// resumed (docs/api.md "Instance loss"): the cut step is made again, announced
// by agent.step_restarted attempt 2, the run completes once, and nothing a
// client had read is lost or rewritten. Then the session takes a new
// message (scenario 3).
func TestKillMidStream(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			p1 := startServe(ctxFor(t, startTimeout), t, "first", store)
			sid := newSession(t, p1)
			runID := send(t, p1, sid, streamInput)

			// Read the stream until a few deltas of the run are in the log
			// (the stream serves the log: what it yields is stored).
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, func(evs []rein.Event) bool {
				return len(deltas(evs, runID, 1)) >= cutAfterDeltas
			})
			if ev := find(seen, rein.EventMessage, runID); ev != nil {
				t.Fatalf("the run finished before the kill (seq %d): the scenario did not cut the stream\n%s", ev.Seq, dump(seen))
			}
			p1.kill()
			t.Logf("killed %s after reading %d events (last seq %d)", p1.name, len(seen), seen[len(seen)-1].Seq)

			p2 := startServe(ctxFor(t, startTimeout), t, "restarted", store)
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)

			restart := checkRestartedOnce(t, run, runID, run)

			final := finalMessage(t, run, runID)
			if final.Text != streamText {
				t.Errorf("final agent.message text = %q, want %q", final.Text, streamText)
			}
			var before, after strings.Builder
			for _, ev := range deltas(run, runID, 1) {
				var d rein.MessageDeltaPayload
				decode(t, ev, &d)
				if ev.Seq < restart.Seq {
					before.WriteString(d.Text)
				} else {
					after.WriteString(d.Text)
				}
			}
			if after.String() != final.Text {
				t.Errorf("the deltas after agent.step_restarted concatenate to %q, want the final text %q", after.String(), final.Text)
			}
			// The cut attempt streamed the same deterministic text, so
			// what it left in the log is a prefix of it.
			if before.Len() == 0 || !strings.HasPrefix(streamText, before.String()) {
				t.Errorf("the deltas before agent.step_restarted concatenate to %q, want a non-empty prefix of %q", before.String(), streamText)
			}
			// Every delta the client read came before the restart.
			if last := seen[len(seen)-1]; last.Seq >= restart.Seq {
				t.Errorf("agent.step_restarted (seq %d) is not after the events read before the kill (last seq %d)", restart.Seq, last.Seq)
			}
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)

			followUp(t, p2, sid, "hello after the kill")
		})
	}
}

// TestKillMidTool kills `rein serve` while a tool call runs, restarts it
// on the same store and checks that the run is resumed after the step
// (docs/api.md): the call is answered in doubt, exactly once, and never run
// again, the model's next step sees that answer, and the run completes
// once. Then the session takes a new message (scenario 3).
func TestKillMidTool(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			p1 := startServe(ctxFor(t, startTimeout), t, "first", store)
			sid := newSession(t, p1)
			runID := send(t, p1, sid, "tool time")

			// agent.tool_use is recorded with the step's saved result, just
			// before the tool starts; the tool sleeps for 600 s.
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, func(evs []rein.Event) bool {
				return find(evs, rein.EventToolUse, runID) != nil
			})
			var use rein.ToolUsePayload
			decode(t, *find(seen, rein.EventToolUse, runID), &use)
			if use.Name != "sleep" || use.Step != 1 || use.ToolUseID == "" {
				t.Fatalf("agent.tool_use = %+v, want a sleep call of step 1", use)
			}
			p1.kill()
			t.Logf("killed %s after reading %d events (last seq %d)", p1.name, len(seen), seen[len(seen)-1].Seq)

			p2 := startServe(ctxFor(t, startTimeout), t, "restarted", store)
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)

			// The step's model request had ended: it is not made again.
			uses := all(run, rein.EventToolUse)
			if len(uses) != 1 {
				t.Errorf("want the one agent.tool_use of step 1, got %d: the cut step was repeated or the call run again\n%s", len(uses), dump(run))
			}
			if rs := all(run, rein.EventStepRestarted); len(rs) != 0 {
				t.Errorf("agent.step_restarted logged %d times, want none: the cut step's model request had ended\n%s", len(rs), dump(run))
			}

			var results []rein.Event
			for _, ev := range all(run, rein.EventToolResult) {
				var r rein.ToolResultPayload
				decode(t, ev, &r)
				if r.ToolUseID == use.ToolUseID {
					results = append(results, ev)
				}
			}
			if len(results) != 1 {
				t.Fatalf("want exactly one agent.tool_result for %s, got %d\n%s", use.ToolUseID, len(results), dump(run))
			}
			var res rein.ToolResultPayload
			decode(t, results[0], &res)
			if !res.IsError || !res.InDoubt || !strings.HasPrefix(res.Output, "in doubt:") || res.RunID != runID {
				t.Errorf("agent.tool_result = %+v, want is_error, in_doubt, output starting with \"in doubt:\", run %s", res, runID)
			}

			// The run went on with step 2, whose request carried the
			// in-doubt result.
			final := finalMessage(t, run, runID)
			if want := "after the tool: " + res.Output; final.Text != want {
				t.Errorf("final agent.message text = %q, want %q", final.Text, want)
			}
			var step2 strings.Builder
			for _, ev := range deltas(run, runID, 2) {
				if ev.Seq < results[0].Seq {
					t.Errorf("step 2 delta (seq %d) before the in-doubt result (seq %d)", ev.Seq, results[0].Seq)
				}
				var d rein.MessageDeltaPayload
				decode(t, ev, &d)
				step2.WriteString(d.Text)
			}
			if step2.String() != final.Text {
				t.Errorf("step 2's deltas concatenate to %q, want the final text %q", step2.String(), final.Text)
			}
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)

			followUp(t, p2, sid, "hello after the kill")
		})
	}
}

// ctxFor is a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), d, fmt.Errorf("timed out after %v", d))
	t.Cleanup(cancel)
	return ctx
}

func newSession(t testing.TB, p *proc) string {
	t.Helper()
	s, err := p.client.CreateSession(ctxFor(t, 5*time.Second), client.CreateSessionRequest{})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return s.ID
}

// send starts a run and returns its id.
func send(t testing.TB, p *proc, sid, text string) string {
	t.Helper()
	r, err := p.client.SendMessage(ctxFor(t, 5*time.Second), sid, client.Message{Text: text})
	if err != nil {
		t.Fatalf("%s: send %q: %v", p.name, text, err)
	}
	if r.RunID == "" || r.Status != rein.StatusRunning && r.Status != rein.StatusQueued {
		t.Fatalf("%s: send %q = %+v, want a new run", p.name, text, r)
	}
	return r.RunID
}

// readUntil follows the session's stream from the start until done says
// the events read so far are enough, and returns them. The stream is
// closed before it returns, so that nothing reconnects to a server the
// test is about to kill.
func readUntil(ctx context.Context, t *testing.T, p *proc, sid string, done func([]rein.Event) bool) []rein.Event {
	t.Helper()
	s := p.client.Stream(ctx, sid, 0)
	defer s.Close()
	var evs []rein.Event
	for !done(evs) {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("%s: reading the event stream: %v\nread so far:\n%s", p.name, err, dump(evs))
		}
		evs = append(evs, ev)
	}
	return evs
}

// waitRunEnd follows the session's stream until run's session.run_completed
// and then returns the whole log, read page by page.
func waitRunEnd(ctx context.Context, t *testing.T, p *proc, sid, runID string) []rein.Event {
	t.Helper()
	s := p.client.Stream(ctx, sid, 0)
	defer s.Close()
	var evs []rein.Event
	for find(evs, rein.EventRunCompleted, runID) == nil {
		ev, err := s.Next()
		if err != nil {
			log, _ := listAll(context.Background(), p, sid)
			t.Fatalf("%s: run %s did not complete: %v\nlog:\n%s", p.name, runID, err, dump(log))
		}
		evs = append(evs, ev)
	}
	log, err := listAll(ctxFor(t, 5*time.Second), p, sid)
	if err != nil {
		t.Fatalf("%s: list events: %v", p.name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("event log of session %s read from %s after run %s ended:\n%s", sid, p.name, runID, dump(log))
		}
	})
	return log
}

// listAll reads the whole log with GET /events and checks that its pages
// agree with last_seq.
func listAll(ctx context.Context, p *proc, sid string) ([]rein.Event, error) {
	var out []rein.Event
	var after int64
	for {
		evs, last, err := p.client.ListEvents(ctx, sid, after, 1000)
		if err != nil {
			return out, err
		}
		out = append(out, evs...)
		if len(evs) == 0 {
			if after != last {
				return out, fmt.Errorf("the log ends at seq %d but last_seq is %d", after, last)
			}
			return out, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// checkLog checks that seq is 1..N without a gap or a duplicate.
func checkLog(t *testing.T, log []rein.Event) {
	t.Helper()
	for i, ev := range log {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event #%d has seq %d, want %d: the log is not gap-free", i+1, ev.Seq, i+1)
		}
	}
}

// checkKept checks that every event the client read before the kill is in
// the log as it was read: same seq, id, type, run, payload and time.
func checkKept(t *testing.T, seen, log []rein.Event) {
	t.Helper()
	for _, s := range seen {
		if s.Seq < 1 || s.Seq > int64(len(log)) {
			t.Errorf("event seq %d (%s %s) read before the kill is missing: the log has %d events", s.Seq, s.Type, s.ID, len(log))
			continue
		}
		l := log[s.Seq-1]
		if l.ID != s.ID || l.Type != s.Type || l.RunID != s.RunID || l.SessionID != s.SessionID ||
			!l.CreatedAt.Equal(s.CreatedAt) || !sameJSON(l.Payload, s.Payload) {
			t.Errorf("event seq %d changed across the kill:\n read before: %s\n in the log:  %s", s.Seq, line(s), line(l))
		}
	}
}

// checkCompletedOnce checks that the run has exactly one
// session.run_completed, COMPLETED/stop, and that it is the run's last
// event.
func checkCompletedOnce(t *testing.T, run []rein.Event, runID string) {
	t.Helper()
	ends := all(run, rein.EventRunCompleted)
	if len(ends) != 1 {
		t.Fatalf("want exactly one session.run_completed of run %s, got %d\n%s", runID, len(ends), dump(run))
	}
	if run[len(run)-1].Seq != ends[0].Seq {
		t.Errorf("session.run_completed (seq %d) is not the run's last event (seq %d)", ends[0].Seq, run[len(run)-1].Seq)
	}
	var rc rein.RunCompletedPayload
	decode(t, ends[0], &rc)
	if rc.RunID != runID || rc.Status != rein.StatusCompleted || rc.Reason != rein.ReasonStop || rc.Error != "" {
		t.Errorf("session.run_completed = %+v, want run %s COMPLETED/stop", rc, runID)
	}
}

// checkRestartedOnce checks that the run has exactly one
// agent.step_restarted: its step 1 made again, attempt 2, and returns it.
// context is dumped with a failure.
func checkRestartedOnce(t *testing.T, run []rein.Event, runID string, context []rein.Event) rein.Event {
	t.Helper()
	restarts := all(run, rein.EventStepRestarted)
	if len(restarts) != 1 {
		t.Fatalf("want exactly one agent.step_restarted of run %s, got %d\n%s", runID, len(restarts), dump(context))
	}
	var sr rein.StepRestartedPayload
	decode(t, restarts[0], &sr)
	if sr != (rein.StepRestartedPayload{RunID: runID, Step: 1, Attempt: 2}) {
		t.Errorf("agent.step_restarted payload = %+v, want run %s step 1 attempt 2\n%s", sr, runID, dump(context))
	}
	return restarts[0]
}

// finalMessage returns the run's one agent.message, which must say stop.
func finalMessage(t *testing.T, run []rein.Event, runID string) rein.MessagePayload {
	t.Helper()
	msgs := all(run, rein.EventMessage)
	if len(msgs) != 1 {
		t.Fatalf("want exactly one agent.message of run %s, got %d", runID, len(msgs))
	}
	var m rein.MessagePayload
	decode(t, msgs[0], &m)
	if m.RunID != runID || m.Reason != rein.ReasonStop {
		t.Errorf("agent.message = %+v, want run %s reason stop", m, runID)
	}
	return m
}

// checkRun checks the run record the restarted server reports.
func checkRun(t *testing.T, p *proc, sid, runID string, status rein.RunStatus, reason rein.Reason) {
	t.Helper()
	r, err := p.client.GetRun(ctxFor(t, 5*time.Second), sid, runID)
	if err != nil {
		t.Fatalf("%s: get run %s: %v", p.name, runID, err)
	}
	if r.Status != status || r.Reason != reason || r.EndedAt == nil {
		t.Errorf("%s: run %s is %s/%s (ended %v), want %s/%s", p.name, runID, r.Status, r.Reason, r.EndedAt, status, reason)
	}
}

// followUp is scenario 3: after the resumed run, the session is idle,
// takes a new message, and that run completes. Its model request carries
// the resumed run's turn (.Turns counts it).
func followUp(t *testing.T, p *proc, sid, text string) {
	t.Helper()
	s, err := p.client.GetSession(ctxFor(t, 5*time.Second), sid)
	if err != nil {
		t.Fatalf("%s: get session: %v", p.name, err)
	}
	if s.State != "idle" || s.CurrentRunID != "" || len(s.QueuedRunIDs) != 0 {
		t.Errorf("%s: after the resumed run the session is %q (current %q, queued %v), want idle", p.name, s.State, s.CurrentRunID, s.QueuedRunIDs)
	}
	runID := send(t, p, sid, text)
	log := waitRunEnd(ctxFor(t, runTimeout), t, p, sid, runID)
	checkLog(t, log)
	run := runEvents(log, runID)
	checkCompletedOnce(t, run, runID)
	if want := fmt.Sprintf("echo: %s (turns 2)", text); finalMessage(t, run, runID).Text != want {
		t.Errorf("follow-up reply = %q, want %q", finalMessage(t, run, runID).Text, want)
	}
	checkRun(t, p, sid, runID, rein.StatusCompleted, rein.ReasonStop)
}

// runEvents are the events of the log about run.
func runEvents(log []rein.Event, runID string) []rein.Event {
	var out []rein.Event
	for _, ev := range log {
		if ev.RunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

// all are the events of type typ.
func all(evs []rein.Event, typ rein.EventType) []rein.Event {
	var out []rein.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// find returns the first event of type typ about run, or nil.
func find(evs []rein.Event, typ rein.EventType, runID string) *rein.Event {
	for i := range evs {
		if evs[i].Type == typ && evs[i].RunID == runID {
			return &evs[i]
		}
	}
	return nil
}

// deltas are run's agent.message.delta events of step.
func deltas(evs []rein.Event, runID string, step int) []rein.Event {
	var out []rein.Event
	for _, ev := range evs {
		if ev.Type != rein.EventMessageDelta || ev.RunID != runID {
			continue
		}
		var d rein.MessageDeltaPayload
		if json.Unmarshal(ev.Payload, &d) == nil && d.Step == step {
			out = append(out, ev)
		}
	}
	return out
}

func decode(t *testing.T, ev rein.Event, v any) {
	t.Helper()
	if err := ev.DecodePayload(v); err != nil {
		t.Fatalf("seq %d %s: payload %s: %v", ev.Seq, ev.Type, ev.Payload, err)
	}
}

// sameJSON compares payloads byte for byte after compaction (the server
// stores and serves a payload as written).
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

func line(ev rein.Event) string {
	return fmt.Sprintf("seq=%d id=%s run=%s type=%s at=%s payload=%s", ev.Seq, ev.ID, ev.RunID, ev.Type, rein.FormatTime(ev.CreatedAt), ev.Payload)
}

func dump(evs []rein.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		b.WriteString("  " + line(ev) + "\n")
	}
	return b.String()
}
