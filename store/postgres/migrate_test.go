package postgres

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// dsnWithSchema returns dsn with search_path set to schema, the way a
// deployment would point Migrate at a schema.
func dsnWithSchema(t *testing.T, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Skipf("%s is not a URL DSN", dsnEnv)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func createSchema(t *testing.T, dsn, schema string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateReportsVersions(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	createSchema(t, dsn, schema)
	sdsn := dsnWithSchema(t, dsn, schema)

	from, to, err := Migrate(t.Context(), sdsn)
	if err != nil || from != 0 || to != SchemaVersion() || to < 1 {
		t.Fatalf("first Migrate = %d, %d, %v; want 0, %d, nil", from, to, err, SchemaVersion())
	}
	from, to, err = Migrate(t.Context(), sdsn)
	if err != nil || from != SchemaVersion() || to != SchemaVersion() {
		t.Fatalf("second Migrate = %d, %d, %v; want %d, %d, nil", from, to, err, SchemaVersion(), SchemaVersion())
	}
}

// Several instances starting at once on an empty schema: the advisory lock
// lets one migrate; the others wait, then find the schema current.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	const n = 4
	var (
		wg     sync.WaitGroup
		errs   [n]error
		stores [n]*Store
	)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), dsn, Options{Schema: schema}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		defer stores[i].Close()
	}
	var rows int
	if err := stores[0].pool.QueryRow(t.Context(), `SELECT count(*) FROM rein_schema_migrations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != SchemaVersion() {
		t.Fatalf("rein_schema_migrations has %d rows, want %d (one per version)", rows, SchemaVersion())
	}
}

// A database migrated by a newer Rein is refused, with a message saying so,
// and left exactly as it was.
func TestNewerSchemaIsRefusedUntouched(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	s := openStore(t, dsn, Options{Schema: schema})
	future := SchemaVersion() + 1
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO rein_schema_migrations (version, name) VALUES ($1, 'from_the_future')`, future); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	snapshot := func() (tables int, versions int) {
		conn, err := pgx.Connect(t.Context(), dsnWithSchema(t, dsn, schema))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1`, schema).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM rein_schema_migrations`).Scan(&versions); err != nil {
			t.Fatal(err)
		}
		return tables, versions
	}
	tablesBefore, versionsBefore := snapshot()

	_, err := Open(t.Context(), dsn, Options{Schema: schema})
	if !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaNewer", err)
	}
	t.Logf("Open refused: %v", err)
	from, to, err := Migrate(t.Context(), dsnWithSchema(t, dsn, schema))
	if !errors.Is(err, ErrSchemaNewer) || from != future || to != future {
		t.Fatalf("Migrate on a newer schema = %d, %d, %v; want %d, %d, ErrSchemaNewer", from, to, err, future, future)
	}
	if tables, versions := snapshot(); tables != tablesBefore || versions != versionsBefore {
		t.Fatalf("refusing changed the schema: %d tables / %d versions, was %d / %d", tables, versions, tablesBefore, versionsBefore)
	}
}

// The embedded migrations are numbered without gaps; a mistake there is a
// build bug this catches before any database does.
func TestEmbeddedMigrationsAreWellFormed(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.version != i+1 || m.sql == "" {
			t.Fatalf("migration %d is %+v", i, m)
		}
	}
}
