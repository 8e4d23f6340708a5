package storetest

import (
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Stops/RememberReadReplaceForget", testRememberStops},
	test{"Stops/ForgetBeforeByStoreClock", testForgetStopsBefore},
	test{"Stops/RolledBackWithTheirUpdate", testStopsRollback},
	test{"Stops/OneSessionOnlyAndDeletedWithIt", testStopsPerSession},
	test{"Stops/ReadWithTheClientIDsRun", testStopWithClientRun},
)

func remembered(t *T, key rein.SessionKey, clientID string) *store.RememberedStop {
	t.Helper()
	var got *store.RememberedStop
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		got, err = tx.RememberedStop(clientID)
		return err
	}), "RememberedStop("+clientID+")")
	return got
}

func remember(t *T, key rein.SessionKey, clientID, mode string) {
	t.Helper()
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		return tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, ClientID: clientID, Mode: mode, CreatedAt: tx.Now()})
	}), "RememberStop("+clientID+")")
}

func testRememberStops(t *T) {
	key := t.newSession("alice")
	if got := remembered(t, key, "c1"); got != nil {
		t.Fatalf("RememberedStop before any = %+v, want nil", got)
	}
	remember(t, key, "c1", "cancel")
	at := t.now()
	got := remembered(t, key, "c1")
	if got == nil || got.Owner != key.Owner || got.SessionID != key.ID || got.ClientID != "c1" || got.Mode != "cancel" {
		t.Fatalf("RememberedStop = %+v", got)
	}
	wantTime(t, got.CreatedAt, at, "CreatedAt")
	// Again: replaced (mode and time), not duplicated.
	t.Clock.Advance(time.Minute)
	remember(t, key, "c1", "interrupt")
	got = remembered(t, key, "c1")
	if got == nil || got.Mode != "interrupt" {
		t.Fatalf("replaced stop = %+v, want mode interrupt", got)
	}
	wantTime(t, got.CreatedAt, t.now(), "replaced CreatedAt")
	remember(t, key, "c2", "cancel")
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.ForgetStops("c1", time.Time{}) }), "ForgetStops(c1)")
	if got := remembered(t, key, "c1"); got != nil {
		t.Fatalf("c1 after ForgetStops = %+v, want nil", got)
	}
	if got := remembered(t, key, "c2"); got == nil {
		t.Fatal("ForgetStops(c1) forgot c2")
	}
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		return tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, Mode: "cancel"})
	})
	wantErr(t, err, rein.ErrInvalidArgument, "RememberStop without a client id")
	err = t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		return tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: "ses_other", ClientID: "c3", Mode: "cancel"})
	})
	wantErr(t, err, rein.ErrInvalidArgument, "RememberStop naming another session")
}

// Expiry is the caller's, judged by the store's clock: ForgetStops with a
// bound drops what is older, keeps the rest.
func testForgetStopsBefore(t *T) {
	key := t.newSession("alice")
	remember(t, key, "old", "cancel")
	t.Clock.Advance(24 * time.Hour)
	remember(t, key, "new", "cancel")
	t.Clock.Advance(time.Second)
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		return tx.ForgetStops("", tx.Now().Add(-24*time.Hour))
	}), "ForgetStops(before)")
	if got := remembered(t, key, "old"); got != nil {
		t.Fatalf("a stop older than the bound = %+v, want forgotten", got)
	}
	if got := remembered(t, key, "new"); got == nil {
		t.Fatal("a stop younger than the bound was forgotten")
	}
}

func testStopsRollback(t *T) {
	key := t.newSession("alice")
	remember(t, key, "kept", "cancel")
	boom := errors.New("boom")
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, ClientID: "lost", Mode: "cancel"}); err != nil {
			return err
		}
		if err := tx.ForgetStops("kept", time.Time{}); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, err, boom, "the failing Update")
	if got := remembered(t, key, "lost"); got != nil {
		t.Fatalf("a stop remembered by a failed Update = %+v", got)
	}
	if got := remembered(t, key, "kept"); got == nil {
		t.Fatal("a stop forgotten by a failed Update is gone")
	}
}

func testStopsPerSession(t *T) {
	a, b := t.newSession("alice"), t.newSession("alice")
	remember(t, a, "c", "cancel")
	if got := remembered(t, b, "c"); got != nil {
		t.Fatalf("another session sees %+v", got)
	}
	_, err := t.S.DeleteSession(t.Ctx, a, nil)
	must(t, err, "DeleteSession")
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: a.Owner, ID: a.ID}), "CreateSession (the deleted key)")
	if got := remembered(t, a, "c"); got != nil {
		t.Fatalf("a new session with a deleted key inherits %+v", got)
	}
}

// The admission's pair of reads in one Update: the client id's run, then
// its remembered stop, each as stored — also after writes in between.
func testStopWithClientRun(t *T) {
	key := t.newSession("alice")
	remember(t, key, "c", "cancel")
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.GetRunByClientID("c"); !errors.Is(err, rein.ErrNotFound) {
			t.Errorf("GetRunByClientID = %v, want not found", err)
		}
		st, err := tx.RememberedStop("c")
		if err != nil || st == nil || st.ClientID != "c" {
			t.Errorf("RememberedStop after GetRunByClientID = %+v, %v", st, err)
		}
		if other, err := tx.RememberedStop("d"); err != nil || other != nil {
			t.Errorf("RememberedStop(d) = %+v, %v, want none", other, err)
		}
		if err := tx.ForgetStops("c", time.Time{}); err != nil {
			return err
		}
		if st, err := tx.RememberedStop("c"); err != nil || st != nil {
			t.Errorf("RememberedStop after ForgetStops in the same Update = %+v, %v, want none", st, err)
		}
		if err := tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, ClientID: "c", Mode: "interrupt"}); err != nil {
			return err
		}
		if st, err := tx.RememberedStop("c"); err != nil || st == nil || st.Mode != "interrupt" {
			t.Errorf("RememberedStop after RememberStop in the same Update = %+v, %v", st, err)
		}
		return tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: t.uniq("run_"), ClientID: "c", Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, CreatedAt: tx.Now(), EndedAt: tx.Now()})
	}), "Update")
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		r, err := tx.GetRunByClientID("c")
		if err != nil || r.Status != rein.StatusCancelled {
			t.Errorf("GetRunByClientID = %+v, %v, want the cancelled run", r, err)
		}
		st, err := tx.RememberedStop("c")
		if err != nil || st == nil || st.Mode != "interrupt" {
			t.Errorf("RememberedStop = %+v, %v", st, err)
		}
		return nil
	}), "second Update")
}
