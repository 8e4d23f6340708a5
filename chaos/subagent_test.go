package chaos

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
)

// The scenario of this file is about docs/api.md "Subagents": a child is a
// session and an activation is a run of it, so a background child's
// activation survives a kill -9 like any run — it is resumed on the
// restarted server — and its settlement in the parent (subagent.completed
// and the notice) happens exactly once. Its model is testdata/subagent.yaml.

const (
	// childPrompt is the spawn prompt of the "subagent spawn" rule: it
	// starts the child's slow first activation.
	childPrompt = "subagent child: the slow work"
	// childText is that activation's reply (one step, 40 deltas).
	childText = childPrompt + " done: alpha beta gamma delta epsilon zeta eta theta iota " +
		"kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega (turns 1)"
	// followupContent is what the "subagent send" rule sends the child.
	followupContent = "subagent followup: carry on"
	// followupText is the reply of the activation it starts: the child's
	// transcript has the first activation's turn and this one.
	followupText = followupContent + ", resumed (turns 2)"
)

// subagentScript is testdata/subagent.yaml.
func subagentScript(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "subagent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSubagentSurvivesKill kills `rein serve` while a background child's
// activation streams, restarts it on the same store and checks that the
// activation (the same run, its task_id) is resumed and completes once,
// that the parent's log gets exactly one subagent.completed for it, and
// that its notice reaches the parent's next run exactly once. Then the
// parent continues the child with send_message: a new activation is
// started and resumes the child's whole transcript.
func TestSubagentSurvivesKill(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			opts := serveOptions{args: []string{"--model", "scripted:" + subagentScript(t)}}
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, opts)
			parent := newSession(t, p1)
			// Each test's store is its own, but a chosen id is a session
			// id: keep it unique anyway.
			childID := fmt.Sprintf("kid-%s-%d", b.name, time.Now().UnixNano())

			// The parent's run spawns the child in the background and ends
			// at once.
			spawnRun := send(t, p1, parent, "subagent spawn "+childID)
			plog := waitRunEnd(ctxFor(t, runTimeout), t, p1, parent, spawnRun)
			checkLog(t, plog)
			run := runEvents(plog, spawnRun)
			checkCompletedOnce(t, run, spawnRun)
			spawn := subagentCallResult(t, run, "spawn_agent")
			if spawn.IsError {
				t.Fatalf("spawn_agent failed: %s\n%s", spawn.Output, dump(plog))
			}
			var spawned struct {
				SubagentID string `json:"subagent_id"`
				TaskID     string `json:"task_id"`
				MessageID  string `json:"message_id"`
			}
			if err := json.Unmarshal([]byte(spawn.Output), &spawned); err != nil {
				t.Fatalf("spawn_agent result %q: %v", spawn.Output, err)
			}
			if spawned.SubagentID != childID || !strings.HasPrefix(spawned.TaskID, "run_") || spawned.MessageID == "" {
				t.Fatalf("spawn_agent result %s, want subagent_id %q, a task_id and a message_id\n%s", spawn.Output, childID, dump(plog))
			}
			taskID := spawned.TaskID
			if want := "spawned: " + spawn.Output; finalMessage(t, run, spawnRun).Text != want {
				t.Errorf("the spawning run's reply = %q, want %q", finalMessage(t, run, spawnRun).Text, want)
			}
			cs, err := p1.client.GetSession(ctxFor(t, callTimeout), childID)
			if err != nil {
				t.Fatalf("%s: get the child session %s: %v", p1.name, childID, err)
			}
			if cs.ParentSessionID != parent {
				t.Errorf("the child session's parent_session_id = %q, want %q", cs.ParentSessionID, parent)
			}

			// Read the child's log until its activation has streamed a few
			// deltas, then kill -9 in the middle of the model request.
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, childID, func(evs []rein.Event) bool {
				return len(deltas(evs, taskID, 1)) >= cutAfterDeltas
			})
			if ev := find(seen, rein.EventMessage, taskID); ev != nil {
				t.Fatalf("the child's activation finished before the kill (seq %d): the scenario did not cut it\n%s", ev.Seq, dump(seen))
			}
			if um := find(seen, rein.EventUserMessage, taskID); um == nil || um.ID != spawned.MessageID {
				t.Errorf("spawn_agent's message_id %q is not the id of the activation's user.message (%v)\n%s", spawned.MessageID, um, dump(seen))
			}
			p1.kill()
			t.Logf("killed %s after reading %d events of child %s (last seq %d)", p1.name, len(seen), childID, seen[len(seen)-1].Seq)

			// The restarted server resumes the activation: the same run,
			// its cut step made again, completed once.
			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, opts)
			clog := waitRunEnd(ctxFor(t, runTimeout), t, p2, childID, taskID)
			checkLog(t, clog)
			checkKept(t, seen, clog)
			crun := runEvents(clog, taskID)
			checkCompletedOnce(t, crun, taskID)
			restart := checkRestartedOnce(t, crun, taskID, clog)
			if got := finalMessage(t, crun, taskID).Text; got != childText {
				t.Errorf("the child's reply = %q, want %q\n%s", got, childText, dump(clog))
			}
			var after strings.Builder
			for _, ev := range deltas(crun, taskID, 1) {
				if ev.Seq > restart.Seq {
					var d rein.MessageDeltaPayload
					decode(t, ev, &d)
					after.WriteString(d.Text)
				}
			}
			if after.String() != childText {
				t.Errorf("the child's deltas after agent.step_restarted concatenate to %q, want %q\n%s", after.String(), childText, dump(clog))
			}
			if n := len(all(clog, rein.EventRunStarted)); n != 1 {
				t.Errorf("the child's log has %d session.run_started, want 1: the resumed activation is not the same run\n%s", n, dump(clog))
			}
			checkRun(t, p2, childID, taskID, rein.StatusCompleted, rein.ReasonStop)

			// The settlement: subagent.completed in the parent's log (it is
			// written with the notice, in one transaction).
			readUntil(ctxFor(t, runTimeout), t, p2, parent, func(evs []rein.Event) bool {
				return len(subagentCompletedOf(t, evs, taskID)) > 0
			})
			plog = listParent(t, p2, parent)
			done := subagentCompletedOf(t, plog, taskID)
			if len(done) != 1 {
				t.Fatalf("want exactly one subagent.completed for task %s in the parent's log, got %d\n%s", taskID, len(done), dump(plog))
			}
			if sc := done[0]; sc.ChildID != childID || sc.Status != rein.StatusCompleted || sc.Reason != rein.ReasonStop || sc.Output == nil || *sc.Output != childText {
				t.Errorf("subagent.completed = child %s %s/%s output %s, want child %s COMPLETED/stop with output %q\n%s", sc.ChildID, sc.Status, sc.Reason, strPtr(sc.Output), childID, childText, dump(plog))
			}

			// The notice reaches the parent's next run, once.
			noticeID := "ntc_" + strings.TrimPrefix(taskID, "run_")
			collectRun := send(t, p2, parent, "subagent collect")
			plog = waitRunEnd(ctxFor(t, runTimeout), t, p2, parent, collectRun)
			checkLog(t, plog)
			run = runEvents(plog, collectRun)
			checkCompletedOnce(t, run, collectRun)
			reply := finalMessage(t, run, collectRun).Text
			if !strings.HasPrefix(reply, "collected hints=[") || !strings.Contains(reply, childText) || !strings.Contains(reply, taskID) {
				t.Errorf("the collecting run's reply = %q, want its hints to carry the notice of task %s with the child's reply %q\n%s", reply, taskID, childText, dump(plog))
			}
			if n := strings.Count(reply, childText); n != 1 {
				t.Errorf("the collecting run's reply carries the child's reply %d times, want once: %q", n, reply)
			}
			consumed := consumedOf(t, plog, noticeID)
			if len(consumed) != 1 {
				t.Fatalf("want exactly one agent.supplement_consumed of the notice %s, got %d\n%s", noticeID, len(consumed), dump(plog))
			}
			if consumed[0] != (rein.SupplementConsumedPayload{SupplementID: noticeID, RunID: collectRun, Step: 1}) {
				t.Errorf("agent.supplement_consumed = %+v, want notice %s in run %s step 1\n%s", consumed[0], noticeID, collectRun, dump(plog))
			}

			// A followup after the kill: the child is idle, so
			// send_message starts a new activation that resumes its
			// transcript.
			sendRun := send(t, p2, parent, "subagent send "+childID)
			plog = waitRunEnd(ctxFor(t, runTimeout), t, p2, parent, sendRun)
			checkLog(t, plog)
			run = runEvents(plog, sendRun)
			checkCompletedOnce(t, run, sendRun)
			sent := subagentCallResult(t, run, "send_message")
			var followed struct {
				MessageID string `json:"message_id"`
				Route     string `json:"route"`
				TaskID    string `json:"task_id"`
			}
			if err := json.Unmarshal([]byte(sent.Output), &followed); err != nil {
				t.Fatalf("send_message result %q: %v\n%s", sent.Output, err, dump(plog))
			}
			if sent.IsError || followed.Route != "started" || !strings.HasPrefix(followed.TaskID, "run_") || followed.TaskID == taskID || followed.MessageID == "" {
				t.Fatalf("send_message result %s (is_error %v), want route \"started\" with a new task_id and a message_id\n%s", sent.Output, sent.IsError, dump(plog))
			}
			if want := "sent: " + sent.Output; finalMessage(t, run, sendRun).Text != want {
				t.Errorf("the sending run's reply = %q, want %q", finalMessage(t, run, sendRun).Text, want)
			}
			followTask := followed.TaskID
			clog = waitRunEnd(ctxFor(t, runTimeout), t, p2, childID, followTask)
			checkLog(t, clog)
			frun := runEvents(clog, followTask)
			checkCompletedOnce(t, frun, followTask)
			if got := finalMessage(t, frun, followTask).Text; got != followupText {
				t.Errorf("the followup activation's reply = %q, want %q: it did not resume the child's transcript\n%s", got, followupText, dump(clog))
			}
			um := find(frun, rein.EventUserMessage, followTask)
			if um == nil || um.ID != followed.MessageID {
				t.Errorf("send_message's message_id %q is not the id of the followup activation's user.message (%v)\n%s", followed.MessageID, um, dump(clog))
			} else {
				var p rein.UserMessagePayload
				decode(t, *um, &p)
				if p.Text != followupContent {
					t.Errorf("the followup activation's user.message text = %q, want %q", p.Text, followupContent)
				}
			}
			if rs := all(frun, rein.EventStepRestarted); len(rs) != 0 {
				t.Errorf("the followup activation has %d agent.step_restarted, want none\n%s", len(rs), dump(clog))
			}
			if n := len(all(runEvents(clog, taskID), rein.EventRunCompleted)); n != 1 {
				t.Errorf("the first activation %s has %d session.run_completed after the followup, want 1\n%s", taskID, n, dump(clog))
			}
			checkRun(t, p2, childID, followTask, rein.StatusCompleted, rein.ReasonStop)

			// Once the followup activation is settled too, the parent's log
			// has exactly one start and one settlement of each activation,
			// and the first notice was consumed once.
			readUntil(ctxFor(t, runTimeout), t, p2, parent, func(evs []rein.Event) bool {
				return len(subagentCompletedOf(t, evs, followTask)) > 0
			})
			plog = listParent(t, p2, parent)
			checkLog(t, plog)
			for _, task := range []string{taskID, followTask} {
				if n := len(subagentStartedOf(t, plog, task)); n != 1 {
					t.Errorf("want exactly one subagent.started for task %s in the parent's log, got %d\n%s", task, n, dump(plog))
				}
				if n := len(subagentCompletedOf(t, plog, task)); n != 1 {
					t.Errorf("want exactly one subagent.completed for task %s in the parent's log, got %d\n%s", task, n, dump(plog))
				}
			}
			if n := len(consumedOf(t, plog, noticeID)); n != 1 {
				t.Errorf("at the end, the notice %s was consumed %d times, want once\n%s", noticeID, n, dump(plog))
			}
			// subagent.completed is the notice's record: it is not also
			// logged as user.supplement.
			for _, ev := range all(plog, rein.EventUserSupplement) {
				var p rein.SupplementPayload
				decode(t, ev, &p)
				if p.SupplementID == noticeID {
					t.Errorf("the notice %s is also logged as user.supplement (seq %d)\n%s", noticeID, ev.Seq, dump(plog))
				}
			}
		})
	}
}

// subagentCallResult is the result of run's one call of the tool name.
func subagentCallResult(t *testing.T, run []rein.Event, name string) rein.ToolResultPayload {
	t.Helper()
	uses := payloadsOf(t, run, rein.EventToolUse, func(u rein.ToolUsePayload) bool { return u.Name == name })
	if len(uses) != 1 {
		t.Fatalf("want exactly one %s call, got %d\n%s", name, len(uses), dump(run))
	}
	return resultOf(t, run, uses[0].ToolUseID)
}

// payloadsOf are the payloads of the events of typ that keep accepts.
func payloadsOf[T any](t *testing.T, evs []rein.Event, typ rein.EventType, keep func(T) bool) []T {
	t.Helper()
	var out []T
	for _, ev := range all(evs, typ) {
		var p T
		decode(t, ev, &p)
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// subagentStartedOf are the subagent.started payloads of task in a
// parent's log.
func subagentStartedOf(t *testing.T, evs []rein.Event, task string) []rein.SubagentStartedPayload {
	return payloadsOf(t, evs, rein.EventSubagentStarted, func(p rein.SubagentStartedPayload) bool { return p.TaskID == task })
}

// subagentCompletedOf are the subagent.completed payloads of task in a
// parent's log.
func subagentCompletedOf(t *testing.T, evs []rein.Event, task string) []rein.SubagentCompletedPayload {
	return payloadsOf(t, evs, rein.EventSubagentCompleted, func(p rein.SubagentCompletedPayload) bool { return p.TaskID == task })
}

// consumedOf are the agent.supplement_consumed payloads of supplement id.
func consumedOf(t *testing.T, evs []rein.Event, id string) []rein.SupplementConsumedPayload {
	return payloadsOf(t, evs, rein.EventSupplementConsumed, func(p rein.SupplementConsumedPayload) bool { return p.SupplementID == id })
}

// listParent reads the parent's whole log.
func listParent(t *testing.T, p *proc, sid string) []rein.Event {
	t.Helper()
	log, err := listAll(ctxFor(t, callTimeout), p, sid)
	if err != nil {
		t.Fatalf("%s: list the events of %s: %v\n%s", p.name, sid, err, dump(log))
	}
	return log
}
