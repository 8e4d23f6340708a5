package chaos

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// Benchmarks of a cluster of real `rein serve` processes on one PostgreSQL
// (skipped without REIN_TEST_POSTGRES_DSN). Each reports medians and tails
// of what a client sees, next to a floor measured in the same run
// (DESIGN.md: "report medians and ratios measured in one run"):
//
//	BenchmarkClusterStop           a stop sent to B for A's run → the run's
//	                               session.run_completed read on A's and on
//	                               B's stream; floor: one LISTEN/NOTIFY hop
//	                               between two pgx connections; baseline:
//	                               the same stop sent to A
//	BenchmarkClusterSSE            a delta appended by A (its created_at) →
//	                               read by an SSE reader on B; baseline: a
//	                               reader on A
//	BenchmarkClusterRunsPerSecond  short scripted runs on many sessions
//	                               spread over 1, 2 and 3 instances
//
// One op is one stop, one burst run (30 deltas), or benchWorkers runs, so
// that a single -benchtime=Nx suits all three, e.g.
//
//	go test -run '^$' -bench Cluster -benchtime 40x -count 3 ./chaos/

// benchTTL is the benchmarks' --lease-ttl: long, so that nothing measured
// can be a fallback at a renewal or an expiry (those would take seconds).
const benchTTL = 10 * time.Second

// benchWorkers is how many sessions (one client each) load the cluster in
// BenchmarkClusterRunsPerSecond, whatever its size.
const benchWorkers = 24

// ms is d in milliseconds, for ReportMetric.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportQuantiles reports the p50 and p99 of ds as name-p50-ms and
// name-p99-ms.
func reportQuantiles(b *testing.B, name string, ds []time.Duration) {
	b.ReportMetric(ms(quantile(ds, 0.5)), name+"-p50-ms")
	b.ReportMetric(ms(quantile(ds, 0.99)), name+"-p99-ms")
}

// notifyFloor measures n one-way LISTEN/NOTIFY hops between two pgx
// connections: from just before the sender's pg_notify to the listener's
// receipt, the same path an instance message takes.
func notifyFloor(b *testing.B, n int) []time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgDSN(b)
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("postgres: %v", err)
	}
	defer listener.Close(context.Background())
	sender, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("postgres: %v", err)
	}
	defer sender.Close(context.Background())
	channel := fmt.Sprintf("rein_chaos_floor_%d", time.Now().UnixNano())
	if _, err := listener.Exec(ctx, "LISTEN "+channel); err != nil {
		b.Fatalf("listen: %v", err)
	}
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		for range n {
			if _, err := listener.WaitForNotification(ctx); err != nil {
				errc <- err
				return
			}
			got <- time.Now()
		}
	}()
	out := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		if _, err := sender.Exec(ctx, "SELECT pg_notify($1, $2)", channel, strconv.Itoa(i)); err != nil {
			b.Fatalf("notify: %v", err)
		}
		select {
		case at := <-got:
			out = append(out, at.Sub(t0))
		case err := <-errc:
			b.Fatalf("wait for notification: %v", err)
		case <-ctx.Done():
			b.Fatalf("wait for notification: %v", ctx.Err())
		}
	}
	return out
}

// BenchmarkClusterStop measures a stop of A's streaming run (mode cancel,
// by run id) sent to B ("cross") or to A itself ("local"): ack is the
// request's round trip, endA and endB the time until the run's
// session.run_completed is read on A's and on B's event stream. notify is
// the LISTEN/NOTIFY one-way floor measured in the same run; the stop path
// crosses it at least three times (B asks A, A answers B, A's end wakes
// B's stream).
func BenchmarkClusterStop(b *testing.B) {
	c := startCluster(b, 2, benchTTL)
	a, bb := c.procs[0], c.procs[1]
	for _, tc := range []struct {
		name    string
		stopper *proc
	}{{"cross", bb}, {"local", a}} {
		b.Run(tc.name, func(b *testing.B) {
			var ack, endA, endB []time.Duration
			for range b.N {
				b.StopTimer()
				sid := newSession(b, a)
				ra, rb := openSSE(b, a, sid, 0), openSSE(b, bb, sid, 0)
				runID := send(b, a, sid, longInput)
				rb.until(ctxFor(b, cutTimeout), b, "the first delta", isDelta(runID))
				b.StartTimer()
				t0 := time.Now()
				res, err := tc.stopper.client.StopRun(ctxFor(b, callTimeout), sid, runID, rein.StopCancel)
				t1 := time.Now()
				if err != nil || !res.Accepted {
					b.Fatalf("%s: stop %s = %+v, %v", tc.stopper.name, runID, res, err)
				}
				fb := rb.until(ctxFor(b, runTimeout), b, "the end", isType(rein.EventRunCompleted, runID))
				b.StopTimer()
				fa := ra.until(ctxFor(b, runTimeout), b, "the end", isType(rein.EventRunCompleted, runID))
				ack, endA, endB = append(ack, t1.Sub(t0)), append(endA, fa.at.Sub(t0)), append(endB, fb.at.Sub(t0))
				ra.close()
				rb.close()
			}
			floor := notifyFloor(b, 200)
			reportQuantiles(b, "ack", ack)
			reportQuantiles(b, "endA", endA)
			reportQuantiles(b, "endB", endB)
			reportQuantiles(b, "notify", floor)
			b.ReportMetric(ms(quantile(endB, 0.5))/ms(quantile(floor, 0.5)), "endB/notify-p50")
		})
	}
}

// BenchmarkClusterSSE measures live delivery: for every delta of a burst
// run on A, the time from its created_at (A's clock, set as A appends it)
// to the moment an SSE reader reads its frame — on B ("cross", the
// cross-instance path: commit, NOTIFY, B's read of the log, B's write)
// and on A ("local").
func BenchmarkClusterSSE(b *testing.B) {
	c := startCluster(b, 2, benchTTL)
	b.Run("burst", func(b *testing.B) { benchSSE(b, c) })
}

func benchSSE(b *testing.B, c *cluster) {
	a, bb := c.procs[0], c.procs[1]
	var cross, local []time.Duration
	for range b.N {
		b.StopTimer()
		sid := newSession(b, a)
		ra, rb := openSSE(b, a, sid, 0), openSSE(b, bb, sid, 0)
		b.StartTimer()
		runID := send(b, a, sid, "burst please")
		rb.until(ctxFor(b, runTimeout), b, "the end", isType(rein.EventRunCompleted, runID))
		b.StopTimer()
		ra.until(ctxFor(b, runTimeout), b, "the end", isType(rein.EventRunCompleted, runID))
		for _, x := range []struct {
			r   *sseReader
			out *[]time.Duration
		}{{ra, &local}, {rb, &cross}} {
			for _, f := range x.r.all() {
				if f.ev.Type == rein.EventMessageDelta {
					*x.out = append(*x.out, f.at.Sub(f.ev.CreatedAt))
				}
			}
		}
		ra.close()
		rb.close()
	}
	reportQuantiles(b, "cross", cross)
	reportQuantiles(b, "local", local)
	b.ReportMetric(float64(len(cross))/float64(b.N), "deltas/op")
	b.ReportMetric(ms(quantile(cross, 0.5))/ms(quantile(local, 0.5)), "cross/local-p50")
}

// BenchmarkClusterRunsPerSecond measures throughput: benchWorkers
// sessions, each driven by one client that sends a short message (one
// step, one delta) to its session's instance and waits on that instance's
// event stream for the run's end, then sends the next. Sessions are spread
// round-robin over 1, 2 and 3 instances of one PostgreSQL schema. One op
// is benchWorkers runs.
func BenchmarkClusterRunsPerSecond(b *testing.B) {
	pgDSN(b)
	for _, n := range []int{1, 2, 3} {
		c := startCluster(b, n, benchTTL)
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			b.StopTimer()
			type worker struct {
				p   *proc
				sid string
				r   *sseReader
			}
			ws := make([]worker, benchWorkers)
			for i := range ws {
				p := c.procs[i%n]
				sid := newSession(b, p)
				ws[i] = worker{p: p, sid: sid, r: openSSE(b, p, sid, 0)}
			}
			total := int64(b.N) * benchWorkers
			var next atomic.Int64
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			lat := make([][]time.Duration, len(ws))
			b.StartTimer()
			start := time.Now()
			for i := range ws {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := ws[i]
					for k := next.Add(1); k <= total; k = next.Add(1) {
						t0 := time.Now()
						res, err := w.p.client.SendMessage(ctx, w.sid, client.Message{Text: "bench " + strconv.FormatInt(k, 10)})
						if err != nil {
							b.Errorf("%s: send: %v", w.p.name, err)
							cancel()
							return
						}
						if _, err := w.r.wait(ctx, isType(rein.EventRunCompleted, res.RunID)); err != nil {
							b.Errorf("%s: run %s: %v", w.p.name, res.RunID, err)
							cancel()
							return
						}
						lat[i] = append(lat[i], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			b.ReportMetric(float64(total)/elapsed.Seconds(), "runs/s")
			reportQuantiles(b, "run", all)
			for _, w := range ws {
				w.r.close()
			}
		})
		c.kill()
	}
}
