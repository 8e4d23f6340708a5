package sqlite

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// dbSession and dbPending read the database itself, past the tails.
func dbSession(t *testing.T, s *Store, key rein.SessionKey) *store.Session {
	t.Helper()
	out, err := scanSession(s.rq.QueryRowContext(t.Context(), `SELECT `+sessionColumns+` FROM sessions WHERE owner = ? AND id = ?`, key.Owner, key.ID))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dbPending(t *testing.T, s *Store, key rein.SessionKey) int {
	t.Helper()
	var n int
	if err := s.rq.QueryRowContext(t.Context(), qPendingByKey, key.Owner, key.ID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func dbHistory(t *testing.T, s *Store, key rein.SessionKey) []rein.Message {
	t.Helper()
	rows, err := s.rq.QueryContext(t.Context(), qHistoryByKey, key.Owner, key.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, _, _, err := s.scanHistoryOf(key, rows, false)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// agree checks that what the store answers (from a tail when it knows)
// is what the database holds, and whether the tail knew it.
func agree(t *testing.T, s *Store, key rein.SessionKey, wantKnown bool, when string) {
	t.Helper()
	_, sessKnown := s.tails.session(key)
	_, pendKnown := s.tails.pending(key)
	if sessKnown != wantKnown || pendKnown != wantKnown {
		t.Fatalf("%s: the tail knows the record %v and the inbox %v, want %v", when, sessKnown, pendKnown, wantKnown)
	}
	hist, err := s.LoadHistory(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if want := dbHistory(t, s, key); !reflect.DeepEqual(hist, want) {
		t.Fatalf("%s: LoadHistory = %+v, the database holds %+v", when, hist, want)
	}
	got, err := s.GetSession(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if want := dbSession(t, s, key); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: GetSession = %+v, the database holds %+v", when, got, want)
	}
	n, err := s.PendingSupplements(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if want := dbPending(t, s, key); n != want {
		t.Fatalf("%s: PendingSupplements = %d, the database holds %d", when, n, want)
	}
}

// The facts a tail keeps follow every write that changes them: a push (not
// a repeated one), a consumption, either inside an Update or not, a new
// system prompt; an Update that fails changes nothing.
func TestFactsFollowWrites(t *testing.T) {
	s := openTemp(t)
	sys := "be brief"
	parent := &store.Session{Owner: "o", ID: "ses_p", Metadata: []byte(`{"a": 1}`), System: &sys, Agent: "main"}
	if err := s.CreateSession(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	child := &store.Session{Owner: "o", ID: "ses_c", ParentID: "ses_p", Agent: "helper",
		Subagent: &store.SubagentDescriptor{Agent: "helper", Label: "l", ToolFilter: []string{}, Depth: 1, Continuable: true}}
	if err := s.CreateSession(t.Context(), child); err != nil {
		t.Fatal(err)
	}
	agree(t, s, parent.Key(), true, "a new session")
	agree(t, s, child.Key(), true, "a new child")
	key := parent.Key()

	// A caller's changes to what it was given are its own.
	got, _ := s.GetSession(t.Context(), key)
	got.Metadata[1], *got.System = 'X', "changed"
	agree(t, s, key, true, "after the caller changed its copy")

	push := func(id string) {
		t.Helper()
		if _, _, err := storetest.PushSupplement(t.Context(), s, &store.Supplement{Owner: "o", SessionID: "ses_p", ID: id, Text: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	push("sup_1")
	agree(t, s, key, true, "after a push")
	push("sup_1")
	agree(t, s, key, true, "after the same push again")
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		_, _, err := tx.PushSupplement(&store.Supplement{Owner: "o", SessionID: "ses_p", ID: "sup_2", Text: "t"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after a push in an Update")
	if n, _ := s.PendingSupplements(t.Context(), key); n != 2 {
		t.Fatalf("pending = %d, want 2", n)
	}
	boom := errors.New("boom")
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.ConsumeSupplements([]string{"sup_1"}, "run_x", 1); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	agree(t, s, key, true, "after a failed Update that consumed")
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		return tx.ConsumeSupplements([]string{"sup_1"}, "run_x", 1)
	}); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after a consumption in an Update")
	push("sup_3")
	if _, err := storetest.ConsumeSupplements(t.Context(), s, key, "run_x", 2); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after ConsumeSupplements")
	if n, _ := s.PendingSupplements(t.Context(), key); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}

	// History appends, alone and in Updates; a failed one changes nothing;
	// one that makes the history longer than a tail keeps makes it read
	// from the database again.
	user := func(text string) rein.Message { return rein.Message{Role: rein.RoleUser, Text: text} }
	if err := storetest.AppendHistory(t.Context(), s, key, store.Fence{}, []rein.Message{user("one"), user("two")}); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after AppendHistory")
	if _, ok := s.tails.history(key); !ok {
		t.Fatal("the tail forgot a short history")
	}
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error { return tx.AppendHistory(user("three")) }); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after AppendHistory in an Update")
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.AppendHistory(user("lost")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	agree(t, s, key, true, "after a failed Update that appended history")
	if err := storetest.AppendHistory(t.Context(), s, key, store.Fence{}, []rein.Message{user(strings.Repeat("x", histFactBytes))}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.tails.history(key); ok {
		t.Fatal("the tail kept a history longer than it keeps")
	}
	if hist, err := s.LoadHistory(t.Context(), key); err != nil || len(hist) != 4 {
		t.Fatalf("a long history: %d messages, %v", len(hist), err)
	}
	if _, ok := s.tails.history(key); ok {
		t.Fatal("a read kept a history longer than a tail keeps")
	}

	// A new system prompt: the record is read again, then known again.
	other := "be thorough"
	if err := storetest.SetSystem(t.Context(), s, key, &other); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.tails.session(key); ok {
		t.Fatal("the tail kept the record a new system prompt changed")
	}
	if got, err := s.GetSession(t.Context(), key); err != nil || got.System == nil || *got.System != other {
		t.Fatalf("GetSession after SetSystem = %+v, %v", got, err)
	}
	agree(t, s, key, true, "after SetSystem and a read")

	// A deleted session's facts go with its tail.
	if _, err := s.DeleteSession(t.Context(), child.Key(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(t.Context(), child.Key()); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("GetSession of a deleted session = %v", err)
	}
	if _, err := s.PendingSupplements(t.Context(), child.Key()); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("PendingSupplements of a deleted session = %v", err)
	}
}

// A fact read from the database is kept only if no commit changed the
// facts while it was read: the read may predate the commit.
func TestFactsReadRacingACommitIsNotKept(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_r")
	stale := dbSession(t, s, key)
	s.tails.restated(key) // the record must be read again
	gen := s.tails.factsGen()
	sys := "new"
	if err := storetest.SetSystem(t.Context(), s, key, &sys); err != nil {
		t.Fatal(err)
	}
	s.tails.sessionRead(gen, stale) // a read from before the SetSystem
	if got, err := s.GetSession(t.Context(), key); err != nil || got.System == nil || *got.System != sys {
		t.Fatalf("GetSession = %+v, %v: a read that raced SetSystem was kept", got, err)
	}
	gen = s.tails.factsGen()
	if _, _, err := storetest.PushSupplement(t.Context(), s, &store.Supplement{Owner: "o", SessionID: "ses_r", Text: "t"}); err != nil {
		t.Fatal(err)
	}
	s.tails.pendingRead(gen, key, 0) // a count from before the push
	if n, err := s.PendingSupplements(t.Context(), key); err != nil || n != 1 {
		t.Fatalf("PendingSupplements = %d, %v: a count that raced a push was kept", n, err)
	}
	// A history read before an append.
	s.tails.mu.Lock()
	tl := s.tails.m[key]
	s.tails.chargeLocked(tl, -tl.histBytes)
	tl.hist, tl.histBytes, tl.histKnown = nil, 0, false
	s.tails.mu.Unlock()
	gen = s.tails.factsGen()
	if err := storetest.AppendHistory(t.Context(), s, key, store.Fence{}, []rein.Message{{Role: rein.RoleUser, Text: "new"}}); err != nil {
		t.Fatal(err)
	}
	s.tails.historyRead(gen, key, []string{}) // a history from before the append
	if hist, err := s.LoadHistory(t.Context(), key); err != nil || len(hist) != 1 {
		t.Fatalf("LoadHistory = %d messages, %v: a read that raced an append was kept", len(hist), err)
	}
	agree(t, s, key, true, "after the racing reads")
}

// After a restart no tail knows anything: the facts are read from the
// database, then kept and followed like those of a new session.
func TestFactsAfterReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := tailSession(t, s, "ses_o")
	if _, _, err := storetest.PushSupplement(t.Context(), s, &store.Supplement{Owner: "o", SessionID: "ses_o", Text: "t"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(t.Context(), path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AppendEvents(t.Context(), key, store.Fence{}, deltas(1, "x")); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.tails.lastSeq(key); !ok {
		t.Fatal("no tail after an append")
	}
	agree(t, s, key, false, "the first reads after a restart")
	_, sessKnown := s.tails.session(key)
	_, pendKnown := s.tails.pending(key)
	_, histKnown := s.tails.history(key)
	if !sessKnown || !pendKnown || !histKnown {
		t.Fatalf("after reads with no commit between, the tail knows the record %v, the inbox %v, the history %v", sessKnown, pendKnown, histKnown)
	}
	if err := storetest.AppendHistory(t.Context(), s, key, store.Fence{}, []rein.Message{{Role: rein.RoleUser, Text: "later"}}); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after a history append")
	if _, _, err := storetest.PushSupplement(t.Context(), s, &store.Supplement{Owner: "o", SessionID: "ses_o", Text: "t2"}); err != nil {
		t.Fatal(err)
	}
	agree(t, s, key, true, "after a push")
	if n, _ := s.PendingSupplements(t.Context(), key); n != 2 {
		t.Fatalf("pending = %d, want 2", n)
	}
}

// A batch that fails leaves no fact behind (it may have undone more than
// its own statements).
func TestFactsForgottenByAFailedBatch(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_f")
	err := failedBatch(t, s, func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		_, _, err = tx.pushSupplement(key, si, &store.Supplement{Owner: "o", SessionID: "ses_f", Text: "t"})
		return err
	})
	if err == nil {
		t.Fatal("the push of a failed batch succeeded")
	}
	if _, ok := s.tails.pending(key); ok {
		t.Fatal("an inbox count survived a failed batch")
	}
	if n, err := s.PendingSupplements(t.Context(), key); err != nil || n != 0 {
		t.Fatalf("PendingSupplements after a failed batch = %d, %v", n, err)
	}
}
