package postgres

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// BenchmarkAdmissionReads measures what a remembered stop costs a message's
// admission (decision 0090): the admission's Update — create the run, log
// its two events — without a client id, with one (the client id's run and
// its remembered stop read in one batch, as the admission makes them), and
// with the stop read in a round trip of its own (what the shared batch
// saves). The three alternate in one run, one session each, one caller at a
// time: latencies, not throughput.
//
//	REIN_TEST_POSTGRES_DSN=... go test -run '^$' -bench AdmissionReads -benchtime 2000x ./store/postgres
func BenchmarkAdmissionReads(b *testing.B) {
	s := openStore(b, testDSN(b), Options{})
	ctx := b.Context()
	modes := []string{"no_client_id", "client_id", "stop_read_apart"}
	keys := map[string]rein.SessionKey{}
	for _, m := range modes {
		keys[m] = rein.SessionKey{Owner: "alice", ID: "ses_" + m}
		if err := s.CreateSession(ctx, &store.Session{Owner: "alice", ID: "ses_" + m}); err != nil {
			b.Fatal(err)
		}
	}
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		for _, m := range modes {
			run := &store.RunRecord{Owner: "alice", SessionID: keys[m].ID, ID: fmt.Sprintf("run_%s_%d", m, i), Status: rein.StatusQueued, Input: "hello"}
			if m != "no_client_id" {
				run.ClientID = fmt.Sprintf("c%d", i)
			}
			start := time.Now()
			err := s.Update(ctx, keys[m], store.Fence{}, func(tx store.Tx) error {
				if run.ClientID != "" {
					if _, err := tx.GetRunByClientID(run.ClientID); !errors.Is(err, rein.ErrNotFound) {
						return fmt.Errorf("client id's run: %v", err)
					}
					stopID := run.ClientID
					if m == "stop_read_apart" {
						stopID += "-apart" // not the one read with the run: a read of its own
					}
					if st, err := tx.RememberedStop(stopID); err != nil || st != nil {
						return fmt.Errorf("remembered stop: %v, %v", st, err)
					}
				}
				if err := tx.CreateRun(run); err != nil {
					return err
				}
				_, err := tx.AppendEvents(
					rein.NewEvent(rein.EventUserMessage, run.ID, rein.UserMessagePayload{Text: "hello", RunID: run.ID}),
					rein.NewEvent(rein.EventRunQueued, run.ID, rein.RunQueuedPayload{RunID: run.ID, Position: 1}))
				return err
			})
			lat[m] = append(lat[m], time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for _, m := range modes {
		l := lat[m]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2])/float64(time.Microsecond), m+"_p50_µs")
		b.ReportMetric(float64(l[len(l)*99/100])/float64(time.Microsecond), m+"_p99_µs")
	}
}
