package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// TestConfirmationsInbox: GET /api/confirmations lists the caller's calls
// waiting for an answer across sessions, newest first, a page at a time,
// in the documented shape; answered and expired ones under their status;
// bad parameters are 400 with their param; a late answer to an expired
// call is 409.
func TestConfirmationsInbox(t *testing.T) {
	t.Parallel()
	api := loadOpenAPI(t)
	s := newStack(t, options{tokens: map[string]string{"tok": "alice", "bob": "bob"}})
	var sids, calls []string
	for i := range 3 {
		sid := s.createSession("tok")
		s.must(200, "PATCH", "/api/sessions/"+sid, "tok", fmt.Sprintf(`{"title":"session %d"}`, i))
		run := s.send("tok", sid, fmt.Sprintf("note %d", i), nil)["run_id"].(string)
		e := s.waitEvent("tok", sid, is(rein.EventToolConfirmationRequested, run))
		sids, calls = append(sids, sid), append(calls, payloadOf(t, e)["tool_use_id"].(string))
	}
	first := s.do("GET", "/api/confirmations?limit=2", "tok", nil)
	api.check(t, "GET", "/api/confirmations", first)
	body := first.json(t)
	items := body["confirmations"].([]any)
	if len(items) != 2 || body["next"] == nil {
		t.Fatalf("first page: %s", first.body)
	}
	newest := items[0].(map[string]any)
	if newest["session_id"] != sids[2] || newest["tool_use_id"] != calls[2] || newest["session_title"] != "session 2" ||
		newest["status"] != "pending" || newest["allow"] != nil || newest["answered_at"] != nil || newest["expires_at"] != nil ||
		newest["name"] != "write_note" || newest["input"].(map[string]any)["text"] != "note 2" {
		t.Fatalf("newest item: %v", newest)
	}
	second := s.must(200, "GET", "/api/confirmations?limit=2&after="+body["next"].(string), "tok", nil)
	if rest := second["confirmations"].([]any); len(rest) != 1 || rest[0].(map[string]any)["tool_use_id"] != calls[0] || second["next"] != nil {
		t.Fatalf("second page: %v", second)
	}
	if other := s.must(200, "GET", "/api/confirmations", "bob", nil); len(other["confirmations"].([]any)) != 0 {
		t.Fatalf("bob's inbox: %v", other)
	}

	// Answered: allowed and denied ones, with their answers.
	s.results("tok", sids[0], ev("user.tool_confirmation", map[string]any{"tool_use_id": calls[0], "allow": false, "deny_message": "no"}))
	s.results("tok", sids[1], ev("user.tool_confirmation", map[string]any{"tool_use_id": calls[1], "allow": true}))
	answered := s.do("GET", "/api/confirmations?status=answered", "tok", nil)
	api.check(t, "GET", "/api/confirmations", answered)
	got := answered.json(t)["confirmations"].([]any)
	if len(got) != 2 || got[0].(map[string]any)["allow"] != true || got[1].(map[string]any)["allow"] != false ||
		got[0].(map[string]any)["status"] != "answered" || got[1].(map[string]any)["answered_at"] == nil {
		t.Fatalf("answered: %s", answered.body)
	}

	// Expired: a confirmation whose time has come, expired as an instance
	// does (one write), then answered too late.
	key := rein.SessionKey{Owner: "alice", ID: sids[2]}
	ctx := context.Background()
	when := time.Now().Add(-time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(storetest.CreateConfirmation(ctx, s.st, &store.Confirmation{Owner: "alice", SessionID: sids[2], RunID: "run_x",
		ToolUseID: "call_old", Name: "write_note", Input: []byte(`{"text":"old"}`), ExpiresAt: when}))
	_, err := storetest.ExpireConfirmation(ctx, s.st, key, "call_old")
	must(err)
	expired := s.do("GET", "/api/confirmations?status=expired", "tok", nil)
	api.check(t, "GET", "/api/confirmations", expired)
	got = expired.json(t)["confirmations"].([]any)
	if len(got) != 1 || got[0].(map[string]any)["status"] != "expired" || got[0].(map[string]any)["allow"] != false || got[0].(map[string]any)["expires_at"] == nil {
		t.Fatalf("expired: %s", expired.body)
	}
	late := s.post("tok", sids[2], ev("user.tool_confirmation", map[string]any{"tool_use_id": "call_old", "allow": true}))
	if late.status != 409 || late.json(t)["error"].(map[string]any)["code"] != "conflict" {
		t.Fatalf("a late answer: %d %s", late.status, late.body)
	}

	for _, c := range []struct{ query, param string }{
		{"status=waiting", "status"}, {"status=", "status"}, {"limit=0", "limit"}, {"limit=x", "limit"},
		{"limit=-3", "limit"}, {"after=%21%21", "after"}, {"after=bm90IGEgY3Vyc29y", "after"},
	} {
		r := s.do("GET", "/api/confirmations?"+c.query, "tok", nil)
		if r.status != 400 || r.json(t)["error"].(map[string]any)["param"] != c.param {
			t.Fatalf("?%s: %d %s, want 400 with param %s", c.query, r.status, r.body, c.param)
		}
		api.check(t, "GET", "/api/confirmations", r)
	}
	if r := s.do("GET", "/api/confirmations", "", nil); r.status != 401 {
		t.Fatalf("no token: %d", r.status)
	}
}
