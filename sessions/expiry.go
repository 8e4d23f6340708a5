// Confirmation expiry: a tool confirmation left unanswered past its
// ExpiresAt is denied with the message "expired", by whichever instance
// sharing the store is up (decision 0095).

package sessions

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// expiryBatch is how many due confirmations one read of a sweep takes.
const expiryBatch = 100

// expiryRetry is how soon a sweep looks again at a confirmation it found
// due but could not expire (the store's clock a little behind this
// instance's, or the store failing): soon, but never in a hot loop.
const expiryRetry = time.Second

// expiry wakes the instance's sweep of due confirmations: a timer for the
// nearest expiry this instance knows of, and a scan at start and every
// interval that learns the nearest one in the whole store (another
// instance's, which it expires if that instance is gone). No polling in
// between: a sweep is two indexed reads and one write per expiry.
type expiry struct {
	mu    sync.Mutex
	timer *time.Timer
	next  time.Time // when timer fires; zero: not armed
	wake  chan struct{}
	clock rein.Clock
}

// due arms the timer for at, unless it already fires earlier.
func (e *expiry) due(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wake == nil || (!e.next.IsZero() && !at.Before(e.next)) {
		return
	}
	e.next = at
	d := max(at.Sub(e.clock.Now()), 0)
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.poke)
	} else {
		e.timer.Reset(d)
	}
}

// poke wakes the sweep.
func (e *expiry) poke() {
	e.mu.Lock()
	e.next = time.Time{}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *expiry) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.timer != nil {
		e.timer.Stop()
	}
}

// expiryInterval is how often an instance scans the store for the nearest
// expiry, so that another instance's confirmations expire also once that
// instance is gone: the lease TTL's third, as the scan for lost runs.
func (s *Service) expiryInterval() time.Duration { return s.cfg.LeaseTTL / 3 }

// startExpiry sweeps once (what fell due while no instance ran) and keeps
// the sweep going until the service stops.
func (s *Service) startExpiry() {
	s.expiry.mu.Lock()
	s.expiry.wake = make(chan struct{}, 1)
	s.expiry.clock = s.cfg.Clock
	s.expiry.mu.Unlock()
	s.sweepExpiries(s.ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.expiry.stop()
		t := time.NewTicker(s.expiryInterval())
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-s.expiry.wake:
			case <-t.C:
			}
			s.sweepExpiries(s.ctx)
		}
	}()
}

// sweepExpiries expires every confirmation due now and arms the timer for
// the next one.
func (s *Service) sweepExpiries(ctx context.Context) {
	for {
		now := s.now()
		due, err := s.st.DueConfirmations(ctx, now, expiryBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("read due confirmations", "err", err)
				s.expiry.due(now.Add(expiryRetry))
			}
			return
		}
		expired := 0
		for _, c := range due {
			ok, err := s.expireConfirmation(ctx, rein.SessionKey{Owner: c.Owner, ID: c.SessionID}, c.ToolUseID)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("expire confirmation", "session", c.SessionID, "tool_use_id", c.ToolUseID, "err", err)
			}
			if ok {
				expired++
			}
		}
		if len(due) < expiryBatch || expired == 0 {
			break
		}
	}
	next, err := s.st.DueConfirmations(ctx, time.Time{}, 1)
	if err != nil || len(next) == 0 {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("read the next confirmation expiry", "err", err)
		}
		return
	}
	at := next[0].ExpiresAt
	if now := s.now(); !at.After(now) {
		// Due but not expired by this sweep: the store's clock says not
		// yet, or the write failed. Look again soon.
		at = now.Add(expiryRetry)
	}
	s.expiry.due(at)
}

// expireConfirmation expires one due confirmation (lifecycle.expire) and
// wakes its run as an answer would: ok is whether this call expired it.
// Of several instances, and of an expiry and an answer, exactly one
// writes; the others find it no longer pending and do nothing.
func (s *Service) expireConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (bool, error) {
	c, err := s.life.expire(ctx, key, toolUseID)
	if errors.Is(err, rein.ErrConflict) || errors.Is(err, rein.ErrNotFound) {
		return false, nil // answered, expired by another, not due yet, or deleted
	}
	if err != nil {
		return false, err
	}
	if !s.gate.Deliver(key, toolUseID, tool.Decision{Allow: false, DenyMessage: c.DenyMessage}) {
		// The run is parked (or waits on another instance): its session's
		// schedule takes it up, here, and it goes on with the denial.
		s.kick(key)
	}
	return true, nil
}

// expire is the expiry of a confirmation whose time has come: the call
// denied with the message "expired" and session.confirmation_expired, in
// one write. Unfenced, like an answer: the confirmation's state is the
// fence (store.Tx.ExpireConfirmation).
func (lc *lifecycle) expire(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	var c *store.Confirmation
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		if c, err = tx.ExpireConfirmation(toolUseID); err != nil {
			return err
		}
		_, err = tx.AppendEvents(rein.NewEvent(rein.EventConfirmationExpired, c.RunID,
			rein.ConfirmationExpiredPayload{RunID: c.RunID, ToolUseID: toolUseID}))
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}
