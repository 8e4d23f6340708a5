package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// maxBatch bounds how many operations one transaction carries, so one
// commit's latency stays bounded under any load.
const maxBatch = 512

// maxCache bounds the writer's session cache; past it the cache is simply
// dropped and refilled from the database, which is always correct.
const maxCache = 16384

// op is one write waiting for the writer goroutine.
type op struct {
	ctx   context.Context
	doing string
	fn    func(tx *wtx) error
	// atomic marks an operation that fails before writing anything or
	// writes with exactly one statement, which SQLite undoes by itself if
	// it fails: it runs without a savepoint.
	atomic bool
	// raw marks an operation whose function's error is returned to the
	// caller as it is rather than mapped (Update: fn's own error).
	raw  bool
	done chan error // buffered: the writer never blocks answering
	// then, if set, is called with the answer instead of sending it on
	// done (an append nobody waits for, AppendEventsAsync).
	then  func(error)
	wakes []rein.SessionKey
	// appended are the events the operation appended, for the log tails
	// (tail.go) once they are committed; forget names sessions whose
	// tail goes then (deleted).
	appended []appendRec
	forget   []rein.SessionKey
	// created names sessions the operation created: each gets an empty
	// tail once committed, so that a stream opened on a new session waits
	// and reads without asking the database (it has nothing yet).
	created []*store.Session
	// restated names sessions whose record the operation changed, inbox
	// the changes to sessions' queued supplements: the facts the tails
	// keep of them (facts.go) follow once committed.
	restated []rein.SessionKey
	inbox    []inboxRec
	history  []histRec
	// state is opPending until the writer takes the operation (opTaken)
	// or its caller gives up first (opAbandoned). A caller that finds it
	// taken waits for the answer: an operation's function (an Update's fn,
	// which writes into its caller's variables) never runs after its
	// caller has returned.
	state atomic.Int32
}

const (
	opPending int32 = iota
	opTaken
	opAbandoned
)

// wtx is what an operation's function sees: the writer's connection inside
// the batch transaction, the time of this operation and the session cache.
type wtx struct {
	s   *Store
	op  *op
	now time.Time
	// saved holds every cache entry this operation changed, as it was
	// before the change (see touch).
	saved []savedInfo
}

// histRec is an append to a session's history by an operation: the
// messages as stored.
type histRec struct {
	key     rein.SessionKey
	encoded []string
}

// inboxRec is a change of a session's queued supplements by an operation.
type inboxRec struct {
	key   rein.SessionKey
	delta int
}

type savedInfo struct {
	si  *sessInfo
	was sessInfo
}

// sessInfo is what the writer knows about a session without asking the
// database. It never runs ahead of what is committed: an operation calls
// touch before changing an entry, the writer puts back what was touched
// when the operation is rolled back (its savepoint, or the transaction of
// a lone operation), and drops the whole cache when a transaction fails.
// The writer is the only writer of the file (the file lock), so nothing
// else can make it stale.
type sessInfo struct {
	pk      int64
	lastSeq int64
	// lease is the current lease's token, 0 when no lease is held.
	lease int64
	// leaseRec is the current lease, nil when none; known says whether
	// leaseRec is loaded (an entry made for a one-off read is not). A
	// record is never changed in place, only replaced, so a saved copy of
	// the entry (touch) restores it.
	leaseRec   *store.Lease
	leaseKnown bool
	// active are the session's runs not yet ended, in queue order, once
	// activeKnown (runcache.go); like leaseRec, replaced and never changed
	// in place.
	active      []*store.RunRecord
	activeKnown bool
	// histLen is the number of history messages, -1 until first needed.
	histLen int64
}

// write runs fn in the writer goroutine, inside the next batch
// transaction, and returns once that transaction has committed (or fn
// failed). Each operation runs under its own savepoint, so a failing one
// is rolled back alone and the rest of the batch still commits.
func (s *Store) write(ctx context.Context, doing string, fn func(tx *wtx) error) error {
	return s.submit(&op{ctx: ctx, doing: doing, fn: fn, done: make(chan error, 1)})
}

// writeAtomic is write for an operation that is atomic without a
// savepoint (see op.atomic).
func (s *Store) writeAtomic(ctx context.Context, doing string, fn func(tx *wtx) error) error {
	return s.submit(&op{ctx: ctx, doing: doing, fn: fn, atomic: true, done: make(chan error, 1)})
}

// submitAsync queues an operation nobody waits for: its then gets the
// answer, from the writer, or from here when the store is closing. The
// read lock orders it against the writer's last drain of the queue
// (stop): an operation queued before that drain is answered by it, one
// that comes after finds the store closing.
func (s *Store) submitAsync(o *op) {
	s.asyncMu.RLock()
	select {
	case <-s.closing:
		s.asyncMu.RUnlock()
		o.then(errClosed(s.file))
		return
	default:
	}
	select {
	case s.ops <- o:
		s.asyncMu.RUnlock()
	case <-s.closing:
		s.asyncMu.RUnlock()
		o.then(errClosed(s.file))
	}
}

func (s *Store) submit(o *op) error {
	ctx := o.ctx
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.ops <- o:
	case <-s.closing:
		return errClosed(s.file)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		// Not yet taken by the writer: it never will be. Taken: it is
		// running or committing, and its answer comes soon (a batch is
		// bounded); waiting for it keeps the function from outliving its
		// caller.
		if o.state.CompareAndSwap(opPending, opAbandoned) {
			return ctx.Err()
		}
		select {
		case err := <-o.done:
			return err
		case <-s.stopped:
			select {
			case err := <-o.done:
				return err
			default:
				return errClosed(s.file)
			}
		}
	case <-s.stopped:
		// The writer answers everything it takes before stopping; an op
		// that slipped into the queue after its last look is not run.
		select {
		case err := <-o.done:
			return err
		default:
			return errClosed(s.file)
		}
	}
}

// touch records si as it is before the operation changes it. Call it
// before every change of a cache entry; recording once per entry is
// enough, the first state is the one to go back to.
func (tx *wtx) touch(si *sessInfo) {
	for _, sv := range tx.saved {
		if sv.si == si {
			return
		}
	}
	tx.saved = append(tx.saved, savedInfo{si: si, was: *si})
}

// restoreCache takes back the operation's cache changes after its writes
// were rolled back. An entry the cache dropped meanwhile (maxCache) is
// harmless to restore: nothing reaches it any more.
func (tx *wtx) restoreCache() {
	for i := len(tx.saved) - 1; i >= 0; i-- {
		*tx.saved[i].si = tx.saved[i].was
	}
	tx.saved = nil
}

// wake asks for WaitEvents callers on key to be woken once the batch has
// committed.
func (tx *wtx) wake(key rein.SessionKey) { tx.op.wakes = append(tx.op.wakes, key) }

// appendRec is one append of an operation: evs follow seq prev of key.
type appendRec struct {
	key  rein.SessionKey
	prev int64
	evs  []rein.Event
}

// exec and query run a statement on the writer's connection, prepared once
// and reused across transactions.
func (tx *wtx) exec(query string, args ...any) (sql.Result, error) {
	st, err := tx.s.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

func (tx *wtx) queryRow(query string, args ...any) *sql.Row {
	st, err := tx.s.stmt(query)
	if err != nil {
		// Surface the prepare error through Row.Scan.
		return tx.s.wconn.QueryRowContext(context.Background(), query, args...)
	}
	return st.QueryRow(args...)
}

func (tx *wtx) query(query string, args ...any) (*sql.Rows, error) {
	st, err := tx.s.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// control runs a transaction-control statement of the batch (BEGIN,
// SAVEPOINT, RELEASE, COMMIT), prepared once like the others: a batch
// runs two of them per operation plus two, and SQLite compiling each
// again was a measurable part of a short batch.
func (s *Store) control(query string) (sql.Result, error) {
	st, err := s.stmt(query)
	if err != nil {
		return s.wconn.ExecContext(context.Background(), query)
	}
	return st.Exec()
}

func (s *Store) stmt(query string) (*sql.Stmt, error) {
	if st := s.stmts[query]; st != nil {
		return st, nil
	}
	st, err := s.wconn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	s.stmts[query] = st
	return st, nil
}

// session returns the writer's view of a session, or not-found.
func (tx *wtx) session(key rein.SessionKey) (*sessInfo, error) {
	if si := tx.s.cache[key]; si != nil {
		return si, nil
	}
	si := &sessInfo{histLen: -1, leaseKnown: true}
	var (
		runID, holder sql.NullString
		expires       sql.NullInt64
	)
	err := tx.queryRow(`SELECT s.pk, coalesce((SELECT max(seq) FROM events WHERE session_pk = s.pk), 0), coalesce(l.token, 0),
			l.run_id, l.holder, l.expires_at
		FROM sessions s LEFT JOIN leases l ON l.session_pk = s.pk
		WHERE s.owner = ? AND s.id = ?`, key.Owner, key.ID).Scan(&si.pk, &si.lastSeq, &si.lease, &runID, &holder, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session")
	}
	if err != nil {
		return nil, err
	}
	if si.lease != 0 {
		si.leaseRec = &store.Lease{Owner: key.Owner, SessionID: key.ID, RunID: runID.String, Holder: holder.String,
			Token: si.lease, ExpiresAt: time.UnixMicro(expires.Int64).UTC()}
	}
	if len(tx.s.cache) >= maxCache {
		clear(tx.s.cache)
	}
	tx.s.cache[key] = si
	return si, nil
}

// fenced returns the session after checking f against its current lease:
// the rule of store.Fence.
func (tx *wtx) fenced(key rein.SessionKey, f store.Fence) (*sessInfo, error) {
	si, err := tx.session(key)
	if err != nil {
		return nil, err
	}
	if f.Token != 0 && f.Token != si.lease {
		return nil, errLeaseLost()
	}
	return si, nil
}

// writer is the goroutine that owns the write connection. It takes the
// first pending operation, then everything else already pending, and
// commits them together: while one commit waits for fsync the next batch
// accumulates, which is what makes many concurrent appends cost few
// fsyncs.
func (s *Store) writer() {
	defer close(s.stopped)
	batch := make([]*op, 0, maxBatch)
	// lowSpace is set once a batch failed on a full disk: the disk may
	// not have room for the WAL's usual growth, so from then on the
	// writer keeps the WAL small (keepWALSmall).
	lowSpace := false
	for {
		batch = batch[:0]
		select {
		case o := <-s.ops:
			batch = append(batch, o)
		case <-s.closing:
			// Queuers without a waiter (submitAsync) are let finish,
			// which they do at once now that the store is closing, so
			// none of their operations is left in the queue unanswered.
			s.asyncMu.Lock()
			s.failQueued()
			s.asyncMu.Unlock()
			return
		}
		// Callers answered by the last commit are runnable but may not
		// have run yet (two cores, hundreds of goroutines); yielding once
		// lets them enqueue, which measured as twice the operations per
		// commit with 16 writers, for about a microsecond when alone.
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		if lowSpace {
			s.keepWALSmall()
		}
		if s.runBatch(batch) {
			lowSpace = true
		}
	}
}

// lowSpaceWAL is how large the WAL may grow once the disk has been full.
const lowSpaceWAL = 1 << 20

// keepWALSmall checkpoints the whole WAL into the database file and
// truncates it once it is larger than lowSpaceWAL. The WAL is otherwise
// checkpointed only every ~40 MB (see Open) and keeps its size after a
// checkpoint: on a disk that was full, giving back less space than that
// would never let the store write for long, the WAL filling the freed
// space again, and once it has, the checkpoint itself finds no room for
// the database file to take the WAL's pages. It is tried before every
// batch after a batch failed on a full disk, for the rest of the store's
// life: a checkpoint that fails (the disk still full) changes nothing and
// is tried again.
func (s *Store) keepWALSmall() {
	if fi, err := os.Stat(s.file + "-wal"); err != nil || fi.Size() <= lowSpaceWAL {
		return
	}
	var busy, frames, checkpointed int
	_ = s.wconn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &frames, &checkpointed)
}

func (s *Store) failQueued() {
	for {
		select {
		case o := <-s.ops:
			o.reply(errClosed(s.file))
		default:
			return
		}
	}
}

// runBatch runs and answers one batch, and reports whether an operation of
// it failed on a full disk.
func (s *Store) runBatch(batch []*op) (full bool) {
	bg := context.Background()
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.state.CompareAndSwap(opPending, opAbandoned)
			o.reply(err)
			continue
		}
		if !o.state.CompareAndSwap(opPending, opTaken) {
			o.reply(o.ctx.Err())
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	results := make([]error, len(live))
	defer func() {
		for _, err := range results {
			full = full || isCode(err, sqlite3.SQLITE_FULL)
		}
	}()
	abort := func(err error) {
		s.wconn.ExecContext(bg, "ROLLBACK")
		clear(s.cache)
		s.tails.reset()
		for i, o := range live {
			if results[i] == nil {
				results[i] = s.fail(o.doing, err)
			}
			o.wakes = nil
		}
	}
	if _, err := s.control("BEGIN IMMEDIATE"); err != nil {
		abort(err)
		s.answer(live, results)
		return
	}
	// A lone operation needs no savepoint: if it fails, the whole
	// transaction is rolled back instead.
	single := len(live) == 1
	for i, o := range live {
		tx := &wtx{s: s, op: o, now: s.now()}
		if single {
			if err := o.fn(tx); err != nil {
				results[i] = o.failure(s, err)
				o.wakes = nil
				if _, rbErr := s.wconn.ExecContext(bg, "ROLLBACK"); rbErr != nil {
					clear(s.cache)
					s.tails.reset()
				} else {
					tx.restoreCache()
				}
				s.answer(live, results)
				return
			}
			break
		}
		if o.atomic {
			if err := o.fn(tx); err != nil {
				results[i] = o.failure(s, err)
				o.wakes = nil
				tx.restoreCache()
				if !statementOnlyFailure(err) {
					// Possibly more than the statement was undone (SQLite
					// rolls back the transaction on I/O errors and a full
					// disk): trust nothing of this batch.
					abort(err)
					s.answer(live, results)
					return
				}
			}
			continue
		}
		if _, err := s.control("SAVEPOINT op"); err != nil {
			abort(err)
			s.answer(live, results)
			return
		}
		err := o.fn(tx)
		if err != nil {
			results[i] = o.failure(s, err)
			o.wakes = nil
			if _, rbErr := s.wconn.ExecContext(bg, "ROLLBACK TO op"); rbErr != nil {
				// SQLite rolled back the whole transaction itself (it
				// does on I/O errors and a full disk): nothing of this
				// batch survives.
				abort(err)
				s.answer(live, results)
				return
			}
			tx.restoreCache()
		}
		if _, err := s.control("RELEASE op"); err != nil {
			abort(err)
			s.answer(live, results)
			return
		}
	}
	// Marked before the commit makes them visible, cleared by answer once
	// the tails have them (tail.go, settle).
	for i, o := range live {
		if results[i] == nil {
			s.committing = o.tailKeys(s.committing)
		}
	}
	s.tails.beginCommit(s.committing)
	if _, err := s.control("COMMIT"); err != nil {
		abort(err)
	} else if s.afterCommit != nil {
		s.afterCommit()
	}
	s.answer(live, results)
	return
}

// tailKeys appends to keys the sessions whose tail-served data (events,
// facts) the operation changes once committed, one entry per change: one
// for each change applyTails makes (TestTailKeysNameEveryTailChange).
func (o *op) tailKeys(keys []rein.SessionKey) []rein.SessionKey {
	for _, a := range o.appended {
		keys = append(keys, a.key)
	}
	keys = append(keys, o.forget...)
	for _, sess := range o.created {
		keys = append(keys, sess.Key())
	}
	keys = append(keys, o.restated...)
	for _, r := range o.inbox {
		keys = append(keys, r.key)
	}
	for _, r := range o.history {
		keys = append(keys, r.key)
	}
	return keys
}

// applyTails puts on the tails what the committed operation changed.
func (o *op) applyTails(t *tails) {
	for _, a := range o.appended {
		t.appended(a.key, a.prev, a.evs)
	}
	for _, key := range o.forget {
		t.drop(key)
	}
	for _, sess := range o.created {
		t.created(sess)
	}
	for _, key := range o.restated {
		t.restated(key)
	}
	for _, r := range o.inbox {
		t.inboxChanged(r.key, r.delta)
	}
	for _, r := range o.history {
		t.historyAppended(r.key, r.encoded)
	}
}

// failure is what the caller of a failed operation is told.
func (o *op) failure(s *Store, err error) error {
	if o.raw {
		return err
	}
	return s.fail(o.doing, err)
}

// statementOnlyFailure reports whether err leaves the transaction as it
// was before the failing statement: a refusal decided in Go before any
// write, or a constraint violation, which SQLite undoes statement-wide.
func statementOnlyFailure(err error) bool {
	var se *msqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
	}
	var re *rein.Error
	return errors.As(err, &re) || errors.Is(err, rein.ErrLeaseLost)
}

// answer replies to every operation and, for those that committed, puts
// their events on the log tails and wakes the sessions they appended to.
// Waking after the commit is what lets a woken reader find the events;
// the tails take the whole batch first, in commit order, so what a woken
// reader finds there is what it was woken for, and the reads that settle
// on the batch (tail.go) are let go before anyone is answered: an
// answer's callback (AppendEventsAsync) may read.
func (s *Store) answer(live []*op, results []error) {
	for i, o := range live {
		if results[i] == nil {
			o.applyTails(&s.tails)
		}
	}
	s.tails.endCommit(s.committing)
	clear(s.committing)
	s.committing = s.committing[:0]
	for i, o := range live {
		if results[i] == nil {
			for _, key := range o.wakes {
				s.waiters.publish(key)
			}
		}
		o.reply(results[i])
	}
}

// reply answers the operation's caller.
func (o *op) reply(err error) {
	if o.then != nil {
		o.then(err)
		return
	}
	o.done <- err
}

// notifier wakes WaitEvents callers of a session when the writer commits
// an append to it: one channel per watched session, closed and replaced on
// every append. Sessions nobody watches cost nothing.
type notifier struct {
	mu      sync.Mutex
	entries map[rein.SessionKey]*watch
}

type watch struct {
	ch      chan struct{}
	waiters int
}

// subscribe registers a waiter on key and returns the channel the next
// append closes. The caller must read the log after subscribing (so an
// append between its read and its wait is not missed) and call
// unsubscribe when done.
func (n *notifier) subscribe(key rein.SessionKey) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.entries == nil {
		n.entries = map[rein.SessionKey]*watch{}
	}
	w := n.entries[key]
	if w == nil {
		w = &watch{ch: make(chan struct{})}
		n.entries[key] = w
	}
	w.waiters++
	return w.ch
}

func (n *notifier) unsubscribe(key rein.SessionKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.entries[key]; w != nil {
		if w.waiters--; w.waiters == 0 {
			delete(n.entries, key)
		}
	}
}

func (n *notifier) publish(key rein.SessionKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.entries[key]; w != nil {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}
