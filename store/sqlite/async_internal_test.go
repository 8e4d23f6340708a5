package sqlite

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// An asynchronous append answers once, after its commit, with the events
// as stored; what it was given may be reused at once; a bad payload is
// refused before anything is queued; a stale fence is refused as
// AppendEvents refuses it.
func TestAppendEventsAsync(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sess := &store.Session{Owner: "o", ID: "ses_async"}
	if err := s.CreateSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		evs []rein.Event
		err error
	}
	got := make(chan answer, 4)
	then := func(evs []rein.Event, err error) { got <- answer{evs, err} }

	release, held := holdWriter(t, s)
	evs := []rein.Event{rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: "a"}),
		rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: "b"})}
	s.AppendEventsAsync(sess.Key(), store.Fence{}, evs, then)
	evs[0].Payload[2] = 'X' // the caller's bytes are its own once the call returned
	select {
	case a := <-got:
		t.Fatalf("answered (%v) before the writer ran the append", a.err)
	default:
	}
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil || len(a.evs) != 2 || a.evs[0].Seq != 1 || a.evs[1].Seq != 2 {
		t.Fatalf("answer %+v", a)
	}
	stored, last, err := s.ReadEvents(t.Context(), sess.Key(), 0, 10)
	if err != nil || last != 2 || string(stored[0].Payload) != `{"text":"a"}` {
		t.Fatalf("log %+v, last %d, err %v", stored, last, err)
	}

	s.AppendEventsAsync(sess.Key(), store.Fence{}, []rein.Event{{Type: rein.EventSystemMessage, Payload: json.RawMessage(`{"text":`)}}, then)
	if a := <-got; !errors.Is(a.err, rein.ErrInvalidArgument) {
		t.Fatalf("bad payload: %v", a.err)
	}
	s.AppendEventsAsync(sess.Key(), store.Fence{Token: 99}, evs[1:], then)
	if a := <-got; a.err == nil {
		t.Fatal("a fence no lease matches: no error")
	}
	if _, last, _ := s.ReadEvents(t.Context(), sess.Key(), 0, 10); last != 2 {
		t.Fatalf("refused appends changed the log: last seq %d", last)
	}
}

// Appends queued from many goroutines while the store closes are each
// answered exactly once: committed, or refused as the store being closed.
// None is left unanswered in the queue.
func TestAppendEventsAsyncAnsweredThroughClose(t *testing.T) {
	for round := range 20 {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "rein.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		sess := &store.Session{Owner: "o", ID: "ses_close"}
		if err := s.CreateSession(t.Context(), sess); err != nil {
			t.Fatal(err)
		}
		const senders, each = 8, 50
		var answered, committed atomic.Int64
		var all sync.WaitGroup
		all.Add(senders * each)
		var sent sync.WaitGroup
		for range senders {
			sent.Add(1)
			go func() {
				defer sent.Done()
				for range each {
					var once atomic.Bool
					s.AppendEventsAsync(sess.Key(), store.Fence{}, []rein.Event{rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: "x"})},
						func(_ []rein.Event, err error) {
							if once.Swap(true) {
								t.Error("answered twice")
							}
							if err == nil {
								committed.Add(1)
							} else if !errors.Is(err, rein.ErrUnavailable) {
								t.Errorf("answer: %v", err)
							}
							answered.Add(1)
							all.Done()
						})
				}
			}()
		}
		if round%2 == 0 {
			sent.Wait() // and then close; otherwise close while sending
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		sent.Wait()
		all.Wait()
		if n := answered.Load(); n != senders*each {
			t.Fatalf("round %d: %d answers, want %d", round, n, senders*each)
		}
		s2, err := Open(t.Context(), s.file, Options{})
		if err != nil {
			t.Fatal(err)
		}
		last, err := s2.LastSeq(t.Context(), sess.Key())
		s2.Close()
		if err != nil || last != committed.Load() {
			t.Fatalf("round %d: log holds %d events, %d appends were answered as committed (%v)", round, last, committed.Load(), err)
		}
	}
}
