package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// -------------------------------------------------------------------- inbox

const supplementColumns = `id, text, source, status, run_id, step, created_at, consumed_at`

func scanSupplement(key rein.SessionKey, sc interface{ Scan(...any) error }) (*store.Supplement, error) {
	out := store.Supplement{Owner: key.Owner, SessionID: key.ID}
	var status string
	var created, consumed sql.NullInt64
	if err := sc.Scan(&out.ID, &out.Text, &out.Source, &status, &out.RunID, &out.Step, &created, &consumed); err != nil {
		return nil, err
	}
	out.Status = store.SupplementStatus(status)
	out.CreatedAt, out.ConsumedAt = fromMicros(created), fromMicros(consumed)
	return &out, nil
}

// pushSupplement is the one implementation of a push, for PushSupplement
// and Tx.PushSupplement.
func (tx *wtx) pushSupplement(key rein.SessionKey, si *sessInfo, in *store.Supplement) (*store.Supplement, bool, error) {
	if in.ID != "" {
		prev, err := scanSupplement(key, tx.queryRow(`SELECT `+supplementColumns+` FROM supplements WHERE session_pk = ? AND id = ?`, si.pk, in.ID))
		if err == nil {
			return prev, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, false, err
		}
	}
	rec := store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: in.ID, Text: in.Text, Source: in.Source,
		Status: store.SupplementQueued, CreatedAt: norm(in.CreatedAt)}
	if rec.ID == "" {
		rec.ID = id.New(id.Supplement)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = tx.now
	}
	_, err := tx.exec(`INSERT INTO supplements (session_pk, id, text, source, status, run_id, step, created_at)
		VALUES (?, ?, ?, ?, ?, '', 0, ?)`, si.pk, rec.ID, rec.Text, rec.Source, string(rec.Status), rec.CreatedAt.UnixMicro())
	if err != nil {
		return nil, false, err
	}
	tx.op.inbox = append(tx.op.inbox, inboxRec{key, 1})
	return &rec, true, nil
}

// queuedSupplements reads the session's queued supplements in push order
// through the writer's connection.
func (tx *wtx) queuedSupplements(key rein.SessionKey, si *sessInfo) ([]*store.Supplement, error) {
	rows, err := tx.query(`SELECT `+supplementColumns+` FROM supplements WHERE session_pk = ? AND status = 'queued' ORDER BY pk`, si.pk)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*store.Supplement{}
	for rows.Next() {
		sup, err := scanSupplement(key, rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sup)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// consumeSupplements is the one implementation of consumption, for
// ConsumeSupplements and Tx.ConsumeSupplements. Every id is checked before
// any is marked, so a refusal writes nothing; an id named twice is refused
// like one already consumed. The ids travel as one JSON array, so the
// statements are prepared once whatever their number.
func (tx *wtx) consumeSupplements(key rein.SessionKey, si *sessInfo, ids []string, runID string, step int) error {
	if len(ids) == 0 {
		return nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := tx.query(`SELECT id, status FROM supplements WHERE session_pk = ? AND id IN (SELECT value FROM json_each(?))`, si.pk, string(list))
	if err != nil {
		return err
	}
	status := make(map[string]string, len(ids))
	for rows.Next() {
		var supID, st string
		if err := rows.Scan(&supID, &st); err != nil {
			rows.Close()
			return err
		}
		status[supID] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	seen := make(map[string]bool, len(ids))
	for _, supID := range ids {
		st, found := status[supID]
		switch {
		case !found:
			return notFound("supplement")
		case st != string(store.SupplementQueued) || seen[supID]:
			return rein.Errorf(rein.CodeConflict, "supplement %q is not queued", supID)
		}
		seen[supID] = true
	}
	if _, err = tx.exec(`UPDATE supplements SET status = 'consumed', run_id = ?, step = ?, consumed_at = ?
		WHERE session_pk = ? AND id IN (SELECT value FROM json_each(?))`, runID, step, tx.now.UnixMicro(), si.pk, string(list)); err != nil {
		return err
	}
	tx.op.inbox = append(tx.op.inbox, inboxRec{key, -len(ids)})
	return nil
}

// qPendingByKey is the queued count and the session's existence in one
// statement: the loop asks it at every step, and a read transaction of
// its own (BEGIN, the session's key, the count, the end) cost several
// times the count.
const qPendingByKey = `SELECT (SELECT count(*) FROM supplements WHERE session_pk = s.pk AND status = 'queued')
		FROM sessions s WHERE s.owner = ? AND s.id = ?`

// PendingSupplements implements store.Inbox.
func (s *Store) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	if n, ok := s.tails.pending(key); ok {
		if err := s.usable(ctx); err != nil {
			return 0, err
		}
		return n, nil
	}
	gen := s.tails.factsGen()
	var n int
	err := s.rq.QueryRowContext(ctx, qPendingByKey, key.Owner, key.ID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, notFound("session")
	}
	if err != nil {
		return 0, s.fail("counting supplements", err)
	}
	s.tails.pendingRead(gen, key, n)
	return settled(ctx, s, key, n, nil)
}

// GetSupplement implements store.Inbox.
func (s *Store) GetSupplement(ctx context.Context, key rein.SessionKey, supID string) (*store.Supplement, error) {
	row := s.rq.QueryRowContext(ctx, `SELECT `+supplementColumns+` FROM supplements
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND id = ?`, key.Owner, key.ID, supID)
	out, err := scanSupplement(key, row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("supplement")
	}
	if err != nil {
		return nil, s.fail("reading supplement", err)
	}
	return settled(ctx, s, key, out, nil)
}

// ------------------------------------------------------------ confirmations

const confirmationColumns = `run_id, tool_use_id, name, input, state, deny_message, created_at, resolved_at, expires_at`

func scanConfirmation(key rein.SessionKey, sc interface{ Scan(...any) error }) (*store.Confirmation, error) {
	out := store.Confirmation{Owner: key.Owner, SessionID: key.ID}
	var state string
	var input []byte
	var created, resolved, expires sql.NullInt64
	if err := sc.Scan(&out.RunID, &out.ToolUseID, &out.Name, &input, &state, &out.DenyMessage, &created, &resolved, &expires); err != nil {
		return nil, err
	}
	out.ExpiresAt = fromMicros(expires)
	if input != nil {
		out.Input = append([]byte{}, input...)
	}
	out.State = store.ConfirmationState(state)
	out.CreatedAt, out.ResolvedAt = fromMicros(created), fromMicros(resolved)
	return &out, nil
}

// prepareConfirmation validates c and returns the pending record to store.
func prepareConfirmation(c *store.Confirmation) (store.Confirmation, error) {
	if c.ToolUseID == "" {
		return store.Confirmation{}, rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	rec := *c
	rec.Input = append([]byte(nil), c.Input...)
	if c.Input != nil && rec.Input == nil {
		rec.Input = []byte{}
	}
	rec.State, rec.DenyMessage, rec.ResolvedAt, rec.CreatedAt = store.ConfirmationPending, "", time.Time{}, norm(c.CreatedAt)
	rec.ExpiresAt = norm(c.ExpiresAt)
	return rec, nil
}

// createConfirmation is the one implementation of a confirmation's
// creation, for CreateConfirmation and Tx.CreateConfirmation.
func (tx *wtx) createConfirmation(key rein.SessionKey, si *sessInfo, rec *store.Confirmation) error {
	var n int
	if err := tx.queryRow(`SELECT count(*) FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, rec.ToolUseID).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return rein.Errorf(rein.CodeConflict, "confirmation for tool call %q already exists", rec.ToolUseID)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = tx.now
	}
	var expires sql.NullInt64
	if !rec.ExpiresAt.IsZero() {
		expires = sql.NullInt64{Int64: rec.ExpiresAt.UnixMicro(), Valid: true}
	}
	_, err := tx.exec(`INSERT INTO confirmations (session_pk, owner, session_id, run_id, tool_use_id, name, input, state, deny_message, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?)`, si.pk, key.Owner, key.ID, rec.RunID, rec.ToolUseID, rec.Name, rec.Input, string(rec.State), rec.CreatedAt.UnixMicro(), expires)
	return err
}

// resolveConfirmation is the one implementation of an answer, for
// ResolveConfirmation and Tx.ResolveConfirmation.
func (tx *wtx) resolveConfirmation(key rein.SessionKey, si *sessInfo, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	c, err := scanConfirmation(key, tx.queryRow(`SELECT `+confirmationColumns+` FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, toolUseID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("confirmation")
	}
	if err != nil {
		return nil, err
	}
	if c.State != store.ConfirmationPending {
		return nil, rein.Errorf(rein.CodeConflict, "confirmation %q is no longer pending (%s)", toolUseID, c.State)
	}
	c.State, c.ResolvedAt = store.ConfirmationAllowed, tx.now
	if !allow {
		c.State, c.DenyMessage = store.ConfirmationDenied, denyMessage
	}
	_, err = tx.exec(`UPDATE confirmations SET state = ?, deny_message = ?, resolved_at = ? WHERE session_pk = ? AND tool_use_id = ?`,
		string(c.State), c.DenyMessage, c.ResolvedAt.UnixMicro(), si.pk, toolUseID)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// closeConfirmations is the one implementation of closing, for
// CloseConfirmations and Tx.CloseConfirmations.
func (tx *wtx) closeConfirmations(si *sessInfo, runID string) error {
	_, err := tx.exec(`UPDATE confirmations SET state = 'closed', resolved_at = ? WHERE session_pk = ? AND run_id = ? AND state = 'pending'`,
		tx.now.UnixMicro(), si.pk, runID)
	return err
}

// GetConfirmation implements store.Confirmations.
func (s *Store) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	row := s.rq.QueryRowContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND tool_use_id = ?`, key.Owner, key.ID, toolUseID)
	out, err := scanConfirmation(key, row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("confirmation")
	}
	if err != nil {
		return nil, s.fail("reading confirmation", err)
	}
	return settled(ctx, s, key, out, nil)
}

// ListConfirmations implements store.Confirmations.
func (s *Store) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	rows, err := s.rq.QueryContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND (? = '' OR state = ?)
		ORDER BY created_at, pk`, key.Owner, key.ID, string(state), string(state))
	if err != nil {
		return nil, s.fail("listing confirmations", err)
	}
	out, err := scanConfirmations(key, rows)
	if err != nil {
		return nil, s.fail("listing confirmations", err)
	}
	return settled(ctx, s, key, out, nil)
}

// confirmations lists the session's confirmations through the writer's
// connection, for Tx.Confirmations.
func (tx *wtx) confirmations(key rein.SessionKey, si *sessInfo, state store.ConfirmationState) ([]*store.Confirmation, error) {
	rows, err := tx.query(`SELECT `+confirmationColumns+` FROM confirmations
		WHERE session_pk = ? AND (? = '' OR state = ?) ORDER BY created_at, pk`, si.pk, string(state), string(state))
	if err != nil {
		return nil, err
	}
	return scanConfirmations(key, rows)
}

// scanConfirmations reads every row as a confirmation and closes the rows.
func scanConfirmations(key rein.SessionKey, rows *sql.Rows) ([]*store.Confirmation, error) {
	defer rows.Close()
	out := []*store.Confirmation{}
	for rows.Next() {
		c, err := scanConfirmation(key, rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// startConfirmation moves an allowed confirmation to started (Tx.StartConfirmation).
func (tx *wtx) startConfirmation(si *sessInfo, toolUseID string) error {
	res, err := tx.exec(`UPDATE confirmations SET state = 'started' WHERE session_pk = ? AND tool_use_id = ? AND state = 'allowed'`, si.pk, toolUseID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	var state string
	err = tx.queryRow(`SELECT state FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, toolUseID).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("confirmation")
	}
	if err != nil {
		return err
	}
	return rein.Errorf(rein.CodeConflict, "confirmation %q is not allowed and waiting to start (%s)", toolUseID, state)
}
