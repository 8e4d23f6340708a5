package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// benchPayload is the size and shape of the commonest event, a streamed
// text delta.
var benchPayload = []byte(`{"run_id":"run_01J0000000000000000000000","step":1,"text":"The quick brown fox jumps over the lazy dog, again and again."}`)

// BenchmarkAppend measures durable single-event appends from writers
// concurrent goroutines, each appending to its own session. b.N is the
// total number of events. It reports events/s and the 99th percentile
// latency of one AppendEvents call (p99_ms).
func BenchmarkAppend(b *testing.B, open Opener, writers int) {
	benchmarkAppend(b, open, writers, false)
}

// BenchmarkAppendShared is BenchmarkAppend with every writer appending to
// one session: the contended case a single busy session sees.
func BenchmarkAppendShared(b *testing.B, open Opener, writers int) {
	benchmarkAppend(b, open, writers, true)
}

func benchmarkAppend(b *testing.B, open Opener, writers int, shared bool) {
	s := open(b, nil)
	ctx := context.Background()
	keys := make([]rein.SessionKey, writers)
	for i := range keys {
		if shared && i > 0 {
			keys[i] = keys[0]
			continue
		}
		sess := &store.Session{Owner: "bench", ID: fmt.Sprintf("ses_bench_%04d", i)}
		if err := s.CreateSession(ctx, sess); err != nil {
			b.Fatal(err)
		}
		keys[i] = sess.Key()
	}
	var next atomic.Int64
	lat := make([][]time.Duration, writers)
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			ev := []rein.Event{{Type: rein.EventMessageDelta, RunID: "run_bench", Payload: benchPayload}}
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if _, err := s.AppendEvents(ctx, keys[w], store.Fence{}, ev); err != nil {
					failed.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*99/100])/float64(time.Millisecond), "p99_ms")
	}
}

// BenchmarkReplay measures reading a session's whole log of events
// events from the start, page events at a time, the way a reconnecting
// client catches up. One op is one full replay; it reports events/s.
func BenchmarkReplay(b *testing.B, open Opener, events, page int) {
	s := open(b, nil)
	ctx := context.Background()
	sess := &store.Session{Owner: "bench", ID: "ses_replay"}
	if err := s.CreateSession(ctx, sess); err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	evs := make([]rein.Event, 0, batch)
	for i := 0; i < events; i += batch {
		evs = evs[:0]
		for range min(batch, events-i) {
			evs = append(evs, rein.Event{Type: rein.EventMessageDelta, RunID: "run_bench", Payload: benchPayload})
		}
		if _, err := s.AppendEvents(ctx, sess.Key(), store.Fence{}, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		var after int64
		read := 0
		for {
			got, last, err := s.ReadEvents(ctx, sess.Key(), after, page)
			if err != nil {
				b.Fatal(err)
			}
			read += len(got)
			if len(got) == 0 || got[len(got)-1].Seq >= last {
				break
			}
			after = got[len(got)-1].Seq
		}
		if read != events {
			b.Fatalf("replay read %d events, want %d", read, events)
		}
	}
	b.ReportMetric(float64(events)*float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkEndedSince measures ListEndedSince for the 10 runs ended in the
// last minute, over a store that also holds old ended runs (in one
// session, written in Updates of 500). Run it with two values of old: its
// time per call should not follow old (Runs.ListEndedSince). settle, if
// set, is called once the old runs are stored, before the recent ones: a
// database backend refreshes its planner statistics there, as a store
// that has lived a while has them (the recent ends are newer than them).
func BenchmarkEndedSince(b *testing.B, open Opener, old int, settle func(store.Store)) {
	clock := NewClock(suiteStart)
	s := open(b, clock.Clock())
	ctx := context.Background()
	sess := &store.Session{Owner: "bench", ID: "ses_bench_ended"}
	if err := s.CreateSession(ctx, sess); err != nil {
		b.Fatal(err)
	}
	end := func(from, n int, at time.Time) {
		for lo := from; lo < from+n; lo += 500 {
			err := s.Update(ctx, sess.Key(), store.Fence{}, func(tx store.Tx) error {
				for i := lo; i < min(lo+500, from+n); i++ {
					err := tx.CreateRun(&store.RunRecord{Owner: sess.Owner, SessionID: sess.ID, ID: fmt.Sprintf("run_%07d", i),
						Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: at})
					if err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	end(0, old, clock.Now().Add(-48*time.Hour))
	if settle != nil {
		settle(s)
	}
	since := clock.Now().Add(-time.Minute)
	end(old, 10, clock.Now())
	b.ResetTimer()
	for range b.N {
		runs, err := s.ListEndedSince(ctx, since)
		if err != nil || len(runs) != 10 {
			b.Fatalf("ListEndedSince = %d runs, %v; want 10", len(runs), err)
		}
	}
}

// BenchmarkInbox measures ListInbox, a page of 100 of an owner's pending
// confirmations, over an owner with confirmations pending in sessions
// (10 per session, created a millisecond apart) and as many answered
// ones, beside another owner with as many. Each iteration reads the first
// page or a later one (alternately), and the benchmark reports the
// latency's p50 and p99 (ns) besides the mean. settle, if set, is called
// once the rows are stored (a database refreshes its statistics there).
func BenchmarkInbox(b *testing.B, open Opener, sessions, perSession int, settle func(store.Store)) {
	clock := NewClock(suiteStart)
	s := open(b, clock.Clock())
	ctx := context.Background()
	for _, owner := range []string{"bench", "other"} {
		for i := range sessions {
			title := fmt.Sprintf("session %d", i)
			sess := &store.Session{Owner: owner, ID: fmt.Sprintf("ses_%s_%05d", owner, i), Title: &title}
			if err := s.CreateSession(ctx, sess); err != nil {
				b.Fatal(err)
			}
			err := s.Update(ctx, sess.Key(), store.Fence{}, func(tx store.Tx) error {
				for j := range 2 * perSession {
					c := &store.Confirmation{Owner: owner, SessionID: sess.ID, RunID: "run_1", ToolUseID: fmt.Sprintf("call_%05d", j),
						Name: "write_note", Input: json.RawMessage(`{"text":"x"}`), CreatedAt: clock.Now().Add(time.Duration(i*2*perSession+j) * time.Millisecond)}
					if err := tx.CreateConfirmation(c); err != nil {
						return err
					}
					if j%2 == 1 {
						if _, err := tx.ResolveConfirmation(c.ToolUseID, true, ""); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	if settle != nil {
		settle(s)
	}
	first, err := s.ListInbox(ctx, "bench", store.InboxPage{Status: store.InboxPending, Limit: 100})
	if err != nil || len(first) != 100 {
		b.Fatalf("ListInbox = %d, %v; want 100", len(first), err)
	}
	mid := store.InboxCursorOf(first[len(first)-1].Confirmation)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		page := store.InboxPage{Status: store.InboxPending, Limit: 100}
		if i%2 == 1 {
			page.After = mid
		}
		t0 := time.Now()
		items, err := s.ListInbox(ctx, "bench", page)
		lat = append(lat, time.Since(t0))
		if err != nil || len(items) != 100 {
			b.Fatalf("ListInbox = %d, %v; want 100", len(items), err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
