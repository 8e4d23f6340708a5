package subagent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
)

// StartContinuable answers {child_id, task_id, message_id} while the
// child's first step is still in its tool call, persists the child with
// its descriptor, and logs subagent.started in the parent.
func TestStartContinuableReturnsAtOnce(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold first", Label: "helper", System: "be terse"}})
	defer dump(t, w, parent, key("alice", s.ChildID))
	if s.ChildID == "" || s.TaskID == "" || s.MessageID == "" {
		t.Fatalf("StartContinuable = %+v", s)
	}
	child := key("alice", s.ChildID)
	// Returned before the first step ended: the step cannot end until the
	// hold is released, which happens only below.
	w.blocked(child, s.TaskID)
	for _, e := range w.all(child) {
		if e.Type == rein.EventMessage || e.Type == rein.EventRunCompleted {
			t.Fatalf("the child's first activation ended before it was released: %s", e.Type)
		}
	}
	// message_id is the id of the user.message that started the task.
	msgs := 0
	for _, e := range w.all(child) {
		if e.Type != rein.EventUserMessage {
			continue
		}
		msgs++
		var p rein.UserMessagePayload
		_ = e.DecodePayload(&p)
		if e.ID != s.MessageID || e.RunID != s.TaskID || p.Text != "hold first" || p.RunID != s.TaskID {
			t.Fatalf("user.message %s run=%s %+v; StartContinuable said message %s task %s", e.ID, e.RunID, p, s.MessageID, s.TaskID)
		}
	}
	if msgs != 1 {
		t.Fatalf("%d user.message in the child's log", msgs)
	}
	// subagent.started {child_id, task_id}, envelope run_id null.
	var found int
	for _, e := range w.all(parent) {
		if e.Type != rein.EventSubagentStarted {
			continue
		}
		found++
		var p rein.SubagentStartedPayload
		_ = e.DecodePayload(&p)
		if p.ChildID != s.ChildID || p.TaskID != s.TaskID || e.RunID != "" {
			t.Fatalf("subagent.started run=%q %+v, want child %s task %s", e.RunID, p, s.ChildID, s.TaskID)
		}
		if string(e.Payload) != `{"child_id":"`+s.ChildID+`","task_id":"`+s.TaskID+`"}` {
			t.Fatalf("subagent.started payload %s", e.Payload)
		}
	}
	if found != 1 {
		t.Fatalf("%d subagent.started in the parent's log", found)
	}
	// The child is a session of the same owner with a parent and a
	// persisted descriptor.
	info, err := w.svc.GetSession(context.Background(), child)
	if err != nil {
		t.Fatal(err)
	}
	if info.ParentID != parent.ID || info.Subagent == nil || !info.Subagent.Continuable || info.Subagent.Depth != 1 ||
		info.Subagent.Label != "helper" || info.Subagent.System != "be terse" || info.CurrentRunID != s.TaskID {
		t.Fatalf("child session %+v descriptor %+v", info.Session, info.Subagent)
	}
	w.hold.release(s.TaskID)
	if p := w.completed(child, s.TaskID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("first activation %+v", p)
	}
	w.settled(parent, s.TaskID)
}

// A caller-chosen child id is the child's session id; the same id again is
// duplicate_child and touches nothing.
func TestCallerChosenChildID(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{ChildID: "kid-7", StartRequest: subagent.StartRequest{Prompt: "echo one"}})
	if s.ChildID != "kid-7" {
		t.Fatalf("child id %q, want kid-7", s.ChildID)
	}
	child := key("alice", "kid-7")
	w.completed(child, s.TaskID)
	w.settled(parent, s.TaskID)
	before := w.lastSeq(child)
	_, err := w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{ChildID: "kid-7", StartRequest: subagent.StartRequest{Prompt: "echo two"}})
	var se *subagent.Error
	if !errors.As(err, &se) || se.Code != subagent.CodeDuplicateChild {
		t.Fatalf("the same child id again: %v, want *subagent.Error duplicate_child", err)
	}
	// A taken id of another kind (a root session) is taken too.
	_, err = w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{ChildID: parent.ID, StartRequest: subagent.StartRequest{Prompt: "echo three"}})
	if code(err) != subagent.CodeDuplicateChild {
		t.Fatalf("the parent's own id as child id: %v, want duplicate_child", err)
	}
	if n := len(w.runs(child)); n != 1 || w.lastSeq(child) != before {
		t.Fatalf("a refused duplicate touched the child: %d runs, seq %d → %d", n, before, w.lastSeq(child))
	}
}

// A followup to a running activation steers it: a user.supplement
// (source "parent") that its next step's request carries.
func TestFollowupSteersRunningActivation(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold task"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, child)
	w.blocked(child, s.TaskID)
	r := w.followup(parent, s.ChildID, "also check the tests")
	if r.Route != subagent.RouteSteered || r.TaskID != s.TaskID || r.MessageID == "" {
		t.Fatalf("Followup = %+v, want steered into %s", r, s.TaskID)
	}
	sups := ofType[rein.SupplementPayload](t, w.all(child), rein.EventUserSupplement)
	if len(sups) != 1 || sups[0].SupplementID != r.MessageID || sups[0].Source != "parent" || sups[0].Text != "also check the tests" {
		t.Fatalf("user.supplement in the child's log: %+v (message_id %s)", sups, r.MessageID)
	}
	// Durable when Followup returned.
	if sup, err := w.st.GetSupplement(context.Background(), child, r.MessageID); err != nil || sup.Source != "parent" {
		t.Fatalf("stored supplement %+v, %v", sup, err)
	}
	w.hold.release(s.TaskID)
	if p := w.completed(child, s.TaskID); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	if got, want := w.reply(child, s.TaskID), "held hold task hints=[also check the tests] turns=1"; got != want {
		t.Fatalf("the child's next step: %q, want %q", got, want)
	}
	cons := ofType[rein.SupplementConsumedPayload](t, w.all(child), rein.EventSupplementConsumed)
	if len(cons) != 1 || cons[0].SupplementID != r.MessageID || cons[0].RunID != s.TaskID || cons[0].Step != 2 {
		t.Fatalf("agent.supplement_consumed %+v", cons)
	}
	if n := len(w.runs(child)); n != 1 {
		t.Fatalf("a steered followup started a run: %d runs", n)
	}
}

// A followup to an idle child resumes it with its whole transcript, as a
// new activation started by a user.message.
func TestFollowupResumesIdleChild(t *testing.T) { onBackends(t, testFollowupResumesIdleChild) }

func testFollowupResumesIdleChild(t *testing.T, open opener) {
	w := newWorld(t, open(t), subagent.Options{}, nil)
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "first task"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, child, parent)
	w.completed(child, s.TaskID)
	w.settled(parent, s.TaskID)
	r := w.followup(parent, s.ChildID, "second task")
	if r.Route != subagent.RouteStarted || r.TaskID == "" || r.TaskID == s.TaskID {
		t.Fatalf("Followup = %+v, want a new activation", r)
	}
	var msg rein.Event
	for _, e := range w.all(child) {
		if e.Type == rein.EventUserMessage && e.RunID == r.TaskID {
			msg = e
		}
	}
	if msg.ID != r.MessageID {
		t.Fatalf("message_id %q, the activation's user.message is %q", r.MessageID, msg.ID)
	}
	if p := w.completed(child, r.TaskID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("second activation %+v", p)
	}
	if got, want := w.reply(child, r.TaskID), "echo second task hints=[] turns=2"; got != want {
		t.Fatalf("second activation's reply %q, want %q (its earlier turn resumed)", got, want)
	}
	// Each activation is announced and settled in the parent.
	w.started(parent, "")
	starts := ofType[rein.SubagentStartedPayload](t, w.all(parent), rein.EventSubagentStarted)
	if len(starts) != 2 || starts[1].TaskID != r.TaskID || starts[1].ChildID != s.ChildID {
		t.Fatalf("subagent.started in the parent: %+v", starts)
	}
	if p := w.settled(parent, r.TaskID); p.ChildID != s.ChildID || p.Output == nil || *p.Output != "echo second task hints=[] turns=2" {
		t.Fatalf("subagent.completed %+v", p)
	}
}

// The authority of a followup is checked against the store: after the
// service that started the child "crashed", a new service and manager on
// the same store accept the parent's followup and refuse anybody else.
func TestFollowupAfterCrash(t *testing.T) { onBackends(t, testFollowupAfterCrash) }

func testFollowupAfterCrash(t *testing.T, open opener) {
	base := open(t)
	k := storetest.NewFaulty(base)
	hold := newHold()
	first := newWorld(t, k, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "first" })
	parent := first.root("alice")
	other := first.root("alice")
	s := first.startChild(parent, subagent.ContinuableSpec{ChildID: "kid-crash", StartRequest: subagent.StartRequest{Prompt: "first task"}})
	child := key("alice", s.ChildID)
	first.completed(child, s.TaskID)
	first.settled(parent, s.TaskID)
	k.Kill()
	first.svc.Close()

	second := newWorld(t, base, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "second" })
	defer dump(t, second, child, parent)
	if _, err := second.m.Followup(context.Background(), other, s.ChildID, "not yours", subagent.FollowupOptions{}); code(err) != subagent.CodeUnauthorized {
		t.Fatalf("another root after the restart: %v, want unauthorized", err)
	}
	second.resumesWithTranscript(parent, s.ChildID, "second task")
}

// Only the direct parent session may follow up (or steer, or stop) a
// child; an unknown child is not_resumable; nothing refused touches the
// child.
func TestFollowupAuthority(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	other := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold task"}})
	sib := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "sibling"}})
	child := key("alice", s.ChildID)
	sibling := key("alice", sib.ChildID)
	w.completed(sibling, sib.TaskID)
	w.settled(parent, sib.TaskID)
	// A grandchild of parent (a child of the child).
	gc := w.startChild(child, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "grandchild"}})
	w.completed(key("alice", gc.ChildID), gc.TaskID)
	w.settled(child, gc.TaskID)
	w.blocked(child, s.TaskID)
	before := w.lastSeq(child)
	// The grandchild's notice waits in the child's inbox.
	pending, err := w.st.PendingSupplements(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	bob := w.root("bob")

	for _, tc := range []struct {
		name   string
		caller rein.SessionKey
		child  string
		want   string
	}{
		{"another root of the owner", other, s.ChildID, subagent.CodeUnauthorized},
		{"a sibling", sibling, s.ChildID, subagent.CodeUnauthorized},
		{"the child itself", child, s.ChildID, subagent.CodeUnauthorized},
		{"the grandparent", parent, gc.ChildID, subagent.CodeUnauthorized},
		{"unknown child", parent, "no-such-child", subagent.CodeNotResumable},
		// Another owner is refused like any session that is not the
		// parent, and learns nothing else; an id no one has is unknown.
		{"a session of another owner", bob, s.ChildID, subagent.CodeUnauthorized},
		{"another owner with the parent's id", key("bob", parent.ID), s.ChildID, subagent.CodeUnauthorized},
		{"another owner, unknown child", bob, "no-such-child", subagent.CodeNotResumable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.m.Followup(ctx, tc.caller, tc.child, "do something else", subagent.FollowupOptions{Source: "parent"})
			if code(err) != tc.want {
				t.Errorf("Followup: %v, want %s", err, tc.want)
			}
			if _, err := w.m.Steer(ctx, tc.caller, tc.child, "steer"); code(err) != tc.want {
				t.Errorf("Steer: %v, want %s", err, tc.want)
			}
			if ok, err := w.m.Interrupt(ctx, tc.caller, tc.child); ok || code(err) != tc.want {
				t.Errorf("Interrupt: %v %v, want %s", ok, err, tc.want)
			}
		})
	}
	// The child is untouched: still in its first activation, nothing
	// appended, nothing queued in its inbox.
	if seq := w.lastSeq(child); seq != before {
		dump(t, w, child)
		t.Fatalf("refused calls wrote to the child's log: seq %d → %d", before, seq)
	}
	if n, _ := w.st.PendingSupplements(ctx, child); n != pending {
		t.Fatalf("%d supplements queued by refused calls", n-pending)
	}
	if rs := w.runs(child); len(rs) != 1 || rs[0].Status != rein.StatusRunning {
		t.Fatalf("child runs %+v", rs)
	}
	// A one-shot child cannot be followed up, even by its parent.
	res, err := w.m.Start(ctx, parent, subagent.StartRequest{Prompt: "one shot"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Followup(ctx, parent, res.ChildID, "more", subagent.FollowupOptions{}); code(err) != subagent.CodeNotResumable {
		t.Fatalf("Followup of a one-shot child: %v, want not_resumable", err)
	}
	// The parent itself still may.
	r := w.followup(parent, s.ChildID, "parent's note")
	if r.Route != subagent.RouteSteered {
		t.Fatalf("%+v", r)
	}
	w.hold.release(s.TaskID)
	w.completed(child, s.TaskID)
}

// The signal governs a followup only until acceptance: cancelling it after
// the call returned changes nothing — neither for a started activation nor
// for a steered note. (An already cancelled signal must deliver nothing:
// TestBugFollowupCancelledSignalDelivers in zz_bugs_test.go.)
func TestFollowupSignalAfterAcceptance(t *testing.T) {
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

	sig, cancelSig := context.WithCancel(ctx)
	r, err := w.m.Followup(ctx, parent, idle.ChildID, "hold resumed", subagent.FollowupOptions{Signal: sig})
	if err != nil || r.Route != subagent.RouteStarted {
		t.Fatalf("Followup = %+v, %v", r, err)
	}
	sig2, cancelSig2 := context.WithCancel(ctx)
	st, err := w.m.Followup(ctx, parent, busy.ChildID, "steer note", subagent.FollowupOptions{Signal: sig2})
	if err != nil || st.Route != subagent.RouteSteered {
		t.Fatalf("Followup = %+v, %v", st, err)
	}
	cancelSig()
	cancelSig2()
	w.blocked(idleKey, r.TaskID)
	w.hold.release(r.TaskID)
	w.hold.release(busy.TaskID)
	if p := w.completed(idleKey, r.TaskID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("the accepted activation after its signal was cancelled: %+v", p)
	}
	if got, want := w.reply(idleKey, r.TaskID), "held hold resumed hints=[] turns=2"; got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
	if p := w.completed(busyKey, busy.TaskID); p.Status != rein.StatusCompleted {
		t.Fatalf("%+v", p)
	}
	if got, want := w.reply(busyKey, busy.TaskID), "held hold busy hints=[steer note] turns=1"; got != want {
		t.Fatalf("the steered note after its signal was cancelled: %q, want %q", got, want)
	}
}

// A followup whose own context is already cancelled is refused and
// delivers nothing.
func TestFollowupCancelledContextDeliversNothing(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	idle := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "idle one"}})
	idleKey := key("alice", idle.ChildID)
	w.completed(idleKey, idle.TaskID)
	w.settled(parent, idle.TaskID)
	busy := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold busy"}})
	busyKey := key("alice", busy.ChildID)
	w.blocked(busyKey, busy.TaskID)
	idleSeq, busySeq := w.lastSeq(idleKey), w.lastSeq(busyKey)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []string{idle.ChildID, busy.ChildID} {
		if r, err := w.m.Followup(cancelled, parent, c, "too late", subagent.FollowupOptions{}); err == nil {
			t.Fatalf("a followup with a cancelled context was accepted: %+v", r)
		}
	}
	if n := len(w.runs(idleKey)); n != 1 || w.lastSeq(idleKey) != idleSeq {
		t.Fatalf("the idle child got something: %d runs, seq %d → %d", n, idleSeq, w.lastSeq(idleKey))
	}
	if n, _ := w.st.PendingSupplements(context.Background(), busyKey); n != 0 || w.lastSeq(busyKey) != busySeq {
		t.Fatalf("the running child got something: %d queued, seq %d → %d", n, busySeq, w.lastSeq(busyKey))
	}
	w.hold.release(busy.TaskID)
	w.completed(busyKey, busy.TaskID)
}

// Two concurrent followups to an idle child make exactly one new
// activation; the other steers it, and both contents reach the child.
func TestConcurrentFollowups(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	for round := 0; round < 5; round++ {
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "first"}})
		child := key("alice", s.ChildID)
		w.completed(child, s.TaskID)
		w.settled(parent, s.TaskID)

		contents := []string{"hold A", "hold B"}
		results := make([]subagent.FollowupResult, 2)
		errs := make([]error, 2)
		var ready, wg sync.WaitGroup
		ready.Add(2)
		gate := make(chan struct{})
		for i := range contents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				<-gate
				results[i], errs[i] = w.m.Followup(ctx, parent, s.ChildID, contents[i], subagent.FollowupOptions{})
			}()
		}
		ready.Wait()
		close(gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: Followup %q: %v", round, contents[i], err)
			}
		}
		var startedIdx = -1
		for i, r := range results {
			if r.Route == subagent.RouteStarted {
				if startedIdx >= 0 {
					t.Fatalf("round %d: both followups started an activation: %+v", round, results)
				}
				startedIdx = i
			}
		}
		if startedIdx < 0 {
			t.Fatalf("round %d: no followup started an activation: %+v", round, results)
		}
		task := results[startedIdx].TaskID
		steered := results[1-startedIdx]
		if steered.Route != subagent.RouteSteered || steered.TaskID != task {
			t.Fatalf("round %d: the other followup %+v, want steered into %s", round, steered, task)
		}
		if n := len(w.runs(child)); n != 2 {
			t.Fatalf("round %d: %d runs, want 2 (one new activation)", round, n)
		}
		w.hold.release(task)
		if p := w.completed(child, task); p.Reason != rein.ReasonStop {
			t.Fatalf("%+v", p)
		}
		// Both contents reached the activation: one as its input, the
		// other as a supplement one of its steps consumed.
		evs := w.all(child)
		var input string
		for _, e := range evs {
			if e.Type == rein.EventUserMessage && e.RunID == task {
				var p rein.UserMessagePayload
				_ = e.DecodePayload(&p)
				input = p.Text
			}
		}
		if input != contents[startedIdx] {
			t.Fatalf("round %d: the activation's input %q, want %q", round, input, contents[startedIdx])
		}
		sups := ofType[rein.SupplementPayload](t, evs, rein.EventUserSupplement)
		cons := ofType[rein.SupplementConsumedPayload](t, evs, rein.EventSupplementConsumed)
		if len(sups) != 1 || sups[0].Text != contents[1-startedIdx] || sups[0].SupplementID != steered.MessageID {
			t.Fatalf("round %d: supplements %+v", round, sups)
		}
		if len(cons) != 1 || cons[0].SupplementID != steered.MessageID || cons[0].RunID != task {
			t.Fatalf("round %d: consumed %+v", round, cons)
		}
		w.settled(parent, task)
	}
}

// Start runs a one-shot child and answers its output and reason;
// cancelling the caller's context cancels the child's run.
func TestStartOneShot(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	res, err := w.m.Start(context.Background(), parent, subagent.StartRequest{Prompt: "one shot", Label: "os"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonStop || res.Output != "echo one shot hints=[] turns=1" || res.ChildID == "" || res.TaskID == "" {
		t.Fatalf("Start = %+v", res)
	}
	info, err := w.svc.GetSession(context.Background(), key("alice", res.ChildID))
	if err != nil || info.ParentID != parent.ID || info.Subagent == nil || info.Subagent.Continuable || info.Subagent.Label != "os" {
		t.Fatalf("one-shot child %+v, %v", info, err)
	}
	w.settled(parent, res.TaskID)

	// The caller goes away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		r   subagent.Result
		err error
	}
	done := make(chan answer, 1)
	before := len(ofType[rein.SubagentStartedPayload](t, w.all(parent), rein.EventSubagentStarted))
	go func() {
		r, err := w.m.Start(ctx, parent, subagent.StartRequest{Prompt: "hold forever"})
		done <- answer{r, err}
	}()
	var st rein.SubagentStartedPayload
	w.waitEvent(parent, "the second subagent.started", func(e rein.Event) bool {
		if e.Type != rein.EventSubagentStarted {
			return false
		}
		before--
		if before >= 0 {
			return false
		}
		return e.DecodePayload(&st) == nil
	})
	child := key("alice", st.ChildID)
	w.blocked(child, st.TaskID)
	cancel()
	a := <-done
	if a.err == nil {
		t.Fatalf("Start returned %+v without an error after its context was cancelled", a.r)
	}
	if p := w.completed(child, st.TaskID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("the one-shot child after its caller went away: %+v", p)
	}
}

// When an activation ends, the parent gets subagent.completed and a notice
// that its running run's next step carries.
func TestSettlementIntoRunningParent(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	pr := w.send(parent, "hold parent")
	w.blocked(parent, pr.RunID)
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job", Label: "quick"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, parent, child)
	w.completed(child, s.TaskID)
	p := w.settled(parent, s.TaskID)
	wantOut := "echo quick job hints=[] turns=1"
	if p.ChildID != s.ChildID || p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop || p.Output == nil || *p.Output != wantOut {
		t.Fatalf("subagent.completed %+v", p)
	}
	for _, e := range w.all(parent) {
		if e.Type == rein.EventSubagentCompleted {
			if e.RunID != "" {
				t.Fatalf("subagent.completed has envelope run_id %q", e.RunID)
			}
			for _, k := range []string{`"child_id"`, `"task_id"`, `"status"`, `"reason"`, `"output"`} {
				if !strings.Contains(string(e.Payload), k) {
					t.Fatalf("subagent.completed payload %s lacks %s", e.Payload, k)
				}
			}
		}
		if e.Type == rein.EventUserSupplement {
			t.Fatalf("the notice was also logged as user.supplement: %s", e.Payload)
		}
	}
	w.hold.release(pr.RunID)
	w.completed(parent, pr.RunID)
	reply := w.reply(parent, pr.RunID)
	if !strings.HasPrefix(reply, "held hold parent hints=[") || !strings.Contains(reply, s.TaskID) || !strings.Contains(reply, wantOut) {
		t.Fatalf("the parent's next step %q does not show the notice", reply)
	}
	cons := ofType[rein.SupplementConsumedPayload](t, w.all(parent), rein.EventSupplementConsumed)
	if len(cons) != 1 || cons[0].RunID != pr.RunID || cons[0].Step != 2 {
		t.Fatalf("agent.supplement_consumed %+v", cons)
	}
	sup, err := w.st.GetSupplement(context.Background(), parent, cons[0].SupplementID)
	if err != nil || !strings.Contains(sup.Text, wantOut) || !strings.Contains(reply, sup.Text) {
		t.Fatalf("consumed %s is not the notice: %+v, %v", cons[0].SupplementID, sup, err)
	}
}

// A notice to an idle parent stays queued (the parent is not started) and
// reaches its next run; settling the same end again delivers nothing.
func TestSettlementIntoIdleParentOnce(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job"}})
	child := key("alice", s.ChildID)
	defer dump(t, w, parent, child)
	end := w.completed(child, s.TaskID)
	p := w.settled(parent, s.TaskID)
	if n := len(w.runs(parent)); n != 0 {
		t.Fatalf("the notice started the idle parent: %d runs", n)
	}
	if n, _ := w.st.PendingSupplements(ctx, parent); n != 1 {
		t.Fatalf("%d notices queued, want 1", n)
	}
	// The same end settled again (a repeated hook) adds nothing.
	seq := w.lastSeq(parent)
	again := sessions.RunEnd{Session: child, RunID: s.TaskID, Status: end.Status, Reason: end.Reason, Reply: p.Output}
	w.m.OnRunEnd(ctx, again)
	if w.lastSeq(parent) != seq {
		dump(t, w, parent)
		t.Fatalf("settling again wrote to the parent: seq %d → %d", seq, w.lastSeq(parent))
	}
	if n, _ := w.st.PendingSupplements(ctx, parent); n != 1 {
		t.Fatalf("%d notices queued after settling again, want 1", n)
	}
	r := w.send(parent, "next")
	w.completed(parent, r.RunID)
	reply := w.reply(parent, r.RunID)
	if !strings.HasPrefix(reply, "echo next hints=[Subagent ") || !strings.Contains(reply, s.TaskID) {
		t.Fatalf("the parent's next run %q does not show the notice", reply)
	}
	cons := ofType[rein.SupplementConsumedPayload](t, w.all(parent), rein.EventSupplementConsumed)
	if len(cons) != 1 || cons[0].RunID != r.RunID || cons[0].Step != 1 {
		t.Fatalf("agent.supplement_consumed %+v", cons)
	}
	// Once consumed, a repeated settlement does not queue it again.
	w.m.OnRunEnd(ctx, again)
	if n, _ := w.st.PendingSupplements(ctx, parent); n != 0 {
		t.Fatalf("a consumed notice queued again: %d", n)
	}
	r2 := w.send(parent, "after")
	w.completed(parent, r2.RunID)
	if got := w.reply(parent, r2.RunID); got != "echo after hints=[] turns=2" {
		t.Fatalf("the notice was delivered twice: %q", got)
	}
	if n := len(ofType[rein.SubagentCompletedPayload](t, w.all(parent), rein.EventSubagentCompleted)); n != 1 {
		t.Fatalf("%d subagent.completed", n)
	}
}

// The final flush is a best-effort barrier: with no listeners, and with a
// failing one, the settlement and the activation's result are the same;
// the settlement waits for the listeners to settle.
func TestFlushBarrier(t *testing.T) {
	want := func(t *testing.T, w *world, parent rein.SessionKey, s subagent.Started) {
		t.Helper()
		child := key("alice", s.ChildID)
		if p := w.completed(child, s.TaskID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop || p.Error != "" {
			t.Fatalf("activation %+v", p)
		}
		p := w.settled(parent, s.TaskID)
		if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop || p.Output == nil || *p.Output != "echo job hints=[] turns=1" {
			t.Fatalf("subagent.completed %+v", p)
		}
		if n, _ := w.st.PendingSupplements(context.Background(), parent); n != 1 {
			t.Fatalf("%d notices queued", n)
		}
		// The child stays continuable.
		r := w.followup(parent, s.ChildID, "again")
		if p := w.completed(child, r.TaskID); p.Reason != rein.ReasonStop {
			t.Fatalf("%+v", p)
		}
		w.settled(parent, r.TaskID)
	}
	t.Run("no listeners", func(t *testing.T) {
		w := newWorld(t, openMemory(t), subagent.Options{}, nil)
		parent := w.root("alice")
		if ok, err := w.st.Flush(context.Background(), parent); ok || err != nil {
			t.Fatalf("Flush with no listeners = %v, %v", ok, err)
		}
		want(t, w, parent, w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "job"}}))
	})
	t.Run("failing listener", func(t *testing.T) {
		st := openMemory(t)
		var mu sync.Mutex
		flushed := map[rein.SessionKey]int{}
		remove := st.AddFlushListener(func(_ context.Context, k rein.SessionKey) error {
			mu.Lock()
			flushed[k]++
			mu.Unlock()
			return errors.New("replica unreachable")
		})
		defer remove()
		w := newWorld(t, st, subagent.Options{}, nil)
		parent := w.root("alice")
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "job"}})
		want(t, w, parent, s)
		mu.Lock()
		defer mu.Unlock()
		if flushed[key("alice", s.ChildID)] == 0 {
			t.Fatalf("the activation's final flush never reached the listener: %v", flushed)
		}
	})
	t.Run("settlement awaits the listener", func(t *testing.T) {
		st := openMemory(t)
		entered := make(chan rein.SessionKey, 16)
		release := make(chan struct{})
		remove := st.AddFlushListener(func(ctx context.Context, k rein.SessionKey) error {
			entered <- k
			select {
			case <-release:
			case <-ctx.Done():
			}
			return errors.New("replica unreachable")
		})
		defer remove()
		w := newWorld(t, st, subagent.Options{}, nil)
		parent := w.root("alice")
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "job"}})
		child := key("alice", s.ChildID)
		w.completed(child, s.TaskID)
		if k := <-entered; k != child {
			t.Fatalf("flushed %s, want the child %s", k, child)
		}
		for _, e := range w.all(parent) {
			if e.Type == rein.EventSubagentCompleted {
				t.Fatal("subagent.completed logged before the final flush settled")
			}
		}
		close(release)
		want(t, w, parent, s)
	})
}

// Delegation depth is capped: with MaxDepth 2 a child of a child of a
// child is depth_exceeded, for Start, StartContinuable and spawn_agent.
func TestDepthCap(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{MaxDepth: 2}, nil)
	ctx := context.Background()
	root := w.root("alice")
	c1 := w.startChild(root, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "level one"}})
	k1 := key("alice", c1.ChildID)
	w.completed(k1, c1.TaskID)
	c2 := w.startChild(k1, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "spawn deeper"}})
	k2 := key("alice", c2.ChildID)
	defer dump(t, w, k2)
	info, err := w.svc.GetSession(ctx, k2)
	if err != nil || info.Subagent.Depth != 2 {
		t.Fatalf("depth of the grandchild: %+v, %v", info, err)
	}
	// The grandchild's own spawn_agent is refused as a tool result.
	w.completed(k2, c2.TaskID)
	reply := w.reply(k2, c2.TaskID)
	if !strings.Contains(reply, `"code":"depth_exceeded"`) {
		t.Fatalf("spawn_agent at the cap: %q", reply)
	}
	var results []rein.ToolResultPayload
	for _, e := range w.all(k2) {
		if e.Type == rein.EventToolResult {
			var p rein.ToolResultPayload
			_ = e.DecodePayload(&p)
			results = append(results, p)
		}
	}
	if len(results) != 1 || !results[0].IsError {
		t.Fatalf("tool results %+v", results)
	}
	if _, err := w.m.StartContinuable(ctx, k2, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "level three"}}); code(err) != subagent.CodeDepthExceeded {
		t.Fatalf("StartContinuable at depth 3: %v", err)
	}
	if _, err := w.m.Start(ctx, k2, subagent.StartRequest{Prompt: "level three"}); code(err) != subagent.CodeDepthExceeded {
		t.Fatalf("Start at depth 3: %v", err)
	}
	if kids, err := w.svc.Children().List(ctx, k2); err != nil || len(kids) != 0 {
		t.Fatalf("children made beyond the cap: %d, %v", len(kids), err)
	}
}

// subagent.completed's output is the activation's final reply, an
// interrupted one included; null for a cancelled activation.
func TestSettlementOutputOfStoppedActivations(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	for _, mode := range []rein.StopMode{rein.StopInterrupt, rein.StopCancel} {
		s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold " + string(mode)}})
		child := key("alice", s.ChildID)
		w.blocked(child, s.TaskID)
		run := s.TaskID
		if res, err := w.svc.Interrupt(ctx, child, sessions.InterruptRequest{RunID: &run, Mode: mode}); err != nil || !res.Accepted {
			t.Fatalf("%s: %+v, %v", mode, res, err)
		}
		end := w.completed(child, s.TaskID)
		p := w.settled(parent, s.TaskID)
		if p.Status != end.Status || p.Reason != end.Reason {
			t.Fatalf("%s: subagent.completed %+v, the run ended %+v", mode, p, end)
		}
		reply := w.reply(child, s.TaskID)
		switch mode {
		case rein.StopInterrupt:
			if end.Reason != rein.ReasonInterrupted || reply == "" || p.Output == nil || *p.Output != reply {
				t.Fatalf("interrupted: end %+v, reply %q, output %v", end, reply, p.Output)
			}
		case rein.StopCancel:
			if end.Status != rein.StatusCancelled || p.Output != nil {
				t.Fatalf("cancelled: end %+v, output %v", end, p.Output)
			}
		}
	}
	// The payload writes output as null, never omits it.
	for _, e := range w.all(parent) {
		if e.Type == rein.EventSubagentCompleted && strings.Contains(string(e.Payload), `"reason":"cancelled"`) &&
			!strings.Contains(string(e.Payload), `"output":null`) {
			t.Fatalf("subagent.completed of a cancelled activation: %s", e.Payload)
		}
	}
}

// A notice that arrives while the parent's final model request is in
// flight is not left behind: the parent's run makes one more step that
// carries it (docs/api.md final-step rule, §7).
func TestNoticeDuringParentsFinalStep(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	parent := w.root("alice")
	pr := w.send(parent, "slow parent")
	defer dump(t, w, parent)
	// The final (only) step is streaming: about a second of it is left.
	w.waitEvent(parent, "the parent's first delta", isType(rein.EventMessageDelta, pr.RunID))
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "quick job"}})
	w.settled(parent, s.TaskID)
	if p := w.completed(parent, pr.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	reply := w.reply(parent, pr.RunID)
	if !strings.HasPrefix(reply, "slow step 2 hints=[Subagent ") || !strings.Contains(reply, s.TaskID) {
		t.Fatalf("the parent's final reply %q: the notice was left behind", reply)
	}
	cons := ofType[rein.SupplementConsumedPayload](t, w.all(parent), rein.EventSupplementConsumed)
	if len(cons) != 1 || cons[0].RunID != pr.RunID || cons[0].Step != 2 {
		t.Fatalf("agent.supplement_consumed %+v", cons)
	}
}

// A followup to a child whose activation was running when its service
// crashed steers that activation (RUNNING in the store) from the new
// service; the activation, resumed there, carries it into its next step.
func TestFollowupSteersAcrossCrash(t *testing.T) {
	base := openMemory(t)
	k := storetest.NewFaulty(base)
	hold := newHold()
	first := newWorld(t, k, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "first" })
	parent := first.root("alice")
	s := first.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold across"}})
	child := key("alice", s.ChildID)
	first.blocked(child, s.TaskID)
	k.Kill()
	first.svc.Close()

	second := newWorld(t, base, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "second" })
	defer dump(t, second, child)
	r := second.followup(parent, s.ChildID, "note after the crash")
	if r.Route != subagent.RouteSteered || r.TaskID != s.TaskID {
		t.Fatalf("Followup = %+v, want steered into %s", r, s.TaskID)
	}
	if p := second.completed(child, s.TaskID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("resumed activation %+v", p)
	}
	if got := second.reply(child, s.TaskID); got != "held hold across hints=[note after the crash] turns=1" {
		t.Fatalf("resumed activation's reply %q", got)
	}
	if p := second.settled(parent, s.TaskID); p.Status != rein.StatusCompleted {
		t.Fatalf("%+v", p)
	}
}

// A service that is shutting down admits no new activation: draining.
func TestDrainingRefusesActivations(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	parent := w.root("alice")
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "first"}})
	w.completed(key("alice", s.ChildID), s.TaskID)
	w.settled(parent, s.TaskID)
	w.svc.Close()
	if _, err := w.m.StartContinuable(ctx, parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "x"}}); code(err) != subagent.CodeDraining {
		t.Fatalf("StartContinuable while draining: %v", err)
	}
	if _, err := w.m.Start(ctx, parent, subagent.StartRequest{Prompt: "x"}); code(err) != subagent.CodeDraining {
		t.Fatalf("Start while draining: %v", err)
	}
	if _, err := w.m.Followup(ctx, parent, s.ChildID, "x", subagent.FollowupOptions{}); code(err) != subagent.CodeDraining {
		t.Fatalf("Followup while draining: %v", err)
	}
	if n := len(w.runs(key("alice", s.ChildID))); n != 1 {
		t.Fatalf("%d runs", n)
	}
}

// A drain interrupts the deepest activations first and waits for them
// before the level above: when a parent's run is stopped, its running
// child's activation has already ended (its interrupted end recorded),
// and the child stays resumable.
func TestDrainStopsChildrenFirst(t *testing.T) {
	hold := newHold()
	w := newWorld(t, openMemory(t), subagent.Options{}, hold)
	ctx := context.Background()
	parent := w.root("alice")
	p := w.send(parent, "hold parent")
	w.waitEvent(parent, "the parent holding", func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == p.RunID })
	s := w.startChild(parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "hold child"}})
	child := key("alice", s.ChildID)
	w.waitEvent(child, "the child holding", func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == s.TaskID })
	// Inside the tool, not only logged as calling it: a stop that came
	// before the parent's call began would never reach onStop.
	hold.entered(t, p.RunID)
	hold.entered(t, s.TaskID)

	var mu sync.Mutex
	var childAtParentStop rein.RunStatus
	hold.mu.Lock()
	hold.onStop = func(c tool.Call) {
		if c.RunID != p.RunID {
			return
		}
		rec, err := w.st.GetRun(ctx, child, s.TaskID)
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			childAtParentStop = rec.Status
		}
	}
	hold.mu.Unlock()
	if err := w.svc.Drain(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := childAtParentStop
	mu.Unlock()
	if !got.Terminal() {
		t.Fatalf("the parent's run was stopped while its child's activation was %q, want it ended first", got)
	}
	rec, err := w.st.GetRun(ctx, child, s.TaskID)
	if err != nil || rec.Status != rein.StatusCompleted || rec.Reason != rein.ReasonInterrupted {
		t.Fatalf("the child's activation ended %+v %v, want COMPLETED/interrupted", rec, err)
	}
}

// A child whose activation a drain interrupted is resumable after the
// restart: its parent's notice of the interrupted activation arrives once,
// and a followup starts a new activation with the child's whole
// transcript.
func TestDrainedChildResumesAfterRestart(t *testing.T) {
	onBackends(t, testDrainedChildResumesAfterRestart)
}

func testDrainedChildResumesAfterRestart(t *testing.T, open opener) {
	base := open(t)
	hold := newHold()
	first := newWorld(t, base, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "first" })
	parent := first.root("alice")
	s := first.startChild(parent, subagent.ContinuableSpec{ChildID: "kid-drained", StartRequest: subagent.StartRequest{Prompt: "hold child"}})
	child := key("alice", s.ChildID)
	first.blocked(child, s.TaskID)
	if err := first.svc.Drain(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rec, err := base.GetRun(context.Background(), child, s.TaskID)
	if err != nil || rec.Status != rein.StatusCompleted || rec.Reason != rein.ReasonInterrupted {
		t.Fatalf("the drained activation: %+v %v, want COMPLETED/interrupted", rec, err)
	}

	second := newWorld(t, base, subagent.Options{}, hold, func(c *sessions.Config) { c.Instance = "second" })
	defer dump(t, second, child, parent)
	if p := second.settled(parent, s.TaskID); p.Status != rein.StatusCompleted {
		t.Fatalf("the notice of the drained activation: %+v", p)
	}
	second.resumesWithTranscript(parent, s.ChildID, "again")
	n := 0
	for _, e := range second.all(parent) {
		var p rein.SubagentCompletedPayload
		if e.Type == rein.EventSubagentCompleted && e.DecodePayload(&p) == nil && p.TaskID == s.TaskID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the drained activation's subagent.completed is in the parent's log %d times, want once", n)
	}
}
