package sessions_test

import (
	"context"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

func TestRollbackRun(t *testing.T) {
	t.Parallel()
	onBackends(t, testRollbackRun)
}

// testRollbackRun: RollbackRun of a running run cancels it and leaves its
// turn out of the next run's request, as when_busy rollback does, without
// touching the run queued behind it; a second rollback of it, and one of
// an unknown run, accept nothing; a queued run rolled back is cancelled.
func testRollbackRun(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	ctx := context.Background()
	f.completed(f.send("turns first", "").RunID)
	a := f.send("block A", "")
	f.blocking(a.RunID)
	q := f.send("turns Q", "enqueue")
	res, err := f.svc.RollbackRun(ctx, f.key, a.RunID)
	if err != nil || !res.Accepted || res.RunID != a.RunID {
		t.Fatalf("rollback A: %+v %v", res, err)
	}
	if p := f.completed(a.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled || !p.RolledBack {
		t.Fatalf("A %+v", p)
	}
	if p := f.completed(q.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("Q %+v", p)
	}
	var reply string
	for _, e := range f.all() {
		if e.Type == rein.EventMessage && e.RunID == q.RunID {
			var p rein.MessagePayload
			_ = e.DecodePayload(&p)
			reply = p.Text
		}
	}
	if reply != "turns=2" {
		t.Fatalf("Q's reply %q: the rolled-back turn reached the model", reply)
	}
	for _, id := range []string{a.RunID, "run_unknown"} {
		if res, err := f.svc.RollbackRun(ctx, f.key, id); err != nil || res.Accepted {
			t.Fatalf("rollback of %s: %+v %v, want not accepted", id, res, err)
		}
	}
	b := f.send("block B", "")
	f.blocking(b.RunID)
	c := f.send("C", "enqueue")
	if res, err := f.svc.RollbackRun(ctx, f.key, c.RunID); err != nil || !res.Accepted {
		t.Fatalf("rollback of queued C: %+v %v", res, err)
	}
	if p := f.completed(c.RunID); p.Status != rein.StatusCancelled || p.RolledBack {
		t.Fatalf("C %+v, want cancelled", p)
	}
	if _, err := f.svc.Interrupt(ctx, f.key, sessions.InterruptRequest{RunID: &b.RunID}); err != nil {
		t.Fatal(err)
	}
	f.completed(b.RunID)
}

func TestRollbackRunOnAnotherInstance(t *testing.T) {
	t.Parallel()
	onBackends(t, testRollbackRunOnAnotherInstance)
}

// testRollbackRunOnAnotherInstance: a rollback asked of the instance that
// does not run the run is recorded in the store and applied by the one
// that does.
func testRollbackRunOnAnotherInstance(t *testing.T, open opener) {
	st := shared{open(t)}
	f := newFixture(t, st, func(c *sessions.Config) { c.Instance = "first" })
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	g := newFixture(t, st, func(c *sessions.Config) { c.Instance = "second" })
	g.key = f.key
	if res, err := g.svc.RollbackRun(context.Background(), g.key, a.RunID); err != nil || !res.Accepted {
		t.Fatalf("rollback from the second instance: %+v %v", res, err)
	}
	if p := f.completed(a.RunID); p.Status != rein.StatusCancelled || !p.RolledBack {
		t.Fatalf("A %+v", p)
	}
}
