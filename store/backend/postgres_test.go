package backend_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/store/postgres"
)

// TestOpenPostgres opens a postgres:// spec; the test's own schema is
// chosen through the DSN's search_path, as an operator would.
func TestOpenPostgres(t *testing.T) {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	ctx := t.Context()
	schema := fmt.Sprintf("backend_test_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = conn.Close(context.Background())
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	from, to, err := backend.Migrate(ctx, u.String())
	if err != nil || from != 0 || to == 0 {
		t.Fatalf("migrate: %d → %d, %v", from, to, err)
	}
	s, err := backend.Open(ctx, u.String(), backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Fatalf("postgres:// opened a %T", s)
	}
	if err := s.CreateSession(ctx, &store.Session{Owner: "o", ID: "s"}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".sessions").Scan(&n); err != nil || n != 1 {
		t.Fatalf("session not in the chosen schema: %d %v", n, err)
	}
}
