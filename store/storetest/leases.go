package storetest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Leases/AcquireGet", testLeaseAcquire},
	test{"Leases/BusyCarriesHolderRun", testLeaseBusy},
	test{"Leases/TokensStrictlyIncrease", testLeaseTokens},
	test{"Leases/Renew", testLeaseRenew},
	test{"Leases/RenewAfterTakeoverIsLost", testLeaseRenewLost},
	test{"Leases/ReleaseAndStaleRelease", testLeaseRelease},
	test{"Leases/ExpiredIsTakenOver", testLeaseTakeover},
	test{"Leases/ConcurrentAcquireOneWins", testLeaseConcurrent},
	test{"Leases/OtherOwnerIsNotFound", testLeaseOtherOwner},
	test{"Fencing/StaleTokenWritesNothing", testFencingStale},
	test{"Fencing/CurrentAndExpiredUntakenTokenWrite", testFencingCurrent},
	test{"Fencing/ReleasedTokenIsLost", testFencingReleased},
	test{"Flush/ThroughTheStore", testFlush},
	test{"Store/Ping", testPing},
)

const ttl = 15 * time.Second

func testLeaseAcquire(t *T) {
	key := t.newSession("alice")
	_, err := t.S.GetLease(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetLease before any lease")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	if l.Owner != key.Owner || l.SessionID != key.ID || l.RunID != "run_1" || l.Holder != "inst-a" || l.Token <= 0 {
		t.Fatalf("lease = %+v", l)
	}
	wantTime(t, l.ExpiresAt, t.Clock.Now().Add(ttl).UTC().Truncate(time.Microsecond), "ExpiresAt")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, l)
	_, err = t.acquireLease(rein.SessionKey{Owner: "alice", ID: "ses_never"}, "inst-a", "run_1", ttl)
	wantErr(t, err, rein.ErrNotFound, "AcquireLease of a missing session")
}

func wantLease(t *T, got, want *store.Lease) {
	t.Helper()
	g, w := *got, *want
	if !sameTime(g.ExpiresAt, w.ExpiresAt) {
		t.Fatalf("lease expires %v, want %v", g.ExpiresAt, w.ExpiresAt)
	}
	g.ExpiresAt, w.ExpiresAt = time.Time{}, time.Time{}
	if g != w {
		t.Fatalf("lease = %+v, want %+v", g, w)
	}
}

func testLeaseBusy(t *T) {
	key := t.newSession("alice")
	held, err := t.acquireLease(key, "inst-secret-host", "run_holder", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl - time.Millisecond)
	_, err = t.acquireLease(key, "inst-b", "run_other", ttl)
	wantErr(t, err, rein.ErrSessionBusy, "AcquireLease while held")
	var re *rein.Error
	if !errors.As(err, &re) || re.RunID != "run_holder" {
		t.Fatalf("busy error = %#v, want a *rein.Error with RunID run_holder", err)
	}
	// The holder instance is never revealed (docs/api.md).
	if strings.Contains(err.Error(), "inst-secret-host") {
		t.Fatalf("busy error %q reveals the holder instance", err)
	}
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, held)
}

func testLeaseTokens(t *T) {
	a, b := t.newSession("alice"), t.newSession("bob")
	var last = map[rein.SessionKey]int64{}
	for i := range 5 {
		for _, key := range []rein.SessionKey{a, b} {
			l, err := t.acquireLease(key, "inst-a", "run_"+string(rune('a'+i)), ttl)
			must(t, err, "AcquireLease")
			if l.Token <= last[key] {
				t.Fatalf("token %d after %d: not strictly increasing", l.Token, last[key])
			}
			last[key] = l.Token
			if i%2 == 0 {
				must(t, t.releaseLease(l), "ReleaseLease")
			} else {
				t.Clock.Advance(ttl + time.Second) // let it expire instead
			}
		}
	}
}

func testLeaseRenew(t *T) {
	key := t.newSession("alice")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(10 * time.Second)
	renewed, err := t.S.RenewLease(t.Ctx, l, 30*time.Second)
	must(t, err, "RenewLease")
	want := *l
	want.ExpiresAt = t.Clock.Now().Add(30 * time.Second).UTC().Truncate(time.Microsecond)
	wantLease(t, renewed, &want)
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, &want)
	// Renewing keeps the session busy past the original expiry.
	t.Clock.Advance(25 * time.Second)
	_, err = t.acquireLease(key, "inst-b", "run_2", ttl)
	wantErr(t, err, rein.ErrSessionBusy, "AcquireLease of a renewed lease")
	// A lease that expired is lost to its holder even if nobody took it
	// over: by the store's clock the holder may already have been declared
	// dead, and a renewal must not bring it back. The lease itself stays
	// (GetLease, fencing) until someone takes it over or releases it.
	t.Clock.Advance(time.Minute)
	_, err = t.S.RenewLease(t.Ctx, renewed, ttl)
	wantErr(t, err, rein.ErrLeaseLost, "RenewLease of an expired, untaken lease")
	got, err = t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease after a refused renewal")
	wantLease(t, got, &want)
}

func testLeaseRenewLost(t *T) {
	key := t.newSession("alice")
	old, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Second)
	cur, err := t.acquireLease(key, "inst-b", "run_2", ttl)
	must(t, err, "AcquireLease over an expired lease")
	_, err = t.S.RenewLease(t.Ctx, old, ttl)
	wantErr(t, err, rein.ErrLeaseLost, "RenewLease after takeover")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, cur)
}

func testLeaseRelease(t *T) {
	key := t.newSession("alice")
	l1, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	must(t, t.releaseLease(l1), "ReleaseLease")
	_, err = t.S.GetLease(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetLease after release")
	must(t, t.releaseLease(l1), "second ReleaseLease")
	_, err = t.S.RenewLease(t.Ctx, l1, ttl)
	wantErr(t, err, rein.ErrLeaseLost, "RenewLease after release")

	l2, err := t.acquireLease(key, "inst-b", "run_2", ttl)
	must(t, err, "AcquireLease after release")
	if l2.Token <= l1.Token {
		t.Fatalf("token after release %d <= %d", l2.Token, l1.Token)
	}
	// A stale release does nothing.
	must(t, t.releaseLease(l1), "stale ReleaseLease")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease after a stale release")
	wantLease(t, got, l2)
	_, err = t.acquireLease(key, "inst-c", "run_3", ttl)
	wantErr(t, err, rein.ErrSessionBusy, "AcquireLease after a stale release")
}

func testLeaseTakeover(t *T) {
	key := t.newSession("alice")
	old, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Millisecond)
	l, err := t.acquireLease(key, "inst-b", "run_2", ttl)
	must(t, err, "AcquireLease over an expired lease")
	if l.Token <= old.Token || l.RunID != "run_2" || l.Holder != "inst-b" {
		t.Fatalf("takeover lease = %+v (old token %d)", l, old.Token)
	}
	wantTime(t, l.ExpiresAt, t.Clock.Now().Add(ttl).UTC().Truncate(time.Microsecond), "ExpiresAt")
}

func testLeaseConcurrent(t *T) {
	key := t.newSession("alice")
	const n = 16
	var wins atomic.Int32
	errs := make([]error, n)
	parallel(n, func(i int) {
		if _, err := t.acquireLease(key, "inst", "run_"+string(rune('a'+i)), ttl); err == nil {
			wins.Add(1)
		} else {
			errs[i] = err
		}
	})
	if wins.Load() != 1 {
		t.Fatalf("%d concurrent acquisitions succeeded, want 1", wins.Load())
	}
	for _, err := range errs {
		if err != nil {
			wantErr(t, err, rein.ErrSessionBusy, "losing AcquireLease")
		}
	}
}

func testLeaseOtherOwner(t *T) {
	key := t.newSession("alice")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	intruder := otherOwner(key)
	_, err = t.S.GetLease(t.Ctx, intruder)
	wantErr(t, err, rein.ErrNotFound, "GetLease as another owner")
	_, err = t.acquireLease(intruder, "inst-x", "run_x", ttl)
	wantErr(t, err, rein.ErrNotFound, "AcquireLease as another owner")
	forged := *l
	forged.Owner = intruder.Owner
	if _, err := t.S.RenewLease(t.Ctx, &forged, ttl); err == nil {
		t.Fatal("RenewLease with another owner's key succeeded")
	}
	wantErr(t, t.releaseLease(&forged), rein.ErrNotFound, "ReleaseLease as another owner")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, l)
}

// takeover leaves the session with a stale lease (the first) and a current
// one (the second, after the first expired).
func (t *T) takeover(key rein.SessionKey) (stale, current *store.Lease) {
	t.Helper()
	stale, err := t.acquireLease(key, "inst-a", "run_old", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Second)
	current, err = t.acquireLease(key, "inst-b", "run_new", ttl)
	must(t, err, "AcquireLease after expiry")
	return stale, current
}

func testFencingStale(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_old", Status: rein.StatusRunning}), "CreateRun")
	stale, _ := t.takeover(key)

	_, err := t.S.AppendEvents(t.Ctx, key, stale.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_old", `{}`)})
	wantErr(t, err, rein.ErrLeaseLost, "AppendEvents with a stale fence")
	err = t.appendHistory(key, stale.Fence(), []rein.Message{{Role: rein.RoleAssistant, Text: "late"}})
	wantErr(t, err, rein.ErrLeaseLost, "AppendHistory with a stale fence")
	_, err = t.updateRun(key, stale.Fence(), "run_old", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	wantErr(t, err, rein.ErrLeaseLost, "UpdateRun with a stale fence")
	// A token from another session is not current here either.
	otherKey := t.newSession("alice")
	foreign, err := t.acquireLease(otherKey, "inst-c", "run_c", ttl)
	must(t, err, "AcquireLease")
	_, err = t.S.AppendEvents(t.Ctx, key, foreign.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_c", `{}`)})
	wantErr(t, err, rein.ErrLeaseLost, "AppendEvents with another session's fence")

	last, err := t.S.LastSeq(t.Ctx, key)
	must(t, err, "LastSeq")
	hist, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	run, err := t.S.GetRun(t.Ctx, key, "run_old")
	must(t, err, "GetRun")
	if last != 0 || len(hist) != 0 || run.Status != rein.StatusRunning {
		t.Fatalf("stale writes left traces: last seq %d, %d history messages, run %s", last, len(hist), run.Status)
	}
	// Unfenced writes (request handlers) are not affected by the lease.
	_, err = t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventUserSupplement, "", `{}`)})
	must(t, err, "unfenced AppendEvents while a lease is held")
}

func testFencingCurrent(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_new", Status: rein.StatusRunning}), "CreateRun")
	_, cur := t.takeover(key)
	out, err := t.S.AppendEvents(t.Ctx, key, cur.Fence(), []rein.Event{ev(rein.EventRunStarted, "run_new", `{"run_id":"run_new"}`)})
	must(t, err, "AppendEvents with the current fence")
	if out[0].Seq != 1 {
		t.Fatalf("seq = %d, want 1", out[0].Seq)
	}
	must(t, t.appendHistory(key, cur.Fence(), []rein.Message{{Role: rein.RoleUser, Text: "hi"}}), "AppendHistory with the current fence")
	// Expired but not taken over: still current.
	t.Clock.Advance(ttl * 3)
	_, err = t.S.AppendEvents(t.Ctx, key, cur.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_new", `{}`)})
	must(t, err, "AppendEvents with an expired, untaken fence")
	_, err = t.updateRun(key, cur.Fence(), "run_new", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	must(t, err, "UpdateRun with an expired, untaken fence")
}

func testFencingReleased(t *T) {
	key := t.newSession("alice")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	must(t, t.releaseLease(l), "ReleaseLease")
	_, err = t.S.AppendEvents(t.Ctx, key, l.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_1", `{}`)})
	wantErr(t, err, rein.ErrLeaseLost, "AppendEvents with a released fence")
}

func testFlush(t *T) {
	key := t.newSession("alice")
	done, err := t.S.Flush(t.Ctx, key)
	if done || err != nil {
		t.Fatalf("Flush with no listeners = (%v, %v), want (false, nil)", done, err)
	}
	var got atomic.Value
	remove := t.S.AddFlushListener(func(_ context.Context, k rein.SessionKey) error {
		got.Store(k)
		return nil
	})
	boom := errors.New("replica down")
	removeFailing := t.S.AddFlushListener(func(context.Context, rein.SessionKey) error { return boom })
	done, err = t.S.Flush(t.Ctx, key)
	if !done || !errors.Is(err, boom) {
		t.Fatalf("Flush = (%v, %v), want (true, %v)", done, err, boom)
	}
	if k, _ := got.Load().(rein.SessionKey); !reflect.DeepEqual(k, key) {
		t.Fatalf("listener saw key %v, want %v", k, key)
	}
	removeFailing()
	done, err = t.S.Flush(t.Ctx, key)
	if !done || err != nil {
		t.Fatalf("Flush after removing the failing listener = (%v, %v), want (true, nil)", done, err)
	}
	remove()
	if done, err = t.S.Flush(t.Ctx, key); done || err != nil {
		t.Fatalf("Flush after removing every listener = (%v, %v), want (false, nil)", done, err)
	}
}

func testPing(t *T) {
	must(t, t.S.Ping(t.Ctx), "Ping")
}
