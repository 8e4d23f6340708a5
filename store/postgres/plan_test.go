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

// explain is the plan of q with whole-table and bitmap scans priced out
// (see TestEndedSinceUsesIndex), one line per node.
func explain(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+q, args...)
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
	return strings.Join(plan, "\n")
}

// TestInboxUsesIndex: the approvals inbox reads one range of
// confirmations_inbox backwards, a later page from its position on, and
// the due expiries read confirmations_due in order; neither sorts.
func TestInboxUsesIndex(t *testing.T) {
	s := openStore(t, testDSN(t), Options{})
	plan := explain(t, s, inboxSQL, "alice", "pending", 100)
	if !strings.Contains(plan, "Index Scan Backward using confirmations_inbox") || strings.Contains(plan, "Sort") {
		t.Fatalf("the plan of ListInbox is not a backward scan of confirmations_inbox:\n%s", plan)
	}
	plan = explain(t, s, inboxAfterSQL, "alice", "pending", 100, time.Now(), "ses_1", "call_1")
	if !strings.Contains(plan, "Index Scan Backward using confirmations_inbox") || strings.Contains(plan, "Sort") ||
		!strings.Contains(plan, "ROW(created_at, session_id, tool_use_id) < ROW(") {
		t.Fatalf("the plan of a later ListInbox page does not start at its position in confirmations_inbox:\n%s", plan)
	}
	plan = explain(t, s, dueSQL, time.Now(), 1)
	if !strings.Contains(plan, "Index Scan using confirmations_due") || strings.Contains(plan, "Sort") {
		t.Fatalf("the plan of DueConfirmations is not a scan of confirmations_due in order:\n%s", plan)
	}
}
