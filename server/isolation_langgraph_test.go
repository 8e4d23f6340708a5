package server_test

import (
	"strings"
	"testing"
)

// langgraphCases are the isolation matrix's cases for LangGraph's Agent
// Server API at /langgraph (protocol/langgraph): bob names alice's sessions
// as threads, her runs as runs (in her thread and in his own), her calls in
// a command's resume and her note ids as his notes', and is answered as for
// a random id of the same kind, with nothing of alice's changed. Creating a
// thread with an id alice has (threads.create, a run with if_not_exists
// create) cannot answer as for a free id, which bob gets: those cases are
// checked on their own — alice's ids answer alike, whichever it is.
func langgraphCases(t *testing.T, m *matrix, a aliceIDs, sessions []struct{ kind, id string }, runsOf []struct{ kind, session, run string },
	calls []struct{ kind, id string }, sups []struct{ kind, id string }) map[string]func() {
	input := `"input":{"messages":[{"type":"human","content":"hi"}]}`
	alike := func(what string, status int, send func(id string) reply) {
		var first string
		for _, ss := range sessions {
			r := send(ss.id)
			if r.status != status || r.json(t)["detail"] == nil {
				t.Fatalf("%s alice's %s: %d %s", what, ss.kind, r.status, r.body)
			}
			if norm := m.normal("/langgraph "+what, r.body, ss.id, "", request{}); first == "" {
				first = norm
			} else if norm != first {
				t.Fatalf("%s alice's threads: answers differ:\n%s\n%s", what, first, norm)
			}
		}
	}
	open := func(route string) func() {
		return func() {
			method, path, _ := strings.Cut(route, " ")
			body := ""
			if method == "POST" {
				body = `{}`
			}
			r := m.send(bob, request{method: method, path: path, body: body})
			if r.status != 200 {
				t.Fatalf("bob %s: %d %s", route, r.status, r.body)
			}
			m.noLeak(route, r)
		}
	}
	perThread := func(what, method, suffix, body string) func() {
		return func() {
			for _, ss := range sessions {
				m.pair("/langgraph "+what+" of a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: method, path: "/langgraph/threads/" + x + suffix, body: body}
				})
			}
		}
	}
	perRun := func(what, method, suffix string) func() {
		return func() {
			for _, r := range runsOf {
				m.pair("/langgraph "+what+" a "+r.kind+" in its thread", r.session, func(x, _ string) request {
					return request{method: method, path: "/langgraph/threads/" + x + "/runs/" + r.run + suffix}
				})
				m.pair("/langgraph "+what+" a "+r.kind+" in bob's thread", r.run, func(x, b string) request {
					return request{method: method, path: "/langgraph/threads/" + b + "/runs/" + x + suffix}
				})
			}
		}
	}
	runs := func(suffix string) func() {
		return func() {
			perThread("run"+suffix+" in", "POST", "/runs"+suffix, `{"assistant_id":"default",`+input+`}`)()
			perThread("resume"+suffix+" in", "POST", "/runs"+suffix, `{"assistant_id":"default","command":{"resume":{"`+a.pending+`":{"allow":true}}}}`)()
			for _, c := range calls {
				m.pair("/langgraph bob resumes"+suffix+" a "+c.kind+" in his thread", c.id, func(x, b string) request {
					return request{method: "POST", path: "/langgraph/threads/" + b + "/runs" + suffix, body: `{"assistant_id":"default","command":{"resume":{"` + x + `":{"allow":true}}}}`}
				})
			}
			alike("bob runs"+suffix+" (if_not_exists create) in", 404, func(id string) reply {
				return m.send(bob, request{method: "POST", path: "/langgraph/threads/" + id + "/runs" + suffix, body: `{"assistant_id":"default","if_not_exists":"create",` + input + `}`})
			})
		}
	}
	return map[string]func(){
		"GET /langgraph/info":                           open("GET /langgraph/info"),
		"POST /langgraph/assistants/search":             open("POST /langgraph/assistants/search"),
		"GET /langgraph/assistants/{assistant}":         open("GET /langgraph/assistants/default"),
		"GET /langgraph/assistants/{assistant}/schemas": open("GET /langgraph/assistants/default/schemas"),
		"POST /langgraph/threads": func() {
			alike("bob creates a thread with the id of", 409, func(id string) reply {
				return m.send(bob, request{method: "POST", path: "/langgraph/threads", body: `{"thread_id":"` + id + `","if_exists":"do_nothing"}`})
			})
		},
		"POST /langgraph/threads/search": func() {
			for _, ss := range sessions {
				m.pair("/langgraph search by the id of a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/langgraph/threads/search", body: `{"ids":["` + x + `"]}`}
				})
			}
			open("POST /langgraph/threads/search")()
		},
		"GET /langgraph/threads/{thread}":                    perThread("GET", "GET", "", ""),
		"PATCH /langgraph/threads/{thread}":                  perThread("PATCH", "PATCH", "", `{"metadata":{"owner":"bob"}}`),
		"DELETE /langgraph/threads/{thread}":                 perThread("DELETE", "DELETE", "", ""),
		"GET /langgraph/threads/{thread}/state":              perThread("state", "GET", "/state", ""),
		"GET /langgraph/threads/{thread}/state/{checkpoint}": perThread("state at 2", "GET", "/state/2", ""),
		"POST /langgraph/threads/{thread}/history":           perThread("history", "POST", "/history", `{"limit":5}`),
		"POST /langgraph/threads/{thread}/runs":              runs(""),
		"POST /langgraph/threads/{thread}/runs/stream":       runs("/stream"),
		"POST /langgraph/threads/{thread}/runs/wait":         runs("/wait"),
		"GET /langgraph/threads/{thread}/runs":               perThread("runs", "GET", "/runs", ""),
		"GET /langgraph/threads/{thread}/runs/{run}":         perRun("GET", "GET", ""),
		"GET /langgraph/threads/{thread}/runs/{run}/join":    perRun("join", "GET", "/join"),
		"GET /langgraph/threads/{thread}/runs/{run}/stream":  perRun("joinStream", "GET", "/stream"),
		"POST /langgraph/threads/{thread}/runs/{run}/cancel": perRun("cancel", "POST", "/cancel?action=interrupt"),
		"GET /langgraph/threads/{thread}/stream":             perThread("thread stream", "GET", "/stream", ""),
		"POST /langgraph/threads/{thread}/commands":          perThread("input.inject", "POST", "/commands", `{"id":1,"method":"input.inject","params":{"namespace":[],"message":{"role":"user","content":"bob's note"}}}`),
		"POST /langgraph/threads/{thread}/notes": func() {
			perThread("note", "POST", "/notes", `{"text":"bob's note"}`)()
			for _, sup := range sups {
				m.pair("/langgraph bob's note with the id of a "+sup.kind, sup.id, func(x, b string) request {
					return request{method: "POST", path: "/langgraph/threads/" + b + "/notes", body: `{"text":"bob's note","id":"` + x + `"}`}
				})
			}
		},
	}
}
