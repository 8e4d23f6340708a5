package inbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/storetest"
)

var key = rein.SessionKey{Owner: "alice", ID: "s1"}

func TestMemoryPushIdempotentConsumeOnce(t *testing.T) {
	m := inbox.NewMemory(nil)
	ctx := context.Background()
	s1, created := m.Push(key, "a", "first", inbox.SourceUser)
	if !created || s1.Status != store.SupplementQueued {
		t.Fatalf("%+v", s1)
	}
	if again, created := m.Push(key, "a", "changed", inbox.SourceUser); created || again.Text != "first" {
		t.Fatalf("repeat push %+v", again)
	}
	gen, _ := m.Push(key, "", "second", inbox.SourceParent)
	if gen.ID == "" {
		t.Fatal("no generated id")
	}
	m.Push(rein.SessionKey{Owner: "bob", ID: "s1"}, "b", "other owner", inbox.SourceUser)

	sess := m.Session(key)
	if n, _ := sess.Pending(ctx); n != 2 {
		t.Fatalf("pending %d", n)
	}
	// Concurrent consumers: every supplement goes to exactly one.
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := sess.Consume(ctx, "run_1", i+1)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			for _, s := range got {
				seen[s.ID]++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(seen) != 2 || seen["a"] != 1 || seen[gen.ID] != 1 {
		t.Fatalf("consumed %v", seen)
	}
	if s, _ := m.Get(key, "a"); s.Status != store.SupplementConsumed || s.RunID != "run_1" || s.Step == 0 {
		t.Fatalf("%+v", s)
	}
	// The other owner's inbox is untouched.
	if n, _ := m.Session(rein.SessionKey{Owner: "bob", ID: "s1"}).Pending(ctx); n != 1 {
		t.Fatalf("bob pending %d", n)
	}
}

func TestFromStoreAndMessage(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	if err := st.CreateSession(ctx, &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := storetest.PushSupplement(ctx, st, &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "n1", Text: "use metric", Source: inbox.SourceUser, Status: store.SupplementQueued}); err != nil {
		t.Fatal(err)
	}
	sess := inbox.FromStore(st, key)
	if n, err := sess.Pending(ctx); err != nil || n != 1 {
		t.Fatalf("%d %v", n, err)
	}
	got, err := sess.Consume(ctx, "run_9", 3)
	if err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	msg := inbox.Message(got[0])
	if msg.Role != rein.RoleUser || msg.Hint == nil || msg.Hint.ID != "n1" || msg.Hint.Source != "user" || msg.RunID != "run_9" || msg.Step != 3 || msg.Text != "use metric" {
		t.Fatalf("%+v", msg)
	}
	if again, _ := sess.Consume(ctx, "run_9", 4); len(again) != 0 {
		t.Fatal("consumed twice")
	}
}
