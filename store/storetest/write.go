package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The suite writes as production code does: through Update, whose Tx is
// the one way to write a session (store.Tx). The functions below are the
// one-write forms that the cases, and backends' own tests, use to arrange
// a session and to exercise each Tx write on its own: each is exactly one
// Update, so a test using them writes as the sessions service does.

// errRollback is what a case's Update function returns to have its writes
// rolled back.
var errRollback = errors.New("storetest: roll back")

// SetSystem replaces key's system override in one unfenced Update.
func SetSystem(ctx context.Context, s store.Updater, key rein.SessionKey, system *string) error {
	return s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.SetSystem(system) })
}

// CreateRun stores r in one unfenced Update of its session.
func CreateRun(ctx context.Context, s store.Updater, r *store.RunRecord) error {
	return s.Update(ctx, r.Key(), store.Fence{}, func(tx store.Tx) error { return tx.CreateRun(r) })
}

// UpdateRun applies u to a run in one Update fenced by fence. Like
// Tx.UpdateRun it returns the stored record with the conflict of a
// terminal run.
func UpdateRun(ctx context.Context, s store.Updater, key rein.SessionKey, fence store.Fence, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	var out *store.RunRecord
	err := s.Update(ctx, key, fence, func(tx store.Tx) error {
		var err error
		out, err = tx.UpdateRun(runID, u)
		return err
	})
	if err != nil && (out == nil || !errors.Is(err, rein.ErrConflict)) {
		return nil, err
	}
	return out, err
}

// AppendHistory appends msgs to key's transcript in one Update fenced by
// fence.
func AppendHistory(ctx context.Context, s store.Updater, key rein.SessionKey, fence store.Fence, msgs []rein.Message) error {
	return s.Update(ctx, key, fence, func(tx store.Tx) error { return tx.AppendHistory(msgs...) })
}

// PushSupplement pushes sup in one unfenced Update of its session.
func PushSupplement(ctx context.Context, s store.Updater, sup *store.Supplement) (out *store.Supplement, created bool, err error) {
	err = s.Update(ctx, rein.SessionKey{Owner: sup.Owner, ID: sup.SessionID}, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, created, err = tx.PushSupplement(sup)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// ConsumeSupplements consumes every queued supplement of key by (runID,
// step) in one unfenced Update, as the sessions service's consume does,
// and returns them as consumed, in push order. Never nil.
func ConsumeSupplements(ctx context.Context, s store.Updater, key rein.SessionKey, runID string, step int) ([]*store.Supplement, error) {
	var out []*store.Supplement
	err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, err = store.ConsumeQueued(tx, runID, step)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CreateConfirmation stores c as pending in one unfenced Update of its
// session.
func CreateConfirmation(ctx context.Context, s store.Updater, c *store.Confirmation) error {
	return s.Update(ctx, rein.SessionKey{Owner: c.Owner, ID: c.SessionID}, store.Fence{}, func(tx store.Tx) error {
		return tx.CreateConfirmation(c)
	})
}

// ResolveConfirmation answers a pending confirmation in one unfenced
// Update.
func ResolveConfirmation(ctx context.Context, s store.Updater, key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	var out *store.Confirmation
	err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, err = tx.ResolveConfirmation(toolUseID, allow, denyMessage)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CloseConfirmations closes the run's pending confirmations in one
// unfenced Update.
func CloseConfirmations(ctx context.Context, s store.Updater, key rein.SessionKey, runID string) error {
	return s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.CloseConfirmations(runID) })
}

// AcquireLease takes key's turn for runID in one unfenced Update.
func AcquireLease(ctx context.Context, s store.Updater, key rein.SessionKey, holder, runID string, ttl time.Duration) (*store.Lease, error) {
	var out *store.Lease
	err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, err = tx.AcquireLease(holder, runID, ttl)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseLease drops l, if it is still current, in one unfenced Update.
func ReleaseLease(ctx context.Context, s store.Updater, l *store.Lease) error {
	return s.Update(ctx, l.Key(), store.Fence{}, func(tx store.Tx) error { return tx.ReleaseLease(l.Token) })
}

// The same, on the case's store and context.

func (t *T) setSystem(key rein.SessionKey, system *string) error {
	return SetSystem(t.Ctx, t.S, key, system)
}

func (t *T) createRun(r *store.RunRecord) error { return CreateRun(t.Ctx, t.S, r) }

func (t *T) updateRun(key rein.SessionKey, fence store.Fence, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	return UpdateRun(t.Ctx, t.S, key, fence, runID, u)
}

func (t *T) appendHistory(key rein.SessionKey, fence store.Fence, msgs []rein.Message) error {
	return AppendHistory(t.Ctx, t.S, key, fence, msgs)
}

func (t *T) pushSupplement(sup *store.Supplement) (*store.Supplement, bool, error) {
	return PushSupplement(t.Ctx, t.S, sup)
}

func (t *T) consumeSupplements(key rein.SessionKey, runID string, step int) ([]*store.Supplement, error) {
	return ConsumeSupplements(t.Ctx, t.S, key, runID, step)
}

func (t *T) createConfirmation(c *store.Confirmation) error { return CreateConfirmation(t.Ctx, t.S, c) }

func (t *T) resolveConfirmation(key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	return ResolveConfirmation(t.Ctx, t.S, key, toolUseID, allow, denyMessage)
}

func (t *T) closeConfirmations(key rein.SessionKey, runID string) error {
	return CloseConfirmations(t.Ctx, t.S, key, runID)
}

func (t *T) acquireLease(key rein.SessionKey, holder, runID string, ttl time.Duration) (*store.Lease, error) {
	return AcquireLease(t.Ctx, t.S, key, holder, runID, ttl)
}

func (t *T) releaseLease(l *store.Lease) error { return ReleaseLease(t.Ctx, t.S, l) }
