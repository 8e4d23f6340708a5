package server_test

import (
	"testing"

	"github.com/reinhq/rein"
)

// TestStopByClientID over HTTP: a stop by client id before its message
// answers run_id null and the message is answered CANCELLED (even on a busy
// session that would refuse it); one after answers the run; the event
// carries client_id; bad input names the field and applies nothing.
func TestStopByClientID(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	busy := s.send("", sid, "long one", nil)["run_id"].(string)
	s.waitEvent("", sid, is(rein.EventToolUse, busy))

	res := s.results("", sid, ev("user.interrupt", map[string]any{"client_id": "btn-1", "mode": "interrupt"}))[0]
	if res["accepted"] != true || res["run_id"] != nil {
		t.Fatalf("stop before the message: %v", res)
	}
	msg := s.results("", sid, ev("user.message", map[string]any{"text": "long two", "client_id": "btn-1"}))[0]
	if msg["status"] != "CANCELLED" {
		t.Fatalf("the message of a remembered stop: %v, want CANCELLED (not 409)", msg)
	}
	run := msg["run_id"].(string)
	if p := s.completion("", sid, run); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("%+v", p)
	}
	var stopEv map[string]any
	for _, e := range s.events("", sid) {
		if e.Type == rein.EventUserInterrupt {
			stopEv = payloadOf(t, e)
		}
		if e.Type == rein.EventRunStarted && e.RunID == run {
			t.Fatal("a run stopped in advance started")
		}
	}
	if stopEv["client_id"] != "btn-1" || stopEv["run_id"] != nil || stopEv["accepted"] != true {
		t.Fatalf("user.interrupt payload %v", stopEv)
	}
	// After its message: the run, by its client id.
	q := s.results("", sid, ev("user.message", map[string]any{"text": "long three", "client_id": "btn-2", "when_busy": "enqueue"}))[0]
	res = s.results("", sid, ev("user.interrupt", map[string]any{"client_id": "btn-2"}))[0]
	if res["accepted"] != true || res["run_id"] != q["run_id"] {
		t.Fatalf("stop of a queued run by client id: %v (run %v)", res, q["run_id"])
	}
	s.completion("", sid, q["run_id"].(string))
	if res := s.results("", sid, ev("user.interrupt", map[string]any{"client_id": "btn-2"}))[0]; res["accepted"] != false || res["run_id"] != q["run_id"] {
		t.Fatalf("stop of an ended run by client id: %v", res)
	}

	before := len(s.events("", sid))
	for body, param := range map[string]string{
		`{"events":[{"type":"user.interrupt","payload":{"client_id":"x","run_id":"` + busy + `"}}]}`: "events[0].payload.client_id",
		`{"events":[{"type":"user.interrupt","payload":{"client_id":""}}]}`:                          "events[0].payload.client_id",
		`{"events":[{"type":"user.interrupt","payload":{"client_id":null}}]}`:                        "events[0].payload.client_id",
		`{"events":[{"type":"user.interrupt","payload":{"client_id":7}}]}`:                           "events[0].payload.client_id",
	} {
		r := s.do("POST", "/api/sessions/"+sid+"/events", "", body)
		if r.status != 400 || r.errorParam(t) != param {
			t.Fatalf("%s: %d %s, want 400 with param %s", body, r.status, r.body, param)
		}
	}
	if after := len(s.events("", sid)); after != before {
		t.Fatalf("refused stops logged %d events", after-before)
	}
	s.results("", sid, ev("user.interrupt", map[string]any{"run_id": busy}))
	s.completion("", sid, busy)
}
