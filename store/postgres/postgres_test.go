package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// dsnEnv names the database the tests use; without it they skip.
const dsnEnv = "REIN_TEST_POSTGRES_DSN"

func TestMain(m *testing.M) {
	// A test that needs a second OS process re-executes this binary with
	// helperEnv set: the child runs its part and exits, never the tests.
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// testDSN returns the test database's DSN or skips tb.
func testDSN(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		tb.Skipf("%s not set: skipping PostgreSQL tests", dsnEnv)
	}
	return dsn
}

// newSchema returns a fresh schema name and drops that schema when tb ends
// (after the stores using it have closed: cleanups run last-in first-out).
func newSchema(tb testing.TB) string {
	tb.Helper()
	dsn := testDSN(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "rein_test_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// openStore opens a store on schema (a fresh one when "") and closes it
// when tb ends.
func openStore(tb testing.TB, dsn string, opts Options) *Store {
	tb.Helper()
	if opts.Schema == "" {
		opts.Schema = newSchema(tb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, dsn, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	dsn := testDSN(t)
	storetest.Run(t, func(tb testing.TB, clock rein.Clock) store.Store {
		return openStore(tb, dsn, Options{Clock: clock})
	})
}
