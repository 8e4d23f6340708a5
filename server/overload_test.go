package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// gatedStore holds every transaction and append while its gate is closed:
// a store that stopped keeping up. It tells how many callers wait.
type gatedStore struct {
	store.Store
	mu      sync.Mutex
	open    chan struct{} // closed: writes pass
	waiting chan struct{} // one send per caller that starts waiting
}

func newGatedStore() *gatedStore {
	g := &gatedStore{Store: memory.New(), open: make(chan struct{}), waiting: make(chan struct{}, 1024)}
	close(g.open)
	return g
}

func (g *gatedStore) closeGate() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) openGate() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

func (g *gatedStore) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	default:
	}
	g.waiting <- struct{}{}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStore) Update(ctx context.Context, key rein.SessionKey, f store.Fence, fn func(tx store.Tx) error) error {
	if err := g.wait(ctx); err != nil {
		return err
	}
	return g.Store.Update(ctx, key, f, fn)
}

func (g *gatedStore) AppendEvents(ctx context.Context, key rein.SessionKey, f store.Fence, evs []rein.Event) ([]rein.Event, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.Store.AppendEvents(ctx, key, f, evs)
}

// TestOverloadAnswers503Quickly: with the store stuck and MaxRunsInFlight
// runs being admitted, one more user.message is answered 503 unavailable
// with Retry-After at once (not after the request's 30 s), writing nothing;
// once the store moves again every admitted run has its whole life in the
// log, and no run exists without its events.
func TestOverloadAnswers503Quickly(t *testing.T) {
	t.Parallel()
	const limit = 3
	gs := newGatedStore()
	ts := reintest.NewServer(t, reintest.ServerOptions{
		Script: "testdata/script.yaml", Store: gs,
		Configure: func(c *sessions.Config) { c.MaxRunsInFlight = limit },
	})
	s := &stack{t: t, st: ts.Store, svc: ts.Service, srv: ts.Handler, url: ts.URL}
	sids := make([]string, limit+2)
	for i := range sids {
		sids[i] = s.createSession("")
	}

	gs.closeGate()
	answers := make(chan reply, limit)
	for i := range limit {
		go func() {
			answers <- s.post("", sids[i], ev("user.message", map[string]any{"text": fmt.Sprintf("hello %d", i)}))
		}()
	}
	// The admissions hold every slot: each waits in the store.
	for range limit {
		select {
		case <-gs.waiting:
		case <-time.After(testTimeout):
			t.Fatal("the admissions did not reach the store")
		}
	}

	for _, sid := range sids[limit:] {
		t0 := time.Now()
		r := s.post("", sid, ev("user.message", map[string]any{"text": "one too many"}))
		took := time.Since(t0)
		if r.status != http.StatusServiceUnavailable || r.errorCode(t) != "unavailable" {
			t.Fatalf("message beyond the bound: status %d, body %s; want 503 unavailable", r.status, r.body)
		}
		if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || secs < 1 {
			t.Errorf("Retry-After = %q, want whole seconds ≥ 1", r.header.Get("Retry-After"))
		}
		// The store holds every admission until the test's timeout, so a
		// refusal that waited for a slot would take that long: a second
		// tells the two apart even on a loaded CI machine under -race.
		if took > time.Second {
			t.Errorf("the refusal took %s, want < 1 s", took)
		}
		msg := r.json(t)["error"].(map[string]any)["message"].(string)
		if want := "the server is overloaded"; len(msg) < len(want) || msg[:len(want)] != want {
			t.Errorf("message %q does not say the server is overloaded", msg)
		}
	}

	gs.openGate()
	for range limit {
		if r := <-answers; r.status != http.StatusOK {
			t.Fatalf("admitted message: status %d %s", r.status, r.body)
		}
	}
	for i, sid := range sids {
		runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "", nil)["runs"].([]any)
		if i >= limit {
			if len(runs) != 0 {
				t.Errorf("refused session %s has runs: %v", sid, runs)
			}
			if evs := s.events("", sid); len(evs) != 0 {
				t.Errorf("refused session %s has events: %v", sid, evs)
			}
			continue
		}
		if len(runs) != 1 {
			t.Fatalf("session %s: %d runs, want 1", sid, len(runs))
		}
		runID := runs[0].(map[string]any)["run_id"].(string)
		waitCompleted(t, s, sid, runID)
		assertWholeRun(t, s.events("", sid), runID)
	}
}

// waitCompleted polls the run until it is terminal (bounded by testTimeout).
func waitCompleted(t *testing.T, s *stack, sid, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	key := rein.SessionKey{Owner: "local", ID: sid}
	if _, err := s.svc.WaitRun(ctx, key, runID); err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
}

// assertWholeRun checks that runID's events are all in the log, in order:
// user.message, session.run_started, …, session.run_completed last.
func assertWholeRun(t *testing.T, evs []rein.Event, runID string) {
	t.Helper()
	var types []rein.EventType
	for _, e := range evs {
		if e.RunID == runID {
			types = append(types, e.Type)
		}
	}
	if len(types) < 3 || types[0] != rein.EventUserMessage || types[1] != rein.EventRunStarted || types[len(types)-1] != rein.EventRunCompleted {
		t.Errorf("run %s events %v: want user.message, session.run_started, …, session.run_completed", runID, types)
	}
}

// failingAdmission fails the first transaction (the admission of a
// user.message) with the given error and passes everything else.
type failingAdmission struct {
	store.Store
	mu   sync.Mutex
	fail error
}

func (f *failingAdmission) Update(ctx context.Context, key rein.SessionKey, fe store.Fence, fn func(tx store.Tx) error) error {
	f.mu.Lock()
	err := f.fail
	f.fail = nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Store.Update(ctx, key, fe, fn)
}

// TestFailedAdmissionLeavesNoRun: when the admission write fails, there is
// no run record at all (never a FAILED run without its user.message), and
// the client is told truthfully — 503 when the store was unavailable or
// too slow, 500 when it failed otherwise.
func TestFailedAdmissionLeavesNoRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		err    error
		status int
	}{
		{"unavailable", rein.Errorf(rein.CodeUnavailable, "test: the store is down"), 503},
		{"deadline", fmt.Errorf("test: waiting for the writer: %w", context.DeadlineExceeded), 503},
		{"internal", errors.New("test: the store failed"), 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := &failingAdmission{Store: memory.New()}
			s := newStack(t, options{store: fs})
			sid := s.createSession("")
			fs.mu.Lock()
			fs.fail = tc.err
			fs.mu.Unlock()
			r := s.post("", sid, ev("user.message", map[string]any{"text": "hello"}))
			if r.status != tc.status {
				t.Fatalf("status %d, body %s; want %d", r.status, r.body, tc.status)
			}
			if tc.status == 503 && r.header.Get("Retry-After") == "" {
				t.Error("a 503 without Retry-After")
			}
			if runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "", nil)["runs"].([]any); len(runs) != 0 {
				t.Errorf("runs after a failed admission: %v", runs)
			}
			if evs := s.events("", sid); len(evs) != 0 {
				t.Errorf("events after a failed admission: %v", evs)
			}
			// The session works once the store does.
			runID := s.send("", sid, "hello again", nil)["run_id"].(string)
			waitCompleted(t, s, sid, runID)
			assertWholeRun(t, s.events("", sid), runID)
		})
	}
}

// fdExhausted is a listener whose Accept fails with EMFILE, as it does when
// the process is out of descriptors, while fails > 0 (the connection it
// took is dropped).
type fdExhausted struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *fdExhausted) setFails(n int) {
	l.mu.Lock()
	l.fails = n
	l.mu.Unlock()
}

func (l *fdExhausted) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	l.mu.Lock()
	fail := l.fails > 0
	if fail {
		l.fails--
	}
	l.mu.Unlock()
	if fail {
		c.Close()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return c, nil
}

// TestAcceptOutOfDescriptors: accept failing with EMFILE is logged as
// "too many open files" with the fix, the connections already open are
// still served, and new ones are once descriptors are back.
func TestAcceptOutOfDescriptors(t *testing.T) {
	t.Parallel()
	logs, logger := newLog()
	o := options{store: memory.New(), logger: logger}
	svc, metrics, err := assemble(o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Service: svc, Logger: logger, Metrics: metrics, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &fdExhausted{Listener: inner}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		<-done
		o.store.Close()
	})
	url := "http://" + inner.Addr().String() + "/healthz"
	keep := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}, Timeout: testTimeout}
	get := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET /healthz: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	waitReady(t, keep, url)

	ln.setFails(1 << 30)
	// New connections are refused the way an exhausted process refuses
	// them (twice: the second failure is not logged again).
	for range 2 {
		raw, err := net.DialTimeout("tcp", inner.Addr().String(), testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		raw.SetReadDeadline(time.Now().Add(testTimeout))
		if _, err := raw.Read(make([]byte, 1)); err == nil {
			t.Fatal("the connection taken while out of descriptors was served")
		}
		raw.Close()
	}
	// The open connection is still served.
	if st := get(keep); st != 200 {
		t.Fatalf("the open connection: status %d", st)
	}
	deadline := time.Now().Add(testTimeout)
	for !strings.Contains(logs.String(), "too many open files: raise the limit (ulimit -n)") {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not name descriptor exhaustion:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling the log of the server's own accept loop
	}
	ln.setFails(0)
	// The accept loop backed off and accepts again.
	fresh := &http.Client{Transport: &http.Transport{}, Timeout: testTimeout}
	if st := get(fresh); st != 200 {
		t.Fatalf("a new connection after descriptors are back: status %d", st)
	}
	if n := strings.Count(logs.String(), "raise the limit (ulimit -n)"); n != 1 {
		t.Errorf("descriptor exhaustion logged %d times, want once (rate-limited)", n)
	}
}

// waitReady waits until the server answers on url.
func waitReady(t *testing.T, c *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			// Read to the end, so the connection is kept for reuse.
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not up: %v", err)
		}
		time.Sleep(5 * time.Millisecond) // waiting for Serve's goroutine to start the service
	}
}
