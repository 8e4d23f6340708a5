package postgres

import (
	"strings"
	"testing"
	"time"
)

// ListEndedSince reads a range of the runs_by_end index, never the whole
// runs table: its cost follows the runs it returns, not the runs stored.
// A test table is too small for the planner to prefer an index on its
// own, so whole-table and bitmap scans are priced out: the plan then
// shows that the query is answered from the index, in its order, without
// a sort.
func TestEndedSinceUsesIndex(t *testing.T) {
	dsn := testDSN(t)
	s := openStore(t, dsn, Options{})
	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+endedSinceSQL, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "Index Scan using runs_by_end") || strings.Contains(all, "Sort") {
		t.Fatalf("the plan of ListEndedSince is not a scan of runs_by_end in order:\n%s", all)
	}
}
