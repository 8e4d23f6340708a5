package memory

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The approvals inbox and confirmation expiry. The memory store scans its
// sessions for both: it is the reference of the contract, and the order it
// sorts by is the one the databases' indexes keep.

// ExpireConfirmation implements store.Tx.
func (t *tx) ExpireConfirmation(toolUseID string) (*store.Confirmation, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	c := t.ss.confirmations[toolUseID]
	if c == nil {
		return nil, notFound("confirmation")
	}
	if err := store.CheckExpiry(c, t.now); err != nil {
		return nil, err
	}
	old := *c
	c.State, c.DenyMessage, c.ResolvedAt = store.ConfirmationExpired, rein.ConfirmationExpiredMessage, t.now
	t.onUndo(func() { *c = old })
	return cloneConfirmation(c), nil
}

// ListInbox implements store.Confirmations.
func (s *Store) ListInbox(ctx context.Context, owner string, page store.InboxPage) ([]*store.InboxItem, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.InboxItem{}
	for key, ss := range s.sessions {
		if key.Owner != owner {
			continue
		}
		for _, c := range ss.confirmations {
			if !page.Status.Has(c.State) || (!page.After.IsZero() && !page.After.After(c)) {
				continue
			}
			it := &store.InboxItem{Confirmation: cloneConfirmation(c)}
			if ss.rec.Title != nil {
				title := *ss.rec.Title
				it.SessionTitle = &title
			}
			out = append(out, it)
		}
	}
	slices.SortFunc(out, func(a, b *store.InboxItem) int { return store.CompareInbox(a.Confirmation, b.Confirmation) })
	if page.Limit > 0 && len(out) > page.Limit {
		out = out[:page.Limit]
	}
	return out, nil
}

// DueConfirmations implements store.Confirmations.
func (s *Store) DueConfirmations(ctx context.Context, before time.Time, limit int) ([]*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.Confirmation{}
	for _, ss := range s.sessions {
		for _, c := range ss.confirmations {
			if c.State != store.ConfirmationPending || c.ExpiresAt.IsZero() || (!before.IsZero() && c.ExpiresAt.After(before)) {
				continue
			}
			out = append(out, cloneConfirmation(c))
		}
	}
	slices.SortFunc(out, func(a, b *store.Confirmation) int {
		if cmp := a.ExpiresAt.Compare(b.ExpiresAt); cmp != 0 {
			return cmp
		}
		if cmp := strings.Compare(a.Owner, b.Owner); cmp != 0 {
			return cmp
		}
		if cmp := strings.Compare(a.SessionID, b.SessionID); cmp != 0 {
			return cmp
		}
		return strings.Compare(a.ToolUseID, b.ToolUseID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
