package storetest

import (
	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Runs/RunSessionByIDOnlyForItsOwner", testRunSession},
)

// A backend that locates runs finds a run's session by the run id alone,
// for the run's owner only: an unknown id and another owner's run answer
// alike. A backend without the capability skips (the service searches).
func testRunSession(t *T) {
	loc, ok := t.S.(store.RunLocator)
	if !ok {
		t.Skip("the backend does not implement store.RunLocator")
	}
	a, b := t.newSession("alice"), t.newSession("alice")
	for key, run := range map[rein.SessionKey]string{a: "run_loc_a", b: "run_loc_b"} {
		t.update(key, store.Fence{}, "CreateRun "+run, func(tx store.Tx) error {
			return tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: run, Status: rein.StatusQueued})
		})
	}
	for run, want := range map[string]string{"run_loc_a": a.ID, "run_loc_b": b.ID} {
		got, err := loc.RunSession(t.Ctx, "alice", run)
		must(t, err, "RunSession("+run+")")
		if got != want {
			t.Fatalf("RunSession(alice, %s) = %q, want %q", run, got, want)
		}
	}
	_, err := loc.RunSession(t.Ctx, "bob", "run_loc_a")
	wantErr(t, err, rein.ErrNotFound, "RunSession of another owner's run")
	_, err = loc.RunSession(t.Ctx, "alice", "run_none")
	wantErr(t, err, rein.ErrNotFound, "RunSession of an unknown run")
}
