package server_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// TestSessionIDsAndTitles: a caller-chosen id is created once (201), its
// repeat by the same owner is the session unchanged (200), another owner's
// is a conflict that says nothing; a title is given, taken from the first
// message, or set by PATCH; bad input names its field and changes nothing.
func TestSessionIDsAndTitles(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})

	created := s.must(201, "POST", "/api/sessions", "tok-a", map[string]any{"id": "crm:Ticket-4711.v2_x", "title": "Refund", "metadata": map[string]any{"n": 1}})
	if created["id"] != "crm:Ticket-4711.v2_x" || created["title"] != "Refund" {
		t.Fatalf("created %v", created)
	}
	again := s.must(200, "POST", "/api/sessions", "tok-a", map[string]any{"id": "crm:Ticket-4711.v2_x", "title": "Other", "metadata": map[string]any{"n": 2}})
	if string(mustJSON(t, again)) != string(mustJSON(t, created)) {
		t.Fatalf("repeat create = %v, want the session unchanged %v", again, created)
	}
	r := s.do("POST", "/api/sessions", "tok-b", map[string]any{"id": "crm:Ticket-4711.v2_x"})
	if r.status != 409 || r.errorCode(t) != "conflict" || strings.Contains(string(r.body), "alice") || strings.Contains(string(r.body), "Refund") {
		t.Fatalf("bob takes alice's id: %d %s", r.status, r.body)
	}
	if r := s.do("GET", "/api/sessions/crm:Ticket-4711.v2_x", "tok-b", nil); r.status != 404 {
		t.Fatalf("bob reads alice's session after the conflict: %d %s", r.status, r.body)
	}

	long := strings.Repeat("é", 200)
	s.must(201, "POST", "/api/sessions", "tok-a", map[string]any{"id": strings.Repeat("a", 128), "title": long})
	for body, param := range map[string]string{
		`{"id": ""}`:          "id",
		`{"id": "has space"}`: "id",
		`{"id": "slash/no"}`:  "id",
		`{"id": "` + strings.Repeat("a", 129) + `"}`: "id",
		`{"id": 5}`:                  "id",
		`{"title": "` + long + `x"}`: "title",
		`{"title": 1}`:               "title",
	} {
		r := s.do("POST", "/api/sessions", "tok-a", body)
		if r.status != 400 || r.errorCode(t) != "invalid_argument" || r.errorParam(t) != param {
			t.Fatalf("POST %s: %d %s, want 400 with param %q", body, r.status, r.body, param)
		}
	}

	// Without a title, the first message's first line with text names the
	// session, in the message's own write; the second message does not.
	sid := s.must(201, "POST", "/api/sessions", "tok-a", map[string]any{"title": ""})["id"].(string)
	if got := s.must(200, "GET", "/api/sessions/"+sid, "tok-a", nil); got["title"] != nil {
		t.Fatalf("untitled session's title = %v, want null", got["title"])
	}
	first := "  \n  " + strings.Repeat("word ", 30) + "\nsecond line"
	run := s.send("tok-a", sid, first, nil)["run_id"].(string)
	want := strings.TrimSpace(strings.Repeat("word ", 16)) // 80 characters, cut, trimmed
	if got := s.must(200, "GET", "/api/sessions/"+sid, "tok-a", nil)["title"]; got != want {
		t.Fatalf("title after the first message = %q, want %q", got, want)
	}
	s.completion("tok-a", sid, run)
	s.completion("tok-a", sid, s.send("tok-a", sid, "a later message", nil)["run_id"].(string))
	if got := s.must(200, "GET", "/api/sessions/"+sid, "tok-a", nil)["title"]; got != want {
		t.Fatalf("title after a second message = %q, want %q", got, want)
	}

	// PATCH: title and metadata, answered as GET; "" is a title for good.
	patched := s.must(200, "PATCH", "/api/sessions/"+sid, "tok-a", map[string]any{"title": "Renamed", "metadata": map[string]any{"k": "v"}})
	if patched["title"] != "Renamed" || string(mustJSON(t, patched["metadata"])) != `{"k":"v"}` || patched["state"] != "idle" || patched["last_seq"] == nil {
		t.Fatalf("PATCH answer %v", patched)
	}
	if got := s.must(200, "PATCH", "/api/sessions/"+sid, "tok-a", map[string]any{"metadata": map[string]any{}}); got["title"] != "Renamed" {
		t.Fatalf("a metadata PATCH changed the title: %v", got)
	}
	s.must(200, "PATCH", "/api/sessions/"+sid, "tok-a", map[string]any{"title": ""})
	untitled := s.must(201, "POST", "/api/sessions", "tok-a", nil)["id"].(string)
	s.must(200, "PATCH", "/api/sessions/"+untitled, "tok-a", map[string]any{"title": ""})
	s.completion("tok-a", untitled, s.send("tok-a", untitled, "hello", nil)["run_id"].(string))
	if got := s.must(200, "GET", "/api/sessions/"+untitled, "tok-a", nil)["title"]; got != "" {
		t.Fatalf("a session PATCHed to \"\" was titled %q by its first message", got)
	}
	for body, param := range map[string]string{
		`{"title": "` + long + `x"}`: "title",
		`{"title": 2}`:               "title",
		`{"metadata": [1]}`:          "metadata",
		`[]`:                         "",
	} {
		r := s.do("PATCH", "/api/sessions/"+sid, "tok-a", body)
		if r.status != 400 || r.errorParam(t) != param {
			t.Fatalf("PATCH %s: %d %s, want 400 with param %q", body, r.status, r.body, param)
		}
	}
	if got := s.must(200, "GET", "/api/sessions/"+sid, "tok-a", nil); got["title"] != "" || string(mustJSON(t, got["metadata"])) != `{}` {
		t.Fatalf("after refused PATCHes: %v", got)
	}
	if r := s.do("PATCH", "/api/sessions/"+sid, "tok-b", map[string]any{"title": "bob's"}); r.status != 404 {
		t.Fatalf("bob PATCHes alice's session: %d %s", r.status, r.body)
	}
}

// TestSessionListStateAndPages: list items carry title, state, pending
// confirmations and last_event_at; pages follow by cursor, unshifted by
// sessions created meanwhile.
func TestSessionListStateAndPages(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	var ids []string
	for i := range 5 {
		ids = append(ids, s.must(201, "POST", "/api/sessions", "", map[string]any{"id": fmt.Sprintf("list-%d", i)})["id"].(string))
	}
	// list-1 waits for a confirmation: busy, one pending.
	run := s.send("", ids[1], "note buy milk", nil)["run_id"].(string)
	s.waitEvent("", ids[1], is(rein.EventToolConfirmationRequested, run))

	items := s.must(200, "GET", "/api/sessions", "", nil)
	if items["next"] != nil {
		t.Fatalf("one page: next = %v, want null", items["next"])
	}
	byID := map[string]map[string]any{}
	for _, x := range items["sessions"].([]any) {
		m := x.(map[string]any)
		byID[m["id"].(string)] = m
	}
	busy := byID["list-1"]
	if busy["state"] != "busy" || busy["pending_confirmations"] != float64(1) || busy["title"] != "note buy milk" || busy["last_event_at"] == nil {
		t.Fatalf("busy session's item: %v", busy)
	}
	checkTime(t, busy["last_event_at"])
	idle := byID["list-0"]
	if idle["state"] != "idle" || idle["pending_confirmations"] != float64(0) || idle["last_event_at"] != nil || idle["title"] != nil {
		t.Fatalf("idle session's item: %v", idle)
	}

	var paged []string
	q := "limit=2"
	for i := 0; ; i++ {
		page := s.must(200, "GET", "/api/sessions?"+q, "", nil)
		list := page["sessions"].([]any)
		if len(list) > 2 {
			t.Fatalf("a page of %d, limit 2", len(list))
		}
		for _, x := range list {
			paged = append(paged, x.(map[string]any)["id"].(string))
		}
		if i == 0 {
			s.must(201, "POST", "/api/sessions", "", map[string]any{"id": "list-new"})
		}
		next, _ := page["next"].(string)
		if next == "" {
			break
		}
		q = "limit=2&after=" + url.QueryEscape(next)
	}
	// Sessions created together may share a time: ids break the tie,
	// newest first means the highest id first.
	if fmt.Sprint(paged) != "[list-4 list-3 list-2 list-1 list-0]" {
		t.Fatalf("pages = %v", paged)
	}
	for q, param := range map[string]string{"limit=0": "limit", "limit=x": "limit", "limit=-1": "limit", "after=nope": "after", "after=": ""} {
		r := s.do("GET", "/api/sessions?"+q, "", nil)
		if param == "" {
			if r.status != 200 {
				t.Fatalf("GET ?%s: %d %s", q, r.status, r.body)
			}
			continue
		}
		if r.status != 400 || r.errorParam(t) != param {
			t.Fatalf("GET ?%s: %d %s, want 400 with param %q", q, r.status, r.body, param)
		}
	}
	if n := len(s.must(200, "GET", "/api/sessions?limit=5000", "", nil)["sessions"].([]any)); n != 6 {
		t.Fatalf("limit above the maximum: %d sessions, want all 6", n)
	}
}
