package client_test

import (
	"errors"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// TestE2ESessionIDsTitlesAndPages: the client's create with an id and a
// title (again: the same session), UpdateSession, and ListSessionsPage
// followed by its cursor.
func TestE2ESessionIDsTitlesAndPages(t *testing.T) {
	s := newStack(t, map[string]string{"tok-a": "alice", "tok-b": "bob"})
	c := s.client("tok-a")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{ID: "orders:4711", Title: "Order 4711"})
	if err != nil || sess.ID != "orders:4711" || sess.Title != "Order 4711" {
		t.Fatalf("CreateSession = %+v, %v", sess, err)
	}
	again, err := c.CreateSession(ctx, client.CreateSessionRequest{ID: "orders:4711", Title: "ignored"})
	if err != nil || again.Title != "Order 4711" || !again.CreatedAt.Equal(sess.CreatedAt) {
		t.Fatalf("CreateSession again = %+v, %v; want the session unchanged", again, err)
	}
	if _, err := s.client("tok-b").CreateSession(ctx, client.CreateSessionRequest{ID: "orders:4711"}); !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("bob creates alice's id: %v, want a conflict", err)
	}
	title := "Order 4711 (refunded)"
	got, err := c.UpdateSession(ctx, sess.ID, client.UpdateSessionRequest{Title: &title, Metadata: map[string]int{"refund": 12}})
	if err != nil || got.Title != title || string(got.Metadata) != `{"refund":12}` || got.State != "idle" {
		t.Fatalf("UpdateSession = %+v, %v", got, err)
	}
	for range 2 {
		if _, err := c.CreateSession(ctx, client.CreateSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	opts := client.ListOptions{Limit: 2}
	for {
		page, err := c.ListSessionsPage(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Sessions {
			ids = append(ids, it.ID)
		}
		if page.Next == "" {
			break
		}
		opts.After = page.Next
	}
	all, err := c.ListSessions(ctx)
	if err != nil || len(all) != 3 || len(ids) != 3 || ids[2] != "orders:4711" || all[2].Title != title {
		t.Fatalf("pages %v; ListSessions %+v, %v", ids, all, err)
	}
}
