package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connPlan says what one connection of the fake SSE server does.
type connPlan struct {
	// status, when not 0 or 200, answers the connection with that status
	// and a Rein error body of code.
	status int
	code   rein.Code
	// plain answers status with a text body instead of a Rein error.
	plain bool
	// contentType overrides text/event-stream.
	contentType string
	// rewind sends from cursor-rewind+1, as a server that ignores part of
	// Last-Event-ID would (duplicates).
	rewind int64
	// skip lists seqs not sent (a hole).
	skip map[int64]bool
	// max is how many events to send before dropping; < 0 sends all and
	// keeps the connection open until the client leaves.
	max int
	// partial writes half of the next frame before dropping.
	partial bool
	// silent sends the headers, then nothing, until the client leaves.
	silent bool
	// prefix is written first (comments, retry fields).
	prefix string
}

// connRecord is what the fake saw of one connection.
type connRecord struct {
	after       string
	lastEventID string
}

// fakeSSE serves a fixed log over SSE (and GET /events) following a plan
// per connection.
type fakeSSE struct {
	sid    string
	events []rein.Event
	plan   func(k int) connPlan

	mu    sync.Mutex
	conns []connRecord
	gets  int
	// connected receives the index of each connection as it arrives.
	connected chan int
}

func newFakeLog(sid string, n int) []rein.Event {
	evs := make([]rein.Event, n)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range evs {
		seq := int64(i + 1)
		evs[i] = rein.NewEvent(rein.EventMessageDelta, "run_1", rein.MessageDeltaPayload{RunID: "run_1", Step: 1, Text: fmt.Sprintf("chunk %d\nwith a newline", seq)})
		evs[i].Seq, evs[i].ID, evs[i].SessionID, evs[i].CreatedAt = seq, fmt.Sprintf("evt_%d", seq), sid, t0.Add(time.Duration(i)*time.Millisecond)
	}
	return evs
}

func writeFrame(w http.ResponseWriter, ev rein.Event) {
	b, _ := json.Marshal(ev)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
}

func (f *fakeSSE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/sessions/" + f.sid + "/events":
		f.serveList(w, r)
		return
	case "/api/sessions/" + f.sid + "/events/stream":
	default:
		http.Error(w, `{"error":{"code":"not_found","message":"no such route"}}`, http.StatusNotFound)
		return
	}
	f.mu.Lock()
	k := len(f.conns)
	f.conns = append(f.conns, connRecord{after: r.URL.Query().Get("after"), lastEventID: r.Header.Get("Last-Event-ID")})
	f.mu.Unlock()
	if f.connected != nil {
		f.connected <- k
	}
	p := f.plan(k)
	if p.status != 0 && p.status != http.StatusOK {
		if p.plain {
			http.Error(w, "bad gateway", p.status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(p.status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"planned failure"}}`, p.code)
		return
	}
	ct := p.contentType
	if ct == "" {
		ct = "text/event-stream; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fmt.Fprint(w, p.prefix)
	fl.Flush()
	if p.silent {
		<-r.Context().Done()
		return
	}
	cursor, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		cursor, _ = strconv.ParseInt(h, 10, 64)
	}
	cursor = max(0, cursor-p.rewind)
	sent := 0
	for _, ev := range f.events[cursor:] {
		if p.skip[ev.Seq] {
			continue
		}
		if p.max >= 0 && sent == p.max {
			if p.partial {
				b, _ := json.Marshal(ev)
				fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s", ev.Seq, ev.Type, b[:len(b)/2])
				fl.Flush()
			}
			return
		}
		writeFrame(w, ev)
		fmt.Fprint(w, ": keepalive\n\n")
		fl.Flush()
		sent++
	}
	if p.max < 0 {
		<-r.Context().Done()
	}
}

func (f *fakeSSE) serveList(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.gets++
	f.mu.Unlock()
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	evs := f.events[min(int(after), len(f.events)):]
	evs = evs[:min(limit, len(evs))]
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"events": evs, "last_seq": len(f.events)})
}

func (f *fakeSSE) records() []connRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]connRecord(nil), f.conns...)
}

// startFake serves f and returns a client of it with a tiny backoff.
func startFake(t *testing.T, f *fakeSSE, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	opts = append([]Option{WithHTTPClient(srv.Client()), WithBackoff(Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond})}, opts...)
	return New(srv.URL, opts...)
}

// readN reads n events and checks they are exactly seqs after+1..after+n.
func readN(t *testing.T, s *EventStream, after int64, n int, want []rein.Event) {
	t.Helper()
	for i := range n {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		seq := after + int64(i) + 1
		if ev.Seq != seq {
			t.Fatalf("event #%d has seq %d, want %d", i, ev.Seq, seq)
		}
		w := want[seq-1]
		if ev.ID != w.ID || ev.Type != w.Type || ev.RunID != w.RunID || string(ev.Payload) != string(w.Payload) || !ev.CreatedAt.Equal(w.CreatedAt) {
			t.Fatalf("event %d = %+v, want %+v", seq, ev, w)
		}
		if s.LastSeq() != seq {
			t.Fatalf("LastSeq = %d after seq %d", s.LastSeq(), seq)
		}
	}
}

func TestStreamResumesWithLastEventIDAfterDrops(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "ses_1", events: newFakeLog("ses_1", 20), plan: func(k int) connPlan {
		if k < 6 {
			return connPlan{max: 3}
		}
		return connPlan{max: -1}
	}}
	c := startFake(t, f)
	s := c.Stream(t.Context(), "ses_1", 0)
	readN(t, s, 0, 20, f.events)
	s.Close()
	if _, err := s.Next(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close = %v, want ErrClosed", err)
	}
	recs := f.records()
	if len(recs) != 7 {
		t.Fatalf("%d connections, want 7: %+v", len(recs), recs)
	}
	if recs[0].lastEventID != "" || recs[0].after != "0" {
		t.Errorf("first connection = %+v, want after=0 and no Last-Event-ID", recs[0])
	}
	for k := 1; k < len(recs); k++ {
		want := strconv.Itoa(3 * k)
		if recs[k].lastEventID != want || recs[k].after != want {
			t.Errorf("connection %d = %+v, want Last-Event-ID and after %s", k, recs[k], want)
		}
	}
}

func TestStreamStartsAfterCursor(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "ses_1", events: newFakeLog("ses_1", 10), plan: func(int) connPlan { return connPlan{max: -1} }}
	s := startFake(t, f).Stream(t.Context(), "ses_1", 6)
	defer s.Close()
	if s.LastSeq() != 6 {
		t.Fatalf("LastSeq before reading = %d, want 6", s.LastSeq())
	}
	readN(t, s, 6, 4, f.events)
	if r := f.records()[0]; r.after != "6" || r.lastEventID != "" {
		t.Fatalf("connection = %+v", r)
	}
}

func TestStreamDiscardsAFrameCutByTheDrop(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 6), plan: func(k int) connPlan {
		if k == 0 {
			return connPlan{max: 2, partial: true}
		}
		return connPlan{max: -1}
	}}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	readN(t, s, 0, 6, f.events)
	if r := f.records(); len(r) != 2 || r[1].lastEventID != "2" {
		t.Fatalf("connections = %+v, want a second one resuming after 2", r)
	}
}

func TestStreamDropsDuplicatesAcrossTheSeam(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 12), plan: func(k int) connPlan {
		if k < 3 {
			return connPlan{max: 4, rewind: 3}
		}
		return connPlan{max: -1, rewind: 3}
	}}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	readN(t, s, 0, 12, f.events)
}

func TestStreamFillsAHoleFromTheLog(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 8), plan: func(int) connPlan {
		return connPlan{max: -1, skip: map[int64]bool{3: true, 4: true, 7: true}}
	}}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	readN(t, s, 0, 8, f.events)
	f.mu.Lock()
	gets := f.gets
	f.mu.Unlock()
	if gets != 2 {
		t.Fatalf("%d GET /events to fill two holes, want 2", gets)
	}
	if n := len(f.records()); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestStreamTerminalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		code   rein.Code
		want   error
	}{
		{http.StatusNotFound, rein.CodeNotFound, rein.ErrNotFound},
		{http.StatusUnauthorized, rein.CodeUnauthenticated, rein.ErrUnauthenticated},
		{http.StatusBadRequest, rein.CodeInvalidArgument, rein.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			f := &fakeSSE{sid: "s", events: newFakeLog("s", 3), plan: func(int) connPlan { return connPlan{status: tc.status, code: tc.code} }}
			s := startFake(t, f).Stream(t.Context(), "s", 0)
			defer s.Close()
			_, err := s.Next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("Next = %v, want %v", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Status != tc.status {
				t.Fatalf("error %v is not a *client.Error with status %d", err, tc.status)
			}
			if _, err2 := s.Next(); err2 != err {
				t.Fatalf("second Next = %v, want the same error", err2)
			}
			if n := len(f.records()); n != 1 {
				t.Fatalf("%d connections after a terminal answer, want 1", n)
			}
		})
	}
}

func TestStreamRetriesServerErrors(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 3), plan: func(k int) connPlan {
		switch k {
		case 0:
			return connPlan{status: http.StatusServiceUnavailable, code: rein.CodeUnavailable}
		case 1:
			return connPlan{status: http.StatusBadGateway, plain: true}
		case 2:
			return connPlan{status: http.StatusTooManyRequests, plain: true}
		}
		return connPlan{max: -1}
	}}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	readN(t, s, 0, 3, f.events)
	if n := len(f.records()); n != 4 {
		t.Fatalf("%d connections, want 4", n)
	}
}

func TestStreamRejectsANonEventStream(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 3), plan: func(int) connPlan { return connPlan{max: -1, contentType: "text/html"} }}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	if _, err := s.Next(); err == nil {
		t.Fatal("Next succeeded on a text/html answer")
	}
	if n := len(f.records()); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestStreamReconnectsASilentConnection(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 3), plan: func(k int) connPlan {
		if k == 0 {
			return connPlan{silent: true}
		}
		return connPlan{max: -1, prefix: ": hello\n\n"}
	}}
	s := startFake(t, f, WithIdleTimeout(20*time.Millisecond)).Stream(t.Context(), "s", 0)
	defer s.Close()
	readN(t, s, 0, 3, f.events)
	if n := len(f.records()); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 2), plan: func(int) connPlan { return connPlan{max: -1} }, connected: make(chan int, 1)}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	readN(t, s, 0, 2, f.events)
	done := make(chan error, 1)
	go func() {
		_, err := s.Next()
		done <- err
	}()
	<-f.connected
	s.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next = %v, want ErrClosed", err)
	}
	s.Close() // idempotent
}

func TestStreamContextCancelEndsBackoff(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 1), plan: func(int) connPlan {
		return connPlan{status: http.StatusServiceUnavailable, code: rein.CodeUnavailable}
	}, connected: make(chan int, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := startFake(t, f, WithBackoff(Backoff{Initial: time.Hour, Max: time.Hour}))
	s := c.Stream(ctx, "s", 0)
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := s.Next()
		done <- err
	}()
	<-f.connected // the first attempt failed; Next now waits an hour
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want context.Canceled", err)
	}
}

func TestStreamAllIterates(t *testing.T) {
	t.Parallel()
	f := &fakeSSE{sid: "s", events: newFakeLog("s", 5), plan: func(k int) connPlan {
		if k == 0 {
			return connPlan{max: 2}
		}
		return connPlan{max: -1}
	}}
	s := startFake(t, f).Stream(t.Context(), "s", 0)
	defer s.Close()
	var seqs []int64
	for ev, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Seq == 5 {
			break
		}
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("seqs = %v", seqs)
	}
	s.Close()
	var last error
	for _, err := range s.All() {
		last = err
	}
	if !errors.Is(last, ErrClosed) {
		t.Fatalf("All after Close ended with %v", last)
	}
}

func TestStreamBackoffIsBoundedAndJittered(t *testing.T) {
	t.Parallel()
	c := New("http://x", WithBackoff(Backoff{Initial: 100 * time.Millisecond, Max: time.Second}))
	s := c.Stream(t.Context(), "s", 0)
	defer s.Close()
	if d := s.delay(); d != 0 {
		t.Fatalf("first connection waits %v", d)
	}
	s.reconnect = true
	if d := s.delay(); d != 0 {
		t.Fatalf("reconnection after progress waits %v", d)
	}
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, cp := range caps {
		s.failures = i + 1
		ceil := cp * time.Millisecond
		for range 50 {
			if d := s.delay(); d < ceil/2 || d > ceil {
				t.Fatalf("failure %d: delay %v outside [%v, %v]", i+1, d, ceil/2, ceil)
			}
		}
	}
	s.failures = 1000 // no overflow
	if d := s.delay(); d > time.Second {
		t.Fatalf("delay %v after 1000 failures", d)
	}
	s.retryHint = 3 * time.Second
	s.failures = 1
	if d := s.delay(); d < 1500*time.Millisecond || d > 3*time.Second {
		t.Fatalf("delay %v ignores the server's retry of 3s", d)
	}
}
