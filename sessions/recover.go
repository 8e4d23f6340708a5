package sessions

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// lostInstance is the error recorded on a run whose instance died.
const lostInstance = "instance lost: the run's instance stopped renewing its turn lease"

// Start resumes work left in the store: queued runs start in order without
// waiting for a request, and runs left RUNNING by a lost instance are
// recorded FAILED once their lease has expired (at the latest one lease TTL
// after start). It then keeps watching for such runs until Drain or Close.
func (s *Service) Start(ctx context.Context) error {
	queued, err := s.st.ListRunsByStatus(ctx, rein.StatusQueued)
	if err != nil {
		return err
	}
	bySession := map[rein.SessionKey][]*store.RunRecord{}
	var order []rein.SessionKey
	for _, r := range queued {
		k := r.Key()
		if _, ok := bySession[k]; !ok {
			order = append(order, k)
		}
		bySession[k] = append(bySession[k], r)
	}
	for _, k := range order {
		runs := bySession[k]
		sortQueue(runs)
		unlock := s.lock(k)
		for _, r := range runs {
			s.mu.Lock()
			_, live := s.live[r.ID]
			s.mu.Unlock()
			if live {
				continue
			}
			if _, err := s.launch(r, false); err != nil {
				s.log.Error("resume queued run", "session", k.String(), "run", r.ID, "err", err)
			}
		}
		unlock()
	}
	s.wg.Add(1)
	go s.reapLoop()
	return nil
}

// reapLoop records runs of lost instances as failed. It looks every TTL/3,
// and wakes exactly when a lease it saw held by a lost run expires, so such
// a run is recorded within one TTL of this instance starting.
func (s *Service) reapLoop() {
	defer s.wg.Done()
	interval := s.cfg.LeaseTTL / 3
	for {
		wait := interval
		if next := s.reapOrphans(s.ctx); !next.IsZero() {
			if d := next.Sub(s.now()) + time.Millisecond; d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reapOrphans finds RUNNING runs that no live instance holds a lease for
// and ends them FAILED with reason error. It returns the earliest expiry of
// a lease still held by such a run (zero if none), when it should look
// again.
func (s *Service) reapOrphans(ctx context.Context) (next time.Time) {
	running, err := s.st.ListRunsByStatus(ctx, rein.StatusRunning)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("look for orphaned runs", "err", err)
		}
		return time.Time{}
	}
	now := s.now()
	for _, r := range running {
		s.mu.Lock()
		_, live := s.live[r.ID]
		s.mu.Unlock()
		if live {
			continue
		}
		key := r.Key()
		l, err := s.st.GetLease(ctx, key)
		switch {
		case err == nil && l.ExpiresAt.After(now):
			// Someone holds the turn. If it is this run's own lease, its
			// instance may be gone: look again the moment it expires.
			if l.RunID == r.ID && (next.IsZero() || l.ExpiresAt.Before(next)) {
				next = l.ExpiresAt
			}
			continue
		case err != nil && !errors.Is(err, rein.ErrNotFound):
			continue
		}
		s.reapWithLease(ctx, key, r.ID)
	}
	return next
}

// reapWithLease takes the session's turn to record a lost run's end, then
// gives it back — unless a run of ours is about to take it anyway.
func (s *Service) reapWithLease(ctx context.Context, key rein.SessionKey, orphanID string) {
	if running, queued := s.engine.Lane(key); running != nil || len(queued) > 0 {
		return // our own run will reap when it acquires the lease
	}
	l, err := s.st.AcquireLease(ctx, key, s.cfg.Instance, orphanID, s.cfg.LeaseTTL)
	if err != nil {
		return
	}
	s.reapSession(ctx, key, l, "")
	if err := s.st.ReleaseLease(ctx, l); err != nil {
		s.log.Warn("release turn lease after recovery", "session", key.String(), "err", err)
	}
}

// reapSession is called holding the session's lease: every RUNNING run of
// the session other than self belonged to a lost holder and is recorded
// FAILED, with synthetic results for its unanswered tool calls and its
// session.run_completed.
func (s *Service) reapSession(ctx context.Context, key rein.SessionKey, l *store.Lease, self string) {
	runs, err := s.st.ListRuns(ctx, key)
	if err != nil {
		s.log.Warn("recover session", "session", key.String(), "err", err)
		return
	}
	for _, r := range runs {
		if r.Status != rein.StatusRunning || r.ID == self {
			continue
		}
		s.mu.Lock()
		_, live := s.live[r.ID]
		s.mu.Unlock()
		if live {
			continue
		}
		evs := s.unansweredToolResults(ctx, key, r.ID)
		if _, err := s.st.UpdateRun(ctx, key, l.Fence(), r.ID, store.RunUpdate{
			Status: rein.StatusFailed, Reason: rein.ReasonError, Error: lostInstance, EndedAt: s.now()}); err != nil {
			if !errors.Is(err, rein.ErrConflict) {
				s.log.Warn("record lost run", "session", key.String(), "run", r.ID, "err", err)
			}
			continue
		}
		evs = append(evs, rein.NewEvent(rein.EventRunCompleted, r.ID, rein.RunCompletedPayload{
			RunID: r.ID, Status: rein.StatusFailed, Reason: rein.ReasonError, Error: lostInstance}))
		if _, err := s.appendEvents(ctx, key, l.Fence(), evs); err != nil {
			s.log.Warn("record lost run completion", "session", key.String(), "run", r.ID, "err", err)
		}
		if err := s.st.CloseConfirmations(ctx, key, r.ID); err != nil {
			s.log.Warn("close confirmations of lost run", "session", key.String(), "run", r.ID, "err", err)
		}
		s.log.Info("recorded lost run as failed", "session", key.String(), "run", r.ID)
	}
}

// unansweredToolResults returns synthetic agent.tool_result events for the
// run's agent.tool_use events that have no result in the log, so the log
// tells the same story as the repaired transcript.
func (s *Service) unansweredToolResults(ctx context.Context, key rein.SessionKey, runID string) []rein.Event {
	open := map[string]bool{}
	var order []string
	after := int64(0)
	for {
		evs, last, err := s.st.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return nil
		}
		for _, e := range evs {
			if e.RunID != runID {
				continue
			}
			switch e.Type {
			case rein.EventToolUse:
				var p rein.ToolUsePayload
				if e.DecodePayload(&p) == nil {
					open[p.ToolUseID] = true
					order = append(order, p.ToolUseID)
				}
			case rein.EventToolResult:
				var p rein.ToolResultPayload
				if e.DecodePayload(&p) == nil {
					delete(open, p.ToolUseID)
				}
			}
		}
		if len(evs) == 0 || evs[len(evs)-1].Seq >= last {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	var out []rein.Event
	for _, id := range order {
		if open[id] {
			out = append(out, rein.NewEvent(rein.EventToolResult, runID, rein.ToolResultPayload{
				RunID: runID, ToolUseID: id, Output: rein.InterruptedToolOutput, IsError: true}))
		}
	}
	return out
}

// Drain shuts the service down gracefully (SPEC §3 Shutdown): it stops
// admitting work, interrupts running runs cooperatively, cancels those still
// running after timeout, leaves queued runs queued in the store, waits until
// every ended run's session.run_completed is recorded, and flushes. ctx
// bounds the whole drain.
func (s *Service) Drain(ctx context.Context, timeout time.Duration) error {
	s.draining.Store(true)
	touched := map[rein.SessionKey]bool{}
	for _, h := range s.registry.Runs() {
		touched[h.Session()] = true
		if h.Status() == rein.StatusRunning {
			h.Interrupt("server shutting down")
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	if !s.waitIdle(ctx, t.C) {
		for _, h := range s.registry.Runs() {
			if h.Status() == rein.StatusRunning {
				h.Cancel()
			}
		}
		s.waitIdle(ctx, nil)
	}
	s.stop()
	s.wg.Wait()
	keys := make([]rein.SessionKey, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var firstErr error
	for _, k := range keys {
		if _, err := s.st.Flush(ctx, k); err != nil && firstErr == nil {
			firstErr = err
			s.log.Warn("flush on shutdown", "session", k.String(), "err", err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// waitIdle waits until no run is live, or until timeout fires or ctx ends
// (false).
func (s *Service) waitIdle(ctx context.Context, timeout <-chan time.Time) bool {
	for {
		runs := s.registry.Runs()
		if len(runs) == 0 {
			return true
		}
		select {
		case <-runs[0].Done():
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Close stops everything at once: running runs are cancelled (their ends
// recorded), queued ones stay queued in the store. For tests and embedded
// use; servers call Drain.
func (s *Service) Close() error {
	s.draining.Store(true)
	for _, h := range s.registry.Runs() {
		if h.Status() == rein.StatusRunning {
			h.Cancel()
		}
	}
	s.waitIdle(context.Background(), nil)
	s.stop()
	s.wg.Wait()
	return nil
}
