package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Update runs fn in one transaction on the session (decision 0023).
//
// The transaction is opened together with the locks that make it the only
// writer of the session, in one round trip, in the order every writer of
// the package takes them (session row, lease row, counter row; see the
// group commit in events.go), so no two writers, in any processes, can
// wait for each other in a cycle:
//
//  1. the session row FOR UPDATE: every other Update of the session waits
//     for us (and foreign key checks of inserts into the session's tables
//     key-share-lock that row, so they wait too);
//  2. the lease row FOR UPDATE, if there is one: the fence check, held
//     until commit, and the lock that Tx.AcquireLease and Tx.ReleaseLease
//     need, taken now so it never has to be upgraded from a share lock
//     (two share holders upgrading would deadlock);
//  3. the event counter row FOR NO KEY UPDATE: appends to the session,
//     from any process, wait for us, so Tx.AppendEvents can assign seqs
//     from the value read here.
//
// Writes whose outcome fn needs (a run's creation, a supplement's push)
// are sent when made; events and history, which cannot be refused once
// validated, are held back and sent with the COMMIT in the last round trip,
// together with the NOTIFY that wakes other processes' readers.
func (s *Store) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	u := &updateTx{s: s, ctx: ctx, octx: octx, key: key}
	defer u.end()
	if err := u.begin(fence); err != nil {
		return err
	}
	if err := fn(u); err != nil {
		u.rollback()
		return err
	}
	if u.err != nil {
		// A statement failed and the database aborted the transaction:
		// nothing fn wrote can commit, whatever fn made of the error.
		u.rollback()
		return u.err
	}
	return u.commit()
}

// updateTx is an Update's transaction: a pooled connection inside BEGIN,
// holding the session's locks. It is not safe for concurrent use.
type updateTx struct {
	s         *Store
	ctx, octx context.Context
	key       rein.SessionKey
	conn      *pgxpool.Conn

	// now is Tx.Now; leaseNow the time lease expiry is judged by as a
	// statement argument (nil: the database's now(), which equals now).
	now      time.Time
	leaseNow *time.Time

	lease *store.Lease // the session's lease as this transaction sees it
	// untitled: the session has no title (read with the session row's
	// lock, so SetDefaultTitle costs nothing once it has one).
	untitled bool
	// budget is the session's budget column (NULL: nil), read with the
	// session row's lock and kept as UpdateSession changes it.
	budget  []byte
	lastSeq int64 // the counter, counting held-back events

	events  []rein.Event // held back for the commit, seqs assigned
	title   *string      // a default title held back for the commit
	history []string     // held back for the commit, encoded
	// stopRead is the remembered stop read with the last GetRunByClientID.
	stopRead *stopRead
	// system is the override SetSystem holds back for the commit, when
	// systemSet: the session row is locked, so the update cannot be
	// refused.
	system    *string
	systemSet bool

	// err is the failure that aborted the database transaction.
	err  error
	done bool
}

var _ store.Tx = (*updateTx)(nil)

var errTxDone = rein.Errorf(rein.CodeInternal, "postgres: Tx used after its Update returned")

// begin acquires a connection, opens the transaction and takes the locks,
// then checks the fence. A connection found dead before anything was sent
// (a pooled one after a database restart) is replaced once.
func (u *updateTx) begin(fence store.Fence) error {
	var err error
	for attempt := 0; ; attempt++ {
		u.conn, err = u.s.pool.Acquire(u.octx)
		if err != nil {
			return u.s.fail(u.ctx, u.octx, "update", err)
		}
		var found bool
		found, err = u.lock()
		if err == nil {
			if !found {
				u.rollback()
				return errSessionNotFound
			}
			break
		}
		if attempt > 0 || !isRetryable(err) {
			u.rollback()
			return u.s.fail(u.ctx, u.octx, "update", err)
		}
		u.conn.Release() // destroyed: it is broken, or left inside BEGIN
		u.conn = nil
	}
	if fence.Token != 0 && (u.lease == nil || u.lease.Token != fence.Token) {
		u.rollback()
		return errLeaseLost
	}
	if u.s.leaseClock != nil {
		t := u.s.leaseClock.Now()
		u.now, u.leaseNow = dbTime(t), &t
	}
	return nil
}

// lock runs BEGIN and the three lock statements in one round trip and
// reports whether the session exists.
func (u *updateTx) lock() (bool, error) {
	var found, counted bool
	u.lease = nil
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	var head txHead
	queryRow(b, scanTxHead, &head, &found, `SELECT now(), title IS NULL, budget FROM sessions WHERE owner = $1 AND id = $2 FOR UPDATE`,
		u.key.Owner, u.key.ID)
	queryRow(b, scanLease, &u.lease, nil, `SELECT `+leaseColumns+` FROM leases WHERE owner = $1 AND session_id = $2 FOR UPDATE`,
		u.key.Owner, u.key.ID)
	queryRow(b, scanInt, &u.lastSeq, &counted, `SELECT last_seq FROM event_seqs WHERE owner = $1 AND session_id = $2 FOR NO KEY UPDATE`,
		u.key.Owner, u.key.ID)
	if err := u.conn.SendBatch(u.octx, b).Close(); err != nil {
		return false, err
	}
	u.now, u.untitled, u.budget = head.now, head.untitled, head.budget
	if found && !counted {
		return false, rein.Errorf(rein.CodeInternal, "postgres: session %s has no event counter", u.key.ID)
	}
	u.now = u.now.UTC()
	return found, nil
}

// txHead is what an Update reads of the session row as it locks it.
type txHead struct {
	now      time.Time
	untitled bool
	budget   []byte
}

func scanTxHead(row pgx.Row) (txHead, error) {
	var h txHead
	err := row.Scan(&h.now, &h.untitled, &h.budget)
	return h, err
}

func scanTime(row pgx.Row) (time.Time, error) {
	var t time.Time
	err := row.Scan(&t)
	return t, err
}

// commit sends the held-back writes, the NOTIFY and the COMMIT in one
// round trip. If any of them fails the database skips the rest, COMMIT
// included, and the transaction is rolled back.
func (u *updateTx) commit() error {
	b := &pgx.Batch{}
	if u.systemSet {
		b.Queue(`UPDATE sessions SET system = $3 WHERE owner = $1 AND id = $2`, u.key.Owner, u.key.ID, u.system)
	}
	queueHistory(b, u.key, 0, u.history)
	if u.title != nil {
		b.Queue(`UPDATE sessions SET title = $3 WHERE owner = $1 AND id = $2 AND title IS NULL`, u.key.Owner, u.key.ID, *u.title)
	}
	if len(u.events) > 0 {
		var (
			ec   eventColumns
			seqs = make([]int64, len(u.events))
		)
		for i := range u.events {
			seqs[i] = u.events[i].Seq
			ec.add(&u.events[i])
		}
		b.Queue(commitEventsSQL, u.key.Owner, u.key.ID, u.lastSeq, seqs, ec.ids, ec.runIDs, ec.types, ec.payloads, ec.times)
		b.Queue(notifySQL, u.s.channel, []string{u.key.Owner}, []string{u.key.ID})
	}
	b.Queue(`COMMIT`)
	if err := u.send("update: commit", b); err != nil {
		// A failure of the COMMIT itself (the connection lost) leaves
		// the outcome unknown, as for any write whose answer is lost.
		u.rollback()
		return err
	}
	u.done = true
	if len(u.events) > 0 {
		u.s.hub.notify(u.key, u.lastSeq)
	}
	return nil
}

// commitEventsSQL writes an Update's events with the seqs it assigned from
// the counter row it holds, and moves the counter past them. The primary
// key would refuse a seq taken by anyone else, so even a flaw in the
// locking could not duplicate one.
const commitEventsSQL = `
WITH counter AS (
    UPDATE event_seqs SET last_seq = $3 WHERE owner = $1 AND session_id = $2
)
INSERT INTO events (owner, session_id, seq, id, run_id, type, payload, created_at)
SELECT $1, $2, e.seq, e.id, e.run_id, e.type, e.payload::json, e.created_at
FROM unnest($4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::timestamptz[])
    AS e(seq, id, run_id, type, payload, created_at)`

// rollback ends the transaction if it is still open. If that fails too,
// Release destroys the connection, and the server rolls back when it goes.
func (u *updateTx) rollback() {
	u.done = true
	if u.conn == nil || u.conn.Conn().PgConn().TxStatus() == 'I' || u.conn.Conn().IsClosed() {
		return
	}
	_, _ = u.conn.Exec(u.octx, `ROLLBACK`)
}

func (u *updateTx) end() {
	u.done = true
	if u.conn != nil {
		u.conn.Release()
		u.conn = nil
	}
}

// send runs b inside the transaction. A failure that aborted the
// transaction (anything the server refused, a lost connection) is kept:
// every later call, and the Update, returns it.
func (u *updateTx) send(op string, b *pgx.Batch) error {
	if err := u.usable(); err != nil {
		return err
	}
	err := u.conn.SendBatch(u.octx, b).Close()
	if err == nil {
		return nil
	}
	pc := u.conn.Conn().PgConn()
	err = u.s.fail(u.ctx, u.octx, op, err)
	if pc.IsClosed() || pc.TxStatus() != 'T' {
		u.err = err
	}
	return err
}

func (u *updateTx) usable() error {
	if u.done {
		return errTxDone
	}
	return u.err
}

// sameSession refuses a record that names another session than the
// Update's: a Tx acts on its own session only.
func (u *updateTx) sameSession(owner, sessionID, what string) error {
	if owner != u.key.Owner || sessionID != u.key.ID {
		return rein.InvalidArgument("session_id", "%s names session %s/%s, not the Update's session %s", what, owner, sessionID, u.key)
	}
	return nil
}

// Now is the transaction's time: the start of the database transaction,
// or Options.Clock's reading when set. Times the store stamps inside the
// Update (a zero CreatedAt, consumption and resolution times) are this one,
// so one transition carries one time.
func (u *updateTx) Now() time.Time { return u.now }

// SetSystem holds the session's new system-prompt override back for the
// commit.
func (u *updateTx) SetSystem(system *string) error {
	if err := u.usable(); err != nil {
		return err
	}
	u.system, u.systemSet = nil, true
	if system != nil {
		v := *system
		u.system = &v
	}
	return nil
}

// Lease returns the session's lease as this transaction sees it.
func (u *updateTx) Lease() (*store.Lease, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	if u.lease == nil {
		return nil, nil
	}
	l := *u.lease
	return &l, nil
}

// AcquireLease takes the session's turn inside the transaction. The lease
// row lock the Update holds keeps the new token current until commit, so
// the writes that follow are fenced by it without further checks.
func (u *updateTx) AcquireLease(holder, runID string, ttl time.Duration) (*store.Lease, error) {
	l, err := acquireLease(u, u.key, holder, runID, ttl, u.leaseNow)
	if err != nil {
		return nil, err
	}
	u.lease = l
	cp := *l
	return &cp, nil
}

// ReleaseLease drops the session's lease if its token is token.
func (u *updateTx) ReleaseLease(token int64) error {
	if err := releaseLease(u, u.key, token); err != nil {
		return err
	}
	if u.lease != nil && u.lease.Token == token {
		u.lease = nil
	}
	return nil
}

// txRunsSQL lists the session's runs in any of the statuses $3 (all when
// empty), in queue order.
const txRunsSQL = `SELECT ` + runColumns + ` FROM runs
	WHERE owner = $1 AND session_id = $2 AND (cardinality($3::text[]) = 0 OR status = ANY($3::text[]))
	ORDER BY queue_order, created_at, id`

// Runs returns the session's runs in any of the statuses, in queue order.
func (u *updateTx) Runs(statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	ss := make([]string, len(statuses))
	for i, st := range statuses {
		ss[i] = string(st)
	}
	out := []*store.RunRecord{}
	b := &pgx.Batch{}
	queryRows(b, scanRun, &out, txRunsSQL, u.key.Owner, u.key.ID, ss)
	if err := u.send("list runs", b); err != nil {
		return nil, err
	}
	return out, nil
}

// GetRun returns a run of the session.
func (u *updateTx) GetRun(runID string) (*store.RunRecord, error) {
	return getRun(u, getRunSQL, u.key, runID)
}

// GetRunByClientID returns the session's run with that client id. The
// session's remembered stop for the client id is read in the same round
// trip and kept for RememberedStop, which an admission asks next: a
// message with a client id costs one round trip for both reads, and one
// without asks neither.
func (u *updateTx) GetRunByClientID(clientID string) (*store.RunRecord, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	if clientID == "" {
		return nil, errRunNotFound
	}
	var (
		r     *store.RunRecord
		found bool
		stop  *store.RememberedStop
	)
	b := &pgx.Batch{}
	queryRow(b, scanRun, &r, &found, getRunByClientSQL, u.key.Owner, u.key.ID, clientID)
	queryRow(b, scanStop, &stop, nil, getStopSQL, u.key.Owner, u.key.ID, clientID)
	if err := u.send("get run", b); err != nil {
		return nil, err
	}
	u.stopRead = &stopRead{clientID: clientID, stop: stop}
	if !found {
		return nil, errRunNotFound
	}
	return r, nil
}

// stopRead is a remembered stop read with a client id's run.
type stopRead struct {
	clientID string
	stop     *store.RememberedStop // nil: none
}

const getStopSQL = `SELECT owner, session_id, client_id, mode, created_at FROM stops
	WHERE owner = $1 AND session_id = $2 AND client_id = $3`

func scanStop(row pgx.Row) (*store.RememberedStop, error) {
	var st store.RememberedStop
	if err := row.Scan(&st.Owner, &st.SessionID, &st.ClientID, &st.Mode, &st.CreatedAt); err != nil {
		return nil, err
	}
	st.CreatedAt = st.CreatedAt.UTC()
	return &st, nil
}

// RememberedStop returns the session's remembered stop for clientID: the
// one read with GetRunByClientID when it asked for the same client id
// (and nothing was written to the stops since), else one read now.
func (u *updateTx) RememberedStop(clientID string) (*store.RememberedStop, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	if r := u.stopRead; r != nil && r.clientID == clientID {
		if r.stop == nil {
			return nil, nil
		}
		cp := *r.stop
		return &cp, nil
	}
	var stop *store.RememberedStop
	b := &pgx.Batch{}
	queryRow(b, scanStop, &stop, nil, getStopSQL, u.key.Owner, u.key.ID, clientID)
	if err := u.send("get remembered stop", b); err != nil {
		return nil, err
	}
	return stop, nil
}

// RememberStop stores a remembered stop, replacing the client id's.
func (u *updateTx) RememberStop(st *store.RememberedStop) error {
	if err := u.usable(); err != nil {
		return err
	}
	if err := u.sameSession(st.Owner, st.SessionID, "remembered stop"); err != nil {
		return err
	}
	if st.ClientID == "" {
		return rein.InvalidArgument("client_id", "a remembered stop needs a client id")
	}
	at := st.CreatedAt
	if at.IsZero() {
		at = u.now
	}
	u.stopRead = nil
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO stops (owner, session_id, client_id, mode, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (owner, session_id, client_id) DO UPDATE SET mode = excluded.mode, created_at = excluded.created_at`,
		u.key.Owner, u.key.ID, st.ClientID, st.Mode, dbTime(at))
	return u.send("remember stop", b)
}

// ForgetStops deletes the client id's remembered stop and those
// remembered before before.
func (u *updateTx) ForgetStops(clientID string, before time.Time) error {
	if err := u.usable(); err != nil {
		return err
	}
	u.stopRead = nil
	var t *time.Time
	if !before.IsZero() {
		b := dbTime(before)
		t = &b
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM stops WHERE owner = $1 AND session_id = $2 AND (client_id = $3 OR created_at < $4)`,
		u.key.Owner, u.key.ID, clientID, t)
	return u.send("forget stops", b)
}

// CreateRun stores r inside the transaction.
func (u *updateTx) CreateRun(r *store.RunRecord) error {
	if err := u.usable(); err != nil {
		return err
	}
	if err := u.sameSession(r.Owner, r.SessionID, "run"); err != nil {
		return err
	}
	return createRun(u, r, u.now)
}

// UpdateRun applies ru to a run inside the transaction. The Update checked
// its fence and holds it, so no fence is checked here.
func (u *updateTx) UpdateRun(runID string, ru store.RunUpdate) (*store.RunRecord, error) {
	return updateRun(u, u.key, runID, ru)
}

// AppendHistory validates and holds msgs back for the commit.
func (u *updateTx) AppendHistory(msgs ...rein.Message) error {
	if err := u.usable(); err != nil {
		return err
	}
	enc, err := encodeHistory(msgs)
	if err != nil {
		return err
	}
	u.history = append(u.history, enc...)
	return nil
}

// History returns the transcript, including what this transaction
// appended: the held-back messages are sent first, in the same round trip.
func (u *updateTx) History() ([]rein.Message, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	out := []rein.Message{}
	b := &pgx.Batch{}
	queueHistory(b, u.key, 0, u.history)
	queryRows(b, scanMessage, &out, loadHistorySQL, u.key.Owner, u.key.ID)
	if err := u.send("load history", b); err != nil {
		return nil, err
	}
	u.history = nil
	return out, nil
}

// AppendEvents assigns evs the seqs after the counter the transaction holds
// and holds them back for the commit.
func (u *updateTx) AppendEvents(evs ...rein.Event) ([]rein.Event, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	out, err := prepareEvents(u.key, evs, u.now)
	if err != nil {
		return nil, err
	}
	for i := range out {
		u.lastSeq++
		out[i].Seq = u.lastSeq
	}
	u.events = append(u.events, out...)
	return append([]rein.Event(nil), out...), nil
}

// PushSupplement stores a queued supplement inside the transaction.
func (u *updateTx) PushSupplement(sup *store.Supplement) (*store.Supplement, bool, error) {
	if err := u.usable(); err != nil {
		return nil, false, err
	}
	if err := u.sameSession(sup.Owner, sup.SessionID, "supplement"); err != nil {
		return nil, false, err
	}
	return pushSupplement(u, sup, u.now)
}

// QueuedSupplements returns the session's queued supplements in push order.
func (u *updateTx) QueuedSupplements() ([]*store.Supplement, error) {
	out := []*store.Supplement{}
	b := &pgx.Batch{}
	queryRows(b, scanSupplementOnly, &out, queuedSupplementsSQL, u.key.Owner, u.key.ID)
	if err := u.send("list supplements", b); err != nil {
		return nil, err
	}
	return out, nil
}

// ConsumeSupplements marks each of ids consumed by (runID, step), all or
// none.
func (u *updateTx) ConsumeSupplements(ids []string, runID string, step int) error {
	if err := u.usable(); err != nil {
		return err
	}
	return consumeSupplementIDs(u, u.key, ids, runID, step, u.now)
}

// CreateConfirmation stores c as pending inside the transaction.
func (u *updateTx) CreateConfirmation(c *store.Confirmation) error {
	if err := u.usable(); err != nil {
		return err
	}
	if err := u.sameSession(c.Owner, c.SessionID, "confirmation"); err != nil {
		return err
	}
	return createConfirmation(u, c, u.now)
}

// ResolveConfirmation answers a pending confirmation inside the transaction.
func (u *updateTx) ResolveConfirmation(toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	return resolveConfirmation(u, u.key, toolUseID, allow, denyMessage, u.now)
}

// CloseConfirmations closes the run's pending confirmations.
func (u *updateTx) CloseConfirmations(runID string) error {
	return closeConfirmations(u, u.key, runID, u.now)
}

// Confirmations returns the session's confirmations in a state ("" = all).
func (u *updateTx) Confirmations(state store.ConfirmationState) ([]*store.Confirmation, error) {
	out := []*store.Confirmation{}
	b := &pgx.Batch{}
	queryRows(b, scanConfirmation, &out, listConfirmationsSQL, u.key.Owner, u.key.ID, string(state))
	if err := u.send("list confirmations", b); err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateSession changes the session row and returns it.
func (u *updateTx) UpdateSession(su store.SessionUpdate) (*store.Session, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	var meta *string
	if su.Metadata != nil {
		m, err := jsonOrEmpty("metadata", su.Metadata)
		if err != nil {
			return nil, err
		}
		ms := string(m)
		meta = &ms
	}
	var sess *store.Session
	b := &pgx.Batch{}
	queryRow(b, scanSession, &sess, nil, `UPDATE sessions SET metadata = coalesce($3::text::json, metadata),
		title = CASE WHEN $4 THEN $5 ELSE title END,
		budget = CASE WHEN $6 THEN $7::text::jsonb ELSE budget END
		WHERE owner = $1 AND id = $2 RETURNING `+sessionColumns,
		u.key.Owner, u.key.ID, meta, su.Title != nil, su.Title, su.SetBudget, budgetText(su.Budget))
	if err := u.send("update session", b); err != nil {
		return nil, err
	}
	if sess == nil {
		return nil, errSessionNotFound
	}
	if su.Title != nil {
		u.untitled = false
	}
	if su.SetBudget {
		u.budget = []byte(nil)
		if t := budgetText(su.Budget); t != nil {
			u.budget = []byte(*t)
		}
	}
	return sess, nil
}

// Budget implements store.Tx: read with the lock of the session row, so
// it costs no round trip.
func (u *updateTx) Budget() (*rein.Budget, error) {
	if err := u.usable(); err != nil {
		return nil, err
	}
	return parseBudget(u.budget)
}

// SetDefaultTitle titles an untitled session. Whether it has a title was
// read with the lock of the session row, so once it has one this sends
// nothing; otherwise the update is held back for the commit's round trip.
func (u *updateTx) SetDefaultTitle(title string) error {
	if err := u.usable(); err != nil {
		return err
	}
	if !u.untitled {
		return nil
	}
	u.untitled = false
	t := title
	u.title = &t
	return nil
}
