package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/server"
)

// TestOwnerIsolation: every /api route × {another owner, no token, bad
// token}. Another owner's session is answered exactly like a missing one;
// no token or a bad one is 401; nothing of the owner's session changes.
func TestOwnerIsolation(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"}})
	sid := s.createSession("tok-alice")
	runID := s.send("tok-alice", sid, "long A", nil)["run_id"].(string)
	s.waitEvent("tok-alice", sid, is(rein.EventToolUse, runID))
	before := s.events("tok-alice", sid)

	type req struct {
		method, path string
		body         string
	}
	batch := func(events string) string { return `{"events":[` + events + `]}` }
	onSession := func(id string) []req {
		return []req{
			{"GET", "/api/sessions/" + id, ""},
			{"GET", "/api/sessions/" + id + "/runs", ""},
			{"GET", "/api/sessions/" + id + "/subagents", ""},
			{"GET", "/api/sessions/" + id + "/runs/" + runID, ""},
			{"GET", "/api/sessions/" + id + "/events", ""},
			{"GET", "/api/sessions/" + id + "/events/stream", ""},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"user.interrupt","payload":{"run_id":"` + runID + `"}}`)},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"user.interrupt","payload":{"mode":"interrupt"}}`)},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"user.message","payload":{"text":"hi","when_busy":"interrupt"}}`)},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"user.supplement","payload":{"text":"psst"}}`)},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"user.tool_confirmation","payload":{"tool_use_id":"call_x","allow":true}}`)},
			{"POST", "/api/sessions/" + id + "/events", batch(`{"type":"system.message","payload":{"text":"evil"}}`)},
		}
	}
	missing := onSession("ses_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
	for i, r := range onSession(sid) {
		got := s.do(r.method, r.path, "tok-bob", r.body)
		if got.status != 404 || got.errorCode(t) != "not_found" {
			t.Fatalf("bob %s %s: %d %s", r.method, r.path, got.status, got.body)
		}
		ref := s.do(missing[i].method, missing[i].path, "tok-bob", missing[i].body)
		if withoutRequestID(got.body) != withoutRequestID(ref.body) {
			t.Fatalf("bob %s %s: another owner's session answers %s, a missing one %s", r.method, r.path, got.body, ref.body)
		}
	}
	all := append(onSession(sid), req{"GET", "/api/sessions", ""}, req{"POST", "/api/sessions", "{}"}, req{"GET", "/api/nothing", ""})
	for _, r := range all {
		for _, tok := range []string{"", "tok-nobody", "tok-alice-but-longer"} {
			got := s.do(r.method, r.path, tok, r.body)
			if got.status != 401 || got.errorCode(t) != "unauthenticated" || got.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("token %q %s %s: %d %s", tok, r.method, r.path, got.status, got.body)
			}
		}
	}
	// Other schemes are not bearer tokens.
	got := s.doHeader("GET", "/api/sessions", "Authorization", "Basic dG9rLWFsaWNlOg==")
	if got.status != 401 {
		t.Fatalf("Basic auth: %d", got.status)
	}
	if got := s.doHeader("GET", "/api/sessions", "Authorization", "bearer tok-alice"); got.status != 200 {
		t.Fatalf("the scheme is case-insensitive: %d %s", got.status, got.body)
	}
	if list := s.must(200, "GET", "/api/sessions", "tok-bob", nil)["sessions"].([]any); len(list) != 0 {
		t.Fatalf("bob lists %v", list)
	}

	// Alice's run and log are exactly as they were.
	if st := s.must(200, "GET", "/api/sessions/"+sid+"/runs/"+runID, "tok-alice", nil)["status"]; st != "RUNNING" {
		t.Fatalf("alice's run is %v", st)
	}
	if after := s.events("tok-alice", sid); len(after) != len(before) {
		t.Fatalf("alice's log went from %d to %d events", len(before), len(after))
	}
}

// TestSingleUserMode: without tokens every request is owner "local".
func TestSingleUserMode(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	if r := s.do("GET", "/api/sessions/"+sid, "whatever-token", nil); r.status != 200 {
		t.Fatalf("a token in single-user mode: %d %s", r.status, r.body)
	}
	sessions, err := s.svc.ListSessions(t.Context(), server.LocalOwner)
	if err != nil || len(sessions) != 1 || sessions[0].ID != sid {
		t.Fatalf("local owner's sessions: %v %v", sessions, err)
	}
}

func (s *stack) doHeader(method, path, key, value string) reply {
	s.t.Helper()
	req, err := newRequest(method, s.url+path)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set(key, value)
	resp, err := httpClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestParseTokens(t *testing.T) {
	t.Parallel()
	good := "# team tokens\n\n  tok-a alice\ntok-b\tbob  # not a comment: 3 fields\n"
	if _, err := server.ParseTokens("tokens", strings.NewReader(good)); err == nil || !strings.Contains(err.Error(), "tokens:4") {
		t.Fatalf("a line with 3 fields: %v", err)
	}
	got, err := server.ParseTokens("tokens", strings.NewReader("# team\n\n  tok-a alice\r\ntok-b\tbob\n   # indented comment\n"))
	if err != nil || len(got) != 2 || got["tok-a"] != "alice" || got["tok-b"] != "bob" {
		t.Fatalf("tokens %v, %v", got, err)
	}
	for name, text := range map[string]string{
		"one field":   "lonely\n",
		"repeated":    "t a\nt b\n",
		"empty file":  "# nothing\n\n",
		"three words": "t a b\n",
	} {
		if _, err := server.ParseTokens("f", strings.NewReader(text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := server.LoadTokens(t.TempDir() + "/missing"); err == nil {
		t.Error("a missing tokens file: no error")
	}
}

var httpClient = &http.Client{Timeout: testTimeout}

func newRequest(method, url string) (*http.Request, error) { return http.NewRequest(method, url, nil) }
