package id

import (
	"sort"
	"strings"
	"testing"
	"time"
)

func TestNewAtSortsByTime(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ids []string
	for i := 0; i < 100; i++ {
		ids = append(ids, NewAt(Run, base.Add(time.Duration(i)*time.Millisecond)))
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids made later do not sort later")
	}
	for _, s := range ids {
		if !strings.HasPrefix(s, Run) || len(s) != len(Run)+26 {
			t.Fatalf("%q", s)
		}
		for _, c := range s[len(Run):] {
			if !strings.ContainsRune(crockford, c) {
				t.Fatalf("%q has %q", s, c)
			}
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		s := NewAt(Event, base)
		if seen[s] {
			t.Fatal("duplicate id")
		}
		seen[s] = true
	}
}
