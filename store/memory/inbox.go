package memory

import (
	"context"
	"slices"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// -------------------------------------------------------------------- inbox

// PushSupplement implements store.Tx.
func (t *tx) PushSupplement(in *store.Supplement) (*store.Supplement, bool, error) {
	if err := t.check(); err != nil {
		return nil, false, err
	}
	if err := t.mine(in.Owner, in.SessionID, "supplement"); err != nil {
		return nil, false, err
	}
	ss := t.ss
	if in.ID != "" {
		if prev := ss.supplements[in.ID]; prev != nil {
			return cloneSupplement(prev), false, nil
		}
	}
	rec := cloneSupplement(in)
	if rec.ID == "" {
		rec.ID = id.New(id.Supplement)
	}
	rec.Status = store.SupplementQueued
	rec.RunID, rec.Step, rec.ConsumedAt = "", 0, time.Time{}
	rec.CreatedAt = norm(rec.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t.now
	}
	n := len(ss.supplementIDs)
	ss.supplements[rec.ID] = rec
	ss.supplementIDs = append(ss.supplementIDs, rec.ID)
	t.onUndo(func() {
		delete(ss.supplements, rec.ID)
		ss.supplementIDs = ss.supplementIDs[:n]
	})
	return cloneSupplement(rec), true, nil
}

// QueuedSupplements implements store.Tx.
func (t *tx) QueuedSupplements() ([]*store.Supplement, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.ss.queued(), nil
}

// queued returns copies of the queued supplements in push order.
func (ss *session) queued() []*store.Supplement {
	out := []*store.Supplement{}
	for _, supID := range ss.supplementIDs {
		if sup := ss.supplements[supID]; sup.Status == store.SupplementQueued {
			out = append(out, cloneSupplement(sup))
		}
	}
	return out
}

// ConsumeSupplements implements store.Tx. Every id is checked before any
// is marked, so a refusal leaves the inbox as it was; an id named twice
// is refused like one already consumed.
func (t *tx) ConsumeSupplements(ids []string, runID string, step int) error {
	if err := t.check(); err != nil {
		return err
	}
	ss := t.ss
	seen := make(map[string]bool, len(ids))
	for _, supID := range ids {
		sup := ss.supplements[supID]
		switch {
		case sup == nil:
			return notFound("supplement")
		case sup.Status != store.SupplementQueued || seen[supID]:
			return rein.Errorf(rein.CodeConflict, "supplement %q is not queued", supID)
		}
		seen[supID] = true
	}
	for _, supID := range ids {
		sup := ss.supplements[supID]
		old := *sup
		sup.Status = store.SupplementConsumed
		sup.RunID, sup.Step, sup.ConsumedAt = runID, step, t.now
		t.onUndo(func() { *sup = old })
	}
	return nil
}

// PendingSupplements implements store.Inbox.
func (s *Store) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sup := range ss.supplements {
		if sup.Status == store.SupplementQueued {
			n++
		}
	}
	return n, nil
}

// GetSupplement implements store.Inbox.
func (s *Store) GetSupplement(ctx context.Context, key rein.SessionKey, supID string) (*store.Supplement, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	sup := ss.supplements[supID]
	if sup == nil {
		return nil, notFound("supplement")
	}
	return cloneSupplement(sup), nil
}

// ------------------------------------------------------------ confirmations

// CreateConfirmation implements store.Tx.
func (t *tx) CreateConfirmation(c *store.Confirmation) error {
	if err := t.check(); err != nil {
		return err
	}
	if c.ToolUseID == "" {
		return rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	if err := t.mine(c.Owner, c.SessionID, "confirmation"); err != nil {
		return err
	}
	ss := t.ss
	if _, dup := ss.confirmations[c.ToolUseID]; dup {
		return rein.Errorf(rein.CodeConflict, "confirmation for tool call %q already exists", c.ToolUseID)
	}
	rec := cloneConfirmation(c)
	rec.State = store.ConfirmationPending
	rec.DenyMessage, rec.ResolvedAt = "", time.Time{}
	rec.CreatedAt = norm(rec.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t.now
	}
	rec.ExpiresAt = norm(rec.ExpiresAt)
	n := len(ss.confirmIDs)
	ss.confirmations[rec.ToolUseID] = rec
	ss.confirmIDs = append(ss.confirmIDs, rec.ToolUseID)
	t.onUndo(func() {
		delete(ss.confirmations, rec.ToolUseID)
		ss.confirmIDs = ss.confirmIDs[:n]
	})
	*c = *cloneConfirmation(rec)
	return nil
}

// ResolveConfirmation implements store.Tx.
func (t *tx) ResolveConfirmation(toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	c := t.ss.confirmations[toolUseID]
	if c == nil {
		return nil, notFound("confirmation")
	}
	if c.State != store.ConfirmationPending {
		return nil, rein.Errorf(rein.CodeConflict, "confirmation %q is no longer pending (%s)", toolUseID, c.State)
	}
	old := *c
	if allow {
		c.State = store.ConfirmationAllowed
	} else {
		c.State = store.ConfirmationDenied
		c.DenyMessage = denyMessage
	}
	c.ResolvedAt = t.now
	t.onUndo(func() { *c = old })
	return cloneConfirmation(c), nil
}

// CloseConfirmations implements store.Tx.
func (t *tx) CloseConfirmations(runID string) error {
	if err := t.check(); err != nil {
		return err
	}
	for _, c := range t.ss.confirmations {
		if c.RunID == runID && c.State == store.ConfirmationPending {
			old := *c
			c.State = store.ConfirmationClosed
			c.ResolvedAt = t.now
			t.onUndo(func() { *c = old })
		}
	}
	return nil
}

// GetConfirmation implements store.Confirmations.
func (s *Store) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	c := ss.confirmations[toolUseID]
	if c == nil {
		return nil, notFound("confirmation")
	}
	return cloneConfirmation(c), nil
}

// ListConfirmations implements store.Confirmations.
func (s *Store) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	return ss.listConfirmations(state), nil
}

// Confirmations implements store.Tx.
func (t *tx) Confirmations(state store.ConfirmationState) ([]*store.Confirmation, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.ss.listConfirmations(state), nil
}

func (ss *session) listConfirmations(state store.ConfirmationState) []*store.Confirmation {
	out := []*store.Confirmation{}
	for _, tid := range ss.confirmIDs {
		c := ss.confirmations[tid]
		if state == "" || c.State == state {
			out = append(out, cloneConfirmation(c))
		}
	}
	// confirmIDs is creation order; a caller-supplied CreatedAt may
	// disagree with it, and "oldest first" is about CreatedAt.
	slices.SortStableFunc(out, func(a, b *store.Confirmation) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// StartConfirmation implements store.Tx.
func (t *tx) StartConfirmation(toolUseID string) error {
	if err := t.check(); err != nil {
		return err
	}
	c := t.ss.confirmations[toolUseID]
	if c == nil {
		return notFound("confirmation")
	}
	if c.State != store.ConfirmationAllowed {
		return rein.Errorf(rein.CodeConflict, "confirmation %q is not allowed and waiting to start (%s)", toolUseID, c.State)
	}
	old := *c
	c.State = store.ConfirmationStarted
	t.onUndo(func() { *c = old })
	return nil
}
