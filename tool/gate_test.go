package tool

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/reinhq/rein"
)

var (
	sessA = rein.SessionKey{Owner: "alice", ID: "ses_a"}
	sessB = rein.SessionKey{Owner: "bob", ID: "ses_a"} // same id, other owner
)

func mustOpen(t *testing.T, g *Gate, key rein.SessionKey, id string) *Pending {
	t.Helper()
	p, err := g.Open(key, id)
	if err != nil {
		t.Fatalf("Open(%v, %s): %v", key, id, err)
	}
	return p
}

func TestGateAllowAndDeny(t *testing.T) {
	g := NewGate()
	allow := mustOpen(t, g, sessA, "call_1")
	deny := mustOpen(t, g, sessA, "call_2")
	if g.Waiting() != 2 {
		t.Fatalf("Waiting = %d", g.Waiting())
	}
	results := make(chan Decision, 2)
	var wg sync.WaitGroup
	for _, p := range []*Pending{allow, deny} {
		wg.Go(func() {
			d, err := p.Wait(context.Background())
			if err != nil {
				t.Error(err)
			}
			results <- d
			if p.ToolUseID() == "call_2" && d.DenyMessage != "not on a Friday" {
				t.Errorf("deny message %q", d.DenyMessage)
			}
		})
	}
	if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); err != nil {
		t.Fatal(err)
	}
	if err := g.Resolve(sessA, "call_2", Decision{DenyMessage: "not on a Friday"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if g.Waiting() != 0 {
		t.Errorf("Waiting = %d after both answers", g.Waiting())
	}
	// Wait may be called again and tells the same.
	if d, err := allow.Wait(context.Background()); err != nil || !d.Allow {
		t.Errorf("second Wait = %+v, %v", d, err)
	}
}

func TestGateAnswerBeforeWaitIsNotLost(t *testing.T) {
	g := NewGate()
	p := mustOpen(t, g, sessA, "call_1")
	if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // even a done context gets the decision that was already accepted
	if d, err := p.Wait(ctx); err != nil || !d.Allow {
		t.Fatalf("Wait = %+v, %v", d, err)
	}
}

func TestGateResolveErrors(t *testing.T) {
	g := NewGate()
	mustOpen(t, g, sessA, "call_1")
	if err := g.Resolve(sessA, "call_unknown", Decision{Allow: true}); !errors.Is(err, rein.ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if err := g.Resolve(sessB, "call_1", Decision{Allow: true}); !errors.Is(err, rein.ErrNotFound) {
		t.Errorf("another owner's session: %v", err)
	}
	if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); err != nil {
		t.Fatal(err)
	}
	if err := g.Resolve(sessA, "call_1", Decision{Allow: false}); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("second answer: %v", err)
	}
	if _, err := g.Open(sessA, "call_1"); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("reopening an answered id: %v", err)
	}
	mustOpen(t, g, sessA, "call_2")
	if _, err := g.Open(sessA, "call_2"); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("opening an open id: %v", err)
	}
	mustOpen(t, g, sessB, "call_2") // ids are per session
}

func TestGateWaitEndsWithContext(t *testing.T) {
	g := NewGate()
	p := mustOpen(t, g, sessA, "call_1")
	cause := errors.New("run cancelled by user")
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Wait(ctx)
		errc <- err
	}()
	cancel(cause)
	err := <-errc
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("Wait = %v, want context.Canceled and the cause", err)
	}
	if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("answer after the wait ended: %v", err)
	}
	if g.Waiting() != 0 {
		t.Errorf("Waiting = %d", g.Waiting())
	}
}

func TestGateClose(t *testing.T) {
	g := NewGate()
	p := mustOpen(t, g, sessA, "call_1")
	p.Close()
	p.Close()
	if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("answer after Close: %v", err)
	}
	if _, err := p.Wait(context.Background()); err == nil {
		t.Error("Wait after Close returned no error")
	}
	if g.Deliver(sessA, "call_1", Decision{Allow: true}) {
		t.Error("Deliver woke a closed confirmation")
	}
	// Close after a decision changes nothing.
	q := mustOpen(t, g, sessA, "call_2")
	if err := g.Resolve(sessA, "call_2", Decision{Allow: true}); err != nil {
		t.Fatal(err)
	}
	q.Close()
	if d, err := q.Wait(context.Background()); err != nil || !d.Allow {
		t.Errorf("Wait = %+v, %v", d, err)
	}
}

func TestGateExactlyOneResolverWins(t *testing.T) {
	g := NewGate()
	p := mustOpen(t, g, sessA, "call_1")
	const n = 32
	errs := make(chan error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs <- g.Resolve(sessA, "call_1", Decision{Allow: i%2 == 0, DenyMessage: "no"})
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	wins := 0
	for err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, rein.ErrConflict):
			t.Errorf("loser got %v, want conflict", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d resolvers won", wins)
	}
	if _, err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestGateDeliver(t *testing.T) {
	g := NewGate()
	if g.Deliver(sessA, "call_1", Decision{Allow: true}) {
		t.Error("Deliver to nobody reported a waiter")
	}
	p := mustOpen(t, g, sessA, "call_1")
	if !g.Deliver(sessA, "call_1", Decision{DenyMessage: "store says no"}) {
		t.Fatal("Deliver did not find the waiter")
	}
	if d, err := p.Wait(context.Background()); err != nil || d.Allow || d.DenyMessage != "store says no" {
		t.Errorf("Wait = %+v, %v", d, err)
	}
	if g.Deliver(sessA, "call_1", Decision{Allow: true}) {
		t.Error("second Deliver woke someone")
	}
}

func TestGateMemoryIsBounded(t *testing.T) {
	g := NewGate(GateMemory(2))
	for _, id := range []string{"call_1", "call_2", "call_3"} {
		mustOpen(t, g, sessA, id)
		if err := g.Resolve(sessA, id, Decision{Allow: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Resolve(sessA, "call_1", Decision{}); !errors.Is(err, rein.ErrNotFound) {
		t.Errorf("oldest id beyond capacity: %v, want not found", err)
	}
	for _, id := range []string{"call_2", "call_3"} {
		if err := g.Resolve(sessA, id, Decision{}); !errors.Is(err, rein.ErrConflict) {
			t.Errorf("%s: %v, want conflict", id, err)
		}
	}
	// An open confirmation is never forgotten, whatever the capacity.
	open := mustOpen(t, g, sessA, "call_open")
	for _, id := range []string{"call_4", "call_5", "call_6"} {
		mustOpen(t, g, sessB, id).Close()
	}
	if !g.Deliver(sessA, "call_open", Decision{Allow: true}) {
		t.Error("open confirmation was forgotten")
	}
	if d, _ := open.Wait(context.Background()); !d.Allow {
		t.Error("decision lost")
	}
}

func TestGateForget(t *testing.T) {
	g := NewGate()
	mustOpen(t, g, sessA, "call_1").Close()
	mustOpen(t, g, sessB, "call_1").Close()
	open := mustOpen(t, g, sessA, "call_2")
	g.Forget(sessA)
	if err := g.Resolve(sessA, "call_1", Decision{}); !errors.Is(err, rein.ErrNotFound) {
		t.Errorf("forgotten id: %v", err)
	}
	if err := g.Resolve(sessB, "call_1", Decision{}); !errors.Is(err, rein.ErrConflict) {
		t.Errorf("other session's id: %v", err)
	}
	if err := g.Resolve(sessA, "call_2", Decision{Allow: true}); err != nil {
		t.Errorf("Forget touched an open confirmation: %v", err)
	}
	if d, _ := open.Wait(context.Background()); !d.Allow {
		t.Error("decision lost")
	}
	g.Forget(rein.SessionKey{Owner: "nobody", ID: "x"})
}

func BenchmarkGateOpenResolveWait(b *testing.B) {
	g := NewGate()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		g.Forget(sessA) // the id is reused across iterations
		p, err := g.Open(sessA, "call_1")
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Resolve(sessA, "call_1", Decision{Allow: true}); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReleaseAllowsReopen(t *testing.T) {
	g := NewGate()
	key := rein.SessionKey{Owner: "o", ID: "s"}
	p, err := g.Open(key, "c1")
	if err != nil {
		t.Fatal(err)
	}
	p.Release()
	if _, err := p.Wait(context.Background()); err == nil {
		t.Fatal("Wait after Release returned a decision")
	}
	if g.Deliver(key, "c1", Decision{Allow: true}) {
		t.Fatal("a released confirmation took a decision")
	}
	q, err := g.Open(key, "c1")
	if err != nil {
		t.Fatalf("reopen after Release: %v", err)
	}
	if !g.Deliver(key, "c1", Decision{Allow: true}) {
		t.Fatal("reopened confirmation missed its decision")
	}
	if d, err := q.Wait(context.Background()); err != nil || !d.Allow {
		t.Fatalf("%+v %v", d, err)
	}
}

// A decision delivered just before Release is forgotten with it, so the id
// can be opened again (a run that parked as its answer came is taken up
// again, reading the answer from its store); a second Release of the old
// Pending leaves a newer one's answer alone.
func TestReleaseAfterDecisionAllowsReopen(t *testing.T) {
	g := NewGate()
	key := rein.SessionKey{Owner: "o", ID: "s"}
	p, err := g.Open(key, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !g.Deliver(key, "c1", Decision{Allow: true}) {
		t.Fatal("open confirmation missed its decision")
	}
	p.Release()
	if d, err := p.Wait(context.Background()); err != nil || !d.Allow {
		t.Fatalf("the delivered decision is lost to its Pending: %+v %v", d, err)
	}
	q, err := g.Open(key, "c1")
	if err != nil {
		t.Fatalf("reopen after a decision and Release: %v", err)
	}
	if !g.Deliver(key, "c1", Decision{Allow: false, DenyMessage: "no"}) {
		t.Fatal("reopened confirmation missed its decision")
	}
	p.Release()
	if _, err := g.Open(key, "c1"); err == nil {
		t.Fatal("a second Release of the old Pending forgot the newer one's answer")
	}
	if d, err := q.Wait(context.Background()); err != nil || d.Allow || d.DenyMessage != "no" {
		t.Fatalf("%+v %v", d, err)
	}
}
