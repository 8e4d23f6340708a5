package sqlite

import (
	"slices"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Besides the events, a log tail knows three facts of its session that a
// run reads again and again: the session's record and its history (read at
// the start of every run; a history only while it is short) and how many
// supplements wait in its inbox (asked twice a step).
// Under load the two reads were a fifteenth of the server's CPU, each a
// statement on a read connection for an answer the writer already knew.
// The same reasoning as for the events holds: the store is the file's only
// writer, so the writer learns every change as it commits it. A fact is set
// by the write that makes it (a session's creation: its record and an
// empty inbox) or by a read of the database that no commit raced (tails.gen
// unchanged), kept up to date by the writes that change it (a push, a
// consumption, an append to the history) and forgotten by any it cannot follow (a new system prompt,
// a failed batch, a deleted session, the tail let go).

// sessionFactBase is what a kept record counts against tailsBytes beyond
// its variable parts.
const sessionFactBase = 96

// factsGen is the generation a database read of facts starts at.
func (t *tails) factsGen() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// session is key's record if a tail knows it: a copy of its own.
func (t *tails) session(key rein.SessionKey) (*store.Session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil && tl.sess != nil {
		return tl.sess.Clone(), true
	}
	return nil, false
}

// sessionRead keeps a record just read from the database, unless a change
// was committed since gen (what was read may predate it).
func (t *tails) sessionRead(gen uint64, sess *store.Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[sess.Key()]; tl != nil && tl.sess == nil && t.gen == gen {
		t.setSessionLocked(tl, sess.Clone())
	}
}

func (t *tails) setSessionLocked(tl *tail, sess *store.Session) {
	n := sessionFactBase + len(sess.Owner) + len(sess.ID) + len(sess.ParentID) + len(sess.Metadata) + len(sess.Agent)
	if sess.System != nil {
		n += len(*sess.System)
	}
	if d := sess.Subagent; d != nil {
		n += sessionFactBase + len(d.Agent) + len(d.Label) + len(d.Model) + len(d.System)
		for _, f := range d.ToolFilter {
			n += len(f) + 16
		}
	}
	tl.sess, tl.sessBytes = sess, n
	t.chargeLocked(tl, n)
	t.evictLocked()
}

// restated forgets key's record: a commit changed it.
func (t *tails) restated(key rein.SessionKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if tl := t.m[key]; tl != nil && tl.sess != nil {
		t.chargeLocked(tl, -tl.sessBytes)
		tl.sess, tl.sessBytes = nil, 0
	}
}

// pending is the number of key's queued supplements if a tail knows it.
func (t *tails) pending(key rein.SessionKey) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil && tl.pending >= 0 {
		return tl.pending, true
	}
	return 0, false
}

// pendingRead keeps a count just read from the database, unless a change
// was committed since gen.
func (t *tails) pendingRead(gen uint64, key rein.SessionKey, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil && t.gen == gen {
		tl.pending = n
	}
}

// inboxChanged applies a committed change of key's queued supplements
// (+1 a push, -n a consumption of n).
func (t *tails) inboxChanged(key rein.SessionKey, delta int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if tl := t.m[key]; tl != nil && tl.pending >= 0 {
		if tl.pending += delta; tl.pending < 0 {
			// Cannot happen if every change came through here; if it did,
			// the count is not to be trusted.
			tl.pending = -1
		}
	}
}

// histFactBytes is the longest history (encoded) a tail keeps: a run reads
// its session's history once, so a long one is read from the database
// rather than held by every tail.
const histFactBytes = 16 << 10

// history is key's history as stored (encoded), if a tail knows it.
func (t *tails) history(key rein.SessionKey) ([]string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil && tl.histKnown {
		return slices.Clone(tl.hist), true
	}
	return nil, false
}

// historyRead keeps a history just read from the database, unless a
// change was committed since gen.
func (t *tails) historyRead(gen uint64, key rein.SessionKey, encoded []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.m[key]; tl != nil && !tl.histKnown && t.gen == gen {
		tl.histKnown = true
		t.addHistoryLocked(tl, encoded)
	}
}

// historyAppended follows a committed append to key's history.
func (t *tails) historyAppended(key rein.SessionKey, encoded []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	if tl := t.m[key]; tl != nil && tl.histKnown {
		t.addHistoryLocked(tl, encoded)
	}
}

// addHistoryLocked appends to a known history, or forgets it once it is
// longer than a tail keeps.
func (t *tails) addHistoryLocked(tl *tail, encoded []string) {
	n := 0
	for _, e := range encoded {
		n += len(e)
	}
	if tl.histBytes+n > histFactBytes {
		t.chargeLocked(tl, -tl.histBytes)
		tl.hist, tl.histBytes, tl.histKnown = nil, 0, false
		return
	}
	tl.hist = append(tl.hist, encoded...)
	tl.histBytes += n
	t.chargeLocked(tl, n)
	t.evictLocked()
}
