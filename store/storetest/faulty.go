package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Faulty wraps a store to break it at a chosen write, for crash-window
// tests (DESIGN.md rule 5: every crash window has a test). Writes are
// counted from 1 in the order they reach the wrapper; reads always pass.
//
// At the chosen write the wrapper either fails that one write (FailAt: it
// is not applied, later writes go through), or "crashes" (CrashAt): from
// that write on, nothing reaches the store, as if the process using it had
// died — with afterCommit the crashing write itself is applied first and
// only its answer is lost, the window a real crash between commit and
// reply leaves. A test then starts a new service on the wrapped store (the
// restart) and checks what recovery made of it.
type Faulty struct {
	store.Store

	mu          sync.Mutex
	n           int  // writes seen
	at          int  // the write to break (0: none)
	crash       bool // from at on, every write fails
	afterCommit bool
	crashed     bool
	dead        chan struct{} // closed when the crash happens
}

// NewFaulty wraps s; it breaks nothing until FailAt or CrashAt.
func NewFaulty(s store.Store) *Faulty {
	return &Faulty{Store: s, dead: make(chan struct{})}
}

// FailAt makes the nth write from now fail without being applied.
func (f *Faulty) FailAt(n int) {
	f.mu.Lock()
	f.at, f.crash, f.n = n, false, 0
	f.mu.Unlock()
}

// CrashAt makes the nth write from now, and every later one, fail; with
// afterCommit the nth write is applied before its caller is told it
// failed.
func (f *Faulty) CrashAt(n int, afterCommit bool) {
	f.mu.Lock()
	f.at, f.crash, f.afterCommit, f.n = n, true, afterCommit, 0
	f.mu.Unlock()
}

// Kill crashes the wrapper now: no later write reaches the store.
func (f *Faulty) Kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.crashed {
		f.crashed = true
		close(f.dead)
	}
}

// Writes reports how many writes the wrapper has seen since the last
// FailAt or CrashAt (or since it was made).
func (f *Faulty) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// Crashed is closed once a crash has happened.
func (f *Faulty) Crashed() <-chan struct{} { return f.dead }

// errInjected is what a broken write returns: the store looks unreachable.
var errInjected = rein.Errorf(rein.CodeUnavailable, "storetest: injected store failure")

// write decides the fate of one write: apply it (and then fail it, for an
// after-commit crash) or fail it unapplied.
func (f *Faulty) write(apply func() error) error {
	f.mu.Lock()
	if f.crashed {
		f.mu.Unlock()
		return errInjected
	}
	f.n++
	hit := f.at > 0 && f.n == f.at
	if !hit {
		f.mu.Unlock()
		return apply()
	}
	if !f.crash {
		f.mu.Unlock()
		return errInjected
	}
	f.crashed = true
	after := f.afterCommit
	close(f.dead) // crashed was false, so dead is still open
	f.mu.Unlock()
	if after {
		_ = apply()
	}
	return errInjected
}

// Update implements store.Updater.
func (f *Faulty) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	return f.write(func() error { return f.Store.Update(ctx, key, fence, fn) })
}

// CreateSession implements store.Sessions.
func (f *Faulty) CreateSession(ctx context.Context, s *store.Session) error {
	return f.write(func() error { return f.Store.CreateSession(ctx, s) })
}

// CreateSessionOnce implements store.Sessions.
func (f *Faulty) CreateSessionOnce(ctx context.Context, s *store.Session) (*store.Session, bool, error) {
	var (
		out     *store.Session
		created bool
	)
	err := f.write(func() error {
		var err error
		out, created, err = f.Store.CreateSessionOnce(ctx, s)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// AppendEvents implements store.EventLog.
func (f *Faulty) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	var out []rein.Event
	err := f.write(func() error {
		var err error
		out, err = f.Store.AppendEvents(ctx, key, fence, evs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RenewLease implements store.Leases.
func (f *Faulty) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	var out *store.Lease
	err := f.write(func() error {
		var err error
		out, err = f.Store.RenewLease(ctx, l, ttl)
		return err
	})
	return out, err
}

// DeleteSession implements store.Deleter.
func (f *Faulty) DeleteSession(ctx context.Context, key rein.SessionKey, check func(now time.Time, tree []*store.TreeSession) error) ([]*store.Session, error) {
	var out []*store.Session
	err := f.write(func() error {
		var err error
		out, err = f.Store.DeleteSession(ctx, key, check)
		return err
	})
	return out, err
}

// Close does not close the wrapped store: a test restarts services on it.
func (f *Faulty) Close() error { return nil }

// Exclusive passes the wrapped store's capability through.
func (f *Faulty) Exclusive() bool {
	e, ok := f.Store.(store.Exclusive)
	return ok && e.Exclusive()
}
