package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein"
)

// A database written by a version-1 binary is brought to the current
// schema, and its runs read as never resumed, stopped or rolled back.
func TestMigrateFromVersion1KeepsRuns(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rein.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		ms[0].sql,
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`,
		`INSERT INTO schema_version (version) VALUES (1)`,
		`INSERT INTO sessions (pk, owner, id, metadata, created_at) VALUES (1, 'o', 's', '{}', 0)`,
		`INSERT INTO runs (id, session_pk, status, reason, error, input, queue_order, instance, input_tokens, output_tokens, created_at)
			VALUES ('run_1', 1, 'QUEUED', '', '', 'hello', 3, 'inst', 0, 0, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.GetRun(t.Context(), rein.SessionKey{Owner: "o", ID: "s"}, "run_1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Input != "hello" || r.QueueOrder != 3 || r.Resumes != 0 || r.Stop != "" || r.RolledBack {
		t.Fatalf("migrated run = %+v", r)
	}
	var v int
	if err := s.rdb.QueryRowContext(t.Context(), `SELECT version FROM schema_version`).Scan(&v); err != nil || v != latestVersion() || v < 2 {
		t.Fatalf("schema version = %d, %v; want %d", v, err, latestVersion())
	}
}
