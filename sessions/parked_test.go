package sessions_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
)

// parkCounter is an Observer that counts parked runs.
type parkCounter struct {
	sessions.Observer
	parked atomic.Int64
	ch     chan struct{}
}

func (p *parkCounter) RunParked() {
	p.parked.Add(1)
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

type nop = sessions.NopObserver

// parkMany parks n runs, each in its own session, and returns the service,
// the sessions and their runs.
func parkMany(tb testing.TB, st store.Store, n int) (*sessions.Service, []rein.SessionKey, []string) {
	pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
	svc := startServiceWith(tb, st, func(c *sessions.Config) { c.Observer = pc })
	ctx := context.Background()
	keys := make([]rein.SessionKey, n)
	runs := make([]string, n)
	for i := range n {
		sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
		if err != nil {
			tb.Fatal(err)
		}
		keys[i] = sess.Key()
		res, err := svc.SendMessage(ctx, keys[i], sessions.MessageRequest{Text: "note milk"})
		if err != nil {
			tb.Fatal(err)
		}
		runs[i] = res.RunID
	}
	deadline := time.After(60 * time.Second)
	for pc.parked.Load() < int64(n) {
		select {
		case <-pc.ch:
		case <-deadline:
			tb.Fatalf("%d of %d runs parked", pc.parked.Load(), n)
		}
	}
	return svc, keys, runs
}

// startServiceWith starts a service over st with the sessions tests'
// scripted model, its own workspace, and mod applied to its configuration.
func startServiceWith(tb testing.TB, st store.Store, mod func(*sessions.Config)) *sessions.Service {
	tb.Helper()
	ws := tb.TempDir()
	svc, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) {
		c.Workspace = ws
		if mod != nil {
			mod(c)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return svc
}

// A thousand runs waiting for answers hold no goroutine each: the count
// stays within a constant of what the service had before.
func TestParkedRunsHoldNoGoroutines(t *testing.T) {
	// Not parallel: it counts the whole process's goroutines.
	st := memory.New()
	defer st.Close()
	before := runtime.NumGoroutine()
	svc, keys, runs := parkMany(t, st, 1000)
	defer svc.Close()
	runtime.GC()
	if g := runtime.NumGoroutine(); g > before+20 {
		t.Fatalf("%d goroutines for 1000 parked runs (%d before)", g, before)
	}
	// They are still there, waiting, and one answer takes its run up.
	ctx := context.Background()
	info, err := svc.GetSession(ctx, keys[7])
	if err != nil || info.CurrentRunID != runs[7] || len(info.PendingConfirmations) != 1 {
		t.Fatalf("%+v %v", info, err)
	}
	if _, err := svc.ConfirmTool(ctx, keys[7], sessions.ConfirmRequest{ToolUseID: info.PendingConfirmations[0].ToolUseID, Allow: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := waitFor(ctx, st, keys[7], rein.EventRunCompleted, runs[7]); !ok {
		t.Fatal("answered run did not end")
	}
}

// BenchmarkParkedRunMemory is the heap a parked run costs the service (its
// store rows live in the memory store here, so they are counted too):
// bytes per parked run, and goroutines per parked run.
func BenchmarkParkedRunMemory(b *testing.B) {
	const n = 2000
	for range b.N {
		b.StopTimer()
		st := memory.New()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		g0 := runtime.NumGoroutine()
		b.StartTimer()
		svc, _, _ := parkMany(b, st, n)
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, "heap-B/run")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/run")
		svc.Close()
		st.Close()
	}
}

// BenchmarkAnswerToNextRequest: from an answer to a parked run's
// confirmation to the first streamed delta of the run's next model request
// in the log — the take-up, the tool, its result and the request. Reported:
// p50-ms per store.
func BenchmarkAnswerToNextRequest(b *testing.B) {
	for _, c := range benchStores(b) {
		b.Run(c.name, func(b *testing.B) {
			st := c.open(b)
			pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
			svc := startServiceWith(b, st, func(cfg *sessions.Config) { cfg.Observer = pc })
			defer svc.Close()
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				b.StopTimer()
				sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
				if err != nil {
					b.Fatal(err)
				}
				key := sess.Key()
				before := pc.parked.Load()
				res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "note milk"})
				if err != nil {
					b.Fatal(err)
				}
				for pc.parked.Load() == before {
					<-pc.ch
				}
				info, err := svc.GetSession(ctx, key)
				if err != nil || len(info.PendingConfirmations) != 1 {
					b.Fatalf("%+v %v", info, err)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := svc.ConfirmTool(ctx, key, sessions.ConfirmRequest{ToolUseID: info.PendingConfirmations[0].ToolUseID, Allow: true}); err != nil {
					b.Fatal(err)
				}
				if !waitDelta(ctx, st, key, res.RunID, 2) {
					b.Fatal("no step 2")
				}
				lat = append(lat, time.Since(t0))
				b.StopTimer()
				waitFor(ctx, st, key, rein.EventRunCompleted, res.RunID)
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// waitDelta waits for a delta of the run's step in the log.
func waitDelta(ctx context.Context, st store.Store, key rein.SessionKey, runID string, step int) bool {
	after := int64(0)
	for {
		evs, _, err := st.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Type == rein.EventMessageDelta && e.RunID == runID {
				var p rein.MessageDeltaPayload
				if e.DecodePayload(&p) == nil && p.Step == step {
					return true
				}
			}
			after = e.Seq
		}
		if err := st.WaitEvents(ctx, key, after); err != nil {
			return false
		}
	}
}

type benchStore struct {
	name string
	open func(b *testing.B) store.Store
}

// benchStores are SQLite and, when REIN_TEST_POSTGRES_DSN is set,
// PostgreSQL (a fresh schema each).
func benchStores(b *testing.B) []benchStore {
	out := []benchStore{{"sqlite", func(b *testing.B) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "rein.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}}}
	if os.Getenv("REIN_TEST_POSTGRES_DSN") != "" {
		out = append(out, benchStore{"postgres", func(b *testing.B) store.Store {
			return openPostgres(b, os.Getenv("REIN_TEST_POSTGRES_DSN"))
		}})
	}
	return out
}
