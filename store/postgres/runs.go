package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

const runColumns = `owner, session_id, id, status, reason, error, input, client_id, queue_order, deadline,
	instance, input_tokens, output_tokens, created_at, started_at, ended_at`

func scanRun(row pgx.Row) (*store.RunRecord, error) {
	var (
		r                        store.RunRecord
		status, reason           string
		clientID                 *string
		deadline, started, ended *time.Time
	)
	if err := row.Scan(&r.Owner, &r.SessionID, &r.ID, &status, &reason, &r.Error, &r.Input, &clientID, &r.QueueOrder,
		&deadline, &r.Instance, &r.Usage.InputTokens, &r.Usage.OutputTokens, &r.CreatedAt, &started, &ended); err != nil {
		return nil, err
	}
	r.Status, r.Reason = rein.RunStatus(status), rein.Reason(reason)
	if clientID != nil {
		r.ClientID = *clientID
	}
	r.Deadline, r.StartedAt, r.EndedAt = fromNullTime(deadline), fromNullTime(started), fromNullTime(ended)
	r.CreatedAt = r.CreatedAt.UTC()
	return &r, nil
}

// CreateRun stores a run record.
func (s *Store) CreateRun(ctx context.Context, r *store.RunRecord) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if r.ID == "" {
		return rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return rein.InvalidArgument("status", "unknown run status %q", r.Status)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = s.now()
	} else {
		r.CreatedAt = dbTime(r.CreatedAt)
	}
	r.Deadline, r.StartedAt, r.EndedAt = fromNullTime(nullTime(r.Deadline)), fromNullTime(nullTime(r.StartedAt)), fromNullTime(nullTime(r.EndedAt))
	octx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.pool.Exec(octx, `INSERT INTO runs (`+runColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		r.Owner, r.SessionID, r.ID, string(r.Status), string(r.Reason), r.Error, r.Input, nullString(r.ClientID), r.QueueOrder,
		nullTime(r.Deadline), r.Instance, r.Usage.InputTokens, r.Usage.OutputTokens, r.CreatedAt, nullTime(r.StartedAt), nullTime(r.EndedAt))
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	isPg := errors.As(err, &pe)
	err = s.fail(ctx, octx, "create run", err)
	switch {
	case isPg && pe.Code == "23505" && pe.ConstraintName == "runs_by_client_id":
		return rein.Errorf(rein.CodeConflict, "run with client id %q already exists in session %s", r.ClientID, r.SessionID)
	case isPg && pe.Code == "23505":
		return rein.Errorf(rein.CodeConflict, "run %s already exists", r.ID)
	case isPg && pe.Code == "23503":
		return errSessionNotFound
	}
	return err
}

// updateRunSQL applies a RunUpdate to a run that is not terminal, in one
// statement that also checks the fence (as for events: the lease row is
// share-locked so the check holds until commit). Zero fields keep the stored
// value. No row means: missing run, terminal run, or stale fence.
const updateRunSQL = `
WITH lease AS (
    SELECT 1 FROM leases WHERE owner = $1 AND session_id = $2 AND token = $4 FOR SHARE
)
UPDATE runs SET
    status        = coalesce(nullif($5, ''), status),
    reason        = coalesce(nullif($6, ''), reason),
    error         = coalesce(nullif($7, ''), error),
    queue_order   = coalesce($8, queue_order),
    instance      = coalesce(nullif($9, ''), instance),
    input_tokens  = coalesce($10, input_tokens),
    output_tokens = coalesce($11, output_tokens),
    started_at    = coalesce($12, started_at),
    ended_at      = coalesce($13, ended_at)
WHERE owner = $1 AND session_id = $2 AND id = $3
  AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND ($4 = 0 OR EXISTS (SELECT 1 FROM lease))
RETURNING ` + runColumns

// UpdateRun applies u to a run that is not terminal. Concurrent updates are
// serialised by the row lock, and a terminal status, once committed, fails
// every later update: the first terminal update wins across processes.
func (s *Store) UpdateRun(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if u.Status != "" && !u.Status.Valid() {
		return nil, rein.InvalidArgument("status", "unknown run status %q", u.Status)
	}
	var in, out *int64
	if u.Usage != nil {
		in, out = &u.Usage.InputTokens, &u.Usage.OutputTokens
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	r, err := scanRun(s.pool.QueryRow(octx, updateRunSQL, key.Owner, key.ID, runID, fence.Token,
		string(u.Status), string(u.Reason), u.Error, u.QueueOrder, u.Instance, in, out, nullTime(u.StartedAt), nullTime(u.EndedAt)))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, s.fail(ctx, octx, "update run", err)
	}
	// Refused: say why, checking in the order the contract ranks the
	// reasons (missing session, stale fence, missing run, ended run).
	var (
		exists, holds bool
		status        *string
	)
	err = s.pool.QueryRow(octx, `SELECT
		EXISTS (SELECT 1 FROM sessions WHERE owner = $1 AND id = $2),
		EXISTS (SELECT 1 FROM leases WHERE owner = $1 AND session_id = $2 AND token = $3),
		(SELECT status FROM runs WHERE owner = $1 AND session_id = $2 AND id = $4)`,
		key.Owner, key.ID, fence.Token, runID).Scan(&exists, &holds, &status)
	switch {
	case err != nil:
		return nil, s.fail(ctx, octx, "update run", err)
	case !exists:
		return nil, errSessionNotFound
	case fence.Token != 0 && !holds:
		return nil, errLeaseLost
	case status == nil:
		return nil, errRunNotFound
	case rein.RunStatus(*status).Terminal():
		cur, err := s.GetRun(ctx, key, runID)
		if err != nil {
			return nil, err
		}
		return cur, rein.Errorf(rein.CodeConflict, "run %s has already ended (%s)", runID, cur.Status)
	}
	// The run was created, or the lease taken, after the update looked:
	// at that moment there was nothing it could update.
	return nil, errRunNotFound
}

var errRunNotFound = rein.Errorf(rein.CodeNotFound, "run not found")

// GetRun returns one run of the session.
func (s *Store) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	return s.getRun(ctx, "get run", `SELECT `+runColumns+` FROM runs WHERE owner = $1 AND session_id = $2 AND id = $3`,
		key.Owner, key.ID, runID)
}

// GetRunByClientID returns the session's run with that client id.
func (s *Store) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if clientID == "" {
		return nil, errRunNotFound
	}
	return s.getRun(ctx, "get run", `SELECT `+runColumns+` FROM runs WHERE owner = $1 AND session_id = $2 AND client_id = $3`,
		key.Owner, key.ID, clientID)
}

func (s *Store) getRun(ctx context.Context, op, query string, args ...any) (*store.RunRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	r, err := scanRun(s.pool.QueryRow(octx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errRunNotFound
	}
	if err != nil {
		return nil, s.fail(ctx, octx, op, err)
	}
	return r, nil
}

// ListRuns returns the session's runs, newest first.
func (s *Store) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	out := []*store.RunRecord{}
	err := s.queryInSession(ctx, "list runs", key, func(rows pgx.Rows) error {
		r, err := scanRun(rows)
		if err == nil {
			out = append(out, r)
		}
		return err
	}, `SELECT `+runColumns+` FROM runs WHERE owner = $1 AND session_id = $2 ORDER BY created_at DESC, id DESC`, key.Owner, key.ID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListRunsByStatus returns every run in one of the statuses, oldest first.
func (s *Store) ListRunsByStatus(ctx context.Context, statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	ss := make([]string, len(statuses))
	for i, st := range statuses {
		ss[i] = string(st)
	}
	return s.listRuns(ctx, "list runs by status", `SELECT `+runColumns+` FROM runs WHERE status = ANY($1)
		ORDER BY created_at, id`, ss)
}

func (s *Store) listRuns(ctx context.Context, op, query string, args ...any) ([]*store.RunRecord, error) {
	return queryAll(ctx, s, op, scanRun, query, args...)
}
