package run_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/run"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sess = rein.SessionKey{Owner: "alice", ID: "s1"}

// gate is a Func that announces entry and then blocks until released or
// stopped. On an interrupt it returns an interrupted outcome, as an agent
// would.
type gate struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) fn(ctx context.Context, c *run.Control) run.Outcome {
	g.calls.Add(1)
	close(g.entered)
	select {
	case <-g.release:
		return run.Outcome{Reason: rein.ReasonStop, Reply: "done"}
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), rein.ErrInterrupted) && c.RunContext().Err() == nil {
			return run.Outcome{Reason: rein.ReasonInterrupted, Reply: "stopped"}
		}
		return run.Outcome{Reason: rein.ReasonError, Err: ctx.Err()}
	}
}

func prepare(t *testing.T, e *run.Engine, id string, fn run.Func, mod ...func(*run.Options)) *run.Run {
	t.Helper()
	o := run.Options{ID: id, Session: sess}
	for _, m := range mod {
		m(&o)
	}
	r, err := e.Prepare(fn, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(t *testing.T, r *run.Run, want rein.RunStatus) {
	t.Helper()
	st, err := r.Start()
	if err != nil {
		t.Fatalf("start %s: %v", r.ID(), err)
	}
	if st != want {
		t.Fatalf("start %s: status %s, want %s", r.ID(), st, want)
	}
}

func wait(t *testing.T, r *run.Run) run.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := r.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && res.Status == "" {
		t.Fatalf("run %s did not end (status %s)", r.ID(), r.Status())
	}
	return res
}

func entered(t *testing.T, g *gate) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("run never entered its body")
	}
}

func TestCancelBeforeStart(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := newGate()
	r := prepare(t, e, "r1", g.fn)
	if r.Status() != rein.StatusCreated {
		t.Fatalf("status %s", r.Status())
	}
	if !r.Cancel() {
		t.Fatal("first cancel returned false")
	}
	if r.Cancel() {
		t.Fatal("second cancel returned true")
	}
	if r.Interrupt("x") {
		t.Fatal("interrupt after cancel returned true")
	}
	if _, err := r.Start(); !errors.Is(err, rein.ErrCancelled) {
		t.Fatalf("start after cancel: %v", err)
	}
	res := wait(t, r)
	if res.Status != rein.StatusCancelled || res.Reason != rein.ReasonCancelled || !errors.Is(res.Err, rein.ErrCancelled) {
		t.Fatalf("result %+v", res)
	}
	if g.calls.Load() != 0 {
		t.Fatal("cancelled run executed")
	}
}

func TestDoubleStart(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := newGate()
	r := prepare(t, e, "r1", g.fn)
	start(t, r, rein.StatusRunning)
	entered(t, g)
	if _, err := r.Start(); !errors.Is(err, rein.ErrAlreadyStarted) {
		t.Fatalf("second start: %v", err)
	}
	close(g.release)
	res := wait(t, r)
	if res.Status != rein.StatusCompleted || res.Reply != "done" {
		t.Fatalf("result %+v", res)
	}
	if _, err := r.Start(); !errors.Is(err, rein.ErrAlreadyStarted) {
		t.Fatalf("start after end: %v", err)
	}
	if n := g.calls.Load(); n != 1 {
		t.Fatalf("executed %d times", n)
	}
}

func TestInterruptBeforeStartIsCancel(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	// CREATED
	g := newGate()
	r := prepare(t, e, "r1", g.fn)
	if !r.Interrupt("never mind") {
		t.Fatal("interrupt on CREATED returned false")
	}
	if res := wait(t, r); res.Status != rein.StatusCancelled || res.Reason != rein.ReasonCancelled {
		t.Fatalf("CREATED interrupt result %+v", res)
	}
	if r.InterruptMessage() != "never mind" {
		t.Fatalf("message %q", r.InterruptMessage())
	}
	// QUEUED
	a := newGate()
	ra := prepare(t, e, "a", a.fn)
	start(t, ra, rein.StatusRunning)
	b := newGate()
	rb := prepare(t, e, "b", b.fn)
	start(t, rb, rein.StatusQueued)
	if !rb.Interrupt("") {
		t.Fatal("interrupt on QUEUED returned false")
	}
	if res := wait(t, rb); res.Status != rein.StatusCancelled {
		t.Fatalf("QUEUED interrupt result %+v", res)
	}
	close(a.release)
	wait(t, ra)
	if g.calls.Load()+b.calls.Load() != 0 {
		t.Fatal("a cancelled run executed")
	}
}

func TestCancelQueuedMiddle(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	a, b, c := newGate(), newGate(), newGate()
	ra, rb, rc := prepare(t, e, "a", a.fn), prepare(t, e, "b", b.fn), prepare(t, e, "c", c.fn)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	start(t, rb, rein.StatusQueued)
	start(t, rc, rein.StatusQueued)
	if p := e.Position(rc); p != 2 {
		t.Fatalf("c position %d", p)
	}

	if !rb.Cancel() {
		t.Fatal("cancel B returned false")
	}
	res := wait(t, rb)
	if res.Status != rein.StatusCancelled {
		t.Fatalf("B %+v", res)
	}
	if ra.Status() != rein.StatusRunning || rc.Status() != rein.StatusQueued {
		t.Fatalf("A %s C %s", ra.Status(), rc.Status())
	}
	if p := e.Position(rc); p != 1 {
		t.Fatalf("c position after cancel %d", p)
	}
	select {
	case <-c.entered:
		t.Fatal("C admitted while A runs")
	default:
	}

	close(a.release)
	if res := wait(t, ra); res.Status != rein.StatusCompleted {
		t.Fatalf("A %+v", res)
	}
	entered(t, c)
	close(c.release)
	if res := wait(t, rc); res.Status != rein.StatusCompleted {
		t.Fatalf("C %+v", res)
	}
	if b.calls.Load() != 0 {
		t.Fatal("B executed")
	}
	if ra.Cancel() {
		t.Fatal("cancel of a terminal run returned true")
	}
}

func TestCancelRunningAdmitsNextStaleHandleInert(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	a, b := newGate(), newGate()
	ra, rb := prepare(t, e, "a", a.fn), prepare(t, e, "b", b.fn)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	start(t, rb, rein.StatusQueued)

	if !ra.Cancel() {
		t.Fatal("cancel A returned false")
	}
	if ra.Cancel() {
		t.Fatal("second cancel A returned true")
	}
	if res := wait(t, ra); res.Status != rein.StatusCancelled || !errors.Is(res.Err, rein.ErrCancelled) {
		t.Fatalf("A %+v", res)
	}
	entered(t, b)
	if rb.Status() != rein.StatusRunning {
		t.Fatalf("B %s", rb.Status())
	}
	if ra.Interrupt("stale") || ra.Cancel() {
		t.Fatal("stale handle took effect")
	}
	close(b.release)
	if res := wait(t, rb); res.Status != rein.StatusCompleted || res.Reason != rein.ReasonStop {
		t.Fatalf("B %+v", res)
	}
}

func TestInterruptBelongsToOneRun(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	a, b := newGate(), newGate()
	ra, rb := prepare(t, e, "a", a.fn), prepare(t, e, "b", b.fn)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	start(t, rb, rein.StatusQueued)
	if !ra.Interrupt("stop please") {
		t.Fatal("interrupt A returned false")
	}
	if ra.Interrupt("again") {
		t.Fatal("second interrupt took effect")
	}
	res := wait(t, ra)
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonInterrupted || res.Err != nil {
		t.Fatalf("A %+v", res)
	}
	if ra.InterruptMessage() != "stop please" {
		t.Fatalf("message %q", ra.InterruptMessage())
	}
	entered(t, b)
	close(b.release)
	if res := wait(t, rb); res.Reason != rein.ReasonStop {
		t.Fatalf("B inherited the interrupt: %+v", res)
	}
	if rb.Interrupted() {
		t.Fatal("B marked interrupted")
	}
}

func TestCancelDuringInterruptPathWins(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	inPath := make(chan struct{})
	r := prepare(t, e, "a", func(ctx context.Context, c *run.Control) run.Outcome {
		<-ctx.Done() // interrupted
		close(inPath)
		<-c.RunContext().Done() // the interrupt path is slow; a cancel escalates
		if c.Commit() {
			t.Error("commit after cancel succeeded")
		}
		return run.Outcome{Reason: rein.ReasonInterrupted}
	})
	start(t, r, rein.StatusRunning)
	if !r.Interrupt("") {
		t.Fatal("interrupt")
	}
	<-inPath
	if !r.Cancel() {
		t.Fatal("cancel after interrupt must escalate")
	}
	if res := wait(t, r); res.Status != rein.StatusCancelled {
		t.Fatalf("%+v", res)
	}
}

func TestCommitMakesStopsFail(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	committed, finish := make(chan struct{}), make(chan struct{})
	r := prepare(t, e, "a", func(ctx context.Context, c *run.Control) run.Outcome {
		if !c.Commit() {
			t.Error("commit failed")
		}
		close(committed)
		<-finish
		return run.Outcome{Reason: rein.ReasonStop, Reply: "ok"}
	})
	start(t, r, rein.StatusRunning)
	<-committed
	if r.Cancel() || r.Interrupt("") {
		t.Fatal("stop took effect after commit")
	}
	close(finish)
	if res := wait(t, r); res.Status != rein.StatusCompleted || res.Reply != "ok" {
		t.Fatalf("%+v", res)
	}
}

func TestTimeoutCountsQueueTime(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	a := newGate()
	ra := prepare(t, e, "a", a.fn)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	// B would be fast once running, but its deadline passes in the queue.
	b := newGate()
	rb := prepare(t, e, "b", b.fn, func(o *run.Options) { o.Timeout = 30 * time.Millisecond })
	start(t, rb, rein.StatusQueued)
	res := wait(t, rb)
	if res.Status != rein.StatusCancelled || res.Reason != rein.ReasonTimeout || !errors.Is(res.Err, rein.ErrTimeout) {
		t.Fatalf("B %+v", res)
	}
	if b.calls.Load() != 0 {
		t.Fatal("B executed after its deadline")
	}
	if ra.Status() != rein.StatusRunning {
		t.Fatal("A disturbed")
	}
	// A running run whose deadline passes is cancelled with reason timeout.
	close(a.release)
	wait(t, ra)
	c := newGate()
	rc := prepare(t, e, "c", c.fn, func(o *run.Options) { o.Timeout = 20 * time.Millisecond })
	start(t, rc, rein.StatusRunning)
	if res := wait(t, rc); res.Reason != rein.ReasonTimeout || res.Status != rein.StatusCancelled {
		t.Fatalf("C %+v", res)
	}
	// A deadline already in the past: never executes.
	d := newGate()
	rd := prepare(t, e, "d", d.fn, func(o *run.Options) { o.Deadline = time.Now().Add(-time.Second) })
	start(t, rd, rein.StatusCancelled)
	if res := wait(t, rd); res.Reason != rein.ReasonTimeout || d.calls.Load() != 0 {
		t.Fatalf("D %+v", res)
	}
}

func TestWaitManyObservers(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := newGate()
	r := prepare(t, e, "a", g.fn)
	var wg sync.WaitGroup
	results := make([]run.Result, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = r.Wait(context.Background())
		}()
	}
	// Waiting does not start the run.
	if r.Status() != rein.StatusCreated || g.calls.Load() != 0 {
		t.Fatal("waiting started the run")
	}
	// A waiter that gives up does not cancel it.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	start(t, r, rein.StatusRunning)
	close(g.release)
	wg.Wait()
	for i, res := range results {
		if res.Status != rein.StatusCompleted {
			t.Fatalf("observer %d saw %+v", i, res)
		}
	}
}

func TestSessionsRunConcurrently(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	a, b := newGate(), newGate()
	ra := prepare(t, e, "a", a.fn)
	rb, _ := e.Prepare(b.fn, run.Options{ID: "b", Session: rein.SessionKey{Owner: "alice", ID: "s2"}})
	start(t, ra, rein.StatusRunning)
	start(t, rb, rein.StatusRunning)
	entered(t, a)
	entered(t, b)
	close(a.release)
	close(b.release)
	wait(t, ra)
	wait(t, rb)
}

func TestFrontJumpsQueue(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	var order []string
	var mu sync.Mutex
	rec := func(name string) run.Func {
		return func(ctx context.Context, c *run.Control) run.Outcome {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return run.Outcome{Reason: rein.ReasonStop}
		}
	}
	a := newGate()
	ra := prepare(t, e, "a", a.fn)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	rb := prepare(t, e, "b", rec("b"))
	rc := prepare(t, e, "c", rec("c"))
	rx := prepare(t, e, "x", rec("x"), func(o *run.Options) { o.Front = true })
	ry := prepare(t, e, "y", rec("y"), func(o *run.Options) { o.Front = true })
	for _, r := range []*run.Run{rb, rc, rx, ry} {
		start(t, r, rein.StatusQueued)
	}
	_, queued := e.Lane(sess)
	var ids []string
	for _, q := range queued {
		ids = append(ids, q.ID())
	}
	if got := join(ids); got != "y,x,b,c" {
		t.Fatalf("queue %s", got)
	}
	close(a.release)
	for _, r := range []*run.Run{rb, rc, rx, ry} {
		wait(t, r)
	}
	if got := join(order); got != "y,x,b,c" {
		t.Fatalf("ran %s", got)
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func TestPanicFails(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	r := prepare(t, e, "a", func(ctx context.Context, c *run.Control) run.Outcome { panic("boom") })
	start(t, r, rein.StatusRunning)
	res := wait(t, r)
	if res.Status != rein.StatusFailed || res.Reason != rein.ReasonError || res.Err == nil {
		t.Fatalf("%+v", res)
	}
	// The lane is free again.
	r2 := prepare(t, e, "b", func(ctx context.Context, c *run.Control) run.Outcome { return run.Outcome{} })
	start(t, r2, rein.StatusRunning)
	if res := wait(t, r2); res.Status != rein.StatusCompleted {
		t.Fatalf("%+v", res)
	}
}

func TestFinishAndAdmittedHooks(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	mod := func(o *run.Options) {
		o.Admitted = func(r *run.Run) { note("admit " + r.ID()) }
		o.Finish = func(r *run.Run, res run.Result) {
			if r.Status() == res.Status && res.Status.Terminal() {
				t.Error("terminal before Finish returned")
			}
			note("finish " + r.ID() + " " + string(res.Reason))
		}
	}
	a := newGate()
	ra := prepare(t, e, "a", a.fn, mod)
	rb := prepare(t, e, "b", newGate().fn, mod)
	rc := prepare(t, e, "c", func(ctx context.Context, c *run.Control) run.Outcome { return run.Outcome{} }, mod)
	start(t, ra, rein.StatusRunning)
	start(t, rb, rein.StatusQueued)
	start(t, rc, rein.StatusQueued)
	rb.Cancel()
	close(a.release)
	wait(t, ra)
	wait(t, rc)
	want := "admit a,finish b cancelled,finish a stop,admit c,finish c stop"
	if got := join(log); got != want {
		t.Fatalf("hooks %s\nwant  %s", got, want)
	}
}

// TestAnnouncedStopsComeBeforeTheEnd: the announce callback of an accepted
// stop runs before the run records its end (Finish), for a queued and a
// running run alike, and is not called for a stop that does not take effect.
func TestAnnouncedStopsComeBeforeTheEnd(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	fin := func(o *run.Options) { o.Finish = func(r *run.Run, res run.Result) { note("finish " + r.ID()) } }
	a := newGate()
	ra := prepare(t, e, "a", a.fn, fin)
	rb := prepare(t, e, "b", newGate().fn, fin)
	start(t, ra, rein.StatusRunning)
	entered(t, a)
	start(t, rb, rein.StatusQueued)

	if !rb.CancelAnnounced(func() { note("announce b") }) {
		t.Fatal("cancel of queued b")
	}
	if rb.CancelAnnounced(func() { note("announce b again") }) {
		t.Fatal("second cancel took effect")
	}
	if !ra.InterruptAnnounced("stop", func() { note("announce a") }) {
		t.Fatal("interrupt of running a")
	}
	wait(t, ra)
	wait(t, rb)
	if got := join(log); got != "announce b,finish b,announce a,finish a" {
		t.Fatalf("order %s", got)
	}
	if ra.InterruptMessage() != "stop" {
		t.Fatal("message lost")
	}
}
