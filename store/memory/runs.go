package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// CreateRun implements store.Runs.
func (s *Store) CreateRun(ctx context.Context, r *store.RunRecord) error {
	// Checked first as well, so a bad record is refused as such even for
	// a missing session.
	if err := checkRun(r); err != nil {
		return err
	}
	return s.update(ctx, r.Key(), store.Fence{}, func(t *tx) error { return t.CreateRun(r) })
}

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

// UpdateRun implements store.Runs.
func (s *Store) UpdateRun(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, u store.RunUpdate) (*store.RunRecord, error) {
	if err := checkRunUpdate(u); err != nil {
		return nil, err
	}
	var out *store.RunRecord
	err := s.update(ctx, key, fence, func(t *tx) error {
		var err error
		out, err = t.UpdateRun(runID, u)
		return err
	})
	if err != nil && !(out != nil && rein.CodeOf(err) == rein.CodeConflict) {
		return nil, err
	}
	return out, err
}

// UpdateRun implements store.Tx. Like Runs.UpdateRun it returns the
// stored record with the conflict of a terminal run.
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
	old := *rec
	u.Apply(rec, norm)
	t.onUndo(func() { *rec = old })
	return cloneRun(rec), nil
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
