package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/internal/histcodec"
)

// CreateSession stores the session and its (empty) event counter in one
// transaction.
func (s *Store) CreateSession(ctx context.Context, sess *store.Session) error {
	_, _, err := s.createSession(ctx, sess, false)
	return err
}

// CreateSessionOnce stores the session unless its id is in use. Every
// creation of a session takes a transaction-scoped advisory lock on the
// id's hash first, so the look-up here and the insert are one step with
// respect to every other creation of that id, in any process (the primary
// key is (owner, id): it cannot refuse another owner's id by itself).
func (s *Store) CreateSessionOnce(ctx context.Context, sess *store.Session) (*store.Session, bool, error) {
	return s.createSession(ctx, sess, true)
}

// idLockSQL serialises the creations of one session id (see
// CreateSessionOnce); the second key keeps the lock apart from any other
// advisory lock of the database.
const idLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

func (s *Store) createSession(ctx context.Context, sess *store.Session, once bool) (*store.Session, bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, false, err
	}
	if sess.ID == "" {
		return nil, false, rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", sess.Metadata)
	if err != nil {
		return nil, false, err
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
			return nil, false, rein.Errorf(rein.CodeInvalidArgument, "subagent descriptor: %w", err)
		}
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	insert := func(b *pgx.Batch) {
		b.Queue(`INSERT INTO sessions (owner, id, parent_id, metadata, system, subagent, created_at, agent, title, budget)
			VALUES ($1, $2, $3, $4::text::json, $5, $6::text::json, $7, $8, $9, $10::text::jsonb)`,
			sess.Owner, sess.ID, nullString(sess.ParentID), string(sess.Metadata), sess.System, nullBytes(subagent), sess.CreatedAt, sess.Agent, sess.Title,
			budgetText(sess.Budget))
		b.Queue(`INSERT INTO event_seqs (owner, session_id) VALUES ($1, $2)`, sess.Owner, sess.ID)
	}
	var existing []*store.Session
	if once {
		err = s.createOnce(octx, sess.ID, &existing, insert)
	} else {
		b := &pgx.Batch{}
		b.Queue(idLockSQL, sess.ID) // one implicit transaction: held to its end
		insert(b)
		err = s.pool.SendBatch(octx, b).Close()
	}
	if err == nil {
		for _, e := range existing {
			if e.Owner == sess.Owner {
				return e, false, nil
			}
		}
		if len(existing) > 0 {
			return nil, false, rein.Errorf(rein.CodeConflict, "this session id is taken: choose another")
		}
		return sess, true, nil
	}
	err = s.fail(ctx, octx, "create session", err)
	switch rein.CodeOf(err) {
	case rein.CodeConflict:
		return nil, false, rein.Errorf(rein.CodeConflict, "session %s already exists", sess.ID)
	case rein.CodeNotFound:
		return nil, false, rein.Errorf(rein.CodeNotFound, "parent session %s not found", sess.ParentID)
	}
	return nil, false, err
}

// createOnce runs CreateSessionOnce's transaction: the id's lock and the
// sessions that have the id in one round trip, then, if none has it, the
// insert and the commit in a second.
func (s *Store) createOnce(octx context.Context, id string, existing *[]*store.Session, insert func(*pgx.Batch)) error {
	conn, err := s.pool.Acquire(octx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(idLockSQL, id)
	queryRows(b, scanSession, existing, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id)
	if err := conn.SendBatch(octx, b).Close(); err != nil {
		_, _ = conn.Exec(octx, `ROLLBACK`)
		return err
	}
	b = &pgx.Batch{}
	if len(*existing) == 0 {
		insert(b)
	}
	b.Queue(`COMMIT`)
	if err := conn.SendBatch(octx, b).Close(); err != nil {
		_, _ = conn.Exec(octx, `ROLLBACK`)
		return err
	}
	return nil
}

const sessionColumns = `owner, id, parent_id, metadata, system, subagent, created_at, agent, title, budget`

func scanSession(row pgx.Row) (*store.Session, error) { return scanSessionAnd(row) }

// scanSessionAnd reads a row of sessionColumns, then into extra the
// columns that follow them.
func scanSessionAnd(row pgx.Row, extra ...any) (*store.Session, error) {
	var (
		sess     store.Session
		parent   *string
		metadata []byte
		subagent []byte
		budget   []byte
	)
	if err := row.Scan(append([]any{&sess.Owner, &sess.ID, &parent, &metadata, &sess.System, &subagent, &sess.CreatedAt, &sess.Agent, &sess.Title, &budget}, extra...)...); err != nil {
		return nil, err
	}
	var err error
	if sess.Budget, err = parseBudget(budget); err != nil {
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

// SessionIDInUse reports whether a session of any owner has id.
func (s *Store) SessionIDInUse(ctx context.Context, id string) (bool, error) {
	if err := s.checkOpen(); err != nil {
		return false, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	var found bool
	err := s.pool.QueryRow(octx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)`, id).Scan(&found)
	if err != nil {
		return false, s.fail(ctx, octx, "look up a session id", err)
	}
	return found, nil
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

// ----------------------------------------------------------------- history

// History messages are stored as store/internal/histcodec encodes them:
// one codec with the SQLite backend. It reads every row written before
// (raw_input without the invalid flag included).
var (
	encodeMessage = histcodec.Encode
	decodeMessage = histcodec.Decode
)

// encodeHistory encodes msgs for the history table's json column.
func encodeHistory(msgs []rein.Message) ([]string, error) {
	enc := make([]string, len(msgs))
	for i, m := range msgs {
		b, err := encodeMessage(m)
		if err != nil {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "history message %d: %w", i, err)
		}
		enc[i] = string(b)
	}
	return enc, nil
}

// queueHistory queues the insert of encoded messages, for AppendHistory and
// an Update's commit alike. It inserts nothing if fence is set and is not
// the session's lease token (the caller has share-locked that row, so the
// answer holds until commit). ORDER BY ord makes the identity values (the
// transcript order) follow the slice order.
func queueHistory(b *pgx.Batch, key rein.SessionKey, fence int64, enc []string) {
	if len(enc) == 0 {
		return
	}
	b.Queue(`INSERT INTO history (owner, session_id, msg)
		SELECT $1, $2, m.msg::json FROM unnest($3::text[]) WITH ORDINALITY AS m(msg, ord)
		WHERE $4::bigint = 0 OR EXISTS (SELECT 1 FROM leases WHERE owner = $1 AND session_id = $2 AND token = $4::bigint)
		ORDER BY m.ord`,
		key.Owner, key.ID, enc, fence)
}

// LoadHistory returns the session's transcript in order.
func (s *Store) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	out := []rein.Message{}
	err := s.queryInSession(ctx, "load history", key, func(rows pgx.Rows) error {
		m, err := scanMessage(rows)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	}, loadHistorySQL, key.Owner, key.ID)
	if err != nil {
		return nil, err
	}
	return out, nil
}

const loadHistorySQL = `SELECT msg FROM history WHERE owner = $1 AND session_id = $2 ORDER BY pos`

// scanMessage reads one message of loadHistorySQL.
func scanMessage(row pgx.Row) (rein.Message, error) {
	var raw []byte
	if err := row.Scan(&raw); err != nil {
		return rein.Message{}, err
	}
	return decodeMessage(raw)
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

// checkSessionAndFenceSQL returns a row (true, fence holds) for ($1 owner,
// $2 id, $3 fence), or no row if the session is missing. A matching lease
// row is share-locked until the transaction ends, so no takeover can commit
// in between: the fenced write and the check are one. With lockSession it
// also locks the session row until the transaction ends, serialising
// writers that must not interleave (history batches); the lateral join
// makes that lock come first, as the global lock order wants (session row,
// lease row, counter row).
func checkSessionAndFenceSQL(lockSession bool) string {
	lock := ""
	if lockSession {
		// NO KEY UPDATE: blocks other history appends, SetSystem and
		// Updates, but not the key-share locks of foreign key checks.
		lock = "FOR NO KEY UPDATE"
	}
	return `SELECT true, l.token IS NOT NULL
		FROM (SELECT owner, id FROM sessions WHERE owner = $1 AND id = $2 ` + lock + `) s
		LEFT JOIN LATERAL (
			SELECT token FROM leases WHERE owner = s.owner AND session_id = s.id AND token = $3::bigint FOR SHARE
		) l ON true`
}

// queueCheck queues checkSessionAndFenceSQL; *checked is set once it has
// answered.
func queueCheck(b *pgx.Batch, key rein.SessionKey, fence int64, lockSession bool, checked, exists, holds *bool) {
	b.Queue(checkSessionAndFenceSQL(lockSession), key.Owner, key.ID, fence).QueryRow(func(row pgx.Row) error {
		err := row.Scan(exists, holds)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		*checked = err == nil
		return err
	})
}

// jsonOrEmpty validates client JSON, defaulting empty to {}: it goes into a
// json column, which would refuse it with a less helpful error.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !jsonx.Valid(b) {
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

// summarySQL pages an owner's sessions with their state in one query:
// each subquery is an index lookup in the session's rows (runs_active,
// confirmations_pending, the events' primary key).
const summarySQL = `SELECT ` + sessionColumns + `,
		EXISTS (SELECT 1 FROM runs r WHERE r.owner = sessions.owner AND r.session_id = sessions.id AND r.status IN ('QUEUED', 'RUNNING')) AS busy,
		(SELECT count(*) FROM confirmations c WHERE c.owner = sessions.owner AND c.session_id = sessions.id AND c.state = 'pending') AS pending,
		(SELECT e.created_at FROM events e WHERE e.owner = sessions.owner AND e.session_id = sessions.id ORDER BY e.seq DESC LIMIT 1) AS last_event_at
	FROM sessions
	WHERE owner = $1 AND ($2 OR (created_at, id) < ($3, $4))
	ORDER BY sessions.created_at DESC, sessions.id DESC LIMIT $5`

// ListSessionSummaries returns a page of the owner's sessions with their
// state.
func (s *Store) ListSessionSummaries(ctx context.Context, owner string, page store.SessionPage) ([]*store.SessionSummary, error) {
	var limit *int
	if page.Limit > 0 {
		limit = &page.Limit
	}
	scan := func(row pgx.Row) (*store.SessionSummary, error) {
		var (
			sum  store.SessionSummary
			last *time.Time
			err  error
		)
		if sum.Session, err = scanSessionAnd(row, &sum.Busy, &sum.PendingConfirmations, &last); err != nil {
			return nil, err
		}
		if last != nil {
			sum.LastEventAt = last.UTC()
		}
		return &sum, nil
	}
	return queryAll(ctx, s, "list sessions", scan, summarySQL, owner, page.After.IsZero(), dbTime(page.After.CreatedAt), page.After.ID, limit)
}

// budgetText is a budget as its jsonb column takes it (nil: NULL).
func budgetText(b *rein.Budget) *string {
	if b == nil {
		return nil
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil // two numbers always marshal
	}
	t := string(out)
	return &t
}

// parseBudget reads a budget column (NULL: nil).
func parseBudget(v []byte) (*rein.Budget, error) {
	if v == nil {
		return nil, nil
	}
	b := new(rein.Budget)
	if err := json.Unmarshal(v, b); err != nil {
		return nil, err
	}
	return b, nil
}
