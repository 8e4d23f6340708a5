package sessions

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// DeleteSession deletes an idle session for good, with every session below
// it (its subagent children, theirs, and so on): events, history, runs,
// supplements, confirmations, leases, idempotency keys, subagent
// descriptors and each one's workspace folder (docs/api.md).
//
// A session is idle when no run of it or of any session below it is queued
// or running — a run parked waiting for a tool confirmation is running.
// Otherwise it answers rein.ErrSessionBusy with the RunID of such a run,
// and deletes nothing. The check and the deletion are one store
// transaction that holds every session of the tree (store.Deleter), so a
// user.message admitted at the same moment, on this instance or another,
// either makes the deletion busy or finds the session gone
// (rein.ErrNotFound): a deleted session never has a run. A missing session,
// or another owner's, is rein.ErrNotFound.
//
// Once it has returned, event streams of the deleted sessions end (their
// WaitEvents answers not found) on every instance.
func (s *Service) DeleteSession(ctx context.Context, key rein.SessionKey) error {
	_, err := s.deleteTree(ctx, key, nil)
	return err
}

// deleteTree deletes key's tree unless it is busy or refuse (when set)
// refuses it, then removes the deleted sessions' workspaces.
func (s *Service) deleteTree(ctx context.Context, key rein.SessionKey, refuse func(tree []*store.TreeSession) error) ([]*store.Session, error) {
	deleted, err := s.st.DeleteSession(ctx, key, func(now time.Time, tree []*store.TreeSession) error {
		if err := busyTree(now, tree); err != nil {
			return err
		}
		if refuse != nil {
			return refuse(tree)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, sess := range deleted {
		dir := s.workspace(sess.Key())
		if dir == "" {
			continue
		}
		// The store no longer has the session: failing the call now would
		// only make the caller retry into a 404. The folder is reported
		// for an operator to remove.
		if err := os.RemoveAll(dir); err != nil {
			s.log.Error("remove the workspace of a deleted session", "session", sess.ID, "dir", dir, "err", err)
		}
	}
	return deleted, nil
}

// busyTree refuses a tree with a queued or running run, naming one: a
// running run before a queued one, the session asked for before those
// below it. A live lease without such a run (which a run's end releases in
// the same write) counts as busy too: its turn is held.
func busyTree(now time.Time, tree []*store.TreeSession) error {
	var queued, held string
	for _, ts := range tree {
		for _, r := range ts.Active {
			if r.Status == rein.StatusRunning {
				return errTreeBusy(r.ID)
			}
			if queued == "" {
				queued = r.ID
			}
		}
		if held == "" && ts.Lease != nil && ts.Lease.ExpiresAt.After(now) {
			held = ts.Lease.RunID
		}
	}
	switch {
	case queued != "":
		return errTreeBusy(queued)
	case held != "":
		return errTreeBusy(held)
	}
	return nil
}

func errTreeBusy(runID string) error {
	return &rein.Error{Code: rein.CodeSessionBusy, RunID: runID,
		Message: "the session, or one of its subagent sessions, has a queued or running run; stop it before deleting the session"}
}

// ---------------------------------------------------------------- retention

// sweepPage is how many candidate sessions one store read of a sweep takes.
const sweepPage = 256

// errRecent refuses a retention deletion of a tree active since the cutoff.
var errRecent = errors.New("sessions: active within the retention period")

// SweepRetention applies Config.Retention once, now: it deletes every root
// session (with the sessions below it) whose tree is idle — no run of any
// of them queued or running — and whose newest activity (the last event of
// any session of the tree, or its creation when it has none) is older than
// Retention by the service's clock. It returns how many root sessions it
// deleted; with Retention 0 it does nothing.
//
// The sweeper Start runs calls it on every instance; several sweeping at
// once is safe, since each deletion is atomic and re-checks the tree, and a
// session that became busy or active meanwhile is skipped. Each deletion
// is logged at info with the session and its age.
func (s *Service) SweepRetention(ctx context.Context) (int, error) {
	if s.cfg.Retention <= 0 {
		return 0, nil
	}
	now := s.now()
	cutoff := now.Add(-s.cfg.Retention)
	deleted := 0
	var after rein.SessionKey
	for {
		page, err := s.st.ListInactive(ctx, cutoff, after, sweepPage)
		if err != nil {
			return deleted, err
		}
		for _, c := range page {
			after = c.Key
			var last time.Time
			tree, err := s.deleteTree(ctx, c.Key, func(tree []*store.TreeSession) error {
				last = time.Time{}
				for _, ts := range tree {
					if ts.LastActivity.After(last) {
						last = ts.LastActivity
					}
				}
				if !last.Before(cutoff) {
					return errRecent
				}
				return nil
			})
			switch {
			case err == nil:
				deleted++
				s.log.Info("deleted an idle session (retention)", "owner", c.Key.Owner, "session", c.Key.ID,
					"age", now.Sub(last).Round(time.Second), "sessions", len(tree))
			case errors.Is(err, errRecent), errors.Is(err, rein.ErrSessionBusy), errors.Is(err, rein.ErrNotFound):
				// Active again, busy, or deleted by someone else meanwhile.
			default:
				return deleted, err
			}
		}
		if len(page) < sweepPage {
			return deleted, nil
		}
	}
}

// sweepEvery is how often each instance sweeps: a tenth of the retention
// period, at least a second and at most a minute apart, so a session
// outlives its retention by at most that.
func sweepEvery(retention time.Duration) time.Duration {
	return min(max(retention/10, time.Second), time.Minute)
}

// startRetention starts the sweeper when Config.Retention is set (Start
// calls it); with retention off there is no goroutine at all. The sweeper
// ends with the service's context (Drain, Close).
func (s *Service) startRetention() {
	if s.cfg.Retention <= 0 {
		return
	}
	s.wg.Add(1)
	go s.retentionLoop(sweepEvery(s.cfg.Retention))
}

// retentionLoop sweeps at once — a restarted instance catches up without
// waiting a period — and then every period, until the service stops.
func (s *Service) retentionLoop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if !s.draining.Load() {
			if _, err := s.SweepRetention(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("retention sweep", "err", err)
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}
