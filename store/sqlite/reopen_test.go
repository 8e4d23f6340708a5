package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/store/storetest"
)

// Holding the file lock proves the process that left a lease is gone, so
// Open expires every lease at once: the session's turn can be taken over
// without waiting out the TTL, the lease is still there for recovery to
// find, and tokens keep growing.
func TestOpenExpiresLeasesOfEarlierProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	clock := storetest.NewClock(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	open := func() *sqlite.Store {
		s, err := sqlite.Open(t.Context(), path, sqlite.Options{Clock: clock.Clock()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s := open()
	key := rein.SessionKey{Owner: "o", ID: "s"}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	held, err := storetest.AcquireLease(t.Context(), s, key, "inst-a", "run_1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	clock.Advance(time.Second) // well inside the hour
	s = open()
	l, err := s.GetLease(t.Context(), key)
	if err != nil {
		t.Fatalf("GetLease after reopening: %v", err)
	}
	if l.Token != held.Token || l.RunID != "run_1" || l.ExpiresAt.After(clock.Now()) {
		t.Fatalf("lease after reopening = %+v, want token %d expired before %v", l, held.Token, clock.Now())
	}
	if _, err := s.RenewLease(t.Context(), held, time.Hour); !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("RenewLease of the earlier process's lease = %v, want lease lost", err)
	}
	next, err := storetest.AcquireLease(t.Context(), s, key, "inst-b", "run_1", time.Hour)
	if err != nil {
		t.Fatalf("AcquireLease after reopening: %v", err)
	}
	if next.Token <= held.Token {
		t.Fatalf("token after reopening %d <= %d", next.Token, held.Token)
	}
}
