package memory_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(tb testing.TB, clock rein.Clock) store.Store {
	s := memory.New(memory.WithClock(clock))
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

// WaitEvents must block on a channel, not poll: inside a synctest bubble a
// polling waiter would never be durably blocked, and synctest.Wait would
// not return while it spins.
func TestWaitEventsBlocksWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New()
		defer s.Close()
		ctx := context.Background()
		sess := &store.Session{Owner: "alice", ID: "ses_1"}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		woke := make(chan error, 1)
		go func() { woke <- s.WaitEvents(ctx, sess.Key(), 0) }()
		synctest.Wait()
		select {
		case err := <-woke:
			t.Fatalf("WaitEvents returned %v before any append", err)
		default:
		}
		if _, err := s.AppendEvents(ctx, sess.Key(), store.Fence{}, []rein.Event{{Type: rein.EventSystemMessage}}); err != nil {
			t.Fatal(err)
		}
		if err := <-woke; err != nil {
			t.Fatalf("WaitEvents after append = %v", err)
		}
	})
}

func BenchmarkAppend1(b *testing.B)        { storetest.BenchmarkAppend(b, open, 1) }
func BenchmarkAppend16(b *testing.B)       { storetest.BenchmarkAppend(b, open, 16) }
func BenchmarkAppendShared16(b *testing.B) { storetest.BenchmarkAppendShared(b, open, 16) }
func BenchmarkReplay100k(b *testing.B)     { storetest.BenchmarkReplay(b, open, 100_000, 1000) }

// ListEndedSince of 10 recent ends beside 1k and 100k old ones.
func BenchmarkEndedSince1k(b *testing.B)   { storetest.BenchmarkEndedSince(b, open, 1000, nil) }
func BenchmarkEndedSince100k(b *testing.B) { storetest.BenchmarkEndedSince(b, open, 100_000, nil) }
