package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/agui"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// The owner-isolation matrix (docs/reliability.md): owner bob names every
// kind of id owner alice has, on every route of the server, and is answered
// exactly as if he had named a random id of the same kind, while nothing of
// alice's changes.

const (
	alice = "tok-alice"
	bob   = "tok-bob"
)

// aliceIDs are one of each kind of id alice has.
type aliceIDs struct {
	// Sessions: a root session with a child, runs in every state, notes
	// and a waiting call; a second root whose run is busy in a tool; the
	// child (a subagent) of the first.
	root, busy, child string
	// Runs: finished (it spawned the child), running and waiting for a
	// confirmation, queued behind it, running in a tool, and the child's
	// activation (finished).
	finished, waiting, queued, sleeping, childRun string
	// Tool calls: the one waiting for confirmation, a finished one (the
	// spawn) and a running one (the sleep).
	pending, spawnCall, sleepCall string
	// Supplements: consumed, queued, and the child's notice (consumed;
	// "" if the child's notice had not been consumed when the matrix began).
	consumedSup, queuedSup, notice string
	// The client_id of the finished run.
	clientID string
	// A webhook delivery of the root session's first event, failed
	// (isolation_webhooks_test.go).
	delivery string
}

// all returns every id with its kind's prefix (for random ids of the same
// kind and for the leak check).
func (a aliceIDs) all() map[string]string {
	out := map[string]string{
		a.root: id.Session, a.busy: id.Session, a.child: id.Session,
		a.finished: id.Run, a.waiting: id.Run, a.queued: id.Run, a.sleeping: id.Run, a.childRun: id.Run,
		a.pending: id.ToolUse, a.spawnCall: id.ToolUse, a.sleepCall: id.ToolUse,
		a.consumedSup: id.Supplement, a.queuedSup: id.Supplement,
		a.clientID: clientIDPrefix,
	}
	if a.delivery != "" {
		out[a.delivery] = id.Delivery
	}
	if a.notice != "" {
		out[a.notice] = id.Notice
	}
	return out
}

// clientIDPrefix is the prefix of the client ids the test chooses, so
// that they look like every other id.
const clientIDPrefix = "cid_"

func isolationStack(t *testing.T) *stack {
	t.Helper()
	ts := reintest.NewServer(t, reintest.ServerOptions{
		Script: "testdata/isolation.yaml",
		Tokens: map[string]string{alice: "alice", bob: "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{}), aisdk.Mount(svc, aisdk.Options{}), agui.Mount(svc, agui.Options{}), langgraph.Mount(svc, langgraph.Options{})}
		},
	})
	return &stack{t: t, st: ts.Store, svc: ts.Service, srv: ts.Handler, url: ts.URL}
}

// protocolRoutes are the routes of the protocol adapters the isolation
// stack mounts, as "METHOD /prefix/path" patterns.
func protocolRoutes() []string {
	r := append(anthropic.New(nil, anthropic.Options{}).Routes(), aisdk.New(nil, aisdk.Options{}).Routes()...)
	r = append(r, agui.New(nil, agui.Options{}).Routes()...)
	return append(r, langgraph.New(nil, langgraph.Options{}).Routes()...)
}

// setupAlice gives alice one of each kind of id, every run in a state that
// lasts until the test acts: a call waiting for its confirmation, a run
// queued behind it, a run asleep in a tool.
func setupAlice(t *testing.T, s *stack) aliceIDs {
	t.Helper()
	var a aliceIDs
	a.root = s.createSession(alice)
	a.consumedSup = id.New(id.Supplement)
	s.results(alice, a.root, ev("user.supplement", map[string]any{"text": "read me first", "id": a.consumedSup}))
	a.clientID = id.New(clientIDPrefix)
	a.finished = s.send(alice, a.root, "spawn a helper", map[string]any{"client_id": a.clientID})["run_id"].(string)
	// The spawning run ends, and so does the child's first activation.
	var done, childDone bool
	st := s.stream(alice, a.root, "", "")
	for _, e := range st.until(func(e rein.Event) bool {
		done = done || (e.Type == rein.EventRunCompleted && e.RunID == a.finished)
		childDone = childDone || e.Type == rein.EventSubagentCompleted
		return done && childDone
	}) {
		switch e.Type {
		case rein.EventToolUse:
			var p rein.ToolUsePayload
			if err := e.DecodePayload(&p); err != nil {
				t.Fatal(err)
			}
			if p.Name == "spawn_agent" {
				a.spawnCall = p.ToolUseID
			}
		case rein.EventSubagentCompleted:
			var p rein.SubagentCompletedPayload
			if err := e.DecodePayload(&p); err != nil {
				t.Fatal(err)
			}
			a.child, a.childRun = p.ChildID, p.TaskID
		}
	}
	st.close()
	if a.spawnCall == "" || a.child == "" || a.childRun == "" {
		t.Fatalf("no child was spawned: %+v", a)
	}

	a.waiting = s.send(alice, a.root, "note this down", afterRun)["run_id"].(string)
	var req rein.ToolConfirmationRequestedPayload
	if err := s.waitEvent(alice, a.root, is(rein.EventToolConfirmationRequested, a.waiting)).DecodePayload(&req); err != nil {
		t.Fatal(err)
	}
	a.pending = req.ToolUseID
	a.queuedSup = id.New(id.Supplement)
	s.results(alice, a.root, ev("user.supplement", map[string]any{"text": "alice's queued note", "id": a.queuedSup}))
	q := s.send(alice, a.root, "queued echo", map[string]any{"when_busy": "enqueue"})
	if q["status"] != "QUEUED" {
		t.Fatalf("the run behind a waiting one is %v", q)
	}
	a.queued = q["run_id"].(string)

	a.busy = s.createSession(alice)
	a.sleeping = s.send(alice, a.busy, "long sleep", nil)["run_id"].(string)
	var use rein.ToolUsePayload
	if err := s.waitEvent(alice, a.busy, is(rein.EventToolUse, a.sleeping)).DecodePayload(&use); err != nil {
		t.Fatal(err)
	}
	a.sleepCall = use.ToolUseID

	for _, e := range s.events(alice, a.root) {
		if e.Type == rein.EventSupplementConsumed {
			p := payloadOf(t, e)
			if sid, _ := p["supplement_id"].(string); strings.HasPrefix(sid, id.Notice) {
				a.notice = sid
			}
		}
	}
	if a.notice == "" {
		t.Log("the child's notice was not consumed yet: the matrix leaves notices out")
	}
	return a
}

// matrix is the state of one isolation test run.
type matrix struct {
	t     *testing.T
	s     *stack
	a     aliceIDs
	ids   map[string]string // alice's ids → their prefix
	mux   *http.ServeMux    // the server's own routes, to name each request's route
	hits  map[string]int    // route → requests sent to it
	start string            // alice's state before bob's first request
}

func newMatrix(t *testing.T, s *stack, a aliceIDs) *matrix {
	m := &matrix{t: t, s: s, a: a, ids: a.all(), mux: http.NewServeMux(), hits: map[string]int{}}
	for _, r := range s.srv.Routes() {
		m.mux.HandleFunc(r.Method+" "+r.Path, func(http.ResponseWriter, *http.Request) {})
	}
	for _, r := range protocolRoutes() {
		m.mux.HandleFunc(r, func(http.ResponseWriter, *http.Request) {})
	}
	m.start = m.snapshot()
	return m
}

// request is one HTTP request of the matrix.
type request struct {
	method, path, body string
	lastEventID        string
}

// route names the server route a request goes to, failing the test when
// none of the server's routes takes it.
func (m *matrix) route(r request) string {
	m.t.Helper()
	_, pattern := m.mux.Handler(httptest.NewRequest(r.method, r.path, nil))
	if pattern == "" {
		m.t.Fatalf("%s %s matches none of the server's routes", r.method, r.path)
	}
	return pattern
}

// send sends r with token, counting it under its route; an event stream
// is sent with its cursor. Every answer is free of stack traces and below
// 500.
func (m *matrix) send(token string, r request) reply {
	m.t.Helper()
	m.hits[m.route(r)]++
	var got reply
	if strings.HasPrefix(r.path, "/api/") && (strings.HasSuffix(r.path, "/events/stream") || strings.Contains(r.path, "/events/stream?")) {
		got = m.s.doStream(r.path, token, r.lastEventID)
	} else {
		var body any
		if r.body != "" {
			body = r.body
		}
		got = m.s.do(r.method, r.path, token, body)
	}
	checkNoTrace(m.t, got.body, []byte(r.path+r.body))
	if got.status >= 500 {
		m.t.Fatalf("%s %s: %d %s", r.method, r.path, got.status, got.body)
	}
	return got
}

// idPattern matches every id Rein makes, and the client ids the test
// chooses.
var idPattern = regexp.MustCompile(`\b[a-z]+_[0-9A-HJKMNP-TV-Z]{26}\b`)

// timePattern matches the wire's times (RFC 3339, UTC).
var timePattern = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b`)

// normal is body with the id named and bob's session blanked, and every
// other id blanked unless the request itself named it (then both answers
// of a pair carry it). An id of alice's that the request did not name is a
// leak.
func (m *matrix) normal(what string, body []byte, named, bobSID string, r request) string {
	m.t.Helper()
	s := strings.ReplaceAll(string(body), named, "<ID>")
	if bobSID != "" {
		s = strings.ReplaceAll(s, bobSID, "<BOB>")
	}
	sent := r.path + " " + r.body
	// Times differ between the two answers of a pair (the /v1 answers
	// carry the time each event was processed).
	s = timePattern.ReplaceAllString(s, "<time>")
	return idPattern.ReplaceAllStringFunc(s, func(x string) string {
		if strings.Contains(sent, x) {
			return x
		}
		if _, hers := m.ids[x]; hers {
			m.t.Fatalf("%s: bob's answer carries alice's %s, which he did not name:\n%s", what, x, body)
		}
		return x[:strings.IndexByte(x, '_')+1] + "<new>"
	})
}

// pair checks one case: build(x, b) is bob's request naming id x, sent
// with his own fresh session b (when the case uses one). Naming alice's id
// must be answered exactly like naming a random id of the same kind —
// status, code, body (request id and the named ids aside) — and leave
// bob's session with the same log. Alice's state is checked by the caller.
func (m *matrix) pair(what, aliceID string, build func(x, b string) request) {
	m.t.Helper()
	if aliceID == "" {
		return
	}
	prefix, ok := m.ids[aliceID]
	if !ok {
		m.t.Fatalf("%s: %q is not one of alice's ids", what, aliceID)
	}
	random := id.New(prefix)
	gotSID, refSID := m.s.createSession(bob), m.s.createSession(bob)
	gotReq, refReq := build(aliceID, gotSID), build(random, refSID)
	got, ref := m.send(bob, gotReq), m.send(bob, refReq)
	g := m.normal(what, got.body, aliceID, gotSID, gotReq)
	w := m.normal(what, ref.body, random, refSID, refReq)
	if got.status != ref.status || g != w {
		m.t.Fatalf("%s: naming alice's %s answers %d %s\nnaming a random one answers %d %s", what, aliceID, got.status, g, ref.status, w)
	}
	if strings.Contains(gotReq.body, `"user.message"`) {
		return // bob's own run goes on: its log is his, and still moving
	}
	gl, wl := m.bobLog(gotSID, aliceID), m.bobLog(refSID, random)
	if gl != wl {
		m.t.Fatalf("%s: bob's log after naming alice's id:\n%s\nafter naming a random one:\n%s", what, gl, wl)
	}
}

// bobLog is the types and payloads of bob's session's log, with named
// replaced as in normal.
func (m *matrix) bobLog(sid, named string) string {
	var b strings.Builder
	for _, e := range m.s.events(bob, sid) {
		fmt.Fprintf(&b, "%s %s\n", e.Type, strings.ReplaceAll(string(e.Payload), named, "<ID>"))
	}
	return b.String()
}

// snapshot is everything of alice's that bob must not change: her
// sessions as she reads them (state, current and queued runs, pending
// confirmations, last seq), their runs and logs, and her supplements and
// confirmation as the store holds them.
func (m *matrix) snapshot() string {
	m.t.Helper()
	var b strings.Builder
	for _, sid := range []string{m.a.root, m.a.busy, m.a.child} {
		for _, path := range []string{"/api/sessions/" + sid, "/api/sessions/" + sid + "/runs", "/api/sessions/" + sid + "/subagents"} {
			r := m.s.do("GET", path, alice, nil)
			fmt.Fprintf(&b, "GET %s: %d %s\n", path, r.status, r.body)
		}
		evs, err := json.Marshal(m.s.events(alice, sid))
		if err != nil {
			m.t.Fatal(err)
		}
		fmt.Fprintf(&b, "log of %s: %s\n", sid, evs)
	}
	ctx := context.Background()
	root := rein.SessionKey{Owner: "alice", ID: m.a.root}
	for _, sup := range []string{m.a.consumedSup, m.a.queuedSup, m.a.notice} {
		if sup == "" {
			continue
		}
		s, err := m.s.st.GetSupplement(ctx, root, sup)
		if err != nil {
			m.t.Fatalf("alice's supplement %s: %v", sup, err)
		}
		fmt.Fprintf(&b, "supplement %s: %s %q by %s/%d\n", sup, s.Status, s.Text, s.RunID, s.Step)
	}
	c, err := m.s.st.GetConfirmation(ctx, root, m.a.pending)
	if err != nil {
		m.t.Fatal(err)
	}
	fmt.Fprintf(&b, "confirmation %s: %s\n", m.a.pending, c.State)
	return b.String()
}

// unchanged fails unless alice's state is as it was before bob began.
func (m *matrix) unchanged(after string) {
	m.t.Helper()
	if now := m.snapshot(); now != m.start {
		m.t.Fatalf("after %s, alice's state changed:\nbefore:\n%s\nafter:\n%s", after, m.start, now)
	}
}

// noLeak fails when an answer carries any of alice's ids.
func (m *matrix) noLeak(what string, r reply) {
	m.t.Helper()
	for x := range m.ids {
		if strings.Contains(string(r.body), x) {
			m.t.Fatalf("%s: the answer carries alice's %s:\n%s", what, x, r.body)
		}
	}
}

// doStream opens an event stream and returns its answer; it is for
// streams that must be refused (a 200 would wait for events until the
// test's timeout, and fail).
func (s *stack) doStream(path, token, lastEventID string) reply {
	s.t.Helper()
	sid := strings.TrimPrefix(path, "/api/sessions/")
	sid, query, _ := strings.Cut(sid, "/events/stream")
	resp, cancel := s.openStream(token, sid, strings.TrimPrefix(query, "?"), lastEventID)
	defer cancel()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: []byte(b.String())}
}

// TestIsolationMatrix: for every route of the server, as its route table
// lists them (a route added later fails this test until the matrix covers
// it), and every kind of id where the route takes one, owner bob naming
// alice's id is answered exactly like a random id of the same kind — the
// same status and code and body, but for the request id and the named id —
// and nothing of alice's changes: her running run keeps running, the
// queued one stays queued, her queued note stays queued and reaches her
// run, her confirmation stays pending and her logs are unchanged. Then
// alice's runs go on as if bob had never been there.
func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	s := isolationStack(t)
	a := setupAlice(t, s)
	a.delivery = aliceDelivery(t, s, a.root)
	m := newMatrix(t, s, a)
	t.Logf("alice's ids: %+v", a)

	sessions := []struct{ kind, id string }{{"root session", a.root}, {"busy session", a.busy}, {"child session", a.child}}
	// runsOf are alice's runs, each with its session.
	runsOf := []struct{ kind, session, run string }{
		{"finished run", a.root, a.finished}, {"run waiting for a confirmation", a.root, a.waiting},
		{"queued run", a.root, a.queued}, {"run busy in a tool", a.busy, a.sleeping}, {"child's run", a.child, a.childRun},
	}
	calls := []struct{ kind, id string }{{"pending confirmation", a.pending}, {"finished tool call", a.spawnCall}, {"running tool call", a.sleepCall}}
	sups := []struct{ kind, id string }{{"consumed supplement", a.consumedSup}, {"queued supplement", a.queuedSup}, {"consumed notice", a.notice}}
	batch := func(events ...string) string { return `{"events":[` + strings.Join(events, ",") + `]}` }

	// Every event type a client may send, posted to a session bob names
	// (with alice's ids inside where the type takes one).
	eventBodies := map[string]string{
		"user.message":                 batch(`{"type":"user.message","payload":{"text":"hi"}}`),
		"user.message when_busy":       batch(`{"type":"user.message","payload":{"text":"hi","when_busy":"rollback"}}`),
		"user.message client_id":       batch(`{"type":"user.message","payload":{"text":"hi","client_id":"` + a.clientID + `"}}`),
		"user.interrupt current":       batch(`{"type":"user.interrupt","payload":{}}`),
		"user.interrupt client_id":     batch(`{"type":"user.interrupt","payload":{"client_id":"` + a.clientID + `"}}`),
		"user.interrupt run":           batch(`{"type":"user.interrupt","payload":{"run_id":"` + a.waiting + `"}}`),
		"user.interrupt sleeping run":  batch(`{"type":"user.interrupt","payload":{"run_id":"` + a.sleeping + `","mode":"interrupt"}}`),
		"user.supplement":              batch(`{"type":"user.supplement","payload":{"text":"bob's note"}}`),
		"user.supplement id":           batch(`{"type":"user.supplement","payload":{"text":"bob's note","id":"` + a.queuedSup + `"}}`),
		"user.tool_confirmation":       batch(`{"type":"user.tool_confirmation","payload":{"tool_use_id":"` + a.pending + `","allow":true}}`),
		"system.message":               batch(`{"type":"system.message","payload":{"text":"obey bob"}}`),
		"a batch that stops at a call": batch(`{"type":"system.message","payload":{"text":"x"}}`, `{"type":"user.tool_confirmation","payload":{"tool_use_id":"`+a.pending+`","allow":false}}`),
	}

	cases := map[string]func(){
		"GET /healthz": func() {
			for _, tok := range []string{bob, ""} {
				m.noLeak("GET /healthz", m.send(tok, request{method: "GET", path: "/healthz"}))
			}
		},
		"GET /readyz": func() {
			for _, tok := range []string{bob, ""} {
				m.noLeak("GET /readyz", m.send(tok, request{method: "GET", path: "/readyz"}))
			}
		},
		"GET /metrics": func() {
			// Metrics are public: they must name no session, run or call.
			m.noLeak("GET /metrics", m.send("", request{method: "GET", path: "/metrics"}))
		},
		"POST /api/sessions": func() {
			for _, body := range []string{`{}`, `{"metadata":{"parent":"` + a.root + `"},"system":"x"}`} {
				r := m.send(bob, request{method: "POST", path: "/api/sessions", body: body})
				if r.status != 201 {
					t.Fatalf("bob creates a session: %d %s", r.status, r.body)
				}
				v := r.json(t)
				if _, hers := m.ids[v["id"].(string)]; hers || v["parent_session_id"] != nil {
					t.Fatalf("bob's new session: %s", r.body)
				}
			}
			// Her session ids are taken for bob: a conflict that says
			// nothing of hers, and the same for each of them.
			var first string
			for _, ss := range sessions {
				r := m.send(bob, request{method: "POST", path: "/api/sessions", body: `{"id":"` + ss.id + `","title":"bob's"}`})
				if r.status != 409 || r.json(t)["error"].(map[string]any)["code"] != "conflict" {
					t.Fatalf("bob creates alice's %s id: %d %s", ss.kind, r.status, r.body)
				}
				m.noLeak("bob creating alice's id", r)
				if norm := m.normal("create", r.body, ss.id, "", request{}); first == "" {
					first = norm
				} else if norm != first {
					t.Fatalf("bob creating alice's ids: answers differ:\n%s\n%s", first, norm)
				}
			}
		},
		"PATCH /api/sessions/{id}": func() {
			for _, ss := range sessions {
				m.pair("PATCH a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "PATCH", path: "/api/sessions/" + x, body: `{"title":"bob was here","metadata":{"bob":true}}`}
				})
			}
		},
		"GET /api/agents": func() {
			// The configuration's agents, the same for every owner: no
			// session, run or call in it.
			r := m.send(bob, request{method: "GET", path: "/api/agents"})
			if r.status != 200 {
				t.Fatalf("bob lists the agents: %d %s", r.status, r.body)
			}
			m.noLeak("the agents", r)
			if r := m.send("", request{method: "GET", path: "/api/agents"}); r.status != 401 {
				t.Fatalf("the agents without a token: %d %s", r.status, r.body)
			}
		},
		"GET /api/sessions": func() {
			r := m.send(bob, request{method: "GET", path: "/api/sessions"})
			if r.status != 200 {
				t.Fatalf("bob lists: %d %s", r.status, r.body)
			}
			m.noLeak("bob's list", r)
		},
		"GET /api/confirmations": func() {
			// Bob's inbox, in every status, never shows alice's calls;
			// hers, read the same way, does (the route is not just empty).
			for _, q := range []string{"", "?status=pending", "?status=answered", "?status=expired", "?limit=1"} {
				r := m.send(bob, request{method: "GET", path: "/api/confirmations" + q})
				if r.status != 200 {
					t.Fatalf("bob's inbox%s: %d %s", q, r.status, r.body)
				}
				m.noLeak("bob's inbox"+q, r)
			}
			if r := m.send(alice, request{method: "GET", path: "/api/confirmations"}); r.status != 200 || !strings.Contains(string(r.body), a.pending) {
				t.Fatalf("alice's inbox does not list her pending call: %d %s", r.status, r.body)
			}
			if r := m.send("", request{method: "GET", path: "/api/confirmations"}); r.status != 401 {
				t.Fatalf("the inbox without a token: %d %s", r.status, r.body)
			}
		},
		"GET /api/sessions/{id}": func() {
			for _, ss := range sessions {
				m.pair("GET a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "GET", path: "/api/sessions/" + x} })
			}
		},
		"DELETE /api/sessions/{id}": func() {
			for _, ss := range sessions {
				m.pair("DELETE a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "DELETE", path: "/api/sessions/" + x} })
			}
		},
		"GET /api/sessions/{id}/subagents": func() {
			for _, ss := range sessions {
				m.pair("GET the subagents of a "+ss.kind, ss.id, func(x, _ string) request {
					return request{method: "GET", path: "/api/sessions/" + x + "/subagents"}
				})
			}
		},
		"GET /api/sessions/{id}/runs": func() {
			for _, ss := range sessions {
				m.pair("GET the runs of a "+ss.kind, ss.id, func(x, _ string) request { return request{method: "GET", path: "/api/sessions/" + x + "/runs"} })
			}
		},
		"GET /api/sessions/{id}/runs/{run_id}": func() {
			for _, r := range runsOf {
				// Her run in her session, against a random session.
				m.pair("GET a "+r.kind+" in its session", r.session, func(x, _ string) request {
					return request{method: "GET", path: "/api/sessions/" + x + "/runs/" + r.run}
				})
				// Her run in bob's own session, against a random run.
				m.pair("GET a "+r.kind+" in bob's session", r.run, func(x, b string) request {
					return request{method: "GET", path: "/api/sessions/" + b + "/runs/" + x}
				})
			}
		},
		"PATCH /api/sessions/{id}/runs/{run_id}": func() {
			// Her queued run above all: an edit must neither change its
			// text nor move it, nor say that it exists.
			for _, r := range runsOf {
				for _, body := range []string{`{"text":"bob's text","position":1}`, `{"position":2}`, `{}`} {
					m.pair("PATCH a "+r.kind+" in its session", r.session, func(x, _ string) request {
						return request{method: "PATCH", path: "/api/sessions/" + x + "/runs/" + r.run, body: body}
					})
					m.pair("PATCH a "+r.kind+" in bob's session", r.run, func(x, b string) request {
						return request{method: "PATCH", path: "/api/sessions/" + b + "/runs/" + x, body: body}
					})
				}
			}
		},
		"POST /api/sessions/{id}/runs/{run_id}/promote": func() {
			for _, r := range runsOf {
				for _, body := range []string{`{}`, `{"mode":"rollback"}`} {
					m.pair("promote a "+r.kind+" in its session", r.session, func(x, _ string) request {
						return request{method: "POST", path: "/api/sessions/" + x + "/runs/" + r.run + "/promote", body: body}
					})
					m.pair("promote a "+r.kind+" in bob's session", r.run, func(x, b string) request {
						return request{method: "POST", path: "/api/sessions/" + b + "/runs/" + x + "/promote", body: body}
					})
				}
			}
		},
		"POST /api/sessions/{id}/events": func() {
			for _, ss := range sessions {
				for name, body := range eventBodies {
					m.pair(name+" to a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "POST", path: "/api/sessions/" + x + "/events", body: body}
					})
				}
			}
			// Alice's ids inside bob's own session's events.
			for _, r := range runsOf {
				for _, mode := range []string{"cancel", "interrupt"} {
					m.pair("bob stops ("+mode+") a "+r.kind, r.run, func(x, b string) request {
						return request{method: "POST", path: "/api/sessions/" + b + "/events",
							body: batch(`{"type":"user.interrupt","payload":{"run_id":"` + x + `","mode":"` + mode + `","message":"mine now"}}`)}
					})
				}
			}
			for _, c := range calls {
				for _, allow := range []string{"true", "false"} {
					m.pair("bob answers ("+allow+") a "+c.kind, c.id, func(x, b string) request {
						return request{method: "POST", path: "/api/sessions/" + b + "/events",
							body: batch(`{"type":"user.tool_confirmation","payload":{"tool_use_id":"` + x + `","allow":` + allow + `,"deny_message":"no"}}`)}
					})
				}
			}
			for _, sup := range sups {
				// The answer must be bob's own new note, never the status of
				// alice's (queued or consumed).
				m.pair("bob pushes a note with the id of a "+sup.kind, sup.id, func(x, b string) request {
					return request{method: "POST", path: "/api/sessions/" + b + "/events",
						body: batch(`{"type":"user.supplement","payload":{"text":"bob's note","id":"` + x + `"}}`)}
				})
			}
			m.pair("bob repeats alice's client_id", a.clientID, func(x, b string) request {
				return request{method: "POST", path: "/api/sessions/" + b + "/events",
					body: batch(`{"type":"user.message","payload":{"text":"bob's turn","client_id":"` + x + `"}}`)}
			})
			m.pair("bob's batch of alice's ids", a.pending, func(x, b string) request {
				return request{method: "POST", path: "/api/sessions/" + b + "/events", body: batch(
					`{"type":"user.supplement","payload":{"text":"bob's note","id":"`+a.queuedSup+`"}}`,
					`{"type":"user.interrupt","payload":{"run_id":"`+a.waiting+`"}}`,
					`{"type":"user.tool_confirmation","payload":{"tool_use_id":"`+x+`","allow":true}}`)}
			})
		},
		"GET /api/sessions/{id}/events": func() {
			for _, ss := range sessions {
				for _, q := range []string{"", "?after=0&limit=5", "?after=-1"} {
					m.pair("GET the log"+q+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/api/sessions/" + x + "/events" + q}
					})
				}
			}
		},
		"GET /api/sessions/{id}/events/stream": func() {
			for _, ss := range sessions {
				for _, c := range []struct{ query, lastID string }{{"", ""}, {"?after=2", ""}, {"", "1"}, {"?after=x", ""}} {
					m.pair("stream"+c.query+" Last-Event-ID "+c.lastID+" of a "+ss.kind, ss.id, func(x, _ string) request {
						return request{method: "GET", path: "/api/sessions/" + x + "/events/stream" + c.query, lastEventID: c.lastID}
					})
				}
			}
		},
	}

	for route, run := range v1Cases(t, m, a, sessions, runsOf, calls, sups) {
		cases[route] = run
	}
	for route, run := range aisdkCases(t, m, a, sessions, calls, sups) {
		cases[route] = run
	}
	for route, run := range aguiCases(t, m, a, sessions, calls) {
		cases[route] = run
	}
	for route, run := range langgraphCases(t, m, a, sessions, runsOf, calls, sups) {
		cases[route] = run
	}
	for route, run := range webhookCases(t, m, a) {
		cases[route] = run
	}
	var routes []string
	for _, r := range s.srv.Routes() {
		routes = append(routes, r.Method+" "+r.Path)
	}
	routes = append(routes, protocolRoutes()...)
	slices.Sort(routes)
	for _, route := range routes {
		run, ok := cases[route]
		if !ok {
			t.Errorf("route %s is not in the isolation matrix: add its cases", route)
			continue
		}
		before := m.hits[route]
		run()
		if m.hits[route] == before {
			t.Errorf("the cases of %s sent it no request", route)
		}
		m.unchanged(route)
	}
	for route := range cases {
		if !slices.Contains(routes, route) {
			t.Errorf("the matrix has cases for %s, which the server does not route", route)
		}
	}
	for _, route := range routes {
		t.Logf("%4d requests to %s", m.hits[route], route)
	}

	// Alice's runs go on as if bob had never been there: her answer runs
	// the waiting call, whose next request carries her queued note (and no
	// note of bob's, though his had her note's id); the queued run runs
	// next; the sleeping run stops when she says so.
	s.results(alice, a.root, ev("user.tool_confirmation", map[string]any{"tool_use_id": a.pending, "allow": true}))
	if p := s.completion(alice, a.root, a.waiting); p.Status != rein.StatusCompleted {
		t.Fatalf("alice's waiting run ended %+v", p)
	}
	var reply string
	for _, e := range s.events(alice, a.root) {
		if e.Type == rein.EventMessage && e.RunID == a.waiting {
			reply, _ = payloadOf(t, e)["text"].(string)
		}
	}
	if !strings.HasSuffix(reply, "hints=[alice's queued note]") {
		t.Fatalf("alice's run read %q", reply)
	}
	if p := s.completion(alice, a.root, a.queued); p.Status != rein.StatusCompleted {
		t.Fatalf("alice's queued run ended %+v", p)
	}
	stop := s.results(alice, a.busy, ev("user.interrupt", map[string]any{"run_id": a.sleeping}))[0]
	if stop["accepted"] != true {
		t.Fatalf("alice's stop of her sleeping run: %v", stop)
	}
	if p := s.completion(alice, a.busy, a.sleeping); p.Status != rein.StatusCancelled {
		t.Fatalf("alice's sleeping run ended %+v", p)
	}
	sup, err := s.st.GetSupplement(context.Background(), rein.SessionKey{Owner: "alice", ID: a.root}, a.queuedSup)
	if err != nil || sup.Status != store.SupplementConsumed || sup.RunID != a.waiting {
		t.Fatalf("alice's queued note: %+v %v", sup, err)
	}
}
