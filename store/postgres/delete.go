package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// sessionTables are the tables holding rows of a session (by owner and
// session_id), deleted before the session rows. The conformance test that
// lists information_schema fails when a migration adds a table this list
// misses.
var sessionTables = []string{"events", "history", "supplements", "confirmations", "runs", "leases", "stops", "outbox_cursors", "outbox", "event_seqs"}

// DeleteSession implements store.Deleter as one transaction that takes the
// locks of a whole tree in the global order (decisions 0023 and 0024):
//
//  1. the session rows FOR UPDATE, key's first, then level by level down
//     the tree. Each level is read after its parents are locked, and a
//     child's insert key-share-locks its parent row (its foreign key), so
//     no child can appear under a locked session unseen; every Update of
//     a tree session waits from here on.
//  2. the tree's lease rows, then its counter rows, each sorted by key:
//     the order of the group commit, which takes no session row, so an
//     append to a tree session that is already under way finishes first
//     and one that comes later waits, and neither can close a cycle.
//
// Taking them inside an ordinary Update would not do: an Update holds its
// own lease and counter rows before anything else, so a group commit
// holding a child's counter and waiting for the root's would deadlock with
// it.
func (s *Store) DeleteSession(ctx context.Context, key rein.SessionKey, check func(now time.Time, tree []*store.TreeSession) error) ([]*store.Session, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	d := &deleteTx{s: s, ctx: ctx, octx: octx, key: key}
	defer d.end()
	tree, err := d.lockTree()
	if err != nil {
		d.rollback()
		return nil, err
	}
	if check != nil {
		if err := check(d.now, tree); err != nil {
			d.rollback()
			return nil, err
		}
	}
	ids := make([]string, len(tree))
	out := make([]*store.Session, len(tree))
	for i, t := range tree {
		ids[i], out[i] = t.Session.ID, t.Session
	}
	b := &pgx.Batch{}
	for _, table := range sessionTables {
		b.Queue(`DELETE FROM `+table+` WHERE owner = $1 AND session_id = ANY($2::text[])`, key.Owner, ids)
	}
	// One statement: the parent foreign key is checked at its end, when
	// children and parents are gone alike.
	b.Queue(`DELETE FROM sessions WHERE owner = $1 AND id = ANY($2::text[])`, key.Owner, ids)
	b.Queue(deleteNotifySQL, s.channel, key.Owner, ids)
	b.Queue(`COMMIT`)
	if err := d.send(b); err != nil {
		d.rollback()
		return nil, err
	}
	for _, id := range ids {
		s.hub.notify(rein.SessionKey{Owner: key.Owner, ID: id}, 0)
	}
	return out, nil
}

// deleteNotifySQL wakes other processes' waiters on the deleted sessions:
// seq 0 makes them read the session, which is gone.
const deleteNotifySQL = `
SELECT pg_notify($1, CASE WHEN octet_length(p) < 7900 THEN p ELSE '*' END)
FROM (SELECT json_build_array($2::text, k.id, 0)::text AS p FROM unnest($3::text[]) AS k(id)) n`

// deleteTx is DeleteSession's transaction on one pooled connection.
type deleteTx struct {
	s         *Store
	ctx, octx context.Context
	key       rein.SessionKey
	conn      *pgxpool.Conn
	now       time.Time
}

// prefixed scans a row of (extra columns..., sessionColumns).
type prefixed struct {
	row   pgx.Row
	extra []any
}

func (p prefixed) Scan(dest ...any) error { return p.row.Scan(append(p.extra, dest...)...) }

// lockTree opens the transaction and takes the tree's locks (see
// DeleteSession), reading what the check sees.
func (d *deleteTx) lockTree() ([]*store.TreeSession, error) {
	var (
		root  *store.Session
		found bool
	)
	for attempt := 0; ; attempt++ {
		conn, err := d.s.pool.Acquire(d.octx)
		if err != nil {
			return nil, d.s.fail(d.ctx, d.octx, "delete session", err)
		}
		d.conn = conn
		b := &pgx.Batch{}
		b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
		b.Queue(`SELECT now(), `+sessionColumns+` FROM sessions WHERE owner = $1 AND id = $2 FOR UPDATE`, d.key.Owner, d.key.ID).
			QueryRow(func(row pgx.Row) error {
				sess, err := scanSession(prefixed{row, []any{&d.now}})
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				root, found = sess, err == nil
				return err
			})
		err = d.conn.SendBatch(d.octx, b).Close()
		if err == nil {
			break
		}
		if attempt > 0 || !isRetryable(err) {
			return nil, d.s.fail(d.ctx, d.octx, "delete session", err)
		}
		d.conn.Release() // broken before anything was sent: try a fresh one
		d.conn = nil
	}
	if !found {
		return nil, errSessionNotFound
	}
	d.now = d.now.UTC()
	if d.s.leaseClock != nil {
		d.now = dbTime(d.s.leaseClock.Now())
	}

	sessions := []*store.Session{root}
	seen := map[string]bool{root.ID: true}
	for level := []string{root.ID}; len(level) > 0; {
		var kids []*store.Session
		b := &pgx.Batch{}
		queryRows(b, scanSession, &kids, `SELECT `+sessionColumns+` FROM sessions
			WHERE owner = $1 AND parent_id = ANY($2::text[]) ORDER BY created_at, id FOR UPDATE`, d.key.Owner, level)
		if err := d.send(b); err != nil {
			return nil, err
		}
		level = level[:0:0]
		for _, k := range kids {
			if !seen[k.ID] {
				seen[k.ID] = true
				sessions = append(sessions, k)
				level = append(level, k.ID)
			}
		}
	}

	ids := make([]string, len(sessions))
	for i, sess := range sessions {
		ids[i] = sess.ID
	}
	var (
		leases []*store.Lease
		runs   []*store.RunRecord
		lasts  []lastEvent
	)
	b := &pgx.Batch{}
	queryRows(b, scanLease, &leases, `SELECT `+leaseColumns+` FROM leases
		WHERE owner = $1 AND session_id = ANY($2::text[]) ORDER BY session_id FOR UPDATE`, d.key.Owner, ids)
	b.Queue(`SELECT 1 FROM event_seqs WHERE owner = $1 AND session_id = ANY($2::text[]) ORDER BY session_id FOR UPDATE`, d.key.Owner, ids)
	queryRows(b, scanRun, &runs, `SELECT `+runColumns+` FROM runs
		WHERE owner = $1 AND session_id = ANY($2::text[]) AND status IN ('QUEUED', 'RUNNING')
		ORDER BY queue_order, created_at, id`, d.key.Owner, ids)
	queryRows(b, scanLastEvent, &lasts, `SELECT k.id, (SELECT e.created_at FROM events e
			WHERE e.owner = $1 AND e.session_id = k.id ORDER BY e.seq DESC LIMIT 1)
		FROM unnest($2::text[]) AS k(id)`, d.key.Owner, ids)
	if err := d.send(b); err != nil {
		return nil, err
	}

	tree := make([]*store.TreeSession, len(sessions))
	byID := make(map[string]*store.TreeSession, len(sessions))
	for i, sess := range sessions {
		tree[i] = &store.TreeSession{Session: sess, Active: []*store.RunRecord{}, LastActivity: sess.CreatedAt}
		byID[sess.ID] = tree[i]
	}
	for _, l := range leases {
		byID[l.SessionID].Lease = l
	}
	for _, r := range runs {
		t := byID[r.SessionID]
		t.Active = append(t.Active, r)
	}
	for _, l := range lasts {
		if l.at != nil {
			byID[l.id].LastActivity = l.at.UTC()
		}
	}
	return tree, nil
}

// lastEvent is a session's last event time, nil when it has none.
type lastEvent struct {
	id string
	at *time.Time
}

func scanLastEvent(row pgx.Row) (lastEvent, error) {
	var l lastEvent
	err := row.Scan(&l.id, &l.at)
	return l, err
}

// send runs b inside the transaction.
func (d *deleteTx) send(b *pgx.Batch) error {
	return d.s.fail(d.ctx, d.octx, "delete session", d.conn.SendBatch(d.octx, b).Close())
}

// rollback ends the transaction if it is still open (see updateTx.rollback).
func (d *deleteTx) rollback() {
	if d.conn == nil || d.conn.Conn().PgConn().TxStatus() == 'I' || d.conn.Conn().IsClosed() {
		return
	}
	_, _ = d.conn.Exec(d.octx, `ROLLBACK`)
}

func (d *deleteTx) end() {
	if d.conn != nil {
		d.conn.Release()
		d.conn = nil
	}
}

// ListInactive implements store.Deleter. A root's last activity is its
// last event by seq (one primary-key probe), else its creation.
func (s *Store) ListInactive(ctx context.Context, before time.Time, after rein.SessionKey, limit int) ([]store.SessionActivity, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	return queryAll(ctx, s, "list inactive sessions", scanActivity, `SELECT owner, id, last FROM (
			SELECT s.owner, s.id, coalesce(e.created_at, s.created_at) AS last
			FROM sessions s
			LEFT JOIN LATERAL (SELECT created_at FROM events
				WHERE owner = s.owner AND session_id = s.id ORDER BY seq DESC LIMIT 1) e ON true
			WHERE s.parent_id IS NULL AND (s.owner, s.id) > ($1::text, $2::text)
		) a WHERE last < $3 ORDER BY owner, id LIMIT $4`,
		after.Owner, after.ID, ceilMicro(before), lim)
}

func scanActivity(row pgx.Row) (store.SessionActivity, error) {
	var a store.SessionActivity
	err := row.Scan(&a.Key.Owner, &a.Key.ID, &a.LastActivity)
	a.LastActivity = a.LastActivity.UTC()
	return a, err
}
