// The per-session pump: asks the store what runs next (claimNext) and starts
// what this instance claimed; woken by local admissions and ends.

package sessions

import (
	"time"

	"github.com/reinhq/rein"
)

// pump drives one session's schedule on this instance: it asks the store
// (lifecycle.claimNext) what runs next and starts what this instance
// claimed. It runs while the session has runs held here, or work the
// store says is left by a lost instance, and is woken by local admissions
// and ends.
type pump struct {
	wake chan struct{}
}

// kick wakes the session's pump, starting one if none runs.
func (s *Service) kick(key rein.SessionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	if p := s.pumps[key]; p != nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return
	}
	p := &pump{wake: make(chan struct{}, 1)}
	s.pumps[key] = p
	s.wg.Add(1)
	go s.runPump(key, p)
}

// pumpRetry is how often a pump looks again while the turn is held by
// another instance or the store fails.
func (s *Service) pumpRetry() time.Duration { return s.cfg.LeaseTTL / 3 }

func (s *Service) runPump(key rein.SessionKey, p *pump) {
	defer s.wg.Done()
	failures := 0 // consecutive failed schedule reads
	for {
		if s.draining.Load() || s.ctx.Err() != nil {
			s.dropPump(key, p, true)
			return
		}
		c, err := s.life.claimNext(s.ctx, key, s.waiting(key), s, s.isAdmitting(key))
		wait := c.wait
		if err != nil {
			// Said once per outage of the session's schedule, not at every
			// retry: a store that is down for a minute would otherwise
			// flood the log with one line per session every retry.
			if s.ctx.Err() == nil {
				if failures == 0 {
					s.log.Warn("schedule session: the store failed; retrying", "session", key.String(), "retry_every", s.pumpRetry(), "err", err)
				} else {
					s.log.Debug("schedule session: the store failed again", "session", key.String(), "failures", failures+1, "err", err)
				}
			}
			failures++
			wait = s.pumpRetry()
		} else {
			if failures > 0 {
				s.log.Info("schedule session: the store answers again", "session", key.String(), "failures", failures)
				failures = 0
			}
			s.observeClaim(key, c)
		}
		for _, id := range c.ended {
			s.runEndedInStore(key, id)
		}
		for _, id := range c.ended {
			if lr := s.liveRun(id); lr != nil {
				s.settled(lr, stEnded)
			}
		}
		for _, id := range c.gone {
			if lr := s.liveRun(id); lr != nil {
				s.settled(lr, stHandedOff)
			}
		}
		if c.rec != nil {
			s.startClaimed(c)
			continue
		}
		if len(c.ended) > 0 || len(c.gone) > 0 {
			continue
		}
		if !s.holdsWork(key) {
			if s.dropPump(key, p, false) {
				return
			}
			continue
		}
		// Otherwise wait: runs held here end (letGo kicks), admissions
		// kick, and a turn held elsewhere is looked at again at its expiry.
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-p.wake:
		case <-fire:
		case <-s.ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// admitting marks an admission in flight on key until admitted(key).
func (s *Service) admitting(key rein.SessionKey) {
	s.mu.Lock()
	s.admits[key]++
	s.mu.Unlock()
}

// admitDone ends what admitting(key) began.
func (s *Service) admitDone(key rein.SessionKey) {
	s.mu.Lock()
	if s.admits[key]--; s.admits[key] == 0 {
		delete(s.admits, key)
	}
	s.mu.Unlock()
}

func (s *Service) isAdmitting(key rein.SessionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admits[key] > 0
}

// runEndedInStore reports a run that a schedule write ended (lost beyond
// its resumes, expired, stopped while no one ran it).
func (s *Service) runEndedInStore(key rein.SessionKey, runID string) {
	rec, err := s.st.GetRun(s.ctx, key, runID)
	if err != nil || !rec.Status.Terminal() {
		return
	}
	s.logEnd(rec, "")
	if s.cfg.OnRunEnd == nil {
		return
	}
	var reply *string
	if rec.Reason.HasReply() {
		empty := ""
		reply = &empty
	}
	s.runEnded(key, runID, rec.Status, rec.Reason, reply)
}

// waiting returns the runs of the session held here and not started.
func (s *Service) waiting(key rein.SessionKey) []string {
	s.mu.Lock()
	var lrs []*liveRun
	for lr := s.local[key]; lr != nil; lr = lr.nextLocal {
		lrs = append(lrs, lr)
	}
	s.mu.Unlock()
	var out []string
	for _, lr := range lrs {
		lr.mu.Lock()
		// A handle held for a run claimed at once (admitted RUNNING, or
		// claimed by a pump) is about to be started by its claimer: it
		// waits for nothing, and must not be taken for one gone.
		if lr.st.held() && lr.rec.Status == rein.StatusQueued {
			out = append(out, lr.id)
		}
		lr.mu.Unlock()
	}
	return out
}

// holdsWork reports whether this instance holds any run of the session.
func (s *Service) holdsWork(key rein.SessionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[key] != nil
}

// dropPump removes p unless a wake is pending (force: regardless); it
// reports whether it did.
func (s *Service) dropPump(key rein.SessionKey, p *pump, force bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && len(p.wake) > 0 {
		<-p.wake
		return false
	}
	if s.pumps[key] == p {
		delete(s.pumps, key)
	}
	return true
}
