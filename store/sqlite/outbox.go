package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

var _ store.Outbox = (*Store)(nil)

// Every outbox write is a writer operation like any other, so it is
// serialised with appends and Updates by construction: a cursor read and
// moved in one operation cannot be moved by anyone in between.

const deliveryColumns = `id, owner, session_id, destination, seq, type, body, status, attempts, last_error,
	next_at, first_attempt_at, created_at, claim, claimed_at, claim_until`

func scanDelivery(sc interface{ Scan(...any) error }) (*store.Delivery, error) {
	var (
		d                                           store.Delivery
		typ, status                                 string
		next, first, created, claimedAt, claimUntil sql.NullInt64
	)
	if err := sc.Scan(&d.ID, &d.Owner, &d.SessionID, &d.Destination, &d.Seq, &typ, &d.Body, &status, &d.Attempts, &d.LastError,
		&next, &first, &created, &d.Claim, &claimedAt, &claimUntil); err != nil {
		return nil, err
	}
	d.Type, d.Status = rein.EventType(typ), store.DeliveryStatus(status)
	d.NextAt, d.FirstAttemptAt, d.CreatedAt = fromMicros(next), fromMicros(first), fromMicros(created)
	d.ClaimedAt, d.ClaimUntil = fromMicros(claimedAt), fromMicros(claimUntil)
	return &d, nil
}

// RegisterDestination implements store.Outbox.
func (s *Store) RegisterDestination(ctx context.Context, dest string) (time.Time, error) {
	var at time.Time
	err := s.write(ctx, "registering a webhook destination", func(tx *wtx) error {
		var v sql.NullInt64
		err := tx.queryRow(`SELECT created_at FROM outbox_destinations WHERE destination = ?`, dest).Scan(&v)
		if err == nil {
			at = fromMicros(v)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		at = tx.now
		_, err = tx.exec(`INSERT INTO outbox_destinations (destination, created_at) VALUES (?, ?)`, dest, micros(at))
		return err
	})
	return at, err
}

// OutboxLag implements store.Outbox. It looks at every session (one
// indexed max per session): the cost of a scan grows with the sessions
// stored, which decision 0120 accepts for now.
func (s *Store) OutboxLag(ctx context.Context, dest string, limit int) ([]store.OutboxLag, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.rq.QueryContext(ctx, `SELECT owner, id, cursor, last FROM (
			SELECT s.owner AS owner, s.id AS id, coalesce(c.seq, 0) AS cursor,
				coalesce((SELECT max(seq) FROM events e WHERE e.session_pk = s.pk), 0) AS last
			FROM sessions s LEFT JOIN outbox_cursors c ON c.session_pk = s.pk AND c.destination = ?)
		WHERE last > cursor ORDER BY owner, id LIMIT ?`, dest, limit)
	if err != nil {
		return nil, s.fail("reading the outbox's lag", err)
	}
	defer rows.Close()
	out := []store.OutboxLag{}
	for rows.Next() {
		var l store.OutboxLag
		if err := rows.Scan(&l.Key.Owner, &l.Key.ID, &l.Cursor, &l.LastSeq); err != nil {
			return nil, s.fail("reading the outbox's lag", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading the outbox's lag", err)
	}
	return out, nil
}

// EnqueueDeliveries implements store.Outbox.
func (s *Store) EnqueueDeliveries(ctx context.Context, key rein.SessionKey, dest string, from, to int64, ds []*store.Delivery) error {
	ids := make([]string, len(ds))
	err := s.write(ctx, "enqueuing webhook deliveries", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		var cur int64
		err = tx.queryRow(`SELECT seq FROM outbox_cursors WHERE session_pk = ? AND destination = ?`, si.pk, dest).Scan(&cur)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if cur != from {
			return rein.Errorf(rein.CodeConflict, "outbox cursor of %s moved", dest)
		}
		if _, err := tx.exec(`INSERT INTO outbox_cursors (session_pk, destination, seq) VALUES (?, ?, ?)
				ON CONFLICT (session_pk, destination) DO UPDATE SET seq = excluded.seq`, si.pk, dest, to); err != nil {
			return err
		}
		now := micros(tx.now)
		for i, d := range ds {
			ids[i] = d.ID
			if ids[i] == "" {
				ids[i] = id.New(id.Delivery)
			}
			if _, err := tx.exec(`INSERT INTO outbox (id, session_pk, owner, session_id, destination, seq, type, body, status,
					attempts, last_error, next_at, created_at, claim) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, '', ?, ?, 0)`,
				ids[i], si.pk, key.Owner, key.ID, dest, d.Seq, string(d.Type), d.Body, now, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, d := range ds {
		d.ID = ids[i]
	}
	return nil
}

// ClaimDeliveries implements store.Outbox.
func (s *Store) ClaimDeliveries(ctx context.Context, dest, holder string, ttl time.Duration, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = -1
	}
	var out []*store.Delivery
	err := s.write(ctx, "claiming webhook deliveries", func(tx *wtx) error {
		out = []*store.Delivery{}
		now := micros(tx.now)
		rows, err := tx.query(`SELECT id FROM outbox o
			WHERE destination = ? AND status = 'pending' AND next_at <= ? AND coalesce(claim_until, 0) <= ?
				AND seq = (SELECT min(seq) FROM outbox p WHERE p.destination = o.destination
					AND p.session_pk = o.session_pk AND p.status = 'pending')
			ORDER BY next_at, id LIMIT ?`, dest, now, now, limit)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			var dID string
			if err := rows.Scan(&dID); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, dID)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		until := micros(norm(tx.now.Add(ttl)))
		for _, dID := range ids {
			d, err := scanDelivery(tx.queryRow(`UPDATE outbox SET claim = claim + 1, claimed_at = ?, claim_until = ?,
					first_attempt_at = coalesce(first_attempt_at, ?) WHERE id = ? RETURNING `+deliveryColumns, now, until, now, dID))
			if err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordAttempt implements store.Outbox.
func (s *Store) RecordAttempt(ctx context.Context, dID string, claim int64, a store.Attempt) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "recording a webhook attempt", func(tx *wtx) error {
		d, err := scanDelivery(tx.queryRow(`SELECT `+deliveryColumns+` FROM outbox WHERE id = ?`, dID))
		if errors.Is(err, sql.ErrNoRows) {
			return errClaimLost()
		}
		if err != nil {
			return err
		}
		if d.Claim != claim || d.Status != store.DeliveryPending {
			return errClaimLost()
		}
		store.ApplyAttempt(d, a, tx.now)
		out = d
		return tx.saveDelivery(d)
	})
	return out, err
}

func (tx *wtx) saveDelivery(d *store.Delivery) error {
	_, err := tx.exec(`UPDATE outbox SET status = ?, attempts = ?, last_error = ?, next_at = ?, first_attempt_at = ?,
			claim_until = ? WHERE id = ?`,
		string(d.Status), d.Attempts, d.LastError, micros(d.NextAt), micros(d.FirstAttemptAt), micros(d.ClaimUntil), d.ID)
	return err
}

// GetDelivery implements store.Outbox.
func (s *Store) GetDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	d, err := scanDelivery(s.rq.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM outbox WHERE id = ? AND owner = ?`, dID, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("delivery")
	}
	if err != nil {
		return nil, s.fail("reading a delivery", err)
	}
	return d, nil
}

// ListDeliveries implements store.Outbox.
func (s *Store) ListDeliveries(ctx context.Context, owner string, q store.DeliveryQuery) ([]*store.Delivery, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = -1
	}
	var (
		rows *sql.Rows
		err  error
	)
	if q.Status == "" {
		rows, err = s.rq.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM outbox WHERE owner = ? AND id > ? ORDER BY id LIMIT ?`,
			owner, q.After, limit)
	} else {
		rows, err = s.rq.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM outbox WHERE owner = ? AND status = ? AND id > ? ORDER BY id LIMIT ?`,
			owner, string(q.Status), q.After, limit)
	}
	if err != nil {
		return nil, s.fail("listing deliveries", err)
	}
	defer rows.Close()
	out := []*store.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, s.fail("listing deliveries", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing deliveries", err)
	}
	return out, nil
}

// RetryDelivery implements store.Outbox.
func (s *Store) RetryDelivery(ctx context.Context, owner, dID string) (*store.Delivery, error) {
	var out *store.Delivery
	err := s.write(ctx, "retrying a delivery", func(tx *wtx) error {
		d, err := scanDelivery(tx.queryRow(`SELECT `+deliveryColumns+` FROM outbox WHERE id = ? AND owner = ?`, dID, owner))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("delivery")
		}
		if err != nil {
			return err
		}
		store.ApplyRetry(d, tx.now)
		out = d
		return tx.saveDelivery(d)
	})
	return out, err
}

func errClaimLost() error {
	return &rein.Error{Code: rein.CodeConflict, Message: "delivery claim lost: the delivery was claimed again or is no longer pending", Err: rein.ErrLeaseLost}
}
