package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/reinhq/rein/store"
)

var _ store.RunLocator = (*Store)(nil)

// RunSession implements store.RunLocator: one indexed read (runs by their
// primary key).
func (s *Store) RunSession(ctx context.Context, owner, runID string) (string, error) {
	var id string
	err := s.rq.QueryRowContext(ctx, `SELECT s.id`+runFrom+`WHERE r.id = ? AND s.owner = ?`, runID, owner).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("run")
	}
	if err != nil {
		return "", s.fail("locating run", err)
	}
	return id, nil
}
