// Package inbox is how a note typed while a run works ("by the way, use
// metric units") reaches that run's very next model request (docs/api.md).
//
// A supplement is pushed into the inbox of an (owner, session), read at the
// start of each agent step and put into that same step's request as a
// clearly marked hint message, and consumed exactly once, with the run and
// step that consumed it recorded. The durable inbox lives in the store
// (store.Inbox); this package adds the agent's view of it (bound to one
// session), an in-memory inbox for library use without a store, and the
// rendering of a supplement into a transcript message.
package inbox

import (
	"context"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// Sources label where a supplement came from. They are labels, never
// identity or authority.
const (
	SourceUser     = "user"
	SourceParent   = "parent"
	SourceSubagent = "subagent"
)

// Session is one session's inbox as the agent loop sees it.
type Session interface {
	// Consume takes every queued supplement, marks it consumed by
	// (runID, step) and returns them in push order. Each supplement is
	// returned by exactly one Consume.
	Consume(ctx context.Context, runID string, step int) ([]*store.Supplement, error)
	// Pending reports how many supplements are queued.
	Pending(ctx context.Context) (int, error)
}

// Store is what FromStore needs of a store: its inbox reads, and Update,
// the one way a store is written.
type Store interface {
	store.Inbox
	store.Updater
}

// FromStore binds a store's inbox to one session.
func FromStore(s Store, key rein.SessionKey) Session { return storeSession{s: s, key: key} }

type storeSession struct {
	s   Store
	key rein.SessionKey
}

// Consume takes the queued supplements in one Update, which serialises
// with every other write to the session: of concurrent consumers, each
// supplement goes to exactly one.
func (b storeSession) Consume(ctx context.Context, runID string, step int) ([]*store.Supplement, error) {
	var out []*store.Supplement
	err := b.s.Update(ctx, b.key, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, err = store.ConsumeQueued(tx, runID, step)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (b storeSession) Pending(ctx context.Context) (int, error) {
	return b.s.PendingSupplements(ctx, b.key)
}

// Message renders a consumed supplement as the hint message that carries it
// in a model request.
func Message(s *store.Supplement) rein.Message {
	return rein.Message{
		Role:  rein.RoleUser,
		Text:  s.Text,
		Hint:  &rein.Hint{ID: s.ID, Source: s.Source},
		RunID: s.RunID,
		Step:  s.Step,
	}
}

// Memory is an in-memory inbox for any number of sessions, for library use
// without a store (and for tests). Push is idempotent by id; Consume is
// exactly once. The zero value is not usable; call NewMemory.
type Memory struct {
	clock rein.Clock

	mu      sync.Mutex
	entries map[rein.SessionKey][]*store.Supplement
}

// NewMemory returns an empty in-memory inbox.
func NewMemory(clock rein.Clock) *Memory {
	return &Memory{clock: clock, entries: map[rein.SessionKey][]*store.Supplement{}}
}

// Push queues a supplement for key. An empty id gets a fresh one; a repeat
// of an id already pushed stores nothing and returns the first one with
// created false.
func (m *Memory) Push(key rein.SessionKey, sid, text, source string) (sup store.Supplement, created bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sid == "" {
		sid = id.New(id.Supplement)
	}
	for _, s := range m.entries[key] {
		if s.ID == sid {
			return *s, false
		}
	}
	s := &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: sid, Text: text, Source: source,
		Status: store.SupplementQueued, CreatedAt: m.clock.Now().Truncate(time.Microsecond)}
	m.entries[key] = append(m.entries[key], s)
	return *s, true
}

// Get returns a copy of a supplement.
func (m *Memory) Get(key rein.SessionKey, sid string) (store.Supplement, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.entries[key] {
		if s.ID == sid {
			return *s, true
		}
	}
	return store.Supplement{}, false
}

// Session binds the inbox to one session.
func (m *Memory) Session(key rein.SessionKey) Session { return memSession{m: m, key: key} }

type memSession struct {
	m   *Memory
	key rein.SessionKey
}

func (b memSession) Consume(ctx context.Context, runID string, step int) ([]*store.Supplement, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	out := []*store.Supplement{}
	now := b.m.clock.Now().Truncate(time.Microsecond)
	for _, s := range b.m.entries[b.key] {
		if s.Status != store.SupplementQueued {
			continue
		}
		s.Status, s.RunID, s.Step, s.ConsumedAt = store.SupplementConsumed, runID, step, now
		c := *s
		out = append(out, &c)
	}
	return out, nil
}

func (b memSession) Pending(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	n := 0
	for _, s := range b.m.entries[b.key] {
		if s.Status == store.SupplementQueued {
			n++
		}
	}
	return n, nil
}
