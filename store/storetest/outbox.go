package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Outbox/RegisterDestinationOnce", testOutboxRegister},
	test{"Outbox/EnqueueMovesTheCursorOnce", testOutboxEnqueue},
	test{"Outbox/ClaimsOnlyEachStreamsHead", testOutboxHeads},
	test{"Outbox/ClaimLapsesAndFencesTheOldAttempt", testOutboxClaimLapse},
	test{"Outbox/FailedLetsLaterOnesGoAndRetries", testOutboxGiveUp},
	test{"Outbox/OwnerScopedPages", testOutboxOwner},
	test{"Outbox/ConcurrentClaimersShareNothing", testOutboxConcurrent},
	test{"Outbox/DeletedSessionForgotten", testOutboxDelete},
)

// outboxOf returns the store's outbox or skips: the capability is
// optional, but every backend of this module has it.
func outboxOf(t *T) store.Outbox {
	t.Helper()
	ob, ok := t.S.(store.Outbox)
	if !ok {
		t.Skip("the store has no outbox")
	}
	return ob
}

// appendN appends n events to key and returns the last seq.
func (t *T) appendN(key rein.SessionKey, n int) int64 {
	t.Helper()
	evs := make([]rein.Event, n)
	for i := range evs {
		evs[i] = ev("user.supplement", "", fmt.Sprintf(`{"i":%d}`, i))
	}
	out, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, evs)
	must(t, err, "AppendEvents")
	return out[len(out)-1].Seq
}

// enqueueAll enqueues a delivery for every event of key past its cursor
// for dest and returns them.
func enqueueAll(t *T, ob store.Outbox, key rein.SessionKey, dest string) []*store.Delivery {
	t.Helper()
	lags, err := ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	for _, l := range lags {
		if l.Key != key {
			continue
		}
		var ds []*store.Delivery
		for seq := l.Cursor + 1; seq <= l.LastSeq; seq++ {
			ds = append(ds, &store.Delivery{Seq: seq, Type: "user.supplement", Body: []byte(fmt.Sprintf(`{"seq":%d}`, seq))})
		}
		must(t, ob.EnqueueDeliveries(t.Ctx, key, dest, l.Cursor, l.LastSeq, ds), "EnqueueDeliveries")
		return ds
	}
	t.Fatalf("OutboxLag(%s) has no lag for %v: %+v", dest, key, lags)
	return nil
}

func claim(t *T, ob store.Outbox, dest string, ttl time.Duration) []*store.Delivery {
	t.Helper()
	got, err := ob.ClaimDeliveries(t.Ctx, dest, "i1", ttl, 0)
	must(t, err, "ClaimDeliveries")
	if got == nil {
		t.Fatal("ClaimDeliveries returned nil")
	}
	return got
}

func seqsOf(ds []*store.Delivery) map[string][]int64 {
	out := map[string][]int64{}
	for _, d := range ds {
		out[d.SessionID] = append(out[d.SessionID], d.Seq)
	}
	return out
}

func testOutboxRegister(t *T) {
	ob := outboxOf(t)
	at, err := ob.RegisterDestination(t.Ctx, "https://a.example/hook")
	must(t, err, "RegisterDestination")
	wantTime(t, at, t.now(), "first registration")
	t.Clock.Advance(time.Hour)
	again, err := ob.RegisterDestination(t.Ctx, "https://a.example/hook")
	must(t, err, "RegisterDestination again")
	wantTime(t, again, at, "second registration")
	other, err := ob.RegisterDestination(t.Ctx, "https://b.example/hook")
	must(t, err, "RegisterDestination b")
	wantTime(t, other, t.now(), "other destination")
}

func testOutboxEnqueue(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	key := t.newSession("alice")
	quiet := t.newSession("alice")
	_ = quiet
	lags, err := ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	if len(lags) != 0 {
		t.Fatalf("lag of empty logs = %+v, want none", lags)
	}
	last := t.appendN(key, 3)
	lags, err = ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	if len(lags) != 1 || lags[0].Key != key || lags[0].Cursor != 0 || lags[0].LastSeq != last {
		t.Fatalf("lag = %+v, want %v from 0 to %d", lags, key, last)
	}
	// Only events 1 and 3 match: the cursor passes all three.
	ds := []*store.Delivery{{Seq: 1, Type: "user.supplement", Body: []byte(`{"a":1}`)}, {Seq: 3, Type: "user.supplement", Body: []byte(`{"a":3}`)}}
	must(t, ob.EnqueueDeliveries(t.Ctx, key, dest, 0, last, ds), "EnqueueDeliveries")
	if ds[0].ID == "" || ds[1].ID == "" || ds[0].ID == ds[1].ID {
		t.Fatalf("ids = %q, %q: want two fresh ids", ds[0].ID, ds[1].ID)
	}
	// A second enqueuer that read the same lag finds the cursor moved and
	// writes nothing.
	dup := []*store.Delivery{{Seq: 2, Type: "user.supplement", Body: []byte(`{}`)}}
	if err := ob.EnqueueDeliveries(t.Ctx, key, dest, 0, last, dup); rein.CodeOf(err) != rein.CodeConflict {
		t.Fatalf("enqueue from a moved cursor: %v, want conflict", err)
	}
	lags, err = ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	if len(lags) != 0 {
		t.Fatalf("lag after enqueue = %+v, want none", lags)
	}
	// Another destination has its own cursor.
	lags, err = ob.OutboxLag(t.Ctx, "https://b.example/hook", 0)
	must(t, err, "OutboxLag b")
	if len(lags) != 1 || lags[0].Cursor != 0 {
		t.Fatalf("lag of another destination = %+v", lags)
	}
	list, err := ob.ListDeliveries(t.Ctx, "alice", store.DeliveryQuery{})
	must(t, err, "ListDeliveries")
	if len(list) != 2 {
		t.Fatalf("%d deliveries, want 2", len(list))
	}
	d, err := ob.GetDelivery(t.Ctx, "alice", ds[1].ID)
	must(t, err, "GetDelivery")
	if d.Destination != dest || d.Owner != "alice" || d.SessionID != key.ID || d.Seq != 3 || d.Type != "user.supplement" ||
		string(d.Body) != `{"a":3}` || d.Status != store.DeliveryPending || d.Attempts != 0 || d.LastError != "" || d.Claim != 0 {
		t.Fatalf("delivery = %+v", d)
	}
	wantTime(t, d.CreatedAt, t.now(), "CreatedAt")
	wantTime(t, d.NextAt, t.now(), "NextAt")
	if !d.FirstAttemptAt.IsZero() {
		t.Fatalf("FirstAttemptAt = %v before any attempt", d.FirstAttemptAt)
	}
	// More events: the lag starts at the cursor.
	last2 := t.appendN(key, 2)
	lags, err = ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	if len(lags) != 1 || lags[0].Cursor != last || lags[0].LastSeq != last2 {
		t.Fatalf("lag = %+v, want from %d to %d", lags, last, last2)
	}
	if err := ob.EnqueueDeliveries(t.Ctx, rein.SessionKey{Owner: "alice", ID: "nope"}, dest, 0, 1, nil); rein.CodeOf(err) != rein.CodeNotFound {
		t.Fatalf("enqueue on a missing session: %v, want not found", err)
	}
}

func testOutboxHeads(t *T) {
	ob := outboxOf(t)
	const dest, other = "https://a.example/hook", "https://b.example/hook"
	k1, k2 := t.newSession("alice"), t.newSession("bob")
	t.appendN(k1, 2)
	t.appendN(k2, 2)
	enqueueAll(t, ob, k1, dest)
	enqueueAll(t, ob, k2, dest)
	enqueueAll(t, ob, k1, other)

	got := claim(t, ob, dest, 30*time.Second)
	if s := seqsOf(got); len(got) != 2 || s[k1.ID][0] != 1 || s[k2.ID][0] != 1 {
		t.Fatalf("first claim = %v, want seq 1 of both sessions", s)
	}
	for _, d := range got {
		if d.Claim != 1 {
			t.Fatalf("claim token = %d, want 1", d.Claim)
		}
		wantTime(t, d.ClaimedAt, t.now(), "ClaimedAt")
		wantTime(t, d.FirstAttemptAt, t.now(), "FirstAttemptAt")
		wantTime(t, d.ClaimUntil, t.now().Add(30*time.Second), "ClaimUntil")
	}
	if again := claim(t, ob, dest, 30*time.Second); len(again) != 0 {
		t.Fatalf("claim while the heads are claimed = %v, want none (seq 2 waits for seq 1)", seqsOf(again))
	}
	// The other destination never waits for this one.
	if o := claim(t, ob, other, 30*time.Second); len(o) != 1 || o[0].Seq != 1 {
		t.Fatalf("other destination's claim = %v", seqsOf(o))
	}
	var h1 *store.Delivery
	for _, d := range got {
		if d.SessionID == k1.ID {
			h1 = d
		}
	}
	// A failed attempt: pending again, due in 1 s; seq 2 still waits.
	t.Clock.Advance(2 * time.Second)
	after, err := ob.RecordAttempt(t.Ctx, h1.ID, h1.Claim, store.Attempt{Error: "500 Internal Server Error", RetryIn: time.Second})
	must(t, err, "RecordAttempt failed")
	if after.Status != store.DeliveryPending || after.Attempts != 1 || after.LastError != "500 Internal Server Error" {
		t.Fatalf("after a failed attempt = %+v", after)
	}
	wantTime(t, after.NextAt, t.now().Add(time.Second), "NextAt")
	if again := claim(t, ob, dest, 30*time.Second); len(again) != 0 {
		t.Fatalf("claim before the retry is due = %v, want none", seqsOf(again))
	}
	t.Clock.Advance(time.Second)
	re := claim(t, ob, dest, 30*time.Second)
	if len(re) != 1 || re[0].ID != h1.ID || re[0].Claim != 2 {
		t.Fatalf("claim of the due retry = %+v, want %s with claim 2", re, h1.ID)
	}
	wantTime(t, re[0].FirstAttemptAt, h1.FirstAttemptAt, "FirstAttemptAt kept across retries")
	done, err := ob.RecordAttempt(t.Ctx, h1.ID, re[0].Claim, store.Attempt{Delivered: true})
	must(t, err, "RecordAttempt delivered")
	if done.Status != store.DeliveryDelivered || done.Attempts != 2 || done.LastError != "" || !done.NextAt.IsZero() {
		t.Fatalf("delivered = %+v", done)
	}
	if _, err := ob.RecordAttempt(t.Ctx, h1.ID, re[0].Claim, store.Attempt{Delivered: true}); !isLeaseLost(err) {
		t.Fatalf("recording twice: %v, want lease lost", err)
	}
	next := claim(t, ob, dest, 30*time.Second)
	if len(next) != 1 || next[0].SessionID != k1.ID || next[0].Seq != 2 {
		t.Fatalf("claim after seq 1 was delivered = %v, want seq 2 of %s", seqsOf(next), k1.ID)
	}
}

func isLeaseLost(err error) bool {
	return err != nil && rein.CodeOf(err) == rein.CodeConflict && errors.Is(err, rein.ErrLeaseLost)
}

func testOutboxClaimLapse(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	key := t.newSession("alice")
	t.appendN(key, 1)
	enqueueAll(t, ob, key, dest)
	first := claim(t, ob, dest, 10*time.Second)
	if len(first) != 1 {
		t.Fatalf("claim = %d deliveries", len(first))
	}
	t.Clock.Advance(9 * time.Second)
	if got := claim(t, ob, dest, 10*time.Second); len(got) != 0 {
		t.Fatal("a live claim was taken over")
	}
	t.Clock.Advance(2 * time.Second)
	second := claim(t, ob, dest, 10*time.Second)
	if len(second) != 1 || second[0].ID != first[0].ID || second[0].Claim <= first[0].Claim {
		t.Fatalf("claim after the lapse = %+v", second)
	}
	if _, err := ob.RecordAttempt(t.Ctx, first[0].ID, first[0].Claim, store.Attempt{Delivered: true}); !isLeaseLost(err) {
		t.Fatalf("the lapsed claim's result: %v, want lease lost", err)
	}
	d, err := ob.GetDelivery(t.Ctx, "alice", first[0].ID)
	must(t, err, "GetDelivery")
	if d.Status != store.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("the lapsed claim wrote: %+v", d)
	}
	if _, err := ob.RecordAttempt(t.Ctx, first[0].ID, second[0].Claim, store.Attempt{Delivered: true}); err != nil {
		t.Fatalf("the current claim's result: %v", err)
	}
}

func testOutboxGiveUp(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	key := t.newSession("alice")
	t.appendN(key, 2)
	ds := enqueueAll(t, ob, key, dest)
	h := claim(t, ob, dest, 30*time.Second)
	failed, err := ob.RecordAttempt(t.Ctx, h[0].ID, h[0].Claim, store.Attempt{Error: "timeout", GiveUp: true})
	must(t, err, "RecordAttempt give up")
	if failed.Status != store.DeliveryFailed || failed.Attempts != 1 || failed.LastError != "timeout" || !failed.NextAt.IsZero() {
		t.Fatalf("failed = %+v", failed)
	}
	next := claim(t, ob, dest, 30*time.Second)
	if len(next) != 1 || next[0].ID != ds[1].ID {
		t.Fatalf("after a failure the next one goes on: %+v", next)
	}
	must2(t, ob, next[0], store.Attempt{Delivered: true})
	list, err := ob.ListDeliveries(t.Ctx, "alice", store.DeliveryQuery{Status: store.DeliveryFailed})
	must(t, err, "ListDeliveries failed")
	if len(list) != 1 || list[0].ID != ds[0].ID {
		t.Fatalf("failed list = %+v", list)
	}
	t.Clock.Advance(time.Minute)
	re, err := ob.RetryDelivery(t.Ctx, "alice", ds[0].ID)
	must(t, err, "RetryDelivery")
	if re.Status != store.DeliveryPending || !re.FirstAttemptAt.IsZero() || re.Attempts != 1 {
		t.Fatalf("retried = %+v", re)
	}
	wantTime(t, re.NextAt, t.now(), "retried NextAt")
	again := claim(t, ob, dest, 30*time.Second)
	if len(again) != 1 || again[0].ID != ds[0].ID {
		t.Fatalf("claim after retry = %+v", again)
	}
	wantTime(t, again[0].FirstAttemptAt, t.now(), "a retry's fresh FirstAttemptAt")
}

func must2(t *T, ob store.Outbox, d *store.Delivery, a store.Attempt) {
	t.Helper()
	if _, err := ob.RecordAttempt(t.Ctx, d.ID, d.Claim, a); err != nil {
		t.Fatalf("RecordAttempt(%s): %v", d.ID, err)
	}
}

func testOutboxOwner(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	ka, kb := t.newSession("alice"), t.newSession("bob")
	t.appendN(ka, 5)
	t.appendN(kb, 1)
	da := enqueueAll(t, ob, ka, dest)
	db := enqueueAll(t, ob, kb, dest)
	if _, err := ob.GetDelivery(t.Ctx, "alice", db[0].ID); rein.CodeOf(err) != rein.CodeNotFound {
		t.Fatalf("another owner's delivery: %v, want not found", err)
	}
	if _, err := ob.RetryDelivery(t.Ctx, "alice", db[0].ID); rein.CodeOf(err) != rein.CodeNotFound {
		t.Fatalf("retrying another owner's delivery: %v, want not found", err)
	}
	var seen []string
	after := ""
	for {
		page, err := ob.ListDeliveries(t.Ctx, "alice", store.DeliveryQuery{After: after, Limit: 2})
		must(t, err, "ListDeliveries")
		if len(page) > 2 {
			t.Fatalf("page of %d, limit 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			if d.Owner != "alice" {
				t.Fatalf("alice's list has %+v", d)
			}
			seen = append(seen, d.ID)
		}
		after = page[len(page)-1].ID
	}
	if len(seen) != len(da) {
		t.Fatalf("pages hold %d deliveries, want %d", len(seen), len(da))
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("pages not ordered by id: %v", seen)
		}
	}
	none, err := ob.ListDeliveries(t.Ctx, "alice", store.DeliveryQuery{Status: store.DeliveryDelivered})
	must(t, err, "ListDeliveries delivered")
	if none == nil || len(none) != 0 {
		t.Fatalf("delivered list = %v, want [] (never nil)", none)
	}
}

func testOutboxConcurrent(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	const sessions = 8
	for range sessions {
		key := t.newSession("alice")
		t.appendN(key, 1)
		enqueueAll(t, ob, key, dest)
	}
	var (
		mu  sync.Mutex
		got = map[string]int{}
	)
	parallel(6, func(i int) {
		ds, err := ob.ClaimDeliveries(t.Ctx, dest, fmt.Sprintf("i%d", i), time.Minute, 3)
		if err != nil {
			t.Errorf("ClaimDeliveries: %v", err)
			return
		}
		mu.Lock()
		for _, d := range ds {
			got[d.ID]++
		}
		mu.Unlock()
	})
	for dID, n := range got {
		if n != 1 {
			t.Fatalf("delivery %s claimed %d times", dID, n)
		}
	}
	if len(got) != sessions {
		t.Fatalf("%d deliveries claimed, want all %d", len(got), sessions)
	}
}

func testOutboxDelete(t *T) {
	ob := outboxOf(t)
	const dest = "https://a.example/hook"
	key := t.newSession("alice")
	t.appendN(key, 3)
	ds := enqueueAll(t, ob, key, dest)
	_, err := t.S.DeleteSession(t.Ctx, key, nil)
	must(t, err, "DeleteSession")
	if _, err := ob.GetDelivery(t.Ctx, "alice", ds[0].ID); rein.CodeOf(err) != rein.CodeNotFound {
		t.Fatalf("a deleted session's delivery: %v, want not found", err)
	}
	if got := claim(t, ob, dest, time.Minute); len(got) != 0 {
		t.Fatalf("claimed a deleted session's delivery: %+v", got)
	}
	// The same key again starts from seq 1 for the destination.
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: key.Owner, ID: key.ID}), "CreateSession again")
	t.appendN(key, 1)
	lags, err := ob.OutboxLag(t.Ctx, dest, 0)
	must(t, err, "OutboxLag")
	if len(lags) != 1 || lags[0].Cursor != 0 || lags[0].LastSeq != 1 {
		t.Fatalf("lag of the recreated session = %+v, want from 0 to 1", lags)
	}
}
