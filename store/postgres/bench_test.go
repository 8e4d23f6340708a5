package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// The workloads are storetest's, so these figures compare directly with the
// other backends'. Run with:
//
//	REIN_TEST_POSTGRES_DSN=... go test -run '^$' -bench Append -benchtime 20000x ./store/postgres
//	REIN_TEST_POSTGRES_DSN=... go test -run '^$' -bench Replay -benchtime 5x ./store/postgres

func benchOpener(b *testing.B) storetest.Opener {
	dsn := testDSN(b)
	return func(tb testing.TB, clock rein.Clock) store.Store {
		return openStore(tb, dsn, Options{Clock: clock})
	}
}

// BenchmarkAppend: each writer appends one event per call to its own
// session; group commit batches them across sessions.
func BenchmarkAppend(b *testing.B) {
	open := benchOpener(b)
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { storetest.BenchmarkAppend(b, open, writers) })
	}
}

// BenchmarkAppendShared: every writer appends to one session, the case a
// counter row held through commit would serialise without batching.
func BenchmarkAppendShared(b *testing.B) {
	open := benchOpener(b)
	for _, writers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) { storetest.BenchmarkAppendShared(b, open, writers) })
	}
}

// BenchmarkReplay reads a 100k-event log after cursor 0, 1000 events a page
// (the HTTP API's largest page).
func BenchmarkReplay(b *testing.B) {
	storetest.BenchmarkReplay(b, benchOpener(b), 100_000, 1000)
}

// BenchmarkUpdate measures one lifecycle transition as the sessions service
// makes it — create a run and append two events, atomically — against the
// same writes made as two separate calls (not atomic), on one session, one
// caller at a time: the latency of a transition, not throughput.
//
//	REIN_TEST_POSTGRES_DSN=... go test -run '^$' -bench Update -benchtime 3000x -count 3 ./store/postgres
func BenchmarkUpdate(b *testing.B) {
	dsn := testDSN(b)
	for _, mode := range []string{"update", "separate"} {
		b.Run(mode, func(b *testing.B) {
			s := openStore(b, dsn, Options{})
			ctx := b.Context()
			key := rein.SessionKey{Owner: "alice", ID: "ses_bench"}
			if err := s.CreateSession(ctx, &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
				b.Fatal(err)
			}
			evs := func(runID string) []rein.Event {
				return []rein.Event{
					rein.NewEvent(rein.EventUserMessage, runID, rein.UserMessagePayload{Text: "hello"}),
					rein.NewEvent(rein.EventRunQueued, runID, rein.RunQueuedPayload{RunID: runID}),
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				run := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: fmt.Sprintf("run_%d", i), Status: rein.StatusQueued, Input: "hello"}
				start := time.Now()
				var err error
				if mode == "update" {
					err = s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
						if err := tx.CreateRun(run); err != nil {
							return err
						}
						_, err := tx.AppendEvents(evs(run.ID)...)
						return err
					})
				} else if err = storetest.CreateRun(ctx, s, run); err == nil {
					_, err = s.AppendEvents(ctx, key, store.Fence{}, evs(run.ID))
				}
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2])/float64(time.Microsecond), "p50_µs")
			b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Microsecond), "p99_µs")
		})
	}
}

// BenchmarkEndedSince lists 10 recent ends beside 1k and 100k old ones:
// the index keeps the two alike. The old runs are analyzed, as autovacuum
// would have done in a store that has lived; the recent ends are newer
// than those statistics, as they always are.
func BenchmarkEndedSince(b *testing.B) {
	analyze := func(s store.Store) {
		if _, err := s.(*Store).pool.Exec(context.Background(), `ANALYZE runs`); err != nil {
			b.Fatal(err)
		}
	}
	for _, old := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("old=%d", old), func(b *testing.B) { storetest.BenchmarkEndedSince(b, benchOpener(b), old, analyze) })
	}
}

// BenchmarkInbox: a page of 100 of 10,000 pending confirmations in 1,000
// sessions (beside as many answered, and another owner's), analyzed as a
// store that has lived would be.
func BenchmarkInbox(b *testing.B) {
	analyze := func(s store.Store) {
		if _, err := s.(*Store).pool.Exec(context.Background(), `ANALYZE confirmations; ANALYZE sessions`); err != nil {
			b.Fatal(err)
		}
	}
	storetest.BenchmarkInbox(b, benchOpener(b), 1000, 10, analyze)
}
