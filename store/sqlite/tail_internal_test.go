package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

func tailSession(t *testing.T, s *Store, id string) rein.SessionKey {
	t.Helper()
	sess := &store.Session{Owner: "o", ID: id}
	if err := s.CreateSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	return sess.Key()
}

// failedBatch runs fn as an operation of a batch that then fails as a
// whole — the next operation ends the batch's transaction under the
// writer's feet — and returns fn's operation's error.
func failedBatch(t *testing.T, s *Store, fn func(tx *wtx) error) error {
	t.Helper()
	release, held := holdWriter(t, s)
	done := enqueue(s, false, fn)
	breaking := enqueue(s, false, func(tx *wtx) error {
		_, err := tx.s.wconn.ExecContext(t.Context(), "ROLLBACK")
		return err
	})
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	err := <-done
	<-breaking
	return err
}

func deltas(n int, text string) []rein.Event {
	evs := make([]rein.Event, n)
	for i := range evs {
		evs[i] = rein.NewEvent(rein.EventMessageDelta, "run_t", rein.MessageDeltaPayload{RunID: "run_t", Step: 1, Text: fmt.Sprintf("%s%d", text, i)})
	}
	return evs
}

// readAll reads key's log from after on, page by page, the way a stream
// catches up.
func readAll(t *testing.T, s *Store, key rein.SessionKey, after int64, page int) []rein.Event {
	t.Helper()
	var out []rein.Event
	for {
		evs, last, err := s.ReadEvents(t.Context(), key, after, page)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
		if len(evs) > 0 {
			after = evs[len(evs)-1].Seq
		}
		if after >= last {
			return out
		}
	}
}

// Live readers following appenders see every event once, in order, with
// the payload that was stored — whether a read is answered from the tail
// or from the database — and what they saw is the database's log.
func TestTailLiveReadersSeeTheLogExactly(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_tail")
	const writers, per = 8, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(1+i%3, fmt.Sprintf("w%d.%d.", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	total := 0
	for i := range per {
		total += 1 + i%3
	}
	total *= writers
	seen := make(chan []rein.Event, 4)
	for range 4 {
		go func() {
			var got []rein.Event
			cursor := int64(0)
			for len(got) < total {
				if err := s.WaitEvents(t.Context(), key, cursor); err != nil {
					t.Error(err)
					break
				}
				evs, _, err := s.ReadEvents(t.Context(), key, cursor, 7)
				if err != nil {
					t.Error(err)
					break
				}
				for _, e := range evs {
					if e.Seq != cursor+1 {
						t.Errorf("seq %d after %d", e.Seq, cursor)
					}
					cursor = e.Seq
				}
				got = append(got, evs...)
			}
			seen <- got
		}()
	}
	wg.Wait()
	// The database alone, bypassing the tail.
	s.tails.reset()
	want := readAll(t, s, key, 0, 1000)
	if len(want) != total {
		t.Fatalf("log has %d events, want %d", len(want), total)
	}
	for range 4 {
		got := <-seen
		if len(got) != len(want) {
			t.Fatalf("a reader saw %d events, want %d", len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Seq != w.Seq || g.ID != w.ID || g.Type != w.Type || g.RunID != w.RunID || string(g.Payload) != string(w.Payload) ||
				!g.CreatedAt.Equal(w.CreatedAt) || g.SessionID != w.SessionID {
				t.Fatalf("event %d: reader saw %+v, the database has %+v", i, g, w)
			}
		}
	}
}

// A read from before what the tail holds goes to the database and gets
// the whole log; a read inside it is served without it, even when the
// database cannot be read.
func TestTailServesOnlyWhatItHolds(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(t.Context(), file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := tailSession(t, s, "ses_tail")
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(5, "a")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A new Store knows no tail: the first 5 events are the database's.
	if s, err = Open(t.Context(), file, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.tails.lastSeq(key); ok {
		t.Fatal("a fresh store has a tail")
	}
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(tailEvents+10, "b")); err != nil {
		t.Fatal(err)
	}
	last, ok := s.tails.lastSeq(key)
	if !ok || last != int64(5+tailEvents+10) {
		t.Fatalf("tail last = %d, %v", last, ok)
	}
	if got := readAll(t, s, key, 0, 100); len(got) != 5+tailEvents+10 || got[0].Seq != 1 {
		t.Fatalf("read from 0: %d events", len(got))
	}
	// The tail keeps the last tailEvents: reading from there on needs no
	// database, so it works with the read pool closed.
	s.rdb.Close()
	from := int64(5 + 10)
	evs, got, err := s.ReadEvents(t.Context(), key, from, 1000)
	if err != nil || got != last || len(evs) != tailEvents || evs[0].Seq != from+1 {
		t.Fatalf("read inside the tail: %d events, last %d, err %v", len(evs), got, err)
	}
	if _, _, err := s.ReadEvents(t.Context(), key, from-1, 1000); err == nil {
		t.Fatal("a read before the tail did not go to the (closed) database")
	}
}

// A deleted session's tail goes with it: reads answer not found, and a
// session created again under the key starts empty.
func TestTailDroppedWithItsSession(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_tail")
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(3, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSession(t.Context(), key, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadEvents(t.Context(), key, 0, 10); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("read of a deleted session: %v", err)
	}
	if _, err := s.LastSeq(t.Context(), key); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("last seq of a deleted session: %v", err)
	}
	tailSession(t, s, "ses_tail")
	if evs, last, err := s.ReadEvents(t.Context(), key, 0, 10); err != nil || len(evs) != 0 || last != 0 {
		t.Fatalf("recreated session: %d events, last %d, %v", len(evs), last, err)
	}
}

// Events of an Update that fails are never on the tail, and a batch that
// fails as a whole drops every tail.
func TestTailHoldsOnlyCommittedEvents(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_tail")
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(2, "a")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.AppendEvents(deltas(3, "x")...); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update: %v", err)
	}
	if last, _ := s.tails.lastSeq(key); last != 2 {
		t.Fatalf("tail last = %d after a failed Update, want 2", last)
	}
	if evs, last, err := s.ReadEvents(t.Context(), key, 0, 10); err != nil || len(evs) != 2 || last != 2 {
		t.Fatalf("after a failed Update: %d events, last %d, %v", len(evs), last, err)
	}
	// A whole batch fails: nothing the writer believed is kept.
	err = failedBatch(t, s, func(tx *wtx) error {
		si, err := tx.fenced(key, store.Fence{})
		if err != nil {
			return err
		}
		out, err := prepareEvents(key, deltas(1, "y"))
		if err != nil {
			return err
		}
		return tx.appendEvents(key, si, out)
	})
	if err == nil {
		t.Fatal("the append of a failed batch succeeded")
	}
	if _, ok := s.tails.lastSeq(key); ok {
		t.Fatal("a tail survived a failed batch")
	}
	if evs, last, err := s.ReadEvents(t.Context(), key, 0, 10); err != nil || len(evs) != 2 || last != 2 {
		t.Fatalf("after a failed batch: %d events, last %d, %v", len(evs), last, err)
	}
	// The next append starts a tail again.
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(1, "z")); err != nil {
		t.Fatal(err)
	}
	if last, ok := s.tails.lastSeq(key); !ok || last != 3 {
		t.Fatalf("tail after the next append: %d, %v", last, ok)
	}
}

// A session just created has an empty tail: a stream opened on it reads
// and waits without asking the database, and the first append continues
// the tail. Empty tails count against the bound of all tails, so sessions
// that never log are not kept for ever.
func TestTailOfNewSession(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_new")
	if last, ok := s.tails.lastSeq(key); !ok || last != 0 {
		t.Fatalf("tail of a new session: last %d, ok %v", last, ok)
	}
	if evs, last, ok := s.tails.read(key, 0, 10); !ok || len(evs) != 0 || last != 0 {
		t.Fatalf("read from the tail of a new session: %d events, last %d, ok %v", len(evs), last, ok)
	}
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(2, "x")); err != nil {
		t.Fatal(err)
	}
	evs, last, ok := s.tails.read(key, 0, 10)
	if !ok || len(evs) != 2 || last != 2 {
		t.Fatalf("after the first append the tail holds %d events, last %d, ok %v", len(evs), last, ok)
	}

	var ts tails
	n := tailsBytes/tailBase + 10
	for i := range n {
		ts.created(&store.Session{Owner: "o", ID: fmt.Sprintf("ses_%d", i)})
	}
	if ts.bytes > tailsBytes || ts.lru.Len() > tailsBytes/(tailBase+sessionFactBase) {
		t.Fatalf("%d empty tails kept, %d bytes counted; the bound is %d bytes", ts.lru.Len(), ts.bytes, tailsBytes)
	}
	if _, ok := ts.lastSeq(rein.SessionKey{Owner: "o", ID: "ses_0"}); ok {
		t.Fatal("the least recently created empty tail was kept beyond the bound")
	}
}
