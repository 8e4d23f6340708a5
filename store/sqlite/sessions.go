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
	if in.ID == "" {
		return rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", in.Metadata)
	if err != nil {
		return err
	}
	var sub sql.NullString
	if in.Subagent != nil {
		b, err := json.Marshal(in.Subagent)
		if err != nil {
			return rein.Errorf(rein.CodeInvalidArgument, "subagent descriptor: %w", err)
		}
		sub = sql.NullString{String: string(b), Valid: true}
	}
	var system sql.NullString
	if in.System != nil {
		system = sql.NullString{String: *in.System, Valid: true}
	}
	key := in.Key()
	var createdAt = norm(in.CreatedAt)
	err = s.write(ctx, "creating session", func(tx *wtx) error {
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
		res, err := tx.exec(`INSERT INTO sessions (owner, id, parent_id, metadata, system, subagent, created_at, agent)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			in.Owner, in.ID, in.ParentID, string(meta), system, sub, createdAt.UnixMicro(), in.Agent)
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
		return err
	}
	in.Metadata = append(json.RawMessage(nil), meta...)
	in.CreatedAt = createdAt
	return nil
}

const sessionColumns = `owner, id, parent_id, metadata, system, subagent, created_at, agent`

func scanSession(sc interface{ Scan(...any) error }) (*store.Session, error) {
	var (
		out      store.Session
		meta     string
		system   sql.NullString
		sub      sql.NullString
		creation sql.NullInt64
	)
	if err := sc.Scan(&out.Owner, &out.ID, &out.ParentID, &meta, &system, &sub, &creation, &out.Agent); err != nil {
		return nil, err
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
