package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

const runColumns = `owner, session_id, id, status, reason, error, input, client_id, queue_order, deadline,
	instance, input_tokens, output_tokens, created_at, started_at, ended_at, resumes, stop, rolled_back, cost_usd, budget`

func scanRun(row pgx.Row) (*store.RunRecord, error) {
	var (
		r                        store.RunRecord
		status, reason           string
		clientID                 *string
		deadline, started, ended *time.Time
		budget                   []byte
	)
	if err := row.Scan(&r.Owner, &r.SessionID, &r.ID, &status, &reason, &r.Error, &r.Input, &clientID, &r.QueueOrder,
		&deadline, &r.Instance, &r.Usage.InputTokens, &r.Usage.OutputTokens, &r.CreatedAt, &started, &ended,
		&r.Resumes, &r.Stop, &r.RolledBack, &r.Usage.CostUSD, &budget); err != nil {
		return nil, err
	}
	var err error
	if r.Budget, err = parseBudget(budget); err != nil {
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

// insertRunSQL inserts a run unless its id or client id is taken. DO
// NOTHING rather than a unique violation, because inside an Update a
// failed statement would abort the whole transaction, and a caller that
// meets a taken client id wants to go on and read that run.
const insertRunSQL = `INSERT INTO runs (` + runColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21::text::jsonb)
	ON CONFLICT DO NOTHING
	RETURNING 1`

// createRun is Tx.CreateRun; now stamps a zero CreatedAt.
func createRun(q sender, r *store.RunRecord, now time.Time) error {
	if r.ID == "" {
		return rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return rein.InvalidArgument("status", "unknown run status %q", r.Status)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	} else {
		r.CreatedAt = dbTime(r.CreatedAt)
	}
	r.Deadline, r.StartedAt, r.EndedAt = fromNullTime(nullTime(r.Deadline)), fromNullTime(nullTime(r.StartedAt)), fromNullTime(nullTime(r.EndedAt))
	var inserted bool
	b := &pgx.Batch{}
	queryRow(b, scanInt, new(int64), &inserted, insertRunSQL,
		r.Owner, r.SessionID, r.ID, string(r.Status), string(r.Reason), r.Error, r.Input, nullString(r.ClientID), r.QueueOrder,
		nullTime(r.Deadline), r.Instance, r.Usage.InputTokens, r.Usage.OutputTokens, r.CreatedAt, nullTime(r.StartedAt), nullTime(r.EndedAt),
		r.Resumes, string(r.Stop), r.RolledBack, r.Usage.CostUSD, budgetText(r.Budget))
	if err := q.send("create run", b); err != nil {
		return err
	}
	if inserted {
		return nil
	}
	// Refused: say which key is taken. DO NOTHING waited for a concurrent
	// insert of the key to commit, so the taken one is visible now.
	var idTaken bool
	b = &pgx.Batch{}
	queryRow(b, scanBool, &idTaken, nil, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)`, r.ID)
	if err := q.send("create run", b); err != nil {
		return err
	}
	if idTaken || r.ClientID == "" {
		return rein.Errorf(rein.CodeConflict, "run %s already exists", r.ID)
	}
	return rein.Errorf(rein.CodeConflict, "run with client id %q already exists in session %s", r.ClientID, r.SessionID)
}

func scanInt(row pgx.Row) (int64, error) {
	var v int64
	err := row.Scan(&v)
	return v, err
}

func scanBool(row pgx.Row) (bool, error) {
	var v bool
	err := row.Scan(&v)
	return v, err
}

// updateRunSQL applies a RunUpdate to a run that is not terminal. Zero
// fields keep the stored value, exactly as store.RunUpdate.Apply does
// (TestUpdateRunMatchesApply holds the two together). No row means: missing
// run, terminal run, or an input edit of a run no longer queued. (The Update that runs it checked its fence and
// holds the lease row until commit.)
const updateRunSQL = `
UPDATE runs SET
    status        = coalesce(nullif($4::text, ''), status),
    reason        = coalesce(nullif($5::text, ''), reason),
    error         = coalesce(nullif($6::text, ''), error),
    queue_order   = coalesce($7::bigint, queue_order),
    instance      = coalesce(nullif($8::text, ''), instance),
    input_tokens  = coalesce($9::bigint, input_tokens) + $16::bigint,
    output_tokens = coalesce($10::bigint, output_tokens) + $17::bigint,
    cost_usd      = CASE WHEN $20::double precision IS NULL
                         THEN (CASE WHEN $18::boolean THEN $19::double precision ELSE cost_usd END)
                         ELSE coalesce(CASE WHEN $18::boolean THEN $19::double precision ELSE cost_usd END, 0) + $20 END,
    started_at    = coalesce($11::timestamptz, started_at),
    ended_at      = coalesce($12::timestamptz, ended_at),
    resumes       = coalesce($13::integer, resumes),
    stop          = coalesce(nullif($14::text, ''), stop),
    rolled_back   = rolled_back OR $15::boolean,
    input         = coalesce(nullif($21::text, ''), input)
WHERE owner = $1 AND session_id = $2 AND id = $3
  AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
  AND ($21::text = '' OR status = 'QUEUED')
RETURNING ` + runColumns

// updateRun is Tx.UpdateRun: its Update checked the fence and holds it.
func updateRun(q sender, key rein.SessionKey, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if u.Status != "" && !u.Status.Valid() {
		return nil, rein.InvalidArgument("status", "unknown run status %q", u.Status)
	}
	var (
		in, out       *int64
		setCost       bool
		cost, addCost *float64
		addIn, addOut int64
	)
	if u.Usage != nil {
		in, out, setCost, cost = &u.Usage.InputTokens, &u.Usage.OutputTokens, true, u.Usage.CostUSD
	}
	if u.AddUsage != nil {
		addIn, addOut, addCost = u.AddUsage.InputTokens, u.AddUsage.OutputTokens, u.AddUsage.CostUSD
	}
	var (
		r       *store.RunRecord
		updated bool
	)
	b := &pgx.Batch{}
	queryRow(b, scanRun, &r, &updated, updateRunSQL, key.Owner, key.ID, runID,
		string(u.Status), string(u.Reason), u.Error, u.QueueOrder, u.Instance, in, out, nullTime(u.StartedAt), nullTime(u.EndedAt),
		u.Resumes, string(u.Stop), u.RolledBack, addIn, addOut, setCost, cost, addCost, u.Input)
	if err := q.send("update run", b); err != nil {
		return nil, err
	}
	if updated {
		return r, nil
	}
	// Refused: a missing run or an ended one; say which.
	var (
		cur   *store.RunRecord
		found bool
	)
	b = &pgx.Batch{}
	queryRow(b, scanRun, &cur, &found, `SELECT `+runColumns+` FROM runs WHERE owner = $1 AND session_id = $2 AND id = $3`,
		key.Owner, key.ID, runID)
	if err := q.send("update run", b); err != nil {
		return nil, err
	}
	if found && cur.Status.Terminal() {
		return cur, rein.Errorf(rein.CodeConflict, "run %s has already ended (%s)", runID, cur.Status)
	}
	if found && u.Input != "" && cur.Status != rein.StatusQueued {
		return cur, rein.Errorf(rein.CodeConflict, "run %s is no longer queued (%s): its input cannot change", runID, cur.Status)
	}
	return nil, errRunNotFound
}

var errRunNotFound = rein.Errorf(rein.CodeNotFound, "run not found")

const (
	getRunSQL         = `SELECT ` + runColumns + ` FROM runs WHERE owner = $1 AND session_id = $2 AND id = $3`
	getRunByClientSQL = `SELECT ` + runColumns + ` FROM runs WHERE owner = $1 AND session_id = $2 AND client_id = $3`
)

// GetRun returns one run of the session.
func (s *Store) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	var r *store.RunRecord
	err := s.plain(ctx, func(q sender) (err error) {
		r, err = getRun(q, getRunSQL, key, runID)
		return err
	})
	return r, err
}

// GetRunByClientID returns the session's run with that client id.
func (s *Store) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if clientID == "" {
		return nil, errRunNotFound
	}
	var r *store.RunRecord
	err := s.plain(ctx, func(q sender) (err error) {
		r, err = getRun(q, getRunByClientSQL, key, clientID)
		return err
	})
	return r, err
}

// getRun reads one run by query (getRunSQL or getRunByClientSQL).
func getRun(q sender, query string, key rein.SessionKey, arg string) (*store.RunRecord, error) {
	var (
		r     *store.RunRecord
		found bool
	)
	b := &pgx.Batch{}
	queryRow(b, scanRun, &r, &found, query, key.Owner, key.ID, arg)
	if err := q.send("get run", b); err != nil {
		return nil, err
	}
	if !found {
		return nil, errRunNotFound
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

// endedSinceSQL is ListEndedSince's query: a range of the runs_by_end
// index (TestEndedSinceUsesIndex checks the plan).
const endedSinceSQL = `SELECT ` + runColumns + ` FROM runs WHERE ended_at >= $1 ORDER BY ended_at, id`

// ListEndedSince returns the runs ended at or after since, oldest end
// first.
func (s *Store) ListEndedSince(ctx context.Context, since time.Time) ([]*store.RunRecord, error) {
	return s.listRuns(ctx, "list runs ended since", endedSinceSQL, since)
}

func (s *Store) listRuns(ctx context.Context, op, query string, args ...any) ([]*store.RunRecord, error) {
	return queryAll(ctx, s, op, scanRun, query, args...)
}
