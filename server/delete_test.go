package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
	"github.com/reinhq/rein/sessions"
)

// TestDeleteSession: DELETE /api/sessions/{id} answers 204 with no body for
// an idle session (which is then gone, its open event stream ended), 404
// for a missing one and another owner's alike, and 409 session_busy with
// the run's id for a busy one — each as openapi.yaml documents it.
func TestDeleteSession(t *testing.T) {
	t.Parallel()
	api := loadOpenAPI(t)
	s := newStack(t, options{tokens: map[string]string{"tok": "alice", "tok-b": "bob"}})
	const pattern = "/api/sessions/{id}"

	sid := s.createSession("tok")
	run := s.send("tok", sid, "hello", nil)["run_id"].(string)
	s.completion("tok", sid, run)
	stream := s.stream("tok", sid, "", "")
	for {
		if e := stream.event(); e.Type == rein.EventRunCompleted {
			break // the stream is live, past its replay
		}
	}

	// Another owner's session is answered exactly like a missing one.
	other := s.do("DELETE", "/api/sessions/"+sid, "tok-b", nil)
	missing := s.do("DELETE", "/api/sessions/ses_missing", "tok-b", nil)
	if other.status != 404 || other.errorCode(t) != "not_found" {
		t.Fatalf("DELETE of another owner's session: %d %s", other.status, other.body)
	}
	if a, b := errorWithout(t, other, sid), errorWithout(t, missing, "ses_missing"); a != b {
		t.Fatalf("another owner's session (%s) is answered unlike a missing one (%s)", a, b)
	}
	api.check(t, "DELETE", pattern, other)
	if s.do("GET", "/api/sessions/"+sid, "tok", nil).status != 200 {
		t.Fatal("another owner's DELETE touched the session")
	}

	del := s.do("DELETE", "/api/sessions/"+sid, "tok", nil)
	if del.status != 204 || len(del.body) != 0 {
		t.Fatalf("DELETE of an idle session: %d %q, want 204 with no body", del.status, del.body)
	}
	if _, resp, ok := api.response("DELETE", pattern, 204); !ok || resp["content"] != nil {
		t.Fatalf("openapi.yaml documents DELETE 204 as %v (documented: %v), want a response with no content", resp, ok)
	}
	for _, path := range []string{"", "/runs", "/events", "/runs/" + run} {
		if r := s.do("GET", "/api/sessions/"+sid+path, "tok", nil); r.status != 404 {
			t.Fatalf("GET %s after the delete: %d %s", path, r.status, r.body)
		}
	}
	// The open stream ends: it reads to its end instead of waiting.
	if _, err := io.ReadAll(stream.r); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("the stream of the deleted session ended with %v, want its end", err)
	}
	again := s.do("DELETE", "/api/sessions/"+sid, "tok", nil)
	if again.status != 404 || again.errorCode(t) != "not_found" {
		t.Fatalf("second DELETE: %d %s", again.status, again.body)
	}
	api.check(t, "DELETE", pattern, again)

	// Busy: a running run, here or in a subagent child.
	busy := s.createSession("tok")
	long := s.send("tok", busy, "long A", nil)["run_id"].(string)
	r := s.do("DELETE", "/api/sessions/"+busy, "tok", nil)
	if r.status != 409 || r.errorCode(t) != "session_busy" {
		t.Fatalf("DELETE of a busy session: %d %s", r.status, r.body)
	}
	if got := r.json(t)["error"].(map[string]any)["run_id"]; got != long {
		t.Fatalf("409 run_id = %v, want the running run %s", got, long)
	}
	api.check(t, "DELETE", pattern, r)
	s.results("tok", busy, ev("user.interrupt", map[string]any{"run_id": long}))
	s.completion("tok", busy, long)

	child, err := s.svc.Children().Create(t.Context(), rein.SessionKey{Owner: "alice", ID: busy}, sessions.ChildRequest{})
	if err != nil {
		t.Fatal(err)
	}
	childRun := s.send("tok", child.ID, "long B", nil)["run_id"].(string)
	r = s.do("DELETE", "/api/sessions/"+busy, "tok", nil)
	if r.status != 409 || r.json(t)["error"].(map[string]any)["run_id"] != childRun {
		t.Fatalf("DELETE of a session whose child runs: %d %s, want 409 naming %s", r.status, r.body, childRun)
	}
	api.check(t, "DELETE", pattern, r)

	// The Go client: the same answers as errors.
	c := client.New(s.url, client.WithToken("tok"))
	err = c.DeleteSession(t.Context(), busy)
	var ce *client.Error
	if !errors.Is(err, rein.ErrSessionBusy) || !errors.As(err, &ce) || ce.RunID != childRun {
		t.Fatalf("client DeleteSession of a busy session = %v, want session_busy naming %s", err, childRun)
	}
	s.results("tok", child.ID, ev("user.interrupt", map[string]any{"run_id": childRun}))
	s.completion("tok", child.ID, childRun)
	if err := c.DeleteSession(t.Context(), busy); err != nil {
		t.Fatalf("client DeleteSession of the idle tree: %v", err)
	}
	for _, id := range []string{busy, child.ID} {
		if r := s.do("GET", "/api/sessions/"+id, "tok", nil); r.status != 404 {
			t.Fatalf("GET %s after deleting its tree: %d", id, r.status)
		}
	}
	if err := c.DeleteSession(t.Context(), busy); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("client DeleteSession of a deleted session = %v, want not_found", err)
	}
	// Ids are fresh: a new session is created as usual.
	if id := s.createSession("tok"); id == sid || id == busy {
		t.Fatalf("a new session reused the id %s", id)
	}
}

// errorWithout is an error body's code and message, with id replaced, for
// comparing two answers that differ only in the session named (and in
// per-request fields).
func errorWithout(t *testing.T, r reply, id string) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	b, err := json.Marshal(map[string]any{"code": e["code"], "message": e["message"], "param": e["param"]})
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), id, "ID")
}
