package sessions_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// TestCrashWindowsQueue stops the store at each write of the editable
// queue — a text edit, a move, a promote — with the write lost or
// committed with its answer lost, restarts a service on the same store,
// lets the client retry what it was not answered for, and then lets the
// session run: whatever the crash cut, the queue's record, its last
// session.queue_changed and the order the runs start in agree, the edited
// run runs with its edited text, and the run the promote stopped ends
// interrupted.
func TestCrashWindowsQueue(t *testing.T) {
	t.Parallel()
	sweepWrites(t, 3, crashQueue)
}

func crashQueue(t *testing.T, base store.Store, clk *shiftClock, n int, afterCommit bool) {
	ctx := context.Background()
	f := storetest.NewFaulty(base)
	first := crashService(t, f, "first")

	// The session, arranged directly in the store after the service
	// started (so it has nothing to recover and writes nothing of its
	// own): run A running on an instance that holds its turn for an hour,
	// and B, C, D queued behind it.
	key := rein.SessionKey{Owner: "alice", ID: "ses_crashq"}
	if err := base.CreateSession(ctx, &store.Session{Owner: key.Owner, ID: key.ID}); err != nil {
		t.Fatal(err)
	}
	runs := map[string]string{"A": "run_A", "B": "run_B", "C": "run_C", "D": "run_D"}
	err := base.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		now := tx.Now()
		if _, err := tx.AcquireLease("ghost", runs["A"], time.Hour); err != nil {
			return err
		}
		for i, name := range []string{"A", "B", "C", "D"} {
			r := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: runs[name], Status: rein.StatusQueued,
				Input: name + " as sent", QueueOrder: int64(i), Instance: "ghost", CreatedAt: now}
			if name == "A" {
				r.Status, r.StartedAt, r.Input = rein.StatusRunning, now, "block A"
			}
			if err := tx.CreateRun(r); err != nil {
				return err
			}
			if _, err := tx.AppendEvents(rein.NewEvent(rein.EventUserMessage, r.ID, rein.UserMessagePayload{Text: r.Input, RunID: r.ID})); err != nil {
				return err
			}
		}
		return tx.AppendHistory(rein.Message{Role: rein.RoleUser, Text: "block A", RunID: runs["A"]})
	})
	if err != nil {
		t.Fatal(err)
	}

	// The client's three calls, in order: B's text, D to the front, C
	// promoted. Writes 1, 2, 3.
	calls := []func(svc *sessions.Service) error{
		func(svc *sessions.Service) error {
			_, err := svc.EditRun(ctx, key, runs["B"], sessions.EditRunRequest{Text: ptr("B edited")})
			return err
		},
		func(svc *sessions.Service) error {
			_, err := svc.EditRun(ctx, key, runs["D"], sessions.EditRunRequest{Position: intp(1)})
			return err
		},
		func(svc *sessions.Service) error {
			_, err := svc.PromoteRun(ctx, key, runs["C"], rein.WhenBusyInterrupt)
			return err
		},
	}
	f.CrashAt(n, afterCommit)
	answered := make([]bool, len(calls))
	for i, call := range calls {
		answered[i] = call(first) == nil
	}
	first.Close()
	if answered[n-1] {
		t.Fatalf("write %d crashed, yet its call was answered", n)
	}

	// The store as the crash left it is consistent: the last
	// queue_changed logged is the queue the records say.
	checkQueueLog(t, base, key)

	// The client retries what it was not answered for, in order, on a
	// restarted service (A's turn is still held by its live instance).
	second := crashService(t, base, "second")
	for i, call := range calls {
		if !answered[i] {
			if err := call(second); err != nil {
				t.Fatalf("call %d retried: %v", i+1, err)
			}
		}
	}
	second.Close()
	checkQueueLog(t, base, key)
	evs, _, err := base.ReadEvents(ctx, key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if n := countEvents(evs, rein.EventRunEdited, ""); n != 1 {
		t.Fatalf("%d session.run_edited after the retries, want 1", n)
	}

	// A's instance is gone: the next service ends A as the promote's
	// durable stop says, and runs C, D, B in that order.
	clk.advance(time.Hour + lapse)
	third := crashService(t, base, "third")
	defer third.Close()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	after := int64(0)
	for {
		evs, _, err := base.ReadEvents(wctx, key, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if countEvents(evs, rein.EventRunCompleted, runs["B"]) == 1 {
			break
		}
		after = evs[len(evs)-1].Seq
		if err := base.WaitEvents(wctx, key, after); err != nil {
			t.Fatalf("waiting for the queue to run: %v; log %v", err, evs)
		}
	}
	evs, _, err = base.ReadEvents(ctx, key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var started []string
	for _, e := range evs {
		switch {
		case e.Type == rein.EventRunStarted:
			started = append(started, e.RunID)
		case e.Type == rein.EventRunCompleted && e.RunID == runs["A"]:
			var p rein.RunCompletedPayload
			if err := e.DecodePayload(&p); err != nil || p.Reason != rein.ReasonInterrupted {
				t.Fatalf("A ended %+v, %v; want interrupted by the promote", p, err)
			}
		case e.Type == rein.EventMessage && e.RunID == runs["B"]:
			if !strings.Contains(string(e.Payload), "echo B edited ") {
				t.Fatalf("B replied %s, want its edited text", e.Payload)
			}
		}
	}
	if want := []string{runs["C"], runs["D"], runs["B"]}; !slices.Equal(started, want) {
		t.Fatalf("runs started in the order %v, want %v", started, want)
	}
	for _, id := range runs {
		if c := countEvents(evs, rein.EventRunCompleted, id); c != 1 {
			t.Fatalf("%s has %d session.run_completed", id, c)
		}
	}
	checkQueueLog(t, base, key)
}

// checkQueueLog fails unless the session's last session.queue_changed (if
// any) is the queue its records say, in order.
func checkQueueLog(t *testing.T, st store.Store, key rein.SessionKey) {
	t.Helper()
	ctx := context.Background()
	evs, _, err := st.ReadEvents(ctx, key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	seen := false
	for _, e := range evs {
		if e.Type == rein.EventQueueChanged {
			var p rein.QueueChangedPayload
			if err := e.DecodePayload(&p); err != nil {
				t.Fatal(err)
			}
			logged, seen = p.Queued, true
		}
	}
	if !seen {
		return
	}
	all, err := st.ListRuns(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	pos := sessions.QueuePositions(all)
	stored := make([]string, len(pos))
	for id, p := range pos {
		stored[p-1] = id
	}
	if !slices.Equal(logged, stored) {
		t.Fatalf("last session.queue_changed says %v, the records %v", logged, stored)
	}
}
