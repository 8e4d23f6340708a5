package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Update/CommitsEveryWriteAndReadsItsOwn", testUpdateCommits},
	test{"Update/FailureWritesNothing", testUpdateAllOrNothing},
	test{"Update/MissingSessionIsNotFound", testUpdateNotFound},
	test{"Update/StaleFenceIsLostBeforeFn", testUpdateStaleFence},
	test{"Update/ExpiredUntakenFenceHolds", testUpdateExpiredFence},
	test{"Update/AcquireInsideRefencesTheSession", testUpdateAcquireInside},
	test{"Update/ReleaseOnlyTheCurrentToken", testUpdateRelease},
	test{"Update/RunsInQueueOrderByStatus", testUpdateRuns},
	test{"Update/ConsumeNonQueuedFailsWhole", testUpdateConsume},
	test{"Update/EventsVisibleAndWakeOnlyOnCommit", testUpdateEventsOnCommit},
	test{"Update/ConcurrentUpdatesSerialise", testUpdateConcurrent},
	test{"Update/CancelledContextWritesNothing", testUpdateCancelled},
	test{"Update/NeverWritesAnotherSession", testUpdateOtherSession},
	test{"Update/RefusedCreateRunLeavesTheRest", testUpdateRefusedCreateRun},
	test{"Leases/UnexpiredIsNeverTakenOverEvenBySameRun", testLeaseNoSelfTakeover},
	test{"Leases/ExpiredIsTakenOverBySameRun", testLeaseSelfTakeoverAfterExpiry},
	test{"Leases/RenewAfterExpiryIsLost", testLeaseRenewExpired},
	test{"Runs/ResumesStopRolledBackRoundTrip", testRunNewFields},
)

// update runs fn in an Update of key and fails the test if Update fails.
func (t *T) update(key rein.SessionKey, fence store.Fence, what string, fn func(tx store.Tx) error) {
	t.Helper()
	must(t, t.S.Update(t.Ctx, key, fence, fn), what)
}

// txMust fails the test from inside an Update's function. It may run on
// the store's own goroutine (SQLite's writer), where t.Fatal must not be
// called, so it returns the failure for fn to return and Update to report.
func txMust(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// snapshot is everything a session holds, read through the Store, to
// compare before and after an Update that must have written nothing.
type snapshot struct {
	last    int64
	events  []string
	history int
	runs    []store.RunRecord
	pending int
	sups    []store.Supplement
	confs   []store.Confirmation
	lease   store.Lease // zero for none
}

func (t *T) snapshot(key rein.SessionKey, supIDs ...string) snapshot {
	t.Helper()
	var sn snapshot
	evs, last, err := t.S.ReadEvents(t.Ctx, key, 0, 1000)
	must(t, err, "ReadEvents")
	sn.last = last
	for _, e := range evs {
		sn.events = append(sn.events, fmt.Sprintf("%d %s %s", e.Seq, e.ID, e.Type))
	}
	hist, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	sn.history = len(hist)
	runs, err := t.S.ListRuns(t.Ctx, key)
	must(t, err, "ListRuns")
	for _, r := range runs {
		sn.runs = append(sn.runs, *r)
	}
	sn.pending, err = t.S.PendingSupplements(t.Ctx, key)
	must(t, err, "PendingSupplements")
	for _, id := range supIDs {
		s, err := t.S.GetSupplement(t.Ctx, key, id)
		if errors.Is(err, rein.ErrNotFound) {
			continue
		}
		must(t, err, "GetSupplement")
		sn.sups = append(sn.sups, *s)
	}
	confs, err := t.S.ListConfirmations(t.Ctx, key, "")
	must(t, err, "ListConfirmations")
	for _, c := range confs {
		c.Input = nil // compared by the rest; JSON may come back normalised
		sn.confs = append(sn.confs, *c)
	}
	l, err := t.S.GetLease(t.Ctx, key)
	if !errors.Is(err, rein.ErrNotFound) {
		must(t, err, "GetLease")
		sn.lease = *l
	}
	return sn
}

func (t *T) wantSnapshot(got, want snapshot, what string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s changed the session:\n got  %+v\n want %+v", what, got, want)
	}
}

// seedSession gives a session one of everything an Update can change: an
// event, a history message, a queued run, a queued supplement, a pending
// confirmation and a live lease.
func (t *T) seedSession() (rein.SessionKey, *store.Lease) {
	t.Helper()
	key := t.newSession("alice")
	_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventUserMessage, "run_seed", `{"text":"hi"}`)})
	must(t, err, "AppendEvents")
	must(t, t.appendHistory(key, store.Fence{}, []rein.Message{{Role: rein.RoleUser, Text: "hi"}}), "AppendHistory")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: t.uniq("run_seed_"), Status: rein.StatusQueued, ClientID: "c-seed"}), "CreateRun")
	_, _, err = t.pushSupplement(sup(key, "sup_seed", "note"))
	must(t, err, "PushSupplement")
	must(t, t.createConfirmation(confirmation(key, "run_seed", "call_seed")), "CreateConfirmation")
	l, err := t.acquireLease(key, "inst-a", "run_seed", ttl)
	must(t, err, "AcquireLease")
	return key, l
}

func testUpdateCommits(t *T) {
	key := t.newSession("alice")
	var stored []rein.Event
	var lease *store.Lease
	t.update(key, store.Fence{}, "Update", func(tx store.Tx) error {
		if !tx.Now().Equal(t.Clock.Now()) && !tx.Now().Equal(t.now()) {
			return fmt.Errorf("tx.Now() = %v, want the store clock's %v", tx.Now(), t.Clock.Now())
		}
		// The empty views are empty, never nil.
		runs, err := tx.Runs()
		if err := txMust(err, "Runs"); err != nil {
			return err
		}
		hist, err := tx.History()
		if err := txMust(err, "History"); err != nil {
			return err
		}
		queued, err := tx.QueuedSupplements()
		if err := txMust(err, "QueuedSupplements"); err != nil {
			return err
		}
		confs, err := tx.Confirmations("")
		if err := txMust(err, "Confirmations"); err != nil {
			return err
		}
		if runs == nil || hist == nil || queued == nil || confs == nil || len(runs)+len(hist)+len(queued)+len(confs) != 0 {
			return fmt.Errorf("empty session's views = %#v %#v %#v %#v, want empty non-nil", runs, hist, queued, confs)
		}
		if l, err := tx.Lease(); err != nil || l != nil {
			return fmt.Errorf("Lease() with none = %+v, %v; want nil, nil", l, err)
		}

		// Every write, and each read sees it.
		if lease, err = tx.AcquireLease("inst-a", "run_1", ttl); err != nil {
			return txMust(err, "AcquireLease")
		}
		if l, err := tx.Lease(); err != nil || l == nil || l.Token != lease.Token || l.RunID != "run_1" {
			return fmt.Errorf("Lease() after AcquireLease = %+v, %v; want token %d", l, err, lease.Token)
		}
		r := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued, ClientID: "c-1", Input: "go"}
		if err := txMust(tx.CreateRun(r), "CreateRun"); err != nil {
			return err
		}
		if !sameTime(r.CreatedAt, t.now()) {
			return fmt.Errorf("CreateRun's CreatedAt = %v, want %v", r.CreatedAt, t.now())
		}
		if _, err := tx.UpdateRun("run_1", store.RunUpdate{Status: rein.StatusRunning, Instance: "inst-a", StartedAt: t.Clock.Now()}); err != nil {
			return txMust(err, "UpdateRun")
		}
		if got, err := tx.GetRun("run_1"); err != nil || got.Status != rein.StatusRunning {
			return fmt.Errorf("GetRun after UpdateRun = %+v, %v", got, err)
		}
		if got, err := tx.GetRunByClientID("c-1"); err != nil || got.ID != "run_1" {
			return fmt.Errorf("GetRunByClientID = %+v, %v", got, err)
		}
		if _, err := tx.GetRun("run_none"); !errors.Is(err, rein.ErrNotFound) {
			return fmt.Errorf("GetRun of an unknown run = %v, want not found", err)
		}
		if _, err := tx.GetRunByClientID("c-none"); !errors.Is(err, rein.ErrNotFound) {
			return fmt.Errorf("GetRunByClientID of an unknown client id = %v, want not found", err)
		}
		if err := txMust(tx.AppendHistory(transcript()[:2]...), "AppendHistory"); err != nil {
			return err
		}
		if hist, err := tx.History(); err != nil || len(hist) != 2 {
			return fmt.Errorf("tx.History after AppendHistory = %d messages, %v; want 2", len(hist), err)
		}
		if stored, err = tx.AppendEvents(ev(rein.EventUserMessage, "run_1", `{"text":"go"}`), ev(rein.EventRunStarted, "run_1", `{}`)); err != nil {
			return txMust(err, "AppendEvents")
		}
		s, created, err := tx.PushSupplement(sup(key, "sup_1", "note"))
		if err != nil || !created || s.Status != store.SupplementQueued {
			return fmt.Errorf("PushSupplement = %+v, %v, %v", s, created, err)
		}
		if again, created, err := tx.PushSupplement(sup(key, "sup_1", "other")); err != nil || created || again.Text != "note" {
			return fmt.Errorf("repeated PushSupplement = %+v, %v, %v; want the first, not created", again, created, err)
		}
		if _, _, err := tx.PushSupplement(sup(key, "sup_2", "second")); err != nil {
			return txMust(err, "PushSupplement")
		}
		if q, err := tx.QueuedSupplements(); err != nil || len(q) != 2 || q[0].ID != "sup_1" || q[1].ID != "sup_2" {
			return fmt.Errorf("QueuedSupplements = %+v, %v; want sup_1, sup_2", q, err)
		}
		if err := txMust(tx.ConsumeSupplements([]string{"sup_1"}, "run_1", 1), "ConsumeSupplements"); err != nil {
			return err
		}
		if q, err := tx.QueuedSupplements(); err != nil || len(q) != 1 || q[0].ID != "sup_2" {
			return fmt.Errorf("QueuedSupplements after consuming sup_1 = %+v, %v; want sup_2", q, err)
		}
		for _, id := range []string{"call_1", "call_2", "call_3"} {
			if err := txMust(tx.CreateConfirmation(confirmation(key, "run_1", id)), "CreateConfirmation"); err != nil {
				return err
			}
		}
		if err := tx.CreateConfirmation(confirmation(key, "run_1", "call_1")); !errors.Is(err, rein.ErrConflict) {
			return fmt.Errorf("duplicate CreateConfirmation = %v, want conflict", err)
		}
		if c, err := tx.ResolveConfirmation("call_1", false, "no"); err != nil || c.State != store.ConfirmationDenied || c.DenyMessage != "no" {
			return fmt.Errorf("ResolveConfirmation = %+v, %v", c, err)
		}
		if _, err := tx.ResolveConfirmation("call_1", true, ""); !errors.Is(err, rein.ErrConflict) {
			return fmt.Errorf("second ResolveConfirmation = %v, want conflict", err)
		}
		if err := txMust(tx.CloseConfirmations("run_1"), "CloseConfirmations"); err != nil {
			return err
		}
		if pending, err := tx.Confirmations(store.ConfirmationPending); err != nil || len(pending) != 0 {
			return fmt.Errorf("pending Confirmations after CloseConfirmations = %+v, %v; want none", pending, err)
		}
		if closed, err := tx.Confirmations(store.ConfirmationClosed); err != nil || len(closed) != 2 {
			return fmt.Errorf("closed Confirmations = %d, %v; want 2", len(closed), err)
		}
		if _, err := tx.UpdateRun("run_1", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: t.Clock.Now()}); err != nil {
			return txMust(err, "UpdateRun to COMPLETED")
		}
		// First terminal wins inside a transaction too.
		if got, err := tx.UpdateRun("run_1", store.RunUpdate{Status: rein.StatusCancelled}); !errors.Is(err, rein.ErrConflict) || got == nil || got.Status != rein.StatusCompleted {
			return fmt.Errorf("UpdateRun of the ended run = %+v, %v; want the stored record and a conflict", got, err)
		}
		return nil
	})

	// Everything is there once Update returned.
	if len(stored) != 2 || stored[0].Seq != 1 || stored[1].Seq != 2 || stored[0].SessionID != key.ID || !strings.HasPrefix(stored[0].ID, "evt_") {
		t.Fatalf("events returned by Tx.AppendEvents = %+v", stored)
	}
	read, last, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if last != 2 || len(read) != 2 || read[0].ID != stored[0].ID || read[1].ID != stored[1].ID {
		t.Fatalf("ReadEvents after Update = %+v (last %d), want the two events", read, last)
	}
	hist, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	wantMessages(t, hist, transcript()[:2])
	run, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")
	if run.Status != rein.StatusCompleted || run.Instance != "inst-a" || run.Input != "go" {
		t.Fatalf("run after Update = %+v", run)
	}
	s1, err := t.S.GetSupplement(t.Ctx, key, "sup_1")
	must(t, err, "GetSupplement")
	wantSupplement(t, s1, &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "sup_1", Text: "note", Source: "user",
		Status: store.SupplementConsumed, RunID: "run_1", Step: 1, CreatedAt: t.now(), ConsumedAt: t.now()})
	if n, err := t.S.PendingSupplements(t.Ctx, key); err != nil || n != 1 {
		t.Fatalf("PendingSupplements = %d, %v; want 1", n, err)
	}
	c1, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	if c1.State != store.ConfirmationDenied || c1.DenyMessage != "no" {
		t.Fatalf("confirmation after Update = %+v", c1)
	}
	c2, err := t.S.GetConfirmation(t.Ctx, key, "call_2")
	must(t, err, "GetConfirmation")
	if c2.State != store.ConfirmationClosed {
		t.Fatalf("closed confirmation after Update = %+v", c2)
	}
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, lease)
}

// An Update whose function fails after writing everything leaves no trace
// (events, history, runs, supplements, confirmations, lease), and the log
// goes on gap-free: the failed events used no seq.
func testUpdateAllOrNothing(t *T) {
	key, l := t.seedSession()
	seedRun, err := t.S.GetRunByClientID(t.Ctx, key, "c-seed")
	must(t, err, "GetRunByClientID")
	before := t.snapshot(key, "sup_seed", "sup_new")
	boom := errors.New("boom after writing")
	called := 0
	err = t.S.Update(t.Ctx, key, l.Fence(), func(tx store.Tx) error {
		called++
		if _, err := tx.AppendEvents(ev(rein.EventRunStarted, seedRun.ID, `{}`), ev(rein.EventMessageDelta, seedRun.ID, `{"text":"x"}`)); err != nil {
			return err
		}
		if err := tx.AppendHistory(rein.Message{Role: rein.RoleAssistant, Text: "lost"}); err != nil {
			return err
		}
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_lost", Status: rein.StatusQueued, ClientID: "c-lost"}); err != nil {
			return err
		}
		if _, err := tx.UpdateRun(seedRun.ID, store.RunUpdate{Status: rein.StatusRunning, Instance: "inst-x"}); err != nil {
			return err
		}
		if _, _, err := tx.PushSupplement(sup(key, "sup_new", "lost")); err != nil {
			return err
		}
		if err := tx.ConsumeSupplements([]string{"sup_seed"}, seedRun.ID, 1); err != nil {
			return err
		}
		if err := tx.CreateConfirmation(confirmation(key, seedRun.ID, "call_lost")); err != nil {
			return err
		}
		if _, err := tx.ResolveConfirmation("call_seed", true, ""); err != nil {
			return err
		}
		if err := tx.ReleaseLease(l.Token); err != nil {
			return err
		}
		if _, err := tx.AcquireLease("inst-x", "run_lost", ttl); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want the function's error %v", err, boom)
	}
	if called != 1 {
		t.Fatalf("fn called %d times, want 1", called)
	}
	t.wantSnapshot(t.snapshot(key, "sup_seed", "sup_new"), before, "a failed Update")
	_, err = t.S.GetRunByClientID(t.Ctx, key, "c-lost")
	wantErr(t, err, rein.ErrNotFound, "GetRunByClientID of the rolled-back run")
	// Nothing of the failed run record is left to collide with either.
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_lost", Status: rein.StatusQueued, ClientID: "c-lost"}), "CreateRun with the rolled-back id")
	// The old lease still fences, and the log continues where it was.
	out, err := t.S.AppendEvents(t.Ctx, key, l.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_seed", `{}`)})
	must(t, err, "AppendEvents with the seed lease")
	if out[0].Seq != before.last+1 {
		t.Fatalf("seq after a failed Update = %d, want %d", out[0].Seq, before.last+1)
	}
	var seqs []int64
	t.update(key, l.Fence(), "Update after a failed one", func(tx store.Tx) error {
		evs, err := tx.AppendEvents(ev(rein.EventMessageDelta, "run_seed", `{}`), ev(rein.EventMessageDelta, "run_seed", `{}`))
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		return err
	})
	if want := []int64{before.last + 2, before.last + 3}; !reflect.DeepEqual(seqs, want) {
		t.Fatalf("seqs of the next Update = %v, want %v", seqs, want)
	}
}

func testUpdateNotFound(t *T) {
	key := t.newSession("alice")
	for _, k := range []rein.SessionKey{{Owner: "alice", ID: "ses_never"}, otherOwner(key)} {
		called := false
		err := t.S.Update(t.Ctx, k, store.Fence{}, func(tx store.Tx) error { called = true; return nil })
		wantErr(t, err, rein.ErrNotFound, "Update of "+k.String())
		if called {
			t.Fatalf("Update of %s called fn", k)
		}
	}
}

// A fence that is not the session's current token fails the Update with
// ErrLeaseLost before fn runs: stale (taken over), released, another
// session's.
func testUpdateStaleFence(t *T) {
	key := t.newSession("alice")
	stale, cur := t.takeover(key)
	other := t.newSession("alice")
	foreign, err := t.acquireLease(other, "inst-c", "run_c", ttl)
	must(t, err, "AcquireLease")
	released, err := t.acquireLease(t.newSession("alice"), "inst-d", "run_d", ttl)
	must(t, err, "AcquireLease")
	must(t, t.releaseLease(released), "ReleaseLease")
	releasedKey := released.Key()
	for _, c := range []struct {
		what  string
		key   rein.SessionKey
		fence store.Fence
	}{
		{"a taken-over token", key, stale.Fence()},
		{"another session's token", key, foreign.Fence()},
		{"a released token", releasedKey, released.Fence()},
	} {
		called := false
		err := t.S.Update(t.Ctx, c.key, c.fence, func(tx store.Tx) error {
			called = true
			_, err := tx.AppendEvents(ev(rein.EventMessageDelta, "", `{}`))
			return err
		})
		wantErr(t, err, rein.ErrLeaseLost, "Update with "+c.what)
		if called {
			t.Fatalf("Update with %s called fn", c.what)
		}
		if last, err := t.S.LastSeq(t.Ctx, c.key); err != nil || last != 0 {
			t.Fatalf("LastSeq after Update with %s = %d, %v; want 0", c.what, last, err)
		}
	}
	t.update(key, cur.Fence(), "Update with the current token", func(tx store.Tx) error {
		_, err := tx.AppendEvents(ev(rein.EventMessageDelta, "run_new", `{}`))
		return err
	})
}

func testUpdateExpiredFence(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusRunning}), "CreateRun")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl * 3)
	t.update(key, l.Fence(), "Update with an expired, untaken fence", func(tx store.Tx) error {
		cur, err := tx.Lease()
		if err != nil || cur == nil || cur.Token != l.Token {
			return fmt.Errorf("Lease() of an expired lease = %+v, %v; want token %d", cur, err, l.Token)
		}
		if cur.ExpiresAt.After(tx.Now()) {
			return fmt.Errorf("lease expires %v, after tx.Now() %v: the clock was advanced past it", cur.ExpiresAt, tx.Now())
		}
		if _, err := tx.AppendEvents(ev(rein.EventRunCompleted, "run_1", `{}`)); err != nil {
			return err
		}
		if _, err := tx.UpdateRun("run_1", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop}); err != nil {
			return err
		}
		return tx.ReleaseLease(l.Token)
	})
	_, err = t.S.GetLease(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetLease after the Update released it")
	run, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")
	if run.Status != rein.StatusCompleted {
		t.Fatalf("run = %s, want COMPLETED", run.Status)
	}
}

// AcquireLease inside an Update (a takeover of an expired lease here)
// gives the session a new token: the rest of the transaction writes under
// it, and afterwards the old token is lost for Updates and writes alike.
func testUpdateAcquireInside(t *T) {
	key := t.newSession("alice")
	old, err := t.acquireLease(key, "inst-a", "run_old", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Second)
	var cur *store.Lease
	t.update(key, old.Fence(), "Update that takes the lease over", func(tx store.Tx) error {
		var err error
		if cur, err = tx.AcquireLease("inst-b", "run_new", ttl); err != nil {
			return err
		}
		if cur.Token <= old.Token || cur.RunID != "run_new" || cur.Holder != "inst-b" {
			return fmt.Errorf("lease = %+v after token %d", cur, old.Token)
		}
		if l, err := tx.Lease(); err != nil || l == nil || l.Token != cur.Token {
			return fmt.Errorf("Lease() after AcquireLease = %+v, %v", l, err)
		}
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_new", Status: rein.StatusRunning}); err != nil {
			return err
		}
		_, err = tx.AppendEvents(ev(rein.EventRunStarted, "run_new", `{}`))
		return err
	})
	wantTime(t, cur.ExpiresAt, t.Clock.Now().Add(ttl).UTC().Truncate(time.Microsecond), "ExpiresAt")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, cur)

	called := false
	err = t.S.Update(t.Ctx, key, old.Fence(), func(tx store.Tx) error { called = true; return nil })
	wantErr(t, err, rein.ErrLeaseLost, "Update with the token taken over inside an Update")
	if called {
		t.Fatal("Update with a lost token called fn")
	}
	_, err = t.S.AppendEvents(t.Ctx, key, old.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_old", `{}`)})
	wantErr(t, err, rein.ErrLeaseLost, "AppendEvents with the old token")
	t.update(key, cur.Fence(), "Update with the new token", func(tx store.Tx) error {
		_, err := tx.AppendEvents(ev(rein.EventMessageDelta, "run_new", `{}`))
		return err
	})
	if last, err := t.S.LastSeq(t.Ctx, key); err != nil || last != 2 {
		t.Fatalf("LastSeq = %d, %v; want 2", last, err)
	}
}

func testUpdateRelease(t *T) {
	key := t.newSession("alice")
	stale, cur := t.takeover(key)
	t.update(key, store.Fence{}, "Update releasing a stale token", func(tx store.Tx) error {
		return tx.ReleaseLease(stale.Token)
	})
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease after a stale release")
	wantLease(t, got, cur)
	_, err = t.acquireLease(key, "inst-c", "run_c", ttl)
	wantErr(t, err, rein.ErrSessionBusy, "AcquireLease after a stale release")

	t.update(key, cur.Fence(), "Update releasing the current token", func(tx store.Tx) error {
		if err := tx.ReleaseLease(cur.Token); err != nil {
			return err
		}
		if l, err := tx.Lease(); err != nil || l != nil {
			return fmt.Errorf("Lease() after release = %+v, %v; want nil", l, err)
		}
		// Releasing again, or with a stale token, does nothing.
		if err := tx.ReleaseLease(cur.Token); err != nil {
			return err
		}
		return tx.ReleaseLease(stale.Token)
	})
	_, err = t.S.GetLease(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetLease after release")
	next, err := t.acquireLease(key, "inst-c", "run_c", ttl)
	must(t, err, "AcquireLease after release")
	if next.Token <= cur.Token {
		t.Fatalf("token after release %d <= %d", next.Token, cur.Token)
	}
}

func testUpdateRuns(t *T) {
	key := t.newSession("alice")
	create := func(id string, status rein.RunStatus, order int64) {
		t.Helper()
		must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: id, Status: status, QueueOrder: order}), "CreateRun "+id)
	}
	// Queue order first, then creation time, then id.
	create("run_d", rein.StatusQueued, 1)
	create("run_c", rein.StatusQueued, 1)
	create("run_a", rein.StatusQueued, 2)
	create("run_e", rein.StatusRunning, -5)
	create("run_f", rein.StatusRunning, 0)
	t.Clock.Advance(time.Second)
	create("run_b", rein.StatusQueued, 1)
	_, err := t.updateRun(key, store.Fence{}, "run_f", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	must(t, err, "UpdateRun")
	other := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: other.Owner, SessionID: other.ID, ID: "run_elsewhere", Status: rein.StatusQueued, ClientID: "c-else"}), "CreateRun elsewhere")

	cases := []struct {
		statuses []rein.RunStatus
		want     []string
	}{
		{nil, []string{"run_e", "run_f", "run_c", "run_d", "run_b", "run_a"}},
		{[]rein.RunStatus{rein.StatusQueued}, []string{"run_c", "run_d", "run_b", "run_a"}},
		{[]rein.RunStatus{rein.StatusQueued, rein.StatusRunning}, []string{"run_e", "run_c", "run_d", "run_b", "run_a"}},
		{[]rein.RunStatus{rein.StatusCompleted}, []string{"run_f"}},
		{[]rein.RunStatus{rein.StatusCancelled}, []string{}},
	}
	t.update(key, store.Fence{}, "Update reading runs", func(tx store.Tx) error {
		for _, c := range cases {
			list, err := tx.Runs(c.statuses...)
			if err != nil {
				return err
			}
			if list == nil || !reflect.DeepEqual(runIDs(list), c.want) {
				return fmt.Errorf("Runs(%v) = %#v, want %v", c.statuses, runIDs(list), c.want)
			}
			for _, r := range list {
				if r.Owner != key.Owner || r.SessionID != key.ID {
					return fmt.Errorf("run %s carries key %s/%s", r.ID, r.Owner, r.SessionID)
				}
			}
		}
		if _, err := tx.GetRun("run_elsewhere"); !errors.Is(err, rein.ErrNotFound) {
			return fmt.Errorf("GetRun of another session's run = %v, want not found", err)
		}
		if _, err := tx.GetRunByClientID("c-else"); !errors.Is(err, rein.ErrNotFound) {
			return fmt.Errorf("GetRunByClientID of another session's client id = %v, want not found", err)
		}
		return nil
	})
}

// ConsumeSupplements with an id that is not a queued supplement of the
// session fails, and the Update that returns that failure consumes none.
func testUpdateConsume(t *T) {
	key := t.newSession("alice")
	_, _, err := t.pushSupplement(sup(key, "s1", "one"))
	must(t, err, "PushSupplement")
	_, err = t.consumeSupplements(key, "run_0", 1)
	must(t, err, "ConsumeSupplements")
	for _, id := range []string{"s2", "s3"} {
		_, _, err := t.pushSupplement(sup(key, id, id))
		must(t, err, "PushSupplement")
	}
	other := t.newSession("alice")
	_, _, err = t.pushSupplement(sup(other, "s_other", "elsewhere"))
	must(t, err, "PushSupplement elsewhere")

	for _, c := range []struct {
		what string
		ids  []string
		want error
	}{
		{"a consumed id", []string{"s2", "s1"}, rein.ErrConflict},
		{"an unknown id", []string{"s2", "s_none"}, rein.ErrNotFound},
		{"another session's id", []string{"s3", "s_other"}, rein.ErrNotFound},
	} {
		var inner error
		err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
			inner = tx.ConsumeSupplements(c.ids, "run_1", 2)
			return inner
		})
		wantErr(t, inner, c.want, "Tx.ConsumeSupplements of "+c.what)
		wantErr(t, err, c.want, "Update consuming "+c.what)
		if n, err := t.S.PendingSupplements(t.Ctx, key); err != nil || n != 2 {
			t.Fatalf("PendingSupplements after consuming %s = %d, %v; want 2", c.what, n, err)
		}
	}
	if s, err := t.S.GetSupplement(t.Ctx, other, "s_other"); err != nil || s.Status != store.SupplementQueued {
		t.Fatalf("another session's supplement = %+v, %v; want queued", s, err)
	}
	t.Clock.Advance(time.Second)
	t.update(key, store.Fence{}, "Update consuming one of two", func(tx store.Tx) error {
		q, err := tx.QueuedSupplements()
		if err != nil {
			return err
		}
		if len(q) != 2 || q[0].ID != "s2" || q[1].ID != "s3" {
			return fmt.Errorf("QueuedSupplements = %+v, want s2, s3 in push order", q)
		}
		return tx.ConsumeSupplements([]string{"s3"}, "run_1", 2)
	})
	s3, err := t.S.GetSupplement(t.Ctx, key, "s3")
	must(t, err, "GetSupplement")
	if s3.Status != store.SupplementConsumed || s3.RunID != "run_1" || s3.Step != 2 || !sameTime(s3.ConsumedAt, t.now()) {
		t.Fatalf("consumed supplement = %+v, want consumed by run_1 step 2 at %v", s3, t.now())
	}
	s2, err := t.S.GetSupplement(t.Ctx, key, "s2")
	must(t, err, "GetSupplement")
	if s2.Status != store.SupplementQueued {
		t.Fatalf("unnamed supplement = %+v, want still queued", s2)
	}
}

// Events appended in an Update are seen by readers all at once, only when
// the Update committed, and wake WaitEvents then; a failed Update's events
// are never seen and take no seq.
func testUpdateEventsOnCommit(t *T) {
	key := t.newSession("alice")
	woke := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		woke <- t.S.WaitEvents(t.Ctx, key, 0)
	}()
	<-waiting

	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.AppendEvents(ev(rein.EventMessageDelta, "", `{"n":0}`)); err != nil {
			return err
		}
		return errors.New("give up")
	})
	if err == nil {
		t.Fatal("failing Update returned nil")
	}
	if last, err := t.S.LastSeq(t.Ctx, key); err != nil || last != 0 {
		t.Fatalf("LastSeq after a failed Update = %d, %v; want 0", last, err)
	}
	select {
	case err := <-woke:
		t.Fatalf("WaitEvents returned %v after an Update that failed", err)
	default:
	}

	// A reader racing the Update sees none or all of its events, never
	// some: whichever side of the commit it lands on.
	const n = 3
	seen := make(chan int, 1)
	t.update(key, store.Fence{}, "Update appending events", func(tx store.Tx) error {
		for i := range n {
			if _, err := tx.AppendEvents(ev(rein.EventMessageDelta, "", fmt.Sprintf(`{"n":%d}`, i))); err != nil {
				return err
			}
			if i == 0 {
				go func() {
					evs, _, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
					if err != nil {
						seen <- -1
						return
					}
					seen <- len(evs)
				}()
			}
		}
		return nil
	})
	select {
	case err := <-woke:
		must(t, err, "WaitEvents")
	case <-time.After(10 * time.Second):
		t.Fatal("WaitEvents did not wake within 10s of the Update's commit")
	}
	if got := <-seen; got != 0 && got != n {
		t.Fatalf("a concurrent reader saw %d of the Update's %d events", got, n)
	}
	evs, last, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if last != n || len(evs) != n {
		t.Fatalf("log after the Update: %d events, last %d; want %d", len(evs), last, n)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) || !jsonEqual(e.Payload, fmt.Appendf(nil, `{"n":%d}`, i)) {
			t.Fatalf("event %d = seq %d %s", i, e.Seq, e.Payload)
		}
	}
}

// Concurrent Updates on one session run one after another: each reads the
// runs the earlier ones created, so every "count the runs, create the
// next" sees a different count, and their events interleave with plain
// appends without a gap.
func testUpdateConcurrent(t *T) {
	key := t.newSession("alice")
	const updaters, appenders = 16, 8
	type result struct {
		count int
		seqs  []int64
		err   error
	}
	results := make([]result, updaters)
	appendErrs := make([]error, appenders)
	parallel(updaters+appenders, func(i int) {
		if i >= updaters {
			_, appendErrs[i-updaters] = t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
			return
		}
		r := &results[i]
		r.err = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
			runs, err := tx.Runs()
			if err != nil {
				return err
			}
			r.count = len(runs)
			if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: fmt.Sprintf("run_%02d", i),
				Status: rein.StatusQueued, QueueOrder: int64(len(runs))}); err != nil {
				return err
			}
			evs, err := tx.AppendEvents(ev(rein.EventRunQueued, "", fmt.Sprintf(`{"count":%d}`, len(runs))), ev(rein.EventUserMessage, "", `{}`))
			r.seqs = nil
			for _, e := range evs {
				r.seqs = append(r.seqs, e.Seq)
			}
			return err
		})
	})
	counts := map[int]bool{}
	for i, r := range results {
		must(t, r.err, fmt.Sprintf("Update %d", i))
		if counts[r.count] {
			t.Fatalf("two Updates both saw %d runs: they did not serialise", r.count)
		}
		counts[r.count] = true
		if len(r.seqs) != 2 || r.seqs[1] != r.seqs[0]+1 {
			t.Fatalf("Update %d got seqs %v, want two consecutive", i, r.seqs)
		}
	}
	for i, err := range appendErrs {
		must(t, err, fmt.Sprintf("AppendEvents %d", i))
	}
	total := 2*updaters + appenders
	evs, last, err := t.S.ReadEvents(t.Ctx, key, 0, total+10)
	must(t, err, "ReadEvents")
	if last != int64(total) || len(evs) != total {
		t.Fatalf("log has %d events, last %d; want %d", len(evs), last, total)
	}
	next := 0
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, e.Seq)
		}
		if e.Type == rein.EventRunQueued {
			// Updates commit in the order they ran, so the counts they
			// saw appear in the log in order.
			var p struct{ Count int }
			must(t, json.Unmarshal(e.Payload, &p), "payload")
			if p.Count != next {
				t.Fatalf("run_queued with count %d at seq %d, want count %d", p.Count, e.Seq, next)
			}
			next++
		}
	}
}

func testUpdateCancelled(t *T) {
	key := t.newSession("alice")
	ctx, cancel := context.WithCancel(t.Ctx)
	cancel()
	err := t.S.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.AppendEvents(ev(rein.EventMessageDelta, "", `{}`))
		return err
	})
	wantErr(t, err, context.Canceled, "Update with a cancelled context")
	if last, err := t.S.LastSeq(t.Ctx, key); err != nil || last != 0 {
		t.Fatalf("LastSeq after a cancelled Update = %d, %v; want 0", last, err)
	}
}

// A Tx acts on its own session only: a run record naming another session
// never lands there, whatever the store answers.
func testUpdateOtherSession(t *T) {
	key, other := t.newSession("alice"), t.newSession("alice")
	_ = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		_ = tx.CreateRun(&store.RunRecord{Owner: other.Owner, SessionID: other.ID, ID: "run_x", Status: rein.StatusQueued})
		return nil
	})
	list, err := t.S.ListRuns(t.Ctx, other)
	must(t, err, "ListRuns")
	if len(list) != 0 {
		t.Fatalf("an Update of %s created %v in %s", key, runIDs(list), other)
	}
}

// An unexpired lease is never taken over, not even by the run id that
// holds it (a second claim of the turn by the same run is still a second
// claim), neither by AcquireLease nor inside an Update.
func testLeaseNoSelfTakeover(t *T) {
	key := t.newSession("alice")
	held, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl - time.Millisecond)
	wantBusy := func(err error, what string) {
		t.Helper()
		wantErr(t, err, rein.ErrSessionBusy, what)
		var re *rein.Error
		if !errors.As(err, &re) || re.RunID != "run_1" {
			t.Fatalf("%s: busy error = %#v, want a *rein.Error with RunID run_1", what, err)
		}
	}
	for _, holder := range []string{"inst-a", "inst-b"} {
		_, err = t.acquireLease(key, holder, "run_1", ttl)
		wantBusy(err, "AcquireLease by the holding run on "+holder)
	}
	_, err = t.acquireLease(key, "inst-b", "run_2", ttl)
	wantBusy(err, "AcquireLease by another run")
	var inner error
	err = t.S.Update(t.Ctx, key, held.Fence(), func(tx store.Tx) error {
		_, inner = tx.AcquireLease("inst-a", "run_1", ttl)
		return inner
	})
	wantBusy(inner, "Tx.AcquireLease by the holding run")
	wantBusy(err, "Update acquiring a held lease")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, held)
}

// Once expired by the store's clock, a lease is taken over, by the same
// run id too (a run resumed after its instance was lost), with a larger
// token.
func testLeaseSelfTakeoverAfterExpiry(t *T) {
	key := t.newSession("alice")
	first, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Millisecond)
	second, err := t.acquireLease(key, "inst-b", "run_1", ttl)
	must(t, err, "AcquireLease by the same run after expiry")
	if second.Token <= first.Token || second.Holder != "inst-b" {
		t.Fatalf("takeover lease = %+v (first token %d)", second, first.Token)
	}
	t.Clock.Advance(ttl + time.Millisecond)
	var third *store.Lease
	t.update(key, second.Fence(), "Update resuming the run", func(tx store.Tx) error {
		var err error
		third, err = tx.AcquireLease("inst-a", "run_1", ttl)
		return err
	})
	if third.Token <= second.Token {
		t.Fatalf("token after a takeover inside an Update %d <= %d", third.Token, second.Token)
	}
	wantTime(t, third.ExpiresAt, t.Clock.Now().Add(ttl).UTC().Truncate(time.Microsecond), "ExpiresAt")
}

// A holder that let its lease expire has lost it even if nobody took it
// over: RenewLease fails and leaves the lease as it was. Its token still
// fences writes until a takeover (the rule of store.Fence).
func testLeaseRenewExpired(t *T) {
	key := t.newSession("alice")
	l, err := t.acquireLease(key, "inst-a", "run_1", ttl)
	must(t, err, "AcquireLease")
	t.Clock.Advance(ttl + time.Millisecond)
	_, err = t.S.RenewLease(t.Ctx, l, ttl)
	wantErr(t, err, rein.ErrLeaseLost, "RenewLease after expiry")
	got, err := t.S.GetLease(t.Ctx, key)
	must(t, err, "GetLease")
	wantLease(t, got, l)
	_, err = t.S.AppendEvents(t.Ctx, key, l.Fence(), []rein.Event{ev(rein.EventMessageDelta, "run_1", `{}`)})
	must(t, err, "AppendEvents with an expired, untaken, unrenewable lease")
	taken, err := t.acquireLease(key, "inst-b", "run_2", ttl)
	must(t, err, "AcquireLease after a refused renewal")
	_, err = t.S.RenewLease(t.Ctx, l, ttl)
	wantErr(t, err, rein.ErrLeaseLost, "RenewLease after takeover")
	_, err = t.S.RenewLease(t.Ctx, taken, ttl)
	must(t, err, "RenewLease of the live lease")
}

func testRunNewFields(t *T) {
	key := t.newSession("alice")
	two := 2
	rec := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusRunning, ClientID: "c-1",
		Resumes: 1, Stop: store.StopInterrupt, RolledBack: true}
	must(t, t.createRun(rec), "CreateRun")
	want := *rec
	want.CreatedAt = t.now()
	check := func(what string) {
		t.Helper()
		got, err := t.S.GetRun(t.Ctx, key, "run_1")
		must(t, err, "GetRun")
		wantRun(t, got, &want)
		byClient, err := t.S.GetRunByClientID(t.Ctx, key, "c-1")
		must(t, err, "GetRunByClientID")
		wantRun(t, byClient, &want)
		list, err := t.S.ListRuns(t.Ctx, key)
		must(t, err, "ListRuns")
		if len(list) != 1 {
			t.Fatalf("%s: ListRuns = %d runs", what, len(list))
		}
		wantRun(t, list[0], &want)
		if !want.Status.Terminal() {
			list, err = t.S.ListRunsByStatus(t.Ctx, want.Status)
			must(t, err, "ListRunsByStatus")
			if len(list) != 1 {
				t.Fatalf("%s: ListRunsByStatus = %d runs", what, len(list))
			}
			wantRun(t, list[0], &want)
		}
		var inTx *store.RunRecord
		var all []*store.RunRecord
		t.update(key, store.Fence{}, "Update reading the run", func(tx store.Tx) error {
			var err error
			if inTx, err = tx.GetRun("run_1"); err != nil {
				return err
			}
			all, err = tx.Runs()
			return err
		})
		wantRun(t, inTx, &want)
		if len(all) != 1 {
			t.Fatalf("%s: Tx.Runs = %d runs", what, len(all))
		}
		wantRun(t, all[0], &want)
	}
	check("after CreateRun")

	// Zero fields leave them alone.
	got, err := t.updateRun(key, store.Fence{}, "run_1", store.RunUpdate{Instance: "inst-b"})
	must(t, err, "UpdateRun")
	want.Instance = "inst-b"
	wantRun(t, got, &want)
	check("after an update of other fields")

	got, err = t.updateRun(key, store.Fence{}, "run_1", store.RunUpdate{Resumes: &two, Stop: store.StopRollback})
	must(t, err, "UpdateRun")
	want.Resumes, want.Stop = 2, "rollback"
	wantRun(t, got, &want)
	check("after UpdateRun")

	zero := 0
	var fromTx *store.RunRecord
	t.update(key, store.Fence{}, "Update updating the run", func(tx store.Tx) error {
		var err error
		fromTx, err = tx.UpdateRun("run_1", store.RunUpdate{Resumes: &zero, Status: rein.StatusCancelled, Reason: rein.ReasonCancelled})
		return err
	})
	want.Resumes, want.Status, want.Reason = 0, rein.StatusCancelled, rein.ReasonCancelled
	wantRun(t, fromTx, &want)
	check("after Tx.UpdateRun")

	// A fresh run has the zero values.
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_2", Status: rein.StatusQueued}), "CreateRun")
	plain, err := t.S.GetRun(t.Ctx, key, "run_2")
	must(t, err, "GetRun")
	if plain.Resumes != 0 || plain.Stop != store.StopNone || plain.RolledBack {
		t.Fatalf("fresh run = %+v, want zero Resumes, Stop and RolledBack", plain)
	}
}

// testUpdateRefusedCreateRun: a CreateRun refused for a taken id or client
// id is a refusal, not a broken transaction: fn goes on, and what else it
// writes commits (the admission of a client_id repeat relies on it).
func testUpdateRefusedCreateRun(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued, ClientID: "c-1"}), "CreateRun")
	t.update(key, store.Fence{}, "Update", func(tx store.Tx) error {
		err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued})
		if !errors.Is(err, rein.ErrConflict) {
			return fmt.Errorf("CreateRun with a taken id: %v, want a conflict", err)
		}
		err = tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_2", Status: rein.StatusQueued, ClientID: "c-1"})
		if !errors.Is(err, rein.ErrConflict) {
			return fmt.Errorf("CreateRun with a taken client id: %v, want a conflict", err)
		}
		if err := txMust(tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_3", Status: rein.StatusQueued, ClientID: "c-3"}), "CreateRun"); err != nil {
			return err
		}
		_, err = tx.AppendEvents(ev(rein.EventSystemMessage, "", `{"text":"after"}`))
		return txMust(err, "AppendEvents")
	})
	runs, err := t.S.ListRuns(t.Ctx, key)
	must(t, err, "ListRuns")
	ids := map[string]bool{}
	for _, r := range runs {
		ids[r.ID] = true
	}
	if len(runs) != 2 || !ids["run_1"] || !ids["run_3"] {
		t.Fatalf("runs after the Update: %v, want run_1 and run_3", ids)
	}
	evs, _, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if len(evs) != 1 || evs[0].Type != rein.EventSystemMessage {
		t.Fatalf("events after the Update: %+v", evs)
	}
}
