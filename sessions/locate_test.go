package sessions_test

import (
	"context"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// plainStore hides the memory store's RunLocator, so the service must
// search the owner's sessions.
type plainStore struct{ store.Store }

// FindRun finds a run by its id alone, for its owner only, whether the
// store locates runs or the service searches the owner's sessions.
func TestFindRun(t *testing.T) {
	for name, wrap := range map[string]func(store.Store) store.Store{
		"located":  func(st store.Store) store.Store { return st },
		"searched": func(st store.Store) store.Store { return plainStore{st} },
	} {
		t.Run(name, func(t *testing.T) {
			st := memory.New()
			defer st.Close()
			svc, err := reintest.Service("testdata/service.yaml", wrap(st), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := svc.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			var runs []*sessions.MessageResult
			for _, text := range []string{"one", "two"} {
				sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
				if err != nil {
					t.Fatal(err)
				}
				res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: text})
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, &res)
			}
			for _, res := range runs {
				rec, err := svc.FindRun(ctx, "alice", res.RunID)
				if err != nil || rec.ID != res.RunID || rec.Owner != "alice" {
					t.Errorf("FindRun(alice, %s) = %+v, %v", res.RunID, rec, err)
				}
			}
			if _, err := svc.FindRun(ctx, "bob", runs[0].RunID); rein.CodeOf(err) != rein.CodeNotFound {
				t.Errorf("FindRun of another owner's run: %v, want not_found", err)
			}
			if _, err := svc.FindRun(ctx, "alice", "run_none"); rein.CodeOf(err) != rein.CodeNotFound {
				t.Errorf("FindRun of an unknown run: %v, want not_found", err)
			}
		})
	}
}
