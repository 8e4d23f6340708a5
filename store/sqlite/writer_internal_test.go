package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// enqueue hands fn to the writer without waiting, as write would, and
// returns the channel its answer arrives on.
func enqueue(s *Store, atomic bool, fn func(tx *wtx) error) chan error {
	o := &op{ctx: context.Background(), doing: "test", fn: fn, atomic: atomic, done: make(chan error, 1)}
	s.ops <- o
	return o.done
}

func countRows(t *testing.T, s *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.rdb.QueryRowContext(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdWriter makes the writer busy inside an operation until release is
// closed, so that everything enqueued meanwhile lands in one next batch.
func holdWriter(t *testing.T, s *Store) (release func(), done chan error) {
	started, block := make(chan struct{}), make(chan struct{})
	done = enqueue(s, false, func(*wtx) error {
		close(started)
		<-block
		return nil
	})
	<-started
	return func() { close(block) }, done
}

// One operation of a batch fails after writing: its writes are rolled back
// to its savepoint, and the operations before and after it still commit.
func TestBatchFailureIsolatesTheFailingOperation(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release, held := holdWriter(t, s)
	boom := errors.New("boom after writing")
	insert := func(id string) func(tx *wtx) error {
		return func(tx *wtx) error {
			_, err := tx.exec(`INSERT INTO sessions (owner, id, metadata, created_at) VALUES ('o', ?, '{}', 0)`, id)
			return err
		}
	}
	before := enqueue(s, false, insert("before"))
	failing := enqueue(s, false, func(tx *wtx) error {
		if err := insert("failing")(tx); err != nil {
			return err
		}
		return boom
	})
	// An atomic operation whose single statement violates a constraint:
	// SQLite undoes that statement only.
	dup := enqueue(s, true, insert("before"))
	after := enqueue(s, true, insert("after"))
	release()
	for name, ch := range map[string]chan error{"held": held, "before": before, "after": after} {
		if err := <-ch; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := <-failing; !errors.Is(err, boom) {
		t.Fatalf("failing operation answered %v, want %v", err, boom)
	}
	if err := <-dup; !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("duplicate insert answered %v, want conflict", err)
	}
	for id, want := range map[string]int{"before": 1, "failing": 0, "after": 1} {
		if n := countRows(t, s, `SELECT count(*) FROM sessions WHERE id = ?`, id); n != want {
			t.Fatalf("session %q: %d rows, want %d", id, n, want)
		}
	}
	// The writer's cache was not corrupted: appends still work.
	if err := s.CreateSession(t.Context(), &store.Session{Owner: "o", ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(t.Context(), rein.SessionKey{Owner: "o", ID: "s"}, store.Fence{}, []rein.Event{{Type: "x"}}); err != nil {
		t.Fatal(err)
	}
}

// A lone operation that fails after writing leaves nothing behind.
func TestLoneFailingOperationRollsBack(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("boom")
	err = s.write(t.Context(), "test", func(tx *wtx) error {
		if _, err := tx.exec(`INSERT INTO sessions (owner, id, metadata, created_at) VALUES ('o', 'lone', '{}', 0)`); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("write = %v, want %v", err, boom)
	}
	if n := countRows(t, s, `SELECT count(*) FROM sessions`); n != 0 {
		t.Fatalf("%d sessions after a failed lone write", n)
	}
}

// Operations whose context ended while queued are not run.
func TestCancelledQueuedOperationIsSkipped(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release, held := holdWriter(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	o := &op{ctx: ctx, doing: "test", done: make(chan error, 1), fn: func(tx *wtx) error {
		_, err := tx.exec(`INSERT INTO sessions (owner, id, metadata, created_at) VALUES ('o', 'late', '{}', 0)`)
		return err
	}}
	s.ops <- o
	cancel()
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-o.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled operation answered %v", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM sessions`); n != 0 {
		t.Fatalf("a cancelled operation wrote %d sessions", n)
	}
}

// Foreign keys are enforced, and a write referring to a missing session
// reads as not found.
func TestForeignKeyViolationIsNotFound(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.write(t.Context(), "test", func(tx *wtx) error {
		_, err := tx.exec(`INSERT INTO events (session_pk, seq, id, run_id, type, payload, created_at) VALUES (42, 1, 'e', '', 't', '{}', 0)`)
		return err
	})
	if !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("insert for a missing session = %v, want not found", err)
	}
}
