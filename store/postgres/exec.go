package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
)

// A sender runs a batch of statements in order, in one transaction, and
// calls their callbacks (pgx.QueuedQuery.QueryRow and friends).
//
// Each write is implemented once, as a function that queues its statements
// on a batch and hands it to a sender, so that the same code runs as a
// public method (sessionWriter: its own implicit transaction, one round
// trip) and inside an Update (updateTx: the Update's transaction).
type sender interface {
	send(op string, b *pgx.Batch) error
}

// lockSessionSQL takes the weakest row lock there is on the session row:
// it blocks only while an Update holds the row FOR UPDATE, and it is the
// lock a foreign key check would take anyway.
const lockSessionSQL = `SELECT 1 FROM sessions WHERE owner = $1 AND id = $2 FOR KEY SHARE`

// sessionWriter runs a public write to one session: its statements go in
// one pipelined implicit transaction (one round trip) behind a statement
// that key-share-locks the session row.
//
// That lock is what serialises the write with the session's Updates
// (which hold the row FOR UPDATE), so nothing an Update's function read
// changes before it commits. It also keeps the global lock order (session
// row, lease row, counter row, then the rest): without it an insert would
// take its unique index entry first and the foreign key's lock on the
// session row second, and an Update inserting the same key (a run's client
// id, a lease) would deadlock with it. And it reports a missing session.
type sessionWriter struct {
	s         *Store
	ctx, octx context.Context
	key       rein.SessionKey
}

func (w *sessionWriter) send(op string, b *pgx.Batch) error {
	var locked, exists bool
	lb := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	lb.Queue(lockSessionSQL, w.key.Owner, w.key.ID).QueryRow(func(row pgx.Row) error {
		err := row.Scan(new(int))
		locked, exists = err == nil || errors.Is(err, pgx.ErrNoRows), err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	lb.QueuedQueries = append(lb.QueuedQueries, b.QueuedQueries...)
	err := w.s.pool.SendBatch(w.octx, lb).Close()
	if locked && !exists {
		// Whatever the later statements did (a foreign key violation, no
		// row updated), the session is missing, and that is the answer.
		return errSessionNotFound
	}
	return w.s.fail(w.ctx, w.octx, op, err)
}

// poolSender runs statements on the pool without locking the session:
// for reads, and for the lease writes that touch only an existing lease row
// (whose lock serialises them with Updates already).
type poolSender struct {
	s         *Store
	ctx, octx context.Context
}

func (p *poolSender) send(op string, b *pgx.Batch) error {
	return p.s.fail(p.ctx, p.octx, op, p.s.pool.SendBatch(p.octx, b).Close())
}

// write runs fn with a sessionWriter for key, bounded by the store's
// Timeout.
func (s *Store) write(ctx context.Context, key rein.SessionKey, fn func(w sender) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	return fn(&sessionWriter{s: s, ctx: ctx, octx: octx, key: key})
}

// plain runs fn with a poolSender, bounded by the store's Timeout.
func (s *Store) plain(ctx context.Context, fn func(q sender) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	return fn(&poolSender{s: s, ctx: ctx, octx: octx})
}

// queryRow queues query with a callback that scans its row with scan into
// *out and sets *found; no row leaves both untouched.
func queryRow[T any](b *pgx.Batch, scan func(pgx.Row) (T, error), out *T, found *bool, query string, args ...any) {
	b.Queue(query, args...).QueryRow(func(row pgx.Row) error {
		v, err := scan(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		*out = v
		if found != nil {
			*found = true
		}
		return nil
	})
}

// queryRows queues query with a callback that appends each row, scanned
// with scan, to *out.
func queryRows[T any](b *pgx.Batch, scan func(pgx.Row) (T, error), out *[]T, query string, args ...any) {
	b.Queue(query, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			*out = append(*out, v)
		}
		return rows.Err()
	})
}
