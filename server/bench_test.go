package server_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
)

// BenchmarkMessageToRunStarted measures what a user waits for before the
// first sign of life: from sending a user.message over loopback HTTP to
// its session.run_started reaching an SSE reader that is already
// connected. Both the message and the run_started are durable appends, so
// with SQLite the figure is dominated by the store (DESIGN.md: ≈ one
// request + one durable append). The memory store is the no-durability
// baseline. Reported: p50-ms and p99-ms per store.
func BenchmarkMessageToRunStarted(b *testing.B) {
	for _, c := range []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"sqlite", func(b *testing.B) store.Store {
			st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return st
		}},
		{"memory", func(*testing.B) store.Store { return memory.New() }},
	} {
		b.Run(c.name, func(b *testing.B) { benchMessageToRunStarted(b, c.open(b)) })
	}
}

func benchMessageToRunStarted(b *testing.B, st store.Store) {
	s := newStack(b, options{store: st})
	body := map[string]any{"events": []map[string]any{ev("user.message", map[string]any{"text": "hi"})}}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		// Each message goes to a fresh idle session whose stream is
		// already open: the figure is the admission path alone, never a
		// wait behind an earlier run.
		b.StopTimer()
		sid := s.createSession("")
		stream := s.stream("", sid, "", "")
		b.StartTimer()
		t0 := time.Now()
		r := s.do("POST", "/api/sessions/"+sid+"/events", "", body)
		if r.status != 200 {
			b.Fatalf("POST: %d %s", r.status, r.body)
		}
		var res struct {
			Results []struct {
				RunID string `json:"run_id"`
			} `json:"results"`
		}
		if err := json.Unmarshal(r.body, &res); err != nil {
			b.Fatal(err)
		}
		runID := res.Results[0].RunID
		// The run_started may arrive before the POST's answer; it is in
		// the stream's buffer then, and counted when the answer came.
		stream.until(is(rein.EventRunStarted, runID))
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		// Earlier runs' tails must not overlap the next measurement.
		stream.until(is(rein.EventRunCompleted, runID))
		stream.close()
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}
