package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

const supplementColumns = `owner, session_id, id, text, source, status, run_id, step, created_at, consumed_at, pos`

func scanSupplement(row pgx.Row) (*store.Supplement, int64, error) {
	var (
		sup      store.Supplement
		status   string
		consumed *time.Time
		pos      int64
	)
	if err := row.Scan(&sup.Owner, &sup.SessionID, &sup.ID, &sup.Text, &sup.Source, &status, &sup.RunID, &sup.Step,
		&sup.CreatedAt, &consumed, &pos); err != nil {
		return nil, 0, err
	}
	sup.Status = store.SupplementStatus(status)
	sup.CreatedAt = sup.CreatedAt.UTC()
	sup.ConsumedAt = fromNullTime(consumed)
	return &sup, pos, nil
}

// PushSupplement stores a queued supplement, idempotently by id.
func (s *Store) PushSupplement(ctx context.Context, sup *store.Supplement) (*store.Supplement, bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, false, err
	}
	in := *sup
	if in.ID == "" {
		in.ID = id.New(id.Supplement)
	}
	if in.CreatedAt.IsZero() {
		in.CreatedAt = s.now()
	} else {
		in.CreatedAt = dbTime(in.CreatedAt)
	}
	in.Status, in.RunID, in.Step, in.ConsumedAt = store.SupplementQueued, "", 0, time.Time{}

	octx, cancel := s.opContext(ctx)
	defer cancel()
	// ON CONFLICT waits for a concurrent push of the same id to commit, so
	// the SELECT that follows a conflict always finds the winner's row.
	got, _, err := scanSupplement(s.pool.QueryRow(octx, `INSERT INTO supplements (owner, session_id, id, text, source, status, created_at)
		VALUES ($1, $2, $3, $4, $5, 'queued', $6)
		ON CONFLICT (owner, session_id, id) DO NOTHING
		RETURNING `+supplementColumns,
		in.Owner, in.SessionID, in.ID, in.Text, in.Source, in.CreatedAt))
	switch {
	case err == nil:
		return got, true, nil
	case errors.Is(err, pgx.ErrNoRows):
		got, err := s.GetSupplement(ctx, rein.SessionKey{Owner: in.Owner, ID: in.SessionID}, in.ID)
		return got, false, err
	case rein.CodeOf(classify(ctx, octx, "", err)) == rein.CodeNotFound:
		return nil, false, errSessionNotFound
	default:
		return nil, false, s.fail(ctx, octx, "push supplement", err)
	}
}

// ConsumeSupplements marks every queued supplement of the session consumed
// by (runID, step) in one UPDATE. Under concurrent consumers, in any
// process, the row locks decide: a second consumer waits on the rows the
// first is taking, then finds them no longer queued and skips them, so each
// supplement is returned exactly once.
func (s *Store) ConsumeSupplements(ctx context.Context, key rein.SessionKey, runID string, step int) ([]*store.Supplement, error) {
	type ranked struct {
		sup *store.Supplement
		pos int64
	}
	var got []ranked
	err := s.queryInSession(ctx, "consume supplements", key, func(rows pgx.Rows) error {
		sup, pos, err := scanSupplement(rows)
		if err == nil {
			got = append(got, ranked{sup, pos})
		}
		return err
	}, `UPDATE supplements SET status = 'consumed', run_id = $3, step = $4, consumed_at = $5
		WHERE owner = $1 AND session_id = $2 AND status = 'queued'
		RETURNING `+supplementColumns, key.Owner, key.ID, runID, step, s.now())
	if err != nil {
		return nil, err
	}
	// RETURNING has no order; push order is the identity column's.
	slices.SortFunc(got, func(a, b ranked) int { return cmp.Compare(a.pos, b.pos) })
	out := make([]*store.Supplement, len(got))
	for i, r := range got {
		out[i] = r.sup
	}
	return out, nil
}

// PendingSupplements counts the session's queued supplements.
func (s *Store) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	var n int
	err := s.queryInSession(ctx, "count supplements", key, func(rows pgx.Rows) error { return rows.Scan(&n) },
		`SELECT count(*) FROM supplements WHERE owner = $1 AND session_id = $2 AND status = 'queued'`, key.Owner, key.ID)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// GetSupplement returns one supplement.
func (s *Store) GetSupplement(ctx context.Context, key rein.SessionKey, supID string) (*store.Supplement, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	sup, _, err := scanSupplement(s.pool.QueryRow(octx, `SELECT `+supplementColumns+` FROM supplements
		WHERE owner = $1 AND session_id = $2 AND id = $3`, key.Owner, key.ID, supID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, rein.Errorf(rein.CodeNotFound, "supplement not found")
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "get supplement", err)
	}
	return sup, nil
}

// ----------------------------------------------------------- confirmations

const confirmationColumns = `owner, session_id, run_id, tool_use_id, name, input, state, deny_message, created_at, resolved_at`

func scanConfirmation(row pgx.Row) (*store.Confirmation, error) {
	var (
		c        store.Confirmation
		input    []byte
		state    string
		resolved *time.Time
	)
	if err := row.Scan(&c.Owner, &c.SessionID, &c.RunID, &c.ToolUseID, &c.Name, &input, &state, &c.DenyMessage,
		&c.CreatedAt, &resolved); err != nil {
		return nil, err
	}
	if input != nil {
		c.Input = json.RawMessage(input)
	}
	c.State = store.ConfirmationState(state)
	c.CreatedAt = c.CreatedAt.UTC()
	c.ResolvedAt = fromNullTime(resolved)
	return &c, nil
}

// CreateConfirmation stores a pending confirmation.
func (s *Store) CreateConfirmation(ctx context.Context, c *store.Confirmation) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if c.ToolUseID == "" {
		return rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	} else {
		c.CreatedAt = dbTime(c.CreatedAt)
	}
	c.State, c.DenyMessage, c.ResolvedAt = store.ConfirmationPending, "", time.Time{}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.pool.Exec(octx, `INSERT INTO confirmations (owner, session_id, run_id, tool_use_id, name, input, state, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7)`,
		c.Owner, c.SessionID, c.RunID, c.ToolUseID, c.Name, []byte(c.Input), c.CreatedAt)
	if err == nil {
		return nil
	}
	err = s.fail(ctx, octx, "create confirmation", err)
	switch rein.CodeOf(err) {
	case rein.CodeConflict:
		return rein.Errorf(rein.CodeConflict, "confirmation %s already exists", c.ToolUseID)
	case rein.CodeNotFound:
		return errSessionNotFound
	}
	return err
}

// ResolveConfirmation answers a pending confirmation. The UPDATE's
// "state = 'pending'" condition, re-checked after waiting on a concurrent
// resolver's row lock, lets exactly one resolver win.
func (s *Store) ResolveConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	state := store.ConfirmationAllowed
	if !allow {
		state = store.ConfirmationDenied
	} else {
		denyMessage = ""
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	c, err := scanConfirmation(s.pool.QueryRow(octx, `UPDATE confirmations SET state = $4, deny_message = $5, resolved_at = $6
		WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3 AND state = 'pending'
		RETURNING `+confirmationColumns, key.Owner, key.ID, toolUseID, string(state), denyMessage, s.now()))
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, s.fail(ctx, octx, "resolve confirmation", err)
	}
	cur, err := s.GetConfirmation(ctx, key, toolUseID)
	if err != nil {
		return nil, err
	}
	return nil, rein.Errorf(rein.CodeConflict, "confirmation %s is no longer pending (%s)", toolUseID, cur.State)
}

// CloseConfirmations closes the run's pending confirmations.
func (s *Store) CloseConfirmations(ctx context.Context, key rein.SessionKey, runID string) error {
	return s.queryInSession(ctx, "close confirmations", key, func(pgx.Rows) error { return nil },
		`UPDATE confirmations SET state = 'closed', resolved_at = $4
		WHERE owner = $1 AND session_id = $2 AND run_id = $3 AND state = 'pending'`, key.Owner, key.ID, runID, s.now())
}

// GetConfirmation returns one confirmation.
func (s *Store) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	c, err := scanConfirmation(s.pool.QueryRow(octx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3`, key.Owner, key.ID, toolUseID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, rein.Errorf(rein.CodeNotFound, "confirmation not found")
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "get confirmation", err)
	}
	return c, nil
}

// ListConfirmations returns the session's confirmations in a state ("" for
// all), oldest first (by CreatedAt, then creation order).
func (s *Store) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	out := []*store.Confirmation{}
	err := s.queryInSession(ctx, "list confirmations", key, func(rows pgx.Rows) error {
		c, err := scanConfirmation(rows)
		if err == nil {
			out = append(out, c)
		}
		return err
	}, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE owner = $1 AND session_id = $2 AND ($3 = '' OR state = $3) ORDER BY created_at, pos`, key.Owner, key.ID, string(state))
	if err != nil {
		return nil, err
	}
	return out, nil
}
