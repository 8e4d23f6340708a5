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
//
// Every write to a session, an append or an Update, runs as a transaction
// under the store's one lock with an undo log (update.go): an append and
// the store.Tx of an Update share one implementation, so they cannot drift
// apart.
package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
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
	// (a consume, a fenced append, an Update) that one lock gives for free.
	mu        sync.Mutex
	closed    bool
	closedCh  chan struct{}
	sessions  map[rein.SessionKey]*session
	runIDs    map[string]rein.SessionKey // run id → session: run ids are global
	nextToken int64                      // fencing tokens, shared by every session
	nextOrder int64                      // insertion order of sessions, for children
	// ended is every run with an EndedAt, ordered by (EndedAt, ID): the
	// index ListEndedSince searches, as the databases' runs_by_end.
	ended []endedRun
	// ob is the webhook outbox (outbox.go), nil until first used.
	ob *outbox
}

type session struct {
	rec   store.Session
	order int64

	history []rein.Message

	events []rein.Event
	// wake is closed whenever a write that appended events commits, so
	// WaitEvents blocks on a channel instead of polling. It exists only
	// while someone waits: an append nobody waits for makes no channel.
	wake chan struct{}

	runs         map[string]*store.RunRecord
	runsByClient map[string]string // client id → run id
	// stops are the remembered stops by client id (nil until the first).
	stops         map[string]*store.RememberedStop
	supplements   map[string]*store.Supplement
	supplementIDs []string // push order
	confirmations map[string]*store.Confirmation
	confirmIDs    []string // creation order

	lease *store.Lease
}

// Immediate implements store.Immediate: every write completes in memory.
func (s *Store) Immediate() bool { return true }

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
	return &rein.Error{Code: rein.CodeConflict, Message: "turn lease lost: the session's lease is no longer this one", Err: rein.ErrLeaseLost}
}

// errBusy reports a live lease. Only the run id: which instance holds the
// turn is never revealed (docs/api.md).
func errBusy(runID string) error {
	return &rein.Error{Code: rein.CodeSessionBusy, Message: "the session's turn is held by a run whose lease has not expired", RunID: runID}
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

// jsonOrEmpty validates client JSON and defaults nil to {}: the
// database backends keep it in JSON columns, so the reference must refuse
// what they would refuse.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !jsonx.Valid(b) {
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return bytes.Clone(b), nil
}

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

// wakeWaiters wakes every WaitEvents caller of the session. Called with the
// store lock held.
func (ss *session) wakeWaiters() {
	if ss.wake != nil {
		close(ss.wake)
		ss.wake = nil
	}
}
