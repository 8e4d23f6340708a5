package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// CreateSession stores the session and its (empty) event counter in one
// transaction.
func (s *Store) CreateSession(ctx context.Context, sess *store.Session) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if sess.ID == "" {
		return rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", sess.Metadata)
	if err != nil {
		return err
	}
	sess.Metadata = meta
	if sess.CreatedAt.IsZero() {
		sess.CreatedAt = s.now()
	} else {
		sess.CreatedAt = dbTime(sess.CreatedAt)
	}
	var subagent []byte
	if sess.Subagent != nil {
		if subagent, err = json.Marshal(sess.Subagent); err != nil {
			return rein.Errorf(rein.CodeInvalidArgument, "subagent descriptor: %w", err)
		}
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO sessions (owner, id, parent_id, metadata, system, subagent, created_at)
		VALUES ($1, $2, $3, $4::text::json, $5, $6::text::json, $7)`,
		sess.Owner, sess.ID, nullString(sess.ParentID), string(sess.Metadata), sess.System, nullBytes(subagent), sess.CreatedAt)
	b.Queue(`INSERT INTO event_seqs (owner, session_id) VALUES ($1, $2)`, sess.Owner, sess.ID)
	err = s.pool.SendBatch(octx, b).Close()
	if err == nil {
		return nil
	}
	err = s.fail(ctx, octx, "create session", err)
	switch rein.CodeOf(err) {
	case rein.CodeConflict:
		return rein.Errorf(rein.CodeConflict, "session %s already exists", sess.ID)
	case rein.CodeNotFound:
		return rein.Errorf(rein.CodeNotFound, "parent session %s not found", sess.ParentID)
	}
	return err
}

const sessionColumns = `owner, id, parent_id, metadata, system, subagent, created_at`

func scanSession(row pgx.Row) (*store.Session, error) {
	var (
		sess     store.Session
		parent   *string
		metadata []byte
		subagent []byte
	)
	if err := row.Scan(&sess.Owner, &sess.ID, &parent, &metadata, &sess.System, &subagent, &sess.CreatedAt); err != nil {
		return nil, err
	}
	if parent != nil {
		sess.ParentID = *parent
	}
	sess.Metadata = json.RawMessage(metadata)
	if subagent != nil {
		sess.Subagent = &store.SubagentDescriptor{}
		if err := json.Unmarshal(subagent, sess.Subagent); err != nil {
			return nil, err
		}
	}
	sess.CreatedAt = sess.CreatedAt.UTC()
	return &sess, nil
}

// GetSession returns the session of key.
func (s *Store) GetSession(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	sess, err := scanSession(s.pool.QueryRow(octx, `SELECT `+sessionColumns+` FROM sessions WHERE owner = $1 AND id = $2`, key.Owner, key.ID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errSessionNotFound
	}
	if err != nil {
		return nil, s.fail(ctx, octx, "get session", err)
	}
	return sess, nil
}

// ListSessions returns the owner's sessions, newest first.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]*store.Session, error) {
	return s.listSessions(ctx, "list sessions", `SELECT `+sessionColumns+` FROM sessions
		WHERE owner = $1 ORDER BY created_at DESC, id DESC`, owner)
}

// ListChildren returns the session's direct children in creation order.
func (s *Store) ListChildren(ctx context.Context, key rein.SessionKey) ([]*store.Session, error) {
	return s.listSessions(ctx, "list children", `SELECT `+sessionColumns+` FROM sessions
		WHERE owner = $1 AND parent_id = $2 ORDER BY created_at, id`, key.Owner, key.ID)
}

func (s *Store) listSessions(ctx context.Context, op, query string, args ...any) ([]*store.Session, error) {
	return queryAll(ctx, s, op, scanSession, query, args...)
}

// queryAll runs a query outside any session check and scans every row
// with scan; the result is never nil.
func queryAll[T any](ctx context.Context, s *Store, op string, scan func(pgx.Row) (T, error), query string, args ...any) ([]T, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	rows, err := s.pool.Query(octx, query, args...)
	if err != nil {
		return nil, s.fail(ctx, octx, op, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, s.fail(ctx, octx, op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(ctx, octx, op, err)
	}
	return out, nil
}

// SetSystem replaces the session's system-prompt override.
func (s *Store) SetSystem(ctx context.Context, key rein.SessionKey, system *string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	tag, err := s.pool.Exec(octx, `UPDATE sessions SET system = $3 WHERE owner = $1 AND id = $2`, key.Owner, key.ID, system)
	if err != nil {
		return s.fail(ctx, octx, "set system", err)
	}
	if tag.RowsAffected() == 0 {
		return errSessionNotFound
	}
	return nil
}

// ----------------------------------------------------------------- history

// storedCall is a tool call as the history table keeps it. A model may
// produce a tool input that is not valid JSON; such an input cannot sit in
// a json column as is, so it is kept as bytes (base64) beside the call.
type storedCall struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input,omitempty"`
	RawInput []byte          `json:"raw_input,omitempty"`
}

// storedMessage is rein.Message with storedCalls.
type storedMessage struct {
	Role       rein.Role    `json:"role"`
	Text       string       `json:"text,omitempty"`
	ToolCalls  []storedCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
	ToolName   string       `json:"tool_name,omitempty"`
	IsError    bool         `json:"is_error,omitempty"`
	Partial    bool         `json:"partial,omitempty"`
	Hint       *rein.Hint   `json:"hint,omitempty"`
	RunID      string       `json:"run_id,omitempty"`
	Step       int          `json:"step,omitempty"`
}

func encodeMessage(m rein.Message) ([]byte, error) {
	sm := storedMessage{Role: m.Role, Text: m.Text, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
		IsError: m.IsError, Partial: m.Partial, Hint: m.Hint, RunID: m.RunID, Step: m.Step}
	for _, c := range m.ToolCalls {
		sc := storedCall{ID: c.ID, Name: c.Name}
		if json.Valid(c.Input) {
			sc.Input = c.Input
		} else {
			sc.RawInput = c.Input
		}
		sm.ToolCalls = append(sm.ToolCalls, sc)
	}
	return json.Marshal(sm)
}

func decodeMessage(b []byte) (rein.Message, error) {
	var sm storedMessage
	if err := json.Unmarshal(b, &sm); err != nil {
		return rein.Message{}, err
	}
	m := rein.Message{Role: sm.Role, Text: sm.Text, ToolCallID: sm.ToolCallID, ToolName: sm.ToolName,
		IsError: sm.IsError, Partial: sm.Partial, Hint: sm.Hint, RunID: sm.RunID, Step: sm.Step}
	for _, sc := range sm.ToolCalls {
		c := rein.ToolCall{ID: sc.ID, Name: sc.Name, Input: sc.Input}
		if sc.RawInput != nil {
			c.Input = json.RawMessage(sc.RawInput)
		}
		m.ToolCalls = append(m.ToolCalls, c)
	}
	return m, nil
}

// AppendHistory appends msgs to the transcript in one transaction, after
// checking the session and the fence in that same transaction.
func (s *Store) AppendHistory(ctx context.Context, key rein.SessionKey, fence store.Fence, msgs []rein.Message) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	enc := make([]string, len(msgs))
	for i, m := range msgs {
		b, err := encodeMessage(m)
		if err != nil {
			return rein.Errorf(rein.CodeInvalidArgument, "history message %d: %w", i, err)
		}
		enc[i] = string(b)
	}
	return s.inTx(ctx, "append history", func(ctx context.Context, tx pgx.Tx) error {
		// The session row lock keeps concurrent batches whole: each takes
		// its transcript positions only once the previous has committed.
		if err := checkSessionAndFence(ctx, tx, key, fence, true); err != nil {
			return err
		}
		if len(enc) == 0 {
			return nil
		}
		// ORDER BY ord makes the identity values (the transcript order)
		// follow the slice order.
		_, err := tx.Exec(ctx, `INSERT INTO history (owner, session_id, msg)
			SELECT $1, $2, m.msg::json FROM unnest($3::text[]) WITH ORDINALITY AS m(msg, ord) ORDER BY m.ord`,
			key.Owner, key.ID, enc)
		return err
	})
}

// LoadHistory returns the session's transcript in order.
func (s *Store) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	out := []rein.Message{}
	err := s.queryInSession(ctx, "load history", key, func(rows pgx.Rows) error {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return err
		}
		m, err := decodeMessage(raw)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	}, `SELECT msg FROM history WHERE owner = $1 AND session_id = $2 ORDER BY pos`, key.Owner, key.ID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queryInSession runs query, handing each row to scan, and fails with not
// found if the session does not exist — both in one round trip and one
// (implicit) transaction, so the answer is never "empty" for a session that
// is missing, nor "missing" for one that has rows.
func (s *Store) queryInSession(ctx context.Context, op string, key rein.SessionKey, scan func(pgx.Rows) error, query string, args ...any) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`SELECT EXISTS (SELECT 1 FROM sessions WHERE owner = $1 AND id = $2)`, key.Owner, key.ID)
	b.Queue(query, args...)
	br := s.pool.SendBatch(octx, b)
	defer br.Close()
	var exists bool
	if err := br.QueryRow().Scan(&exists); err != nil {
		return s.fail(ctx, octx, op, err)
	}
	rows, _ := br.Query()
	for rows.Next() {
		if err := scan(rows); err != nil {
			rows.Close()
			return s.fail(ctx, octx, op, err)
		}
	}
	if err := rows.Err(); err != nil {
		return s.fail(ctx, octx, op, err)
	}
	if err := br.Close(); err != nil {
		return s.fail(ctx, octx, op, err)
	}
	if !exists {
		return errSessionNotFound
	}
	return nil
}

// checkSessionAndFence fails with not found if the session is missing, and
// with lease lost if fence is set but is not the session's current lease
// token. A matching lease row is share-locked until the transaction ends, so
// no takeover can commit in between: the fenced write and the check are one.
// With lockSession it also locks the session row until the transaction
// ends, serialising writers that must not interleave (history batches).
func checkSessionAndFence(ctx context.Context, tx pgx.Tx, key rein.SessionKey, fence store.Fence, lockSession bool) error {
	sessionCheck := `EXISTS (SELECT 1 FROM sessions WHERE owner = $1 AND id = $2)`
	if lockSession {
		// NO KEY UPDATE: blocks other history appends (and SetSystem) but
		// not the key-share locks of foreign key checks.
		sessionCheck = `EXISTS (SELECT 1 FROM sessions WHERE owner = $1 AND id = $2 FOR NO KEY UPDATE)`
	}
	var exists, holds bool
	err := tx.QueryRow(ctx, `SELECT `+sessionCheck+`,
		EXISTS (SELECT 1 FROM leases WHERE owner = $1 AND session_id = $2 AND token = $3 FOR SHARE)`,
		key.Owner, key.ID, fence.Token).Scan(&exists, &holds)
	switch {
	case err != nil:
		return err
	case !exists:
		return errSessionNotFound
	case fence.Token != 0 && !holds:
		return errLeaseLost
	}
	return nil
}

// inTx runs fn in a transaction bounded by the store's Timeout and
// classifies what it returns.
func (s *Store) inTx(ctx context.Context, op string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	octx, cancel := s.opContext(ctx)
	defer cancel()
	err := pgx.BeginFunc(octx, s.pool, func(tx pgx.Tx) error { return fn(octx, tx) })
	return s.fail(ctx, octx, op, err)
}

// jsonOrEmpty validates client JSON, defaulting empty to {}: it goes into a
// json column, which would refuse it with a less helpful error.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return bytes.Clone(b), nil
}

func nullBytes(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = dbTime(t)
	return &t
}

// fromNullTime maps NULL to the zero time.
func fromNullTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
