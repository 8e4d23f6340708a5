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
