package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

// BenchmarkIdleStream measures what one open, idle event stream costs the
// server: n sessions each get a stream from a raw connection that reads
// nothing past the response headers (so the client side holds no reader
// buffer and no goroutine), and the live heap and goroutine stacks after
// a collection are compared with those before. Reported per stream:
// heap-B, stack-B and goroutines. Run it with -benchtime 1x; each
// iteration opens n more streams.
func BenchmarkIdleStream(b *testing.B) {
	const n = 500
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s := newStack(b, options{store: st})
	addr := strings.TrimPrefix(s.url, "http://")
	for range b.N {
		b.StopTimer()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = s.createSession("")
		}
		before := liveMemory()
		conns := make([]net.Conn, 0, n)
		for _, sid := range ids {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := fmt.Fprintf(c, "GET /api/sessions/%s/events/stream HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", sid, addr); err != nil {
				b.Fatal(err)
			}
			// The status line and headers, nothing more.
			br := bufio.NewReaderSize(c, 512)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("stream: %v %v", resp, err)
			}
		}
		after := liveMemory()
		b.ReportMetric(float64(after.heap-before.heap)/n, "heap-B/stream")
		b.ReportMetric(float64(after.stack-before.stack)/n, "stack-B/stream")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/n, "goroutines/stream")
		for _, c := range conns {
			c.Close()
		}
		b.StartTimer()
	}
}

type memSample struct{ heap, stack, goroutines int64 }

// liveMemory is the live heap and the goroutine stacks after collections
// (several: stacks shrink one halving per collection).
func liveMemory() memSample {
	var ms runtime.MemStats
	for range 4 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return memSample{heap: int64(ms.HeapAlloc), stack: int64(ms.StackInuse), goroutines: int64(runtime.NumGoroutine())}
}
