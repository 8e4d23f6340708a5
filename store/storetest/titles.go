package storetest

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Sessions/CreateOnceNewSameOwnerOtherOwner", testCreateOnce},
	test{"Sessions/CreateOnceRaceOneOwnerWins", testCreateOnceRace},
	test{"Sessions/TitleRoundTrip", testTitleRoundTrip},
	test{"Sessions/DefaultTitleOnlyWhenUntitled", testDefaultTitle},
	test{"Sessions/UpdateSessionRolledBackWithItsUpdate", testUpdateSessionRollback},
	test{"Sessions/SummariesStateAndPages", testSessionSummaries},
)

func testCreateOnce(t *T) {
	title := "my notes"
	in := &store.Session{Owner: "alice", ID: "chat:42", Title: &title, Metadata: []byte(`{"v":1}`)}
	got, created, err := t.S.CreateSessionOnce(t.Ctx, in)
	must(t, err, "CreateSessionOnce")
	if !created || got.ID != "chat:42" || got.Title == nil || *got.Title != title {
		t.Fatalf("CreateSessionOnce = %+v, created %v; want chat:42 titled %q, created", got, created, title)
	}
	wantTime(t, got.CreatedAt, t.now(), "CreatedAt")
	// The same owner again, with other fields: the session, unchanged.
	t.Clock.Advance(time.Second)
	again, created, err := t.S.CreateSessionOnce(t.Ctx, &store.Session{Owner: "alice", ID: "chat:42", Metadata: []byte(`{"v":2}`)})
	must(t, err, "CreateSessionOnce (again)")
	if created {
		t.Fatal("CreateSessionOnce of an existing id of the same owner reported created")
	}
	if !jsonEqual(again.Metadata, []byte(`{"v":1}`)) || again.Title == nil || *again.Title != title || !again.CreatedAt.Equal(got.CreatedAt) {
		t.Fatalf("existing session = metadata %s title %v created %v; want it unchanged", again.Metadata, again.Title, again.CreatedAt)
	}
	// Another owner: a conflict, and nothing stored for them.
	_, _, err = t.S.CreateSessionOnce(t.Ctx, &store.Session{Owner: "bob", ID: "chat:42"})
	wantErr(t, err, rein.ErrConflict, "CreateSessionOnce of another owner's id")
	_, err = t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "bob", ID: "chat:42"})
	wantErr(t, err, rein.ErrNotFound, "bob's session after the conflict")
	// An id another owner has through CreateSession is taken too.
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "carol", ID: "ses_carol"}), "CreateSession(carol)")
	_, _, err = t.S.CreateSessionOnce(t.Ctx, &store.Session{Owner: "alice", ID: "ses_carol"})
	wantErr(t, err, rein.ErrConflict, "CreateSessionOnce of an id CreateSession gave another owner")
}

// Owners racing for one id: exactly one gets it, every other is refused,
// and the one session stored is the winner's.
func testCreateOnceRace(t *T) {
	const n = 8
	var won atomic.Int32
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, created, err := t.S.CreateSessionOnce(t.Ctx, &store.Session{Owner: fmt.Sprintf("owner%d", i), ID: "shared"})
		errs[i] = err
		if created {
			won.Add(1)
		}
	})
	if won.Load() != 1 {
		t.Fatalf("%d owners created the id, want exactly 1 (errors %v)", won.Load(), errs)
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, rein.ErrConflict) {
			t.Fatalf("owner%d: %v, want nil or a conflict", i, err)
		}
	}
}

func testTitleRoundTrip(t *T) {
	title := "Trip to Lyon ✓"
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_t", Title: &title}), "CreateSession")
	got, err := t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_t"})
	must(t, err, "GetSession")
	if got.Title == nil || *got.Title != title {
		t.Fatalf("Title = %v, want %q", got.Title, title)
	}
	key := t.newSession("alice")
	got, err = t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession (untitled)")
	if got.Title != nil {
		t.Fatalf("Title of an untitled session = %q, want nil", *got.Title)
	}
}

func title(t *T, key rein.SessionKey) *string {
	t.Helper()
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	return got.Title
}

func testDefaultTitle(t *T) {
	key := t.newSession("alice")
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.SetDefaultTitle("first") }), "SetDefaultTitle")
	if got := title(t, key); got == nil || *got != "first" {
		t.Fatalf("Title = %v, want first", got)
	}
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.SetDefaultTitle("second") }), "SetDefaultTitle (again)")
	if got := title(t, key); got == nil || *got != "first" {
		t.Fatalf("Title after a second default = %v, want first", got)
	}
	// An explicit "" is a title: no default replaces it.
	empty := ""
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		s, err := tx.UpdateSession(store.SessionUpdate{Title: &empty, Metadata: []byte(`{"k":"v"}`)})
		if err == nil && (s.Title == nil || *s.Title != "" || !jsonEqual(s.Metadata, []byte(`{"k":"v"}`))) {
			return fmt.Errorf("UpdateSession returned title %v metadata %s", s.Title, s.Metadata)
		}
		if err != nil {
			return err
		}
		return tx.SetDefaultTitle("third")
	}), "UpdateSession + SetDefaultTitle")
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.Title == nil || *got.Title != "" || !jsonEqual(got.Metadata, []byte(`{"k":"v"}`)) {
		t.Fatalf("after UpdateSession: title %v metadata %s, want \"\" and {\"k\":\"v\"}", got.Title, got.Metadata)
	}
	// Metadata alone leaves the title.
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.UpdateSession(store.SessionUpdate{Metadata: []byte(`{}`)})
		return err
	}), "UpdateSession(metadata)")
	if got := title(t, key); got == nil || *got != "" {
		t.Fatalf("Title after a metadata update = %v, want \"\"", got)
	}
	err = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.UpdateSession(store.SessionUpdate{Metadata: []byte(`{not json`)})
		return err
	})
	wantErr(t, err, rein.ErrInvalidArgument, "UpdateSession with invalid metadata")
}

func testUpdateSessionRollback(t *T) {
	key := t.newSession("alice")
	boom := errors.New("boom")
	name := "kept?"
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.UpdateSession(store.SessionUpdate{Title: &name, Metadata: []byte(`{"x":1}`)}); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, err, boom, "the failing Update")
	err = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.SetDefaultTitle("default"); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, err, boom, "the failing default title")
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.Title != nil || !jsonEqual(got.Metadata, []byte(`{}`)) {
		t.Fatalf("after failed Updates: title %v metadata %s, want none and {}", got.Title, got.Metadata)
	}
	// The default title of a failed Update did not count: the next one
	// titles the session.
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.SetDefaultTitle("next") }), "SetDefaultTitle")
	if got := title(t, key); got == nil || *got != "next" {
		t.Fatalf("Title = %v, want next", got)
	}
}

func testSessionSummaries(t *T) {
	base := t.now()
	var keys []rein.SessionKey
	// Five sessions: two share a creation time (ordered by id, descending).
	for i, d := range []time.Duration{0, time.Second, 2 * time.Second, 2 * time.Second, 3 * time.Second} {
		s := &store.Session{Owner: "alice", ID: fmt.Sprintf("s%d", i), CreatedAt: base.Add(d)}
		must(t, t.S.CreateSession(t.Ctx, s), "CreateSession")
		keys = append(keys, s.Key())
	}
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "bob", ID: "s9", CreatedAt: base.Add(time.Hour)}), "CreateSession(bob)")
	// s1: busy with a queued run, one pending confirmation, events.
	t.Clock.Advance(time.Minute)
	must(t, t.S.Update(t.Ctx, keys[1], store.Fence{}, func(tx store.Tx) error {
		if err := tx.CreateRun(&store.RunRecord{Owner: "alice", SessionID: "s1", ID: t.uniq("run_"), Status: rein.StatusQueued, CreatedAt: tx.Now()}); err != nil {
			return err
		}
		for _, id := range []string{"tu_1", "tu_2"} {
			if err := tx.CreateConfirmation(&store.Confirmation{Owner: "alice", SessionID: "s1", RunID: "run_x", ToolUseID: id, Name: "rm", State: store.ConfirmationPending}); err != nil {
				return err
			}
		}
		if _, err := tx.ResolveConfirmation("tu_2", true, ""); err != nil {
			return err
		}
		_, err := tx.AppendEvents(rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: "x"}))
		return err
	}), "s1's state")
	lastAt := t.now()
	// s3: an ended run only: idle.
	must(t, t.S.Update(t.Ctx, keys[3], store.Fence{}, func(tx store.Tx) error {
		return tx.CreateRun(&store.RunRecord{Owner: "alice", SessionID: "s3", ID: t.uniq("run_"), Status: rein.StatusCompleted, Reason: rein.ReasonStop, CreatedAt: tx.Now(), EndedAt: tx.Now()})
	}), "s3's run")

	all, err := t.S.ListSessionSummaries(t.Ctx, "alice", store.SessionPage{})
	must(t, err, "ListSessionSummaries")
	var ids []string
	for _, s := range all {
		ids = append(ids, s.Session.ID)
	}
	if fmt.Sprint(ids) != "[s4 s3 s2 s1 s0]" {
		t.Fatalf("order = %v, want [s4 s3 s2 s1 s0]", ids)
	}
	for _, s := range all {
		busy, pending := s.Session.ID == "s1", 0
		if busy {
			pending = 1
			wantTime(t, s.LastEventAt, lastAt, "s1's LastEventAt")
		} else if !s.LastEventAt.IsZero() {
			t.Fatalf("%s: LastEventAt = %v, want zero (no event)", s.Session.ID, s.LastEventAt)
		}
		if s.Busy != busy || s.PendingConfirmations != pending {
			t.Fatalf("%s: busy %v pending %d, want %v %d", s.Session.ID, s.Busy, s.PendingConfirmations, busy, pending)
		}
	}
	// Pages of two, by cursor; a session created meanwhile (newest) does
	// not shift them.
	var paged []string
	var after store.SessionCursor
	for i := 0; ; i++ {
		page, err := t.S.ListSessionSummaries(t.Ctx, "alice", store.SessionPage{After: after, Limit: 2})
		must(t, err, "page")
		if len(page) > 2 {
			t.Fatalf("page of %d, limit 2", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, s := range page {
			paged = append(paged, s.Session.ID)
		}
		last := page[len(page)-1].Session
		after = store.SessionCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		if i == 0 {
			must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "s5", CreatedAt: base.Add(time.Hour)}), "CreateSession(s5)")
		}
	}
	if fmt.Sprint(paged) != "[s4 s3 s2 s1 s0]" {
		t.Fatalf("pages = %v, want [s4 s3 s2 s1 s0]", paged)
	}
	none, err := t.S.ListSessionSummaries(t.Ctx, "nobody", store.SessionPage{Limit: 10})
	must(t, err, "ListSessionSummaries(nobody)")
	if none == nil || len(none) != 0 {
		t.Fatalf("nobody's list = %v, want [] (not nil)", none)
	}
}
