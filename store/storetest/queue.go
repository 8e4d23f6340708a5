package storetest

import (
	"errors"
	"fmt"
	"slices"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The editable queue (docs/api.md): a queued run's input replaced, its
// place moved, each in one Update that the claim of the run excludes.

var _ = register(
	test{"Queue/EditInputOnlyWhileQueued", testQueueEditInput},
	test{"Queue/EditRolledBackWithItsUpdate", testQueueEditRollback},
	test{"Queue/ReorderIsOneWrite", testQueueReorder},
	test{"Queue/EditRacesClaim", testQueueEditRacesClaim},
)

func testQueueEditInput(t *T) {
	key := t.newSession("alice")
	rec := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_q", Status: rein.StatusQueued, Input: "first", QueueOrder: 1}
	must(t, t.createRun(rec), "CreateRun")

	got, err := t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Input: "second ✓"})
	must(t, err, "UpdateRun(Input) of a queued run")
	if got.Input != "second ✓" || got.Status != rein.StatusQueued {
		t.Fatalf("after the edit: input %q status %s", got.Input, got.Status)
	}
	stored, err := t.S.GetRun(t.Ctx, key, "run_q")
	must(t, err, "GetRun")
	if stored.Input != "second ✓" {
		t.Fatalf("stored input = %q, want the edit", stored.Input)
	}

	// Started: its input is what it started with, for good.
	_, err = t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Status: rein.StatusRunning, StartedAt: t.Clock.Now()})
	must(t, err, "UpdateRun(RUNNING)")
	got, err = t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Input: "third"})
	wantErr(t, err, rein.ErrConflict, "UpdateRun(Input) of a running run")
	if got == nil || got.Status != rein.StatusRunning || got.Input != "second ✓" {
		t.Fatalf("refused edit answered %+v, want the stored RUNNING record", got)
	}
	// An edit beside other fields is refused whole: nothing of it applies.
	_, err = t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Input: "third", Instance: "inst-z"})
	wantErr(t, err, rein.ErrConflict, "UpdateRun(Input, Instance) of a running run")
	stored, err = t.S.GetRun(t.Ctx, key, "run_q")
	must(t, err, "GetRun")
	if stored.Input != "second ✓" || stored.Instance == "inst-z" {
		t.Fatalf("a refused edit changed the run: %+v", stored)
	}

	// Ended: the terminal conflict, as for any update.
	_, err = t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: t.Clock.Now()})
	must(t, err, "UpdateRun(end)")
	got, err = t.updateRun(key, store.Fence{}, "run_q", store.RunUpdate{Input: "fourth"})
	wantErr(t, err, rein.ErrConflict, "UpdateRun(Input) of an ended run")
	if got == nil || got.Status != rein.StatusCompleted || got.Input != "second ✓" {
		t.Fatalf("refused edit answered %+v, want the stored COMPLETED record", got)
	}

	// Another owner's session is a missing one.
	err = t.S.Update(t.Ctx, otherOwner(key), store.Fence{}, func(tx store.Tx) error {
		_, err := tx.UpdateRun("run_q", store.RunUpdate{Input: "x"})
		return err
	})
	wantErr(t, err, rein.ErrNotFound, "edit through another owner")
}

func testQueueEditRollback(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_q", Status: rein.StatusQueued, Input: "first", QueueOrder: 1}), "CreateRun")
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.UpdateRun("run_q", store.RunUpdate{Input: "lost"}); err != nil {
			return err
		}
		got, err := tx.GetRun("run_q")
		if err != nil {
			return err
		}
		if got.Input != "lost" {
			return fmt.Errorf("the transaction reads input %q, want its own edit", got.Input)
		}
		if _, err := tx.AppendEvents(rein.NewEvent(rein.EventRunEdited, "run_q", rein.RunEditedPayload{RunID: "run_q", Text: "lost"})); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, err, errRollback, "Update")
	stored, err := t.S.GetRun(t.Ctx, key, "run_q")
	must(t, err, "GetRun")
	if stored.Input != "first" {
		t.Fatalf("a rolled-back edit stayed: input %q", stored.Input)
	}
	if last, err := t.S.LastSeq(t.Ctx, key); err != nil || last != 0 {
		t.Fatalf("a rolled-back edit left events: last seq %d, %v", last, err)
	}
}

func testQueueReorder(t *T) {
	key := t.newSession("alice")
	ids := []string{"run_a", "run_b", "run_c", "run_d"}
	for i, id := range ids {
		must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: id, Status: rein.StatusQueued, Input: id, QueueOrder: int64(10 * (i + 1))}), "CreateRun "+id)
	}
	queued := func(tx store.Tx) ([]string, error) {
		rs, err := tx.Runs(rein.StatusQueued)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.ID
		}
		return out, nil
	}
	// run_d to the front, run_a behind run_b: the orders swap within the
	// write, and the write reads its own new order.
	want := []string{"run_d", "run_b", "run_a", "run_c"}
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		for i, id := range want {
			order := int64(10 * (i + 1))
			if _, err := tx.UpdateRun(id, store.RunUpdate{QueueOrder: &order}); err != nil {
				return err
			}
		}
		got, err := queued(tx)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("inside the write the queue is %v, want %v", got, want)
		}
		return nil
	})
	must(t, err, "reorder")
	var got []string
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) (err error) {
		got, err = queued(tx)
		return err
	}), "read queue")
	if !slices.Equal(got, want) {
		t.Fatalf("queue after the reorder = %v, want %v", got, want)
	}
	// A reorder that fails midway leaves the old order whole.
	err = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		one := int64(1)
		if _, err := tx.UpdateRun("run_c", store.RunUpdate{QueueOrder: &one}); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, err, errRollback, "rolled-back reorder")
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) (err error) {
		got, err = queued(tx)
		return err
	}), "read queue")
	if !slices.Equal(got, want) {
		t.Fatalf("queue after a rolled-back reorder = %v, want %v", got, want)
	}
}

// testQueueEditRacesClaim races an edit of a queued run (read the run,
// replace its input if still queued) with its claim (read the run, mark it
// RUNNING, take its input) — each one Update, as the sessions service
// writes them. Whatever the order, the claim starts the run with the text
// the edit was told it stored, or the edit is told the run had started.
func testQueueEditRacesClaim(t *T) {
	const rounds = 20
	for i := range rounds {
		key := t.newSession("alice")
		id := fmt.Sprintf("run_%d", i)
		must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: id, Status: rein.StatusQueued, Input: "old", QueueOrder: 1}), "CreateRun")
		var (
			edited    bool
			editErr   error
			started   string
			claimErr  error
			errLeft   = errors.New("left the queue")
			newText   = fmt.Sprintf("new %d", i)
			editSeen  rein.RunStatus
			claimSeen rein.RunStatus
		)
		parallel(2, func(g int) {
			if g == 0 {
				editErr = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
					r, err := tx.GetRun(id)
					if err != nil {
						return err
					}
					editSeen = r.Status
					if r.Status != rein.StatusQueued {
						return errLeft
					}
					if _, err := tx.UpdateRun(id, store.RunUpdate{Input: newText}); err != nil {
						return err
					}
					edited = true
					return nil
				})
				return
			}
			claimErr = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
				r, err := tx.GetRun(id)
				if err != nil {
					return err
				}
				claimSeen = r.Status
				rec, err := tx.UpdateRun(id, store.RunUpdate{Status: rein.StatusRunning, StartedAt: tx.Now()})
				if err != nil {
					return err
				}
				started = rec.Input
				return nil
			})
		})
		must(t, claimErr, "claim")
		if claimSeen != rein.StatusQueued {
			t.Fatalf("round %d: the claim saw %s", i, claimSeen)
		}
		switch {
		case editErr == nil && edited:
			if started != newText {
				t.Fatalf("round %d: the edit succeeded but the run started with %q", i, started)
			}
		case errors.Is(editErr, errLeft):
			if editSeen != rein.StatusRunning || started != "old" {
				t.Fatalf("round %d: the edit was refused (saw %s) and the run started with %q", i, editSeen, started)
			}
		default:
			t.Fatalf("round %d: edit: %v", i, editErr)
		}
	}
}
