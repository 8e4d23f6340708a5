package storetest

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Inbox/PushIsIdempotent", testInboxPush},
	test{"Inbox/ConsumeInPushOrder", testInboxConsume},
	test{"Inbox/ConsumeExactlyOnceUnderConcurrency", testInboxConcurrentConsume},
	test{"Inbox/OtherOwnerIsNotFound", testInboxOtherOwner},
)

func sup(key rein.SessionKey, id, text string) *store.Supplement {
	return &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: id, Text: text, Source: "user"}
}

func testInboxPush(t *T) {
	key := t.newSession("alice")
	got, created, err := t.pushSupplement(sup(key, "note-1", "first ✓"))
	must(t, err, "PushSupplement")
	if !created {
		t.Fatal("first push reported created=false")
	}
	want := store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "note-1", Text: "first ✓", Source: "user",
		Status: store.SupplementQueued, CreatedAt: t.now()}
	wantSupplement(t, got, &want)

	t.Clock.Advance(time.Second)
	again, created, err := t.pushSupplement(&store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "note-1", Text: "different", Source: "parent"})
	must(t, err, "second PushSupplement")
	if created {
		t.Fatal("repeated push reported created=true")
	}
	wantSupplement(t, again, &want)
	n, err := t.S.PendingSupplements(t.Ctx, key)
	must(t, err, "PendingSupplements")
	if n != 1 {
		t.Fatalf("PendingSupplements = %d after a repeated push, want 1", n)
	}
	stored, err := t.S.GetSupplement(t.Ctx, key, "note-1")
	must(t, err, "GetSupplement")
	wantSupplement(t, stored, &want)

	// Without an id the store names it.
	gen, created, err := t.pushSupplement(sup(key, "", "anonymous"))
	must(t, err, "PushSupplement without id")
	if !created || !strings.HasPrefix(gen.ID, "sup_") || len(gen.ID) != len("sup_")+26 {
		t.Fatalf("generated supplement = %+v, created %v; want a sup_ ULID id", gen, created)
	}
	// The same id in another session is another supplement.
	other := t.newSession("alice")
	_, created, err = t.pushSupplement(sup(other, "note-1", "elsewhere"))
	must(t, err, "PushSupplement in another session")
	if !created {
		t.Fatal("push of a known id into another session reported created=false")
	}
	_, err = t.S.GetSupplement(t.Ctx, key, "note-none")
	wantErr(t, err, rein.ErrNotFound, "GetSupplement of an unknown id")
}

func wantSupplement(t *T, got, want *store.Supplement) {
	t.Helper()
	if !sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.ConsumedAt, want.ConsumedAt) {
		t.Fatalf("supplement %s times = %v / %v, want %v / %v", want.ID, got.CreatedAt, got.ConsumedAt, want.CreatedAt, want.ConsumedAt)
	}
	g, w := *got, *want
	g.CreatedAt, g.ConsumedAt, w.CreatedAt, w.ConsumedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if g != w {
		t.Fatalf("supplement = %+v\nwant         %+v", g, w)
	}
}

func testInboxConsume(t *T) {
	key := t.newSession("alice")
	empty, err := t.consumeSupplements(key, "run_0", 1)
	must(t, err, "ConsumeSupplements of an empty inbox")
	if empty == nil || len(empty) != 0 {
		t.Fatalf("ConsumeSupplements of an empty inbox = %#v, want empty non-nil", empty)
	}
	// Push order differs from id order on purpose.
	ids := []string{"n-c", "n-a", "n-b"}
	for _, id := range ids {
		_, _, err := t.pushSupplement(sup(key, id, "text "+id))
		must(t, err, "PushSupplement")
	}
	pushedAt := t.now()
	t.Clock.Advance(time.Second)
	n, err := t.S.PendingSupplements(t.Ctx, key)
	must(t, err, "PendingSupplements")
	if n != 3 {
		t.Fatalf("PendingSupplements = %d, want 3", n)
	}
	got, err := t.consumeSupplements(key, "run_1", 2)
	must(t, err, "ConsumeSupplements")
	if len(got) != 3 {
		t.Fatalf("consumed %d supplements, want 3", len(got))
	}
	for i, s := range got {
		want := store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: ids[i], Text: "text " + ids[i], Source: "user",
			Status: store.SupplementConsumed, RunID: "run_1", Step: 2, CreatedAt: pushedAt, ConsumedAt: t.now()}
		wantSupplement(t, s, &want)
		stored, err := t.S.GetSupplement(t.Ctx, key, ids[i])
		must(t, err, "GetSupplement")
		wantSupplement(t, stored, &want)
	}
	n, err = t.S.PendingSupplements(t.Ctx, key)
	must(t, err, "PendingSupplements")
	if n != 0 {
		t.Fatalf("PendingSupplements after consuming = %d, want 0", n)
	}
	again, err := t.consumeSupplements(key, "run_1", 3)
	must(t, err, "ConsumeSupplements again")
	if len(again) != 0 {
		t.Fatalf("second consume returned %d supplements", len(again))
	}
	// A repeat push of a consumed supplement reports it consumed.
	rep, created, err := t.pushSupplement(sup(key, "n-a", "again"))
	must(t, err, "PushSupplement repeat")
	if created || rep.Status != store.SupplementConsumed || rep.RunID != "run_1" {
		t.Fatalf("repeat push of a consumed supplement = %+v, created %v", rep, created)
	}
	// Only what is queued is consumed next time.
	_, _, err = t.pushSupplement(sup(key, "n-d", "later"))
	must(t, err, "PushSupplement")
	next, err := t.consumeSupplements(key, "run_2", 1)
	must(t, err, "ConsumeSupplements")
	if len(next) != 1 || next[0].ID != "n-d" || next[0].RunID != "run_2" || next[0].Step != 1 {
		t.Fatalf("next consume = %+v, want only n-d for run_2 step 1", next)
	}
}

// 16 consumers race while a producer pushes: every supplement is returned
// to exactly one consumer.
func testInboxConcurrentConsume(t *T) {
	key := t.newSession("alice")
	const consumers, pushes = 16, 200
	var mu sync.Mutex
	seen := map[string]string{} // supplement id → consumer run id
	var failure error
	producerDone := make(chan struct{})
	parallel(consumers+1, func(i int) {
		if i == consumers {
			defer close(producerDone)
			for p := range pushes {
				if _, _, err := t.pushSupplement(sup(key, fmt.Sprintf("s%03d", p), "x")); err != nil {
					mu.Lock()
					failure = err
					mu.Unlock()
					return
				}
			}
			return
		}
		runID := fmt.Sprintf("run_%02d", i)
		record := func(got []*store.Supplement, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failure = err
				return
			}
			for _, s := range got {
				if prev, dup := seen[s.ID]; dup {
					failure = fmt.Errorf("supplement %s consumed by %s and %s", s.ID, prev, runID)
				}
				seen[s.ID] = runID
				if s.RunID != runID {
					failure = fmt.Errorf("consumer %s got %s marked for %s", runID, s.ID, s.RunID)
				}
			}
		}
		for {
			select {
			case <-producerDone:
				record(t.consumeSupplements(key, runID, 1))
				return
			default:
				record(t.consumeSupplements(key, runID, 1))
			}
		}
	})
	if failure != nil {
		t.Fatal(failure)
	}
	if len(seen) != pushes {
		t.Fatalf("%d supplements consumed, want %d", len(seen), pushes)
	}
	for id, runID := range seen {
		s, err := t.S.GetSupplement(t.Ctx, key, id)
		must(t, err, "GetSupplement")
		if s.Status != store.SupplementConsumed || s.RunID != runID {
			t.Fatalf("stored %s = %s by %s, but %s received it", id, s.Status, s.RunID, runID)
		}
	}
}

func testInboxOtherOwner(t *T) {
	key := t.newSession("alice")
	_, _, err := t.pushSupplement(sup(key, "n1", "mine"))
	must(t, err, "PushSupplement")
	intruder := otherOwner(key)
	_, _, err = t.pushSupplement(sup(intruder, "n2", "theirs"))
	wantErr(t, err, rein.ErrNotFound, "PushSupplement as another owner")
	_, _, err = t.pushSupplement(sup(intruder, "n1", "theirs"))
	wantErr(t, err, rein.ErrNotFound, "PushSupplement of a known id as another owner")
	_, err = t.S.GetSupplement(t.Ctx, intruder, "n1")
	wantErr(t, err, rein.ErrNotFound, "GetSupplement as another owner")
	_, err = t.S.PendingSupplements(t.Ctx, intruder)
	wantErr(t, err, rein.ErrNotFound, "PendingSupplements as another owner")
	got, err := t.consumeSupplements(intruder, "run_x", 1)
	if err == nil && len(got) != 0 {
		t.Fatalf("another owner consumed %d supplements", len(got))
	}
	if err != nil {
		wantErr(t, err, rein.ErrNotFound, "ConsumeSupplements as another owner")
	}
	_, _, err = t.pushSupplement(sup(rein.SessionKey{Owner: "alice", ID: "ses_never"}, "n3", "x"))
	wantErr(t, err, rein.ErrNotFound, "PushSupplement to a missing session")
	n, err := t.S.PendingSupplements(t.Ctx, key)
	must(t, err, "PendingSupplements")
	if n != 1 {
		t.Fatalf("PendingSupplements = %d after another owner's attempts, want 1", n)
	}
}
