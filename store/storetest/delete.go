package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Delete/TreeWithEverythingIsGone", testDeleteTree},
	test{"Delete/CheckSeesTheTree", testDeleteCheckSees},
	test{"Delete/CheckRefusalWritesNothing", testDeleteRefused},
	test{"Delete/MissingAndOtherOwnerAreNotFound", testDeleteNotFound},
	test{"Delete/SubtreeLeavesTheParent", testDeleteSubtree},
	test{"Delete/WakesWaiters", testDeleteWakesWaiters},
	test{"Delete/KeyCanBeCreatedAgainEmpty", testDeleteRecreate},
	test{"Delete/AtomicWithConcurrentUpdate", testDeleteVsUpdate},
	test{"Delete/AtomicWithConcurrentChild", testDeleteVsChild},
	test{"Delete/ListInactive", testListInactive},
)

// FillTree creates, in s, a root session of owner "alice" with a child and
// a grandchild, and a second root beside them, and gives each of the four
// one row of every kind a store keeps for a session: events, history, a
// finished run with a client id and a queued one, a consumed and a queued
// supplement, an answered and a pending confirmation, and a live lease.
// It returns the tree's keys, root first, and the other root's key.
//
// Backend tests use it to check that a deletion leaves no row behind in
// any table (see the SQLite and PostgreSQL tests that list their schema).
func FillTree(tb testing.TB, s store.Store) (tree []rein.SessionKey, survivor rein.SessionKey) {
	tb.Helper()
	ctx := context.Background()
	mk := func(id, parent string) rein.SessionKey {
		sess := &store.Session{Owner: "alice", ID: id, ParentID: parent,
			Subagent: &store.SubagentDescriptor{Label: "l-" + id, Depth: 1}}
		if parent == "" {
			sess.Subagent = nil
		}
		if err := s.CreateSession(ctx, sess); err != nil {
			tb.Fatalf("CreateSession(%s): %v", id, err)
		}
		return sess.Key()
	}
	root := mk("ses_root", "")
	child := mk("ses_child", "ses_root")
	grand := mk("ses_grand", "ses_child")
	survivor = mk("ses_survivor", "")
	for _, key := range []rein.SessionKey{root, child, grand, survivor} {
		fill(tb, s, key)
	}
	return []rein.SessionKey{root, child, grand}, survivor
}

// fill gives key one row of every kind (see FillTree).
func fill(tb testing.TB, s store.Store, key rein.SessionKey) {
	tb.Helper()
	ctx := context.Background()
	done, queued := "run_done_"+key.ID, "run_queued_"+key.ID
	ok := func(err error, what string) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("%s of %s: %v", what, key.ID, err)
		}
	}
	_, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{
		ev(rein.EventUserMessage, done, `{"text":"hi"}`), ev(rein.EventRunCompleted, done, `{}`)})
	ok(err, "AppendEvents")
	ok(s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.AppendHistory(transcript()...); err != nil {
			return err
		}
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: done, Status: rein.StatusCompleted,
			Reason: rein.ReasonStop, ClientID: "client-1", Input: "hi"}); err != nil {
			return err
		}
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: queued, Status: rein.StatusQueued,
			ClientID: "client-2", Input: "next"}); err != nil {
			return err
		}
		if _, _, err := tx.PushSupplement(sup(key, "sup_consumed", "seen")); err != nil {
			return err
		}
		if err := tx.ConsumeSupplements([]string{"sup_consumed"}, done, 1); err != nil {
			return err
		}
		if _, _, err := tx.PushSupplement(sup(key, "sup_queued", "unseen")); err != nil {
			return err
		}
		if err := tx.CreateConfirmation(confirmation(key, done, "call_answered")); err != nil {
			return err
		}
		if _, err := tx.ResolveConfirmation("call_answered", true, ""); err != nil {
			return err
		}
		if err := tx.CreateConfirmation(confirmation(key, queued, "call_pending")); err != nil {
			return err
		}
		if _, err := tx.AcquireLease("inst-a", queued, time.Hour); err != nil {
			return err
		}
		return tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, ClientID: "c-early", Mode: "cancel"})
	}), "Update filling the session")
	if ob, isOutbox := s.(store.Outbox); isOutbox {
		// A webhook's cursor on the session and a delivery of its first event.
		ok(ob.EnqueueDeliveries(ctx, key, "https://hook.example/", 0, 2,
			[]*store.Delivery{{Seq: 1, Type: rein.EventUserMessage, Body: []byte(`{}`)}}), "EnqueueDeliveries")
	}
}

// wantGone fails unless every read of key answers not found.
func (t *T) wantGone(key rein.SessionKey) {
	t.Helper()
	_, err := t.S.GetSession(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetSession of "+key.ID)
	_, err = t.S.LoadHistory(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "LoadHistory of "+key.ID)
	_, _, err = t.S.ReadEvents(t.Ctx, key, 0, 10)
	wantErr(t, err, rein.ErrNotFound, "ReadEvents of "+key.ID)
	_, err = t.S.LastSeq(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "LastSeq of "+key.ID)
	_, err = t.S.GetRun(t.Ctx, key, "run_done_"+key.ID)
	wantErr(t, err, rein.ErrNotFound, "GetRun of "+key.ID)
	_, err = t.S.GetRunByClientID(t.Ctx, key, "client-1")
	wantErr(t, err, rein.ErrNotFound, "GetRunByClientID of "+key.ID)
	_, err = t.S.GetSupplement(t.Ctx, key, "sup_queued")
	wantErr(t, err, rein.ErrNotFound, "GetSupplement of "+key.ID)
	_, err = t.S.GetConfirmation(t.Ctx, key, "call_pending")
	wantErr(t, err, rein.ErrNotFound, "GetConfirmation of "+key.ID)
	_, err = t.S.GetLease(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetLease of "+key.ID)
	err = t.S.Update(t.Ctx, key, store.Fence{}, func(store.Tx) error { return errors.New("fn ran for a deleted session") })
	wantErr(t, err, rein.ErrNotFound, "Update of "+key.ID)
	_, err = t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	wantErr(t, err, rein.ErrNotFound, "AppendEvents to "+key.ID)
}

func testDeleteTree(t *T) {
	tree, survivor := FillTree(t, t.S)
	before := t.snapshot(survivor, "sup_consumed", "sup_queued")
	deleted, err := t.S.DeleteSession(t.Ctx, tree[0], nil)
	must(t, err, "DeleteSession")
	var ids []string
	for _, s := range deleted {
		ids = append(ids, s.ID)
	}
	if want := []string{"ses_root", "ses_child", "ses_grand"}; !slices.Equal(ids, want) {
		t.Fatalf("deleted %v, want %v (root first, parents before children)", ids, want)
	}
	if deleted[1].Subagent == nil || deleted[1].Subagent.Label != "l-ses_child" {
		t.Fatalf("deleted child = %+v, want it as it was stored (with its descriptor)", deleted[1])
	}
	for _, key := range tree {
		t.wantGone(key)
	}
	list, err := t.S.ListSessions(t.Ctx, "alice")
	must(t, err, "ListSessions")
	if got := sessionIDs(list); !slices.Equal(got, []string{"ses_survivor"}) {
		t.Fatalf("ListSessions after the deletion = %v, want only the survivor", got)
	}
	runs, err := t.S.ListRunsByStatus(t.Ctx, rein.StatusQueued, rein.StatusCompleted)
	must(t, err, "ListRunsByStatus")
	for _, r := range runs {
		if r.SessionID != survivor.ID {
			t.Fatalf("ListRunsByStatus still lists run %s of deleted session %s", r.ID, r.SessionID)
		}
	}
	if l, err := t.S.GetLease(t.Ctx, survivor); err != nil || l.RunID != "run_queued_"+survivor.ID {
		t.Fatalf("the survivor's lease after the deletion = %+v, %v", l, err)
	}
	t.wantSnapshot(t.snapshot(survivor, "sup_consumed", "sup_queued"), before, "deleting another tree")
}

func testDeleteCheckSees(t *T) {
	tree, _ := FillTree(t, t.S)
	// The child gets a running run too, and the grandchild a newer event.
	must(t, t.createRun(&store.RunRecord{Owner: "alice", SessionID: tree[1].ID, ID: "run_running",
		Status: rein.StatusRunning, QueueOrder: -5}), "CreateRun")
	created := t.now()
	t.Clock.Advance(time.Minute)
	_, err := t.S.AppendEvents(t.Ctx, tree[2], store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents")
	t.Clock.Advance(time.Minute)
	var (
		seen  []*store.TreeSession
		at    time.Time
		calls int
	)
	_, err = t.S.DeleteSession(t.Ctx, tree[0], func(now time.Time, tr []*store.TreeSession) error {
		calls++
		seen, at = tr, now
		return nil
	})
	must(t, err, "DeleteSession")
	if calls != 1 {
		t.Fatalf("check called %d times, want once", calls)
	}
	wantTime(t, at, t.now(), "check's now (the store's clock)")
	if len(seen) != 3 {
		t.Fatalf("check saw %d sessions, want 3", len(seen))
	}
	for i, key := range tree {
		ts := seen[i]
		if ts.Session.Key() != key {
			t.Fatalf("tree[%d] = %s, want %s", i, ts.Session.Key(), key)
		}
		if ts.Lease == nil || ts.Lease.RunID != "run_queued_"+key.ID {
			t.Fatalf("tree[%d] lease = %+v, want the one held for run_queued_%s", i, ts.Lease, key.ID)
		}
		want := []string{"run_queued_" + key.ID}
		if i == 1 {
			want = []string{"run_running", "run_queued_" + key.ID} // queue order
		}
		if got := runIDs(ts.Active); !slices.Equal(got, want) {
			t.Fatalf("tree[%d] active runs = %v, want %v", i, got, want)
		}
		wantLast := created
		if i == 2 {
			wantLast = created.Add(time.Minute)
		}
		wantTime(t, ts.LastActivity, wantLast, fmt.Sprintf("tree[%d] LastActivity", i))
	}
	// A session without events was last active when it was created.
	fresh := t.newSession("alice")
	_, err = t.S.DeleteSession(t.Ctx, fresh, func(_ time.Time, tr []*store.TreeSession) error {
		seen = tr
		return nil
	})
	must(t, err, "DeleteSession(fresh)")
	if len(seen) != 1 || len(seen[0].Active) != 0 || seen[0].Active == nil || seen[0].Lease != nil {
		t.Fatalf("fresh session's tree = %+v, want one session, no run ([] not nil), no lease", seen)
	}
	wantTime(t, seen[0].LastActivity, t.now(), "LastActivity of a session without events")
}

func testDeleteRefused(t *T) {
	tree, _ := FillTree(t, t.S)
	ids := []string{"sup_consumed", "sup_queued"}
	var before []snapshot
	for _, k := range tree {
		before = append(before, t.snapshot(k, ids...))
	}
	refusal := &rein.Error{Code: rein.CodeSessionBusy, Message: "busy", RunID: "run_queued_ses_child"}
	deleted, err := t.S.DeleteSession(t.Ctx, tree[0], func(time.Time, []*store.TreeSession) error { return refusal })
	if err != refusal {
		t.Fatalf("DeleteSession with a refusing check = %v, want the check's error unchanged", err)
	}
	if deleted != nil {
		t.Fatalf("a refused deletion returned %v", deleted)
	}
	for i, k := range tree {
		t.wantSnapshot(t.snapshot(k, ids...), before[i], "a refused deletion")
	}
}

func testDeleteNotFound(t *T) {
	key := t.newSession("alice")
	called := false
	check := func(time.Time, []*store.TreeSession) error { called = true; return nil }
	_, err := t.S.DeleteSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_missing"}, check)
	wantErr(t, err, rein.ErrNotFound, "DeleteSession(missing)")
	_, err = t.S.DeleteSession(t.Ctx, otherOwner(key), check)
	wantErr(t, err, rein.ErrNotFound, "DeleteSession(another owner's)")
	if called {
		t.Fatal("check was called for a missing session")
	}
	if _, err := t.S.GetSession(t.Ctx, key); err != nil {
		t.Fatalf("another owner's delete touched the session: %v", err)
	}
}

func testDeleteSubtree(t *T) {
	tree, _ := FillTree(t, t.S)
	deleted, err := t.S.DeleteSession(t.Ctx, tree[1], nil)
	must(t, err, "DeleteSession(child)")
	if len(deleted) != 2 || deleted[0].ID != "ses_child" || deleted[1].ID != "ses_grand" {
		t.Fatalf("deleted %v, want the child and the grandchild", sessionIDs(deleted))
	}
	t.wantGone(tree[1])
	t.wantGone(tree[2])
	kids, err := t.S.ListChildren(t.Ctx, tree[0])
	must(t, err, "ListChildren")
	if len(kids) != 0 {
		t.Fatalf("the root still lists children %v", sessionIDs(kids))
	}
	hist, err := t.S.LoadHistory(t.Ctx, tree[0])
	must(t, err, "LoadHistory(root)")
	wantMessages(t, hist, transcript())
}

func testDeleteWakesWaiters(t *T) {
	tree, _ := FillTree(t, t.S)
	errs := make(chan error, len(tree))
	for _, key := range tree {
		go func() {
			// Past the last seq: it waits until something happens.
			errs <- t.S.WaitEvents(t.Ctx, key, 1_000)
		}()
	}
	_, err := t.S.DeleteSession(t.Ctx, tree[0], nil)
	must(t, err, "DeleteSession")
	timeout := time.After(5 * time.Second)
	for range tree {
		select {
		case err := <-errs:
			// A waiter that started after the deletion finds it gone at
			// once; one that was waiting is woken: not found either way.
			wantErr(t, err, rein.ErrNotFound, "WaitEvents on a deleted session")
		case <-timeout:
			t.Fatal("a WaitEvents caller was not woken by the deletion")
		}
	}
}

func testDeleteRecreate(t *T) {
	tree, _ := FillTree(t, t.S)
	_, err := t.S.DeleteSession(t.Ctx, tree[0], nil)
	must(t, err, "DeleteSession")
	again := &store.Session{Owner: "alice", ID: tree[0].ID}
	must(t, t.S.CreateSession(t.Ctx, again), "CreateSession with the deleted key")
	sn := t.snapshot(again.Key(), "sup_consumed", "sup_queued")
	if sn.last != 0 || sn.history != 0 || len(sn.runs) != 0 || sn.pending != 0 || len(sn.sups) != 0 || len(sn.confs) != 0 || sn.lease.Token != 0 {
		t.Fatalf("the re-created session is not empty: %+v", sn)
	}
	_, err = t.S.GetRunByClientID(t.Ctx, again.Key(), "client-1")
	wantErr(t, err, rein.ErrNotFound, "the deleted session's client id in the new one")
	// The deleted runs' ids are free again.
	must(t, t.createRun(&store.RunRecord{Owner: "alice", SessionID: again.ID, ID: "run_done_ses_root",
		Status: rein.StatusQueued, ClientID: "client-1"}), "CreateRun reusing a deleted run id and client id")
	l, err := t.acquireLease(again.Key(), "inst-b", "run_done_ses_root", time.Minute)
	must(t, err, "AcquireLease on the re-created session")
	if l.Token <= 0 {
		t.Fatalf("lease token %d", l.Token)
	}
}

// testDeleteVsUpdate races an Update that admits a run into the child with
// a deletion of the tree that refuses when any run is active: either the
// deletion saw the run (and refused), or the Update found the session
// gone. Never both succeeded, which would leave a run in a deleted tree.
func testDeleteVsUpdate(t *T) {
	for i := range 30 {
		root := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_r%02d", i)}
		child := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_c%02d", i), ParentID: root.ID}
		must(t, t.S.CreateSession(t.Ctx, root), "CreateSession")
		must(t, t.S.CreateSession(t.Ctx, child), "CreateSession")
		busy := errors.New("busy")
		var upErr, delErr error
		parallel(2, func(g int) {
			if g == 0 {
				upErr = t.S.Update(t.Ctx, child.Key(), store.Fence{}, func(tx store.Tx) error {
					if err := tx.CreateRun(&store.RunRecord{Owner: "alice", SessionID: child.ID, ID: fmt.Sprintf("run_%02d", i), Status: rein.StatusQueued}); err != nil {
						return err
					}
					_, err := tx.AppendEvents(ev(rein.EventUserMessage, "", `{}`))
					return err
				})
				return
			}
			_, delErr = t.S.DeleteSession(t.Ctx, root.Key(), func(_ time.Time, tree []*store.TreeSession) error {
				for _, ts := range tree {
					if len(ts.Active) > 0 {
						return busy
					}
				}
				return nil
			})
		})
		switch {
		case upErr == nil && errors.Is(delErr, busy):
			if _, err := t.S.GetRun(t.Ctx, child.Key(), fmt.Sprintf("run_%02d", i)); err != nil {
				t.Fatalf("round %d: the refused deletion lost the run: %v", i, err)
			}
		case errors.Is(upErr, rein.ErrNotFound) && delErr == nil:
			t.wantGoneKey(child.Key())
		default:
			t.Fatalf("round %d: Update = %v, DeleteSession = %v; want one of (nil, refused) or (not found, nil)", i, upErr, delErr)
		}
	}
}

// testDeleteVsChild races the creation of a child under the tree's leaf
// with the tree's deletion: a child that was created is either deleted
// with the tree or the tree is still there — never an orphan.
func testDeleteVsChild(t *T) {
	for i := range 30 {
		root := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_r%02d", i)}
		leaf := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_l%02d", i), ParentID: root.ID}
		must(t, t.S.CreateSession(t.Ctx, root), "CreateSession")
		must(t, t.S.CreateSession(t.Ctx, leaf), "CreateSession")
		kid := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_k%02d", i), ParentID: leaf.ID}
		var createErr, delErr error
		var deleted []*store.Session
		parallel(2, func(g int) {
			if g == 0 {
				createErr = t.S.CreateSession(t.Ctx, kid)
				return
			}
			deleted, delErr = t.S.DeleteSession(t.Ctx, root.Key(), nil)
		})
		must(t, delErr, fmt.Sprintf("round %d: DeleteSession", i))
		switch {
		case createErr == nil:
			if !slices.Contains(sessionIDs(deleted), kid.ID) {
				t.Fatalf("round %d: the child was created but not deleted with its tree (deleted %v)", i, sessionIDs(deleted))
			}
		case errors.Is(createErr, rein.ErrNotFound):
		default:
			t.Fatalf("round %d: CreateSession = %v, want nil or not found", i, createErr)
		}
		t.wantGoneKey(kid.Key())
	}
}

// wantGoneKey fails unless the session is missing.
func (t *T) wantGoneKey(key rein.SessionKey) {
	t.Helper()
	_, err := t.S.GetSession(t.Ctx, key)
	wantErr(t, err, rein.ErrNotFound, "GetSession of "+key.ID)
}

func testListInactive(t *T) {
	t0 := t.now()
	mk := func(owner, id, parent string) rein.SessionKey {
		s := &store.Session{Owner: owner, ID: id, ParentID: parent}
		must(t, t.S.CreateSession(t.Ctx, s), "CreateSession")
		return s.Key()
	}
	quiet := mk("alice", "ses_b_quiet", "")
	mk("alice", "ses_c_child", "ses_b_quiet") // a child: never listed
	talky := mk("alice", "ses_a_talky", "")
	bobs := mk("bob", "ses_a_bob", "")
	t.Clock.Advance(10 * time.Minute)
	_, err := t.S.AppendEvents(t.Ctx, talky, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents")
	t.Clock.Advance(10 * time.Minute)
	late := mk("alice", "ses_d_late", "")

	keys := func(list []store.SessionActivity) []rein.SessionKey {
		var out []rein.SessionKey
		for _, a := range list {
			out = append(out, a.Key)
		}
		return out
	}
	got, err := t.S.ListInactive(t.Ctx, t0.Add(5*time.Minute), rein.SessionKey{}, 0)
	must(t, err, "ListInactive")
	if want := []rein.SessionKey{quiet, bobs}; !slices.Equal(keys(got), want) {
		t.Fatalf("ListInactive(t0+5m) = %v, want %v (roots idle since, by key)", keys(got), want)
	}
	wantTime(t, got[0].LastActivity, t0, "LastActivity of a session without events")
	got, err = t.S.ListInactive(t.Ctx, t0.Add(15*time.Minute), rein.SessionKey{}, 0)
	must(t, err, "ListInactive")
	if want := []rein.SessionKey{talky, quiet, bobs}; !slices.Equal(keys(got), want) {
		t.Fatalf("ListInactive(t0+15m) = %v, want %v", keys(got), want)
	}
	wantTime(t, got[0].LastActivity, t0.Add(10*time.Minute), "LastActivity (the last event's time)")
	// A bound equal to the last activity is not after it.
	got, err = t.S.ListInactive(t.Ctx, t0.Add(10*time.Minute), rein.SessionKey{}, 0)
	must(t, err, "ListInactive")
	if slices.Contains(keys(got), talky) {
		t.Fatal("ListInactive lists a session active exactly at the bound")
	}
	// Paging by key.
	got, err = t.S.ListInactive(t.Ctx, t.now().Add(time.Second), rein.SessionKey{}, 2)
	must(t, err, "ListInactive page 1")
	if want := []rein.SessionKey{talky, quiet}; !slices.Equal(keys(got), want) {
		t.Fatalf("page 1 = %v, want %v", keys(got), want)
	}
	got, err = t.S.ListInactive(t.Ctx, t.now().Add(time.Second), quiet, 2)
	must(t, err, "ListInactive page 2")
	if want := []rein.SessionKey{late, bobs}; !slices.Equal(keys(got), want) {
		t.Fatalf("page 2 = %v, want %v", keys(got), want)
	}
	got, err = t.S.ListInactive(t.Ctx, t0, rein.SessionKey{}, 0)
	must(t, err, "ListInactive")
	if got == nil || len(got) != 0 {
		t.Fatalf("ListInactive before anything = %#v, want []", got)
	}
}
