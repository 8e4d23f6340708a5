package sessions_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/store/storetest"
)

// BenchmarkRunOverhead is what one run costs through the sessions service
// on the memory store with an instant one-step scripted model: admission,
// claim, the loop, the end — every lifecycle write included — until the
// run's session.run_completed is in the log.
func BenchmarkRunOverhead(b *testing.B) {
	st := memory.New()
	defer st.Close()
	svc, err := reintest.Service("testdata/service.yaml", st, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	// A fresh session for each run: the figure is one run's cost, not the
	// growth of one session's history. Made before the clock starts, not
	// between StopTimer and StartTimer, which stop the world to read the
	// memory statistics at every iteration and distort what they frame.
	keys := make([]rein.SessionKey, b.N)
	for i := range keys {
		sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = sess.Key()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, key := range keys {
		res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "hi"})
		if err != nil {
			b.Fatal(err)
		}
		waitLogged(b, svc, key, res.RunID, rein.EventRunCompleted)
	}
}

// waitLogged waits on the log for the run's first event of type typ.
func waitLogged(b *testing.B, svc *sessions.Service, key rein.SessionKey, runID string, typ rein.EventType) {
	ctx := context.Background()
	last := int64(0)
	for {
		evs, _, err := svc.ReadEvents(ctx, key, last, 1000)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == typ && e.RunID == runID {
				return
			}
			last = e.Seq
		}
		if err := svc.WaitEvents(ctx, key, last); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestartToStepRestarted measures how soon a run cut in its model
// request by a crash is resumed: from a new process's service starting on
// the reopened SQLite file to the resumed run's agent.step_restarted in the
// log. The lease TTL is 15 s (the default); SQLite's file lock proves the
// old holder gone, so recovery need not wait for it. Reported: p50-ms.
func BenchmarkRestartToStepRestarted(b *testing.B) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for range b.N {
		b.StopTimer()
		file := filepath.Join(b.TempDir(), "rein.db")
		st, err := sqlite.Open(ctx, file, sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		k := storetest.NewFaulty(st)
		first := startService(b, k)
		sess, err := first.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
		if err != nil {
			b.Fatal(err)
		}
		key := sess.Key()
		res, err := first.SendMessage(ctx, key, sessions.MessageRequest{Text: "slow"})
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := waitFor(ctx, st, key, rein.EventMessageDelta, res.RunID); !ok {
			b.Fatal("no delta")
		}
		k.Kill()
		first.Close()
		st.Close()
		st, err = sqlite.Open(ctx, file, sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		second := startService(b, st)
		if _, ok := waitFor(ctx, st, key, rein.EventStepRestarted, res.RunID); !ok {
			b.Fatal("not resumed")
		}
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		second.Close()
		st.Close()
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

func startService(b *testing.B, st store.Store) *sessions.Service {
	return startServiceWith(b, st, nil)
}

// BenchmarkCancelToRunCompleted measures an immediate stop through the
// sessions service, on the memory store and on SQLite: a run streams a chunk
// every 10 ms; right after its first chunk it gets a user.interrupt (cancel)
// by run id, timed from the request to the commit of the write that appends
// its session.run_completed. Reported: p50-us and p99-us of that,
// answer-p50-us (the request to its accepted answer) and merged-% (the
// stops whose event the run's end wrote in its own write).
func BenchmarkCancelToRunCompleted(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchCancel(b, memory.New()) })
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "rein.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		benchCancel(b, st)
	})
}

func benchCancel(b *testing.B, st store.Store) {
	rs := newRecStore(st)
	defer rs.Close()
	rs.ends = make(chan runEnd, 16)
	svc, err := reintest.Service("testdata/stopnow.yaml", rs, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	lat := make([]time.Duration, 0, b.N)
	answers := make([]time.Duration, 0, b.N)
	merged := 0
	// The clock runs throughout (ns/op includes each iteration's setup:
	// a session, a run, its first delta); the figures are the latencies
	// measured around the stop. StopTimer/StartTimer around the setup
	// would stop the world just before each stop and distort it.
	b.ResetTimer()
	for range b.N {
		sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
		if err != nil {
			b.Fatal(err)
		}
		key := sess.Key()
		res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "stream"})
		if err != nil {
			b.Fatal(err)
		}
		waitLogged(b, svc, key, res.RunID, rein.EventMessageDelta)
		t0 := time.Now()
		out, err := svc.Interrupt(ctx, key, sessions.InterruptRequest{RunID: &res.RunID, Mode: rein.StopCancel})
		answered := time.Since(t0)
		if err != nil || !out.Accepted {
			b.Fatalf("stop: %+v %v", out, err)
		}
		for e := range rs.ends {
			if e.run == res.RunID {
				lat = append(lat, e.at.Sub(t0))
				if e.withStop {
					merged++
				}
				break
			}
		}
		answers = append(answers, answered)
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(answers)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-us")
	b.ReportMetric(float64(answers[len(answers)/2].Nanoseconds())/1e3, "answer-p50-us")
	b.ReportMetric(100*float64(merged)/float64(b.N), "merged-%")
}
