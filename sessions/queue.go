// The editable queue (docs/api.md; decision 0092): a queued run's input
// replaced, its place in the queue moved, or the run sent now — each one
// write of the session (lifecycle.edit, lifecycle.promote) that admission
// and the claim of the run exclude, so an edited run runs with the edited
// text or not at all, and a run that left the queue is answered with its
// status, never edited.

package sessions

import (
	"context"
	"errors"
	"slices"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// EditRunRequest edits a queued run (PATCH .../runs/{run_id}). Nil fields
// are left as they are.
type EditRunRequest struct {
	// Text replaces the run's input (non-empty).
	Text *string
	// Position moves the run in the queue: 1 = next; beyond the queue's
	// length, last.
	Position *int
}

// QueuedRun is a run as an edit or a promote left it: its record and its
// place in the queue (1 = next; 0 when it is no longer queued).
type QueuedRun struct {
	Run      *store.RunRecord
	Position int
}

// EditRun replaces a queued run's input and/or moves it in the queue, in
// one write: session.run_edited for a new text, session.queue_changed for
// a new order. A run that is not queued (started, ended) is answered with
// a conflict that carries its id and status (rein.Error.RunStatus); a run
// of another session or owner is not found.
func (s *Service) EditRun(ctx context.Context, key rein.SessionKey, runID string, req EditRunRequest) (QueuedRun, error) {
	if req.Text != nil && *req.Text == "" {
		return QueuedRun{}, rein.InvalidArgument("text", "text must be a non-empty string")
	}
	if req.Position != nil && *req.Position < 1 {
		return QueuedRun{}, rein.InvalidArgument("position", "position must be an integer ≥ 1 (1 = next)")
	}
	if err := s.unavailableIfDraining(); err != nil {
		return QueuedRun{}, err
	}
	// No kick: a move changes which run the claim takes, not when a claim
	// is made — the end of the current run (or the wait for a lost
	// instance's turn) wakes every instance as before, and the claim reads
	// the order this write left.
	return s.life.edit(ctx, key, runID, req)
}

// PromoteRun sends a queued run now (POST .../runs/{run_id}/promote): in
// one write it becomes the first of the queue (session.queue_changed) and
// the session's current run is marked stopped as a user.message with
// when_busy of that mode would stop it — interrupt (default) or rollback.
// The stop is durable on the run, so whichever instance runs it applies
// it, and the promoted run is the next to start on whichever instance
// claims it.
func (s *Service) PromoteRun(ctx context.Context, key rein.SessionKey, runID string, mode rein.WhenBusy) (QueuedRun, error) {
	if mode == "" {
		mode = rein.WhenBusyInterrupt
	}
	if mode != rein.WhenBusyInterrupt && mode != rein.WhenBusyRollback {
		return QueuedRun{}, rein.InvalidArgument("mode", "mode must be interrupt or rollback")
	}
	if err := s.unavailableIfDraining(); err != nil {
		return QueuedRun{}, err
	}
	out, target, err := s.life.promote(ctx, key, runID, mode)
	if err != nil {
		return QueuedRun{}, err
	}
	if target != "" {
		s.stopForMessage(key, target, mode)
	} else {
		s.kick(key)
		s.releasedTurn(key)
	}
	return out, nil
}

// QueuePositions returns the place of each queued run of runs (one
// session's) in its queue: 1 = next, in the order the claim takes them
// (queue order, then creation time, then id). Runs not queued are absent.
func QueuePositions(runs []*store.RunRecord) map[string]int {
	var q []*store.RunRecord
	for _, r := range runs {
		if r.Status == rein.StatusQueued {
			q = append(q, r)
		}
	}
	slices.SortStableFunc(q, compareQueued)
	out := make(map[string]int, len(q))
	for i, r := range q {
		out[r.ID] = i + 1
	}
	return out
}

// compareQueued is the order of Tx.Runs: queue order, then creation time,
// then id.
func compareQueued(a, b *store.RunRecord) int {
	switch {
	case a.QueueOrder != b.QueueOrder:
		if a.QueueOrder < b.QueueOrder {
			return -1
		}
		return 1
	case !a.CreatedAt.Equal(b.CreatedAt):
		return a.CreatedAt.Compare(b.CreatedAt)
	}
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

// errNotQueued is the race-honest answer to an edit or a promote of a run
// that has left the queue: its id and status, for the client to show "it
// already started".
func errNotQueued(r *store.RunRecord) error {
	return &rein.Error{Code: rein.CodeConflict, RunID: r.ID, RunStatus: r.Status,
		Message: "the run is no longer queued (" + string(r.Status) + "): only a queued run can be edited or promoted"}
}

// queuedRun reads runID for an edit or a promote: a queued run of the
// session, else not found or errNotQueued.
func queuedRun(tx store.Tx, runID string) (*store.RunRecord, error) {
	rec, err := tx.GetRun(runID)
	if errors.Is(err, rein.ErrNotFound) {
		return nil, rein.Errorf(rein.CodeNotFound, "run not found")
	}
	if err != nil {
		return nil, err
	}
	if rec.Status != rein.StatusQueued {
		return nil, errNotQueued(rec)
	}
	return rec, nil
}

// edit is EditRun's one write.
func (lc *lifecycle) edit(ctx context.Context, key rein.SessionKey, runID string, req EditRunRequest) (QueuedRun, error) {
	var (
		out   QueuedRun
		moved bool
	)
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		out, moved = QueuedRun{}, false
		rec, err := queuedRun(tx, runID)
		if err != nil {
			return err
		}
		queue, err := tx.Runs(rein.StatusQueued)
		if err != nil {
			return err
		}
		var evs []rein.Event
		if req.Text != nil && *req.Text != rec.Input {
			if rec, err = tx.UpdateRun(runID, store.RunUpdate{Input: *req.Text}); err != nil {
				return err
			}
			evs = append(evs, rein.NewEvent(rein.EventRunEdited, runID, rein.RunEditedPayload{RunID: runID, Text: *req.Text}))
		}
		order := ids(queue)
		if req.Position != nil {
			want := moveTo(order, runID, *req.Position)
			if !slices.Equal(want, order) {
				if err := reorder(tx, queue, want); err != nil {
					return err
				}
				order, moved = want, true
				evs = append(evs, queueChanged(order))
			}
		}
		out = QueuedRun{Run: rec, Position: slices.Index(order, runID) + 1}
		if len(evs) == 0 {
			return errNothing
		}
		if moved {
			// The record as stored, its queue order included.
			if out.Run, err = tx.GetRun(runID); err != nil {
				return err
			}
		}
		_, err = tx.AppendEvents(evs...)
		return err
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	return out, err
}

// promote is PromoteRun's one write: the run first in the queue, the
// session's current run marked stopped (as admit marks it for when_busy
// interrupt or rollback), session.queue_changed. It returns the run
// stopped ("" for none).
func (lc *lifecycle) promote(ctx context.Context, key rein.SessionKey, runID string, mode rein.WhenBusy) (QueuedRun, string, error) {
	var (
		out    QueuedRun
		target string
	)
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		out, target = QueuedRun{}, ""
		if _, err := queuedRun(tx, runID); err != nil {
			return err
		}
		active, err := tx.Runs(activeStatuses...)
		if err != nil {
			return err
		}
		var (
			running *store.RunRecord
			queue   []*store.RunRecord
		)
		for _, r := range active {
			if r.Status == rein.StatusRunning {
				running = r
			} else {
				queue = append(queue, r)
			}
		}
		order := moveTo(ids(queue), runID, 1)
		if queue[0].ID != runID {
			// Ahead of every run queued, as a when_busy interrupt message
			// would be: of several, the newest promote or message first.
			front := min(-tx.Now().UnixNano(), queue[0].QueueOrder-1)
			if _, err := tx.UpdateRun(runID, store.RunUpdate{QueueOrder: &front}); err != nil {
				return err
			}
		}
		rec, err := tx.GetRun(runID)
		if err != nil {
			return err
		}
		if running != nil {
			stop := store.StopInterrupt
			if mode == rein.WhenBusyRollback {
				stop = store.StopRollback
			}
			if stop.Outranks(running.Stop) {
				if _, err := tx.UpdateRun(running.ID, store.RunUpdate{Stop: stop}); err != nil {
					return err
				}
			}
			target = running.ID
		}
		out = QueuedRun{Run: rec, Position: 1}
		_, err = tx.AppendEvents(queueChanged(order))
		return err
	})
	return out, target, err
}

// moveTo returns order with id moved to position pos (1 = first; beyond
// the end, last).
func moveTo(order []string, id string, pos int) []string {
	out := slices.DeleteFunc(slices.Clone(order), func(s string) bool { return s == id })
	i := min(pos-1, len(out))
	return slices.Insert(out, i, id)
}

// reorder gives the queued runs (in their current order) the order want,
// by handing out the queue orders they already have, lowest to the first:
// the queue keeps its place among runs admitted later (enqueued after it,
// when_busy interrupt ahead of it). Equal orders (admitted at one instant)
// are made distinct so the new order does not fall back on creation times.
func reorder(tx store.Tx, queue []*store.RunRecord, want []string) error {
	vals := make([]int64, len(queue))
	byID := make(map[string]*store.RunRecord, len(queue))
	for i, r := range queue {
		vals[i] = r.QueueOrder
		byID[r.ID] = r
	}
	slices.Sort(vals)
	for i := 1; i < len(vals); i++ {
		vals[i] = max(vals[i], vals[i-1]+1)
	}
	for i, id := range want {
		if byID[id].QueueOrder == vals[i] {
			continue
		}
		if _, err := tx.UpdateRun(id, store.RunUpdate{QueueOrder: &vals[i]}); err != nil {
			return err
		}
	}
	return nil
}

func ids(runs []*store.RunRecord) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

// queueChanged is the session.queue_changed of a queue in this order.
func queueChanged(order []string) rein.Event {
	if order == nil {
		order = []string{}
	}
	return rein.NewEvent(rein.EventQueueChanged, "", rein.QueueChangedPayload{Queued: order})
}

// queueWith is the queue once rec joins the queued runs of active (in
// Tx.Runs order), at its place by queue order.
func queueWith(active []*store.RunRecord, rec *store.RunRecord) []string {
	out := make([]string, 0, len(active)+1)
	placed := false
	for _, r := range active {
		if r.Status != rein.StatusQueued {
			continue
		}
		if !placed && compareQueued(rec, r) < 0 {
			out, placed = append(out, rec.ID), true
		}
		out = append(out, r.ID)
	}
	if !placed {
		out = append(out, rec.ID)
	}
	return out
}
