package postgres

import (
	"context"
	"encoding/json"
	"errors"
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

// pushSupplement is Tx.PushSupplement. The
// insert and the read of what is stored under the id go in one round trip:
// ON CONFLICT waits for a concurrent push of the same id to commit, so the
// read that follows a conflict always finds the winner's row.
func pushSupplement(q sender, sup *store.Supplement, now time.Time) (*store.Supplement, bool, error) {
	in := *sup
	if in.ID == "" {
		in.ID = id.New(id.Supplement)
	}
	if in.CreatedAt.IsZero() {
		in.CreatedAt = now
	} else {
		in.CreatedAt = dbTime(in.CreatedAt)
	}
	in.Status, in.RunID, in.Step, in.ConsumedAt = store.SupplementQueued, "", 0, time.Time{}
	var (
		stored         *store.Supplement
		created, found bool
	)
	b := &pgx.Batch{}
	queryRow(b, scanSupplementOnly, new(*store.Supplement), &created, `INSERT INTO supplements (owner, session_id, id, text, source, status, created_at)
		VALUES ($1, $2, $3, $4, $5, 'queued', $6)
		ON CONFLICT (owner, session_id, id) DO NOTHING
		RETURNING `+supplementColumns,
		in.Owner, in.SessionID, in.ID, in.Text, in.Source, in.CreatedAt)
	queryRow(b, scanSupplementOnly, &stored, &found, `SELECT `+supplementColumns+` FROM supplements
		WHERE owner = $1 AND session_id = $2 AND id = $3`, in.Owner, in.SessionID, in.ID)
	if err := q.send("push supplement", b); err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, rein.Errorf(rein.CodeInternal, "postgres: push supplement: the supplement vanished")
	}
	return stored, created, nil
}

func scanSupplementOnly(row pgx.Row) (*store.Supplement, error) {
	sup, _, err := scanSupplement(row)
	return sup, err
}

// consumeIDsSQL marks the supplements named by $3 (distinct ids) consumed,
// all or none: only if every one of them is queued. (Inside an Update no one else can
// change them meanwhile: the session row lock keeps other writers out.)
const consumeIDsSQL = `
WITH want AS (
    SELECT w.id FROM unnest($3::text[]) AS w(id)
), queued AS (
    SELECT count(*) AS n FROM supplements s JOIN want USING (id)
    WHERE s.owner = $1 AND s.session_id = $2 AND s.status = 'queued'
)
UPDATE supplements s SET status = 'consumed', run_id = $4, step = $5, consumed_at = $6
WHERE s.owner = $1 AND s.session_id = $2 AND s.id IN (SELECT id FROM want)
  AND (SELECT n FROM queued) = (SELECT count(*) FROM want)
RETURNING s.id`

// consumeSupplementIDs is Tx.ConsumeSupplements.
func consumeSupplementIDs(q sender, key rein.SessionKey, ids []string, runID string, step int, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(ids))
	for _, sid := range ids {
		if seen[sid] {
			// Consumed by its first mention: the second finds it taken.
			return rein.Errorf(rein.CodeConflict, "supplement %s is named twice", sid)
		}
		seen[sid] = true
	}
	var done []string
	b := &pgx.Batch{}
	queryRows(b, scanString, &done, consumeIDsSQL, key.Owner, key.ID, ids, runID, step, now)
	if err := q.send("consume supplements", b); err != nil {
		return err
	}
	if len(done) > 0 {
		return nil
	}
	// Refused: name the first id that is unknown or not queued.
	type state struct{ id, status string }
	var states []state
	b = &pgx.Batch{}
	queryRows(b, func(row pgx.Row) (state, error) {
		var st state
		err := row.Scan(&st.id, &st.status)
		return st, err
	}, &states, `SELECT id, status FROM supplements WHERE owner = $1 AND session_id = $2 AND id = ANY($3::text[])`,
		key.Owner, key.ID, ids)
	if err := q.send("consume supplements", b); err != nil {
		return err
	}
	status := map[string]string{}
	for _, st := range states {
		status[st.id] = st.status
	}
	for _, sid := range ids {
		st, ok := status[sid]
		switch {
		case !ok:
			return rein.Errorf(rein.CodeNotFound, "supplement %s not found", sid)
		case st != string(store.SupplementQueued):
			return rein.Errorf(rein.CodeConflict, "supplement %s is not queued (%s)", sid, st)
		}
	}
	return rein.Errorf(rein.CodeConflict, "supplements changed while being consumed")
}

// queuedSupplementsSQL lists the session's queued supplements in push order.
const queuedSupplementsSQL = `SELECT ` + supplementColumns + ` FROM supplements
	WHERE owner = $1 AND session_id = $2 AND status = 'queued' ORDER BY pos`

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

const confirmationColumns = `owner, session_id, run_id, tool_use_id, name, input, state, deny_message, created_at, resolved_at, expires_at`

func scanConfirmation(row pgx.Row) (*store.Confirmation, error) {
	var (
		c        store.Confirmation
		input    []byte
		state    string
		resolved *time.Time
		expires  *time.Time
	)
	if err := row.Scan(&c.Owner, &c.SessionID, &c.RunID, &c.ToolUseID, &c.Name, &input, &state, &c.DenyMessage,
		&c.CreatedAt, &resolved, &expires); err != nil {
		return nil, err
	}
	c.ExpiresAt = fromNullTime(expires)
	if input != nil {
		c.Input = json.RawMessage(input)
	}
	c.State = store.ConfirmationState(state)
	c.CreatedAt = c.CreatedAt.UTC()
	c.ResolvedAt = fromNullTime(resolved)
	return &c, nil
}

// createConfirmation is Tx.CreateConfirmation. DO NOTHING rather than a unique violation, which would abort an
// Update's transaction.
func createConfirmation(q sender, c *store.Confirmation, now time.Time) error {
	if c.ToolUseID == "" {
		return rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	} else {
		c.CreatedAt = dbTime(c.CreatedAt)
	}
	c.State, c.DenyMessage, c.ResolvedAt = store.ConfirmationPending, "", time.Time{}
	var expires *time.Time
	if !c.ExpiresAt.IsZero() {
		c.ExpiresAt = dbTime(c.ExpiresAt)
		expires = &c.ExpiresAt
	}
	var inserted bool
	b := &pgx.Batch{}
	queryRow(b, scanInt, new(int64), &inserted, `INSERT INTO confirmations (owner, session_id, run_id, tool_use_id, name, input, state, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8)
		ON CONFLICT (owner, session_id, tool_use_id) DO NOTHING
		RETURNING 1`,
		c.Owner, c.SessionID, c.RunID, c.ToolUseID, c.Name, []byte(c.Input), c.CreatedAt, expires)
	if err := q.send("create confirmation", b); err != nil {
		return err
	}
	if !inserted {
		return rein.Errorf(rein.CodeConflict, "confirmation %s already exists", c.ToolUseID)
	}
	return nil
}

// resolveConfirmation is Tx.ResolveConfirmation. The UPDATE's "state = 'pending'" condition, re-checked after
// waiting on a concurrent resolver's row lock, lets exactly one resolver
// win; the read after it, in the same round trip, explains a refusal.
func resolveConfirmation(q sender, key rein.SessionKey, toolUseID string, allow bool, denyMessage string, now time.Time) (*store.Confirmation, error) {
	state := store.ConfirmationAllowed
	if !allow {
		state = store.ConfirmationDenied
	} else {
		denyMessage = ""
	}
	var (
		c                *store.Confirmation
		resolved, exists bool
		cur              string
	)
	b := &pgx.Batch{}
	queryRow(b, scanConfirmation, &c, &resolved, `UPDATE confirmations SET state = $4, deny_message = $5, resolved_at = $6
		WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3 AND state = 'pending'
		RETURNING `+confirmationColumns, key.Owner, key.ID, toolUseID, string(state), denyMessage, now)
	queryRow(b, scanString, &cur, &exists, `SELECT state FROM confirmations WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3`,
		key.Owner, key.ID, toolUseID)
	if err := q.send("resolve confirmation", b); err != nil {
		return nil, err
	}
	switch {
	case resolved:
		return c, nil
	case !exists:
		return nil, rein.Errorf(rein.CodeNotFound, "confirmation not found")
	}
	return nil, rein.Errorf(rein.CodeConflict, "confirmation %s is no longer pending (%s)", toolUseID, cur)
}

func closeConfirmations(q sender, key rein.SessionKey, runID string, now time.Time) error {
	b := &pgx.Batch{}
	b.Queue(`UPDATE confirmations SET state = 'closed', resolved_at = $4
		WHERE owner = $1 AND session_id = $2 AND run_id = $3 AND state = 'pending'`, key.Owner, key.ID, runID, now)
	return q.send("close confirmations", b)
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

// listConfirmationsSQL lists the session's confirmations in state $3 (""
// for all), oldest first (by CreatedAt, then creation order).
const listConfirmationsSQL = `SELECT ` + confirmationColumns + ` FROM confirmations
	WHERE owner = $1 AND session_id = $2 AND ($3::text = '' OR state = $3::text) ORDER BY created_at, pos`

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
	}, listConfirmationsSQL, key.Owner, key.ID, string(state))
	if err != nil {
		return nil, err
	}
	return out, nil
}
