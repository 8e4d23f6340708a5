package storetest

import (
	"errors"
	"reflect"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Sessions/BudgetRoundTripSetClear", testSessionBudget},
	test{"Sessions/BudgetChangeRolledBackWithItsUpdate", testSessionBudgetRollback},
)

// A session's budget is stored at creation, read by every read of the
// session and by Tx.Budget, replaced and cleared by UpdateSession.
func testSessionBudget(t *T) {
	b := &rein.Budget{Tokens: 1000, CostUSD: 0.5}
	in := &store.Session{Owner: "alice", ID: t.uniq("ses_"), Budget: b}
	must(t, t.S.CreateSession(t.Ctx, in), "CreateSession with a budget")
	key := in.Key()
	wantBudget := func(what string, want *rein.Budget) {
		t.Helper()
		got, err := t.S.GetSession(t.Ctx, key)
		must(t, err, "GetSession")
		if !reflect.DeepEqual(got.Budget, want) {
			t.Fatalf("%s: GetSession budget %v, want %v", what, deref(got.Budget), deref(want))
		}
		var inTx *rein.Budget
		t.update(key, store.Fence{}, "Update(Budget)", func(tx store.Tx) error {
			var err error
			inTx, err = tx.Budget()
			return err
		})
		if !reflect.DeepEqual(inTx, want) {
			t.Fatalf("%s: Tx.Budget %v, want %v", what, deref(inTx), deref(want))
		}
		list, err := t.S.ListSessions(t.Ctx, "alice")
		must(t, err, "ListSessions")
		for _, s := range list {
			if s.ID == key.ID && !reflect.DeepEqual(s.Budget, want) {
				t.Fatalf("%s: ListSessions budget %v, want %v", what, deref(s.Budget), deref(want))
			}
		}
	}
	wantBudget("created", b)
	// Another field changed: the budget stays.
	title := "t"
	t.update(key, store.Fence{}, "UpdateSession(title)", func(tx store.Tx) error {
		_, err := tx.UpdateSession(store.SessionUpdate{Title: &title})
		return err
	})
	wantBudget("title changed", b)
	// Replaced, seen by the Update that replaced it, then cleared.
	raised := &rein.Budget{Tokens: 5000}
	t.update(key, store.Fence{}, "UpdateSession(budget)", func(tx store.Tx) error {
		got, err := tx.UpdateSession(store.SessionUpdate{SetBudget: true, Budget: raised})
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(got.Budget, raised) {
			return errors.New("UpdateSession did not return the new budget")
		}
		after, err := tx.Budget()
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(after, raised) {
			return errors.New("Tx.Budget after UpdateSession in the same Update is not the new budget")
		}
		return nil
	})
	wantBudget("raised", raised)
	t.update(key, store.Fence{}, "UpdateSession(clear)", func(tx store.Tx) error {
		_, err := tx.UpdateSession(store.SessionUpdate{SetBudget: true})
		return err
	})
	wantBudget("cleared", nil)
	// A session created without one has none.
	wantBudgetOf(t, t.newSession("alice"), nil)
}

func wantBudgetOf(t *T, key rein.SessionKey, want *rein.Budget) {
	t.Helper()
	got, err := t.S.GetSession(t.Ctx, key)
	must(t, err, "GetSession")
	if !reflect.DeepEqual(got.Budget, want) {
		t.Fatalf("budget %v, want %v", deref(got.Budget), deref(want))
	}
}

// A budget change is part of its Update: undone when the Update fails.
func testSessionBudgetRollback(t *T) {
	key := t.newSession("alice")
	boom := errors.New("boom")
	err := t.S.Update(t.Ctx, key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.UpdateSession(store.SessionUpdate{SetBudget: true, Budget: &rein.Budget{Tokens: 3}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want its function's error", err)
	}
	wantBudgetOf(t, key, nil)
}
