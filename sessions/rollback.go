package sessions

import (
	"context"
	"errors"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// RollbackRun stops exactly runID as a when_busy rollback stops the run it
// replaces, without a message to replace it (LangGraph's runs.cancel with
// action rollback, docs/protocols.md): a running run is cancelled at once,
// its turn is left out of every later model request and its
// session.run_completed says rolled_back. The stop is recorded on the run
// and its user.interrupt logged in one write, so whoever runs or resumes
// the run applies it, on any instance, after any crash; then the run is
// stopped where it executes. A queued run has produced nothing: it is
// cancelled as by Interrupt. A run that has ended (or is unknown) is
// answered accepted=false and is not touched.
func (s *Service) RollbackRun(ctx context.Context, key rein.SessionKey, runID string) (InterruptResult, error) {
	if runID == "" {
		return InterruptResult{}, rein.InvalidArgument("run_id", "run_id must be a non-empty string")
	}
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return InterruptResult{}, err
	}
	var accepted, queued bool
	err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		accepted, queued = false, false
		rec, err := tx.GetRun(runID)
		if err != nil && !errors.Is(err, rein.ErrNotFound) {
			return err
		}
		if rec != nil && (rec.Status == rein.StatusQueued || rec.Status == rein.StatusCreated) {
			queued = true
			return errNothing
		}
		accepted = rec != nil && !rec.Status.Terminal()
		if _, err := tx.AppendEvents(interruptEvent(runID, "", rein.StopCancel, nil, accepted)); err != nil {
			return err
		}
		if !accepted || !store.StopRollback.Outranks(rec.Stop) {
			return nil
		}
		_, err = tx.UpdateRun(runID, store.RunUpdate{Stop: store.StopRollback})
		return err
	})
	if err != nil && !errors.Is(err, errNothing) {
		return InterruptResult{}, err
	}
	if queued {
		return s.Interrupt(ctx, key, InterruptRequest{RunID: &runID, Mode: rein.StopCancel})
	}
	if accepted {
		s.stopForMessage(key, runID, rein.WhenBusyRollback)
	}
	return InterruptResult{Accepted: accepted, RunID: runID}, nil
}
