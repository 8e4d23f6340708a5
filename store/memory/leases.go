package memory

import (
	"context"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// AcquireLease implements store.Tx. A lease that has not expired is never
// taken over, not even by the run that holds it: a second acquisition by
// the same run id is a second claim of the turn, and only expiry proves
// the first holder gone.
func (t *tx) AcquireLease(holder, runID string, ttl time.Duration) (*store.Lease, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	ss := t.ss
	if l := ss.lease; l != nil && l.ExpiresAt.After(t.now) {
		return nil, errBusy(l.RunID)
	}
	// The token counter is not undone on rollback: a token a failed
	// transaction handed out is then never issued again, which keeps
	// "never reused" true even for a caller that wrongly kept it.
	t.s.nextToken++
	prev := ss.lease
	ss.lease = &store.Lease{
		Owner: t.key.Owner, SessionID: t.key.ID, RunID: runID, Holder: holder,
		Token: t.s.nextToken, ExpiresAt: norm(t.now.Add(ttl)),
	}
	t.onUndo(func() { ss.lease = prev })
	return cloneLease(ss.lease), nil
}

// RenewLease implements store.Leases. An expired lease is lost even if no
// one took it over: its holder may already have been declared dead.
func (s *Store) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	var out *store.Lease
	err := s.update(ctx, l.Key(), store.Fence{}, func(t *tx) error {
		cur := t.ss.lease
		if cur == nil || cur.Token != l.Token || !cur.ExpiresAt.After(t.now) {
			return errLeaseLost()
		}
		renewed := cloneLease(cur)
		renewed.ExpiresAt = norm(t.now.Add(ttl))
		t.ss.lease = renewed
		t.onUndo(func() { t.ss.lease = cur })
		out = cloneLease(renewed)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLease implements store.Tx.
func (t *tx) ReleaseLease(token int64) error {
	if err := t.check(); err != nil {
		return err
	}
	ss := t.ss
	if cur := ss.lease; cur != nil && cur.Token == token {
		ss.lease = nil
		t.onUndo(func() { ss.lease = cur })
	}
	return nil
}

// Lease implements store.Tx.
func (t *tx) Lease() (*store.Lease, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if t.ss.lease == nil {
		return nil, nil
	}
	return cloneLease(t.ss.lease), nil
}

var errNoLease = notFound("lease")

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, key rein.SessionKey) (*store.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	if ss.lease == nil {
		// The common answer (an idle session): one error for all.
		return nil, errNoLease
	}
	return cloneLease(ss.lease), nil
}
