package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Runs/CreateGetRoundTrip", testRunRoundTrip},
	test{"Runs/DuplicateIDConflicts", testRunDuplicateID},
	test{"Runs/ClientIDUniquePerSession", testRunClientID},
	test{"Runs/MissingSessionAndOtherOwner", testRunNotFound},
	test{"Runs/UpdateZeroFieldsUnchanged", testRunUpdate},
	test{"Runs/TerminalIsFinal", testRunTerminalFinal},
	test{"Runs/ConcurrentTerminalUpdatesOneWins", testRunConcurrentTerminal},
	test{"Runs/ListNewestFirstThenIDDesc", testListRuns},
	test{"Runs/ListByStatusAcrossOwners", testListRunsByStatus},
	test{"Runs/ListEndedSinceByEndTime", testListEndedSince},
)

// wantRun compares run records field by field, times as stored.
func wantRun(t testing.TB, got, want *store.RunRecord) {
	t.Helper()
	g, w := *got, *want
	times := [][2]time.Time{{g.Deadline, w.Deadline}, {g.CreatedAt, w.CreatedAt}, {g.StartedAt, w.StartedAt}, {g.EndedAt, w.EndedAt}}
	for i, p := range times {
		if !sameTime(p[0], p[1]) {
			t.Fatalf("run %s time %d = %v, want %v (UTC)", w.ID, i, p[0], p[1])
		}
	}
	g.Deadline, g.CreatedAt, g.StartedAt, g.EndedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	w.Deadline, w.CreatedAt, w.StartedAt, w.EndedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	// Pointers (cost, budget) by what they point at.
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("run = %+v (cost %v, budget %v)\nwant  %+v (cost %v, budget %v)", g, deref(g.Usage.CostUSD), g.Budget, w, deref(w.Usage.CostUSD), w.Budget)
	}
}

func deref[V any](p *V) any {
	if p == nil {
		return nil
	}
	return *p
}

func normalised(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func testRunRoundTrip(t *T) {
	key := t.newSession("alice")
	deadline := time.Date(2031, 3, 4, 6, 0, 0, 555, time.FixedZone("Y", 5*3600))
	full := &store.RunRecord{
		Owner: key.Owner, SessionID: key.ID, ID: "run_full",
		Status: rein.StatusRunning, Reason: "", Error: "", Input: "do the thing ✓",
		ClientID: "client-1", QueueOrder: -7, Deadline: deadline, Instance: "inst-a",
		Usage:     rein.Usage{InputTokens: 123, OutputTokens: 456, CostUSD: ptrTo(0.000789)},
		Budget:    &rein.Budget{Tokens: 5000, CostUSD: 0.25},
		CreatedAt: time.Date(2031, 3, 4, 5, 0, 0, 1999, time.UTC),
		StartedAt: time.Date(2031, 3, 4, 5, 0, 1, 2999, time.UTC),
	}
	must(t, t.createRun(full), "CreateRun")
	got, err := t.S.GetRun(t.Ctx, key, "run_full")
	must(t, err, "GetRun")
	want := *full
	want.Deadline, want.CreatedAt, want.StartedAt = normalised(deadline), normalised(full.CreatedAt), normalised(full.StartedAt)
	wantRun(t, got, &want)

	minimal := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_min", Status: rein.StatusQueued}
	must(t, t.createRun(minimal), "CreateRun minimal")
	got, err = t.S.GetRun(t.Ctx, key, "run_min")
	must(t, err, "GetRun minimal")
	wantRun(t, got, &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_min", Status: rein.StatusQueued, CreatedAt: t.now()})

	byClient, err := t.S.GetRunByClientID(t.Ctx, key, "client-1")
	must(t, err, "GetRunByClientID")
	if byClient.ID != "run_full" {
		t.Fatalf("GetRunByClientID = %s, want run_full", byClient.ID)
	}
	_, err = t.S.GetRunByClientID(t.Ctx, key, "client-none")
	wantErr(t, err, rein.ErrNotFound, "GetRunByClientID of an unknown client id")
	_, err = t.S.GetRun(t.Ctx, key, "run_none")
	wantErr(t, err, rein.ErrNotFound, "GetRun of an unknown run")
}

func testRunDuplicateID(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued, Input: "first"}), "CreateRun")
	err := t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusRunning, Input: "second"})
	wantErr(t, err, rein.ErrConflict, "CreateRun with a taken id")
	got, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")
	if got.Input != "first" || got.Status != rein.StatusQueued {
		t.Fatalf("duplicate create changed the run: %+v", got)
	}
}

func testRunClientID(t *T) {
	a, b := t.newSession("alice"), t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: a.Owner, SessionID: a.ID, ID: "run_a1", Status: rein.StatusRunning, ClientID: "same"}), "CreateRun")
	err := t.createRun(&store.RunRecord{Owner: a.Owner, SessionID: a.ID, ID: "run_a2", Status: rein.StatusQueued, ClientID: "same"})
	wantErr(t, err, rein.ErrConflict, "CreateRun with a client id taken in the session")
	_, err = t.S.GetRun(t.Ctx, a, "run_a2")
	wantErr(t, err, rein.ErrNotFound, "GetRun of the refused run")
	// Another session may use the same client id, and runs without one
	// never collide.
	must(t, t.createRun(&store.RunRecord{Owner: b.Owner, SessionID: b.ID, ID: "run_b1", Status: rein.StatusQueued, ClientID: "same"}), "CreateRun in another session")
	must(t, t.createRun(&store.RunRecord{Owner: a.Owner, SessionID: a.ID, ID: "run_a3", Status: rein.StatusQueued}), "CreateRun without client id")
	must(t, t.createRun(&store.RunRecord{Owner: a.Owner, SessionID: a.ID, ID: "run_a4", Status: rein.StatusQueued}), "second CreateRun without client id")
	for key, want := range map[rein.SessionKey]string{a: "run_a1", b: "run_b1"} {
		got, err := t.S.GetRunByClientID(t.Ctx, key, "same")
		must(t, err, "GetRunByClientID")
		if got.ID != want {
			t.Fatalf("GetRunByClientID in %s = %s, want %s", key, got.ID, want)
		}
	}
	_, err = t.S.GetRunByClientID(t.Ctx, a, "")
	wantErr(t, err, rein.ErrNotFound, "GetRunByClientID(\"\")")
}

func testRunNotFound(t *T) {
	err := t.createRun(&store.RunRecord{Owner: "alice", SessionID: "ses_never", ID: "run_x", Status: rein.StatusQueued})
	wantErr(t, err, rein.ErrNotFound, "CreateRun in a missing session")
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusRunning, ClientID: "c"}), "CreateRun")
	other := t.newSession("alice")
	intruder := otherOwner(key)
	_, err = t.S.GetRun(t.Ctx, intruder, "run_1")
	wantErr(t, err, rein.ErrNotFound, "GetRun as another owner")
	_, err = t.S.GetRun(t.Ctx, other, "run_1")
	wantErr(t, err, rein.ErrNotFound, "GetRun through another session")
	_, err = t.S.GetRunByClientID(t.Ctx, intruder, "c")
	wantErr(t, err, rein.ErrNotFound, "GetRunByClientID as another owner")
	_, err = t.updateRun(intruder, store.Fence{}, "run_1", store.RunUpdate{Status: rein.StatusCancelled})
	wantErr(t, err, rein.ErrNotFound, "UpdateRun as another owner")
	_, err = t.updateRun(other, store.Fence{}, "run_1", store.RunUpdate{Status: rein.StatusCancelled})
	wantErr(t, err, rein.ErrNotFound, "UpdateRun through another session")
	_, err = t.updateRun(key, store.Fence{}, "run_none", store.RunUpdate{Status: rein.StatusCancelled})
	wantErr(t, err, rein.ErrNotFound, "UpdateRun of an unknown run")
	list, err := t.S.ListRuns(t.Ctx, intruder)
	if err == nil && len(list) != 0 {
		t.Fatalf("ListRuns as another owner returned %d runs", len(list))
	}
	err = t.createRun(&store.RunRecord{Owner: intruder.Owner, SessionID: intruder.ID, ID: "run_2", Status: rein.StatusQueued})
	wantErr(t, err, rein.ErrNotFound, "CreateRun as another owner")
	got, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")
	if got.Status != rein.StatusRunning {
		t.Fatalf("run changed by refused updates: %s", got.Status)
	}
}

func testRunUpdate(t *T) {
	key := t.newSession("alice")
	rec := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued,
		Input: "in", ClientID: "c", QueueOrder: 5, Instance: "inst-a", Usage: rein.Usage{InputTokens: 1, OutputTokens: 2},
		Deadline: suiteStart.Add(time.Hour)}
	must(t, t.createRun(rec), "CreateRun")
	want, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")

	// The zero update changes nothing.
	got, err := t.updateRun(key, store.Fence{}, "run_1", store.RunUpdate{})
	must(t, err, "UpdateRun(zero)")
	wantRun(t, got, want)

	// Each field alone.
	zero := int64(0)
	started := time.Date(2031, 3, 4, 5, 7, 0, 987654321, time.FixedZone("Z", -3600))
	steps := []struct {
		u     store.RunUpdate
		apply func(r *store.RunRecord)
	}{
		{store.RunUpdate{Status: rein.StatusRunning}, func(r *store.RunRecord) { r.Status = rein.StatusRunning }},
		{store.RunUpdate{QueueOrder: &zero}, func(r *store.RunRecord) { r.QueueOrder = 0 }},
		{store.RunUpdate{Instance: "inst-b"}, func(r *store.RunRecord) { r.Instance = "inst-b" }},
		{store.RunUpdate{Usage: &rein.Usage{InputTokens: 10, OutputTokens: 20}}, func(r *store.RunRecord) { r.Usage = rein.Usage{InputTokens: 10, OutputTokens: 20} }},
		{store.RunUpdate{StartedAt: started}, func(r *store.RunRecord) { r.StartedAt = normalised(started) }},
		{store.RunUpdate{Usage: &rein.Usage{}}, func(r *store.RunRecord) { r.Usage = rein.Usage{} }},
		// A model request's usage is added (its cost too, once it has one).
		{store.RunUpdate{AddUsage: &rein.Usage{InputTokens: 100, OutputTokens: 7}}, func(r *store.RunRecord) { r.Usage = rein.Usage{InputTokens: 100, OutputTokens: 7} }},
		{store.RunUpdate{AddUsage: &rein.Usage{InputTokens: 5, OutputTokens: 1, CostUSD: ptrTo(0.5)}}, func(r *store.RunRecord) {
			r.Usage = rein.Usage{InputTokens: 105, OutputTokens: 8, CostUSD: ptrTo(0.5)}
		}},
		{store.RunUpdate{AddUsage: &rein.Usage{InputTokens: 1, OutputTokens: 1, CostUSD: ptrTo(0.25)}}, func(r *store.RunRecord) {
			r.Usage = rein.Usage{InputTokens: 106, OutputTokens: 9, CostUSD: ptrTo(0.75)}
		}},
		{store.RunUpdate{AddUsage: &rein.Usage{InputTokens: 1}}, func(r *store.RunRecord) {
			r.Usage = rein.Usage{InputTokens: 107, OutputTokens: 9, CostUSD: ptrTo(0.75)}
		}},
	}
	for _, s := range steps {
		s.apply(want)
		got, err := t.updateRun(key, store.Fence{}, "run_1", s.u)
		must(t, err, "UpdateRun")
		wantRun(t, got, want)
		stored, err := t.S.GetRun(t.Ctx, key, "run_1")
		must(t, err, "GetRun")
		wantRun(t, stored, want)
	}
	// Ending sets several fields at once.
	ended := suiteStart.Add(time.Minute)
	got, err = t.updateRun(key, store.Fence{}, "run_1", store.RunUpdate{
		Status: rein.StatusFailed, Reason: rein.ReasonError, Error: "model exploded", EndedAt: ended,
	})
	must(t, err, "UpdateRun(end)")
	want.Status, want.Reason, want.Error, want.EndedAt = rein.StatusFailed, rein.ReasonError, "model exploded", normalised(ended)
	wantRun(t, got, want)
}

func testRunTerminalFinal(t *T) {
	key := t.newSession("alice")
	for _, status := range []rein.RunStatus{rein.StatusCompleted, rein.StatusFailed, rein.StatusCancelled} {
		id := "run_" + string(status)
		must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: id, Status: rein.StatusRunning}), "CreateRun")
		reason := map[rein.RunStatus]rein.Reason{rein.StatusCompleted: rein.ReasonStop, rein.StatusFailed: rein.ReasonError, rein.StatusCancelled: rein.ReasonCancelled}[status]
		final, err := t.updateRun(key, store.Fence{}, id, store.RunUpdate{Status: status, Reason: reason, EndedAt: t.Clock.Now()})
		must(t, err, "UpdateRun to "+string(status))
		for _, u := range []store.RunUpdate{
			{Status: rein.StatusCancelled, Reason: rein.ReasonCancelled},
			{Status: rein.StatusRunning},
			{Error: "late"},
			{Usage: &rein.Usage{InputTokens: 99}},
			{},
		} {
			got, err := t.updateRun(key, store.Fence{}, id, u)
			wantErr(t, err, rein.ErrConflict, "UpdateRun of a "+string(status)+" run")
			if got == nil {
				t.Fatalf("UpdateRun of a terminal run returned no record with its conflict")
			}
			wantRun(t, got, final)
			stored, err := t.S.GetRun(t.Ctx, key, id)
			must(t, err, "GetRun")
			wantRun(t, stored, final)
		}
	}
}

// First terminal wins: of several concurrent terminal updates exactly one
// succeeds and the record is the winner's.
func testRunConcurrentTerminal(t *T) {
	key := t.newSession("alice")
	must(t, t.createRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusRunning}), "CreateRun")
	const n = 16
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = t.updateRun(key, store.Fence{}, "run_1", store.RunUpdate{
			Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, Error: string(rune('a' + i)),
		})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("two terminal updates succeeded (%d and %d)", winner, i)
			}
			winner = i
		case !isConflict(err):
			t.Fatalf("losing terminal update: %v, want conflict", err)
		}
	}
	if winner < 0 {
		t.Fatal("no terminal update succeeded")
	}
	got, err := t.S.GetRun(t.Ctx, key, "run_1")
	must(t, err, "GetRun")
	if got.Error != string(rune('a'+winner)) {
		t.Fatalf("stored run carries update %q, but update %q won", got.Error, string(rune('a'+winner)))
	}
}

func isConflict(err error) bool { return rein.CodeOf(err) == rein.CodeConflict }

func runIDs(list []*store.RunRecord) []string {
	ids := make([]string, len(list))
	for i, r := range list {
		ids[i] = r.ID
	}
	return ids
}

func testListRuns(t *T) {
	key := t.newSession("alice")
	list, err := t.S.ListRuns(t.Ctx, key)
	must(t, err, "ListRuns")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListRuns with no runs = %#v, want empty non-nil", list)
	}
	create := func(k rein.SessionKey, id string) {
		must(t, t.createRun(&store.RunRecord{Owner: k.Owner, SessionID: k.ID, ID: id, Status: rein.StatusQueued}), "CreateRun "+id)
	}
	create(key, "run_m")
	t.Clock.Advance(time.Second)
	create(key, "run_a")
	create(key, "run_z")
	t.Clock.Advance(time.Microsecond)
	create(key, "run_b")
	create(t.newSession("alice"), "run_elsewhere")
	list, err = t.S.ListRuns(t.Ctx, key)
	must(t, err, "ListRuns")
	if got, want := runIDs(list), []string{"run_b", "run_z", "run_a", "run_m"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListRuns = %v, want %v", got, want)
	}
}

func testListRunsByStatus(t *T) {
	alice, bob := t.newSession("alice"), t.newSession("bob")
	create := func(k rein.SessionKey, id string, status rein.RunStatus) {
		must(t, t.createRun(&store.RunRecord{Owner: k.Owner, SessionID: k.ID, ID: id, Status: status}), "CreateRun "+id)
	}
	create(alice, "run_q3", rein.StatusQueued)
	create(bob, "run_r1", rein.StatusRunning)
	t.Clock.Advance(time.Second)
	create(bob, "run_q2", rein.StatusQueued)
	create(alice, "run_q1", rein.StatusQueued)
	create(alice, "run_done", rein.StatusRunning)
	_, err := t.updateRun(alice, store.Fence{}, "run_done", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	must(t, err, "UpdateRun")
	t.Clock.Advance(time.Second)
	create(alice, "run_r2", rein.StatusRunning)

	list, err := t.S.ListRunsByStatus(t.Ctx, rein.StatusQueued, rein.StatusRunning)
	must(t, err, "ListRunsByStatus")
	if got, want := runIDs(list), []string{"run_q3", "run_r1", "run_q1", "run_q2", "run_r2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListRunsByStatus(QUEUED, RUNNING) = %v, want %v", got, want)
	}
	if list[1].Owner != "bob" || list[1].SessionID != bob.ID {
		t.Fatalf("listed run carries key %s/%s, want %s", list[1].Owner, list[1].SessionID, bob)
	}
	list, err = t.S.ListRunsByStatus(t.Ctx, rein.StatusCompleted)
	must(t, err, "ListRunsByStatus")
	if got := runIDs(list); !reflect.DeepEqual(got, []string{"run_done"}) {
		t.Fatalf("ListRunsByStatus(COMPLETED) = %v, want [run_done]", got)
	}
	list, err = t.S.ListRunsByStatus(t.Ctx, rein.StatusCancelled)
	must(t, err, "ListRunsByStatus")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListRunsByStatus(CANCELLED) = %#v, want empty non-nil", list)
	}
	list, err = t.S.ListRunsByStatus(t.Ctx)
	must(t, err, "ListRunsByStatus()")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListRunsByStatus() = %#v, want empty non-nil", list)
	}
}

// ListEndedSince lists the runs ended at or after a bound, every owner's,
// by end time then id: runs created ended and runs ended by an update
// alike; not a rolled-back end, nor the runs of a deleted session.
func testListEndedSince(t *T) {
	alice, bob, gone := t.newSession("alice"), t.newSession("bob"), t.newSession("carol")
	list, err := t.S.ListEndedSince(t.Ctx, time.Time{})
	must(t, err, "ListEndedSince")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListEndedSince with no runs = %#v, want empty non-nil", list)
	}
	old := t.now().Add(-time.Hour)
	must(t, t.createRun(&store.RunRecord{Owner: alice.Owner, SessionID: alice.ID, ID: "run_old", Status: rein.StatusCompleted,
		Reason: rein.ReasonStop, EndedAt: old}), "CreateRun of an old ended run")
	for _, k := range []rein.SessionKey{alice, bob, gone} {
		for _, id := range []string{"run_z", "run_a", "run_live"} {
			must(t, t.createRun(&store.RunRecord{Owner: k.Owner, SessionID: k.ID, ID: id + "_" + k.Owner, Status: rein.StatusRunning}), "CreateRun")
		}
	}
	since := t.now()
	end := func(k rein.SessionKey, id string) {
		t.Helper()
		_, err := t.updateRun(k, store.Fence{}, id+"_"+k.Owner, store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: t.Clock.Now()})
		must(t, err, "UpdateRun ending "+id)
	}
	end(bob, "run_z")
	end(gone, "run_z")
	t.Clock.Advance(time.Second)
	end(alice, "run_z")
	end(alice, "run_a")
	end(gone, "run_a")
	second := t.now()
	// An end that is rolled back is not listed.
	err = t.S.Update(t.Ctx, bob, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.UpdateRun("run_a_bob", store.RunUpdate{Status: rein.StatusFailed, Reason: rein.ReasonError, EndedAt: second}); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, err, errRollback, "Update ending a run, rolled back")
	_, err = t.S.DeleteSession(t.Ctx, gone, func(time.Time, []*store.TreeSession) error { return nil })
	must(t, err, "DeleteSession")

	list, err = t.S.ListEndedSince(t.Ctx, since)
	must(t, err, "ListEndedSince")
	if got, want := runIDs(list), []string{"run_z_bob", "run_a_alice", "run_z_alice"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEndedSince(since) = %v, want %v", got, want)
	}
	if list[0].Owner != "bob" || list[0].SessionID != bob.ID || list[0].Status != rein.StatusCompleted {
		t.Fatalf("listed run = %+v, want bob's completed run", list[0])
	}
	wantTime(t, list[1].EndedAt, second, "EndedAt")
	list, err = t.S.ListEndedSince(t.Ctx, second)
	must(t, err, "ListEndedSince")
	if got, want := runIDs(list), []string{"run_a_alice", "run_z_alice"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEndedSince(a bound equal to the ends) = %v, want %v", got, want)
	}
	list, err = t.S.ListEndedSince(t.Ctx, time.Time{})
	must(t, err, "ListEndedSince")
	if got, want := runIDs(list), []string{"run_old", "run_z_bob", "run_a_alice", "run_z_alice"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListEndedSince(zero) = %v, want %v", got, want)
	}
	list, err = t.S.ListEndedSince(t.Ctx, second.Add(time.Microsecond))
	must(t, err, "ListEndedSince")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListEndedSince after every end = %#v, want empty non-nil", list)
	}
}

func ptrTo[V any](v V) *V { return &v }
