package subagent_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
)

// With WakeParents, a background child's end starts a run of its idle
// parent: the run's input names the child, the notice reaches its first
// step (consumed once), and a repeated settlement starts nothing twice.
func TestWakeIdleParent(t *testing.T) {
	onBackends(t, func(t *testing.T, open opener) {
		w := newWorld(t, open(t), subagent.Options{WakeParents: true}, nil)
		ctx := context.Background()
		parent := w.root("alice")
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "helper"}})
		child := key("alice", s.ChildID)
		defer dump(t, w, parent, child)
		end := w.completed(child, s.TaskID)
		p := w.settled(parent, s.TaskID)
		msg := w.waitEvent(parent, "the wake's user.message", isType(rein.EventUserMessage, ""))
		var um rein.UserMessagePayload
		if err := msg.DecodePayload(&um); err != nil {
			t.Fatal(err)
		}
		want := `Subagent "helper" (` + s.ChildID + `) finished its task ` + s.TaskID + `; its note follows.`
		if um.Text != want {
			t.Fatalf("the wake's input %q, want %q", um.Text, want)
		}
		if c := w.completed(parent, um.RunID); c.Status != rein.StatusCompleted {
			t.Fatalf("the wake run %+v", c)
		}
		reply := w.reply(parent, um.RunID)
		if !strings.HasPrefix(reply, "echo "+want+" hints=[Subagent ") || !strings.Contains(reply, "Its reply: echo quick job") {
			t.Fatalf("the wake run's reply %q does not show the notice", reply)
		}
		cons := ofType[rein.SupplementConsumedPayload](t, w.all(parent), rein.EventSupplementConsumed)
		if len(cons) != 1 || cons[0].RunID != um.RunID || cons[0].Step != 1 {
			t.Fatalf("agent.supplement_consumed %+v", cons)
		}
		// Settled again (a repeated hook, a restart's Reconcile): no
		// second run.
		w.m.OnRunEnd(ctx, sessions.RunEnd{Session: child, RunID: s.TaskID, Status: end.Status, Reason: end.Reason, Reply: p.Output})
		if err := w.m.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if rs := w.runs(parent); len(rs) != 1 {
			t.Fatalf("%d runs of the parent after settling again, want the one wake", len(rs))
		}
	})
}

// A busy parent is not disturbed by a wake: its running step is not
// stopped, no run is queued behind it, and the notice reaches its next
// step.
func TestWakeLeavesBusyParent(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{WakeParents: true}, nil)
	parent := w.root("alice")
	pr := w.send(parent, "hold parent")
	w.blocked(parent, pr.RunID)
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job"}})
	defer dump(t, w, parent)
	w.completed(key("alice", s.ChildID), s.TaskID)
	w.settled(parent, s.TaskID)
	if rs := w.runs(parent); len(rs) != 1 {
		t.Fatalf("%d runs of the busy parent, want its own only", len(rs))
	}
	w.hold.release(pr.RunID)
	if c := w.completed(parent, pr.RunID); c.Status != rein.StatusCompleted {
		t.Fatalf("the parent's run %+v", c)
	}
	if got := w.reply(parent, pr.RunID); !strings.Contains(got, "hints=[Subagent ") {
		t.Fatalf("the parent's next step %q did not get the notice", got)
	}
	if rs := w.runs(parent); len(rs) != 1 {
		t.Fatalf("%d runs of the parent after it ended, want 1", len(rs))
	}
}

// The notice and the wake are two writes. A crash between them (here: a
// first instance that delivered the notice without waking, then died) is
// finished by the next instance's Reconcile: the idle parent is woken
// once, its run consumes the notice, and a further Reconcile starts
// nothing.
func TestWakeFinishedAfterCrash(t *testing.T) {
	onBackends(t, func(t *testing.T, open opener) {
		base := open(t)
		k := storetest.NewFaulty(base)
		hold := newHold()
		first := newWorld(t, k, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "first" })
		parent := first.root("alice")
		s := first.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "helper"}})
		first.completed(key("alice", s.ChildID), s.TaskID)
		first.settled(parent, s.TaskID)
		if rs := first.runs(parent); len(rs) != 0 {
			t.Fatalf("%d runs of the parent before the crash, want none", len(rs))
		}
		k.Kill()
		first.svc.Close()

		second := newWorld(t, base, subagent.Options{WakeParents: true}, hold, func(c *sessions.Config) { c.Instance = "second" })
		defer dump(t, second, parent)
		msg := second.waitEvent(parent, "the wake's user.message", isType(rein.EventUserMessage, ""))
		if c := second.completed(parent, msg.RunID); c.Status != rein.StatusCompleted {
			t.Fatalf("the wake run %+v", c)
		}
		if got := second.reply(parent, msg.RunID); !strings.Contains(got, "hints=[Subagent ") {
			t.Fatalf("the wake run's reply %q does not show the notice", got)
		}
		if err := second.m.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rs := second.runs(parent); len(rs) != 1 {
			t.Fatalf("%d runs of the parent after a second Reconcile, want the one wake", len(rs))
		}
		cons := ofType[rein.SupplementConsumedPayload](t, second.all(parent), rein.EventSupplementConsumed)
		if len(cons) != 1 || cons[0].RunID != msg.RunID {
			t.Fatalf("agent.supplement_consumed %+v", cons)
		}
	})
}

// A cancelled parent is not woken by its children's ends: the stop of the
// parent's run cancels its running children, and waking the parent for
// their notes would undo the stop. Settled again (synchronously, with the
// parent idle and the note unread) it still starts nothing.
func TestWakeNotAfterACancel(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{WakeParents: true}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	pr := w.send(parent, "hold parent")
	w.blocked(parent, pr.RunID)
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold child"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, parent, child)
	w.blocked(child, s.TaskID)
	if _, err := w.svc.Interrupt(ctx, parent, sessions.InterruptRequest{RunID: &pr.RunID, Mode: rein.StopCancel}); err != nil {
		t.Fatal(err)
	}
	if c := w.completed(parent, pr.RunID); c.Status != rein.StatusCancelled {
		t.Fatalf("the parent's run %+v", c)
	}
	end := w.completed(child, s.TaskID)
	if end.Reason != rein.ReasonCancelled {
		t.Fatalf("the child's activation %+v, want cancelled with its parent", end)
	}
	p := w.settled(parent, s.TaskID)
	w.m.OnRunEnd(ctx, sessions.RunEnd{Session: child, RunID: s.TaskID, Status: end.Status, Reason: end.Reason, Reply: p.Output})
	if rs := w.runs(parent); len(rs) != 1 {
		t.Fatalf("%d runs of the cancelled parent, want its own only", len(rs))
	}
}

// Only a root parent is woken: a child whose own child finished is not
// started (an activation its parent never asked for). Settled again
// synchronously, it still starts nothing.
func TestWakeOnlyRootParents(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{WakeParents: true}, nil)
	ctx := context.Background()
	root := w.root("alice")
	mid := w.startChild(root, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "mid"}})
	midKey := key("alice", mid.ChildID)
	w.completed(midKey, mid.TaskID)
	w.settled(root, mid.TaskID)
	leaf := w.startChild(midKey, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "leaf"}})
	leafKey := key("alice", leaf.ChildID)
	defer dump(t, w, root, midKey, leafKey)
	end := w.completed(leafKey, leaf.TaskID)
	p := w.settled(midKey, leaf.TaskID)
	w.m.OnRunEnd(ctx, sessions.RunEnd{Session: leafKey, RunID: leaf.TaskID, Status: end.Status, Reason: end.Reason, Reply: p.Output})
	if rs := w.runs(midKey); len(rs) != 1 {
		t.Fatalf("%d runs of the middle child, want its one activation", len(rs))
	}
	// The root itself was woken for its child, as a root is.
	w.waitEvent(root, "the root's wake", isType(rein.EventUserMessage, ""))
}

// logSignal is a log handler that closes seen at the first record whose
// message is msg: a test waits for what the manager did without sleeping.
type logSignal struct {
	msg  string
	once sync.Once
	seen chan struct{}
}

func newLogSignal(msg string) *logSignal { return &logSignal{msg: msg, seen: make(chan struct{})} }

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.once.Do(func() { close(l.seen) })
	}
	return nil
}
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSignal) WithGroup(string) slog.Handler      { return l }

func (l *logSignal) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-l.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("never logged: %s", what)
	}
}

// oneStepWorld is a world whose agent makes one model request per run
// (MaxSteps 1): a parent that holds in its tool ends at the step limit
// when released, without another step to read its inbox.
func oneStepWorld(t *testing.T, st store.Store, opts subagent.Options) *world {
	t.Helper()
	hold := newHold()
	m, err := scripted.Open(script)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(tool.RegistryOptions{}, hold)
	if err != nil {
		t.Fatal(err)
	}
	loop, err := agent.New(agent.Config{Model: m, Tools: reg, MaxSteps: 1})
	if err != nil {
		t.Fatal(err)
	}
	return newWorld(t, st, opts, hold, func(c *sessions.Config) {
		c.Agents = map[string]*sessions.Agent{sessions.DefaultAgent: {Loop: loop}}
	})
}

// A notice that finds its parent busy is refused its wake; if the
// parent's run then ends without another step to read it (here the step
// limit), the run's end wakes the parent for it: once, with the notice's
// own input and client id, and the woken run's first step reads the note.
func TestWakeAfterABusyParentEnds(t *testing.T) {
	onBackends(t, func(t *testing.T, open opener) {
		busy := newLogSignal("a parent busy at a subagent notice")
		w := oneStepWorld(t, open(t), subagent.Options{WakeParents: true, Logger: slog.New(busy)})
		ctx := context.Background()
		parent := w.root("alice")
		pr := w.send(parent, "hold parent")
		w.blocked(parent, pr.RunID)
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "helper"}})
		child := key("alice", s.ChildID)
		defer dump(t, w, parent, child)
		w.completed(child, s.TaskID)
		w.settled(parent, s.TaskID)
		busy.wait(t, "the notice's wake refused for a busy parent")

		w.hold.release(pr.RunID)
		end := w.completed(parent, pr.RunID)
		if end.Reason != rein.ReasonMaxSteps {
			t.Fatalf("the parent's run %+v, want it ended at the step limit", end)
		}
		msg := w.waitEvent(parent, "the wake's user.message", func(e rein.Event) bool {
			return e.Type == rein.EventUserMessage && e.RunID != pr.RunID
		})
		var um rein.UserMessagePayload
		if err := msg.DecodePayload(&um); err != nil {
			t.Fatal(err)
		}
		if want := `Subagent "helper" (` + s.ChildID + `) finished its task ` + s.TaskID + `; its note follows.`; um.Text != want {
			t.Fatalf("the wake's input %q, want %q", um.Text, want)
		}
		if c := w.completed(parent, msg.RunID); c.Status != rein.StatusCompleted {
			t.Fatalf("the wake run %+v", c)
		}
		if got := w.reply(parent, msg.RunID); !strings.Contains(got, "hints=[Subagent ") {
			t.Fatalf("the wake run's reply %q does not show the notice", got)
		}
		// The parent's end told again (as after a crash), and the wake
		// run's own end: nothing more starts.
		w.m.OnRunEnd(ctx, sessions.RunEnd{Session: parent, RunID: pr.RunID, Status: end.Status, Reason: end.Reason})
		rs := w.runs(parent)
		if len(rs) != 2 {
			t.Fatalf("%d runs of the parent, want its own and the one wake", len(rs))
		}
		for _, r := range rs {
			if r.ID == msg.RunID && r.ClientID != "wake_"+strings.TrimPrefix(s.TaskID, "run_") {
				t.Fatalf("the wake run's client id %q", r.ClientID)
			}
		}
		cons := ofType[rein.SupplementConsumedPayload](t, w.all(parent), rein.EventSupplementConsumed)
		if len(cons) != 1 || cons[0].RunID != msg.RunID {
			t.Fatalf("agent.supplement_consumed %+v, want one, by the wake run", cons)
		}
	})
}

// A parent whose run was stopped (interrupt) is not started again for a
// note its stopped run left unread: the note waits for its next message.
func TestWakeNotAfterAnInterruptedParent(t *testing.T) {
	busy := newLogSignal("a parent busy at a subagent notice")
	w := oneStepWorld(t, openMemory(t), subagent.Options{WakeParents: true, Logger: slog.New(busy)})
	ctx := context.Background()
	parent := w.root("alice")
	pr := w.send(parent, "hold parent")
	w.blocked(parent, pr.RunID)
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, parent, child)
	w.completed(child, s.TaskID)
	w.settled(parent, s.TaskID)
	busy.wait(t, "the notice's wake refused for a busy parent")
	if _, err := w.svc.Interrupt(ctx, parent, sessions.InterruptRequest{RunID: &pr.RunID, Mode: rein.StopInterrupt}); err != nil {
		t.Fatal(err)
	}
	end := w.completed(parent, pr.RunID)
	if end.Reason != rein.ReasonInterrupted {
		t.Fatalf("the parent's run %+v, want interrupted", end)
	}
	// Told synchronously, so the check below follows whatever it does.
	w.m.OnRunEnd(ctx, sessions.RunEnd{Session: parent, RunID: pr.RunID, Status: end.Status, Reason: end.Reason})
	if rs := w.runs(parent); len(rs) != 1 {
		t.Fatalf("%d runs of the interrupted parent, want its own only", len(rs))
	}
	// The child's settlement repeated, as Reconcile repeats it after a
	// restart, with the parent idle and the note unread: still nothing.
	ce := w.completed(child, s.TaskID)
	w.m.OnRunEnd(ctx, sessions.RunEnd{Session: child, RunID: s.TaskID, Status: ce.Status, Reason: ce.Reason})
	if rs := w.runs(parent); len(rs) != 1 {
		t.Fatalf("%d runs of the interrupted parent after its note was settled again, want its own only", len(rs))
	}
	if n, err := w.st.PendingSupplements(ctx, parent); err != nil || n != 1 {
		t.Fatalf("%d notes waiting (%v), want the one for the next message", n, err)
	}
}
