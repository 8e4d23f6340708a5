package sessions_test

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/memory"
)

// TestExpiredOnArrivalLeavesNothingHeld: a run whose deadline has passed
// by the time the service holds it (a timeout of a nanosecond) ends
// CANCELLED with reason timeout, and nothing of it stays held: Close
// returns. Its deadline's timer used to fire before the handle was in the
// service's set of live runs, so the handle's end let go of nothing, the
// run stayed "executing" for ever and Close waited for it without end.
// The server's fuzz seed timeout-tiny (FuzzPostEvents) found it; each
// message here had about one chance in three to hit it.
func TestExpiredOnArrivalLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	st := memory.New()
	defer st.Close()
	svc, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) { c.Workspace = t.TempDir() })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: "hi", Timeout: time.Nanosecond})
		if err != nil {
			t.Fatal(err)
		}
		out, err := svc.WaitRun(ctx, sess.Key(), res.RunID)
		if err != nil || out.Status != rein.StatusCancelled || out.Reason != rein.ReasonTimeout {
			t.Fatalf("a run past its deadline on arrival: %+v %v", out, err)
		}
	}
	closed := make(chan struct{})
	go func() {
		svc.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close still waits for runs that have ended")
	}
}
