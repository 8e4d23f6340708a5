package run_test

import (
	"errors"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/run"
)

func TestRegistryOwnerSessionMismatch(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := run.NewRegistry()
	a := newGate()
	r := prepare(t, e, "a", a.fn)
	if err := g.Register(r); err != nil {
		t.Fatal(err)
	}
	start(t, r, rein.StatusRunning)
	entered(t, a)
	for _, k := range []rein.SessionKey{
		{Owner: "mallory", ID: sess.ID}, // another owner, same session id
		{Owner: sess.Owner, ID: "s2"},   // same owner, another session
		{Owner: "", ID: ""},
	} {
		if _, ok := g.Find(k, "a"); ok {
			t.Fatalf("found with %v", k)
		}
		if g.Cancel(k, "a") || g.Interrupt(k, "a", "") {
			t.Fatalf("stopped with %v", k)
		}
	}
	if _, ok := g.Find(sess, "nope"); ok {
		t.Fatal("found unknown id")
	}
	if r.Status() != rein.StatusRunning {
		t.Fatal("run disturbed")
	}
	if !g.Cancel(sess, "a") {
		t.Fatal("owner's cancel failed")
	}
	if g.Cancel(sess, "a") {
		t.Fatal("repeated cancel returned true")
	}
	wait(t, r)
	if _, ok := g.Find(sess, "a"); ok || g.Len() != 0 {
		t.Fatal("terminal run still registered")
	}
}

func TestRegistryDuplicate(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := run.NewRegistry()
	r1 := prepare(t, e, "a", newGate().fn)
	r2 := prepare(t, e, "a", newGate().fn)
	if err := g.Register(r1); err != nil {
		t.Fatal(err)
	}
	if err := g.Register(r2); !errors.Is(err, run.ErrDuplicate) || !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	r1.Cancel()
	wait(t, r1)
}

func TestRegistryCleanupCannotRemoveNewerEntry(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := run.NewRegistry()
	// The old run of the session is running; a newer run of the same session
	// is registered (queued behind it). The old run's terminal cleanup must
	// leave the newer entry alone, and once the old id is free it can be
	// registered again without a late cleanup removing it.
	old := newGate()
	rOld := prepare(t, e, "a", old.fn)
	if err := g.Register(rOld); err != nil {
		t.Fatal(err)
	}
	start(t, rOld, rein.StatusRunning)
	entered(t, old)
	newer := newGate()
	rNew := prepare(t, e, "b", newer.fn)
	if err := g.Register(rNew); err != nil {
		t.Fatal(err)
	}
	start(t, rNew, rein.StatusQueued)
	close(old.release)
	wait(t, rOld)
	if got, ok := g.Find(sess, "b"); !ok || got != rNew {
		t.Fatal("old cleanup removed the newer entry")
	}
	rReuse := prepare(t, e, "a", newGate().fn)
	if err := g.Register(rReuse); err != nil {
		t.Fatalf("reuse after terminal: %v", err)
	}
	if got, ok := g.Find(sess, "a"); !ok || got != rReuse {
		t.Fatal("entry for the reused id is gone")
	}
	entered(t, newer)
	close(newer.release)
	wait(t, rNew)
	rReuse.Cancel()
	wait(t, rReuse)
	if g.Len() != 0 {
		t.Fatalf("%d entries left", g.Len())
	}
}

func TestRegistryTerminalAtRegistration(t *testing.T) {
	e := run.NewEngine(run.EngineOptions{})
	g := run.NewRegistry()
	r := prepare(t, e, "a", newGate().fn)
	r.Cancel()
	if err := g.Register(r); err != nil {
		t.Fatal(err)
	}
	if g.Len() != 0 {
		t.Fatal("terminal run kept")
	}
}
