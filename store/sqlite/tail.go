package sqlite

import (
	"bytes"
	"container/list"
	"context"
	"sync"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Live readers (event streams, WaitEvents) ask for the last few events of
// a session again and again: every append wakes them all, and each would
// read the log back from the database — two queries and a read
// transaction per reader per append, which under load cost more CPU than
// the appends themselves. The store is the file's only writer (the file
// lock), so it knows every committed event as the writer commits it: it
// keeps the tail of each recently written log in memory and answers
// reads that fall inside it from there. The database stays the source of
// truth: a read from before the tail, or of a session without one, goes
// to it.
//
// A tail is the committed events of one session with seq first..last, no
// gap: it starts with the first append this Store commits to the session
// (everything before is in the database) and is extended only by appends
// that continue it exactly, in commit order. Anything else — an append
// that does not follow on, a failed batch, a deleted session — drops the
// tail, so it can only be behind the database for the moment between a
// commit and its answer, never wrong; and a read of the database waits out
// that moment (settle, below).

// Bounds of what the tails hold. A tail keeps at most tailEvents events
// and tailBytes of payload (older events fall off its front); all tails
// together hold at most tailsBytes, the least recently written dropped
// first.
const (
	tailEvents = 256
	tailBytes  = 64 << 10
	tailsBytes = 32 << 20
)

type tails struct {
	mu    sync.Mutex
	m     map[rein.SessionKey]*tail
	lru   list.List // of *tail, most recently appended first
	bytes int
	// gen counts changes to what the tails know of sessions' rows and
	// inboxes (and every drop): a fact read from the database is kept only
	// if gen did not move while it was read, so a read that raced a
	// commit never installs what that commit changed.
	gen uint64
	// committing counts, per session, the batches being committed whose
	// changes to what the tails answer (events, facts) they have not yet
	// taken (beginCommit to endCommit); settled, when made, is closed at
	// the next endCommit. A read from the database waits on them
	// (settle), so what it found committed is on the tails too.
	committing map[rein.SessionKey]int
	settled    chan struct{}
}

type tail struct {
	key  rein.SessionKey
	last int64
	// evs are the retained events, evs[len-1].Seq == last when not empty;
	// an empty tail still knows last.
	evs   []rein.Event
	bytes int
	elem  *list.Element
	// The run's loop asks for the session's record at every run and for
	// its queued supplements twice a step; a tail answers both while it
	// knows them (facts.go). sess is nil, and pending -1, when unknown.
	sess      *store.Session
	sessBytes int
	pending   int
	// hist is the session's whole history as stored (encoded), while
	// histKnown and no longer than histFactBytes.
	hist      []string
	histBytes int
	histKnown bool
}

// A commit is visible to the read connections as soon as SQLite makes it
// so, and the tails take it only afterwards, as the writer answers. A
// reader that read the database in between — a run's record showing it
// ended — and then the tails — the run's log — would find the log behind
// the record. So the writer marks the sessions of a batch before its
// COMMIT and clears them once the tails have its changes, and the reads
// that go to the database settle before they answer: a read that may have
// seen a commit returns only once the tails have it too. A read whose
// session no commit is changing (nearly every read) pays one map lookup.

// beginCommit marks keys (one entry per change; repeats count) as being
// committed.
func (t *tails) beginCommit(keys []rein.SessionKey) {
	if len(keys) == 0 {
		return
	}
	t.mu.Lock()
	if t.committing == nil {
		t.committing = make(map[rein.SessionKey]int)
	}
	for _, k := range keys {
		t.committing[k]++
	}
	t.mu.Unlock()
}

// endCommit clears what beginCommit(keys) marked, once the tails have the
// batch's changes (or the batch failed), and wakes settle.
func (t *tails) endCommit(keys []rein.SessionKey) {
	if len(keys) == 0 {
		return
	}
	t.mu.Lock()
	for _, k := range keys {
		if n := t.committing[k] - 1; n > 0 {
			t.committing[k] = n
		} else {
			delete(t.committing, k)
		}
	}
	if t.settled != nil {
		close(t.settled)
		t.settled = nil
	}
	t.mu.Unlock()
}

// settle returns once no commit changing key is between the database and
// the tails. Called by a read of the database after it read.
func (t *tails) settle(ctx context.Context, key rein.SessionKey) error {
	for {
		t.mu.Lock()
		if t.committing[key] == 0 {
			t.mu.Unlock()
			return nil
		}
		if t.settled == nil {
			t.settled = make(chan struct{})
		}
		ch := t.settled
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settled returns v and err once the tails have every commit a database
// read that answered them may have seen (tails.settle); a failed read is
// returned at once.
func settled[T any](ctx context.Context, s *Store, key rein.SessionKey, v T, err error) (T, error) {
	if err != nil {
		return v, err
	}
	if err := s.tails.settle(ctx, key); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// tailBase is what a tail counts against tailsBytes before any event: an
// empty tail (a session created, nothing logged yet) must count too, or
// sessions that never log would be kept for ever.
const tailBase = 128

// size is what one event counts against the bounds.
func size(e *rein.Event) int { return len(e.Payload) + len(e.ID) + len(e.RunID) + len(e.Type) + 64 }

// appended records events the writer has just committed to key, in seq
// order. prev is the session's last seq before them.
func (t *tails) appended(key rein.SessionKey, prev int64, evs []rein.Event) {
	if len(evs) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[rein.SessionKey]*tail{}
	}
	tl := t.m[key]
	if tl != nil && tl.last != prev {
		// Not a continuation: what lies between is unknown here.
		t.dropLocked(tl)
		tl = nil
	}
	if tl == nil {
		tl = t.newLocked(key, prev)
	} else {
		t.lru.MoveToFront(tl.elem)
	}
	for _, e := range evs {
		// The caller keeps the events it appended: the tail's are its own.
		e.Payload = bytes.Clone(e.Payload)
		n := size(&e)
		tl.evs = append(tl.evs, e)
		t.chargeLocked(tl, n)
		tl.last = e.Seq
	}
	// Drop from the front what exceeds the tail's bounds; copy down once
	// in a while so the backing array does not grow without end.
	drop := 0
	for len(tl.evs)-drop > tailEvents || (tl.bytes > tailBytes && len(tl.evs)-drop > 1) {
		n := size(&tl.evs[drop])
		t.chargeLocked(tl, -n)
		drop++
	}
	if drop > 0 {
		clear(tl.evs[:drop])
		tl.evs = tl.evs[drop:]
		if cap(tl.evs) > 2*tailEvents {
			tl.evs = append(make([]rein.Event, 0, len(tl.evs)+tailEvents/4), tl.evs...)
		}
	}
	t.evictLocked()
}

// newLocked starts key's tail at last seq prev.
func (t *tails) newLocked(key rein.SessionKey, prev int64) *tail {
	tl := &tail{key: key, last: prev, bytes: tailBase, pending: -1}
	tl.elem = t.lru.PushFront(tl)
	t.m[key] = tl
	t.bytes += tailBase
	return tl
}

// created starts an empty tail for a session just created (its log is
// empty: last seq 0, no supplement) and keeps its record, as stored.
func (t *tails) created(sess *store.Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[rein.SessionKey]*tail{}
	}
	key := sess.Key()
	if t.m[key] != nil {
		return
	}
	tl := t.newLocked(key, 0)
	tl.pending, tl.histKnown = 0, true
	t.setSessionLocked(tl, sess)
	t.evictLocked()
}

// drop forgets key's tail (its session was deleted).
func (t *tails) drop(key rein.SessionKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil {
		t.dropLocked(tl)
	}
}

// reset forgets every tail: after a failed batch nothing of what the
// writer believed is trusted.
func (t *tails) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.m)
	t.lru.Init()
	t.bytes = 0
	t.gen++
}

// chargeLocked counts n more bytes (n < 0: fewer) against tl and all
// tails.
func (t *tails) chargeLocked(tl *tail, n int) {
	tl.bytes += n
	t.bytes += n
}

// evictLocked lets the least recently written tails go until all of them
// fit tailsBytes (the most recent one is always kept).
func (t *tails) evictLocked() {
	for t.bytes > tailsBytes && t.lru.Len() > 1 {
		t.dropLocked(t.lru.Back().Value.(*tail))
	}
}

func (t *tails) dropLocked(tl *tail) {
	t.lru.Remove(tl.elem)
	delete(t.m, tl.key)
	t.bytes -= tl.bytes
	t.gen++
}

// read answers ReadEvents from key's tail: the events after after (at
// most limit) and the last seq. ok is false when the tail cannot answer:
// there is none, or after is before what it holds, or beyond its last
// (then the database may already know more).
func (t *tails) read(key rein.SessionKey, after int64, limit int) (out []rein.Event, last int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.m[key]
	if tl == nil || after > tl.last {
		return nil, 0, false
	}
	first := tl.last + 1
	if len(tl.evs) > 0 {
		first = tl.evs[0].Seq
	}
	if after < first-1 {
		return nil, 0, false
	}
	i := int(after - first + 1)
	n := min(len(tl.evs)-i, max(limit, 0))
	out = make([]rein.Event, n)
	for k := range n {
		e := tl.evs[i+k]
		e.Payload = bytes.Clone(e.Payload)
		out[k] = e
	}
	return out, tl.last, true
}

// lastSeq is key's last committed seq if a tail knows it.
func (t *tails) lastSeq(key rein.SessionKey) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil {
		return tl.last, true
	}
	return 0, false
}
