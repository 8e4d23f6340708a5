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
// takeover of an expired lease, each with a fresh token from the global
// sequence. An unexpired lease — whoever holds it, the same run included —
// leaves the row untouched and returns nothing. The row lock taken by ON
// CONFLICT makes concurrent acquirers, in any process, queue up: exactly one
// of them sees the old lease expired. It also stays held when the WHERE
// refuses, so holderSQL, next in the same transaction, reads the lease that
// made the session busy.
//
// $5 is the time expiry is judged by and $6 the new expiry, both NULL to use
// the database's clock (then $7 is the TTL in microseconds).
const acquireSQL = `
INSERT INTO leases (owner, session_id, run_id, holder, token, expires_at)
VALUES ($1, $2, $3, $4, nextval('lease_tokens'),
        coalesce($6::timestamptz, now() + $7::bigint * interval '1 microsecond'))
ON CONFLICT (owner, session_id) DO UPDATE
    SET run_id = excluded.run_id, holder = excluded.holder, token = excluded.token, expires_at = excluded.expires_at
    WHERE leases.expires_at <= coalesce($5::timestamptz, now())
RETURNING ` + leaseColumns

const holderSQL = `SELECT run_id FROM leases WHERE owner = $1 AND session_id = $2`

// acquireLease is Tx.AcquireLease. now is the time expiry is judged by; nil means the database's now().
func acquireLease(q sender, key rein.SessionKey, holder, runID string, ttl time.Duration, now *time.Time) (*store.Lease, error) {
	var expires *time.Time
	if now != nil {
		e := now.Add(ttl)
		expires = &e
	}
	var (
		l            *store.Lease
		got, present bool
		holderRun    string
	)
	b := &pgx.Batch{}
	queryRow(b, scanLease, &l, &got, acquireSQL, key.Owner, key.ID, runID, holder, now, expires, ttl.Microseconds())
	queryRow(b, scanString, &holderRun, &present, holderSQL, key.Owner, key.ID)
	if err := q.send("acquire lease", b); err != nil {
		return nil, err
	}
	switch {
	case got:
		return l, nil
	case !present:
		// Cannot happen: a refused upsert leaves a row it holds locked.
		return nil, rein.Errorf(rein.CodeInternal, "postgres: acquire lease: the lease vanished")
	}
	// The holder instance is never named: it is internal topology (SPEC
	// §3: no error reveals which instance holds a run).
	return nil, &rein.Error{Code: rein.CodeSessionBusy, Message: "session is busy", RunID: holderRun}
}

func scanString(row pgx.Row) (string, error) {
	var v string
	err := row.Scan(&v)
	return v, err
}

// renewSQL extends a lease that is current (its token) and not expired by
// the judging clock; $4 and $5 as $5 and $6 of acquireSQL.
const renewSQL = `
UPDATE leases SET expires_at = coalesce($5::timestamptz, now() + $6::bigint * interval '1 microsecond')
WHERE owner = $1 AND session_id = $2 AND token = $3 AND expires_at > coalesce($4::timestamptz, now())
RETURNING ` + leaseColumns

// RenewLease extends a lease whose token is still current and which has not
// expired (by the database's clock unless Options.Clock is set). It does not
// lock the session row: the lease row's own lock, which an Update holds,
// serialises it.
func (s *Store) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	var (
		nl      *store.Lease
		renewed bool
	)
	err := s.plain(ctx, func(q sender) error {
		now := s.leaseNow()
		var expires *time.Time
		if now != nil {
			e := now.Add(ttl)
			expires = &e
		}
		b := &pgx.Batch{}
		queryRow(b, scanLease, &nl, &renewed, renewSQL, l.Owner, l.SessionID, l.Token, now, expires, ttl.Microseconds())
		return q.send("renew lease", b)
	})
	if err != nil {
		return nil, err
	}
	if !renewed {
		return nil, errLeaseLost
	}
	return nl, nil
}

func releaseLease(q sender, key rein.SessionKey, token int64) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM leases WHERE owner = $1 AND session_id = $2 AND token = $3`, key.Owner, key.ID, token)
	return q.send("release lease", b)
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
