package server_test

import (
	"testing"
)

// aguiCases are the isolation matrix's cases for AG-UI at /ag-ui
// (protocol/agui): bob names alice's sessions as threads, her calls as
// interrupts and her client id as a runId, and is answered as for a random
// id of the same kind, with nothing of alice's changed. A run (or a cancel
// by runId) in a thread id bob does not own creates that thread for him
// when the id is free, so those cases are checked on their own: alice's
// ids answer not found, alike for each.
func aguiCases(t *testing.T, m *matrix, a aliceIDs, sessions []struct{ kind, id string }, calls []struct{ kind, id string }) map[string]func() {
	input := func(thread, runID, extra string) string {
		return `{"threadId":"` + thread + `","runId":"` + runID + `","messages":[{"id":"m1","role":"user","content":"hi"}]` + extra + `}`
	}
	resume := func(call string) string {
		return `,"resume":[{"interruptId":"` + call + `","status":"resolved","payload":{"approved":true}}]`
	}
	alike := func(what string, send func(id string) reply) {
		var first string
		for _, ss := range sessions {
			r := send(ss.id)
			if r.status != 404 || r.json(t)["code"] != "not_found" {
				t.Fatalf("%s alice's %s: %d %s", what, ss.kind, r.status, r.body)
			}
			if norm := m.normal("/ag-ui "+what, r.body, ss.id, "", request{}); first == "" {
				first = norm
			} else if norm != first {
				t.Fatalf("%s alice's threads: answers differ:\n%s\n%s", what, first, norm)
			}
		}
	}
	return map[string]func(){
		"POST /ag-ui/{agent}": func() {
			alike("bob runs in", func(id string) reply {
				return m.send(bob, request{method: "POST", path: "/ag-ui/default", body: input(id, "bob-run-1", "")})
			})
			for _, ss := range sessions {
				m.pair("/ag-ui resume in a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/ag-ui/default", body: input(x, "bob-run-2", resume(a.pending))}
				})
			}
			for _, c := range calls {
				m.pair("/ag-ui bob resumes a "+c.kind+" in his thread", c.id, func(x, b string) request {
					return request{method: "POST", path: "/ag-ui/default", body: input(b, "bob-run-3", resume(x))}
				})
			}
		},
		"POST /ag-ui/{agent}/threads/{thread}/runs/{run}/cancel": func() {
			alike("bob cancels in", func(id string) reply {
				return m.send(bob, request{method: "POST", path: "/ag-ui/default/threads/" + id + "/runs/bob-run-1/cancel"})
			})
			m.pair("/ag-ui bob cancels alice's client id in his thread", a.clientID, func(x, b string) request {
				return request{method: "POST", path: "/ag-ui/default/threads/" + b + "/runs/" + x + "/cancel"}
			})
		},
		"GET /ag-ui/{agent}/threads/{thread}/stream": func() {
			for _, ss := range sessions {
				for _, c := range []struct{ query, lastID string }{{"?follow=false", ""}, {"?after=2", ""}, {"", "1"}, {"?after=x", ""}} {
					m.pair("/ag-ui thread stream"+c.query+" Last-Event-ID "+c.lastID+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/ag-ui/default/threads/" + x + "/stream" + c.query, lastEventID: c.lastID}
					})
				}
			}
		},
		"POST /ag-ui/{agent}/threads/{thread}/notes": func() {
			for _, ss := range sessions {
				m.pair("/ag-ui note in a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/ag-ui/default/threads/" + x + "/notes", body: `{"text":"bob's note","id":"` + a.queuedSup + `"}`}
				})
			}
		},
	}
}
