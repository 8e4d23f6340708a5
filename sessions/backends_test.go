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

	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/postgres"
	"github.com/reinhq/rein/store/sqlite"
)

// opener makes a fresh, empty store for one test; the test's cleanup closes
// it and removes what it left.
type opener func(t *testing.T) store.Store

var schemaSeq atomic.Int64

func onBackends(t *testing.T, scenario func(t *testing.T, open opener)) {
	t.Run("memory", func(t *testing.T) {
		scenario(t, func(t *testing.T) store.Store {
			st := memory.New()
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		scenario(t, func(t *testing.T) store.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rein.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("REIN_TEST_POSTGRES_DSN not set")
		}
		scenario(t, func(t *testing.T) store.Store { return openPostgres(t, dsn) })
	})
}

// openPostgres opens a PostgreSQL store in a fresh schema that tb's cleanup
// drops.
func openPostgres(tb testing.TB, dsn string) store.Store {
	schema := fmt.Sprintf("sessions_test_%d_%d", time.Now().UnixNano(), schemaSeq.Add(1))
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
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
