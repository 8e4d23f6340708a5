package sessions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/tool"
)

// slowLoad blocks the next GetSession once armed, until released.
type slowLoad struct {
	store.Store
	oneShot
}

func (s *slowLoad) GetSession(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	s.pass()
	return s.Store.GetSession(ctx, key)
}

func TestRegressionInterruptBeforeLoad(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"when_busy", "user.interrupt"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			st := &slowLoad{Store: memory.New(), oneShot: newOneShot()}
			f := newFixture(t, st)
			f.newSession()
			st.arm()
			a := f.send("block A", "")
			<-st.entered // A is RUNNING and its execute is loading the session
			if how == "when_busy" {
				f.send("B", "interrupt")
			} else {
				go func() { <-st.entered }()
				res, err := f.svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{RunID: &a.RunID, Mode: rein.StopInterrupt})
				if err != nil || !res.Accepted {
					t.Fatal(res, err)
				}
			}
			close(st.release)
			p := f.completed(a.RunID)
			t.Logf("A ended %+v", p)
			if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
				t.Errorf("interrupted RUNNING run ended %s/%s %q, want COMPLETED/interrupted", p.Status, p.Reason, p.Error)
			}
			f.stop(nil, "")
		})
	}
}

// stubborn is a "hold" tool that, once its context ends, returns only when
// unstuck: the run stays RUNNING in the store with its handle stopped.
type stubborn struct {
	once    sync.Once
	entered chan struct{}
	unstick chan struct{}
}

func (s *stubborn) Spec() tool.Spec {
	return tool.Spec{Name: "hold", Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (s *stubborn) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	<-s.unstick
	return tool.Result{}, ctx.Err()
}

func TestRegressionRollbackOverwritten(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cancel", "interrupt"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			st := memory.New()
			tl := &stubborn{entered: make(chan struct{}), unstick: make(chan struct{})}
			svc, err := reintest.ServiceWithTools("testdata/property.yaml", st, nil, tl)
			if err != nil {
				t.Fatal(err)
			}
			svc.Start(context.Background())
			defer svc.Close()
			f := &fixture{t: t, st: st, svc: svc}
			f.newSession()
			a := f.send("hold A", "")
			<-tl.entered
			m := f.send("hold M", "rollback")
			res, err := svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{RunID: &a.RunID, Mode: rein.StopMode(mode)})
			t.Logf("stop after rollback: %+v %v", res, err)
			close(tl.unstick)
			p := f.completed(a.RunID)
			t.Logf("A ended %+v", p)
			if !p.RolledBack {
				t.Errorf("A was stopped by when_busy=rollback but ended %s/%s rolled_back=false", p.Status, p.Reason)
			}
			f.stop(&m.RunID, "")
			f.completed(m.RunID)
		})
	}
}

// A when_busy=interrupt message admitted while a rolled-back run is still
// RUNNING in the store replaces its durable "rollback" stop.
func TestRegressionRollbackOverwrittenByMessage(t *testing.T) {
	t.Parallel()
	st := memory.New()
	tl := &stubborn{entered: make(chan struct{}), unstick: make(chan struct{})}
	svc, err := reintest.ServiceWithTools("testdata/property.yaml", st, nil, tl)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(context.Background())
	defer svc.Close()
	f := &fixture{t: t, st: st, svc: svc}
	f.newSession()
	a := f.send("hold A", "")
	<-tl.entered
	f.send("hold M1", "rollback")
	m2 := f.send("hold M2", "interrupt")
	close(tl.unstick)
	p := f.completed(a.RunID)
	t.Logf("A ended %+v", p)
	if !p.RolledBack {
		t.Errorf("A was stopped by when_busy=rollback but ended %s/%s rolled_back=false", p.Status, p.Reason)
	}
	f.stop(&m2.RunID, "")
	f.completed(m2.RunID)
	f.stop(nil, "")
}

// oneShot holds the first caller to pass after it was armed until
// release is closed (or 10 s pass); entered is closed when it does.
type oneShot struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func newOneShot() oneShot {
	return oneShot{entered: make(chan struct{}), release: make(chan struct{})}
}

func (o *oneShot) arm() {
	o.mu.Lock()
	o.armed = true
	o.mu.Unlock()
}

// pass blocks if the shot is armed, disarming it.
func (o *oneShot) pass() {
	o.mu.Lock()
	block := o.armed
	o.armed = false
	o.mu.Unlock()
	if block {
		close(o.entered)
		select {
		case <-o.release:
		case <-time.After(10 * time.Second):
		}
	}
}

// calledFrom reports whether fn (a function name's suffix, e.g.
// "(*lifecycle).end") is on the caller's stack.
func calledFrom(fn string) bool {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// holdEnd blocks, once armed, the next run end (lifecycle.end's Update,
// before it takes the store's lock), until released.
type holdEnd struct {
	store.Store
	oneShot
}

func newHoldEnd() *holdEnd { return &holdEnd{Store: memory.New(), oneShot: newOneShot()} }

func (h *holdEnd) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	if calledFrom("(*lifecycle).end") {
		h.pass()
	}
	return h.Store.Update(ctx, key, fence, fn)
}

// A rollback admitted after the current run committed its final reply (its
// end not yet written): the run ends COMPLETED/stop with rolled_back=true.
func TestRegressionRollbackOfCommittedRun(t *testing.T) {
	t.Parallel()
	hs := newHoldEnd()
	hold := &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}}
	svc, err := reintest.ServiceWithTools("testdata/property.yaml", hs, nil, hold)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(context.Background())
	defer svc.Close()
	f := &fixture{t: t, st: hs, svc: svc}
	f.newSession()
	a := f.send("hold A", "")
	f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == a.RunID })
	hs.arm() // block A's end write
	hold.release(a.RunID)
	select { // A's loop has returned: its reply is committed, its end not written
	case <-hs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("A's end never came")
	}
	m := f.send("hold M", "rollback")
	close(hs.release)
	p := f.completed(a.RunID)
	t.Logf("A ended %+v", p)
	if p.RolledBack && p.Status != rein.StatusCancelled {
		t.Errorf("A ended %s/%s with rolled_back=true (and its reply in the log)", p.Status, p.Reason)
	}
	hold.release(m.RunID)
	f.completed(m.RunID)
}

// holdClaim, once armed, holds the pump after its claim of a queued run has
// committed (RUNNING + session.run_started) and before the run's handle is
// started.
type holdClaim struct {
	store.Store
	oneShot
}

func (h *holdClaim) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	isClaim := calledFrom("(*lifecycle).claimNext")
	started := false
	err := h.Store.Update(ctx, key, fence, func(tx store.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if isClaim {
			runs, _ := tx.Runs(rein.StatusRunning)
			started = len(runs) == 1
		}
		return nil
	})
	if err == nil && started {
		h.pass()
	}
	return err
}

// An interrupt of a run that is RUNNING in the store and the log, caught
// before its handle started, ends it CANCELLED/cancelled.
func TestRegressionInterruptJustClaimed(t *testing.T) {
	t.Parallel()
	hc := &holdClaim{Store: memory.New(), oneShot: newOneShot()}
	hold := &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}}
	svc, err := reintest.ServiceWithTools("testdata/property.yaml", hc, nil, hold)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(context.Background())
	defer svc.Close()
	defer hold.releaseAll()
	f := &fixture{t: t, st: hc, svc: svc}
	f.newSession()
	a := f.send("hold A", "")
	f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == a.RunID })
	b := f.send("hold B", "enqueue")
	hc.arm()
	hold.release(a.RunID)
	select {
	case <-hc.entered: // B is RUNNING in the store, its run_started logged
	case <-time.After(10 * time.Second):
		t.Fatal("B was never claimed")
	}
	rec, _ := hc.GetRun(context.Background(), f.key, b.RunID)
	res, err := svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{RunID: &b.RunID, Mode: rein.StopInterrupt})
	t.Logf("B stored %s; interrupt → %+v %v", rec.Status, res, err)
	close(hc.release)
	f.waitEvent(func(e rein.Event) bool {
		return (e.Type == rein.EventRunCompleted || e.Type == rein.EventToolUse) && e.RunID == b.RunID
	})
	p := f.completed(b.RunID)
	t.Logf("B ended %+v", p)
	// The stop reached B's handle before it could start: it never runs
	// (no tool call), and ends once — interrupted, as an interrupt of a run
	// the log shows RUNNING.
	if !res.Accepted || p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Errorf("interrupt of just-claimed B: accepted=%v, ended %s/%s, want COMPLETED/interrupted", res.Accepted, p.Status, p.Reason)
	}
	if n := countType(f.runEvents(b.RunID), rein.EventToolUse); n != 0 {
		t.Errorf("the stopped run ran anyway (%d tool calls)", n)
	}
	if n := countType(f.runEvents(b.RunID), rein.EventRunCompleted); n != 1 {
		t.Errorf("%d session.run_completed", n)
	}
}

// A second stop of a run whose first stop took effect, while its end is not
// yet written (its record still says RUNNING), is not accepted, in either
// mode, and is logged as such.
func TestRegressionRepeatedStopWhileEnding(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"cancel", "interrupt"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			hs := newHoldEnd()
			hold := &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}}
			svc, err := reintest.ServiceWithTools("testdata/property.yaml", hs, nil, hold)
			if err != nil {
				t.Fatal(err)
			}
			svc.Start(context.Background())
			defer svc.Close()
			f := &fixture{t: t, st: hs, svc: svc}
			f.newSession()
			a := f.send("hold A", "")
			f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == a.RunID })
			hs.arm() // hold A's end write
			if r := f.stop(&a.RunID, "cancel"); !r.Accepted {
				t.Fatalf("first stop: %+v", r)
			}
			select {
			case <-hs.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("A's end never came")
			}
			if r := f.stop(&a.RunID, second); r.Accepted {
				t.Errorf("a second %s while A ends was accepted: %+v", second, r)
			}
			close(hs.release)
			if p := f.completed(a.RunID); p.Status != rein.StatusCancelled {
				t.Errorf("A ended %+v", p)
			}
			var logged []bool
			for _, e := range f.all() {
				if e.Type == rein.EventUserInterrupt && e.RunID == a.RunID {
					var p rein.UserInterruptPayload
					if err := json.Unmarshal(e.Payload, &p); err != nil {
						t.Fatal(err)
					}
					logged = append(logged, p.Accepted)
				}
			}
			if len(logged) != 2 || !logged[0] || logged[1] {
				t.Errorf("user.interrupt accepted flags logged %v, want [true false]", logged)
			}
		})
	}
}

// renewLost answers every RenewLease with ErrLeaseLost once armed, as the
// store does for a lease that the run's own end write just released.
type renewLost struct {
	*holdEnd
	lost    atomic.Bool
	renewed chan struct{}
	once    sync.Once
}

func (r *renewLost) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if r.lost.Load() {
		r.once.Do(func() { close(r.renewed) })
		return nil, rein.ErrLeaseLost
	}
	return r.holdEnd.RenewLease(ctx, l, ttl)
}

// A renewal that finds the lease gone while the run is writing its end (the
// end releases the lease in the same write) does not fence the run: the end
// is written, and nothing says the lease was lost.
func TestRegressionRenewalDuringEndIsNotLeaseLoss(t *testing.T) {
	t.Parallel()
	hs := newHoldEnd()
	st := &renewLost{holdEnd: hs, renewed: make(chan struct{})}
	hold := &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}}
	var logs regressLog
	svc, err := reintest.ServiceWithTools("testdata/property.yaml", st, func(c *sessions.Config) {
		// Renewals come every second (TTL/3), and none lapses however
		// loaded the machine: a real lapse would be a lease loss.
		c.LeaseTTL = 3 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, hold)
	if err != nil {
		t.Fatal(err)
	}
	svc.Start(context.Background())
	defer svc.Close()
	f := &fixture{t: t, st: st, svc: svc}
	f.newSession()
	a := f.send("hold A", "")
	f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == a.RunID })
	hs.arm()
	hold.release(a.RunID)
	select {
	case <-hs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("A's end never came")
	}
	st.lost.Store(true)
	select {
	case <-st.renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal while the end was held")
	}
	st.lost.Store(false)
	close(hs.release)
	if p := f.completed(a.RunID); p.Status != rein.StatusCompleted {
		t.Errorf("A ended %+v", p)
	}
	if strings.Contains(logs.String(), "lease lost") {
		t.Errorf("the run's own end was logged as a lost lease:\n%s", logs.String())
	}
}

// regressLog is a bytes.Buffer safe for a logger and a reader.
type regressLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *regressLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *regressLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// answerDuringCheck answers a confirmation (through answer) while the run
// checks for the second time whether it is answered — the loop's last
// look before it parks — once armed, and returns what the check read
// before the answer.
type answerDuringCheck struct {
	store.Store
	mu     sync.Mutex
	armed  bool
	checks int
	answer func(toolUseID string)
}

func (s *answerDuringCheck) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	c, err := s.Store.GetConfirmation(ctx, key, toolUseID)
	s.mu.Lock()
	fire := false
	if s.armed && err == nil && c.State == store.ConfirmationPending && calledFrom("(*pendingConfirmation).Answered") {
		s.checks++
		fire = s.checks == 2
	}
	if fire {
		s.armed = false
	}
	s.mu.Unlock()
	if fire {
		done := make(chan struct{})
		go func() { defer close(done); s.answer(toolUseID) }()
		<-done
	}
	return c, err
}

// An answer that reached the run's in-process waiter just as the run
// parked (its last look said "no answer yet") resumes the run, which runs
// the allowed call: the waiter's memory of the answer does not make the
// resumed run's confirmation a conflict. Seen: the resumed run failed
// "open confirmation: conflict: tool call … was already confirmed or
// closed".
func TestRegressionAnswerAsRunParks(t *testing.T) {
	t.Parallel()
	st := &answerDuringCheck{Store: memory.New()}
	f := newFixture(t, st)
	f.newSession()
	st.answer = func(id string) {
		if _, err := f.svc.ConfirmTool(context.Background(), f.key, sessions.ConfirmRequest{ToolUseID: id, Allow: true}); err != nil {
			t.Errorf("confirm: %v", err)
		}
	}
	st.mu.Lock()
	st.armed = true
	st.mu.Unlock()
	a := f.send("note first", "")
	p := f.completed(a.RunID)
	if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("run ended %s/%s %q, want COMPLETED/stop", p.Status, p.Reason, p.Error)
	}
	st.mu.Lock()
	fired := !st.armed
	st.mu.Unlock()
	if !fired {
		t.Fatal("the answer was never given during the check: the test did not test the race")
	}
	for _, e := range f.all() {
		if e.Type == rein.EventToolResult && e.RunID == a.RunID {
			var r rein.ToolResultPayload
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				t.Fatal(err)
			}
			if r.IsError {
				t.Errorf("the allowed call's result is an error: %q", r.Output)
			}
		}
	}
}

// holdClaimEntry, once armed, holds the pump's next claimNext write before
// its function runs, until released; that write then runs whatever became
// of the service's context meanwhile (as a write already in a store's
// queue does).
type holdClaimEntry struct {
	store.Store
	oneShot
}

func (h *holdClaimEntry) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	if calledFrom("(*lifecycle).claimNext") {
		h.mu.Lock()
		armed := h.armed
		h.mu.Unlock()
		h.pass()
		if armed {
			ctx = context.WithoutCancel(ctx)
		}
	}
	return h.Store.Update(ctx, key, fence, fn)
}

// A queued run stays queued through Close even when the session's schedule
// was about to look at the turn as the shutdown freed it: the write that
// would have claimed it runs after the stopped run's end and takes nothing
// up. Seen: the queued run was claimed and at once cancelled by the
// closing service (TestWaitEndsWithTheService, under load); Drain lost
// queued runs the same way (TestDrainKeepsQueuedRuns).
func TestRegressionCloseKeepsQueuedRunQueued(t *testing.T) {
	t.Parallel()
	base := memory.New()
	hc := &holdClaimEntry{Store: base, oneShot: newOneShot()}
	f := newFixture(t, hc)
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	hc.arm()
	c := f.send("C", "enqueue") // its admission kicks the schedule
	<-hc.entered                // the schedule's write waits to run
	closed := make(chan struct{})
	go func() { defer close(closed); f.svc.Close() }()
	// A's end, written by Close, frees the turn; only then does the
	// schedule's write run.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := base.GetRun(context.Background(), f.key, a.RunID)
		if err == nil && rec.Status.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's end was never written")
		}
		time.Sleep(time.Millisecond)
	}
	close(hc.release)
	<-closed
	for _, id := range []string{b.RunID, c.RunID} {
		rec, err := base.GetRun(context.Background(), f.key, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != rein.StatusQueued {
			t.Errorf("queued run %s is %s/%s after Close, want QUEUED", id, rec.Status, rec.Reason)
		}
	}
}
