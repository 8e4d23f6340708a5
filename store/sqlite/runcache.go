package sqlite

import (
	"cmp"
	"slices"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Every admission and every end of a run asks for the session's runs that
// have not ended (who holds the turn, who waits), an end reads its run and
// an update reads the run it changes: under load these reads were most of
// the writer's statements after the inserts themselves. The writer is the
// file's only writer and makes every change to a run, so once it has read
// a session's unended runs it keeps them on the session's cache entry and
// follows each creation and update. The entry is touched before it is
// loaded or changed, so an operation that is rolled back takes its changes
// and what it read of its own writes back with it; a failed batch drops the
// whole cache.

// unended are the statuses of runs the cache keeps.
var unended = []rein.RunStatus{rein.StatusCreated, rein.StatusQueued, rein.StatusRunning}

// activeRuns are si's unended runs, in queue order, loaded once. The
// records are the cache's: callers copy what they hand on.
func (tx *wtx) activeRuns(si *sessInfo) ([]*store.RunRecord, error) {
	if si.activeKnown {
		return si.active, nil
	}
	list, err := tx.runsFromDB(si, unended)
	if err != nil {
		return nil, err
	}
	tx.touch(si)
	si.active, si.activeKnown = list, true
	return list, nil
}

// cachedRun is runID's record, a copy, if the cache knows it: ok false
// means the run has ended (or never existed) and the database must say.
func (tx *wtx) cachedRun(si *sessInfo, runID string) (*store.RunRecord, bool, error) {
	active, err := tx.activeRuns(si)
	if err != nil {
		return nil, false, err
	}
	for _, r := range active {
		if r.ID == runID {
			c := *r
			return &c, true, nil
		}
	}
	return nil, false, nil
}

// cachedRuns answers Runs(statuses) from the cache when every status asked
// for is one it keeps.
func (tx *wtx) cachedRuns(si *sessInfo, statuses []rein.RunStatus) ([]*store.RunRecord, bool, error) {
	if len(statuses) == 0 {
		return nil, false, nil
	}
	for _, st := range statuses {
		if !slices.Contains(unended, st) {
			return nil, false, nil
		}
	}
	active, err := tx.activeRuns(si)
	if err != nil {
		return nil, false, err
	}
	out := make([]*store.RunRecord, 0, len(active))
	for _, r := range active {
		if slices.Contains(statuses, r.Status) {
			c := *r
			out = append(out, &c)
		}
	}
	return out, true, nil
}

// runWritten follows a creation or an update of rec, now stored.
func (tx *wtx) runWritten(si *sessInfo, rec *store.RunRecord) {
	if !si.activeKnown {
		return
	}
	tx.touch(si)
	next := make([]*store.RunRecord, 0, len(si.active)+1)
	for _, r := range si.active {
		if r.ID != rec.ID {
			next = append(next, r)
		}
	}
	if !rec.Status.Terminal() {
		c := *rec
		next = append(next, &c)
	}
	// The database's order: queue order, then creation, then id.
	slices.SortFunc(next, func(a, b *store.RunRecord) int {
		return cmp.Or(cmp.Compare(a.QueueOrder, b.QueueOrder), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	si.active = next
}
