// Package storetest is the conformance suite every store.Store backend
// passes: memory, SQLite and PostgreSQL alike (DESIGN rule 5).
//
// It exists so that "the store contract" is one executable thing rather
// than three readings of store/store.go. Each MUST in store.go has a test
// here; a backend is done when Run is green on it. A backend's test file is
// one call:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(tb testing.TB, clock rein.Clock) store.Store {
//			s := open(tb, clock) // a fresh, empty store
//			tb.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Benchmarks are shared the same way (BenchmarkAppend, BenchmarkReplay),
// so figures for different backends measure the same workload.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Opener returns a fresh, empty store for one test or benchmark, reading
// the time from clock (nil means the wall clock) for every time the store
// itself decides: CreatedAt defaults, lease expiry, consumption and
// resolution times. It registers the store's cleanup (Close, dropping a
// schema, removing files) with tb.Cleanup. Run calls it from parallel
// subtests, so it must be safe for concurrent use. The suite may Close the
// store itself; the cleanup's second Close must not panic.
type Opener func(tb testing.TB, clock rein.Clock) store.Store

// Clock is a manual clock for tests: time stands still until Advance.
// It starts with nanoseconds and outside UTC on purpose, so the suite
// checks that backends normalise what they are given.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Clock returns c as a rein.Clock.
func (c *Clock) Clock() rein.Clock { return c.Now }

// suiteStart is where every test's clock starts: a time with sub-microsecond
// digits, in a non-UTC zone, so normalisation is always exercised.
var suiteStart = time.Date(2031, time.March, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+2", 2*3600))

// T is what a conformance test receives: a fresh store, its clock and a
// context that ends with the test.
type T struct {
	*testing.T
	S     store.Store
	Clock *Clock
	Ctx   context.Context
	seq   atomic.Int64
}

type test struct {
	name string
	fn   func(t *T)
}

// all collects the suite, file by file (sessions.go, events.go, ...).
var all []test

func register(tests ...test) bool { all = append(all, tests...); return true }

// Run runs the whole suite against the backend that open builds, each test
// in its own parallel subtest with its own fresh store and clock.
func Run(t *testing.T, open Opener) {
	t.Helper()
	if len(all) == 0 {
		t.Fatal("storetest: no tests registered")
	}
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := NewClock(suiteStart)
			s := open(t, clock.Clock())
			if s == nil {
				t.Fatal("storetest: open returned a nil store")
			}
			tc.fn(&T{T: t, S: s, Clock: clock, Ctx: t.Context()})
		})
	}
}

// now is the clock's time as a backend stores it.
func (t *T) now() time.Time { return t.Clock.Now().UTC().Truncate(time.Microsecond) }

// uniq returns a name unique within the test.
func (t *T) uniq(prefix string) string { return fmt.Sprintf("%s%03d", prefix, t.seq.Add(1)) }

// newSession creates an empty root session of owner and returns its key.
func (t *T) newSession(owner string) rein.SessionKey {
	t.Helper()
	s := &store.Session{Owner: owner, ID: t.uniq("ses_")}
	if err := t.S.CreateSession(t.Ctx, s); err != nil {
		t.Fatalf("CreateSession(%s): %v", s.ID, err)
	}
	return s.Key()
}

// otherOwner returns key as another owner would name it: the same session
// id, which MUST behave exactly like a missing session.
func otherOwner(key rein.SessionKey) rein.SessionKey {
	return rein.SessionKey{Owner: key.Owner + "-intruder", ID: key.ID}
}

// wantErr fails unless errors.Is(err, target).
func wantErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one matching %v", what, err, target)
	}
}

// must fails the test on err.
func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// jsonEqual compares two JSON documents by meaning, not by bytes: a
// database may store JSON in a normalised form (jsonb).
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

// sameTime reports whether got is want as stored: equal instant, UTC.
func sameTime(got, want time.Time) bool {
	if want.IsZero() {
		return got.IsZero()
	}
	return got.Equal(want) && got.Location() == time.UTC
}

func wantTime(t testing.TB, got, want time.Time, what string) {
	t.Helper()
	if !sameTime(got, want) {
		t.Fatalf("%s = %v (%v), want %v in UTC", what, got, got.Location(), want)
	}
}

// parallel runs fn(i) for i in [0, n) on n goroutines started together and
// waits for all of them.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}
