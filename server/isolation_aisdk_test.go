package server_test

import (
	"testing"
)

// aisdkCases are the isolation matrix's cases for the AI SDK's UI message
// stream at /ai-sdk (protocol/aisdk): bob names alice's chats (her
// sessions), calls, notes and client id through the protocol, and is
// answered as for a random id of the same kind, with nothing of alice's
// changed. A user message (or a stop by message id) to a chat id bob does
// not own creates that chat for him when the id is free, so those cases are
// checked on their own: alice's ids answer not found, alike for each.
func aisdkCases(t *testing.T, m *matrix, a aliceIDs, sessions []struct{ kind, id string }, calls []struct{ kind, id string }, sups []struct{ kind, id string }) map[string]func() {
	user := `{"id":"bob-msg-1","role":"user","parts":[{"type":"text","text":"hi"}]}`
	chat := func(id, messages, trigger string) string {
		return `{"id":"` + id + `","messages":[` + messages + `],"trigger":"` + trigger + `"}`
	}
	approval := func(call, approved string) string {
		return `{"id":"run_x","role":"assistant","parts":[{"type":"tool-write_note","toolCallId":"` + call + `","state":"approval-responded","approval":{"id":"` + call + `","approved":` + approved + `}}]}`
	}
	return map[string]func(){
		"POST /ai-sdk/chat": func() {
			var first string
			for _, ss := range sessions {
				r := m.send(bob, request{method: "POST", path: "/ai-sdk/chat", body: chat(ss.id, user, "submit-message")})
				if r.status != 404 || r.json(t)["error"].(map[string]any)["code"] != "not_found" {
					t.Fatalf("bob sends to alice's %s as a chat: %d %s", ss.kind, r.status, r.body)
				}
				if norm := m.normal("/ai-sdk chat", r.body, ss.id, "", request{}); first == "" {
					first = norm
				} else if norm != first {
					t.Fatalf("bob sending to alice's chats: answers differ:\n%s\n%s", first, norm)
				}
				m.pair("/ai-sdk regenerate a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/ai-sdk/chat", body: chat(x, user, "regenerate-message")}
				})
				m.pair("/ai-sdk answer an approval in a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/ai-sdk/chat", body: chat(x, approval(a.pending, "true"), "submit-message")}
				})
			}
			for _, c := range calls {
				for _, allow := range []string{"true", "false"} {
					m.pair("/ai-sdk bob answers ("+allow+") a "+c.kind+" in his chat", c.id, func(x, b string) request {
						return request{method: "POST", path: "/ai-sdk/chat", body: chat(b, approval(x, allow), "submit-message")}
					})
				}
			}
		},
		"GET /ai-sdk/chat/{id}/stream": func() {
			for _, ss := range sessions {
				for _, q := range []string{"", "?after=0", "?after=2", "?after=x"} {
					m.pair("/ai-sdk resume the stream"+q+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/ai-sdk/chat/" + x + "/stream" + q}
					})
				}
			}
		},
		"POST /ai-sdk/chat/{id}/stop": func() {
			var first string
			for _, ss := range sessions {
				// A stop by message id creates a free chat id (its message
				// may come after it): hers are not found, alike.
				r := m.send(bob, request{method: "POST", path: "/ai-sdk/chat/" + ss.id + "/stop", body: `{"message_id":"` + a.clientID + `"}`})
				if r.status != 404 || r.json(t)["error"].(map[string]any)["code"] != "not_found" {
					t.Fatalf("bob stops by message id in alice's %s: %d %s", ss.kind, r.status, r.body)
				}
				if norm := m.normal("/ai-sdk stop", r.body, ss.id, "", request{}); first == "" {
					first = norm
				} else if norm != first {
					t.Fatalf("bob stopping in alice's chats: answers differ:\n%s\n%s", first, norm)
				}
				for _, body := range []string{`{}`, `{"mode":"cancel"}`} {
					m.pair("/ai-sdk stop "+body+" in a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "POST", path: "/ai-sdk/chat/" + x + "/stop", body: body}
					})
				}
			}
			m.pair("/ai-sdk bob stops alice's client id in his chat", a.clientID, func(x, b string) request {
				return request{method: "POST", path: "/ai-sdk/chat/" + b + "/stop", body: `{"message_id":"` + x + `"}`}
			})
		},
		"POST /ai-sdk/chat/{id}/notes": func() {
			for _, ss := range sessions {
				m.pair("/ai-sdk note to a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "POST", path: "/ai-sdk/chat/" + x + "/notes", body: `{"text":"bob's note"}`}
				})
			}
			for _, sup := range sups {
				m.pair("/ai-sdk bob's note with the id of a "+sup.kind, sup.id, func(x, b string) request {
					return request{method: "POST", path: "/ai-sdk/chat/" + b + "/notes", body: `{"text":"bob's note","id":"` + x + `"}`}
				})
			}
		},
	}
}
