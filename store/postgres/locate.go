package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein/store"
)

var _ store.RunLocator = (*Store)(nil)

// runSessionSQL reads a run's session by the run's primary key.
const runSessionSQL = `SELECT session_id FROM runs WHERE id = $1 AND owner = $2`

// RunSession implements store.RunLocator: one indexed read.
func (s *Store) RunSession(ctx context.Context, owner, runID string) (string, error) {
	var (
		id    string
		found bool
	)
	err := s.plain(ctx, func(q sender) error {
		b := &pgx.Batch{}
		queryRow(b, func(row pgx.Row) (string, error) {
			var v string
			err := row.Scan(&v)
			return v, err
		}, &id, &found, runSessionSQL, runID, owner)
		return q.send("locate run", b)
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", errRunNotFound
	}
	return id, nil
}
