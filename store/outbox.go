package store

import (
	"bytes"
	"context"
	"time"

	"github.com/reinhq/rein"
)

// ------------------------------------------------------------------ outbox

// DeliveryStatus is where a webhook delivery stands.
type DeliveryStatus string

// Delivery states. A pending delivery becomes delivered or failed; only a
// retry (Outbox.RetryDelivery) makes a failed one pending again.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Valid reports whether s is one of the states.
func (s DeliveryStatus) Valid() bool {
	return s == DeliveryPending || s == DeliveryDelivered || s == DeliveryFailed
}

// Delivery is one event owed to one webhook destination
// (docs/webhooks.md): the outbox's row.
type Delivery struct {
	// ID is the delivery's id ("dlv_" ULID), sent as Rein-Delivery-Id on
	// every attempt.
	ID string
	// Destination names the webhook (its URL).
	Destination string
	Owner       string
	SessionID   string
	// Seq is the event's seq in the session's log.
	Seq int64
	// Type is the event's type.
	Type rein.EventType
	// Body is what is POSTed: the event's JSON with its owner.
	Body   []byte
	Status DeliveryStatus
	// Attempts counts the POSTs made (finished attempts).
	Attempts  int
	LastError string
	// NextAt is when a pending delivery may be attempted next; zero
	// unless pending.
	NextAt time.Time
	// FirstAttemptAt is when its first attempt was claimed (the store's
	// clock); zero before. A retry starts it again.
	FirstAttemptAt time.Time
	CreatedAt      time.Time
	// Claim is the claim's token (it increases with every claim of the
	// delivery), ClaimedAt when the current claim was taken and
	// ClaimUntil when it lapses, all by the store's clock. An attempt's
	// result is recorded only under the claim that made it.
	Claim      int64
	ClaimedAt  time.Time
	ClaimUntil time.Time
}

// Clone is a deep copy of d.
func (d *Delivery) Clone() *Delivery {
	out := *d
	out.Body = bytes.Clone(d.Body)
	return &out
}

// Key returns the delivery's session key.
func (d *Delivery) Key() rein.SessionKey { return rein.SessionKey{Owner: d.Owner, ID: d.SessionID} }

// OutboxLag is a session whose log has events a destination has not yet
// looked at: the enqueuer reads the events after Cursor, up to LastSeq.
type OutboxLag struct {
	Key     rein.SessionKey
	Cursor  int64
	LastSeq int64
}

// Attempt is the result of one delivery attempt.
type Attempt struct {
	// Delivered: the destination answered 2xx in time.
	Delivered bool
	// Error says why an attempt failed ("" when delivered).
	Error string
	// RetryIn is the wait before the next attempt of a failed one. With
	// GiveUp the delivery is failed for good instead.
	RetryIn time.Duration
	GiveUp  bool
}

// DeliveryQuery asks for a page of an owner's deliveries.
type DeliveryQuery struct {
	// Status filters by state ("" = all).
	Status DeliveryStatus
	// After is the last delivery id of the previous page ("" = first).
	After string
	// Limit is the most returned (≤ 0: all).
	Limit int
}

// Outbox is an optional capability (found by type assertion; every
// backend of this module has it): the webhook outbox of docs/webhooks.md.
//
// Deliveries are derived from the event log, not written beside each
// event (docs/decisions/0120-webhook-outbox-from-the-log.md): each
// destination keeps a cursor per session, and enqueuing moves the cursor
// and stores the deliveries for the events it passed in one transaction,
// so an event is never skipped and never enqueued twice, whoever enqueues.
//
// Order: a session's deliveries to a destination are made in seq order.
// ClaimDeliveries hands out only a stream's head — its pending delivery
// of the lowest seq — so a later one waits for the earlier one to be
// delivered or failed; other streams never wait.
type Outbox interface {
	// RegisterDestination records dest the first time it is seen and
	// returns when that was (the store's clock); later calls return the
	// same time. An enqueuer skips the events created before it, so a
	// webhook added to a running system does not receive its history.
	RegisterDestination(ctx context.Context, dest string) (time.Time, error)
	// OutboxLag returns up to limit sessions (any owner) whose last seq
	// is past dest's cursor on them (0 when it has none). Never nil.
	OutboxLag(ctx context.Context, dest string, limit int) ([]OutboxLag, error)
	// EnqueueDeliveries moves dest's cursor on key from from to to and
	// stores ds (pending, due now, Destination dest, empty ids made
	// "dlv_" ULIDs) in one transaction. If the cursor is not at from, it
	// writes nothing and fails with rein.ErrConflict (another enqueuer
	// went first). rein.ErrNotFound if the session does not exist.
	EnqueueDeliveries(ctx context.Context, key rein.SessionKey, dest string, from, to int64, ds []*Delivery) error
	// ClaimDeliveries claims up to limit deliveries of dest for holder
	// until now+ttl and returns them: each one the pending head of its
	// (session, dest) stream, due (NextAt ≤ now) and not claimed by a
	// claim that has not lapsed. A claim increases Claim and sets
	// ClaimedAt (and FirstAttemptAt when zero). Of concurrent claimers —
	// goroutines or processes — each delivery goes to one. Never nil.
	ClaimDeliveries(ctx context.Context, dest, holder string, ttl time.Duration, limit int) ([]*Delivery, error)
	// RecordAttempt records the attempt made under claim and returns the
	// delivery as stored: delivered; or pending again, due after
	// RetryIn; or failed (GiveUp). Attempts grows by one and the claim
	// ends. rein.ErrLeaseLost, writing nothing, when claim is no longer
	// the delivery's claim or it is no longer pending.
	RecordAttempt(ctx context.Context, id string, claim int64, a Attempt) (*Delivery, error)
	// GetDelivery returns one of the owner's deliveries or
	// rein.ErrNotFound (another owner's is missing alike).
	GetDelivery(ctx context.Context, owner, id string) (*Delivery, error)
	// ListDeliveries returns a page of the owner's deliveries ordered by
	// id (creation order). Never nil.
	ListDeliveries(ctx context.Context, owner string, q DeliveryQuery) ([]*Delivery, error)
	// RetryDelivery makes one of the owner's deliveries pending again,
	// due now, with a fresh retry period (FirstAttemptAt zero), and
	// returns it. A pending one is only made due now. rein.ErrNotFound as
	// GetDelivery.
	RetryDelivery(ctx context.Context, owner, id string) (*Delivery, error)
}

// ApplyAttempt applies the result of an attempt to d at now (the store's
// clock), as every backend's RecordAttempt does.
func ApplyAttempt(d *Delivery, a Attempt, now time.Time) {
	d.Attempts++
	d.ClaimUntil = time.Time{}
	switch {
	case a.Delivered:
		d.Status, d.LastError, d.NextAt = DeliveryDelivered, "", time.Time{}
	case a.GiveUp:
		d.Status, d.LastError, d.NextAt = DeliveryFailed, a.Error, time.Time{}
	default:
		d.LastError, d.NextAt = a.Error, now.Add(a.RetryIn).UTC().Truncate(time.Microsecond)
	}
}

// ApplyRetry makes d pending again at now, as every backend's
// RetryDelivery does: due at once, and a failed or delivered one with a
// fresh retry period.
func ApplyRetry(d *Delivery, now time.Time) {
	if d.Status != DeliveryPending {
		d.FirstAttemptAt = time.Time{}
	}
	d.Status, d.NextAt = DeliveryPending, now
}
