package sessions_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// TestCrashWindowsStopByClientID stops the store at each write of a stop
// by client id followed by its message — the write lost, or committed with
// its answer lost — restarts a service on the same store, and lets the
// client retry what it was not answered for. Each side is one write, so
// whatever the crash cut, the message's run ends stopped: CANCELLED at its
// admission, never started, ended once.
func TestCrashWindowsStopByClientID(t *testing.T) {
	t.Parallel()
	sweepWrites(t, 3, crashStopByClientID)
}

func crashStopByClientID(t *testing.T, base store.Store, clk *shiftClock, n int, afterCommit bool) {
	ctx := context.Background()
	if err := base.CreateSession(ctx, &store.Session{Owner: "alice", ID: "ses_crash"}); err != nil {
		t.Fatal(err)
	}
	key := rein.SessionKey{Owner: "alice", ID: "ses_crash"}
	f := storetest.NewFaulty(base)
	f.CrashAt(n, afterCommit)
	first := crashService(t, f, "first")
	_, stopErr := first.Interrupt(ctx, key, sessions.InterruptRequest{ClientID: "c"})
	_, msgErr := first.SendMessage(ctx, key, sessions.MessageRequest{Text: "block me", ClientID: "c"})
	first.Close()
	clk.advance(lapse)

	// The client retries whatever it was not answered for, in its order.
	second := crashService(t, base, "second")
	defer second.Close()
	if stopErr != nil {
		res, err := second.Interrupt(ctx, key, sessions.InterruptRequest{ClientID: "c"})
		if err != nil || !res.Accepted && res.RunID == "" {
			t.Fatalf("the stop retried = %+v, %v", res, err)
		}
	}
	res, err := second.SendMessage(ctx, key, sessions.MessageRequest{Text: "block me", ClientID: "c"})
	if err != nil {
		t.Fatalf("the message retried: %v (first answer: %v)", err, msgErr)
	}
	if res.Status != rein.StatusCancelled {
		t.Fatalf("the message's run = %+v, want CANCELLED", res)
	}
	evs, _, err := base.ReadEvents(ctx, key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	completed, started := 0, 0
	for _, e := range evs {
		if e.RunID != res.RunID {
			continue
		}
		switch e.Type {
		case rein.EventRunCompleted:
			completed++
		case rein.EventRunStarted:
			started++
		}
	}
	if completed != 1 || started != 0 {
		t.Fatalf("the message's run: %d session.run_completed, %d session.run_started; want 1 and 0", completed, started)
	}
	if runs, err := base.ListRuns(ctx, key); err != nil || len(runs) != 1 {
		t.Fatalf("runs: %d, %v; want the message's one", len(runs), err)
	}
	if msgErr == nil && stopErr == nil && n <= 2 && !afterCommit {
		t.Fatalf("write %d was lost, yet both calls were answered", n)
	}
}

// sweepWrites runs crash for each of the first writes writes of a
// scenario, with the write lost and with it committed and its answer
// lost, on every clocked backend.
func sweepWrites(t *testing.T, writes int, crash func(t *testing.T, base store.Store, clk *shiftClock, n int, afterCommit bool)) {
	onClockedBackends(t, func(t *testing.T, open clockedOpener) {
		for n := 1; n <= writes; n++ {
			for _, after := range []bool{false, true} {
				t.Run(fmt.Sprintf("write%d-committed=%v", n, after), func(t *testing.T) {
					clk := &shiftClock{}
					crash(t, open(t, clk.now), clk, n, after)
				})
			}
		}
	})
}

// crashService starts a service of the crash scenarios on st, named
// instance, with a live lease; t's cleanup does not close it (the
// scenario decides when it "dies").
func crashService(t *testing.T, st store.Store, instance string) *sessions.Service {
	t.Helper()
	svc, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.LeaseTTL, c.Instance = t.TempDir(), liveLease, instance
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return svc
}
