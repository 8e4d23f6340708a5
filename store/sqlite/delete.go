package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// sessionTables are the tables holding rows of a session (by session_pk),
// deleted before the session rows themselves: every one of them refers to
// sessions(pk). The conformance test that lists sqlite_master fails when a
// migration adds a table this list misses.
var sessionTables = []string{"events", "history", "runs", "supplements", "confirmations", "leases", "stops", "outbox_cursors", "outbox"}

// DeleteSession implements store.Deleter. The whole deletion is one writer
// operation, so it is serialised with every other write by construction
// (there is no other writer) and commits or rolls back with its savepoint.
func (s *Store) DeleteSession(ctx context.Context, key rein.SessionKey, check func(now time.Time, tree []*store.TreeSession) error) ([]*store.Session, error) {
	var (
		out      []*store.Session
		panicked atomic.Pointer[panicValue]
	)
	o := &op{ctx: ctx, doing: "deleting session", raw: true, done: make(chan error, 1)}
	o.fn = func(tx *wtx) (err error) {
		out = nil
		nodes, err := tx.sessionTree(key)
		if err != nil {
			return s.fail(o.doing, err)
		}
		tree := make([]*store.TreeSession, len(nodes))
		for i, n := range nodes {
			if tree[i], err = tx.treeSession(n); err != nil {
				return s.fail(o.doing, err)
			}
		}
		if check != nil {
			// Like Update's fn: a panic must not take the writer down.
			defer func() {
				if r := recover(); r != nil {
					panicked.Store(&panicValue{r})
					err = rein.Errorf(rein.CodeInternal, "sqlite %s: the DeleteSession check panicked: %v", s.file, r)
				}
			}()
			if err := check(tx.now, tree); err != nil {
				return err
			}
		}
		for _, n := range nodes {
			for _, table := range sessionTables {
				if _, err := tx.exec(`DELETE FROM `+table+` WHERE session_pk = ?`, n.pk); err != nil {
					return s.fail(o.doing, err)
				}
			}
		}
		// Children first: a child's row names its parent.
		for i := len(nodes) - 1; i >= 0; i-- {
			if _, err := tx.exec(`DELETE FROM sessions WHERE pk = ?`, nodes[i].pk); err != nil {
				return s.fail(o.doing, err)
			}
		}
		out = make([]*store.Session, len(nodes))
		for i, n := range nodes {
			k := n.sess.Key()
			// The cache never runs ahead of the database: a rolled-back
			// deletion simply reloads the entries.
			delete(tx.s.cache, k)
			// Waiters wake after the commit and find the session gone;
			// its log tail goes before they do.
			tx.op.forget = append(tx.op.forget, k)
			tx.wake(k)
			out[i] = tree[i].Session
		}
		return nil
	}
	err := s.submit(o)
	if p := panicked.Load(); p != nil {
		panic(p.v)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// treeRow is one session of a tree being deleted.
type treeRow struct {
	pk   int64
	sess *store.Session
}

// pkScanner scans a row whose first column is the session's pk, followed
// by sessionColumns.
type pkScanner struct {
	row interface{ Scan(...any) error }
	pk  *int64
}

func (p pkScanner) Scan(dest ...any) error { return p.row.Scan(append([]any{p.pk}, dest...)...) }

// sessionTree reads key's session and every session below it, parents
// before children, siblings in creation order.
func (tx *wtx) sessionTree(key rein.SessionKey) ([]treeRow, error) {
	var root treeRow
	sess, err := scanSession(pkScanner{tx.queryRow(`SELECT pk, `+sessionColumns+` FROM sessions WHERE owner = ? AND id = ?`, key.Owner, key.ID), &root.pk})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, err
	}
	root.sess = sess
	out := []treeRow{root}
	seen := map[string]bool{key.ID: true}
	for i := 0; i < len(out); i++ {
		rows, err := tx.query(`SELECT pk, `+sessionColumns+` FROM sessions WHERE owner = ? AND parent_id = ? ORDER BY created_at, pk`,
			key.Owner, out[i].sess.ID)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var n treeRow
			if n.sess, err = scanSession(pkScanner{rows, &n.pk}); err != nil {
				rows.Close()
				return nil, err
			}
			if !seen[n.sess.ID] {
				seen[n.sess.ID] = true
				out = append(out, n)
			}
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// treeSession reads what DeleteSession's check sees of one session.
func (tx *wtx) treeSession(n treeRow) (*store.TreeSession, error) {
	si := &sessInfo{pk: n.pk, histLen: -1}
	active, err := tx.runs(si, []rein.RunStatus{rein.StatusQueued, rein.StatusRunning})
	if err != nil {
		return nil, err
	}
	lease, err := tx.lease(si)
	if err != nil {
		return nil, err
	}
	last := n.sess.CreatedAt
	var at sql.NullInt64
	err = tx.queryRow(`SELECT created_at FROM events WHERE session_pk = ? ORDER BY seq DESC LIMIT 1`, n.pk).Scan(&at)
	switch {
	case err == nil:
		last = fromMicros(at)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	return &store.TreeSession{Session: n.sess, Active: active, Lease: lease, LastActivity: last}, nil
}

// ListInactive implements store.Deleter. A root's last activity is its
// last event by seq (one index probe), else its creation.
func (s *Store) ListInactive(ctx context.Context, before time.Time, after rein.SessionKey, limit int) ([]store.SessionActivity, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.rq.QueryContext(ctx, `SELECT owner, id, last FROM (
			SELECT s.owner, s.id, coalesce((SELECT e.created_at FROM events e WHERE e.session_pk = s.pk ORDER BY e.seq DESC LIMIT 1), s.created_at) AS last
			FROM sessions s
			WHERE s.parent_id = '' AND (s.owner > ? OR (s.owner = ? AND s.id > ?))
		) WHERE last < ? ORDER BY owner, id LIMIT ?`,
		after.Owner, after.Owner, after.ID, ceilMicros(before), limit)
	if err != nil {
		return nil, s.fail("listing inactive sessions", err)
	}
	defer rows.Close()
	out := []store.SessionActivity{}
	for rows.Next() {
		var a store.SessionActivity
		var last sql.NullInt64
		if err := rows.Scan(&a.Key.Owner, &a.Key.ID, &last); err != nil {
			return nil, s.fail("listing inactive sessions", err)
		}
		a.LastActivity = fromMicros(last)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing inactive sessions", err)
	}
	return out, nil
}

// ceilMicros is t in microseconds, rounded up: a stored (whole
// microsecond) time is before t exactly when it is below this.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.After(time.UnixMicro(us)) {
		us++
	}
	return us
}
