package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// CreateRun implements store.Tx.
func (t *tx) CreateRun(r *store.RunRecord) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := checkRun(r); err != nil {
		return err
	}
	if err := t.mine(r.Owner, r.SessionID, "run"); err != nil {
		return err
	}
	ss := t.ss
	if _, dup := t.s.runIDs[r.ID]; dup {
		return rein.Errorf(rein.CodeConflict, "run %q already exists", r.ID)
	}
	if r.ClientID != "" {
		if _, dup := ss.runsByClient[r.ClientID]; dup {
			return rein.Errorf(rein.CodeConflict, "a run with client id %q already exists in the session", r.ClientID)
		}
	}
	rec := cloneRun(r)
	normRun(rec)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t.now
	}
	ss.runs[rec.ID] = rec
	t.s.runIDs[rec.ID] = t.key
	if rec.ClientID != "" {
		ss.runsByClient[rec.ClientID] = rec.ID
	}
	t.onUndo(func() {
		delete(ss.runs, rec.ID)
		delete(t.s.runIDs, rec.ID)
		if rec.ClientID != "" {
			delete(ss.runsByClient, rec.ClientID)
		}
	})
	t.reindexEnd(rec, time.Time{})
	*r = *cloneRun(rec)
	return nil
}

func checkRun(r *store.RunRecord) error {
	if r.ID == "" {
		return rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return rein.InvalidArgument("status", "run status %q is not valid", r.Status)
	}
	return nil
}

func normRun(r *store.RunRecord) {
	r.Deadline = norm(r.Deadline)
	r.CreatedAt = norm(r.CreatedAt)
	r.StartedAt = norm(r.StartedAt)
	r.EndedAt = norm(r.EndedAt)
}

// UpdateRun implements store.Tx. It returns the stored record with the
// conflict of a terminal run.
func (t *tx) UpdateRun(runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if err := checkRunUpdate(u); err != nil {
		return nil, err
	}
	rec := t.ss.runs[runID]
	if rec == nil {
		return nil, notFound("run")
	}
	if rec.Status.Terminal() {
		return cloneRun(rec), rein.Errorf(rein.CodeConflict, "run %q has already ended (%s)", runID, rec.Status)
	}
	if u.Input != "" && rec.Status != rein.StatusQueued {
		return cloneRun(rec), rein.Errorf(rein.CodeConflict, "run %q is no longer queued (%s): its input cannot change", runID, rec.Status)
	}
	old := *rec
	u.Apply(rec, norm)
	t.onUndo(func() { *rec = old })
	t.reindexEnd(rec, old.EndedAt)
	return cloneRun(rec), nil
}

// endedRun is an entry of the store's end-time index.
type endedRun struct {
	at  time.Time
	id  string
	key rein.SessionKey
}

func compareEnded(a, b endedRun) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// reindexEnd moves rec in the end-time index from was (zero: not in it) to
// its EndedAt (zero: out of it), with the undo of the move.
func (t *tx) reindexEnd(rec *store.RunRecord, was time.Time) {
	if rec.EndedAt.Equal(was) {
		return
	}
	s, key := t.s, t.key
	from, to := endedRun{was, rec.ID, key}, endedRun{rec.EndedAt, rec.ID, key}
	if !was.IsZero() {
		s.unindexEnd(from)
	}
	if !to.at.IsZero() {
		s.indexEnd(to)
	}
	t.onUndo(func() {
		if !to.at.IsZero() {
			s.unindexEnd(to)
		}
		if !was.IsZero() {
			s.indexEnd(from)
		}
	})
}

func (s *Store) indexEnd(e endedRun) {
	i, _ := slices.BinarySearchFunc(s.ended, e, compareEnded)
	s.ended = slices.Insert(s.ended, i, e)
}

func (s *Store) unindexEnd(e endedRun) {
	if i, found := slices.BinarySearchFunc(s.ended, e, compareEnded); found {
		s.ended = slices.Delete(s.ended, i, i+1)
	}
}

// ListEndedSince implements store.Runs: a binary search of the end-time
// index, then one entry per run returned.
func (s *Store) ListEndedSince(ctx context.Context, since time.Time) ([]*store.RunRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(s.ended, endedRun{at: norm(since)}, compareEnded)
	out := make([]*store.RunRecord, 0, len(s.ended)-i)
	for _, e := range s.ended[i:] {
		out = append(out, cloneRun(s.sessions[e.key].runs[e.id]))
	}
	return out, nil
}

func checkRunUpdate(u store.RunUpdate) error {
	if u.Status != "" && !u.Status.Valid() {
		return rein.InvalidArgument("status", "run status %q is not valid", u.Status)
	}
	return nil
}

// GetRun implements store.Runs.
func (s *Store) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	return ss.getRun(runID)
}

// GetRun implements store.Tx.
func (t *tx) GetRun(runID string) (*store.RunRecord, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.ss.getRun(runID)
}

func (ss *session) getRun(runID string) (*store.RunRecord, error) {
	rec := ss.runs[runID]
	if rec == nil {
		return nil, notFound("run")
	}
	return cloneRun(rec), nil
}

// GetRunByClientID implements store.Runs.
func (s *Store) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	return ss.getRunByClientID(clientID)
}

// GetRunByClientID implements store.Tx.
func (t *tx) GetRunByClientID(clientID string) (*store.RunRecord, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.ss.getRunByClientID(clientID)
}

func (ss *session) getRunByClientID(clientID string) (*store.RunRecord, error) {
	runID, found := ss.runsByClient[clientID]
	if !found || clientID == "" {
		return nil, notFound("run")
	}
	return cloneRun(ss.runs[runID]), nil
}

// Runs implements store.Tx.
func (t *tx) Runs(statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	out := []*store.RunRecord{}
	for _, r := range t.ss.runs {
		if len(statuses) == 0 || slices.Contains(statuses, r.Status) {
			out = append(out, cloneRun(r))
		}
	}
	slices.SortFunc(out, func(a, b *store.RunRecord) int {
		if c := cmp.Compare(a.QueueOrder, b.QueueOrder); c != 0 {
			return c
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func newestFirst(a, b *store.RunRecord) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

// ListRuns implements store.Runs.
func (s *Store) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	out := make([]*store.RunRecord, 0, len(ss.runs))
	for _, r := range ss.runs {
		out = append(out, cloneRun(r))
	}
	slices.SortFunc(out, newestFirst)
	return out, nil
}

// ListRunsByStatus implements store.Runs.
func (s *Store) ListRunsByStatus(ctx context.Context, statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.RunRecord{}
	for _, ss := range s.sessions {
		for _, r := range ss.runs {
			if slices.Contains(statuses, r.Status) {
				out = append(out, cloneRun(r))
			}
		}
	}
	slices.SortFunc(out, func(a, b *store.RunRecord) int { return newestFirst(b, a) })
	return out, nil
}
