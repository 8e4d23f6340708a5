package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

var _ store.Outbox = (*Store)(nil)

const deliveryColumns = `id, owner, session_id, destination, seq, type, body, status, attempts, last_error,
	next_at, first_attempt_at, created_at, claim, claimed_at, claim_until`

func scanDelivery(row pgx.Row) (*store.Delivery, error) {
	var (
		d                                  store.Delivery
		typ, status                        string
		next, first, claimedAt, claimUntil *time.Time
	)
	if err := row.Scan(&d.ID, &d.Owner, &d.SessionID, &d.Destination, &d.Seq, &typ, &d.Body, &status, &d.Attempts, &d.LastError,
		&next, &first, &d.CreatedAt, &d.Claim, &claimedAt, &claimUntil); err != nil {
		return nil, err
	}
	d.Type, d.Status = rein.EventType(typ), store.DeliveryStatus(status)
	d.CreatedAt = d.CreatedAt.UTC()
	d.NextAt, d.FirstAttemptAt, d.ClaimedAt, d.ClaimUntil = utcOrZero(next), utcOrZero(first), utcOrZero(claimedAt), utcOrZero(claimUntil)
	return &d, nil
}

func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// inTx runs fn in a transaction of its own, bounded by the store's
// Timeout, and commits it.
func (s *Store) inTx(ctx context.Context, op string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	err := pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error { return fn(octx, tx) })
	return s.fail(ctx, octx, op, err)
}

// RegisterDestination implements store.Outbox.
func (s *Store) RegisterDestination(ctx context.Context, dest string) (time.Time, error) {
	var at time.Time
	err := s.inTx(ctx, "register webhook destination", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox_destinations (destination, created_at)
				VALUES ($1, coalesce($2::timestamptz, now())) ON CONFLICT (destination) DO NOTHING`, dest, s.leaseNow()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT created_at FROM outbox_destinations WHERE destination = $1`, dest).Scan(&at)
	})
	return at.UTC(), err
}

// OutboxLag implements store.Outbox: one scan of the sessions' counter
// rows (event_seqs), whose cost grows with the sessions stored (decision
// 0120).
func (s *Store) OutboxLag(ctx context.Context, dest string, limit int) ([]store.OutboxLag, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(octx, `SELECT e.owner, e.session_id, coalesce(c.seq, 0), e.last_seq FROM event_seqs e
		LEFT JOIN outbox_cursors c ON c.owner = e.owner AND c.session_id = e.session_id AND c.destination = $1
		WHERE e.last_seq > coalesce(c.seq, 0) ORDER BY e.owner, e.session_id LIMIT $2`, dest, lim)
	if err != nil {
		return nil, s.fail(ctx, octx, "read outbox lag", err)
	}
	out := []store.OutboxLag{}
	for rows.Next() {
		var l store.OutboxLag
		if err := rows.Scan(&l.Key.Owner, &l.Key.ID, &l.Cursor, &l.LastSeq); err != nil {
			rows.Close()
			return nil, s.fail(ctx, octx, "read outbox lag", err)
		}
		out = append(out, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, octx, "read outbox lag", err)
	}
	return out, nil
}

// EnqueueDeliveries implements store.Outbox. The cursor moves by a
// compare-and-set on its row, whose lock a concurrent enqueuer waits for
// and then finds the cursor moved.
func (s *Store) EnqueueDeliveries(ctx context.Context, key rein.SessionKey, dest string, from, to int64, ds []*store.Delivery) error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
		if ids[i] == "" {
			ids[i] = id.New(id.Delivery)
		}
	}
	err := s.inTx(ctx, "enqueue webhook deliveries", func(ctx context.Context, tx pgx.Tx) error {
		var (
			tag interface{ RowsAffected() int64 }
			err error
		)
		if from == 0 {
			tag, err = tx.Exec(ctx, `INSERT INTO outbox_cursors (owner, session_id, destination, seq) VALUES ($1, $2, $3, $4)
				ON CONFLICT (owner, session_id, destination) DO NOTHING`, key.Owner, key.ID, dest, to)
		} else {
			tag, err = tx.Exec(ctx, `UPDATE outbox_cursors SET seq = $5
				WHERE owner = $1 AND session_id = $2 AND destination = $3 AND seq = $4`, key.Owner, key.ID, dest, from, to)
		}
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE owner = $1 AND id = $2`, key.Owner, key.ID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return rein.Errorf(rein.CodeNotFound, "session not found")
			}
			return rein.Errorf(rein.CodeConflict, "outbox cursor of %s moved", dest)
		}
		if len(ds) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		now := s.leaseNow()
		for i, d := range ds {
			b.Queue(`INSERT INTO outbox (id, owner, session_id, destination, seq, type, body, status, next_at, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', coalesce($8::timestamptz, now()), coalesce($8::timestamptz, now()))`,
				ids[i], key.Owner, key.ID, dest, d.Seq, string(d.Type), d.Body, now)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return err
	}
	for i, d := range ds {
		d.ID = ids[i]
	}
	return nil
}

// claimSQL claims the due heads of dest's streams. heads is read from the
// statement's snapshot; the UPDATE re-checks each row under its lock
// (READ COMMITTED re-evaluates the WHERE on the row's newest version), so
// of two claimers racing for a head the second finds it claimed and skips
// it. $2 is the time claims are judged by (NULL: the database's now()).
const claimSQL = `
WITH heads AS (
    SELECT DISTINCT ON (owner, session_id) id, next_at, claim_until
    FROM outbox WHERE destination = $1 AND status = 'pending'
    ORDER BY owner, session_id, seq
), due AS (
    SELECT id FROM heads
    WHERE next_at <= coalesce($2::timestamptz, now()) AND coalesce(claim_until, '-infinity') <= coalesce($2::timestamptz, now())
    ORDER BY next_at, id LIMIT $4
)
UPDATE outbox o SET claim = o.claim + 1, claimed_at = coalesce($2::timestamptz, now()),
    claim_until = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond',
    first_attempt_at = coalesce(o.first_attempt_at, coalesce($2::timestamptz, now()))
FROM due
WHERE o.id = due.id AND o.status = 'pending' AND coalesce(o.claim_until, '-infinity') <= coalesce($2::timestamptz, now())
RETURNING o.id, o.owner, o.session_id, o.destination, o.seq, o.type, o.body, o.status, o.attempts, o.last_error,
    o.next_at, o.first_attempt_at, o.created_at, o.claim, o.claimed_at, o.claim_until`

// ClaimDeliveries implements store.Outbox.
func (s *Store) ClaimDeliveries(ctx context.Context, dest, holder string, ttl time.Duration, limit int) ([]*store.Delivery, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(octx, claimSQL, dest, s.leaseNow(), ttl.Microseconds(), lim)
	if err != nil {
		return nil, s.fail(ctx, octx, "claim webhook deliveries", err)
	}
	out := []*store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, s.fail(ctx, octx, "claim webhook deliveries", err)
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, octx, "claim webhook deliveries", err)
	}
	return out, nil
}

// change reads a delivery FOR UPDATE with where (its first argument the
// id), lets apply change it, and writes it back, in one transaction.
// apply's error is returned as it is.
func (s *Store) change(ctx context.Context, op, where string, args []any, missing error, apply func(d *store.Delivery, now time.Time) error) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.inTx(ctx, op, func(ctx context.Context, tx pgx.Tx) error {
		d, err := scanDelivery(tx.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM outbox WHERE `+where+` FOR UPDATE`, args...))
		if errors.Is(err, pgx.ErrNoRows) {
			return missing
		}
		if err != nil {
			return err
		}
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT coalesce($1::timestamptz, now())`, s.leaseNow()).Scan(&now); err != nil {
			return err
		}
		if err := apply(d, now.UTC()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE outbox SET status = $2, attempts = $3, last_error = $4, next_at = $5,
				first_attempt_at = $6, claim_until = $7 WHERE id = $1`,
			d.ID, string(d.Status), d.Attempts, d.LastError, timeOrNull(d.NextAt), timeOrNull(d.FirstAttemptAt), timeOrNull(d.ClaimUntil)); err != nil {
			return err
		}
		out = d
		return nil
	})
	return out, err
}

// RecordAttempt implements store.Outbox.
func (s *Store) RecordAttempt(ctx context.Context, dID string, claim int64, a store.Attempt) (*store.Delivery, error) {
	return s.change(ctx, "record webhook attempt", `id = $1`, []any{dID}, errClaimLost(), func(d *store.Delivery, now time.Time) error {
		if d.Claim != claim || d.Status != store.DeliveryPending {
			return errClaimLost()
		}
		store.ApplyAttempt(d, a, now)
		return nil
	})
}

// RetryDelivery implements store.Outbox.
func (s *Store) RetryDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	return s.change(ctx, "retry delivery", `id = $1 AND owner = $2`, []any{dID, owner}, rein.Errorf(rein.CodeNotFound, "delivery not found"),
		func(d *store.Delivery, now time.Time) error {
			store.ApplyRetry(d, dbTime(now))
			return nil
		})
}

// GetDelivery implements store.Outbox.
func (s *Store) GetDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	d, err := scanDelivery(s.pool.QueryRow(octx, `SELECT `+deliveryColumns+` FROM outbox WHERE id = $1 AND owner = $2`, dID, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, rein.Errorf(rein.CodeNotFound, "delivery not found")
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "get delivery", err)
	}
	return d, nil
}

// ListDeliveries implements store.Outbox.
func (s *Store) ListDeliveries(ctx context.Context, owner string, q store.DeliveryQuery) ([]*store.Delivery, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var lim *int
	if q.Limit > 0 {
		lim = &q.Limit
	}
	rows, err := s.pool.Query(octx, `SELECT `+deliveryColumns+` FROM outbox
		WHERE owner = $1 AND ($2 = '' OR status = $2) AND id > $3 ORDER BY id LIMIT $4`, owner, string(q.Status), q.After, lim)
	if err != nil {
		return nil, s.fail(ctx, octx, "list deliveries", err)
	}
	out := []*store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			rows.Close()
			return nil, s.fail(ctx, octx, "list deliveries", err)
		}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, octx, "list deliveries", err)
	}
	return out, nil
}

func errClaimLost() error {
	return &rein.Error{Code: rein.CodeConflict, Message: "delivery claim lost: the delivery was claimed again or is no longer pending", Err: rein.ErrLeaseLost}
}
