package subagent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/subagent"
)

// Regression: a followup whose Signal is already cancelled delivers nothing
// (the signal governs the call until acceptance). It used to be accepted:
// context.AfterFunc on a done context cancels in a goroutine of its own,
// after the durable write had happened.
func TestFollowupCancelledSignalDeliversNothing(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	idle := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "idle one"}})
	idleKey := key("alice", idle.ChildID)
	w.completed(idleKey, idle.TaskID)
	w.settled(parent, idle.TaskID)
	busy := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold busy"}})
	busyKey := key("alice", busy.ChildID)
	w.blocked(busyKey, busy.TaskID)
	defer func() {
		w.hold.release(busy.TaskID)
		w.completed(busyKey, busy.TaskID)
	}()
	idleSeq, busySeq := w.lastSeq(idleKey), w.lastSeq(busyKey)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct{ name, id string }{{"idle child", idle.ChildID}, {"running child", busy.ChildID}} {
		for i := 0; i < 20; i++ {
			if r, err := w.m.Followup(ctx, parent, c.id, "too late", subagent.FollowupOptions{Signal: cancelled}); err == nil {
				t.Errorf("%s, attempt %d: a followup with an already cancelled signal was accepted: %+v", c.name, i+1, r)
				break
			}
		}
	}
	if n := len(w.runs(idleKey)); n != 1 || w.lastSeq(idleKey) != idleSeq {
		t.Errorf("the idle child got something: %d runs (want 1), seq %d → %d", n, idleSeq, w.lastSeq(idleKey))
	}
	if n, _ := w.st.PendingSupplements(ctx, busyKey); n != 0 || w.lastSeq(busyKey) != busySeq {
		t.Errorf("the running child got something: %d supplements queued, seq %d → %d", n, busySeq, w.lastSeq(busyKey))
	}
}

// Regression: a crash between a child activation's recorded end and its
// settlement (or with the end committed but its answer lost) no longer
// loses the parent's subagent.completed and notice: the restarted
// instance catches up (subagent.Manager.Reconcile) for every N.
func TestSettlementSurvivesCrash(t *testing.T) {
	for _, afterCommit := range []bool{false, true} {
		for n := 1; n <= 40; n++ {
			name := fmt.Sprintf("write%d", n)
			if afterCommit {
				name += "-committed"
			}
			var done, failed bool
			t.Run(name, func(t *testing.T) {
				done = settleAcrossCrash(t, n, afterCommit)
				failed = t.Failed()
			})
			if done || failed {
				// Every window of this mode is covered, or one showed the
				// bug (the others would each wait out the same timeout).
				break
			}
		}
	}
}

// settleAcrossCrash runs one window; it reports true when the scenario
// finished before write n (no crash: every window is covered).
func settleAcrossCrash(t *testing.T, n int, afterCommit bool) bool {
	base := openMemory(t)
	f := storetest.NewFaulty(base)
	hold := newHold()
	first := newWorld(t, f, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "first" })
	parent := first.root("alice")
	s := first.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold crash"}})
	child := key("alice", s.ChildID)
	first.blocked(child, s.TaskID)

	f.CrashAt(n, afterCommit)
	hold.release(s.TaskID)
	// Wait for the settlement, or for the crash.
	wctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	go func() {
		select {
		case <-f.Crashed():
			stop()
		case <-wctx.Done():
		}
	}()
	_, err := waitEventCtx(wctx, first.svc, parent, isType(rein.EventSubagentCompleted, ""))
	select {
	case <-f.Crashed():
	default:
		if err != nil {
			t.Fatalf("no crash and no settlement: %v", err)
		}
		return true
	}
	first.svc.Close()

	second := newWorld(t, base, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "second" })
	end := second.completed(child, s.TaskID)
	if _, err := waitEventIn(second.svc, parent, 2*time.Second, func(e rein.Event) bool {
		var p rein.SubagentCompletedPayload
		return e.Type == rein.EventSubagentCompleted && e.DecodePayload(&p) == nil && p.TaskID == s.TaskID
	}); err != nil {
		evs := second.all(parent)
		t.Errorf("crash at write %d (committed=%v): the activation ended %s/%s but its parent never got subagent.completed (%v); the parent's log has %d events",
			n, afterCommit, end.Status, end.Reason, err, len(evs))
		if n, _ := base.PendingSupplements(context.Background(), parent); n != 0 {
			t.Errorf("yet %d notices are queued", n)
		}
	}
	return false
}

// Regression: a StartContinuable cut between creating the child and
// starting its first activation (the second write failed) is finished by
// a retry with the same child id, not refused as duplicate_child.
func TestStartContinuableRetryAfterCut(t *testing.T) {
	base := openMemory(t)
	f := storetest.NewFaulty(base)
	w := newWorld(t, f, subagent.Options{}, nil)
	parent := w.root("alice")
	// The child is created (one write), then its first activation's
	// admission fails.
	f.FailAt(2)
	if _, err := w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{ChildID: "kid-9", StartRequest: subagent.StartRequest{Prompt: "echo one"}}); err == nil {
		t.Fatal("the cut start reported success")
	}
	if n := len(w.runs(key("alice", "kid-9"))); n != 0 {
		t.Fatalf("the cut start left %d runs", n)
	}
	s, err := w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{ChildID: "kid-9", StartRequest: subagent.StartRequest{Prompt: "echo one"}})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	w.completed(key("alice", "kid-9"), s.TaskID)
	// Once it has run, the id is taken.
	_, err = w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{ChildID: "kid-9", StartRequest: subagent.StartRequest{Prompt: "echo two"}})
	if code(err) != subagent.CodeDuplicateChild {
		t.Fatalf("after it ran: %v, want duplicate_child", err)
	}
}
