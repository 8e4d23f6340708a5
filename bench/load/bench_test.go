package load

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLoad runs the load tool against an in-process server on the
// memory store and on SQLite. One op is one session of two messages (five
// deltas 5 ms apart), 16 sessions at a time; the memory store is the
// no-durability baseline measured in the same run. Reported: p50 and p99
// of message → session.run_started and → first delta, events/s, and CPU
// µs per event (this process: server and load client together), e.g.
//
//	go test -run '^$' -bench Load -benchtime 200x -count 3 ./bench/load/
func BenchmarkLoad(b *testing.B) {
	for _, store := range []string{"memory", "sqlite"} {
		b.Run(store, func(b *testing.B) {
			o := DefaultOptions()
			o.Store = "memory:"
			if store == "sqlite" {
				o.Store = "sqlite:" + filepath.Join(b.TempDir(), "bench.db")
			}
			o.Sessions, o.Messages, o.Concurrency = b.N, 2, 16
			o.Chunks, o.ChunkDelay = 5, 5*time.Millisecond
			o.IdleStreams = -1
			rep, err := Run(b.Context(), o)
			if err != nil {
				b.Fatal(err)
			}
			if !rep.Verification.Complete {
				b.Fatalf("incomplete run: %+v", rep.Errors)
			}
			for _, name := range []string{LatencyRunStarted, LatencyFirstDelta} {
				l, _ := rep.Latency(name)
				b.ReportMetric(l.P50MS, name+"-p50-ms")
				b.ReportMetric(l.P99MS, name+"-p99-ms")
			}
			b.ReportMetric(rep.Events.PerSecond, "events/s")
			b.ReportMetric(rep.Server.CPUPerEventUS, "cpu-µs/event")
		})
	}
}

// BenchmarkLoadTarget is the workload the performance targets are set
// for: 1,000 sessions at once, one message each, 20 deltas 20 ms apart, on
// SQLite (docs/performance.md, Targets). One op is the whole workload, so
// run it with -benchtime 1x; with -cpuprofile it shows where the server's
// CPU per event goes (the load client is in the profile too: it runs in
// this process). Reported as BenchmarkLoad, plus events and the server's
// message → run_started p99.
//
//	go test -run '^$' -bench LoadTarget -benchtime 1x -count 3 ./bench/load/
func BenchmarkLoadTarget(b *testing.B) {
	for range b.N {
		o := DefaultOptions()
		o.Store = "sqlite:" + filepath.Join(b.TempDir(), "bench.db")
		o.Sessions, o.Messages = 1000, 1
		o.IdleStreams = -1
		rep, err := Run(b.Context(), o)
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Verification.Complete {
			b.Fatalf("incomplete run: %+v", rep.Errors)
		}
		for _, name := range []string{LatencyRunStarted, LatencyFirstDelta} {
			l, _ := rep.Latency(name)
			b.ReportMetric(l.P50MS, name+"-p50-ms")
			b.ReportMetric(l.P99MS, name+"-p99-ms")
		}
		b.ReportMetric(rep.Events.PerSecond, "events/s")
		b.ReportMetric(rep.Server.CPUPerEventUS, "cpu-µs/event")
	}
}
