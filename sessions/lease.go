// Lease renewal: one loop for the instance keeps the turn leases of the runs
// it executes alive, and fences a run whose lease was lost.

package sessions

import (
	"errors"
	"time"

	"github.com/reinhq/rein"
)

// renewLoop keeps the leases of the runs this instance executes alive: one
// loop for the instance, not one per run. A lease found lost fences the
// run at once: it writes nothing more and its execution here is cancelled.
func (s *Service) renewLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.heartbeat()
		s.mu.Lock()
		runs := make([]*liveRun, 0, len(s.live))
		for _, lr := range s.live {
			runs = append(runs, lr)
		}
		s.mu.Unlock()
		for _, lr := range runs {
			lr.mu.Lock()
			l, ok := lr.lease, lr.st == stClaimed || lr.st == stExecuting || lr.st == stEnding
			lr.mu.Unlock()
			if !ok || l == nil {
				continue
			}
			nl, err := s.st.RenewLease(s.ctx, l, s.cfg.LeaseTTL)
			switch {
			case err == nil:
				lr.mu.Lock()
				if lr.lease == l {
					lr.lease = nl
				}
				lr.mu.Unlock()
				// A stop recorded on the run while its instance message was
				// lost is applied here, at the latest one renewal later.
				s.applyRecordedStop(lr.id)
			case errors.Is(err, rein.ErrLeaseLost):
				// A run that is ending is left alone: its end (or its
				// parking) releases the lease in the same write, and that
				// write, fenced, is what finds out whether the lease was
				// really lost.
				lr.mu.Lock()
				current := lr.lease == l && lr.move(bits(stClaimed, stExecuting), stFenced)
				lr.mu.Unlock()
				if current {
					s.log.Error("turn lease lost; the run is fenced and stopped here", "session", lr.key().String(), "run", lr.id)
					lr.w.fail(rein.ErrLeaseLost)
					lr.h.Cancel()
				}
			case s.ctx.Err() != nil:
				return
			default:
				s.log.Warn("renew turn lease", "session", lr.key().String(), "run", lr.id, "err", err)
			}
		}
	}
}
