package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

const leaseColumns = `owner, session_id, run_id, holder, token, expires_at`

func scanLease(row pgx.Row) (*store.Lease, error) {
	var l store.Lease
	if err := row.Scan(&l.Owner, &l.SessionID, &l.RunID, &l.Holder, &l.Token, &l.ExpiresAt); err != nil {
		return nil, err
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return &l, nil
}

// acquireSQL takes the session's turn in one statement: a new row, or a
// takeover of an expired lease (or a re-acquisition by the same run), each
// with a fresh token from the global sequence. An unexpired lease of another
// run leaves the row untouched and returns nothing. The row lock taken by
// ON CONFLICT makes concurrent acquirers, in any process, queue up: exactly
// one of them sees the old lease expired.
const acquireSQL = `
INSERT INTO leases (owner, session_id, run_id, holder, token, expires_at)
VALUES ($1, $2, $3, $4, nextval('lease_tokens'), $5)
ON CONFLICT (owner, session_id) DO UPDATE
    SET run_id = excluded.run_id, holder = excluded.holder, token = excluded.token, expires_at = excluded.expires_at
    WHERE leases.expires_at <= $6 OR leases.run_id = excluded.run_id
RETURNING ` + leaseColumns

// AcquireLease gives the session's turn to runID on holder for ttl.
func (s *Store) AcquireLease(ctx context.Context, key rein.SessionKey, holder, runID string, ttl time.Duration) (*store.Lease, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	// Two attempts: the holder seen busy may release between the INSERT
	// and the read of who holds it; then the turn is free and one more
	// INSERT takes it.
	for attempt := 0; ; attempt++ {
		now := s.now()
		l, err := scanLease(s.pool.QueryRow(octx, acquireSQL, key.Owner, key.ID, runID, holder, now.Add(ttl), now))
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			err = s.fail(ctx, octx, "acquire lease", err)
			if rein.CodeOf(err) == rein.CodeNotFound {
				return nil, errSessionNotFound
			}
			return nil, err
		}
		cur, err := s.GetLease(ctx, key)
		if rein.CodeOf(err) == rein.CodeNotFound && attempt == 0 {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The holder instance is never named: it is internal topology
		// (SPEC §3: no error reveals which instance holds a run).
		return nil, &rein.Error{Code: rein.CodeSessionBusy, Message: "session is busy", RunID: cur.RunID}
	}
}

// RenewLease extends a lease whose token is still current.
func (s *Store) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	nl, err := scanLease(s.pool.QueryRow(octx, `UPDATE leases SET expires_at = $4
		WHERE owner = $1 AND session_id = $2 AND token = $3 RETURNING `+leaseColumns,
		l.Owner, l.SessionID, l.Token, s.now().Add(ttl)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errLeaseLost
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "renew lease", err)
	}
	return nl, nil
}

// ReleaseLease drops the lease if its token is still current.
func (s *Store) ReleaseLease(ctx context.Context, l *store.Lease) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.pool.Exec(octx, `DELETE FROM leases WHERE owner = $1 AND session_id = $2 AND token = $3`,
		l.Owner, l.SessionID, l.Token)
	return s.fail(ctx, octx, "release lease", err)
}

// GetLease returns the session's current lease, expired or not.
func (s *Store) GetLease(ctx context.Context, key rein.SessionKey) (*store.Lease, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	l, err := scanLease(s.pool.QueryRow(octx, `SELECT `+leaseColumns+` FROM leases WHERE owner = $1 AND session_id = $2`,
		key.Owner, key.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, rein.Errorf(rein.CodeNotFound, "no lease")
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "get lease", err)
	}
	return l, nil
}

// ListExpiredLeases returns the leases that expired before now, oldest
// expiry first.
func (s *Store) ListExpiredLeases(ctx context.Context, now time.Time) ([]*store.Lease, error) {
	return queryAll(ctx, s, "list expired leases", scanLease, `SELECT `+leaseColumns+` FROM leases WHERE expires_at < $1
		ORDER BY expires_at, owner, session_id`, ceilMicro(now))
}

// ceilMicro rounds t up to PostgreSQL's microsecond precision. A stored
// (microsecond) time e is before t exactly when e is before ceilMicro(t), so
// "expired before now" means the same here as with nanosecond Go times.
func ceilMicro(t time.Time) time.Time {
	t = t.UTC()
	c := t.Truncate(time.Microsecond)
	if c.Before(t) {
		c = c.Add(time.Microsecond)
	}
	return c
}
