package memory

import (
	"context"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// tx is one write transaction on one session, run under the store lock:
// every session write goes through one (Store.update), whether a single
// call such as AppendEvents or an Update's function, so both share one
// implementation of each write.
//
// Rollback is an undo log rather than a staged copy: each write records
// how to take itself back, so a transaction costs what it writes, never
// what the session holds. Writes change the live maps in place and other
// goroutines cannot see them before commit because the store lock is held
// from the first write to the commit.
type tx struct {
	s   *Store
	ss  *session
	key rein.SessionKey
	// now is the transaction's time: every time it decides is this one,
	// as with a database transaction's now().
	now time.Time
	// undo takes back the writes so far, played last to first; undoBuf
	// holds a short transaction's entries without a growing slice.
	undo    []func()
	undoBuf [8]func()
	// appended is set once events were appended: waiters are woken at
	// commit, never before, so a woken reader always finds them.
	appended bool
	// evMarked and evFrom are the events' undo: the session's log had
	// evFrom events before this transaction's first append.
	evMarked bool
	evFrom   int
	// done is set when update returns, so a function that kept its Tx
	// gets an error instead of writing outside the lock.
	done bool
}

var _ store.Tx = (*tx)(nil)

var errTxDone = rein.Errorf(rein.CodeInternal, "store: Tx used after its Update returned")

// update runs fn as one transaction on key: it checks the fence, runs fn
// and commits, or undoes everything fn wrote if fn fails or panics.
func (s *Store) update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(t *tx) error) error {
	return s.run(ctx, key, fence, fn, nil)
}

// run is update with the function as an internal one (fn) or as an
// Update's (ufn): exactly one is set. Taking both spares Update a closure
// around its function on every call.
func (s *Store) run(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(t *tx) error, ufn func(store.Tx) error) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return err
	}
	if err := checkFence(ss, fence); err != nil {
		return err
	}
	t := &tx{s: s, ss: ss, key: key, now: s.now()}
	t.undo = t.undoBuf[:0]
	committed := false
	defer func() {
		// Runs on a panic too: a panicking fn leaves nothing behind.
		t.done = true
		if !committed {
			t.rollback()
		}
	}()
	if fn != nil {
		err = fn(t)
	} else {
		err = ufn(t)
	}
	if err != nil {
		return err
	}
	committed = true
	if t.appended {
		ss.wakeWaiters()
	}
	return nil
}

// Update implements store.Updater. The fence is checked once, before fn;
// the store lock, held until the commit, is what keeps it true.
func (s *Store) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	return s.run(ctx, key, fence, nil, fn)
}

// onUndo records how to take back a write just made.
func (t *tx) onUndo(f func()) { t.undo = append(t.undo, f) }

func (t *tx) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo = nil
	if t.evMarked {
		// Only appends change a log, so taking the log back to its length
		// before the first one undoes them all, in any order with the rest.
		ss := t.ss
		clear(ss.events[t.evFrom:])
		ss.events = ss.events[:t.evFrom]
		t.evMarked = false
	}
	t.appended = false
}

// check fails a Tx used after its Update returned.
func (t *tx) check() error {
	if t.done {
		return errTxDone
	}
	return nil
}

// mine refuses a record that names another session than the
// transaction's: a Tx acts on its own session only.
func (t *tx) mine(owner, sessionID, what string) error {
	if owner != t.key.Owner || sessionID != t.key.ID {
		return rein.InvalidArgument("session_id", "%s names session %s/%s, not the Update's session %s", what, owner, sessionID, t.key)
	}
	return nil
}

// Now implements store.Tx.
func (t *tx) Now() time.Time { return t.now }
