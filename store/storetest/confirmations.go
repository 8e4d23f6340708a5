package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Confirmations/CreateGetDuplicate", testConfirmationCreate},
	test{"Confirmations/ResolveAllowDeny", testConfirmationResolve},
	test{"Confirmations/ResolveOnceOnly", testConfirmationResolveOnce},
	test{"Confirmations/ConcurrentResolversOneWins", testConfirmationConcurrent},
	test{"Confirmations/CloseByRun", testConfirmationClose},
	test{"Confirmations/ListByState", testConfirmationList},
	test{"Confirmations/OtherOwnerIsNotFound", testConfirmationOtherOwner},
)

func confirmation(key rein.SessionKey, runID, toolUseID string) *store.Confirmation {
	return &store.Confirmation{Owner: key.Owner, SessionID: key.ID, RunID: runID, ToolUseID: toolUseID,
		Name: "write_note", Input: json.RawMessage(`{"text": "hello ✓", "n": [1, 2]}`)}
}

func wantConfirmation(t *T, got, want *store.Confirmation) {
	t.Helper()
	if !sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.ResolvedAt, want.ResolvedAt) {
		t.Fatalf("confirmation %s times = %v / %v, want %v / %v", want.ToolUseID, got.CreatedAt, got.ResolvedAt, want.CreatedAt, want.ResolvedAt)
	}
	if json.Valid(want.Input) {
		if !jsonEqual(got.Input, want.Input) {
			t.Fatalf("confirmation input = %s, want %s", got.Input, want.Input)
		}
	} else if !bytes.Equal(got.Input, want.Input) {
		t.Fatalf("confirmation input = %q, want %q byte for byte", got.Input, want.Input)
	}
	g, w := *got, *want
	g.Input, w.Input = nil, nil
	g.CreatedAt, g.ResolvedAt, w.CreatedAt, w.ResolvedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("confirmation = %+v\nwant           %+v", g, w)
	}
}

func testConfirmationCreate(t *T) {
	key := t.newSession("alice")
	in := confirmation(key, "run_1", "call_1")
	must(t, t.createConfirmation(in), "CreateConfirmation")
	want := *confirmation(key, "run_1", "call_1")
	want.State, want.CreatedAt = store.ConfirmationPending, t.now()
	got, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, got, &want)

	// The model's input may be invalid JSON; it is kept as is.
	bad := confirmation(key, "run_1", "call_bad")
	bad.Input = json.RawMessage(`{"text": "unterminated`)
	must(t, t.createConfirmation(bad), "CreateConfirmation with invalid input")
	got, err = t.S.GetConfirmation(t.Ctx, key, "call_bad")
	must(t, err, "GetConfirmation")
	if !bytes.Equal(got.Input, bad.Input) {
		t.Fatalf("invalid input came back as %q, want %q", got.Input, bad.Input)
	}

	dup := confirmation(key, "run_2", "call_1")
	wantErr(t, t.createConfirmation(dup), rein.ErrConflict, "CreateConfirmation with a taken tool use id")
	got, err = t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, got, &want)
	// The same tool use id in another session is another confirmation.
	must(t, t.createConfirmation(confirmation(t.newSession("alice"), "run_3", "call_1")), "CreateConfirmation elsewhere")

	_, err = t.S.GetConfirmation(t.Ctx, key, "call_none")
	wantErr(t, err, rein.ErrNotFound, "GetConfirmation of an unknown id")
	err = t.createConfirmation(confirmation(rein.SessionKey{Owner: "alice", ID: "ses_never"}, "run_1", "call_9"))
	wantErr(t, err, rein.ErrNotFound, "CreateConfirmation in a missing session")
}

func testConfirmationResolve(t *T) {
	key := t.newSession("alice")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_yes")), "CreateConfirmation")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_no")), "CreateConfirmation")
	created := t.now()
	t.Clock.Advance(time.Second)

	got, err := t.resolveConfirmation(key, "call_yes", true, "ignored when allowed")
	must(t, err, "ResolveConfirmation(allow)")
	want := *confirmation(key, "run_1", "call_yes")
	want.State, want.CreatedAt, want.ResolvedAt = store.ConfirmationAllowed, created, t.now()
	wantConfirmation(t, got, &want)
	stored, err := t.S.GetConfirmation(t.Ctx, key, "call_yes")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, stored, &want)

	got, err = t.resolveConfirmation(key, "call_no", false, "not now ✗")
	must(t, err, "ResolveConfirmation(deny)")
	want = *confirmation(key, "run_1", "call_no")
	want.State, want.DenyMessage, want.CreatedAt, want.ResolvedAt = store.ConfirmationDenied, "not now ✗", created, t.now()
	wantConfirmation(t, got, &want)
	stored, err = t.S.GetConfirmation(t.Ctx, key, "call_no")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, stored, &want)

	_, err = t.resolveConfirmation(key, "call_none", true, "")
	wantErr(t, err, rein.ErrNotFound, "ResolveConfirmation of an unknown id")
}

func testConfirmationResolveOnce(t *T) {
	key := t.newSession("alice")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_1")), "CreateConfirmation")
	first, err := t.resolveConfirmation(key, "call_1", false, "no")
	must(t, err, "ResolveConfirmation")
	t.Clock.Advance(time.Second)
	for _, allow := range []bool{true, false} {
		_, err := t.resolveConfirmation(key, "call_1", allow, "changed my mind")
		wantErr(t, err, rein.ErrConflict, "second ResolveConfirmation")
	}
	stored, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, stored, first)
}

func testConfirmationConcurrent(t *T) {
	key := t.newSession("alice")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_1")), "CreateConfirmation")
	const n = 16
	results := make([]*store.Confirmation, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		results[i], errs[i] = t.resolveConfirmation(key, "call_1", i%2 == 0, fmt.Sprintf("resolver %d", i))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("resolvers %d and %d both succeeded", winner, i)
			}
			winner = i
		default:
			wantErr(t, err, rein.ErrConflict, "losing resolver")
		}
	}
	if winner < 0 {
		t.Fatal("no resolver succeeded")
	}
	stored, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	wantConfirmation(t, stored, results[winner])
}

func testConfirmationClose(t *T) {
	key := t.newSession("alice")
	for _, c := range []struct{ run, id string }{{"run_1", "a"}, {"run_1", "b"}, {"run_1", "c"}, {"run_2", "d"}} {
		must(t, t.createConfirmation(confirmation(key, c.run, c.id)), "CreateConfirmation")
	}
	other := t.newSession("alice")
	must(t, t.createConfirmation(confirmation(other, "run_1", "e")), "CreateConfirmation elsewhere")
	_, err := t.resolveConfirmation(key, "b", true, "")
	must(t, err, "ResolveConfirmation")
	t.Clock.Advance(time.Second)
	must(t, t.closeConfirmations(key, "run_1"), "CloseConfirmations")
	want := map[string]store.ConfirmationState{
		"a": store.ConfirmationClosed, "b": store.ConfirmationAllowed, "c": store.ConfirmationClosed, "d": store.ConfirmationPending,
	}
	for id, state := range want {
		got, err := t.S.GetConfirmation(t.Ctx, key, id)
		must(t, err, "GetConfirmation")
		if got.State != state {
			t.Fatalf("confirmation %s = %s, want %s", id, got.State, state)
		}
		if state == store.ConfirmationClosed {
			wantTime(t, got.ResolvedAt, t.now(), "ResolvedAt of a closed confirmation")
		}
	}
	got, err := t.S.GetConfirmation(t.Ctx, other, "e")
	must(t, err, "GetConfirmation")
	if got.State != store.ConfirmationPending {
		t.Fatalf("closing run_1 in one session closed a confirmation in another: %s", got.State)
	}
	_, err = t.resolveConfirmation(key, "a", true, "")
	wantErr(t, err, rein.ErrConflict, "ResolveConfirmation after its run ended")
	must(t, t.closeConfirmations(key, "run_none"), "CloseConfirmations of a run without any")
}

func testConfirmationList(t *T) {
	key := t.newSession("alice")
	list, err := t.S.ListConfirmations(t.Ctx, key, "")
	must(t, err, "ListConfirmations")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListConfirmations with none = %#v, want empty non-nil", list)
	}
	for _, id := range []string{"z", "a", "m"} {
		t.Clock.Advance(time.Millisecond)
		must(t, t.createConfirmation(confirmation(key, "run_1", id)), "CreateConfirmation")
	}
	_, err = t.resolveConfirmation(key, "a", false, "")
	must(t, err, "ResolveConfirmation")
	ids := func(list []*store.Confirmation) []string {
		out := []string{}
		for _, c := range list {
			out = append(out, c.ToolUseID)
		}
		return out
	}
	for state, want := range map[store.ConfirmationState][]string{
		"":                        {"z", "a", "m"},
		store.ConfirmationPending: {"z", "m"},
		store.ConfirmationDenied:  {"a"},
		store.ConfirmationAllowed: {},
	} {
		list, err := t.S.ListConfirmations(t.Ctx, key, state)
		must(t, err, "ListConfirmations")
		if got := ids(list); !reflect.DeepEqual(got, want) {
			t.Fatalf("ListConfirmations(%q) = %v, want %v", state, got, want)
		}
		if list == nil {
			t.Fatalf("ListConfirmations(%q) returned nil", state)
		}
	}
}

func testConfirmationOtherOwner(t *T) {
	key := t.newSession("alice")
	must(t, t.createConfirmation(confirmation(key, "run_1", "call_1")), "CreateConfirmation")
	intruder := otherOwner(key)
	_, err := t.S.GetConfirmation(t.Ctx, intruder, "call_1")
	wantErr(t, err, rein.ErrNotFound, "GetConfirmation as another owner")
	_, err = t.resolveConfirmation(intruder, "call_1", true, "")
	wantErr(t, err, rein.ErrNotFound, "ResolveConfirmation as another owner")
	err = t.createConfirmation(confirmation(intruder, "run_1", "call_2"))
	wantErr(t, err, rein.ErrNotFound, "CreateConfirmation as another owner")
	if err := t.closeConfirmations(intruder, "run_1"); err != nil {
		wantErr(t, err, rein.ErrNotFound, "CloseConfirmations as another owner")
	}
	list, err := t.S.ListConfirmations(t.Ctx, intruder, "")
	if err == nil && len(list) != 0 {
		t.Fatalf("ListConfirmations as another owner returned %d", len(list))
	}
	got, err := t.S.GetConfirmation(t.Ctx, key, "call_1")
	must(t, err, "GetConfirmation")
	if got.State != store.ConfirmationPending {
		t.Fatalf("another owner changed the confirmation to %s", got.State)
	}
}
