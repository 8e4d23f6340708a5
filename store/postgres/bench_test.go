package postgres

import (
	"fmt"
	"testing"

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
