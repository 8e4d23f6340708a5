// Package memory is a complete store.Store kept in process memory.
//
// It exists for tests, the offline demo and as the executable reference of
// the store contract: it is the simplest backend that passes storetest, so
// when a database backend disagrees with it, the question is which one
// misreads store.go, not which one has a bug in its SQL. Nothing survives
// the process; one Store is not shared between processes.
//
// Every value is copied on the way in and on the way out, so a caller can
// never change stored state through a pointer it holds, and every time is
// kept in UTC truncated to microseconds, like the database backends.
package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from c: CreatedAt defaults,
// lease expiry, consumption and resolution times. Tests pass a clock they
// can move; nil means the wall clock.
func WithClock(c rein.Clock) Option { return func(s *Store) { s.clock = c } }

// Store is the in-memory backend. Create it with New; it is safe for
// concurrent use.
type Store struct {
	store.FlushRegistry

	clock rein.Clock

	// One mutex guards everything: operations are map lookups, so a finer
	// scheme would buy nothing measurable and cost obvious atomicity
	// (a consume, a fenced append) that one lock gives for free.
	mu        sync.Mutex
	closed    bool
	closedCh  chan struct{}
	sessions  map[rein.SessionKey]*session
	runIDs    map[string]rein.SessionKey // run id → session: run ids are global
	nextToken int64                      // fencing tokens, shared by every session
	nextOrder int64                      // insertion order of sessions, for children
}

type session struct {
	rec   store.Session
	order int64

	history []rein.Message

	events []rein.Event
	// wake is closed (and replaced) whenever events are appended, so
	// WaitEvents blocks on a channel instead of polling.
	wake chan struct{}

	runs          map[string]*store.RunRecord
	runsByClient  map[string]string // client id → run id
	supplements   map[string]*store.Supplement
	supplementIDs []string // push order
	confirmations map[string]*store.Confirmation
	confirmIDs    []string // creation order

	lease *store.Lease
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		closedCh: make(chan struct{}),
		sessions: map[rein.SessionKey]*session{},
		runIDs:   map[string]rein.SessionKey{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ store.Store = (*Store)(nil)

func (s *Store) now() time.Time { return norm(s.clock.Now()) }

// norm is the time every backend stores: UTC, microsecond precision (what
// SQLite integers and PostgreSQL timestamptz keep), zero kept zero.
func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

var errClosed = rein.Errorf(rein.CodeUnavailable, "store is closed")

// lock takes the store lock after checking ctx and that the store is
// open; every method goes through it so both rules hold everywhere.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

func notFound(what string) error { return rein.Errorf(rein.CodeNotFound, "%s not found", what) }

func errLeaseLost() error {
	return &rein.Error{Code: rein.CodeConflict, Message: "turn lease lost: a newer run holds the session", Err: rein.ErrLeaseLost}
}

// get returns the session for key, or not-found. Another owner's session
// has a different key, so it is missing here by construction.
func (s *Store) get(key rein.SessionKey) (*session, error) {
	ss := s.sessions[key]
	if ss == nil {
		return nil, notFound("session")
	}
	return ss, nil
}

// checkFence implements the fencing rule of store.Fence: a non-zero token
// must be the session's current lease token, expired or not.
func checkFence(ss *session, f store.Fence) error {
	if f.Token == 0 {
		return nil
	}
	if ss.lease == nil || ss.lease.Token != f.Token {
		return errLeaseLost()
	}
	return nil
}

// ------------------------------------------------------------------ helpers

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// jsonOrEmpty validates client JSON and defaults nil to {}: the
// database backends keep it in JSON columns, so the reference must refuse
// what they would refuse.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return bytes.Clone(b), nil
}

func cloneSession(in *store.Session) *store.Session {
	out := *in
	out.Metadata = cloneBytes(in.Metadata)
	if in.System != nil {
		sys := *in.System
		out.System = &sys
	}
	if in.Subagent != nil {
		d := *in.Subagent
		d.ToolFilter = slices.Clone(in.Subagent.ToolFilter)
		out.Subagent = &d
	}
	return &out
}

func cloneMessage(m rein.Message) rein.Message {
	if m.ToolCalls != nil {
		calls := make([]rein.ToolCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			c.Input = cloneBytes(c.Input)
			calls[i] = c
		}
		m.ToolCalls = calls
	}
	if m.Hint != nil {
		h := *m.Hint
		m.Hint = &h
	}
	return m
}

func cloneEvent(e rein.Event) rein.Event {
	e.Payload = cloneBytes(e.Payload)
	return e
}

func cloneRun(r *store.RunRecord) *store.RunRecord { c := *r; return &c }

func cloneSupplement(s *store.Supplement) *store.Supplement { c := *s; return &c }

func cloneConfirmation(c *store.Confirmation) *store.Confirmation {
	out := *c
	out.Input = cloneBytes(c.Input)
	return &out
}

func cloneLease(l *store.Lease) *store.Lease { c := *l; return &c }

// ----------------------------------------------------------------- sessions

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
	key := in.Key()
	if _, exists := s.sessions[key]; exists {
		return rein.Errorf(rein.CodeConflict, "session %q already exists", in.ID)
	}
	if in.ParentID != "" {
		if _, err := s.get(rein.SessionKey{Owner: in.Owner, ID: in.ParentID}); err != nil {
			return notFound("parent session")
		}
	}
	rec := cloneSession(in)
	rec.Metadata = meta
	rec.CreatedAt = norm(in.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	s.nextOrder++
	s.sessions[key] = &session{
		rec:           *rec,
		order:         s.nextOrder,
		wake:          make(chan struct{}),
		runs:          map[string]*store.RunRecord{},
		runsByClient:  map[string]string{},
		supplements:   map[string]*store.Supplement{},
		confirmations: map[string]*store.Confirmation{},
	}
	in.Metadata = bytes.Clone(meta)
	in.CreatedAt = rec.CreatedAt
	return nil
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
	return cloneSession(&ss.rec), nil
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
			out = append(out, cloneSession(&ss.rec))
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
		out = append(out, cloneSession(&k.rec))
	}
	return out, nil
}

// SetSystem implements store.Sessions.
func (s *Store) SetSystem(ctx context.Context, key rein.SessionKey, system *string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return err
	}
	if system == nil {
		ss.rec.System = nil
	} else {
		v := *system
		ss.rec.System = &v
	}
	return nil
}

// ------------------------------------------------------------------ history

// AppendHistory implements store.History.
func (s *Store) AppendHistory(ctx context.Context, key rein.SessionKey, fence store.Fence, msgs []rein.Message) error {
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
	for _, m := range msgs {
		ss.history = append(ss.history, cloneMessage(m))
	}
	return nil
}

// LoadHistory implements store.History.
func (s *Store) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	out := make([]rein.Message, len(ss.history))
	for i, m := range ss.history {
		out[i] = cloneMessage(m)
	}
	return out, nil
}

// ---------------------------------------------------------------- event log

// AppendEvents implements store.EventLog.
func (s *Store) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	// Validate before locking: a bad payload must leave the log untouched.
	payloads := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		p, err := jsonOrEmpty("events["+strconv.Itoa(i)+"].payload", e.Payload)
		if err != nil {
			return nil, err
		}
		payloads[i] = p
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	if err := checkFence(ss, fence); err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]rein.Event, len(evs))
	for i, e := range evs {
		e.Seq = int64(len(ss.events)) + 1
		e.SessionID = key.ID
		if e.ID == "" {
			e.ID = id.New(id.Event)
		}
		e.CreatedAt = norm(e.CreatedAt)
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		e.Payload = payloads[i]
		ss.events = append(ss.events, e)
		out[i] = cloneEvent(e)
	}
	if len(evs) > 0 {
		close(ss.wake)
		ss.wake = make(chan struct{})
	}
	return out, nil
}

// ReadEvents implements store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	if err := s.lock(ctx); err != nil {
		return nil, 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, 0, err
	}
	last := int64(len(ss.events))
	out := []rein.Event{}
	if after < 0 {
		after = 0
	}
	for i := after; i < last && len(out) < limit; i++ {
		out = append(out, cloneEvent(ss.events[i]))
	}
	return out, last, nil
}

// LastSeq implements store.EventLog.
func (s *Store) LastSeq(ctx context.Context, key rein.SessionKey) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return 0, err
	}
	return int64(len(ss.events)), nil
}

// WaitEvents implements store.EventLog. It blocks on the session's wake
// channel, which every append closes; Close wakes it through closedCh.
func (s *Store) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	for {
		if err := s.lock(ctx); err != nil {
			return err
		}
		ss, err := s.get(key)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if int64(len(ss.events)) > after {
			s.mu.Unlock()
			return nil
		}
		wake := ss.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closedCh:
			return errClosed
		}
	}
}

// --------------------------------------------------------------------- runs

// CreateRun implements store.Runs.
func (s *Store) CreateRun(ctx context.Context, r *store.RunRecord) error {
	if r.ID == "" {
		return rein.InvalidArgument("id", "run id is empty")
	}
	if !r.Status.Valid() {
		return rein.InvalidArgument("status", "run status %q is not valid", r.Status)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss, err := s.get(r.Key())
	if err != nil {
		return err
	}
	if _, dup := s.runIDs[r.ID]; dup {
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
		rec.CreatedAt = s.now()
	}
	ss.runs[rec.ID] = rec
	s.runIDs[rec.ID] = r.Key()
	if rec.ClientID != "" {
		ss.runsByClient[rec.ClientID] = rec.ID
	}
	*r = *cloneRun(rec)
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
	if u.Status != "" && !u.Status.Valid() {
		return nil, rein.InvalidArgument("status", "run status %q is not valid", u.Status)
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	if err := checkFence(ss, fence); err != nil {
		return nil, err
	}
	rec := ss.runs[runID]
	if rec == nil {
		return nil, notFound("run")
	}
	if rec.Status.Terminal() {
		return cloneRun(rec), rein.Errorf(rein.CodeConflict, "run %q has already ended (%s)", runID, rec.Status)
	}
	applyRunUpdate(rec, u)
	return cloneRun(rec), nil
}

// applyRunUpdate applies u to r the way store.RunUpdate defines it: zero
// fields leave r unchanged.
func applyRunUpdate(r *store.RunRecord, u store.RunUpdate) {
	if u.Status != "" {
		r.Status = u.Status
	}
	if u.Reason != "" {
		r.Reason = u.Reason
	}
	if u.Error != "" {
		r.Error = u.Error
	}
	if u.QueueOrder != nil {
		r.QueueOrder = *u.QueueOrder
	}
	if u.Instance != "" {
		r.Instance = u.Instance
	}
	if u.Usage != nil {
		r.Usage = *u.Usage
	}
	if !u.StartedAt.IsZero() {
		r.StartedAt = norm(u.StartedAt)
	}
	if !u.EndedAt.IsZero() {
		r.EndedAt = norm(u.EndedAt)
	}
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
	runID, found := ss.runsByClient[clientID]
	if !found || clientID == "" {
		return nil, notFound("run")
	}
	return cloneRun(ss.runs[runID]), nil
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

// -------------------------------------------------------------------- inbox

// PushSupplement implements store.Inbox.
func (s *Store) PushSupplement(ctx context.Context, in *store.Supplement) (*store.Supplement, bool, error) {
	if err := s.lock(ctx); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(rein.SessionKey{Owner: in.Owner, ID: in.SessionID})
	if err != nil {
		return nil, false, err
	}
	if in.ID != "" {
		if prev := ss.supplements[in.ID]; prev != nil {
			return cloneSupplement(prev), false, nil
		}
	}
	rec := cloneSupplement(in)
	if rec.ID == "" {
		rec.ID = id.New(id.Supplement)
	}
	rec.Status = store.SupplementQueued
	rec.RunID, rec.Step, rec.ConsumedAt = "", 0, time.Time{}
	rec.CreatedAt = norm(rec.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	ss.supplements[rec.ID] = rec
	ss.supplementIDs = append(ss.supplementIDs, rec.ID)
	return cloneSupplement(rec), true, nil
}

// ConsumeSupplements implements store.Inbox.
func (s *Store) ConsumeSupplements(ctx context.Context, key rein.SessionKey, runID string, step int) ([]*store.Supplement, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	now := s.now()
	out := []*store.Supplement{}
	for _, supID := range ss.supplementIDs {
		sup := ss.supplements[supID]
		if sup.Status != store.SupplementQueued {
			continue
		}
		sup.Status = store.SupplementConsumed
		sup.RunID, sup.Step, sup.ConsumedAt = runID, step, now
		out = append(out, cloneSupplement(sup))
	}
	return out, nil
}

// PendingSupplements implements store.Inbox.
func (s *Store) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sup := range ss.supplements {
		if sup.Status == store.SupplementQueued {
			n++
		}
	}
	return n, nil
}

// GetSupplement implements store.Inbox.
func (s *Store) GetSupplement(ctx context.Context, key rein.SessionKey, supID string) (*store.Supplement, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	sup := ss.supplements[supID]
	if sup == nil {
		return nil, notFound("supplement")
	}
	return cloneSupplement(sup), nil
}

// ------------------------------------------------------------ confirmations

// CreateConfirmation implements store.Confirmations.
func (s *Store) CreateConfirmation(ctx context.Context, c *store.Confirmation) error {
	if c.ToolUseID == "" {
		return rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss, err := s.get(rein.SessionKey{Owner: c.Owner, ID: c.SessionID})
	if err != nil {
		return err
	}
	if _, dup := ss.confirmations[c.ToolUseID]; dup {
		return rein.Errorf(rein.CodeConflict, "confirmation for tool call %q already exists", c.ToolUseID)
	}
	rec := cloneConfirmation(c)
	rec.State = store.ConfirmationPending
	rec.DenyMessage, rec.ResolvedAt = "", time.Time{}
	rec.CreatedAt = norm(rec.CreatedAt)
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.now()
	}
	ss.confirmations[rec.ToolUseID] = rec
	ss.confirmIDs = append(ss.confirmIDs, rec.ToolUseID)
	*c = *cloneConfirmation(rec)
	return nil
}

// ResolveConfirmation implements store.Confirmations.
func (s *Store) ResolveConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	c := ss.confirmations[toolUseID]
	if c == nil {
		return nil, notFound("confirmation")
	}
	if c.State != store.ConfirmationPending {
		return nil, rein.Errorf(rein.CodeConflict, "confirmation %q is no longer pending (%s)", toolUseID, c.State)
	}
	if allow {
		c.State = store.ConfirmationAllowed
	} else {
		c.State = store.ConfirmationDenied
		c.DenyMessage = denyMessage
	}
	c.ResolvedAt = s.now()
	return cloneConfirmation(c), nil
}

// CloseConfirmations implements store.Confirmations.
func (s *Store) CloseConfirmations(ctx context.Context, key rein.SessionKey, runID string) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return err
	}
	now := s.now()
	for _, c := range ss.confirmations {
		if c.RunID == runID && c.State == store.ConfirmationPending {
			c.State = store.ConfirmationClosed
			c.ResolvedAt = now
		}
	}
	return nil
}

// GetConfirmation implements store.Confirmations.
func (s *Store) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	c := ss.confirmations[toolUseID]
	if c == nil {
		return nil, notFound("confirmation")
	}
	return cloneConfirmation(c), nil
}

// ListConfirmations implements store.Confirmations.
func (s *Store) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	out := []*store.Confirmation{}
	for _, tid := range ss.confirmIDs {
		c := ss.confirmations[tid]
		if state == "" || c.State == state {
			out = append(out, cloneConfirmation(c))
		}
	}
	// confirmIDs is creation order; a caller-supplied CreatedAt may
	// disagree with it, and "oldest first" is about CreatedAt.
	slices.SortStableFunc(out, func(a, b *store.Confirmation) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// ------------------------------------------------------------------- leases

// AcquireLease implements store.Leases.
func (s *Store) AcquireLease(ctx context.Context, key rein.SessionKey, holder, runID string, ttl time.Duration) (*store.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if l := ss.lease; l != nil && l.ExpiresAt.After(now) && l.RunID != runID {
		return nil, &rein.Error{Code: rein.CodeSessionBusy, Message: "the session's turn is held by another run", RunID: l.RunID}
	}
	s.nextToken++
	ss.lease = &store.Lease{
		Owner: key.Owner, SessionID: key.ID, RunID: runID, Holder: holder,
		Token: s.nextToken, ExpiresAt: norm(now.Add(ttl)),
	}
	return cloneLease(ss.lease), nil
}

// RenewLease implements store.Leases.
func (s *Store) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(l.Key())
	if err != nil {
		return nil, err
	}
	if ss.lease == nil || ss.lease.Token != l.Token {
		return nil, errLeaseLost()
	}
	ss.lease.ExpiresAt = norm(s.now().Add(ttl))
	return cloneLease(ss.lease), nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, l *store.Lease) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	ss := s.sessions[l.Key()]
	if ss != nil && ss.lease != nil && ss.lease.Token == l.Token {
		ss.lease = nil
	}
	return nil
}

// GetLease implements store.Leases.
func (s *Store) GetLease(ctx context.Context, key rein.SessionKey) (*store.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	if ss.lease == nil {
		return nil, notFound("lease")
	}
	return cloneLease(ss.lease), nil
}

// ListExpiredLeases implements store.Leases.
func (s *Store) ListExpiredLeases(ctx context.Context, now time.Time) ([]*store.Lease, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := []*store.Lease{}
	for _, ss := range s.sessions {
		if ss.lease != nil && ss.lease.ExpiresAt.Before(now) {
			out = append(out, cloneLease(ss.lease))
		}
	}
	slices.SortFunc(out, func(a, b *store.Lease) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	return out, nil
}

// -------------------------------------------------------------------- admin

// Ping implements store.Store: an open memory store is always reachable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Close implements store.Store. It wakes every WaitEvents caller; later
// calls fail as unavailable. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.closedCh)
	}
	return nil
}
