package subagent_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/subagent"
)

// A cancel at the root stops every descendant: root → mid (background) →
// low (foreground, one-shot) → leaf (background), each blocked.
func TestCancelAtRootStopsTheTree(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	ctx := context.Background()
	root := w.root("alice")
	rr := w.send(root, "tree root")
	mid := w.started(root, "")
	midKey := key("alice", mid.ChildID)
	low := w.started(midKey, "")
	lowKey := key("alice", low.ChildID)
	leaf := w.started(lowKey, "")
	leafKey := key("alice", leaf.ChildID)
	defer dump(t, w, root, midKey, lowKey, leafKey)
	w.blocked(root, rr.RunID)
	w.blocked(lowKey, low.TaskID)
	w.blocked(leafKey, leaf.TaskID)
	for _, k := range []rein.SessionKey{midKey, lowKey, leafKey} {
		info, err := w.svc.GetSession(ctx, k)
		if err != nil || !info.Busy {
			t.Fatalf("%s not running before the cancel: %+v, %v", k.ID, info, err)
		}
	}
	if info, _ := w.svc.GetSession(ctx, leafKey); info.Subagent.Depth != 3 {
		t.Fatalf("the leaf's depth %d, want 3", info.Subagent.Depth)
	}
	runID := rr.RunID
	res, err := w.svc.Interrupt(ctx, root, sessions.InterruptRequest{RunID: &runID, Mode: rein.StopCancel})
	if err != nil || !res.Accepted {
		t.Fatalf("cancel the root run: %+v, %v", res, err)
	}
	for _, r := range []struct {
		key rein.SessionKey
		run string
	}{{root, rr.RunID}, {midKey, mid.TaskID}, {lowKey, low.TaskID}, {leafKey, leaf.TaskID}} {
		if p := w.completed(r.key, r.run); p.Status != rein.StatusCancelled {
			t.Errorf("%s's run %s ended %+v, want CANCELLED", r.key.ID, r.run, p)
		}
	}
}

// toolCall is one tool call of a run and its result, from the log.
type toolCall struct {
	name   string
	input  json.RawMessage
	output string
	isErr  bool
}

func toolCalls(t *testing.T, evs []rein.Event, runID string) []toolCall {
	t.Helper()
	var out []toolCall
	idx := map[string]int{}
	for _, e := range evs {
		if e.RunID != runID {
			continue
		}
		switch e.Type {
		case rein.EventToolUse:
			var p rein.ToolUsePayload
			_ = e.DecodePayload(&p)
			idx[p.ToolUseID] = len(out)
			out = append(out, toolCall{name: p.Name, input: p.Input})
		case rein.EventToolResult:
			var p rein.ToolResultPayload
			_ = e.DecodePayload(&p)
			i, ok := idx[p.ToolUseID]
			if !ok {
				t.Fatalf("a result for unknown call %s", p.ToolUseID)
			}
			out[i].output, out[i].isErr = p.Output, p.IsError
		}
	}
	return out
}

// decode parses a tool result's JSON and checks its keys are exactly keys.
func decode(t *testing.T, what, out string, keys ...string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s: result %q is not a JSON object: %v", what, out, err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(keys)
	if !reflect.DeepEqual(got, keys) {
		t.Fatalf("%s: result %s has keys %v, want %v", what, out, got, keys)
	}
	return m
}

// The model-facing tools end to end, through the scripted model: a root
// run spawns a background child with a chosen id, lists it, sends it a
// message, interrupts it, and sends to an unknown id.
func TestModelFacingTools(t *testing.T) {
	w := newWorld(t, openMemory(t), subagent.Options{}, nil)
	root := w.root("alice")
	rr := w.send(root, "tools")
	child := key("alice", "kid-1")
	defer dump(t, w, root, child)
	if p := w.completed(root, rr.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("root run %+v", p)
	}
	calls := toolCalls(t, w.all(root), rr.RunID)
	names := []string{}
	for _, c := range calls {
		names = append(names, c.name)
	}
	if strings.Join(names, ",") != "spawn_agent,list_agents,send_message,interrupt_agent,send_message" {
		t.Fatalf("tool calls %v", names)
	}
	for _, c := range calls[:4] {
		if c.isErr {
			t.Fatalf("%s failed: %s", c.name, c.output)
		}
	}
	var task, firstMsg string
	for _, e := range w.all(child) {
		if e.Type == rein.EventUserMessage && task == "" {
			task, firstMsg = e.RunID, e.ID
		}
	}
	spawn := decode(t, "spawn_agent", calls[0].output, "subagent_id", "task_id", "message_id")
	if spawn["subagent_id"] != "kid-1" || spawn["task_id"] != task || spawn["message_id"] != firstMsg {
		t.Fatalf("spawn_agent %v; the child's first activation is %s started by %s", spawn, task, firstMsg)
	}
	list := decode(t, "list_agents", calls[1].output, "agents")
	agents, _ := list["agents"].([]any)
	if len(agents) != 1 {
		t.Fatalf("list_agents %s", calls[1].output)
	}
	a, _ := agents[0].(map[string]any)
	b, _ := json.Marshal(a)
	a = decode(t, "list_agents entry", string(b), "subagent_id", "label", "state", "parent_session_id")
	if a["subagent_id"] != "kid-1" || a["label"] != "helper" || a["state"] != "running" || a["parent_session_id"] != root.ID {
		t.Fatalf("list_agents entry %v", a)
	}
	send := decode(t, "send_message", calls[2].output, "message_id", "route", "task_id")
	sups := ofType[rein.SupplementPayload](t, w.all(child), rein.EventUserSupplement)
	if send["route"] != "steered" || send["task_id"] != task || len(sups) != 1 || send["message_id"] != sups[0].SupplementID ||
		sups[0].Source != "parent" || sups[0].Text != "more work" {
		t.Fatalf("send_message %v; the child's supplements %+v", send, sups)
	}
	intr := decode(t, "interrupt_agent", calls[3].output, "accepted")
	if intr["accepted"] != true {
		t.Fatalf("interrupt_agent %v", intr)
	}
	if p := w.completed(child, task); p.Status != rein.StatusCancelled {
		t.Fatalf("the interrupted child's run %+v", p)
	}
	// The error case: an error tool result, the run goes on.
	bad := calls[4]
	e := decode(t, "send_message to nobody", bad.output, "error")
	em, _ := e["error"].(map[string]any)
	b, _ = json.Marshal(em)
	em = decode(t, "send_message to nobody: error", string(b), "code", "message")
	if !bad.isErr || em["code"] != subagent.CodeNotResumable || em["message"] == "" {
		t.Fatalf("send_message to an unknown id: is_error=%v %s", bad.isErr, bad.output)
	}
	// Tool results reach the model as that JSON text.
	if got, want := w.reply(root, rr.RunID), "tools done: "+bad.output; got != want {
		t.Fatalf("final reply %q, want %q", got, want)
	}
	w.settled(root, task)
}
