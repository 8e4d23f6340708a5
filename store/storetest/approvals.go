package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Approvals/ExpiresAtRoundTrip", testApprovalsExpiresAt},
	test{"Approvals/ExpireWhenDueOnly", testApprovalsExpire},
	test{"Approvals/ExpireOrAnswerOneWins", testApprovalsExpireRace},
	test{"Approvals/DueConfirmations", testApprovalsDue},
	test{"Approvals/InboxStatusesAndTitles", testApprovalsInbox},
	test{"Approvals/InboxPagesByPosition", testApprovalsInboxPages},
)

// ExpireConfirmation expires a due confirmation in one unfenced Update.
func ExpireConfirmation(ctx context.Context, s store.Updater, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	var out *store.Confirmation
	err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		out, err = tx.ExpireConfirmation(toolUseID)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func expiring(key rein.SessionKey, runID, toolUseID string, at time.Time) *store.Confirmation {
	c := confirmation(key, runID, toolUseID)
	c.ExpiresAt = at
	return c
}

func testApprovalsExpiresAt(t *T) {
	key := t.newSession("alice")
	at := t.Clock.Now().Add(90*time.Minute + 123*time.Nanosecond) // not UTC, sub-microsecond
	must(t, t.createConfirmation(expiring(key, "run_1", "call_1", at)), "CreateConfirmation")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_2")), "CreateConfirmation without expiry")
	got, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	wantTime(t, got.ExpiresAt, at.UTC().Truncate(time.Microsecond), "ExpiresAt")
	got, err = t.S.GetConfirmation(t.Ctx, key, "call_2")
	must(t, err, "GetConfirmation")
	if !got.ExpiresAt.IsZero() {
		t.Fatalf("ExpiresAt of a confirmation that never expires = %v, want zero", got.ExpiresAt)
	}
	list, err := t.S.ListConfirmations(t.Ctx, key, store.ConfirmationPending)
	must(t, err, "ListConfirmations")
	if len(list) != 2 || !sameTime(list[0].ExpiresAt, at.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("ListConfirmations = %d, first ExpiresAt %v", len(list), list[0].ExpiresAt)
	}
}

func testApprovalsExpire(t *T) {
	key := t.newSession("alice")
	at := t.Clock.Now().Add(time.Minute)
	must(t, t.createConfirmation(expiring(key, "run_1", "call_1", at)), "CreateConfirmation")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_never")), "CreateConfirmation without expiry")

	_, err := ExpireConfirmation(t.Ctx, t.S, key, "call_1")
	wantErr(t, err, rein.ErrConflict, "ExpireConfirmation before its time")
	_, err = ExpireConfirmation(t.Ctx, t.S, key, "call_never")
	wantErr(t, err, rein.ErrConflict, "ExpireConfirmation of one that never expires")
	_, err = ExpireConfirmation(t.Ctx, t.S, key, "call_none")
	wantErr(t, err, rein.ErrNotFound, "ExpireConfirmation of an unknown id")
	_, err = ExpireConfirmation(t.Ctx, t.S, otherOwner(key), "call_1")
	wantErr(t, err, rein.ErrNotFound, "ExpireConfirmation in another owner's session")

	t.Clock.Advance(time.Minute) // due exactly now: at or before Now expires
	c, err := ExpireConfirmation(t.Ctx, t.S, key, "call_1")
	must(t, err, "ExpireConfirmation when due")
	if c.State != store.ConfirmationExpired || c.DenyMessage != rein.ConfirmationExpiredMessage {
		t.Fatalf("expired confirmation = %s %q, want expired %q", c.State, c.DenyMessage, rein.ConfirmationExpiredMessage)
	}
	got, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	if got.State != store.ConfirmationExpired || got.DenyMessage != rein.ConfirmationExpiredMessage {
		t.Fatalf("stored = %s %q", got.State, got.DenyMessage)
	}
	wantTime(t, got.ResolvedAt, t.now(), "ResolvedAt")

	_, err = ExpireConfirmation(t.Ctx, t.S, key, "call_1")
	wantErr(t, err, rein.ErrConflict, "a second ExpireConfirmation")
	_, err = t.resolveConfirmation(key, "call_1", true, "")
	wantErr(t, err, rein.ErrConflict, "an answer after the expiry")

	// An answered confirmation never expires.
	must(t, t.createConfirmation(expiring(key, "run_1", "call_3", t.Clock.Now())), "CreateConfirmation")
	_, err = t.resolveConfirmation(key, "call_3", false, "no")
	must(t, err, "ResolveConfirmation")
	_, err = ExpireConfirmation(t.Ctx, t.S, key, "call_3")
	wantErr(t, err, rein.ErrConflict, "ExpireConfirmation of an answered one")
	// Nor does a closed one (its run ended).
	must(t, t.createConfirmation(expiring(key, "run_2", "call_4", t.Clock.Now())), "CreateConfirmation")
	must(t, t.closeConfirmations(key, "run_2"), "CloseConfirmations")
	_, err = ExpireConfirmation(t.Ctx, t.S, key, "call_4")
	wantErr(t, err, rein.ErrConflict, "ExpireConfirmation of a closed one")
}

// testApprovalsExpireRace: an answer and several expiries of one
// confirmation race; exactly one of them wins.
func testApprovalsExpireRace(t *T) {
	for round := range 5 {
		key := t.newSession("alice")
		id := fmt.Sprintf("call_%d", round)
		must(t, t.createConfirmation(expiring(key, "run_1", id, t.Clock.Now())), "CreateConfirmation")
		var wins, answered atomic.Int32
		parallel(5, func(i int) {
			var err error
			if i == 0 {
				_, err = t.resolveConfirmation(key, id, true, "")
				if err == nil {
					answered.Add(1)
				}
			} else {
				_, err = ExpireConfirmation(t.Ctx, t.S, key, id)
			}
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, rein.ErrConflict):
				t.Errorf("racer %d: %v, want success or conflict", i, err)
			}
		})
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d writers won, want exactly 1", round, wins.Load())
		}
		got, err := t.S.GetConfirmation(t.Ctx, key, id)
		must(t, err, "GetConfirmation")
		want := store.ConfirmationExpired
		if answered.Load() == 1 {
			want = store.ConfirmationAllowed
		}
		if got.State != want {
			t.Fatalf("round %d: state %s, want %s", round, got.State, want)
		}
	}
}

func testApprovalsDue(t *T) {
	t0 := t.Clock.Now()
	a1, a2, b := t.newSession("alice"), t.newSession("alice"), t.newSession("bob")
	must(t, t.createConfirmation(expiring(a1, "run_1", "late", t0.Add(3*time.Minute))), "create")
	must(t, t.createConfirmation(expiring(a2, "run_2", "soon", t0.Add(time.Minute))), "create")
	must(t, t.createConfirmation(expiring(b, "run_3", "mid", t0.Add(2*time.Minute))), "create")
	must(t, t.createConfirmation(confirmation(a1, "run_1", "never")), "create")
	must(t, t.createConfirmation(expiring(a1, "run_1", "answered", t0.Add(time.Second))), "create")
	_, err := t.resolveConfirmation(a1, "answered", true, "")
	must(t, err, "resolve")

	ids := func(cs []*store.Confirmation) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.ToolUseID)
		}
		return out
	}
	got, err := t.S.DueConfirmations(t.Ctx, time.Time{}, 0)
	must(t, err, "DueConfirmations(any)")
	if fmt.Sprint(ids(got)) != "[soon mid late]" {
		t.Fatalf("DueConfirmations(any) = %v, want [soon mid late]", ids(got))
	}
	if got[0].Owner != "alice" || got[0].SessionID != a2.ID || got[1].Owner != "bob" || got[1].SessionID != b.ID {
		t.Fatalf("DueConfirmations keys = %s/%s, %s/%s", got[0].Owner, got[0].SessionID, got[1].Owner, got[1].SessionID)
	}
	wantTime(t, got[0].ExpiresAt, t0.Add(time.Minute).UTC().Truncate(time.Microsecond), "ExpiresAt")
	got, err = t.S.DueConfirmations(t.Ctx, time.Time{}, 1)
	must(t, err, "DueConfirmations(any, 1)")
	if fmt.Sprint(ids(got)) != "[soon]" {
		t.Fatalf("the next expiry = %v, want [soon]", ids(got))
	}
	got, err = t.S.DueConfirmations(t.Ctx, t0.Add(30*time.Second), 0)
	must(t, err, "DueConfirmations(before any is due)")
	if len(got) != 0 {
		t.Fatalf("due before any expiry = %v, want none", ids(got))
	}
	got, err = t.S.DueConfirmations(t.Ctx, t0.Add(2*time.Minute), 0)
	must(t, err, "DueConfirmations(2m)")
	if fmt.Sprint(ids(got)) != "[soon mid]" {
		t.Fatalf("due at 2m = %v, want [soon mid] (at or before the bound)", ids(got))
	}
	t.Clock.Advance(time.Minute)
	_, err = ExpireConfirmation(t.Ctx, t.S, a2, "soon")
	must(t, err, "ExpireConfirmation")
	got, err = t.S.DueConfirmations(t.Ctx, time.Time{}, 0)
	must(t, err, "DueConfirmations after an expiry")
	if fmt.Sprint(ids(got)) != "[mid late]" {
		t.Fatalf("after the expiry = %v, want [mid late]", ids(got))
	}
}

// inboxIDs lists a page as session/tool use id.
func inboxIDs(items []*store.InboxItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Confirmation.SessionID+"/"+it.Confirmation.ToolUseID)
	}
	return out
}

func testApprovalsInbox(t *T) {
	title := "Release notes"
	titled := &store.Session{Owner: "alice", ID: t.uniq("ses_"), Title: &title}
	must(t, t.S.CreateSession(t.Ctx, titled), "CreateSession")
	a, u := titled.Key(), t.newSession("alice")
	b := t.newSession("bob")
	step := func() { t.Clock.Advance(time.Second) }
	must(t, t.createConfirmation(confirmation(a, "run_1", "c1")), "create")
	step()
	must(t, t.createConfirmation(expiring(u, "run_2", "c2", t.Clock.Now().Add(time.Hour))), "create")
	step()
	must(t, t.createConfirmation(confirmation(b, "run_3", "c3")), "create")
	step()
	for _, id := range []string{"c4", "c5", "c6", "c7", "c8"} {
		must(t, t.createConfirmation(expiring(a, "run_1", id, t.Clock.Now())), "create")
		step()
	}
	_, err := t.resolveConfirmation(a, "c4", true, "")
	must(t, err, "allow")
	_, err = t.resolveConfirmation(a, "c5", false, "no")
	must(t, err, "deny")
	_, err = t.resolveConfirmation(a, "c6", true, "")
	must(t, err, "allow")
	must(t, t.S.Update(t.Ctx, a, store.Fence{}, func(tx store.Tx) error { return tx.StartConfirmation("c6") }), "start")
	_, err = ExpireConfirmation(t.Ctx, t.S, a, "c7")
	must(t, err, "expire")
	must(t, t.closeConfirmations(a, "run_1"), "close") // c1 and c8 were pending

	list := func(owner string, status store.InboxStatus) []*store.InboxItem {
		t.Helper()
		out, err := t.S.ListInbox(t.Ctx, owner, store.InboxPage{Status: status})
		must(t, err, "ListInbox")
		return out
	}
	want := func(got []*store.InboxItem, ids ...string) {
		t.Helper()
		if fmt.Sprint(inboxIDs(got)) != fmt.Sprint(ids) {
			t.Fatalf("inbox = %v, want %v", inboxIDs(got), ids)
		}
	}
	pending := list("alice", store.InboxPending)
	want(pending, u.ID+"/c2")
	if pending[0].SessionTitle != nil {
		t.Fatalf("an untitled session's title = %q, want nil", *pending[0].SessionTitle)
	}
	c := pending[0].Confirmation
	if c.Owner != "alice" || c.RunID != "run_2" || c.Name != "write_note" || c.State != store.ConfirmationPending ||
		!jsonEqual(c.Input, confirmation(u, "", "").Input) {
		t.Fatalf("inbox item = %+v", c)
	}
	wantTime(t, c.ExpiresAt, c.CreatedAt.Add(time.Hour), "ExpiresAt")
	answered := list("alice", store.InboxAnswered)
	want(answered, a.ID+"/c6", a.ID+"/c5", a.ID+"/c4")
	if answered[0].SessionTitle == nil || *answered[0].SessionTitle != title {
		t.Fatalf("session_title = %v, want %q", answered[0].SessionTitle, title)
	}
	if answered[1].Confirmation.DenyMessage != "no" || answered[1].Confirmation.ResolvedAt.IsZero() {
		t.Fatalf("denied item = %+v", answered[1].Confirmation)
	}
	want(list("alice", store.InboxExpired), a.ID+"/c7")
	want(list("bob", store.InboxPending), b.ID+"/c3")
	want(list("carol", store.InboxPending))
}

// testApprovalsInboxPages pages through an owner's pending confirmations,
// several with the same CreatedAt, and checks that pages are positions:
// confirmations made between two pages, and ones answered, never shift
// or repeat what follows.
func testApprovalsInboxPages(t *T) {
	keys := []rein.SessionKey{t.newSession("alice"), t.newSession("alice"), t.newSession("alice")}
	var all []string // newest first
	for i := range 4 {
		for j := len(keys) - 1; j >= 0; j-- {
			// Same CreatedAt within a round: the order falls to the
			// session id, then the tool use id (descending).
			for _, id := range []string{fmt.Sprintf("call_%d_b", i), fmt.Sprintf("call_%d_a", i)} {
				must(t, t.createConfirmation(confirmation(keys[j], "run", id)), "create")
			}
		}
		t.Clock.Advance(time.Millisecond)
	}
	for i := 3; i >= 0; i-- {
		for j := len(keys) - 1; j >= 0; j-- {
			all = append(all, fmt.Sprintf("%s/call_%d_b", keys[j].ID, i), fmt.Sprintf("%s/call_%d_a", keys[j].ID, i))
		}
	}
	first, err := t.S.ListInbox(t.Ctx, "alice", store.InboxPage{Status: store.InboxPending})
	must(t, err, "ListInbox")
	if fmt.Sprint(inboxIDs(first)) != fmt.Sprint(all) {
		t.Fatalf("inbox = %v\nwant  %v", inboxIDs(first), all)
	}
	var got []string
	var after store.InboxCursor
	for page := 0; ; page++ {
		items, err := t.S.ListInbox(t.Ctx, "alice", store.InboxPage{Status: store.InboxPending, After: after, Limit: 5})
		must(t, err, "ListInbox page")
		if len(items) > 5 {
			t.Fatalf("page of %d, limit 5", len(items))
		}
		if len(items) == 0 {
			break
		}
		got = append(got, inboxIDs(items)...)
		after = store.InboxCursorOf(items[len(items)-1].Confirmation)
		if page == 0 {
			// Newer confirmations, and an answer to one already listed,
			// must not shift the pages that follow.
			t.Clock.Advance(time.Second)
			must(t, t.createConfirmation(confirmation(keys[0], "run", "call_new")), "create between pages")
			_, err := t.resolveConfirmation(keys[2], "call_3_b", true, "")
			must(t, err, "answer between pages")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(all) {
		t.Fatalf("pages = %v\nwant    %v", got, all)
	}
}
