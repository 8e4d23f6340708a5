package storetest

import (
	"bytes"
	"reflect"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Sessions/CreateGetRoundTrip", testSessionRoundTrip},
	test{"Sessions/Defaults", testSessionDefaults},
	test{"Sessions/ExplicitCreatedAtNormalised", testSessionExplicitCreatedAt},
	test{"Sessions/DuplicateConflicts", testSessionDuplicate},
	test{"Sessions/SameIDOtherOwnerIsDistinct", testSessionSameIDOtherOwner},
	test{"Sessions/ParentMustExistForSameOwner", testSessionParentMustExist},
	test{"Sessions/OtherOwnerIsNotFound", testSessionOtherOwner},
	test{"Sessions/InvalidMetadataRejected", testSessionInvalidMetadata},
	test{"Sessions/ListNewestFirstThenIDDesc", testListSessions},
	test{"Sessions/ListChildrenCreationOrder", testListChildren},
	test{"Sessions/IDInUseAcrossOwners", testSessionIDInUse},
	test{"Sessions/SetSystem", testSetSystem},
	test{"Sessions/SetSystemWithItsEventInOneWrite", testSetSystemOneWrite},
	test{"Sessions/ValuesAreCopied", testSessionCopies},
	test{"Sessions/CreateLeavesWhatWasStored", testSessionCreateFillsIn},
)

func testSessionRoundTrip(t *T) {
	sys := "be brief"
	parent := &store.Session{Owner: "alice", ID: "ses_parent"}
	must(t, t.S.CreateSession(t.Ctx, parent), "CreateSession(parent)")
	in := &store.Session{
		Owner:    "alice",
		ID:       "ses_child",
		ParentID: "ses_parent",
		Metadata: []byte(`{"title": "déjà vu ✓", "tags": ["a", "b"], "n": 1.5, "nested": {"ok": true, "nil": null}}`),
		System:   &sys,
		Agent:    "researcher",
		Subagent: &store.SubagentDescriptor{
			Agent: "researcher", Label: "find sources", Model: "openai:gpt-x",
			System: "you research", ToolFilter: []string{"search", "fetch"}, Depth: 2,
		},
	}
	must(t, t.S.CreateSession(t.Ctx, in), "CreateSession")
	got, err := t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_child"})
	must(t, err, "GetSession")
	if got.Owner != "alice" || got.ID != "ses_child" || got.ParentID != "ses_parent" {
		t.Fatalf("GetSession keys = %q/%q parent %q", got.Owner, got.ID, got.ParentID)
	}
	if !jsonEqual(got.Metadata, in.Metadata) {
		t.Fatalf("Metadata = %s, want %s", got.Metadata, in.Metadata)
	}
	if got.System == nil || *got.System != sys {
		t.Fatalf("System = %v, want %q", got.System, sys)
	}
	if !reflect.DeepEqual(got.Subagent, in.Subagent) {
		t.Fatalf("Subagent = %+v, want %+v", got.Subagent, in.Subagent)
	}
	if got.Agent != "researcher" {
		t.Fatalf("Agent = %q, want researcher", got.Agent)
	}
	wantTime(t, got.CreatedAt, t.now(), "CreatedAt (defaulted from the clock)")
}

func testSessionDefaults(t *T) {
	key := t.newSession("alice")
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if !jsonEqual(got.Metadata, []byte(`{}`)) {
		t.Fatalf("nil Metadata stored as %q, want {}", got.Metadata)
	}
	if got.System != nil {
		t.Fatalf("System = %q, want nil", *got.System)
	}
	if got.Subagent != nil {
		t.Fatalf("Subagent = %+v, want nil", got.Subagent)
	}
	if got.ParentID != "" {
		t.Fatalf("ParentID = %q, want empty", got.ParentID)
	}
	// An empty system override is an override, not "none".
	empty := ""
	must(t, t.setSystem(key, &empty), "SetSystem(\"\")")
	got, err = t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System == nil || *got.System != "" {
		t.Fatalf("System after SetSystem(\"\") = %v, want pointer to empty", got.System)
	}
}

func testSessionExplicitCreatedAt(t *T) {
	at := time.Date(2029, 12, 31, 23, 59, 58, 999999999, time.FixedZone("X", -7*3600))
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_a", CreatedAt: at}), "CreateSession")
	got, err := t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_a"})
	must(t, err, "GetSession")
	wantTime(t, got.CreatedAt, at.UTC().Truncate(time.Microsecond), "CreatedAt")
}

func testSessionDuplicate(t *T) {
	key := t.newSession("alice")
	err := t.S.CreateSession(t.Ctx, &store.Session{Owner: key.Owner, ID: key.ID, Metadata: []byte(`{"second":true}`)})
	wantErr(t, err, rein.ErrConflict, "second CreateSession with the same key")
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if !jsonEqual(got.Metadata, []byte(`{}`)) {
		t.Fatalf("duplicate create changed the session: metadata %s", got.Metadata)
	}
}

func testSessionSameIDOtherOwner(t *T) {
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_same", Metadata: []byte(`{"who":"alice"}`)}), "alice")
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "bob", ID: "ses_same", Metadata: []byte(`{"who":"bob"}`)}), "bob")
	for _, owner := range []string{"alice", "bob"} {
		got, err := t.S.GetSession(t.Ctx, rein.SessionKey{Owner: owner, ID: "ses_same"})
		must(t, err, "GetSession "+owner)
		if !jsonEqual(got.Metadata, []byte(`{"who":"`+owner+`"}`)) {
			t.Fatalf("%s sees metadata %s", owner, got.Metadata)
		}
	}
}

func testSessionIDInUse(t *T) {
	key := t.newSession("alice")
	for _, c := range []struct {
		id   string
		want bool
	}{{key.ID, true}, {"ses_never", false}, {"", false}} {
		got, err := t.S.SessionIDInUse(t.Ctx, c.id)
		must(t, err, "SessionIDInUse("+c.id+")")
		if got != c.want {
			t.Fatalf("SessionIDInUse(%q) = %v, want %v", c.id, got, c.want)
		}
	}
}

func testSessionParentMustExist(t *T) {
	err := t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_orphan", ParentID: "ses_missing"})
	wantErr(t, err, rein.ErrNotFound, "CreateSession with a missing parent")
	bobs := t.newSession("bob")
	err = t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_stolen", ParentID: bobs.ID})
	wantErr(t, err, rein.ErrNotFound, "CreateSession with another owner's parent")
	for _, id := range []string{"ses_orphan", "ses_stolen"} {
		_, err := t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: id})
		wantErr(t, err, rein.ErrNotFound, "GetSession after a refused create")
	}
}

func testSessionOtherOwner(t *T) {
	key := t.newSession("alice")
	intruder := otherOwner(key)
	_, err := t.S.GetSession(t.Ctx, intruder)
	wantErr(t, err, rein.ErrNotFound, "GetSession as another owner")
	_, err = t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_never"})
	wantErr(t, err, rein.ErrNotFound, "GetSession of a missing session")
	sys := "hijack"
	wantErr(t, t.setSystem(intruder, &sys), rein.ErrNotFound, "SetSystem as another owner")
	kids, err := t.S.ListChildren(t.Ctx, intruder)
	if err == nil && len(kids) != 0 {
		t.Fatalf("ListChildren as another owner returned %d sessions", len(kids))
	}
	list, err := t.S.ListSessions(t.Ctx, intruder.Owner)
	must(t, err, "ListSessions")
	if len(list) != 0 {
		t.Fatalf("ListSessions of another owner returned %d sessions", len(list))
	}
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System != nil {
		t.Fatal("SetSystem by another owner changed the session")
	}
}

func testSessionInvalidMetadata(t *T) {
	err := t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_bad", Metadata: []byte(`{"a":`)})
	if err == nil {
		t.Fatal("CreateSession accepted metadata that is not JSON")
	}
	_, err = t.S.GetSession(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_bad"})
	wantErr(t, err, rein.ErrNotFound, "GetSession after a refused create")
}

func testListSessions(t *T) {
	list, err := t.S.ListSessions(t.Ctx, "alice")
	must(t, err, "ListSessions on an empty store")
	if list == nil || len(list) != 0 {
		t.Fatalf("ListSessions on an empty store = %#v, want empty non-nil", list)
	}
	// Created in this order; ids deliberately not in time order, and two
	// pairs sharing a CreatedAt so the id tie-break shows.
	create := func(id string) {
		must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: id}), "CreateSession "+id)
	}
	create("ses_m")
	t.Clock.Advance(time.Second)
	create("ses_a")
	create("ses_z")
	t.Clock.Advance(time.Second)
	create("ses_b")
	t.Clock.Advance(time.Microsecond)
	create("ses_y")
	create("ses_c")
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "bob", ID: "ses_bob"}), "CreateSession bob")
	// A child is listed like any session of the owner.
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_kid", ParentID: "ses_m", CreatedAt: suiteStart.Add(-time.Hour)}), "CreateSession child")

	list, err = t.S.ListSessions(t.Ctx, "alice")
	must(t, err, "ListSessions")
	want := []string{"ses_y", "ses_c", "ses_b", "ses_z", "ses_a", "ses_m", "ses_kid"}
	if got := sessionIDs(list); !reflect.DeepEqual(got, want) {
		t.Fatalf("ListSessions order = %v, want %v", got, want)
	}
	if list[len(list)-1].ParentID != "ses_m" {
		t.Fatalf("listed child has ParentID %q, want ses_m", list[len(list)-1].ParentID)
	}
}

func sessionIDs(list []*store.Session) []string {
	ids := make([]string, len(list))
	for i, s := range list {
		ids[i] = s.ID
	}
	return ids
}

func testListChildren(t *T) {
	root := t.newSession("alice")
	kids, err := t.S.ListChildren(t.Ctx, root)
	must(t, err, "ListChildren with no children")
	if kids == nil || len(kids) != 0 {
		t.Fatalf("ListChildren with no children = %#v, want empty non-nil", kids)
	}
	// Creation order differs from id order on purpose.
	for _, id := range []string{"ses_k3", "ses_k1", "ses_k2"} {
		t.Clock.Advance(time.Millisecond)
		must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: id, ParentID: root.ID,
			Subagent: &store.SubagentDescriptor{Agent: "a", Label: id, Depth: 1}}), "CreateSession "+id)
	}
	// A grandchild and another root's child are not direct children.
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_grandkid", ParentID: "ses_k1"}), "grandchild")
	other := t.newSession("alice")
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "alice", ID: "ses_cousin", ParentID: other.ID}), "cousin")
	// Bob may use the same root id; his children are not alice's.
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "bob", ID: root.ID}), "bob's root")
	must(t, t.S.CreateSession(t.Ctx, &store.Session{Owner: "bob", ID: "ses_bobkid", ParentID: root.ID}), "bob's child")

	kids, err = t.S.ListChildren(t.Ctx, root)
	must(t, err, "ListChildren")
	if got, want := sessionIDs(kids), []string{"ses_k3", "ses_k1", "ses_k2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ListChildren = %v, want %v", got, want)
	}
	if kids[0].Subagent == nil || kids[0].Subagent.Label != "ses_k3" {
		t.Fatalf("child descriptor = %+v", kids[0].Subagent)
	}
}

func testSetSystem(t *T) {
	key := t.newSession("alice")
	sys := "first"
	must(t, t.setSystem(key, &sys), "SetSystem")
	sys = "mutated after the call"
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System == nil || *got.System != "first" {
		t.Fatalf("System = %v, want \"first\"", got.System)
	}
	must(t, t.setSystem(key, nil), "SetSystem(nil)")
	got, err = t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System != nil {
		t.Fatalf("System after clearing = %q, want nil", *got.System)
	}
	wantErr(t, t.setSystem(rein.SessionKey{Owner: "alice", ID: "ses_never"}, nil), rein.ErrNotFound, "SetSystem on a missing session")
}

// Tx.SetSystem commits with the rest of its Update, or not at all: a
// failed Update leaves the override as it was, and a committed one shows
// the override and its event together. A stale fence changes nothing.
func testSetSystemOneWrite(t *T) {
	key := t.newSession("alice")
	sys := "kept"
	must(t, t.setSystem(key, &sys), "SetSystem")
	other := "never stored"
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.SetSystem(&other); err != nil {
			return err
		}
		if _, err := tx.AppendEvents(rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: other})); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, err, errRollback, "Update that fails after SetSystem")
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System == nil || *got.System != "kept" {
		t.Fatalf("System after a rolled-back Update = %v, want \"kept\"", got.System)
	}
	if last, err := t.S.LastSeq(t.Ctx, key); err != nil || last != 0 {
		t.Fatalf("LastSeq after a rolled-back Update = %d, %v; want 0", last, err)
	}

	l, err := t.acquireLease(key, "inst-a", "run_1", time.Minute)
	must(t, err, "AcquireLease")
	must(t, t.releaseLease(l), "ReleaseLease")
	err = t.S.Update(t.Ctx, key, l.Fence(), func(tx store.Tx) error { return tx.SetSystem(&other) })
	wantErr(t, err, rein.ErrLeaseLost, "SetSystem under a released lease's fence")

	next := "next"
	var seq int64
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.SetSystem(&next); err != nil {
			return err
		}
		next = "changed after the call"
		evs, err := tx.AppendEvents(rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: "next"}))
		if err != nil {
			return err
		}
		seq = evs[0].Seq
		return nil
	}), "Update with SetSystem and its event")
	got, err = t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System == nil || *got.System != "next" {
		t.Fatalf("System after the Update = %v, want \"next\"", got.System)
	}
	evs, _, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if len(evs) != 1 || evs[0].Seq != seq || evs[0].Type != rein.EventSystemMessage {
		t.Fatalf("events = %+v, want the one system.message at seq %d", evs, seq)
	}
	must(t, t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error { return tx.SetSystem(nil) }), "SetSystem(nil)")
	got, err = t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if got.System != nil {
		t.Fatalf("System after clearing = %q, want nil", *got.System)
	}
}

// Callers must not be able to change stored state through values they
// passed in or got back.
func testSessionCopies(t *T) {
	sys := "original"
	in := &store.Session{Owner: "alice", ID: "ses_copy", Metadata: []byte(`{"k":"v"}`), System: &sys,
		Subagent: &store.SubagentDescriptor{ToolFilter: []string{"a"}}}
	must(t, t.S.CreateSession(t.Ctx, in), "CreateSession")
	in.Metadata[2] = 'X'
	*in.System = "changed"
	in.Subagent.ToolFilter[0] = "changed"

	got, err := t.S.GetSession(t.Ctx, in.Key())
	must(t, err, "GetSession")
	got.Metadata[2] = 'Y'
	*got.System = "changed too"
	got.Subagent.ToolFilter[0] = "changed too"

	again, err := t.S.GetSession(t.Ctx, in.Key())
	must(t, err, "GetSession")
	if !jsonEqual(again.Metadata, []byte(`{"k":"v"}`)) || *again.System != "original" || again.Subagent.ToolFilter[0] != "a" {
		t.Fatalf("stored session changed through caller pointers: %s %q %v", again.Metadata, *again.System, again.Subagent.ToolFilter)
	}
}

// testSessionCreateFillsIn: after CreateSession the caller's record is what
// GetSession reads back (metadata as stored, CreatedAt defaulted or
// normalised), so a caller that has just created a session need not read it.
func testSessionCreateFillsIn(t *T) {
	sys := "be brief"
	for _, in := range []*store.Session{
		{Owner: "alice", ID: "ses_defaults"},
		{Owner: "alice", ID: "ses_full", Metadata: []byte(`{"title": "déjà vu", "n": 1.50}`), System: &sys, Agent: "researcher",
			CreatedAt: time.Date(2029, 12, 31, 23, 59, 58, 999999999, time.FixedZone("X", -7*3600))},
		{Owner: "alice", ID: "ses_kid", ParentID: "ses_full", Metadata: []byte(` {"a":[1, 2]} `),
			Subagent: &store.SubagentDescriptor{Agent: "a", Label: "l", Depth: 1, ToolFilter: []string{"x"}}},
	} {
		must(t, t.S.CreateSession(t.Ctx, in), "CreateSession("+in.ID+")")
		got, err := t.S.GetSession(t.Ctx, in.Key())
		must(t, err, "GetSession("+in.ID+")")
		if !bytes.Equal(in.Metadata, got.Metadata) {
			t.Fatalf("%s: Metadata after CreateSession %q, GetSession reads %q", in.ID, in.Metadata, got.Metadata)
		}
		if !in.CreatedAt.Equal(got.CreatedAt) || in.CreatedAt.Location().String() != got.CreatedAt.Location().String() ||
			in.CreatedAt.Format(time.RFC3339Nano) != got.CreatedAt.Format(time.RFC3339Nano) {
			t.Fatalf("%s: CreatedAt after CreateSession %s, GetSession reads %s", in.ID, in.CreatedAt, got.CreatedAt)
		}
		a, b := *in, *got
		a.Metadata, b.Metadata, a.CreatedAt, b.CreatedAt = nil, nil, time.Time{}, time.Time{}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: after CreateSession %+v, GetSession reads %+v", in.ID, a, b)
		}
	}
}
