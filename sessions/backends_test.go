package sessions_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/postgres"
	"github.com/reinhq/rein/store/sqlite"
)

// opener makes a fresh, empty store for one test; the test's cleanup closes
// it and removes what it left.
type opener func(t *testing.T) store.Store

// clockedOpener is an opener whose store reads the time from clock (nil:
// the store's own clock).
type clockedOpener func(t *testing.T, clock rein.Clock) store.Store

var schemaSeq atomic.Int64

// onBackends runs scenario once on each backend, the backends side by
// side: each run has its own store (a PostgreSQL one in its own schema),
// so nothing but the process is shared between them.
func onBackends(t *testing.T, scenario func(t *testing.T, open opener)) {
	eachBackend(t, true, func(t *testing.T, open clockedOpener) {
		scenario(t, func(t *testing.T) store.Store { return open(t, nil) })
	})
}

// onBackendsSerially is onBackends one backend at a time, for a scenario
// that must have the process to itself (one that snapshots its goroutines).
func onBackendsSerially(t *testing.T, scenario func(t *testing.T, open opener)) {
	eachBackend(t, false, func(t *testing.T, open clockedOpener) {
		scenario(t, func(t *testing.T) store.Store { return open(t, nil) })
	})
}

// onClockedBackends is onBackends for scenarios that tell the stores'
// time: those that jump it past a lost instance's leases, or past a
// retention period, instead of waiting for them.
func onClockedBackends(t *testing.T, scenario func(t *testing.T, open clockedOpener)) {
	eachBackend(t, true, scenario)
}

func eachBackend(t *testing.T, parallel bool, scenario func(t *testing.T, open clockedOpener)) {
	mark := func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
	}
	t.Run("memory", func(t *testing.T) {
		mark(t)
		scenario(t, func(t *testing.T, clock rein.Clock) store.Store {
			st := memory.New(memory.WithClock(clock))
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		mark(t)
		scenario(t, func(t *testing.T, clock rein.Clock) store.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rein.db"), sqlite.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
	t.Run("postgres", func(t *testing.T) {
		mark(t)
		dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("REIN_TEST_POSTGRES_DSN not set")
		}
		scenario(t, func(t *testing.T, clock rein.Clock) store.Store {
			return openPostgresClocked(t, dsn, clock)
		})
	})
}

// openPostgres opens a PostgreSQL store in a fresh schema that tb's cleanup
// drops.
func openPostgres(tb testing.TB, dsn string) store.Store { return openPostgresClocked(tb, dsn, nil) }

func openPostgresClocked(tb testing.TB, dsn string, clock rein.Clock) store.Store {
	schema := fmt.Sprintf("sessions_test_%d_%d", time.Now().UnixNano(), schemaSeq.Add(1))
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		st.Close()
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return st
}

// shiftClock is the wall clock moved forward by what the test says: the
// service and the store read it, so "two hours later" is one call while
// everything else (leases renewing, tools sleeping) runs in real time.
type shiftClock struct{ by atomic.Int64 }

func (c *shiftClock) now() time.Time          { return time.Now().Add(time.Duration(c.by.Load())) }
func (c *shiftClock) advance(d time.Duration) { c.by.Add(int64(d)) }
