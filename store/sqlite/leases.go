package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

const leaseColumns = `s.owner, s.id, l.run_id, l.holder, l.token, l.expires_at`

const leaseFrom = ` FROM leases l JOIN sessions s ON s.pk = l.session_pk `

func scanLease(sc interface{ Scan(...any) error }) (*store.Lease, error) {
	var l store.Lease
	var expires int64
	if err := sc.Scan(&l.Owner, &l.SessionID, &l.RunID, &l.Holder, &l.Token, &expires); err != nil {
		return nil, err
	}
	l.ExpiresAt = time.UnixMicro(expires).UTC()
	return &l, nil
}

// acquireLease is the one implementation of an acquisition, for
// AcquireLease and Tx.AcquireLease. The token comes from the session row's
// lease_token, which only grows and survives release and restart. A lease
// that has not expired by the operation's time is never taken over, not
// even by the run that holds it: only expiry proves a holder gone.
func (tx *wtx) acquireLease(key rein.SessionKey, si *sessInfo, holder, runID string, ttl time.Duration) (*store.Lease, error) {
	cur, err := tx.lease(si)
	if err != nil {
		return nil, err
	}
	if cur != nil && cur.ExpiresAt.After(tx.now) {
		// Only the run id: which instance holds the turn is never
		// revealed (docs/api.md).
		return nil, &rein.Error{Code: rein.CodeSessionBusy, Message: "the session's turn is held by a run whose lease has not expired", RunID: cur.RunID}
	}
	var token int64
	if err := tx.queryRow(`UPDATE sessions SET lease_token = lease_token + 1 WHERE pk = ? RETURNING lease_token`, si.pk).Scan(&token); err != nil {
		return nil, err
	}
	l := &store.Lease{Owner: key.Owner, SessionID: key.ID, RunID: runID, Holder: holder, Token: token, ExpiresAt: norm(tx.now.Add(ttl))}
	_, err = tx.exec(`INSERT INTO leases (session_pk, run_id, holder, token, expires_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (session_pk) DO UPDATE SET run_id = excluded.run_id, holder = excluded.holder,
			token = excluded.token, expires_at = excluded.expires_at`,
		si.pk, l.RunID, l.Holder, l.Token, l.ExpiresAt.UnixMicro())
	if err != nil {
		return nil, err
	}
	tx.touch(si)
	si.lease = token
	kept := *l
	si.leaseRec, si.leaseKnown = &kept, true
	return l, nil
}

// lease reads the session's lease, expired or not, through the writer's
// connection; nil when it has none. The cache entry knows it once loaded
// (the writer makes every change to it): a copy of its record then.
func (tx *wtx) lease(si *sessInfo) (*store.Lease, error) {
	if si.leaseKnown {
		if si.leaseRec == nil {
			return nil, nil
		}
		l := *si.leaseRec
		return &l, nil
	}
	l, err := scanLease(tx.queryRow(`SELECT `+leaseColumns+leaseFrom+`WHERE l.session_pk = ?`, si.pk))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return l, err
}

// RenewLease implements store.Leases. A lease that expired by the
// operation's time is lost even if nobody took it over: its holder may
// already have been declared dead.
func (s *Store) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	var out *store.Lease
	err := s.write(ctx, "renewing lease", func(tx *wtx) error {
		si, err := tx.session(l.Key())
		if err != nil {
			return err
		}
		if si.lease == 0 || si.lease != l.Token {
			return errLeaseLost()
		}
		expires := norm(tx.now.Add(ttl))
		cur := store.Lease{Owner: l.Owner, SessionID: l.SessionID, Token: l.Token, ExpiresAt: expires}
		err = tx.queryRow(`UPDATE leases SET expires_at = ? WHERE session_pk = ? AND token = ? AND expires_at > ? RETURNING run_id, holder`,
			expires.UnixMicro(), si.pk, l.Token, tx.now.UnixMicro()).Scan(&cur.RunID, &cur.Holder)
		if errors.Is(err, sql.ErrNoRows) {
			return errLeaseLost()
		}
		if err != nil {
			return err
		}
		out = &cur
		tx.touch(si)
		kept := cur
		si.leaseRec, si.leaseKnown = &kept, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// releaseLease is the one implementation of a release, for ReleaseLease
// and Tx.ReleaseLease. The row goes; the token counter on the session
// stays, so the next acquisition still gets a larger token.
func (tx *wtx) releaseLease(si *sessInfo, token int64) error {
	if si.lease == 0 || si.lease != token {
		return nil
	}
	if _, err := tx.exec(`DELETE FROM leases WHERE session_pk = ? AND token = ?`, si.pk, token); err != nil {
		return err
	}
	tx.touch(si)
	si.lease, si.leaseRec, si.leaseKnown = 0, nil, true
	return nil
}

// expireLeases makes every lease in the file expired, as of now. Open
// calls it: holding the file lock proves that no other process has the
// file, so every lease left in it belongs to a process that is gone (or
// to an earlier Store of this one, closed). Marking them expired at once,
// rather than waiting out their TTL, lets the runs they held be taken over
// and resumed right away; the rows and their tokens stay, so fencing
// tokens keep growing and a lease is still what GetLease and recovery
// find.
func expireLeases(ctx context.Context, conn *sql.Conn, now time.Time) error {
	// One microsecond before now, so that the lease is expired by
	// AcquireLease's rule (not after now) and by any reader's (before
	// now).
	past := now.UnixMicro() - 1
	_, err := conn.ExecContext(ctx, `UPDATE leases SET expires_at = ? WHERE expires_at > ?`, past, past)
	return err
}

// qLeaseByKey is the session's lease and the session's existence in one
// statement (no row: no session; a row without a token: no lease), asked
// at every message.
const qLeaseByKey = `SELECT s.owner, s.id, coalesce(l.run_id, ''), coalesce(l.holder, ''), coalesce(l.token, 0),
		coalesce(l.expires_at, 0), l.session_pk IS NOT NULL
		FROM sessions s LEFT JOIN leases l ON l.session_pk = s.pk WHERE s.owner = ? AND s.id = ?`

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, key rein.SessionKey) (*store.Lease, error) {
	var l store.Lease
	var expires int64
	var held bool
	err := s.rq.QueryRowContext(ctx, qLeaseByKey, key.Owner, key.ID).Scan(&l.Owner, &l.SessionID, &l.RunID, &l.Holder, &l.Token, &expires, &held)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, s.fail("reading lease", err)
	}
	if !held {
		return nil, notFound("lease")
	}
	l.ExpiresAt = time.UnixMicro(expires).UTC()
	return settled(ctx, s, key, &l, nil)
}
