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

// execution is a run executing on a goroutine of its own.
type execution struct {
	done  chan struct{}
	res   run.Result
	begun bool
}

func execute(r *run.Run, fn run.Func) *execution {
	x := &execution{done: make(chan struct{})}
	go func() {
		x.res, x.begun = r.Execute(context.Background(), fn)
		close(x.done)
	}()
	return x
}

func (x *execution) wait(t *testing.T) run.Result {
	t.Helper()
	select {
	case <-x.done:
		return x.res
	case <-time.After(10 * time.Second):
		t.Fatal("run did not end")
		return run.Result{}
	}
}

func entered(t *testing.T, g *gate) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("run never entered its body")
	}
}

func TestCancelBeforeBegin(t *testing.T) {
	g := newGate()
	r := run.New(run.Options{ID: "r1"})
	if !r.Cancel() {
		t.Fatal("first cancel returned false")
	}
	if r.Cancel() {
		t.Fatal("second cancel returned true")
	}
	res, begun := r.Execute(context.Background(), g.fn)
	if begun || g.calls.Load() != 0 {
		t.Fatal("a cancelled run began")
	}
	if res.Status != rein.StatusCancelled || res.Reason != rein.ReasonCancelled || !errors.Is(res.Err, rein.ErrCancelled) {
		t.Fatalf("%+v", res)
	}
}

func TestBeginOnce(t *testing.T) {
	r := run.New(run.Options{ID: "r1"})
	if _, _, ok := r.Begin(context.Background()); !ok {
		t.Fatal("first Begin refused")
	}
	if _, _, ok := r.Begin(context.Background()); ok {
		t.Fatal("second Begin accepted")
	}
	r.Decide(run.Outcome{})
	r.Release()
}

func TestInterruptBeforeBeginIsCancel(t *testing.T) {
	r := run.New(run.Options{ID: "r1"})
	if !r.Interrupt("why") {
		t.Fatal("interrupt before begin")
	}
	if r.Interrupted() {
		t.Fatal("an interrupt of a run that never began is a cancel")
	}
	if r.InterruptMessage() != "why" {
		t.Fatalf("message %q", r.InterruptMessage())
	}
	if res, begun := r.Execute(context.Background(), newGate().fn); begun || res.Reason != rein.ReasonCancelled {
		t.Fatalf("%+v begun=%v", res, begun)
	}
}

func TestCancelRunning(t *testing.T) {
	g := newGate()
	r := run.New(run.Options{ID: "a"})
	x := execute(r, g.fn)
	entered(t, g)
	if !r.Cancel() {
		t.Fatal("cancel")
	}
	if r.Interrupt("") {
		t.Fatal("interrupt after cancel took effect")
	}
	if res := x.wait(t); res.Status != rein.StatusCancelled || res.Reason != rein.ReasonCancelled {
		t.Fatalf("%+v", res)
	}
	if r.Cancel() {
		t.Fatal("cancel of a decided run took effect")
	}
}

func TestInterruptRunning(t *testing.T) {
	g := newGate()
	r := run.New(run.Options{ID: "a"})
	x := execute(r, g.fn)
	entered(t, g)
	if !r.Interrupt("stop please") {
		t.Fatal("interrupt returned false")
	}
	if r.Interrupt("again") {
		t.Fatal("second interrupt took effect")
	}
	res := x.wait(t)
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonInterrupted || res.Err != nil {
		t.Fatalf("%+v", res)
	}
	if r.InterruptMessage() != "stop please" || !r.Interrupted() {
		t.Fatalf("message %q", r.InterruptMessage())
	}
}

func TestCancelDuringInterruptPathWins(t *testing.T) {
	inPath, begun := make(chan struct{}), make(chan struct{})
	r := run.New(run.Options{ID: "a"})
	x := execute(r, func(ctx context.Context, c *run.Control) run.Outcome {
		close(begun)
		<-ctx.Done() // interrupted
		close(inPath)
		<-c.RunContext().Done() // the interrupt path is slow; a cancel escalates
		if c.Commit() {
			t.Error("commit after cancel succeeded")
		}
		return run.Outcome{Reason: rein.ReasonInterrupted}
	})
	<-begun
	if !r.Interrupt("") {
		t.Fatal("interrupt")
	}
	<-inPath
	if !r.Cancel() {
		t.Fatal("cancel after interrupt must escalate")
	}
	if res := x.wait(t); res.Status != rein.StatusCancelled {
		t.Fatalf("%+v", res)
	}
}

func TestCommitMakesStopsFail(t *testing.T) {
	committed, finish := make(chan struct{}), make(chan struct{})
	r := run.New(run.Options{ID: "a"})
	x := execute(r, func(ctx context.Context, c *run.Control) run.Outcome {
		if !c.Commit() {
			t.Error("commit failed")
		}
		close(committed)
		<-finish
		return run.Outcome{Reason: rein.ReasonStop, Reply: "ok"}
	})
	<-committed
	if r.Cancel() || r.Interrupt("") {
		t.Fatal("stop took effect after commit")
	}
	if !r.StopSettled(false) {
		t.Fatal("a committed run's stops are settled")
	}
	close(finish)
	if res := x.wait(t); res.Status != rein.StatusCompleted || res.Reply != "ok" {
		t.Fatalf("%+v", res)
	}
}

func TestDeadline(t *testing.T) {
	g := newGate()
	r := run.New(run.Options{ID: "a", Deadline: time.Now().Add(20 * time.Millisecond)})
	x := execute(r, g.fn)
	entered(t, g)
	res := x.wait(t)
	if res.Status != rein.StatusCancelled || res.Reason != rein.ReasonTimeout || !errors.Is(res.Err, rein.ErrTimeout) {
		t.Fatalf("%+v", res)
	}
}

func TestDeadlinePassedBeforeBegin(t *testing.T) {
	g := newGate()
	r := run.New(run.Options{ID: "a", Deadline: time.Now().Add(-time.Second)})
	res, _ := r.Execute(context.Background(), g.fn)
	if res.Reason != rein.ReasonTimeout {
		t.Fatalf("%+v", res)
	}
}

func TestExpire(t *testing.T) {
	r := run.New(run.Options{ID: "a"})
	if !r.Expire() || r.Expire() {
		t.Fatal("Expire: once")
	}
	if r.Cancel() {
		// A stop still takes effect on the handle before Decide; the run
		// never begins either way.
		t.Log("cancel after expire accepted")
	}
	res, begun := r.Execute(context.Background(), newGate().fn)
	if begun {
		t.Fatal("an expired run began")
	}
	if res.Status != rein.StatusCancelled {
		t.Fatalf("%+v", res)
	}
	b := run.New(run.Options{ID: "b"})
	if _, _, ok := b.Begin(context.Background()); !ok {
		t.Fatal("begin")
	}
	if b.Expire() {
		t.Fatal("Expire of a begun run took effect")
	}
	b.Decide(run.Outcome{})
	b.Release()
}

func TestPanicFails(t *testing.T) {
	r := run.New(run.Options{ID: "a"})
	res, _ := r.Execute(context.Background(), func(context.Context, *run.Control) run.Outcome { panic("boom") })
	if res.Status != rein.StatusFailed || res.Err == nil {
		t.Fatalf("%+v", res)
	}
}

func TestDecideRefusesLaterStops(t *testing.T) {
	r := run.New(run.Options{ID: "a"})
	ctx, _, ok := r.Begin(context.Background())
	if !ok {
		t.Fatal("begin")
	}
	res := r.Decide(run.Outcome{Reason: rein.ReasonStop, Reply: "r"})
	if res.Status != rein.StatusCompleted || !r.Decided() {
		t.Fatalf("%+v", res)
	}
	if r.Cancel() || r.Interrupt("") {
		t.Fatal("a stop took effect after Decide")
	}
	if ctx.Err() != nil {
		t.Fatal("a refused stop cancelled the context")
	}
	r.Release()
	if ctx.Err() == nil {
		t.Fatal("Release left the context live")
	}
}

// TestAnnouncedStopsComeBeforeTheDecision: the announce callback of an
// accepted stop runs before the run decides its result, for a run that has
// not begun and a running one alike, and is not called for a stop that does
// not take effect.
func TestAnnouncedStopsComeBeforeTheDecision(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	a := newGate()
	ra, rb := run.New(run.Options{ID: "a"}), run.New(run.Options{ID: "b"})
	xa := execute(ra, func(ctx context.Context, c *run.Control) run.Outcome {
		out := a.fn(ctx, c)
		note("decide a")
		return out
	})
	entered(t, a)
	if !rb.CancelAnnounced(func() { note("announce b") }) {
		t.Fatal("cancel of b")
	}
	if rb.CancelAnnounced(func() { note("announce b again") }) {
		t.Fatal("second cancel took effect")
	}
	rb.Decide(run.Outcome{})
	note("decide b")
	if !ra.InterruptAnnounced("stop", func() { note("announce a") }) {
		t.Fatal("interrupt of running a")
	}
	xa.wait(t)
	mu.Lock()
	got := log
	mu.Unlock()
	want := []string{"announce b", "decide b", "announce a", "decide a"}
	if len(got) != len(want) {
		t.Fatalf("order %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v", got)
		}
	}
}

// TestStopsRaceCommit: of a cancel, an interrupt and a commit racing, the
// run's result agrees with whichever the lock let through first.
func TestStopsRaceCommit(t *testing.T) {
	for i := 0; i < 200; i++ {
		r := run.New(run.Options{ID: "a"})
		var committed atomic.Bool
		start := make(chan struct{})
		x := execute(r, func(ctx context.Context, c *run.Control) run.Outcome {
			<-start
			if c.Commit() {
				committed.Store(true)
				return run.Outcome{Reason: rein.ReasonStop, Reply: "ok"}
			}
			return run.Outcome{Reason: rein.ReasonCancelled}
		})
		close(start)
		cancelled := r.Cancel()
		res := x.wait(t)
		switch {
		case cancelled && committed.Load():
			t.Fatal("both the cancel and the commit took effect")
		case cancelled && res.Status != rein.StatusCancelled:
			t.Fatalf("cancelled, result %+v", res)
		case committed.Load() && res.Status != rein.StatusCompleted:
			t.Fatalf("committed, result %+v", res)
		}
	}
}
