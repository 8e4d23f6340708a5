package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// CreateSession implements store.Sessions.
func (s *Store) CreateSession(ctx context.Context, in *store.Session) error {
	if in.ID == "" {
		return rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", in.Metadata)
	if err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.create(in, meta)
}

// create stores in (its metadata validated as meta) under the store lock.
func (s *Store) create(in *store.Session, meta json.RawMessage) error {
	key := in.Key()
	if _, exists := s.sessions[key]; exists {
		return rein.Errorf(rein.CodeConflict, "session %q already exists", in.ID)
	}
	if in.ParentID != "" {
		if _, err := s.get(rein.SessionKey{Owner: in.Owner, ID: in.ParentID}); err != nil {
			return notFound("parent session")
		}
	}
	rec := in.Clone()
	rec.Metadata = meta
	rec.CreatedAt = norm(in.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	s.nextOrder++
	s.sessions[key] = &session{
		rec:           *rec,
		order:         s.nextOrder,
		runs:          map[string]*store.RunRecord{},
		runsByClient:  map[string]string{},
		supplements:   map[string]*store.Supplement{},
		confirmations: map[string]*store.Confirmation{},
	}
	in.Metadata = bytes.Clone(meta)
	in.CreatedAt = rec.CreatedAt
	return nil
}

// CreateSessionOnce implements store.Sessions: the store lock makes the
// look-up and the creation one step.
func (s *Store) CreateSessionOnce(ctx context.Context, in *store.Session) (*store.Session, bool, error) {
	if in.ID == "" {
		return nil, false, rein.InvalidArgument("id", "session id is empty")
	}
	meta, err := jsonOrEmpty("metadata", in.Metadata)
	if err != nil {
		return nil, false, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	if ss := s.sessions[in.Key()]; ss != nil {
		return ss.rec.Clone(), false, nil
	}
	for k := range s.sessions {
		if k.ID == in.ID {
			return nil, false, errIDTaken()
		}
	}
	if err := s.create(in, meta); err != nil {
		return nil, false, err
	}
	return in, true, nil
}

// errIDTaken refuses an id another owner has, saying nothing about them.
func errIDTaken() error {
	return rein.Errorf(rein.CodeConflict, "this session id is taken: choose another")
}

// ListSessionSummaries implements store.Sessions.
func (s *Store) ListSessionSummaries(ctx context.Context, owner string, page store.SessionPage) ([]*store.SessionSummary, error) {
	list, err := s.ListSessions(ctx, owner)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.SessionSummary{}
	for _, sess := range list {
		if !page.After.IsZero() && !store.OlderThan(sess, page.After) {
			continue
		}
		if page.Limit > 0 && len(out) == page.Limit {
			break
		}
		ss := s.sessions[sess.Key()]
		if ss == nil {
			continue // deleted in between
		}
		sum := &store.SessionSummary{Session: ss.rec.Clone()}
		for _, r := range ss.runs {
			if r.Status == rein.StatusRunning || r.Status == rein.StatusQueued {
				sum.Busy = true
				break
			}
		}
		for _, c := range ss.confirmations {
			if c.State == store.ConfirmationPending {
				sum.PendingConfirmations++
			}
		}
		if n := len(ss.events); n > 0 {
			sum.LastEventAt = ss.events[n-1].CreatedAt
		}
		out = append(out, sum)
	}
	return out, nil
}

// GetSession implements store.Sessions.
func (s *Store) GetSession(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	return ss.rec.Clone(), nil
}

// ListSessions implements store.Sessions.
func (s *Store) ListSessions(ctx context.Context, owner string) ([]*store.Session, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.Session{}
	for key, ss := range s.sessions {
		if key.Owner == owner {
			out = append(out, ss.rec.Clone())
		}
	}
	slices.SortFunc(out, func(a, b *store.Session) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

// SessionIDInUse implements store.Sessions.
func (s *Store) SessionIDInUse(ctx context.Context, id string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	for k := range s.sessions {
		if k.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// ListChildren implements store.Sessions.
func (s *Store) ListChildren(ctx context.Context, key rein.SessionKey) ([]*store.Session, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var kids []*session
	for k, ss := range s.sessions {
		if k.Owner == key.Owner && ss.rec.ParentID == key.ID {
			kids = append(kids, ss)
		}
	}
	// Creation order: by CreatedAt, then by the order CreateSession ran,
	// which is what a database's insertion sequence gives.
	slices.SortFunc(kids, func(a, b *session) int {
		if c := a.rec.CreatedAt.Compare(b.rec.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	out := make([]*store.Session, 0, len(kids))
	for _, k := range kids {
		out = append(out, k.rec.Clone())
	}
	return out, nil
}

// SetSystem implements store.Tx.
func (t *tx) SetSystem(system *string) error {
	if err := t.check(); err != nil {
		return err
	}
	rec := &t.ss.rec
	old := rec.System
	if system == nil {
		rec.System = nil
	} else {
		v := *system
		rec.System = &v
	}
	t.onUndo(func() { rec.System = old })
	return nil
}

// UpdateSession implements store.Tx.
func (t *tx) UpdateSession(u store.SessionUpdate) (*store.Session, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	rec := &t.ss.rec
	if u.Metadata != nil {
		meta, err := jsonOrEmpty("metadata", u.Metadata)
		if err != nil {
			return nil, err
		}
		old := rec.Metadata
		t.onUndo(func() { rec.Metadata = old })
		rec.Metadata = meta
	}
	if u.Title != nil {
		t.setTitle(*u.Title)
	}
	if u.SetBudget {
		old := rec.Budget
		t.onUndo(func() { rec.Budget = old })
		rec.Budget = nil
		if u.Budget != nil {
			b := *u.Budget
			rec.Budget = &b
		}
	}
	return rec.Clone(), nil
}

// Budget implements store.Tx.
func (t *tx) Budget() (*rein.Budget, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if b := t.ss.rec.Budget; b != nil {
		c := *b
		return &c, nil
	}
	return nil, nil
}

// SetDefaultTitle implements store.Tx.
func (t *tx) SetDefaultTitle(title string) error {
	if err := t.check(); err != nil {
		return err
	}
	if t.ss.rec.Title == nil {
		t.setTitle(title)
	}
	return nil
}

func (t *tx) setTitle(title string) {
	rec := &t.ss.rec
	old := rec.Title
	t.onUndo(func() { rec.Title = old })
	rec.Title = &title
}

// RememberStop implements store.Tx.
func (t *tx) RememberStop(st *store.RememberedStop) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := t.mine(st.Owner, st.SessionID, "remembered stop"); err != nil {
		return err
	}
	if st.ClientID == "" {
		return rein.InvalidArgument("client_id", "a remembered stop needs a client id")
	}
	ss := t.ss
	if ss.stops == nil {
		ss.stops = map[string]*store.RememberedStop{}
	}
	rec := *st
	rec.CreatedAt = norm(rec.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = t.now
	}
	old, had := ss.stops[st.ClientID]
	t.onUndo(func() {
		if had {
			ss.stops[st.ClientID] = old
		} else {
			delete(ss.stops, st.ClientID)
		}
	})
	ss.stops[st.ClientID] = &rec
	return nil
}

// RememberedStop implements store.Tx.
func (t *tx) RememberedStop(clientID string) (*store.RememberedStop, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	st := t.ss.stops[clientID]
	if st == nil {
		return nil, nil
	}
	cp := *st
	return &cp, nil
}

// ForgetStops implements store.Tx.
func (t *tx) ForgetStops(clientID string, before time.Time) error {
	if err := t.check(); err != nil {
		return err
	}
	ss := t.ss
	for id, st := range ss.stops {
		if id == clientID || st.CreatedAt.Before(before) {
			t.onUndo(func() { ss.stops[id] = st })
			delete(ss.stops, id)
		}
	}
	return nil
}
