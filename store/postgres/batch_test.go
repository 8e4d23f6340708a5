package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

var reqSeq atomic.Int64

// newReq builds an append request as AppendEvents hands it to the writer.
func newReq(ctx context.Context, key rein.SessionKey, fence int64, runID string, n int) *appendReq {
	evs := make([]rein.Event, n)
	for i := range evs {
		evs[i] = rein.NewEvent(rein.EventSystemMessage, runID, rein.SystemMessagePayload{Text: fmt.Sprint(i)})
		evs[i].ID = fmt.Sprintf("evt_%s_%d_%d", key.ID, reqSeq.Add(1), i)
		evs[i].CreatedAt = dbTime(time.Now())
		evs[i].SessionID = key.ID
	}
	return &appendReq{ctx: ctx, key: key, fence: fence, evs: evs, done: make(chan error, 1)}
}

// One group-commit transaction carrying every kind of request: good ones
// for two sessions, a fenced one with the current token, one with a stale
// token, one for a missing session, one the database rejects outright
// (a NUL byte in a text column) and one whose caller has gone. Each fails or
// succeeds on its own; the good ones get gap-free seqs.
func TestBatchFailuresStayWithTheirRequest(t *testing.T) {
	dsn := testDSN(t)
	s := openStore(t, dsn, Options{})
	ctx := t.Context()
	k1, k2 := newSessionKey(t, s), newSessionKey(t, s)
	lease, err := storetest.AcquireLease(ctx, s, k2, "i1", "run_1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()

	var (
		good1   = newReq(ctx, k1, 0, "", 2)
		good2   = newReq(ctx, k1, 0, "", 3)
		fenced  = newReq(ctx, k2, lease.Token, "run_1", 2)
		stale   = newReq(ctx, k2, lease.Token+1, "run_1", 1) // not the current token
		missing = newReq(ctx, rein.SessionKey{Owner: "alice", ID: "ses_missing"}, 0, "", 1)
		poison  = newReq(ctx, k1, 0, "run_\x00", 1)
		left    = newReq(gone, k1, 0, "", 1)
	)
	s.commit([]*appendReq{good1, stale, poison, fenced, missing, good2, left})

	for _, r := range []*appendReq{good1, good2, fenced} {
		if err := <-r.done; err != nil {
			t.Fatalf("good request for %s failed: %v", r.key.ID, err)
		}
	}
	if err := <-stale.done; !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("stale fence: %v, want lease lost", err)
	}
	if err := <-missing.done; !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("missing session: %v, want not found", err)
	}
	if err := <-poison.done; rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("poisoned request: %v, want invalid_argument", err)
	}
	if err := <-left.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned request: %v, want context.Canceled", err)
	}

	all := readAll(t, s, k1)
	if len(all) != 5 {
		t.Fatalf("session 1 has %d events, want 5 (2 + 3)", len(all))
	}
	want := append(append([]rein.Event{}, good1.evs...), good2.evs...)
	for i, e := range all {
		if e.Seq != int64(i+1) || e.ID != want[i].ID {
			t.Fatalf("event %d = seq %d id %s, want seq %d id %s", i, e.Seq, e.ID, i+1, want[i].ID)
		}
	}
	if all := readAll(t, s, k2); len(all) != 2 || all[1].Seq != 2 {
		t.Fatalf("session 2 has %v, want the fenced request's 2 events", all)
	}
}

// The fence check and the write are one: while a fenced append's
// transaction holds the lease row, a takeover waits for it, and after the
// takeover the old token writes nothing.
func TestFencedAppendAfterTakeover(t *testing.T) {
	dsn := testDSN(t)
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	s := openStore(t, dsn, Options{Clock: now})
	ctx := t.Context()
	key := newSessionKey(t, s)
	old, err := storetest.AcquireLease(ctx, s, key, "i1", "run_1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ev := rein.NewEvent(rein.EventSystemMessage, "run_1", rein.SystemMessagePayload{Text: "x"})
	if _, err := s.AppendEvents(ctx, key, old.Fence(), []rein.Event{ev}); err != nil {
		t.Fatalf("append with the current token: %v", err)
	}
	clock = clock.Add(2 * time.Second) // expired…
	if _, err := s.AppendEvents(ctx, key, old.Fence(), []rein.Event{ev}); err != nil {
		t.Fatalf("append with an expired, untaken token: %v", err)
	}
	if _, err := storetest.AcquireLease(ctx, s, key, "i2", "run_2", time.Second); err != nil { // …and taken over
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, key, old.Fence(), []rein.Event{ev}); !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("append with a taken-over token: %v, want lease lost", err)
	}
	if last, _ := s.LastSeq(ctx, key); last != 2 {
		t.Fatalf("last seq %d, want 2", last)
	}
	if _, err := s.AppendEvents(ctx, key, store.Fence{}, nil); err != nil {
		t.Fatalf("empty append: %v", err)
	}
	if _, err := s.AppendEvents(ctx, key, old.Fence(), nil); !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("empty append with a stale token: %v, want lease lost", err)
	}
}

// One transaction with several sessions and, for one session, three fences
// (so three appendSQL rounds): every group gets its own gap-free seqs, and
// the refused ones write nothing.
func TestBatchRoundsAndRefusals(t *testing.T) {
	dsn := testDSN(t)
	s := openStore(t, dsn, Options{})
	ctx := t.Context()
	k1, k2, k3 := newSessionKey(t, s), newSessionKey(t, s), newSessionKey(t, s)
	lease, err := storetest.AcquireLease(ctx, s, k2, "i1", "run_1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var (
		a       = newReq(ctx, k1, 0, "", 2)
		fenced  = newReq(ctx, k2, lease.Token, "run_1", 3)
		plain   = newReq(ctx, k2, 0, "", 1)
		stale   = newReq(ctx, k2, lease.Token+1, "run_1", 4)
		c       = newReq(ctx, k3, 0, "", 1)
		missing = newReq(ctx, rein.SessionKey{Owner: "alice", ID: "ses_missing"}, 0, "", 1)
		fenced2 = newReq(ctx, k2, lease.Token, "run_1", 1)
	)
	batch := []*appendReq{c, stale, fenced, a, missing, plain, fenced2}
	if got := len(appendRounds(groupAppends(batch))); got != 3 {
		t.Fatalf("batch makes %d rounds, want 3 (k2 has three fences)", got)
	}
	s.commit(batch)
	for _, r := range []*appendReq{a, fenced, plain, c, fenced2} {
		if err := <-r.done; err != nil {
			t.Fatalf("request for %s (fence %d) failed: %v", r.key.ID, r.fence, err)
		}
	}
	if err := <-stale.done; !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("stale fence: %v, want lease lost", err)
	}
	if err := <-missing.done; !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("missing session: %v, want not found", err)
	}
	for _, tc := range []struct {
		key  rein.SessionKey
		reqs []*appendReq
	}{{k1, []*appendReq{a}}, {k2, []*appendReq{fenced, fenced2, plain}}, {k3, []*appendReq{c}}} {
		all := readAll(t, s, tc.key)
		byID := map[string]rein.Event{}
		for i, e := range all {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: event %d has seq %d", tc.key.ID, i, e.Seq)
			}
			byID[e.ID] = e
		}
		n := 0
		for _, r := range tc.reqs {
			for _, e := range r.evs {
				n++
				if got, ok := byID[e.ID]; !ok || got.Seq != e.Seq {
					t.Fatalf("%s: event %s acknowledged with seq %d, stored as %+v", tc.key.ID, e.ID, e.Seq, got)
				}
			}
		}
		if len(all) != n {
			t.Fatalf("%s has %d events, want %d", tc.key.ID, len(all), n)
		}
	}
}
