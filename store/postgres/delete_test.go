package postgres

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein/store/storetest"
)

// TestDeleteLeavesNoRowInAnyTable deletes a tree that has a row of every
// kind and then looks at every table of the store's schema, as listed by
// information_schema, for a row of its sessions (owner + session id): a
// table a later migration adds is covered without touching this test, and
// one the test cannot relate to sessions fails it until it is taught.
func TestDeleteLeavesNoRowInAnyTable(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	s := openStore(t, dsn, Options{Schema: schema})
	tree, survivor := storetest.FillTree(t, s)

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	keyColumn := sessionKeyColumns(t, ctx, conn, schema)

	count := func(owner string, ids []string) map[string]int {
		out := map[string]int{}
		for table, idColumn := range keyColumn {
			var n int
			q := `SELECT count(*) FROM ` + pgx.Identifier{schema, table}.Sanitize() +
				` WHERE owner = $1 AND ` + pgx.Identifier{idColumn}.Sanitize() + ` = ANY($2::text[])`
			if err := conn.QueryRow(ctx, q, owner, ids).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			out[table] = n
		}
		return out
	}
	var treeIDs []string
	for _, k := range tree {
		treeIDs = append(treeIDs, k.ID)
	}
	owner := tree[0].Owner
	before := count(owner, treeIDs)
	for table, n := range before {
		if n == 0 {
			t.Fatalf("table %s holds no row of the tree before the deletion: FillTree must give every table a row, or this test proves nothing about it", table)
		}
	}
	kept := count(survivor.Owner, []string{survivor.ID})

	if _, err := s.DeleteSession(ctx, tree[0], nil); err != nil {
		t.Fatal(err)
	}
	for table, n := range count(owner, treeIDs) {
		if n != 0 {
			t.Errorf("table %s still holds %d rows of the deleted sessions (had %d)", table, n, before[table])
		}
	}
	if got := count(survivor.Owner, []string{survivor.ID}); !maps.Equal(got, kept) {
		t.Errorf("the other session's rows changed: %v, was %v", got, kept)
	}
}

// sessionKeyColumns maps every table of schema to the column that holds a
// session id beside its owner column, failing on a table that has none
// and is not known to hold no session data.
func sessionKeyColumns(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) map[string]string {
	t.Helper()
	noSessionData := []string{"instances", "rein_schema_migrations", "outbox_destinations"}
	rows, err := conn.Query(ctx, `SELECT t.table_name, array_agg(c.column_name::text ORDER BY c.ordinal_position)
		FROM information_schema.tables t
		JOIN information_schema.columns c ON c.table_schema = t.table_schema AND c.table_name = t.table_name
		WHERE t.table_schema = $1 AND t.table_type = 'BASE TABLE'
		GROUP BY t.table_name`, schema)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var (
			table string
			cols  []string
		)
		if err := rows.Scan(&table, &cols); err != nil {
			t.Fatal(err)
		}
		switch {
		case table == "sessions":
			out[table] = "id"
		case slices.Contains(cols, "owner") && slices.Contains(cols, "session_id"):
			out[table] = "session_id"
		case slices.Contains(noSessionData, table):
		default:
			t.Fatalf("table %s has no owner and session_id columns (columns %v): teach this test how its rows name a session", table, cols)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 8 {
		t.Fatalf("found only %v: the schema listing is broken", out)
	}
	return out
}
