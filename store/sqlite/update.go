package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	msqlite "modernc.org/sqlite"
)

// Update implements store.Updater. The whole of fn is one writer
// operation: it runs under its own savepoint inside the batch transaction,
// so fn's writes commit with the batch or are rolled back alone, and it
// returns once that batch is on disk like every write. Being inside the
// one writer is also what serialises it with every other write: the fence
// checked before fn cannot change before the commit.
func (s *Store) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	o, finish := s.updateOp(ctx, key, fence, fn)
	return finish(s.submit(o))
}

// updateOp builds Update's writer operation; finish turns the writer's
// answer into Update's. Split from Update so tests can queue the operation
// into a chosen batch.
func (s *Store) updateOp(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) (o *op, finish func(error) error) {
	// A panic in fn must not kill the writer goroutine (and with it the
	// process, mid-batch): it is caught there, the operation rolled back,
	// and the panic raised again in the caller's goroutine.
	var panicked atomic.Pointer[panicValue]
	o = &op{ctx: ctx, doing: "updating session", raw: true, done: make(chan error, 1)}
	o.fn = func(w *wtx) (err error) {
		si, err := w.fenced(key, fence)
		if err != nil {
			return s.fail(o.doing, err)
		}
		t := &sqlTx{w: w, key: key, si: si}
		defer func() {
			t.done = true
			if r := recover(); r != nil {
				panicked.Store(&panicValue{r})
				err = dbErr(rein.CodeInternal, s.file, fmt.Errorf("%v", r), "sqlite: the Update function panicked")
			}
		}()
		err = fn(t)
		if t.broken != nil {
			// The database failed under one of fn's calls; whatever fn
			// made of that, the transaction cannot commit.
			return t.broken
		}
		return err
	}
	return o, func(err error) error {
		if p := panicked.Load(); p != nil {
			panic(p.v)
		}
		return err
	}
}

type panicValue struct{ v any }

// sqlTx is the store.Tx of one Update: the writer's operation and the
// session's cache entry, loaded (and fenced) before fn runs. Reads go
// through the writer's connection, so fn sees its own writes and nothing
// that is not yet committed by others (there is no one else).
type sqlTx struct {
	w   *wtx
	key rein.SessionKey
	si  *sessInfo
	// broken is the first database error under one of fn's calls. SQLite
	// may have undone more than the failing statement (it rolls back the
	// whole transaction on I/O errors and a full disk), so nothing after
	// it can be trusted: later calls fail with it and Update returns it.
	// Refusals decided before writing (not found, conflict, busy) do not
	// break a transaction: the call wrote nothing and fn may go on.
	broken error
	// done is set when fn returns: a function that kept its Tx gets an
	// error instead of writing into some later batch.
	done bool
}

var _ store.Tx = (*sqlTx)(nil)

// begin is called first by every method: it refuses a Tx that is used
// after its Update returned or broke.
func (t *sqlTx) begin() error {
	if t.done {
		return rein.Errorf(rein.CodeInternal, "store: Tx used after its Update returned")
	}
	return t.broken
}

// end classifies a method's error: database errors break the
// transaction; every error reaches fn mapped to a rein code, so fn can
// act on rein.ErrConflict and the like.
func (t *sqlTx) end(doing string, err error) error {
	if err == nil {
		return nil
	}
	var se *msqlite.Error
	var re *rein.Error
	if errors.As(err, &se) || !errors.As(err, &re) {
		err = t.w.s.fail(doing, err)
		if t.broken == nil {
			t.broken = err
		}
		return err
	}
	return err
}

// mine refuses a record that names another session than the Update's.
func (t *sqlTx) mine(owner, sessionID, what string) error {
	if owner != t.key.Owner || sessionID != t.key.ID {
		return rein.InvalidArgument("session_id", "%s names session %s/%s, not the Update's session %s", what, owner, sessionID, t.key)
	}
	return nil
}

// Now implements store.Tx: the operation's time, the one every time it
// decides (and lease expiry) uses.
func (t *sqlTx) Now() time.Time { return t.w.now }

// SetSystem implements store.Tx. The session's cached record is dropped
// once the operation commits (restated), never before.
func (t *sqlTx) SetSystem(system *string) error {
	if err := t.begin(); err != nil {
		return err
	}
	var v sql.NullString
	if system != nil {
		v = sql.NullString{String: *system, Valid: true}
	}
	if _, err := t.w.exec(`UPDATE sessions SET system = ? WHERE pk = ?`, v, t.si.pk); err != nil {
		return t.end("setting system prompt", err)
	}
	t.w.op.restated = append(t.w.op.restated, t.key)
	return nil
}

// Lease implements store.Tx.
func (t *sqlTx) Lease() (*store.Lease, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	l, err := t.w.lease(t.si)
	return l, t.end("reading lease", err)
}

// AcquireLease implements store.Tx.
func (t *sqlTx) AcquireLease(holder, runID string, ttl time.Duration) (*store.Lease, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	l, err := t.w.acquireLease(t.key, t.si, holder, runID, ttl)
	if err != nil {
		return nil, t.end("acquiring lease", err)
	}
	return l, nil
}

// ReleaseLease implements store.Tx.
func (t *sqlTx) ReleaseLease(token int64) error {
	if err := t.begin(); err != nil {
		return err
	}
	return t.end("releasing lease", t.w.releaseLease(t.si, token))
}

// Runs implements store.Tx.
func (t *sqlTx) Runs(statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out, err := t.w.runs(t.si, statuses)
	if err != nil {
		return nil, t.end("listing runs", err)
	}
	return out, nil
}

// GetRun implements store.Tx.
func (t *sqlTx) GetRun(runID string) (*store.RunRecord, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	r, err := t.w.getRun(t.si, runID)
	if err != nil {
		return nil, t.end("reading run", err)
	}
	return r, nil
}

// GetRunByClientID implements store.Tx.
func (t *sqlTx) GetRunByClientID(clientID string) (*store.RunRecord, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	r, err := t.w.getRunByClientID(t.si, clientID)
	if err != nil {
		return nil, t.end("reading run", err)
	}
	return r, nil
}

// CreateRun implements store.Tx.
func (t *sqlTx) CreateRun(r *store.RunRecord) error {
	if err := t.begin(); err != nil {
		return err
	}
	rec, err := prepareRun(r)
	if err != nil {
		return err
	}
	if err := t.mine(r.Owner, r.SessionID, "run"); err != nil {
		return err
	}
	if err := t.w.createRun(t.si, &rec); err != nil {
		return t.end("creating run", err)
	}
	*r = rec
	return nil
}

// UpdateRun implements store.Tx. It returns the stored record with the
// conflict of a terminal run.
func (t *sqlTx) UpdateRun(runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	if err := checkRunUpdate(u); err != nil {
		return nil, err
	}
	r, err := t.w.updateRun(t.si, runID, u)
	return r, t.end("updating run", err)
}

// History implements store.Tx.
func (t *sqlTx) History() ([]rein.Message, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out, err := t.w.history(t.key, t.si)
	if err != nil {
		return nil, t.end("loading history", err)
	}
	return out, nil
}

// AppendHistory implements store.Tx.
func (t *sqlTx) AppendHistory(msgs ...rein.Message) error {
	if err := t.begin(); err != nil {
		return err
	}
	encoded, err := encodeHistory(msgs)
	if err != nil {
		return err
	}
	return t.end("appending history", t.w.appendHistory(t.key, t.si, encoded))
}

// AppendEvents implements store.Tx. The writer wakes waiters only after
// the batch commits (answer), and not at all if the Update fails.
func (t *sqlTx) AppendEvents(evs ...rein.Event) ([]rein.Event, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out, err := prepareEvents(t.key, evs)
	if err != nil {
		return nil, err
	}
	if err := t.w.appendEvents(t.key, t.si, out); err != nil {
		return nil, t.end("appending events", err)
	}
	return out, nil
}

// PushSupplement implements store.Tx.
func (t *sqlTx) PushSupplement(s *store.Supplement) (*store.Supplement, bool, error) {
	if err := t.begin(); err != nil {
		return nil, false, err
	}
	if err := t.mine(s.Owner, s.SessionID, "supplement"); err != nil {
		return nil, false, err
	}
	out, created, err := t.w.pushSupplement(t.key, t.si, s)
	if err != nil {
		return nil, false, t.end("pushing supplement", err)
	}
	return out, created, nil
}

// QueuedSupplements implements store.Tx.
func (t *sqlTx) QueuedSupplements() ([]*store.Supplement, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out, err := t.w.queuedSupplements(t.key, t.si)
	if err != nil {
		return nil, t.end("reading supplements", err)
	}
	return out, nil
}

// ConsumeSupplements implements store.Tx.
func (t *sqlTx) ConsumeSupplements(ids []string, runID string, step int) error {
	if err := t.begin(); err != nil {
		return err
	}
	return t.end("consuming supplements", t.w.consumeSupplements(t.key, t.si, ids, runID, step))
}

// CreateConfirmation implements store.Tx.
func (t *sqlTx) CreateConfirmation(c *store.Confirmation) error {
	if err := t.begin(); err != nil {
		return err
	}
	rec, err := prepareConfirmation(c)
	if err != nil {
		return err
	}
	if err := t.mine(c.Owner, c.SessionID, "confirmation"); err != nil {
		return err
	}
	if err := t.w.createConfirmation(t.key, t.si, &rec); err != nil {
		return t.end("creating confirmation", err)
	}
	*c = rec
	return nil
}

// ResolveConfirmation implements store.Tx.
func (t *sqlTx) ResolveConfirmation(toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	c, err := t.w.resolveConfirmation(t.key, t.si, toolUseID, allow, denyMessage)
	if err != nil {
		return nil, t.end("resolving confirmation", err)
	}
	return c, nil
}

// ExpireConfirmation implements store.Tx.
func (t *sqlTx) ExpireConfirmation(toolUseID string) (*store.Confirmation, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	c, err := t.w.expireConfirmation(t.key, t.si, toolUseID)
	if err != nil {
		return nil, t.end("expiring confirmation", err)
	}
	return c, nil
}

// CloseConfirmations implements store.Tx.
func (t *sqlTx) CloseConfirmations(runID string) error {
	if err := t.begin(); err != nil {
		return err
	}
	return t.end("closing confirmations", t.w.closeConfirmations(t.si, runID))
}

// Confirmations implements store.Tx.
func (t *sqlTx) Confirmations(state store.ConfirmationState) ([]*store.Confirmation, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	out, err := t.w.confirmations(t.key, t.si, state)
	if err != nil {
		return nil, t.end("listing confirmations", err)
	}
	return out, nil
}

// StartConfirmation implements store.Tx.
func (t *sqlTx) StartConfirmation(toolUseID string) error {
	if err := t.begin(); err != nil {
		return err
	}
	return t.end("starting confirmed call", t.w.startConfirmation(t.si, toolUseID))
}

// UpdateSession implements store.Tx.
func (t *sqlTx) UpdateSession(u store.SessionUpdate) (*store.Session, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	if u.Metadata != nil {
		meta, err := jsonOrEmpty("metadata", u.Metadata)
		if err != nil {
			return nil, err
		}
		if _, err := t.w.exec(`UPDATE sessions SET metadata = ? WHERE pk = ?`, string(meta), t.si.pk); err != nil {
			return nil, t.end("updating session", err)
		}
	}
	if u.Title != nil {
		if _, err := t.w.exec(`UPDATE sessions SET title = ? WHERE pk = ?`, *u.Title, t.si.pk); err != nil {
			return nil, t.end("updating session", err)
		}
	}
	if u.SetBudget {
		b, err := budgetText(u.Budget)
		if err != nil {
			return nil, err
		}
		if _, err := t.w.exec(`UPDATE sessions SET budget = ? WHERE pk = ?`, b, t.si.pk); err != nil {
			return nil, t.end("updating session", err)
		}
	}
	t.w.op.restated = append(t.w.op.restated, t.key)
	sess, err := scanSession(t.w.queryRow(`SELECT `+sessionColumns+` FROM sessions WHERE pk = ?`, t.si.pk))
	if err != nil {
		return nil, t.end("reading session", err)
	}
	return sess, nil
}

// Budget implements store.Tx: one read by primary key.
func (t *sqlTx) Budget() (*rein.Budget, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	var v sql.NullString
	if err := t.w.queryRow(`SELECT budget FROM sessions WHERE pk = ?`, t.si.pk).Scan(&v); err != nil {
		return nil, t.end("reading the session's budget", err)
	}
	b, err := parseBudget(v)
	if err != nil {
		return nil, t.end("reading the session's budget", err)
	}
	return b, nil
}

// SetDefaultTitle implements store.Tx: one UPDATE by primary key that
// changes nothing once the session has a title.
func (t *sqlTx) SetDefaultTitle(title string) error {
	if err := t.begin(); err != nil {
		return err
	}
	res, err := t.w.exec(`UPDATE sessions SET title = ? WHERE pk = ? AND title IS NULL`, title, t.si.pk)
	if err != nil {
		return t.end("titling session", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return t.end("titling session", err)
	} else if n > 0 {
		t.w.op.restated = append(t.w.op.restated, t.key)
	}
	return nil
}

// RememberStop implements store.Tx.
func (t *sqlTx) RememberStop(st *store.RememberedStop) error {
	if err := t.begin(); err != nil {
		return err
	}
	if err := t.mine(st.Owner, st.SessionID, "remembered stop"); err != nil {
		return err
	}
	if st.ClientID == "" {
		return rein.InvalidArgument("client_id", "a remembered stop needs a client id")
	}
	at := norm(st.CreatedAt)
	if at.IsZero() {
		at = t.w.now
	}
	_, err := t.w.exec(`INSERT INTO stops (session_pk, client_id, mode, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (session_pk, client_id) DO UPDATE SET mode = excluded.mode, created_at = excluded.created_at`,
		t.si.pk, st.ClientID, st.Mode, at.UnixMicro())
	return t.end("remembering a stop", err)
}

// RememberedStop implements store.Tx: one read by primary key.
func (t *sqlTx) RememberedStop(clientID string) (*store.RememberedStop, error) {
	if err := t.begin(); err != nil {
		return nil, err
	}
	st := store.RememberedStop{Owner: t.key.Owner, SessionID: t.key.ID, ClientID: clientID}
	var at sql.NullInt64
	err := t.w.queryRow(`SELECT mode, created_at FROM stops WHERE session_pk = ? AND client_id = ?`, t.si.pk, clientID).Scan(&st.Mode, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, t.end("reading a remembered stop", err)
	}
	st.CreatedAt = fromMicros(at)
	return &st, nil
}

// ForgetStops implements store.Tx.
func (t *sqlTx) ForgetStops(clientID string, before time.Time) error {
	if err := t.begin(); err != nil {
		return err
	}
	var cut sql.NullInt64
	if !before.IsZero() {
		cut = sql.NullInt64{Int64: norm(before).UnixMicro(), Valid: true}
	}
	_, err := t.w.exec(`DELETE FROM stops WHERE session_pk = ? AND (client_id = ? OR created_at < ?)`, t.si.pk, clientID, cut)
	return t.end("forgetting stops", err)
}
