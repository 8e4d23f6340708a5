package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// A sender runs a batch of statements in order, in one transaction, and
// calls their callbacks (pgx.QueuedQuery.QueryRow and friends).
//
// Each statement group is implemented once, as a function that queues its
// statements on a batch and hands it to a sender, so that the same code
// runs inside an Update (updateTx: the Update's transaction) and, for
// reads and a lease's renewal, on the pool (poolSender: one round trip).
type sender interface {
	send(op string, b *pgx.Batch) error
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
