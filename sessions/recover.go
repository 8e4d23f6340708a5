package sessions

import (
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/reinhq/rein"
)

// Start takes up the work the store holds: every session with a queued or
// running run gets its schedule looked at (lifecycle.claimNext), so queued
// runs start in order without waiting for a request and runs whose
// instance was lost are resumed once their lease has expired by the store's
// clock. It then keeps looking, every TTL/3, for sessions left by lost
// instances, until Drain or Close; with Config.Retention set it also
// sweeps idle sessions (SweepRetention) until then.
func (s *Service) Start(ctx context.Context) error {
	if err := s.scan(ctx); err != nil {
		return err
	}
	s.startExpiry()
	s.listen()
	s.heartbeat()
	s.wg.Add(2)
	go s.renewLoop()
	go s.reapLoop()
	s.startRetention()
	return nil
}

// scan kicks the pump of every session with an active run in the store,
// and counts the runs this instance left parked (Stats.Parked) from the
// same read.
func (s *Service) scan(ctx context.Context) error {
	active, err := s.st.ListRunsByStatus(ctx, rein.StatusRunning, rein.StatusQueued)
	if err != nil {
		return err
	}
	s.parked.Store(int64(s.countParked(active)))
	seen := map[rein.SessionKey]bool{}
	for _, r := range active {
		k := r.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		s.kick(k)
	}
	return nil
}

// reapLoop looks for work left by lost instances.
func (s *Service) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if s.draining.Load() {
			continue
		}
		if err := s.scan(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("look for runs of lost instances", "err", err)
		}
	}
}

// Drain shuts the service down gracefully (docs/api.md Shutdown): it stops
// admitting work, interrupts running runs cooperatively, cancels those still
// running after timeout, leaves queued runs queued in the store, waits until
// every ended run's session.run_completed is recorded, and flushes. ctx
// bounds the whole drain.
func (s *Service) Drain(ctx context.Context, timeout time.Duration) error {
	began := time.Now()
	s.draining.Store(true)
	touched := map[rein.SessionKey]bool{}
	t := time.NewTimer(timeout)
	defer t.Stop()
	// Children first: the deepest activations are interrupted and waited
	// for (within the timeout) before the level above, so a parent's step
	// sees its children's interrupted ends (their replies, their notices)
	// rather than being cut while they still run.
	levels := map[int][]*liveRun{}
	for _, lr := range s.executing() {
		lr.mu.Lock()
		d := lr.depth
		lr.mu.Unlock()
		levels[d] = append(levels[d], lr)
	}
	depths := slices.Sorted(maps.Keys(levels))
	slices.Reverse(depths)
	expired := false
	for i, d := range depths {
		for _, lr := range levels[d] {
			touched[lr.key()] = true
			lr.drainStop(drainInterrupted)
		}
		if i < len(depths)-1 && !expired {
			expired = !waitEnded(ctx, levels[d], t.C)
		}
	}
	if expired || !s.waitIdle(ctx, t.C) {
		runs := s.executing()
		s.log.Warn("drain timeout: cancelling the runs still running", "runs", len(runs), "drain_timeout", timeout)
		for _, lr := range runs {
			lr.drainStop(drainCancelled)
		}
		s.waitIdle(ctx, nil)
	}
	sum := drainStats{queued: s.heldWaiting()}
	// The runs it stopped, as they were let go (a run left waiting for its
	// confirmations is counted with the parked runs below).
	s.mu.Lock()
	sum.interrupted, sum.cancelled = s.drained[drainInterrupted], s.drained[drainCancelled]
	s.mu.Unlock()
	// The runs left waiting for confirmations, parked before the drain or
	// during it: the store says which are this instance's.
	if active, err := s.st.ListRunsByStatus(ctx, rein.StatusRunning); err == nil {
		sum.parked = s.waitingForAnswers(ctx, active)
	}
	s.leave()
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
	sum.took = time.Since(began)
	s.logDrain(sum)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// waitEnded waits until every run of runs has ended; false when timeout
// fired first (it is then spent). ctx ending stops the wait too.
func waitEnded(ctx context.Context, runs []*liveRun, timeout <-chan time.Time) bool {
	for _, lr := range runs {
		select {
		case <-lr.done:
		case <-timeout:
			return false
		case <-ctx.Done():
			return true
		}
	}
	return true
}

// heldWaiting counts the runs held here that never started: they stay
// queued in the store.
func (s *Service) heldWaiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, lr := range s.live {
		if lr.state().held() {
			n++
		}
	}
	return n
}

// executing returns the runs that hold their session's turn here and are
// not let go yet.
func (s *Service) executing() []*liveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*liveRun
	for _, lr := range s.live {
		if lr.state().claimedHere() {
			out = append(out, lr)
		}
	}
	return out
}

// waitIdle waits until no run executes here, or until timeout fires or ctx
// ends (false). Queued runs held here are not waited for: they stay queued
// in the store.
func (s *Service) waitIdle(ctx context.Context, timeout <-chan time.Time) bool {
	for {
		runs := s.executing()
		if len(runs) == 0 {
			return true
		}
		select {
		case <-runs[0].done:
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
	s.closing.Store(true)
	s.draining.Store(true)
	for _, lr := range s.executing() {
		lr.h.Cancel()
	}
	s.waitIdle(context.Background(), nil)
	s.leave()
	s.stop()
	s.wg.Wait()
	return nil
}
