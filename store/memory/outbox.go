package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

var _ store.Outbox = (*Store)(nil)

// outbox is the memory store's webhook outbox, under the store lock.
type outbox struct {
	dests      map[string]time.Time
	cursors    map[cursorKey]int64
	deliveries map[string]*store.Delivery
}

type cursorKey struct {
	key  rein.SessionKey
	dest string
}

// box returns the outbox, made on first use. Called with the lock held.
func (s *Store) box() *outbox {
	if s.ob == nil {
		s.ob = &outbox{dests: map[string]time.Time{}, cursors: map[cursorKey]int64{}, deliveries: map[string]*store.Delivery{}}
	}
	return s.ob
}

// forgetOutbox drops a deleted session's cursors and deliveries, so a
// session later created with its key starts from seq 1 for every
// destination. Called with the lock held.
func (s *Store) forgetOutbox(key rein.SessionKey) {
	if s.ob == nil {
		return
	}
	for k := range s.ob.cursors {
		if k.key == key {
			delete(s.ob.cursors, k)
		}
	}
	for dID, d := range s.ob.deliveries {
		if d.Key() == key {
			delete(s.ob.deliveries, dID)
		}
	}
}

// RegisterDestination implements store.Outbox.
func (s *Store) RegisterDestination(ctx context.Context, dest string) (time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.mu.Unlock()
	ob := s.box()
	if t, ok := ob.dests[dest]; ok {
		return t, nil
	}
	t := s.now()
	ob.dests[dest] = t
	return t, nil
}

// OutboxLag implements store.Outbox.
func (s *Store) OutboxLag(ctx context.Context, dest string, limit int) ([]store.OutboxLag, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ob := s.box()
	out := []store.OutboxLag{}
	for key, ss := range s.sessions {
		last := int64(len(ss.events))
		cur := ob.cursors[cursorKey{key, dest}]
		if last > cur {
			out = append(out, store.OutboxLag{Key: key, Cursor: cur, LastSeq: last})
		}
	}
	// Map order is random; a stable order keeps a limited scan fair
	// across calls only as much as the databases' do, which is enough.
	slices.SortFunc(out, func(a, b store.OutboxLag) int {
		return cmp.Or(cmp.Compare(a.Key.Owner, b.Key.Owner), cmp.Compare(a.Key.ID, b.Key.ID))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// EnqueueDeliveries implements store.Outbox.
func (s *Store) EnqueueDeliveries(ctx context.Context, key rein.SessionKey, dest string, from, to int64, ds []*store.Delivery) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if _, err := s.get(key); err != nil {
		return err
	}
	ob := s.box()
	ck := cursorKey{key, dest}
	if ob.cursors[ck] != from {
		return rein.Errorf(rein.CodeConflict, "outbox cursor of %s moved", dest)
	}
	now := s.now()
	stored := make([]*store.Delivery, len(ds))
	for i, d := range ds {
		c := d.Clone()
		if c.ID == "" {
			c.ID = id.New(id.Delivery)
		}
		if _, dup := ob.deliveries[c.ID]; dup {
			return rein.Errorf(rein.CodeConflict, "delivery %s exists", c.ID)
		}
		c.Destination, c.Owner, c.SessionID = dest, key.Owner, key.ID
		c.Status, c.Attempts, c.LastError = store.DeliveryPending, 0, ""
		c.NextAt, c.CreatedAt, c.FirstAttemptAt = now, now, time.Time{}
		c.Claim, c.ClaimedAt, c.ClaimUntil = 0, time.Time{}, time.Time{}
		stored[i] = c
	}
	for i, c := range stored {
		ob.deliveries[c.ID] = c
		ds[i].ID = c.ID
	}
	ob.cursors[ck] = to
	return nil
}

// ClaimDeliveries implements store.Outbox.
func (s *Store) ClaimDeliveries(ctx context.Context, dest, holder string, ttl time.Duration, limit int) ([]*store.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.now()
	heads := map[rein.SessionKey]*store.Delivery{}
	for _, d := range s.box().deliveries {
		if d.Destination != dest || d.Status != store.DeliveryPending {
			continue
		}
		if h := heads[d.Key()]; h == nil || d.Seq < h.Seq {
			heads[d.Key()] = d
		}
	}
	var due []*store.Delivery
	for _, h := range heads {
		if !h.NextAt.After(now) && !h.ClaimUntil.After(now) {
			due = append(due, h)
		}
	}
	slices.SortFunc(due, func(a, b *store.Delivery) int {
		return cmp.Or(a.NextAt.Compare(b.NextAt), cmp.Compare(a.ID, b.ID))
	})
	if limit > 0 && len(due) > limit {
		due = due[:limit]
	}
	out := make([]*store.Delivery, len(due))
	for i, d := range due {
		d.Claim++
		d.ClaimedAt, d.ClaimUntil = now, norm(now.Add(ttl))
		if d.FirstAttemptAt.IsZero() {
			d.FirstAttemptAt = now
		}
		out[i] = d.Clone()
	}
	return out, nil
}

// RecordAttempt implements store.Outbox.
func (s *Store) RecordAttempt(ctx context.Context, dID string, claim int64, a store.Attempt) (*store.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	d := s.box().deliveries[dID]
	if d == nil || d.Claim != claim || d.Status != store.DeliveryPending {
		return nil, errClaimLost()
	}
	now := s.now()
	store.ApplyAttempt(d, a, now)
	return d.Clone(), nil
}

// GetDelivery implements store.Outbox.
func (s *Store) GetDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	d := s.box().deliveries[dID]
	if d == nil || d.Owner != owner {
		return nil, notFound("delivery")
	}
	return d.Clone(), nil
}

// ListDeliveries implements store.Outbox.
func (s *Store) ListDeliveries(ctx context.Context, owner string, q store.DeliveryQuery) ([]*store.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.Delivery{}
	for _, d := range s.box().deliveries {
		if d.Owner == owner && (q.Status == "" || d.Status == q.Status) && d.ID > q.After {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *store.Delivery) int { return cmp.Compare(a.ID, b.ID) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for i, d := range out {
		out[i] = d.Clone()
	}
	return out, nil
}

// RetryDelivery implements store.Outbox.
func (s *Store) RetryDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	d := s.box().deliveries[dID]
	if d == nil || d.Owner != owner {
		return nil, notFound("delivery")
	}
	store.ApplyRetry(d, s.now())
	return d.Clone(), nil
}

func errClaimLost() error {
	return &rein.Error{Code: rein.CodeConflict, Message: "delivery claim lost: the delivery was claimed again or is no longer pending", Err: rein.ErrLeaseLost}
}
