package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

const runColumns = `s.owner, s.id, r.id, r.status, r.reason, r.error, r.input, coalesce(r.client_id, ''),
	r.queue_order, r.deadline, r.instance, r.resumes, r.stop, r.rolled_back,
	r.input_tokens, r.output_tokens, r.created_at, r.started_at, r.ended_at, r.cost_usd, r.budget`

const runFrom = ` FROM runs r JOIN sessions s ON s.pk = r.session_pk `

func scanRun(sc interface{ Scan(...any) error }) (*store.RunRecord, error) {
	var (
		r                          store.RunRecord
		status, reason             string
		deadline, created, started sql.NullInt64
		ended                      sql.NullInt64
		rolledBack                 int64
		cost                       sql.NullFloat64
		budget                     sql.NullString
	)
	err := sc.Scan(&r.Owner, &r.SessionID, &r.ID, &status, &reason, &r.Error, &r.Input, &r.ClientID,
		&r.QueueOrder, &deadline, &r.Instance, &r.Resumes, &r.Stop, &rolledBack,
		&r.Usage.InputTokens, &r.Usage.OutputTokens, &created, &started, &ended, &cost, &budget)
	if err != nil {
		return nil, err
	}
	if cost.Valid {
		r.Usage.CostUSD = &cost.Float64
	}
	if r.Budget, err = parseBudget(budget); err != nil {
		return nil, err
	}
	r.Status, r.Reason, r.RolledBack = rein.RunStatus(status), rein.Reason(reason), rolledBack != 0
	r.Deadline, r.CreatedAt, r.StartedAt, r.EndedAt = fromMicros(deadline), fromMicros(created), fromMicros(started), fromMicros(ended)
	return &r, nil
}

// scanRuns reads every row as a run and closes the rows.
func scanRuns(rows *sql.Rows) ([]*store.RunRecord, error) {
	defer rows.Close()
	out := []*store.RunRecord{}
	for rows.Next() {
		rec, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// prepareRun validates r and returns the record to store, its times
// normalised.
func prepareRun(r *store.RunRecord) (store.RunRecord, error) {
	if r.ID == "" {
		return store.RunRecord{}, rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return store.RunRecord{}, rein.InvalidArgument("status", "run status %q is not valid", r.Status)
	}
	rec := *r
	rec.Deadline, rec.CreatedAt, rec.StartedAt, rec.EndedAt = norm(r.Deadline), norm(r.CreatedAt), norm(r.StartedAt), norm(r.EndedAt)
	return rec, nil
}

// createRun is the one implementation of a run's creation, for CreateRun
// and Tx.CreateRun. A zero CreatedAt becomes the operation's time.
func (tx *wtx) createRun(si *sessInfo, rec *store.RunRecord) error {
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = tx.now
	}
	// The run id's primary key and the session's unique client ids refuse
	// a duplicate: no read before the insert. A constraint failure undoes
	// only the statement, so it is a refusal, not a broken transaction.
	budget, err := budgetText(rec.Budget)
	if err != nil {
		return err
	}
	_, err = tx.exec(`INSERT INTO runs (id, session_pk, status, reason, error, input, client_id, queue_order, deadline,
			instance, resumes, stop, rolled_back, input_tokens, output_tokens, created_at, started_at, ended_at, cost_usd, budget)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		rec.ID, si.pk, string(rec.Status), string(rec.Reason), rec.Error, rec.Input, nullString(rec.ClientID), rec.QueueOrder,
		micros(rec.Deadline), rec.Instance, rec.Resumes, string(rec.Stop), boolInt(rec.RolledBack),
		rec.Usage.InputTokens, rec.Usage.OutputTokens,
		micros(rec.CreatedAt), micros(rec.StartedAt), micros(rec.EndedAt), nullFloat(rec.Usage.CostUSD), budget)
	if err == nil {
		tx.runWritten(si, rec)
		return nil
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return rein.Errorf(rein.CodeConflict, "run %q already exists", rec.ID)
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return rein.Errorf(rein.CodeConflict, "a run with client id %q already exists in the session", rec.ClientID)
		}
	}
	return err
}

func checkRunUpdate(u store.RunUpdate) error {
	if u.Status != "" && !u.Status.Valid() {
		return rein.InvalidArgument("status", "run status %q is not valid", u.Status)
	}
	return nil
}

// updateRun is the one implementation of a run update, for UpdateRun and
// Tx.UpdateRun. For a terminal run it returns the stored record with the
// conflict.
func (tx *wtx) updateRun(si *sessInfo, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	rec, err := tx.getRun(si, runID)
	if err != nil {
		return nil, err
	}
	if rec.Status.Terminal() {
		return rec, rein.Errorf(rein.CodeConflict, "run %q has already ended (%s)", runID, rec.Status)
	}
	if u.Input != "" && rec.Status != rein.StatusQueued {
		return rec, rein.Errorf(rein.CodeConflict, "run %q is no longer queued (%s): its input cannot change", runID, rec.Status)
	}
	u.Apply(rec, norm)
	_, err = tx.exec(`UPDATE runs SET status = ?, input = ?, reason = ?, error = ?, queue_order = ?, instance = ?,
			resumes = ?, stop = ?, rolled_back = ?, input_tokens = ?, output_tokens = ?, started_at = ?, ended_at = ?, cost_usd = ?
		WHERE id = ?`,
		string(rec.Status), rec.Input, string(rec.Reason), rec.Error, rec.QueueOrder, rec.Instance,
		rec.Resumes, string(rec.Stop), boolInt(rec.RolledBack),
		rec.Usage.InputTokens, rec.Usage.OutputTokens, micros(rec.StartedAt), micros(rec.EndedAt), nullFloat(rec.Usage.CostUSD), runID)
	if err != nil {
		return nil, err
	}
	tx.runWritten(si, rec)
	return rec, nil
}

// getRun and getRunByClientID read a run of the session through the
// writer's connection.
func (tx *wtx) getRun(si *sessInfo, runID string) (*store.RunRecord, error) {
	if rec, ok, err := tx.cachedRun(si, runID); err != nil || ok {
		return rec, err
	}
	return tx.scanOneRun(`WHERE r.id = ? AND r.session_pk = ?`, runID, si.pk)
}

func (tx *wtx) getRunByClientID(si *sessInfo, clientID string) (*store.RunRecord, error) {
	if clientID == "" {
		return nil, notFound("run")
	}
	return tx.scanOneRun(`WHERE r.session_pk = ? AND r.client_id = ?`, si.pk, clientID)
}

func (tx *wtx) scanOneRun(where string, args ...any) (*store.RunRecord, error) {
	rec, err := scanRun(tx.queryRow(`SELECT `+runColumns+runFrom+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("run")
	}
	return rec, err
}

// runs lists the session's runs in the statuses (all for none) in queue
// order, for Tx.Runs. One statement per number of statuses is prepared,
// and there are only a handful of statuses.
func (tx *wtx) runs(si *sessInfo, statuses []rein.RunStatus) ([]*store.RunRecord, error) {
	if out, ok, err := tx.cachedRuns(si, statuses); err != nil || ok {
		return out, err
	}
	return tx.runsFromDB(si, statuses)
}

// runsFromDB is runs read from the database.
func (tx *wtx) runsFromDB(si *sessInfo, statuses []rein.RunStatus) ([]*store.RunRecord, error) {
	args := []any{si.pk}
	filter := ""
	if len(statuses) > 0 {
		filter = ` AND r.status IN (` + strings.Repeat(", ?", len(statuses))[2:] + `)`
		for _, st := range statuses {
			args = append(args, string(st))
		}
	}
	rows, err := tx.query(`SELECT `+runColumns+runFrom+`WHERE r.session_pk = ?`+filter+
		` ORDER BY r.queue_order, r.created_at, r.id`, args...)
	if err != nil {
		return nil, err
	}
	return scanRuns(rows)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Store) getRun(ctx context.Context, doing, where string, args ...any) (*store.RunRecord, error) {
	rec, err := scanRun(s.rq.QueryRowContext(ctx, `SELECT `+runColumns+runFrom+where, args...))
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
	rec, err := s.getRun(ctx, "reading run", `WHERE r.id = ? AND s.owner = ? AND s.id = ?`, runID, key.Owner, key.ID)
	return settled(ctx, s, key, rec, err)
}

// GetRunByClientID implements store.Runs.
func (s *Store) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if clientID == "" {
		return nil, notFound("run")
	}
	rec, err := s.getRun(ctx, "reading run", `WHERE s.owner = ? AND s.id = ? AND r.client_id = ?`, key.Owner, key.ID, clientID)
	return settled(ctx, s, key, rec, err)
}

func (s *Store) listRuns(ctx context.Context, query string, args ...any) ([]*store.RunRecord, error) {
	rows, err := s.rq.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail("listing runs", err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, s.fail("listing runs", err)
	}
	return out, nil
}

// ListRuns implements store.Runs.
func (s *Store) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	runs, err := s.listRuns(ctx, `SELECT `+runColumns+runFrom+`WHERE s.owner = ? AND s.id = ? ORDER BY r.created_at DESC, r.id DESC`, key.Owner, key.ID)
	return settled(ctx, s, key, runs, err)
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

// qEndedSince is ListEndedSince's query: a range of the runs_by_end index
// (TestEndedSinceUsesIndex checks the plan).
const qEndedSince = `SELECT ` + runColumns + runFrom + `WHERE r.ended_at >= ? ORDER BY r.ended_at, r.id`

// ListEndedSince implements store.Runs.
func (s *Store) ListEndedSince(ctx context.Context, since time.Time) ([]*store.RunRecord, error) {
	return s.listRuns(ctx, qEndedSince, since.UnixMicro())
}

func nullFloat(f *float64) sql.NullFloat64 {
	if f == nil {
		return sql.NullFloat64{}
	}
	return sql.NullFloat64{Float64: *f, Valid: true}
}
