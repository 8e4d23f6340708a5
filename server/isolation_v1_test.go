package server_test

import (
	"strings"
	"testing"
)

// v1Cases are the isolation matrix's cases for the Claude Managed Agents
// sessions API at /v1 (protocol/anthropic): bob names alice's sessions,
// runs, calls and notes through the protocol, and is answered as for a
// random id of the same kind, with nothing of alice's changed.
func v1Cases(t *testing.T, m *matrix, a aliceIDs, sessions []struct{ kind, id string }, runsOf []struct{ kind, session, run string },
	calls []struct{ kind, id string }, sups []struct{ kind, id string }) map[string]func() {
	batch := func(events ...string) string { return `{"events":[` + strings.Join(events, ",") + `]}` }
	text := `"content":[{"type":"text","text":"hi"}]`
	eventBodies := map[string]string{
		"user.message":           batch(`{"type":"user.message",` + text + `}`),
		"user.message when_busy": batch(`{"type":"user.message",` + text + `,"when_busy":"rollback"}`),
		"user.message client_id": batch(`{"type":"user.message",` + text + `,"client_id":"` + a.clientID + `"}`),
		"user.interrupt":         batch(`{"type":"user.interrupt"}`),
		"user.interrupt run":     batch(`{"type":"user.interrupt","run_id":"` + a.waiting + `"}`),
		"user.supplement":        batch(`{"type":"user.supplement","text":"bob's note","id":"` + a.queuedSup + `"}`),
		"user.tool_confirmation": batch(`{"type":"user.tool_confirmation","tool_use_id":"` + a.pending + `","result":"allow"}`),
		"system.message":         batch(`{"type":"system.message",` + text + `}`),
	}
	// threadCase names alice's sessions as threads: each as its own primary
	// thread, each as a thread of bob's session, and random threads of
	// hers — answered as for random ids.
	threadCase := func(method, suffix string) func() {
		return func() {
			for _, ss := range sessions {
				m.pair("/v1 "+method+" thread"+suffix+" of a "+ss.kind+" as its primary thread", ss.id, func(x, _ string) request {
					return request{method: method, path: "/v1/sessions/" + x + "/threads/" + x + suffix}
				})
				m.pair("/v1 "+method+" thread"+suffix+": a "+ss.kind+" as a thread of bob's session", ss.id, func(x, b string) request {
					return request{method: method, path: "/v1/sessions/" + b + "/threads/" + x + suffix}
				})
				m.pair("/v1 "+method+" thread"+suffix+": a "+ss.kind+" with a thread of bob's", ss.id, func(x, b string) request {
					return request{method: method, path: "/v1/sessions/" + x + "/threads/" + b + suffix}
				})
			}
		}
	}
	return map[string]func(){
		"POST /v1/sessions": func() {
			r := m.send(bob, request{method: "POST", path: "/v1/sessions", body: `{"agent":"default","environment_id":"","metadata":{"parent":"` + a.root + `"}}`})
			if r.status != 200 {
				t.Fatalf("bob creates a session through /v1: %d %s", r.status, r.body)
			}
			if _, hers := m.ids[r.json(t)["id"].(string)]; hers {
				t.Fatalf("bob's new session: %s", r.body)
			}
		},
		"GET /v1/sessions": func() {
			r := m.send(bob, request{method: "GET", path: "/v1/sessions?include_archived=true"})
			if r.status != 200 {
				t.Fatalf("bob lists through /v1: %d %s", r.status, r.body)
			}
			m.noLeak("bob's /v1 list", r)
		},
		"GET /v1/sessions/{id}": func() {
			for _, ss := range sessions {
				m.pair("/v1 GET a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "GET", path: "/v1/sessions/" + x} })
			}
		},
		"POST /v1/sessions/{id}": func() {
			for _, ss := range sessions {
				for _, body := range []string{`{"title":"bob's"}`, `{"metadata":{"k":"bob","gone":null}}`, `{"title":5}`} {
					m.pair("/v1 update "+body+" a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "POST", path: "/v1/sessions/" + x, body: body}
					})
				}
			}
		},
		"POST /v1/sessions/{id}/archive": func() {
			for _, ss := range sessions {
				m.pair("/v1 archive a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "POST", path: "/v1/sessions/" + x + "/archive"} })
			}
		},
		"DELETE /v1/sessions/{id}": func() {
			for _, ss := range sessions {
				m.pair("/v1 DELETE a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "DELETE", path: "/v1/sessions/" + x} })
			}
		},
		"POST /v1/sessions/{id}/events": func() {
			for _, ss := range sessions {
				for name, body := range eventBodies {
					m.pair("/v1 "+name+" to a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "POST", path: "/v1/sessions/" + x + "/events", body: body}
					})
				}
			}
			for _, r := range runsOf {
				m.pair("/v1 bob stops a "+r.kind, r.run, func(x, b string) request {
					return request{method: "POST", path: "/v1/sessions/" + b + "/events", body: batch(`{"type":"user.interrupt","run_id":"` + x + `"}`)}
				})
			}
			for _, c := range calls {
				for _, result := range []string{"allow", "deny"} {
					m.pair("/v1 bob answers ("+result+") a "+c.kind, c.id, func(x, b string) request {
						return request{method: "POST", path: "/v1/sessions/" + b + "/events",
							body: batch(`{"type":"user.tool_confirmation","tool_use_id":"` + x + `","result":"` + result + `"}`)}
					})
				}
			}
			for _, sup := range sups {
				m.pair("/v1 bob pushes a note with the id of a "+sup.kind, sup.id, func(x, b string) request {
					return request{method: "POST", path: "/v1/sessions/" + b + "/events", body: batch(`{"type":"user.supplement","text":"bob's note","id":"` + x + `"}`)}
				})
			}
		},
		"GET /v1/sessions/{id}/events": func() {
			for _, ss := range sessions {
				for _, q := range []string{"", "?limit=5&order=desc", "?order=up"} {
					m.pair("/v1 GET the log"+q+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/v1/sessions/" + x + "/events" + q}
					})
				}
			}
		},
		"GET /v1/sessions/{id}/threads": func() {
			for _, ss := range sessions {
				m.pair("/v1 list the threads of a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "GET", path: "/v1/sessions/" + x + "/threads"}
				})
			}
		},
		"GET /v1/sessions/{id}/threads/{thread}":          threadCase("GET", ""),
		"POST /v1/sessions/{id}/threads/{thread}/archive": threadCase("POST", "/archive"),
		"GET /v1/sessions/{id}/threads/{thread}/events":   threadCase("GET", "/events"),
		"GET /v1/sessions/{id}/threads/{thread}/stream":   threadCase("GET", "/stream?after=0"),
		"GET /v1/sessions/{id}/events/stream": func() {
			for _, ss := range sessions {
				for _, q := range []string{"", "?after=2", "?event_deltas[]=agent.message"} {
					m.pair("/v1 stream"+q+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/v1/sessions/" + x + "/events/stream" + q}
					})
				}
			}
		},
	}
}
