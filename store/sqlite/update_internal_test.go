package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// appendOp is AppendEvents as a raw operation, to queue into a batch.
func appendOp(key rein.SessionKey, evs ...rein.Event) func(tx *wtx) error {
	return func(tx *wtx) error {
		si, err := tx.fenced(key, store.Fence{})
		if err != nil {
			return err
		}
		out, err := prepareEvents(key, evs)
		if err != nil {
			return err
		}
		return tx.appendEvents(key, si, out)
	}
}

func wantSeqs(t *testing.T, s *Store, key rein.SessionKey, want int) {
	t.Helper()
	evs, last, err := s.ReadEvents(t.Context(), key, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if last != int64(want) || len(evs) != want {
		t.Fatalf("log has %d events, last seq %d; want %d", len(evs), last, want)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the writer's cache ran ahead of the database", i, e.Seq)
		}
	}
}

// An Update that appends and then fails inside a batch is rolled back to
// its savepoint while the batch commits; the writer's cache must go back
// with it, or the next append in the same batch would number its events
// after ones that were never stored.
func TestFailedUpdateInBatchLeavesCacheAsCommitted(t *testing.T) {
	s := openTemp(t)
	key := rein.SessionKey{Owner: "o", ID: "s"}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	l, err := storetest.AcquireLease(t.Context(), s, key, "inst", "run_1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	release, held := holdWriter(t, s)
	o, finish := s.updateOp(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.AppendEvents(rein.Event{Type: "x"}, rein.Event{Type: "y"}); err != nil {
			return err
		}
		if err := tx.AppendHistory(rein.Message{Role: rein.RoleUser, Text: "lost"}); err != nil {
			return err
		}
		if err := tx.ReleaseLease(l.Token); err != nil {
			return err
		}
		return boom
	})
	s.ops <- o
	after := enqueue(s, true, appendOp(key, rein.Event{Type: "z"}))
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := finish(<-o.done); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want %v", err, boom)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, s, key, 1)
	// The history length and the lease token in the cache went back too.
	if err := storetest.AppendHistory(t.Context(), s, key, l.Fence(), []rein.Message{{Role: rein.RoleUser, Text: "kept"}}); err != nil {
		t.Fatalf("AppendHistory with the lease the failed Update released: %v", err)
	}
	hist, err := s.LoadHistory(t.Context(), key)
	if err != nil || len(hist) != 1 || hist[0].Text != "kept" {
		t.Fatalf("history = %+v, %v; want the one kept message", hist, err)
	}
}

// A lone failing Update is rolled back with its transaction: the same
// holds without a savepoint.
func TestLoneFailedUpdateLeavesCacheAsCommitted(t *testing.T) {
	s := openTemp(t)
	key := rein.SessionKey{Owner: "o", ID: "s"}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.AppendEvents(rein.Event{Type: "x"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want %v", err, boom)
	}
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, []rein.Event{{Type: "y"}}); err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, s, key, 1)
}

// A panic in an Update's function is raised in the caller, not in the
// writer goroutine: the store keeps working and nothing fn wrote stays.
func TestUpdatePanicReachesCallerAndWritesNothing(t *testing.T) {
	s := openTemp(t)
	key := rein.SessionKey{Owner: "o", ID: "s"}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "fn bug" {
				t.Fatalf("recovered %v, want the function's panic", r)
			}
		}()
		s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
			if _, err := tx.AppendEvents(rein.Event{Type: "x"}); err != nil {
				return err
			}
			panic("fn bug")
		})
	}()
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, []rein.Event{{Type: "y"}}); err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, s, key, 1)
}

// A Tx kept past its Update refuses to write into some later batch.
func TestTxUsedAfterUpdateFails(t *testing.T) {
	s := openTemp(t)
	key := rein.SessionKey{Owner: "o", ID: "s"}
	if err := s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	var kept store.Tx
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error { kept = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.AppendEvents(rein.Event{Type: "late"}); err == nil {
		t.Fatal("AppendEvents on a Tx after its Update returned succeeded")
	}
	wantSeqs(t, s, key, 0)
}
