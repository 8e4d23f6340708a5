package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, in *store.Session) error {
	_, _, err := s.createSession(ctx, in, false)
	return err
}

// CreateSessionOnce implements store.Sessions: the look-up of the id and
// the creation are one operation of the one writer.
func (s *Store) CreateSessionOnce(ctx context.Context, in *store.Session) (*store.Session, bool, error) {
	return s.createSession(ctx, in, true)
}

// createSession creates in; once, the id must be free across owners (an
// existing session of in's owner is returned instead).
func (s *Store) createSession(ctx context.Context, in *store.Session, once bool) (*store.Session, bool, error) {
	if in.ID == "" {
		return nil, false, rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", in.Metadata)
	if err != nil {
		return nil, false, err
	}
	var sub sql.NullString
	if in.Subagent != nil {
		b, err := json.Marshal(in.Subagent)
		if err != nil {
			return nil, false, rein.Errorf(rein.CodeInvalidArgument, "subagent descriptor: %w", err)
		}
		sub = sql.NullString{String: string(b), Valid: true}
	}
	budget, err := budgetText(in.Budget)
	if err != nil {
		return nil, false, err
	}
	var system, title sql.NullString
	if in.System != nil {
		system = sql.NullString{String: *in.System, Valid: true}
	}
	if in.Title != nil {
		title = sql.NullString{String: *in.Title, Valid: true}
	}
	key := in.Key()
	var createdAt = norm(in.CreatedAt)
	var existing *store.Session
	err = s.write(ctx, "creating session", func(tx *wtx) error {
		existing = nil
		if once {
			rows, err := tx.query(`SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, in.ID)
			if err != nil {
				return err
			}
			var found []*store.Session
			for rows.Next() {
				sess, err := scanSession(rows)
				if err != nil {
					rows.Close()
					return err
				}
				found = append(found, sess)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return err
			}
			for _, f := range found {
				if f.Owner == in.Owner {
					existing = f
					return nil
				}
			}
			if len(found) > 0 {
				return rein.Errorf(rein.CodeConflict, "this session id is taken: choose another")
			}
		}
		if _, err := tx.session(key); err == nil {
			return rein.Errorf(rein.CodeConflict, "session %q already exists", in.ID)
		} else if !errors.Is(err, rein.ErrNotFound) {
			return err
		}
		if in.ParentID != "" {
			if _, err := tx.session(rein.SessionKey{Owner: in.Owner, ID: in.ParentID}); err != nil {
				if errors.Is(err, rein.ErrNotFound) {
					return notFound("parent session")
				}
				return err
			}
		}
		if createdAt.IsZero() {
			createdAt = tx.now
		}
		res, err := tx.exec(`INSERT INTO sessions (owner, id, parent_id, metadata, system, subagent, created_at, agent, title, budget)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.Owner, in.ID, in.ParentID, string(meta), system, sub, createdAt.UnixMicro(), in.Agent, title, budget)
		if err != nil {
			return err
		}
		pk, err := res.LastInsertId()
		if err != nil {
			return err
		}
		tx.s.cache[key] = &sessInfo{pk: pk, histLen: 0, leaseKnown: true, activeKnown: true}
		// The record as GetSession would read it back, for the tails.
		stored := &store.Session{Owner: in.Owner, ID: in.ID, ParentID: in.ParentID, Metadata: append(json.RawMessage(nil), meta...),
			Agent: in.Agent, CreatedAt: createdAt}
		if system.Valid {
			v := system.String
			stored.System = &v
		}
		if title.Valid {
			v := title.String
			stored.Title = &v
		}
		if in.Budget != nil {
			b := *in.Budget
			stored.Budget = &b
		}
		if sub.Valid {
			stored.Subagent = new(store.SubagentDescriptor)
			if err := json.Unmarshal([]byte(sub.String), stored.Subagent); err != nil {
				return err
			}
		}
		tx.op.created = append(tx.op.created, stored)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if existing != nil {
		return existing, false, nil
	}
	in.Metadata = append(json.RawMessage(nil), meta...)
	in.CreatedAt = createdAt
	return in, true, nil
}

const sessionColumns = `owner, id, parent_id, metadata, system, subagent, created_at, agent, title, budget`

// scanSession reads a row of sessionColumns, then into extra the columns
// that follow them.
func scanSession(sc interface{ Scan(...any) error }, extra ...any) (*store.Session, error) {
	var (
		out      store.Session
		meta     string
		system   sql.NullString
		sub      sql.NullString
		title    sql.NullString
		budget   sql.NullString
		creation sql.NullInt64
	)
	if err := sc.Scan(append([]any{&out.Owner, &out.ID, &out.ParentID, &meta, &system, &sub, &creation, &out.Agent, &title, &budget}, extra...)...); err != nil {
		return nil, err
	}
	var err error
	if out.Budget, err = parseBudget(budget); err != nil {
		return nil, err
	}
	if title.Valid {
		out.Title = &title.String
	}
	out.Metadata = json.RawMessage(meta)
	if system.Valid {
		out.System = &system.String
	}
	if sub.Valid {
		out.Subagent = new(store.SubagentDescriptor)
		if err := json.Unmarshal([]byte(sub.String), out.Subagent); err != nil {
			return nil, err
		}
	}
	out.CreatedAt = fromMicros(creation)
	return &out, nil
}

// GetSession implements store.Sessions.
func (s *Store) GetSession(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	if out, ok := s.tails.session(key); ok {
		if err := s.usable(ctx); err != nil {
			return nil, err
		}
		return out, nil
	}
	gen := s.tails.factsGen()
	row := s.rq.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE owner = ? AND id = ?`, key.Owner, key.ID)
	out, err := scanSession(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, s.fail("reading session", err)
	}
	s.tails.sessionRead(gen, out)
	return settled(ctx, s, key, out, nil)
}

func (s *Store) listSessions(ctx context.Context, doing, query string, args ...any) ([]*store.Session, error) {
	rows, err := s.rq.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail(doing, err)
	}
	defer rows.Close()
	out := []*store.Session{}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, s.fail(doing, err)
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(doing, err)
	}
	return out, nil
}

// ListSessions implements store.Sessions.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]*store.Session, error) {
	return s.listSessions(ctx, "listing sessions",
		`SELECT `+sessionColumns+` FROM sessions WHERE owner = ? ORDER BY created_at DESC, id DESC`, owner)
}

// SessionIDInUse implements store.Sessions.
func (s *Store) SessionIDInUse(ctx context.Context, id string) (bool, error) {
	var one int
	err := s.rq.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ? LIMIT 1`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.fail("looking up a session id", err)
	}
	return true, nil
}

// ListChildren implements store.Sessions.
func (s *Store) ListChildren(ctx context.Context, key rein.SessionKey) ([]*store.Session, error) {
	if key.ID == "" {
		return []*store.Session{}, nil
	}
	return s.listSessions(ctx, "listing child sessions",
		`SELECT `+sessionColumns+` FROM sessions WHERE owner = ? AND parent_id = ? ORDER BY created_at, pk`, key.Owner, key.ID)
}

const qReadPK = `SELECT pk, coalesce((SELECT max(seq) FROM events WHERE session_pk = sessions.pk), 0)
		FROM sessions WHERE owner = ? AND id = ?`

// readPK returns a session's primary key for a read, or not-found.
func readPK(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key rein.SessionKey) (pk, lastSeq int64, err error) {
	err = q.QueryRowContext(ctx, qReadPK, key.Owner, key.ID).Scan(&pk, &lastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, notFound("session")
	}
	return pk, lastSeq, err
}

// summarySQL pages an owner's sessions with their state, one query for the
// page: each subquery is a lookup in an index of the session's rows
// (runs_active, confirmations_by_run, events_by_seq).
const summarySQL = `SELECT ` + sessionColumns + `,
		EXISTS (SELECT 1 FROM runs r WHERE r.session_pk = sessions.pk AND r.status IN ('QUEUED', 'RUNNING')) AS busy,
		(SELECT count(*) FROM confirmations c WHERE c.session_pk = sessions.pk AND c.state = 'pending') AS pending,
		(SELECT e.created_at FROM events e WHERE e.session_pk = sessions.pk ORDER BY e.seq DESC LIMIT 1) AS last_event_at
	FROM sessions
	WHERE owner = ? AND (? OR created_at < ? OR (created_at = ? AND id < ?))
	ORDER BY sessions.created_at DESC, sessions.id DESC LIMIT ?`

// ListSessionSummaries implements store.Sessions.
func (s *Store) ListSessionSummaries(ctx context.Context, owner string, page store.SessionPage) ([]*store.SessionSummary, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	after := page.After.CreatedAt.UnixMicro()
	rows, err := s.rq.QueryContext(ctx, summarySQL, owner, page.After.IsZero(), after, after, page.After.ID, limit)
	if err != nil {
		return nil, s.fail("listing sessions", err)
	}
	defer rows.Close()
	out := []*store.SessionSummary{}
	for rows.Next() {
		var (
			sum  store.SessionSummary
			last sql.NullInt64
		)
		if sum.Session, err = scanSession(rows, &sum.Busy, &sum.PendingConfirmations, &last); err != nil {
			return nil, s.fail("listing sessions", err)
		}
		sum.LastEventAt = fromMicros(last)
		out = append(out, &sum)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing sessions", err)
	}
	return out, nil
}

// budgetText is a budget as its column holds it: JSON, NULL for none.
func budgetText(b *rein.Budget) (sql.NullString, error) {
	if b == nil {
		return sql.NullString{}, nil
	}
	out, err := json.Marshal(b)
	if err != nil {
		return sql.NullString{}, rein.Errorf(rein.CodeInvalidArgument, "budget: %w", err)
	}
	return sql.NullString{String: string(out), Valid: true}, nil
}

// parseBudget reads a budget column.
func parseBudget(v sql.NullString) (*rein.Budget, error) {
	if !v.Valid {
		return nil, nil
	}
	b := new(rein.Budget)
	if err := json.Unmarshal([]byte(v.String), b); err != nil {
		return nil, err
	}
	return b, nil
}
