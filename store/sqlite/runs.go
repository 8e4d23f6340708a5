package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

const runColumns = `s.owner, s.id, r.id, r.status, r.reason, r.error, r.input, coalesce(r.client_id, ''),
	r.queue_order, r.deadline, r.instance, r.input_tokens, r.output_tokens, r.created_at, r.started_at, r.ended_at`

const runFrom = ` FROM runs r JOIN sessions s ON s.pk = r.session_pk `

func scanRun(sc interface{ Scan(...any) error }) (*store.RunRecord, error) {
	var (
		r                          store.RunRecord
		status, reason             string
		deadline, created, started sql.NullInt64
		ended                      sql.NullInt64
	)
	err := sc.Scan(&r.Owner, &r.SessionID, &r.ID, &status, &reason, &r.Error, &r.Input, &r.ClientID,
		&r.QueueOrder, &deadline, &r.Instance, &r.Usage.InputTokens, &r.Usage.OutputTokens, &created, &started, &ended)
	if err != nil {
		return nil, err
	}
	r.Status, r.Reason = rein.RunStatus(status), rein.Reason(reason)
	r.Deadline, r.CreatedAt, r.StartedAt, r.EndedAt = fromMicros(deadline), fromMicros(created), fromMicros(started), fromMicros(ended)
	return &r, nil
}

// CreateRun implements store.Runs.
func (s *Store) CreateRun(ctx context.Context, r *store.RunRecord) error {
	if r.ID == "" {
		return rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return rein.InvalidArgument("status", "run status %q is not valid", r.Status)
	}
	rec := *r
	rec.Deadline, rec.CreatedAt, rec.StartedAt, rec.EndedAt = norm(r.Deadline), norm(r.CreatedAt), norm(r.StartedAt), norm(r.EndedAt)
	err := s.write(ctx, "creating run", func(tx *wtx) error {
		si, err := tx.session(r.Key())
		if err != nil {
			return err
		}
		var n int
		if err := tx.queryRow(`SELECT count(*) FROM runs WHERE id = ?`, rec.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return rein.Errorf(rein.CodeConflict, "run %q already exists", rec.ID)
		}
		if rec.ClientID != "" {
			if err := tx.queryRow(`SELECT count(*) FROM runs WHERE session_pk = ? AND client_id = ?`, si.pk, rec.ClientID).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return rein.Errorf(rein.CodeConflict, "a run with client id %q already exists in the session", rec.ClientID)
			}
		}
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = tx.now
		}
		_, err = tx.exec(`INSERT INTO runs (id, session_pk, status, reason, error, input, client_id, queue_order, deadline,
				instance, input_tokens, output_tokens, created_at, started_at, ended_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			rec.ID, si.pk, string(rec.Status), string(rec.Reason), rec.Error, rec.Input, nullString(rec.ClientID), rec.QueueOrder,
			micros(rec.Deadline), rec.Instance, rec.Usage.InputTokens, rec.Usage.OutputTokens,
			micros(rec.CreatedAt), micros(rec.StartedAt), micros(rec.EndedAt))
		return err
	})
	if err != nil {
		return err
	}
	*r = rec
	return nil
}

// UpdateRun implements store.Runs. The check for a terminal run and the
// update happen in the writer, one operation after another, so the first
// terminal update wins and every later one sees it.
func (s *Store) UpdateRun(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if u.Status != "" && !u.Status.Valid() {
		return nil, rein.InvalidArgument("status", "run status %q is not valid", u.Status)
	}
	var out *store.RunRecord
	err := s.write(ctx, "updating run", func(tx *wtx) error {
		si, err := tx.fenced(key, fence)
		if err != nil {
			return err
		}
		rec, err := scanRun(tx.queryRow(`SELECT `+runColumns+runFrom+`WHERE r.id = ? AND r.session_pk = ?`, runID, si.pk))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("run")
		}
		if err != nil {
			return err
		}
		if rec.Status.Terminal() {
			out = rec
			return rein.Errorf(rein.CodeConflict, "run %q has already ended (%s)", runID, rec.Status)
		}
		applyRunUpdate(rec, u)
		_, err = tx.exec(`UPDATE runs SET status = ?, reason = ?, error = ?, queue_order = ?, instance = ?,
				input_tokens = ?, output_tokens = ?, started_at = ?, ended_at = ?
			WHERE id = ?`,
			string(rec.Status), string(rec.Reason), rec.Error, rec.QueueOrder, rec.Instance,
			rec.Usage.InputTokens, rec.Usage.OutputTokens, micros(rec.StartedAt), micros(rec.EndedAt), runID)
		if err != nil {
			return err
		}
		out = rec
		return nil
	})
	if err != nil && !(out != nil && errors.Is(err, rein.ErrConflict)) {
		return nil, err
	}
	return out, err
}

// applyRunUpdate applies u to r the way store.RunUpdate defines it: zero
// fields leave r unchanged.
func applyRunUpdate(r *store.RunRecord, u store.RunUpdate) {
	if u.Status != "" {
		r.Status = u.Status
	}
	if u.Reason != "" {
		r.Reason = u.Reason
	}
	if u.Error != "" {
		r.Error = u.Error
	}
	if u.QueueOrder != nil {
		r.QueueOrder = *u.QueueOrder
	}
	if u.Instance != "" {
		r.Instance = u.Instance
	}
	if u.Usage != nil {
		r.Usage = *u.Usage
	}
	if !u.StartedAt.IsZero() {
		r.StartedAt = norm(u.StartedAt)
	}
	if !u.EndedAt.IsZero() {
		r.EndedAt = norm(u.EndedAt)
	}
}

func (s *Store) getRun(ctx context.Context, doing, where string, args ...any) (*store.RunRecord, error) {
	rec, err := scanRun(s.rdb.QueryRowContext(ctx, `SELECT `+runColumns+runFrom+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("run")
	}
	if err != nil {
		return nil, s.fail(doing, err)
	}
	return rec, nil
}

// GetRun implements store.Runs.
func (s *Store) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	return s.getRun(ctx, "reading run", `WHERE r.id = ? AND s.owner = ? AND s.id = ?`, runID, key.Owner, key.ID)
}

// GetRunByClientID implements store.Runs.
func (s *Store) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if clientID == "" {
		return nil, notFound("run")
	}
	return s.getRun(ctx, "reading run", `WHERE s.owner = ? AND s.id = ? AND r.client_id = ?`, key.Owner, key.ID, clientID)
}

func (s *Store) listRuns(ctx context.Context, query string, args ...any) ([]*store.RunRecord, error) {
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail("listing runs", err)
	}
	defer rows.Close()
	out := []*store.RunRecord{}
	for rows.Next() {
		rec, err := scanRun(rows)
		if err != nil {
			return nil, s.fail("listing runs", err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing runs", err)
	}
	return out, nil
}

// ListRuns implements store.Runs.
func (s *Store) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	return s.listRuns(ctx, `SELECT `+runColumns+runFrom+`WHERE s.owner = ? AND s.id = ? ORDER BY r.created_at DESC, r.id DESC`, key.Owner, key.ID)
}

// ListRunsByStatus implements store.Runs.
func (s *Store) ListRunsByStatus(ctx context.Context, statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	if len(statuses) == 0 {
		return []*store.RunRecord{}, nil
	}
	args := make([]any, len(statuses))
	for i, st := range statuses {
		args[i] = string(st)
	}
	marks := strings.Repeat(", ?", len(statuses))[2:]
	return s.listRuns(ctx, `SELECT `+runColumns+runFrom+`WHERE r.status IN (`+marks+`) ORDER BY r.created_at, r.id`, args...)
}
