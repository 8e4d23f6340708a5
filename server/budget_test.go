package server_test

import (
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// TestBudgetsOverHTTP: a session's budget and usage as GET shows them, the
// runs' usage, agent.model_request in the log, the 409 of a session over
// its budget until PATCH clears it, and every bad budget a 400 naming its
// field — in a session body, a PATCH and a message's payload.
func TestBudgetsOverHTTP(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})
	sid := s.must(201, "POST", "/api/sessions", "tok", map[string]any{"budget": map[string]any{"tokens": 1}})["id"].(string)
	got := s.must(200, "GET", "/api/sessions/"+sid, "tok", nil)
	if string(mustJSON(t, got["budget"])) != `{"tokens":1}` || string(mustJSON(t, got["usage"])) != `{"cost_usd":null,"input_tokens":0,"output_tokens":0}` {
		t.Fatalf("new session: budget %v usage %v", got["budget"], got["usage"])
	}
	// Under the bound before its request: the run runs (and reaches it).
	run := s.send("tok", sid, "hello", nil)["run_id"].(string)
	if p := s.completion("tok", sid, run); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	runJSON := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+run, "tok", nil)
	usage, _ := runJSON["usage"].(map[string]any)
	if usage == nil || usage["input_tokens"].(float64) <= 0 || usage["output_tokens"].(float64) <= 0 || usage["cost_usd"] != nil {
		t.Fatalf("run usage %v", runJSON["usage"])
	}
	e, err := find(s.events("tok", sid), is(rein.EventModelRequest, run))
	if err != nil {
		t.Fatal(err)
	}
	if p := payloadOf(t, e); p["outcome"] != "ok" || p["step"].(float64) != 1 || string(mustJSON(t, p["usage"])) != string(mustJSON(t, usage)) {
		t.Fatalf("agent.model_request %v, run usage %v", p, usage)
	}
	sess := s.must(200, "GET", "/api/sessions/"+sid, "tok", nil)
	if string(mustJSON(t, sess["usage"])) != string(mustJSON(t, usage)) {
		t.Fatalf("session usage %v, its one run's %v", sess["usage"], usage)
	}
	// Over its budget: refused, nothing admitted.
	r := s.post("tok", sid, ev("user.message", map[string]any{"text": "more"}))
	if r.status != 409 || r.errorCode(t) != "conflict" || !strings.Contains(string(r.body), "budget exhausted") {
		t.Fatalf("message over budget: %d %s", r.status, r.body)
	}
	if runs := s.must(200, "GET", "/api/sessions/"+sid+"/runs", "tok", nil)["runs"].([]any); len(runs) != 1 {
		t.Fatalf("%d runs after the refusal", len(runs))
	}
	// Cleared by PATCH null: taken again.
	if got := s.must(200, "PATCH", "/api/sessions/"+sid, "tok", map[string]any{"budget": nil}); got["budget"] != nil {
		t.Fatalf("PATCH budget null answered %v", got["budget"])
	}
	s.completion("tok", sid, s.send("tok", sid, "more", nil)["run_id"].(string))

	// Bad budgets, and a cost bound without a price (the scripted model has none).
	for body, param := range map[string]string{
		`{"budget": {"tokens": 0}}`:     "budget.tokens",
		`{"budget": {"tokens": -3}}`:    "budget.tokens",
		`{"budget": {"tokens": 1.5}}`:   "budget.tokens",
		`{"budget": {"tokens": "10"}}`:  "budget.tokens",
		`{"budget": {"cost_usd": 0}}`:   "budget.cost_usd",
		`{"budget": {"cost_usd": "1"}}`: "budget.cost_usd",
		`{"budget": {}}`:                "budget",
		`{"budget": 5}`:                 "budget",
		`{"budget": {"cost_usd": 0.5}}`: "budget.cost_usd",
	} {
		for _, method := range []string{"POST", "PATCH"} {
			path := "/api/sessions"
			if method == "PATCH" {
				path += "/" + sid
			}
			r := s.do(method, path, "tok", body)
			if r.status != 400 || r.errorCode(t) != "invalid_argument" || r.errorParam(t) != param {
				t.Fatalf("%s %s: %d %s, want 400 with param %q", method, body, r.status, r.body, param)
			}
		}
	}
	for budget, param := range map[string]string{
		`{"tokens": -1}`:  "events[0].payload.budget.tokens",
		`{"cost_usd": 1}`: "events[0].payload.budget.cost_usd",
		`[]`:              "events[0].payload.budget",
	} {
		r := s.do("POST", "/api/sessions/"+sid+"/events", "tok", `{"events":[{"type":"user.message","payload":{"text":"x","budget":`+budget+`}}]}`)
		if r.status != 400 || r.errorCode(t) != "invalid_argument" || r.errorParam(t) != param {
			t.Fatalf("message budget %s: %d %s, want 400 with param %q", budget, r.status, r.body, param)
		}
	}
	// A message's tokens budget is taken, and kept on its run.
	m := s.send("tok", sid, "bounded", map[string]any{"budget": map[string]any{"tokens": 1000000}})["run_id"].(string)
	if p := s.completion("tok", sid, m); p.Status != rein.StatusCompleted {
		t.Fatalf("%+v", p)
	}
}
