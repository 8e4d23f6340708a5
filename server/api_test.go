package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

func TestSessions(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	empty := s.must(200, "GET", "/api/sessions", "", nil)
	if got := string(mustJSON(t, empty["sessions"])); got != "[]" {
		t.Fatalf("no sessions: %s, want []", got)
	}

	created := s.must(201, "POST", "/api/sessions", "", map[string]any{"metadata": map[string]any{"title": "first"}, "system": "be brief"})
	id, _ := created["id"].(string)
	if !strings.HasPrefix(id, "ses_") {
		t.Fatalf("session id %q", id)
	}
	if md, _ := created["metadata"].(map[string]any); md["title"] != "first" {
		t.Fatalf("metadata %v", created["metadata"])
	}
	checkTime(t, created["created_at"])

	// A body-less POST is {}.
	second := s.must(201, "POST", "/api/sessions", "", nil)
	if md := string(mustJSON(t, second["metadata"])); md != "{}" {
		t.Fatalf("default metadata %s", md)
	}

	list := s.must(200, "GET", "/api/sessions", "", nil)["sessions"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["id"] != second["id"] || list[1].(map[string]any)["id"] != id {
		t.Fatalf("sessions not newest first: %v", list)
	}
	for _, x := range list {
		if v, ok := x.(map[string]any)["parent_session_id"]; !ok || v != nil {
			t.Fatalf("root session's parent_session_id must be null: %v", x)
		}
	}

	got := s.must(200, "GET", "/api/sessions/"+id, "", nil)
	want := map[string]any{"state": "idle", "current_run_id": nil, "last_seq": float64(0), "parent_session_id": nil}
	for k, v := range want {
		if gv, ok := got[k]; !ok || gv != v {
			t.Fatalf("GET session: %s = %v, want %v (%v)", k, gv, v, got)
		}
	}
	if q := string(mustJSON(t, got["queued_run_ids"])); q != "[]" {
		t.Fatalf("queued_run_ids %s, want []", q)
	}
	if runs := string(mustJSON(t, s.must(200, "GET", "/api/sessions/"+id+"/runs", "", nil)["runs"])); runs != "[]" {
		t.Fatalf("runs %s, want []", runs)
	}

	// The session-level system prompt reaches the model.
	run := s.send("", id, "system?", nil)["run_id"].(string)
	s.completion("", id, run)
	msg := s.waitEvent("", id, is(rein.EventMessage, run))
	if txt := payloadOf(t, msg)["text"]; txt != "system=[be brief]" {
		t.Fatalf("reply %q", txt)
	}

	for bad, param := range map[string]string{`{"metadata": []}`: "metadata", `{"metadata": "x"}`: "metadata", `{"system": 5}`: "system", `[1]`: "", `{`: ""} {
		r := s.do("POST", "/api/sessions", "", bad)
		if r.status != 400 || r.errorCode(t) != "invalid_argument" || r.errorParam(t) != param {
			t.Fatalf("POST /api/sessions %s: %d %s, want param %q", bad, r.status, r.body, param)
		}
	}
	if r := s.do("GET", "/api/sessions/ses_nope", "", nil); r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
}

func TestMessageLifecycle(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	res := s.send("", sid, "hello", nil)
	if res["status"] != "RUNNING" {
		t.Fatalf("first message: %v", res)
	}
	runID := res["run_id"].(string)
	if p := s.completion("", sid, runID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("completion %+v", p)
	}
	evs := s.events("", sid)
	checkLog(t, evs)
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
		if e.RunID != runID {
			t.Fatalf("%s has run_id %q, want %q", e.Type, e.RunID, runID)
		}
	}
	want := "user.message session.run_started agent.message.delta agent.model_request agent.message session.run_completed"
	if strings.Join(types, " ") != want {
		t.Fatalf("log %v, want %s", types, want)
	}
	if p := payloadOf(t, evs[0]); p["text"] != "hello" || p["run_id"] != runID {
		t.Fatalf("user.message payload %v", p)
	}
	if p := payloadOf(t, evs[4]); p["text"] != "echo: hello" || p["reason"] != "stop" {
		t.Fatalf("agent.message payload %v", p)
	}

	run := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+runID, "", nil)
	if run["status"] != "COMPLETED" || run["reason"] != "stop" || run["run_id"] != runID {
		t.Fatalf("run %v", run)
	}
	for _, k := range []string{"created_at", "started_at", "ended_at"} {
		checkTime(t, run[k])
	}
	runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "", nil)["runs"].([]any)
	if len(runs) != 1 || runs[0].(map[string]any)["run_id"] != runID {
		t.Fatalf("runs %v", runs)
	}
	sess := s.must(200, "GET", "/api/sessions/"+sid, "", nil)
	if sess["state"] != "idle" || sess["last_seq"] != float64(len(evs)) {
		t.Fatalf("session after the run: %v", sess)
	}
	if r := s.do("GET", "/api/sessions/"+sid+"/runs/run_nope", "", nil); r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("unknown run: %d %s", r.status, r.body)
	}
}

// TestStopQueuedRun: A running, B and C enqueued, stop B: only B ends
// (cancelled, without ever starting), A keeps running, C keeps its place
// and runs after A.
func TestStopQueuedRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	a := s.send("", sid, "long A", nil)["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, a))

	if r := s.post("", sid, ev("user.message", map[string]any{"text": "B"})); r.status != 409 || r.errorCode(t) != "session_busy" {
		t.Fatalf("reject while busy: %d %s", r.status, r.body)
	} else if e := r.json(t)["error"].(map[string]any); e["run_id"] != a {
		t.Fatalf("session_busy run_id %v, want %s", e["run_id"], a)
	} else if res := string(mustJSON(t, r.json(t)["results"])); res != "[]" {
		t.Fatalf("results of a batch failing at its first event: %s", res)
	}

	b := s.send("", sid, "B", map[string]any{"when_busy": "enqueue"})
	c := s.send("", sid, "C", map[string]any{"when_busy": "enqueue"})
	if b["status"] != "QUEUED" || c["status"] != "QUEUED" {
		t.Fatalf("enqueued: %v %v", b, c)
	}
	bID, cID := b["run_id"].(string), c["run_id"].(string)
	sess := s.must(200, "GET", "/api/sessions/"+sid, "", nil)
	if sess["state"] != "busy" || sess["current_run_id"] != a || fmt.Sprint(sess["queued_run_ids"]) != fmt.Sprint([]any{bID, cID}) {
		t.Fatalf("busy session: %v", sess)
	}

	res := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": bID}))[0]
	if res["accepted"] != true || res["run_id"] != bID {
		t.Fatalf("stop B: %v", res)
	}
	if p := s.completion("", sid, bID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("B: %+v", p)
	}
	sess = s.must(200, "GET", "/api/sessions/"+sid, "", nil)
	if sess["current_run_id"] != a || fmt.Sprint(sess["queued_run_ids"]) != fmt.Sprint([]any{cID}) {
		t.Fatalf("after stopping B: %v", sess)
	}
	if st := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+a, "", nil)["status"]; st != "RUNNING" {
		t.Fatalf("A is %v after stopping B", st)
	}

	// Stopping B again: not accepted, touches nothing.
	if res := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": bID}))[0]; res["accepted"] != false {
		t.Fatalf("second stop of B: %v", res)
	}
	s.results("", sid, ev("user.interrupt", map[string]any{"run_id": a}))
	if p := s.completion("", sid, cID); p.Status != rein.StatusCompleted {
		t.Fatalf("C: %+v", p)
	}
	evs := s.events("", sid)
	checkLog(t, evs)
	if _, err := find(evs, is(rein.EventRunStarted, bID)); err == nil {
		t.Fatal("B was cancelled while queued but has a session.run_started")
	}
	aEnd, _ := find(evs, is(rein.EventRunCompleted, a))
	cStart, _ := find(evs, is(rein.EventRunStarted, cID))
	if cStart.Seq < aEnd.Seq {
		t.Fatalf("C started (seq %d) before A completed (seq %d)", cStart.Seq, aEnd.Seq)
	}
	if q, _ := find(evs, is(rein.EventRunQueued, cID)); payloadOf(t, q)["position"] != float64(2) {
		t.Fatalf("C queued at %v, want position 2", payloadOf(t, q))
	}
}

// TestStaleAndRepeatedStops: a stop naming a finished run is not accepted
// and never reaches the session's current run; a second stop of the same
// run is not accepted either.
func TestStaleAndRepeatedStops(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	old := s.send("", sid, "quick", nil)["run_id"].(string)
	s.completion("", sid, old)
	cur := s.send("", sid, "long current", afterRun)["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, cur))

	if res := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": old, "mode": "interrupt"}))[0]; res["accepted"] != false || res["run_id"] != old {
		t.Fatalf("stale stop: %v", res)
	}
	if res := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": "run_unknown"}))[0]; res["accepted"] != false {
		t.Fatalf("unknown run: %v", res)
	}
	// A run of another session of the same owner is not this session's.
	other := s.createSession("")
	if res := s.results("", other, ev("user.interrupt", map[string]any{"run_id": cur}))[0]; res["accepted"] != false {
		t.Fatalf("stop through another session: %v", res)
	}
	if st := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+cur, "", nil)["status"]; st != "RUNNING" {
		t.Fatalf("the current run is %v after stale stops", st)
	}
	first := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": cur}))[0]
	second := s.results("", sid, ev("user.interrupt", map[string]any{"run_id": cur}))[0]
	if first["accepted"] != true || second["accepted"] != false {
		t.Fatalf("stop twice: %v then %v", first, second)
	}
	if p := s.completion("", sid, cur); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("stopped run: %+v", p)
	}
	evs := s.events("", sid)
	checkLog(t, evs)
	var stops []map[string]any
	for _, e := range evs {
		if e.Type == rein.EventUserInterrupt {
			stops = append(stops, payloadOf(t, e))
		}
	}
	if len(stops) != 4 || stops[0]["accepted"] != false || stops[0]["mode"] != "interrupt" || stops[2]["accepted"] != true || stops[2]["mode"] != "cancel" {
		t.Fatalf("user.interrupt events %v", stops)
	}
}

// TestInvalidRunID: run_id present but "", null or not a string is a 400
// naming the field, and nothing of the batch is applied.
func TestInvalidRunID(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	for _, bad := range []string{`""`, `null`, `5`, `{}`, `true`} {
		body := `{"events":[{"type":"user.message","payload":{"text":"hi"}},{"type":"user.interrupt","payload":{"run_id":` + bad + `}}]}`
		r := s.do("POST", "/api/sessions/"+sid+"/events", "", body)
		if r.status != 400 || r.errorCode(t) != "invalid_argument" || r.errorParam(t) != "events[1].payload.run_id" {
			t.Fatalf("run_id %s: %d %s", bad, r.status, r.body)
		}
	}
	if evs := s.events("", sid); len(evs) != 0 {
		t.Fatalf("an invalid batch applied %d events", len(evs))
	}
	if runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "", nil)["runs"].([]any); len(runs) != 0 {
		t.Fatalf("an invalid batch started %d runs", len(runs))
	}
}

// TestSessionLevelInterrupt: without run_id the session's current run is
// stopped, with the mode asked for; queued runs are untouched.
func TestSessionLevelInterrupt(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")

	// Nothing running: not accepted, run_id null.
	res := s.results("", sid, ev("user.interrupt", map[string]any{}))[0]
	if v, ok := res["run_id"]; res["accepted"] != false || !ok || v != nil {
		t.Fatalf("stop with nothing running: %v", res)
	}

	a := s.send("", sid, "long A", nil)["run_id"].(string)
	b := s.send("", sid, "B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, a))
	res = s.results("", sid, ev("user.interrupt", map[string]any{"mode": "interrupt", "message": "enough"}))[0]
	if res["accepted"] != true || res["run_id"] != a {
		t.Fatalf("session-level interrupt: %v", res)
	}
	if p := s.completion("", sid, a); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A: %+v", p)
	}
	if p := s.completion("", sid, b); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("queued B must run normally: %+v", p)
	}
	evs := s.events("", sid)
	checkLog(t, evs)
	stop, _ := find(evs, func(e rein.Event) bool { return e.Type == rein.EventUserInterrupt && e.RunID == a })
	if p := payloadOf(t, stop); p["message"] != "enough" || p["run_id"] != a || p["accepted"] != true || p["mode"] != "interrupt" {
		t.Fatalf("user.interrupt payload %v", p)
	}
	// The interrupted run answered; its dangling tool call got a result.
	if _, err := find(evs, is(rein.EventMessage, a)); err != nil {
		t.Fatal("interrupted run has no agent.message")
	}
	if r, err := find(evs, is(rein.EventToolResult, a)); err != nil || payloadOf(t, r)["is_error"] != true {
		t.Fatalf("the cut-short tool call has no error result: %v", err)
	}
	// The message is not user input: B saw one user turn only.
	if _, err := find(evs, func(e rein.Event) bool { return e.Type == rein.EventUserMessage && payloadOf(t, e)["text"] == "enough" }); err == nil {
		t.Fatal("the interrupt message was logged as a user.message")
	}
}

// TestWhenBusyInterrupt: the current run is interrupted and the new one
// runs next, ahead of runs already queued; of two, the newest runs first.
func TestWhenBusyInterrupt(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	a := s.send("", sid, "long A", nil)["run_id"].(string)
	b := s.send("", sid, "B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, a))
	c := s.send("", sid, "C", map[string]any{"when_busy": "interrupt"})
	if c["status"] != "QUEUED" {
		t.Fatalf("when_busy=interrupt answers %v, want QUEUED", c)
	}
	cID := c["run_id"].(string)
	if p := s.completion("", sid, a); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A: %+v", p)
	}
	s.completion("", sid, b)
	evs := s.events("", sid)
	checkLog(t, evs)
	cStart, err1 := find(evs, is(rein.EventRunStarted, cID))
	bStart, err2 := find(evs, is(rein.EventRunStarted, b))
	if err1 != nil || err2 != nil || cStart.Seq > bStart.Seq {
		t.Fatalf("C must start before B (C %d, B %d)", cStart.Seq, bStart.Seq)
	}
	if q, _ := find(evs, is(rein.EventRunQueued, cID)); payloadOf(t, q)["position"] != float64(1) {
		t.Fatalf("C queued at %v, want position 1", payloadOf(t, q))
	}
}

// TestWhenBusyRollback: the current run is cancelled at once and flagged
// rolled back; its events stay in the log but its turn is in no later
// model request; the new run runs next, ahead of runs already queued.
func TestWhenBusyRollback(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	a := s.send("", sid, "long A", nil)["run_id"].(string)
	b := s.send("", sid, "turns B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, a))
	c := s.send("", sid, "turns C", map[string]any{"when_busy": "rollback"})
	if c["status"] != "QUEUED" {
		t.Fatalf("when_busy=rollback answers %v, want QUEUED", c)
	}
	cID := c["run_id"].(string)
	if p := s.completion("", sid, a); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled || !p.RolledBack {
		t.Fatalf("A: %+v, want CANCELLED/cancelled rolled back", p)
	}
	s.completion("", sid, b)
	evs := s.events("", sid)
	checkLog(t, evs)
	aEnd, _ := find(evs, is(rein.EventRunCompleted, a))
	if payloadOf(t, aEnd)["rolled_back"] != true {
		t.Fatalf("A's run_completed: %s", aEnd.Payload)
	}
	if r, err := find(evs, is(rein.EventToolResult, a)); err != nil || payloadOf(t, r)["is_error"] != true || r.Seq > aEnd.Seq {
		t.Fatalf("A's cut tool call has no error result before its completion: %v", err)
	}
	if _, err := find(evs, is(rein.EventUserMessage, a)); err != nil {
		t.Fatal("A's user.message left the log")
	}
	cStart, err1 := find(evs, is(rein.EventRunStarted, cID))
	bStart, err2 := find(evs, is(rein.EventRunStarted, b))
	if err1 != nil || err2 != nil || cStart.Seq > bStart.Seq {
		t.Fatalf("C must start before B (C %d, B %d)", cStart.Seq, bStart.Seq)
	}
	// A's turn is gone: C's request has its own turn only, B's C's and B's.
	for id, want := range map[string]string{cID: "turns=[1]", b: "turns=[2]"} {
		m, err := find(evs, is(rein.EventMessage, id))
		if got, _ := payloadOf(t, m)["text"].(string); err != nil || got != want {
			t.Fatalf("run %s replied %q (%v), want %q", id, got, err, want)
		}
	}
	// Runs that were not stopped by a rollback carry no rolled_back.
	if bEnd, _ := find(evs, is(rein.EventRunCompleted, b)); payloadOf(t, bEnd)["rolled_back"] != nil {
		t.Fatalf("B's run_completed: %s", bEnd.Payload)
	}
}

func TestClientIDRepeat(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	first := s.send("", sid, "long first", map[string]any{"client_id": "k1"})
	again := s.send("", sid, "long first", map[string]any{"client_id": "k1"})
	if first["run_id"] != again["run_id"] || again["status"] != "RUNNING" {
		t.Fatalf("repeat: %v then %v", first, again)
	}
	runID := first["run_id"].(string)
	s.results("", sid, ev("user.interrupt", map[string]any{"run_id": runID}))
	s.completion("", sid, runID)
	// After the end: the same run and its final status, nothing started.
	late := s.send("", sid, "anything", map[string]any{"client_id": "k1", "when_busy": "reject"})
	if late["run_id"] != runID || late["status"] != "CANCELLED" {
		t.Fatalf("repeat after the end: %v", late)
	}
	if runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "", nil)["runs"].([]any); len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	// Keys are per session.
	other := s.createSession("")
	if o := s.send("", other, "x", map[string]any{"client_id": "k1"}); o["run_id"] == runID {
		t.Fatal("client_id leaked across sessions")
	}
}

func TestSupplement(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	res := s.results("", sid,
		ev("user.supplement", map[string]any{"text": "use metric units", "id": "sup-1"}),
		ev("user.supplement", map[string]any{"text": "use metric units", "id": "sup-1"}),
		ev("user.supplement", map[string]any{"text": "be kind"}),
	)
	if res[0]["supplement_id"] != "sup-1" || res[0]["status"] != "queued" || res[1]["supplement_id"] != "sup-1" {
		t.Fatalf("supplements: %v", res)
	}
	generated, _ := res[2]["supplement_id"].(string)
	if generated == "" || generated == "sup-1" {
		t.Fatalf("generated supplement id %q", generated)
	}
	run := s.send("", sid, "hint please", nil)["run_id"].(string)
	s.completion("", sid, run)
	evs := s.events("", sid)
	checkLog(t, evs)
	msg, _ := find(evs, is(rein.EventMessage, run))
	if txt := payloadOf(t, msg)["text"]; txt != "hints=[use metric units; be kind]" {
		t.Fatalf("reply %q", txt)
	}
	var logged, consumed int
	for _, e := range evs {
		switch e.Type {
		case rein.EventUserSupplement:
			logged++
			if e.RunID != "" || payloadOf(t, e)["source"] != "user" {
				t.Fatalf("user.supplement %s", mustJSON(t, e))
			}
		case rein.EventSupplementConsumed:
			consumed++
			if p := payloadOf(t, e); p["run_id"] != run || p["step"] != float64(1) {
				t.Fatalf("consumed %v", p)
			}
		}
	}
	if logged != 2 || consumed != 2 {
		t.Fatalf("%d supplements logged, %d consumed; want 2 and 2 (the repeat adds nothing)", logged, consumed)
	}
	if again := s.results("", sid, ev("user.supplement", map[string]any{"text": "use metric units", "id": "sup-1"}))[0]; again["status"] != "consumed" {
		t.Fatalf("repeat after consumption: %v", again)
	}
}

func TestToolConfirmation(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")

	run := s.send("", sid, "note buy milk", nil)["run_id"].(string)
	req := s.waitEvent("", sid, is(rein.EventToolConfirmationRequested, run))
	p := payloadOf(t, req)
	toolUse, _ := p["tool_use_id"].(string)
	if p["name"] != "write_note" || toolUse == "" {
		t.Fatalf("confirmation request %v", p)
	}
	res := s.results("", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": toolUse, "allow": true}))[0]
	if res["tool_use_id"] != toolUse || res["allow"] != true {
		t.Fatalf("confirm: %v", res)
	}
	s.completion("", sid, run)
	msg := s.waitEvent("", sid, is(rein.EventMessage, run))
	if txt := payloadOf(t, msg)["text"].(string); !strings.HasPrefix(txt, "note result: note saved") {
		t.Fatalf("reply %q", txt)
	}
	// Answered twice → conflict; unknown → not_found.
	if r := s.post("", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": toolUse, "allow": false})); r.status != 409 || r.errorCode(t) != "conflict" {
		t.Fatalf("second answer: %d %s", r.status, r.body)
	}
	if r := s.post("", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": "call_nope", "allow": true})); r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("unknown tool_use_id: %d %s", r.status, r.body)
	}

	// Deny with the camelCase alias: the model sees the message verbatim.
	run2 := s.send("", sid, "note second", afterRun)["run_id"].(string)
	req2 := s.waitEvent("", sid, is(rein.EventToolConfirmationRequested, run2))
	id2 := payloadOf(t, req2)["tool_use_id"].(string)
	s.results("", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": id2, "allow": false, "denyMessage": "not today"}))
	s.completion("", sid, run2)
	evs := s.events("", sid)
	checkLog(t, evs)
	msg2, _ := find(evs, is(rein.EventMessage, run2))
	if txt := payloadOf(t, msg2)["text"].(string); !strings.Contains(txt, "not today") {
		t.Fatalf("denied reply %q", txt)
	}
	conf, _ := find(evs, func(e rein.Event) bool {
		return e.Type == rein.EventUserToolConfirmation && e.RunID == run2
	})
	if p := payloadOf(t, conf); p["allow"] != false || p["deny_message"] != "not today" {
		t.Fatalf("user.tool_confirmation %v", p)
	}
}

func TestSystemMessage(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	res := s.results("", sid, ev("system.message", map[string]any{"text": "you are terse"}))
	if string(mustJSON(t, res[0])) != "{}" {
		t.Fatalf("system.message result %s", mustJSON(t, res[0]))
	}
	run := s.send("", sid, "system?", nil)["run_id"].(string)
	s.completion("", sid, run)
	msg := s.waitEvent("", sid, is(rein.EventMessage, run))
	if txt := payloadOf(t, msg)["text"]; txt != "system=[you are terse]" {
		t.Fatalf("reply %q", txt)
	}
	evs := s.events("", sid)
	if evs[0].Type != rein.EventSystemMessage || evs[0].RunID != "" || payloadOf(t, evs[0])["text"] != "you are terse" {
		t.Fatalf("first event %s", mustJSON(t, evs[0]))
	}
}

// TestBatchStopsAtFirstFailure: events before the failing one are applied
// and reported in "results"; the failing one decides the status; the rest
// are not applied.
func TestBatchStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	a := s.send("", sid, "long A", nil)["run_id"].(string)
	r := s.post("", sid,
		ev("user.supplement", map[string]any{"text": "first", "id": "s1"}),
		ev("user.message", map[string]any{"text": "rejected"}),
		ev("user.supplement", map[string]any{"text": "never", "id": "s2"}),
	)
	if r.status != 409 || r.errorCode(t) != "session_busy" {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	body := r.json(t)
	results, _ := body["results"].([]any)
	if len(results) != 1 || results[0].(map[string]any)["supplement_id"] != "s1" {
		t.Fatalf("results %v", body["results"])
	}
	if body["error"].(map[string]any)["run_id"] != a {
		t.Fatalf("session_busy names %v, want %s", body["error"], a)
	}
	for _, e := range s.events("", sid) {
		if e.Type == rein.EventUserSupplement && payloadOf(t, e)["supplement_id"] == "s2" {
			t.Fatal("an event after the failing one was applied")
		}
	}
	// A failure from the service names its field within the batch.
	r = s.post("", sid,
		ev("system.message", map[string]any{"text": ""}),
		ev("user.tool_confirmation", map[string]any{"tool_use_id": "call_x", "allow": true}),
	)
	if r.status != 404 || len(r.json(t)["results"].([]any)) != 1 {
		t.Fatalf("second batch: %d %s", r.status, r.body)
	}
}

// TestValidation: every malformed request gets the right 4xx with a JSON
// error naming the field, never a 500, and applies nothing.
func TestValidation(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	msg := func(p string) string { return `{"events":[{"type":"user.message","payload":` + p + `}]}` }
	many := `{"events":[` + strings.Repeat(`{"type":"system.message","payload":{"text":"x"}},`, 100) + `{"type":"system.message","payload":{"text":"x"}}]}`
	cases := []struct {
		name, body string
		status     int
		code       string
		param      string
	}{
		{"malformed JSON", `{"events": [`, 400, "invalid_argument", ""},
		{"not an object", `[1,2]`, 400, "invalid_argument", ""},
		{"empty body", ``, 400, "invalid_argument", ""},
		{"events missing", `{}`, 400, "invalid_argument", "events"},
		{"events null", `{"events": null}`, 400, "invalid_argument", "events"},
		{"events empty", `{"events": []}`, 400, "invalid_argument", "events"},
		{"events not an array", `{"events": {}}`, 400, "invalid_argument", "events"},
		{"101 events", many, 400, "invalid_argument", "events"},
		{"event not an object", `{"events":[5]}`, 400, "invalid_argument", "events[0]"},
		{"type missing", `{"events":[{"payload":{}}]}`, 400, "invalid_argument", "events[0].type"},
		{"unknown type", `{"events":[{"type":"agent.message","payload":{}}]}`, 400, "invalid_argument", "events[0].type"},
		{"payload not an object", `{"events":[{"type":"user.message","payload":"hi"}]}`, 400, "invalid_argument", "events[0].payload"},
		{"empty text", msg(`{"text":""}`), 400, "invalid_argument", "events[0].payload.text"},
		{"missing text", msg(`{}`), 400, "invalid_argument", "events[0].payload.text"},
		{"text not a string", msg(`{"text":5}`), 400, "invalid_argument", "events[0].payload.text"},
		{"bad when_busy", msg(`{"text":"x","when_busy":"later"}`), 400, "invalid_argument", "events[0].payload.when_busy"},
		{"timeout_s zero", msg(`{"text":"x","timeout_s":0}`), 400, "invalid_argument", "events[0].payload.timeout_s"},
		{"timeout_s negative", msg(`{"text":"x","timeout_s":-1}`), 400, "invalid_argument", "events[0].payload.timeout_s"},
		{"timeout_s string", msg(`{"text":"x","timeout_s":"5"}`), 400, "invalid_argument", "events[0].payload.timeout_s"},
		{"timeout_s huge", msg(`{"text":"x","timeout_s":1e300}`), 400, "invalid_argument", "events[0].payload.timeout_s"},
		{"client_id not a string", msg(`{"text":"x","client_id":7}`), 400, "invalid_argument", "events[0].payload.client_id"},
		{"bad mode", `{"events":[{"type":"user.interrupt","payload":{"mode":"kill"}}]}`, 400, "invalid_argument", "events[0].payload.mode"},
		{"message not a string", `{"events":[{"type":"user.interrupt","payload":{"message":1}}]}`, 400, "invalid_argument", "events[0].payload.message"},
		{"supplement empty", `{"events":[{"type":"user.supplement","payload":{"text":""}}]}`, 400, "invalid_argument", "events[0].payload.text"},
		{"supplement id not a string", `{"events":[{"type":"user.supplement","payload":{"text":"x","id":1}}]}`, 400, "invalid_argument", "events[0].payload.id"},
		{"allow missing", `{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c"}}]}`, 400, "invalid_argument", "events[0].payload.allow"},
		{"allow not a bool", `{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c","allow":"yes"}}]}`, 400, "invalid_argument", "events[0].payload.allow"},
		{"tool_use_id missing", `{"events":[{"type":"user.tool_confirmation","payload":{"allow":true}}]}`, 400, "invalid_argument", "events[0].payload.tool_use_id"},
		{"deny messages disagree", `{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c","allow":false,"deny_message":"a","denyMessage":"b"}}]}`, 400, "invalid_argument", "events[0].payload.denyMessage"},
		{"system text missing", `{"events":[{"type":"system.message","payload":{}}]}`, 400, "invalid_argument", "events[0].payload.text"},
		{"system text not a string", `{"events":[{"type":"system.message","payload":{"text":["x"]}}]}`, 400, "invalid_argument", "events[0].payload.text"},
		{"second event invalid", `{"events":[{"type":"system.message","payload":{"text":"ok"}},{"type":"user.message","payload":{"text":""}}]}`, 400, "invalid_argument", "events[1].payload.text"},
		{"over 1 MiB", `{"events":[{"type":"user.message","payload":{"text":"` + strings.Repeat("x", 1<<20) + `"}}]}`, 413, "payload_too_large", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do("POST", "/api/sessions/"+sid+"/events", "", c.body)
			if r.status != c.status || r.errorCode(t) != c.code || r.errorParam(t) != c.param {
				t.Fatalf("%d %s, want %d %s param %q", r.status, r.body, c.status, c.code, c.param)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
	if evs := s.events("", sid); len(evs) != 0 {
		t.Fatalf("invalid requests applied %d events", len(evs))
	}
	// An oversize body is refused even without a Content-Length.
	big := strings.NewReader(`{"events":[{"type":"user.message","payload":{"text":"` + strings.Repeat("y", 2<<20) + `"}}]}`)
	r := s.do("POST", "/api/sessions/"+sid+"/events", "", readerOnly{big})
	if r.status != 413 || r.errorCode(t) != "payload_too_large" {
		t.Fatalf("chunked oversize body: %d %s", r.status, r.body)
	}
	// Accepted variants: null optional fields, unknown keys, max batch.
	ok := s.do("POST", "/api/sessions/"+sid+"/events", "", `{"events":[{"type":"user.supplement","payload":{"text":"x","id":null,"future":1}}],"also":"ignored"}`)
	if ok.status != 200 {
		t.Fatalf("lenient batch: %d %s", ok.status, ok.body)
	}
	hundred := `{"events":[` + strings.TrimSuffix(strings.Repeat(`{"type":"system.message","payload":{"text":"x"}},`, 100), ",") + `]}`
	if r := s.do("POST", "/api/sessions/"+sid+"/events", "", hundred); r.status != 200 {
		t.Fatalf("100 events: %d %s", r.status, r.body)
	}
}

// readerOnly hides the length of a reader so the request is chunked.
type readerOnly struct{ r *strings.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }

func TestReadEvents(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	var batch []map[string]any
	for i := range 5 {
		batch = append(batch, ev("system.message", map[string]any{"text": fmt.Sprint(i)}))
	}
	s.results("", sid, batch...)
	page := s.must(200, "GET", "/api/sessions/"+sid+"/events?after=1&limit=2", "", nil)
	evs := page["events"].([]any)
	if len(evs) != 2 || evs[0].(map[string]any)["seq"] != float64(2) || page["last_seq"] != float64(5) {
		t.Fatalf("page %v", page)
	}
	e := evs[0].(map[string]any)
	for _, k := range []string{"seq", "id", "session_id", "run_id", "type", "payload", "created_at"} {
		if _, ok := e[k]; !ok {
			t.Fatalf("event JSON lacks %q: %v", k, e)
		}
	}
	if e["run_id"] != nil || e["session_id"] != sid {
		t.Fatalf("event %v", e)
	}
	checkTime(t, e["created_at"])
	if got := s.must(200, "GET", "/api/sessions/"+sid+"/events?after=5", "", nil); string(mustJSON(t, got["events"])) != "[]" || got["last_seq"] != float64(5) {
		t.Fatalf("past the end: %v", got)
	}
	if n := len(s.must(200, "GET", "/api/sessions/"+sid+"/events?limit=5000", "", nil)["events"].([]any)); n != 5 {
		t.Fatalf("limit above 1000 → %d events", n)
	}
	for _, q := range []string{"after=-1", "after=x", "after=", "limit=0", "limit=-3", "limit=abc"} {
		r := s.do("GET", "/api/sessions/"+sid+"/events?"+q, "", nil)
		if r.status != 400 || r.errorCode(t) != "invalid_argument" {
			t.Fatalf("%s: %d %s", q, r.status, r.body)
		}
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	r := s.do("GET", "/api/nothing/here", "", nil)
	if r.status != 404 || r.errorCode(t) != "not_found" {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}
	r = s.do("DELETE", "/api/sessions", "", nil)
	if r.status != 405 || r.errorCode(t) == "" || r.header.Get("Allow") != "GET, POST, HEAD" {
		t.Fatalf("wrong method: %d %s Allow=%q", r.status, r.body, r.header.Get("Allow"))
	}
	r = s.do("PUT", "/api/sessions/x/events/stream", "", nil)
	if r.status != 405 {
		t.Fatalf("PUT on the stream: %d %s", r.status, r.body)
	}
	if r.header.Get("X-Request-Id") == "" {
		t.Fatal("no X-Request-Id")
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})
	// Operations need no token, even with tokens configured.
	if r := s.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	if r := s.do("GET", "/readyz", "", nil); r.status != 200 {
		t.Fatalf("readyz %d %s", r.status, r.body)
	}
	sid := s.createSession("tok")
	a := s.send("tok", sid, "long A", nil)["run_id"].(string)
	st := s.stream("tok", sid, "", "")
	st.until(is(rein.EventToolUse, a))
	if r := s.post("tok", sid, ev("user.message", map[string]any{"text": "B"})); r.status != 409 {
		t.Fatalf("conflict: %d", r.status)
	}
	b := s.send("tok", sid, "long B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	s.send("tok", sid, "C", map[string]any{"when_busy": "enqueue"})
	s.results("tok", sid, ev("user.interrupt", map[string]any{"run_id": a}))
	// B starts only once A's end is fully recorded, metrics included (the
	// service observes a run's end after its run_completed is logged).
	st.until(is(rein.EventToolUse, b))

	r := s.do("GET", "/metrics", "", nil)
	if r.status != 200 {
		t.Fatalf("metrics %d", r.status)
	}
	text := string(r.body)
	for _, want := range []string{
		"rein_admission_conflicts_total 1",
		"rein_runs_started_total 2",
		`rein_runs_ended_total{reason="cancelled",status="CANCELLED"} 1`,
		`rein_stop_latency_seconds_count{mode="cancel"} 1`,
		"rein_sse_subscribers 1",
		`rein_runs{status="RUNNING"} 1`,
		`rein_runs{status="QUEUED"} 1`,
		"rein_queue_depth 1",
		"rein_event_append_seconds_count",
		`rein_http_requests_total{code="409",method="POST",route="/api/sessions/{id}/events"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestDrainingAnswers: once the service drains, admission answers 503
// unavailable and /readyz fails, while reads keep working.
func TestDrainingAnswers(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	if err := s.svc.Drain(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if r := s.do("GET", "/readyz", "", nil); r.status != 503 || r.errorCode(t) != "unavailable" {
		t.Fatalf("readyz while draining: %d %s", r.status, r.body)
	}
	if r := s.post("", sid, ev("user.message", map[string]any{"text": "x"})); r.status != 503 || r.errorCode(t) != "unavailable" {
		t.Fatalf("message while draining: %d %s", r.status, r.body)
	}
	if r := s.do("POST", "/api/sessions", "", "{}"); r.status != 503 {
		t.Fatalf("create while draining: %d %s", r.status, r.body)
	}
	s.must(200, "GET", "/api/sessions/"+sid, "", nil)
	if r := s.do("GET", "/healthz", "", nil); r.status != 200 {
		t.Fatalf("healthz while draining: %d", r.status)
	}
}

func checkTime(t testing.TB, v any) {
	t.Helper()
	s, ok := v.(string)
	if !ok {
		t.Fatalf("time %v is not a string", v)
	}
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || !strings.HasSuffix(s, "Z") || tm.IsZero() {
		t.Fatalf("time %q is not RFC 3339 UTC", s)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSubagents: GET .../subagents lists direct children only, oldest
// first, with their live state; a child is an ordinary session over HTTP.
func TestSubagents(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice", "tok-b": "bob"}})
	parent := s.createSession("tok")
	if got := s.must(200, "GET", "/api/sessions/"+parent+"/subagents", "tok", nil); string(mustJSON(t, got["subagents"])) != "[]" {
		t.Fatalf("no children: %v", got)
	}
	mk := func(id, parentID, label string) {
		t.Helper()
		err := s.st.CreateSession(t.Context(), &store.Session{Owner: "alice", ID: id, ParentID: parentID,
			Subagent: &store.SubagentDescriptor{Label: label, Depth: 1}, CreatedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
	}
	mk("ses_child_a", parent, "researcher")
	mk("ses_child_b", parent, "writer")
	mk("ses_grandchild", "ses_child_a", "deeper")
	run := s.send("tok", "ses_child_b", "long child", nil)["run_id"].(string)
	s.waitEvent("tok", "ses_child_b", is(rein.EventToolUse, run))

	list := s.must(200, "GET", "/api/sessions/"+parent+"/subagents", "tok", nil)["subagents"].([]any)
	if len(list) != 2 {
		t.Fatalf("children %v", list)
	}
	a, b := list[0].(map[string]any), list[1].(map[string]any)
	if a["id"] != "ses_child_a" || a["label"] != "researcher" || a["state"] != "idle" || a["current_run_id"] != nil || a["parent_session_id"] != parent {
		t.Fatalf("first child %v", a)
	}
	if b["id"] != "ses_child_b" || b["state"] != "running" || b["current_run_id"] != run {
		t.Fatalf("second child %v", b)
	}
	child := s.must(200, "GET", "/api/sessions/ses_child_b", "tok", nil)
	if child["parent_session_id"] != parent {
		t.Fatalf("child's parent_session_id %v", child["parent_session_id"])
	}
	if r := s.do("GET", "/api/sessions/"+parent+"/subagents", "tok-b", nil); r.status != 404 {
		t.Fatalf("another owner: %d %s", r.status, r.body)
	}
	s.results("tok", "ses_child_b", ev("user.interrupt", map[string]any{"run_id": run}))
	s.completion("tok", "ses_child_b", run)
}

// TestListAgents: GET /api/agents lists the configured agents, default
// first and the others by name, and a session can be created with each;
// without a configuration there is one, default.
func TestListAgents(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{agents: []string{"zeta", "default", "alpha"}})
	r := s.do("GET", "/api/agents", "", nil)
	if r.status != 200 {
		t.Fatalf("GET /api/agents: %d %s", r.status, r.body)
	}
	var got struct {
		Agents []struct {
			Name    string `json:"name"`
			Default bool   `json:"default"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"default", "alpha", "zeta"}
	if len(got.Agents) != len(want) {
		t.Fatalf("agents %s, want %v", r.body, want)
	}
	for i, a := range got.Agents {
		if a.Name != want[i] || a.Default != (a.Name == "default") {
			t.Fatalf("agents %s, want %v with default marked", r.body, want)
		}
		if r := s.do("POST", "/api/sessions", "", map[string]any{"agent": a.Name}); r.status != 201 {
			t.Fatalf("create a session with listed agent %q: %d %s", a.Name, r.status, r.body)
		}
	}
	one := newStack(t, options{})
	if r := one.do("GET", "/api/agents", "", nil); r.status != 200 || !strings.Contains(string(r.body), `{"agents":[{"name":"default","default":true}]}`) {
		t.Fatalf("one agent: %d %s", r.status, r.body)
	}
}
