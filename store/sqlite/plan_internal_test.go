package sqlite

import (
	"strings"
	"testing"
	"time"
)

// ListEndedSince reads a range of the runs_by_end index, never the whole
// runs table: its cost follows the runs it returns, not the runs stored.
func TestEndedSinceUsesIndex(t *testing.T) {
	s := openTemp(t)
	rows, err := s.rdb.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+qEndedSince, time.Now().UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "SEARCH r USING INDEX runs_by_end (ended_at>?)") {
		t.Fatalf("the plan of ListEndedSince does not search runs_by_end:\n%s", all)
	}
	if strings.Contains(all, "SCAN r") || strings.Contains(all, "TEMP B-TREE") {
		t.Fatalf("the plan of ListEndedSince scans or sorts the runs:\n%s", all)
	}
}

// queryPlan is the EXPLAIN QUERY PLAN of q, one detail per line.
func queryPlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestInboxUsesIndex: the approvals inbox and the due expiries read one
// range of their index each, in the index's order (no sort), so their cost
// follows the page, not the confirmations stored.
func TestInboxUsesIndex(t *testing.T) {
	s := openTemp(t)
	plan := queryPlan(t, s, qInbox, "alice", "pending", 100)
	if !strings.Contains(plan, "SEARCH c USING INDEX confirmations_inbox (owner=? AND <expr>=?)") || strings.Contains(plan, "TEMP B-TREE") {
		t.Fatalf("the plan of ListInbox's first page does not read confirmations_inbox in order:\n%s", plan)
	}
	// A later page starts at its position in the index, not by reading
	// the pages before it.
	plan = queryPlan(t, s, qInboxAfter, "alice", "pending", time.Now().UnixMicro(), "ses_1", "call_1", 100)
	if !strings.Contains(plan, "SEARCH c USING INDEX confirmations_inbox (owner=? AND <expr>=? AND (created_at,session_id,tool_use_id)<(?,?,?))") || strings.Contains(plan, "TEMP B-TREE") {
		t.Fatalf("the plan of a later ListInbox page does not start at its position in confirmations_inbox:\n%s", plan)
	}
	plan = queryPlan(t, s, qDue, time.Now().UnixMicro(), 1)
	if !strings.Contains(plan, "USING INDEX confirmations_due") || strings.Contains(plan, "TEMP B-TREE") {
		t.Fatalf("the plan of DueConfirmations does not read confirmations_due in order:\n%s", plan)
	}
}
