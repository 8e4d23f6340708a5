package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store/storetest"
)

// TestDeleteLeavesNoRowInAnyTable deletes a tree that has a row of every
// kind and then looks at every table of the database file, as listed by
// sqlite_master, for a row of its sessions: a table a later migration adds
// is covered without touching this test, and one the test cannot relate
// to sessions fails it until it is taught.
func TestDeleteLeavesNoRowInAnyTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s := mustOpen(t, path)
	tree, survivor := storetest.FillTree(t, s)

	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	pks := func(keys ...rein.SessionKey) []any {
		var out []any
		for _, k := range keys {
			var pk int64
			if err := db.QueryRowContext(ctx, `SELECT pk FROM sessions WHERE owner = ? AND id = ?`, k.Owner, k.ID).Scan(&pk); err != nil {
				t.Fatalf("pk of %s: %v", k, err)
			}
			out = append(out, pk)
		}
		return out
	}
	treePKs, survivorPKs := pks(tree...), pks(survivor)
	queries := sessionRowQueries(t, ctx, db)

	count := func(ids []any) map[string]int {
		out := map[string]int{}
		marks := strings.Repeat(", ?", len(ids))[2:]
		for table, column := range queries {
			var n int
			q := fmt.Sprintf(`SELECT count(*) FROM %q WHERE %q IN (%s)`, table, column, marks)
			if err := db.QueryRowContext(ctx, q, ids...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			out[table] = n
		}
		return out
	}
	before := count(treePKs)
	for table, n := range before {
		if n == 0 {
			t.Fatalf("table %s holds no row of the tree before the deletion: FillTree must give every table a row, or this test proves nothing about it", table)
		}
	}
	kept := count(survivorPKs)

	if _, err := s.DeleteSession(ctx, tree[0], nil); err != nil {
		t.Fatal(err)
	}
	for table, n := range count(treePKs) {
		if n != 0 {
			t.Errorf("table %s still holds %d rows of the deleted sessions (had %d)", table, n, before[table])
		}
	}
	if got := count(survivorPKs); !maps.Equal(got, kept) {
		t.Errorf("the other session's rows changed: %v, was %v", got, kept)
	}
}

// sessionRowQueries maps every table of the database to the column that
// names a session's pk in it, failing on a table that has none and is not
// known to hold no session data.
func sessionRowQueries(t *testing.T, ctx context.Context, db *sql.DB) map[string]string {
	t.Helper()
	noSessionData := []string{"schema_version", "outbox_destinations"}
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, table := range tables {
		cols, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for cols.Next() {
			var c string
			if err := cols.Scan(&c); err != nil {
				t.Fatal(err)
			}
			names = append(names, c)
		}
		cols.Close()
		switch {
		case table == "sessions":
			out[table] = "pk"
		case slices.Contains(names, "session_pk"):
			out[table] = "session_pk"
		case slices.Contains(noSessionData, table):
		default:
			t.Fatalf("table %s has no session_pk column (columns %v): teach this test how its rows name a session", table, names)
		}
	}
	if len(out) < 7 {
		t.Fatalf("found only %v: the schema listing is broken", out)
	}
	return out
}
