package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// Abuse checks (docs/reliability.md): the request limits hold at their
// exact boundaries, no answer ever carries a stack trace, and every 5xx is
// the generic internal or unavailable answer, with nothing of its cause.

// TestRequestLimitsAtTheBoundary: a body of exactly 1 MiB is read, one
// byte more is 413 (with or without a Content-Length, on both routes that
// read a body); a batch holds 1 to 100 events (0 and 101 are 400 naming
// events).
func TestRequestLimitsAtTheBoundary(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{})
	sid := s.createSession("")
	sized := func(n int) string {
		head, tail := `{"events":[{"type":"user.supplement","payload":{"text":"`, `"}}]}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	if r := s.do("POST", "/api/sessions/"+sid+"/events", "", sized(server.MaxBodyBytes)); r.status != 200 {
		t.Fatalf("a batch of exactly %d bytes: %d %.300s", server.MaxBodyBytes, r.status, r.body)
	}
	over := sized(server.MaxBodyBytes + 1)
	for name, body := range map[string]any{"with a length": over, "chunked": readerOnly{strings.NewReader(over)}} {
		if r := s.do("POST", "/api/sessions/"+sid+"/events", "", body); r.status != 413 || r.errorCode(t) != "payload_too_large" {
			t.Fatalf("a batch one byte over, %s: %d %.300s", name, r.status, r.body)
		}
	}
	meta := `{"metadata":{"pad":"` + strings.Repeat("y", server.MaxBodyBytes) + `"}}`
	if r := s.do("POST", "/api/sessions", "", meta); r.status != 413 || r.errorCode(t) != "payload_too_large" {
		t.Fatalf("a session over 1 MiB: %d %.300s", r.status, r.body)
	}
	events := func(n int) string {
		return `{"events":[` + strings.TrimSuffix(strings.Repeat(`{"type":"system.message","payload":{"text":"x"}},`, n), ",") + `]}`
	}
	for n, want := range map[int]int{0: 400, 1: 200, 100: 200, 101: 400} {
		r := s.do("POST", "/api/sessions/"+sid+"/events", "", events(n))
		if r.status != want || (want == 400 && (r.errorCode(t) != "invalid_argument" || r.errorParam(t) != "events")) {
			t.Fatalf("a batch of %d events: %d %.300s", n, r.status, r.body)
		}
	}
}

// brokenStore is a store that works until it is broken; then every call
// fails with err, or — with panics — ListSessions panics (only requests
// call it, so no background goroutine of the service dies of it).
type brokenStore struct {
	store.Store
	broken atomic.Bool
	panics bool
	err    error
}

func (b *brokenStore) fail() error {
	if b.broken.Load() && !b.panics {
		return b.err
	}
	return nil
}

func (b *brokenStore) Exclusive() bool { return true } // the memory store is

func (b *brokenStore) Ping(ctx context.Context) error {
	if err := b.fail(); err != nil {
		return err
	}
	return b.Store.Ping(ctx)
}
func (b *brokenStore) CreateSession(ctx context.Context, s *store.Session) error {
	if err := b.fail(); err != nil {
		return err
	}
	return b.Store.CreateSession(ctx, s)
}
func (b *brokenStore) GetSession(ctx context.Context, key rein.SessionKey) (*store.Session, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetSession(ctx, key)
}
func (b *brokenStore) ListSessions(ctx context.Context, owner string) ([]*store.Session, error) {
	if b.broken.Load() && b.panics {
		panic(fmt.Sprintf("brokenStore: %v", b.err))
	}
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListSessions(ctx, owner)
}
func (b *brokenStore) ListSessionSummaries(ctx context.Context, owner string, page store.SessionPage) ([]*store.SessionSummary, error) {
	if b.broken.Load() && b.panics {
		panic(fmt.Sprintf("brokenStore: %v", b.err))
	}
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListSessionSummaries(ctx, owner, page)
}
func (b *brokenStore) CreateSessionOnce(ctx context.Context, s *store.Session) (*store.Session, bool, error) {
	if err := b.fail(); err != nil {
		return nil, false, err
	}
	return b.Store.CreateSessionOnce(ctx, s)
}
func (b *brokenStore) ListChildren(ctx context.Context, key rein.SessionKey) ([]*store.Session, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListChildren(ctx, key)
}
func (b *brokenStore) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.LoadHistory(ctx, key)
}
func (b *brokenStore) AppendEvents(ctx context.Context, key rein.SessionKey, f store.Fence, evs []rein.Event) ([]rein.Event, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.AppendEvents(ctx, key, f, evs)
}
func (b *brokenStore) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	if err := b.fail(); err != nil {
		return nil, 0, err
	}
	return b.Store.ReadEvents(ctx, key, after, limit)
}
func (b *brokenStore) LastSeq(ctx context.Context, key rein.SessionKey) (int64, error) {
	if err := b.fail(); err != nil {
		return 0, err
	}
	return b.Store.LastSeq(ctx, key)
}
func (b *brokenStore) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	if err := b.fail(); err != nil {
		return err
	}
	return b.Store.WaitEvents(ctx, key, after)
}
func (b *brokenStore) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetRun(ctx, key, runID)
}
func (b *brokenStore) GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*store.RunRecord, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetRunByClientID(ctx, key, clientID)
}
func (b *brokenStore) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListRuns(ctx, key)
}
func (b *brokenStore) ListRunsByStatus(ctx context.Context, statuses ...rein.RunStatus) ([]*store.RunRecord, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListRunsByStatus(ctx, statuses...)
}
func (b *brokenStore) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	if err := b.fail(); err != nil {
		return 0, err
	}
	return b.Store.PendingSupplements(ctx, key)
}
func (b *brokenStore) GetSupplement(ctx context.Context, key rein.SessionKey, id string) (*store.Supplement, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetSupplement(ctx, key, id)
}
func (b *brokenStore) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetConfirmation(ctx, key, toolUseID)
}
func (b *brokenStore) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListConfirmations(ctx, key, state)
}
func (b *brokenStore) ListInbox(ctx context.Context, owner string, page store.InboxPage) ([]*store.InboxItem, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListInbox(ctx, owner, page)
}
func (b *brokenStore) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.RenewLease(ctx, l, ttl)
}
func (b *brokenStore) GetLease(ctx context.Context, key rein.SessionKey) (*store.Lease, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.GetLease(ctx, key)
}
func (b *brokenStore) Update(ctx context.Context, key rein.SessionKey, f store.Fence, fn func(tx store.Tx) error) error {
	if err := b.fail(); err != nil {
		return err
	}
	return b.Store.Update(ctx, key, f, fn)
}
func (b *brokenStore) DeleteSession(ctx context.Context, key rein.SessionKey, check func(time.Time, []*store.TreeSession) error) ([]*store.Session, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.DeleteSession(ctx, key, check)
}
func (b *brokenStore) ListInactive(ctx context.Context, before time.Time, after rein.SessionKey, limit int) ([]store.SessionActivity, error) {
	if err := b.fail(); err != nil {
		return nil, err
	}
	return b.Store.ListInactive(ctx, before, after, limit)
}
func (b *brokenStore) Flush(ctx context.Context, key rein.SessionKey) (bool, error) {
	if err := b.fail(); err != nil {
		return false, err
	}
	return b.Store.Flush(ctx, key)
}

// The secrets a broken store's errors carry: a DSN with its password, a
// host, a file path, a driver's words.
const (
	secretDSN  = "postgres://rein:hunter2-s3cret@db-7.internal.example:5432/rein"
	secretPath = "/var/lib/rein/private/rein.db"
	secretText = "pq: relation \"zz_secret_table\" does not exist"
)

var secrets = []string{"hunter2", "db-7.internal.example", "/var/lib/rein", "zz_secret_table", "pq:"}

// everyRoute is one request per route of the server (several for the
// events route: one per event type), naming sid and its run runID where
// a route takes them. It fails the test if a route has none.
func everyRoute(t *testing.T, srv *server.Server, sid, runID string) []request {
	t.Helper()
	batch := func(ev string) string { return `{"events":[` + ev + `]}` }
	byRoute := map[string][]request{
		"GET /healthz":                         {{method: "GET", path: "/healthz"}},
		"GET /readyz":                          {{method: "GET", path: "/readyz"}},
		"GET /metrics":                         {{method: "GET", path: "/metrics"}},
		"GET /api/agents":                      {{method: "GET", path: "/api/agents"}},
		"POST /api/sessions":                   {{method: "POST", path: "/api/sessions", body: `{"metadata":{"a":1}}`}},
		"GET /api/sessions":                    {{method: "GET", path: "/api/sessions"}},
		"GET /api/confirmations":               {{method: "GET", path: "/api/confirmations?status=answered"}},
		"GET /api/sessions/{id}":               {{method: "GET", path: "/api/sessions/" + sid}},
		"PATCH /api/sessions/{id}":             {{method: "PATCH", path: "/api/sessions/" + sid, body: `{"title":"renamed"}`}},
		"DELETE /api/sessions/{id}":            {{method: "DELETE", path: "/api/sessions/" + sid}},
		"GET /api/sessions/{id}/subagents":     {{method: "GET", path: "/api/sessions/" + sid + "/subagents"}},
		"GET /api/sessions/{id}/runs":          {{method: "GET", path: "/api/sessions/" + sid + "/runs"}},
		"GET /api/sessions/{id}/runs/{run_id}": {{method: "GET", path: "/api/sessions/" + sid + "/runs/" + runID}},
		"PATCH /api/sessions/{id}/runs/{run_id}": {
			{method: "PATCH", path: "/api/sessions/" + sid + "/runs/" + runID, body: `{"text":"edited","position":1}`},
		},
		"POST /api/sessions/{id}/runs/{run_id}/promote": {
			{method: "POST", path: "/api/sessions/" + sid + "/runs/" + runID + "/promote", body: `{"mode":"rollback"}`},
		},
		"GET /api/sessions/{id}/events":            {{method: "GET", path: "/api/sessions/" + sid + "/events?after=1"}},
		"GET /api/sessions/{id}/events/stream":     {{method: "GET", path: "/api/sessions/" + sid + "/events/stream", lastEventID: "1"}},
		"GET /api/webhooks/deliveries":             {{method: "GET", path: "/api/webhooks/deliveries?status=failed"}},
		"POST /api/webhooks/deliveries/{id}/retry": {{method: "POST", path: "/api/webhooks/deliveries/dlv_x/retry"}},
		"POST /api/sessions/{id}/events": {
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"user.message","payload":{"text":"hi","when_busy":"enqueue","client_id":"c1"}}`)},
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"user.interrupt","payload":{"run_id":"` + runID + `"}}`)},
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"user.interrupt","payload":{}}`)},
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"user.supplement","payload":{"text":"x","id":"s1"}}`)},
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"user.tool_confirmation","payload":{"tool_use_id":"call_x","allow":true}}`)},
			{method: "POST", path: "/api/sessions/" + sid + "/events", body: batch(`{"type":"system.message","payload":{"text":"x"}}`)},
		},
	}
	var out []request
	for _, r := range srv.Routes() {
		reqs, ok := byRoute[r.Method+" "+r.Path]
		if !ok {
			t.Fatalf("route %s %s has no request in everyRoute: add one", r.Method, r.Path)
		}
		out = append(out, reqs...)
	}
	return out
}

// sendRaw sends r (an event stream with its Last-Event-ID) with token.
func (s *stack) sendRaw(token string, r request) reply {
	s.t.Helper()
	if r.method == "GET" && strings.Contains(r.path, "/events/stream") {
		return s.doStream(r.path, token, r.lastEventID)
	}
	var body any
	if r.body != "" {
		body = r.body
	}
	return s.do(r.method, r.path, token, body)
}

// TestServerErrorsAreGeneric: a store that fails every call, with errors
// full of secrets, in the three shapes a store's failure takes. On every
// route, an answer that needs the store is a 5xx, and every 5xx is the
// generic internal (500) or unavailable (503) error — one fixed message
// each, whatever the route — with no secret, no trace, in body or
// headers. Routes that need no store (/healthz, /metrics) still answer.
func TestServerErrorsAreGeneric(t *testing.T) {
	t.Parallel()
	plain := fmt.Errorf("sqlite %s: %s (%s)", secretPath, secretText, secretDSN)
	for _, c := range []struct {
		name string
		err  error
		code string
	}{
		{"an error without a code", plain, "internal"},
		{"internal with the cause in its message", rein.Errorf(rein.CodeInternal, "query %s failed: %s", secretDSN, secretText), "internal"},
		{"unavailable wrapping the cause", rein.Errorf(rein.CodeUnavailable, "store unreachable: %w", plain), "unavailable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &brokenStore{Store: memory.New(), err: c.err}
			s := newStack(t, options{store: st, tokens: map[string]string{"tok": "alice"}})
			t.Cleanup(func() { st.broken.Store(false) }) // before the stack's cleanup ends the run
			sid := s.createSession("tok")
			runID := s.send("tok", sid, "long enough", nil)["run_id"].(string)
			s.waitEvent("tok", sid, is(rein.EventToolUse, runID))
			st.broken.Store(true)

			messages := map[string]string{} // code → the one message it has
			for _, r := range everyRoute(t, s.srv, sid, runID) {
				got := s.sendRaw("tok", r)
				what := r.method + " " + r.path + " " + r.body
				var head strings.Builder
				_ = got.header.Write(&head)
				for _, secret := range secrets {
					if strings.Contains(string(got.body), secret) || strings.Contains(head.String(), secret) {
						t.Fatalf("%s: the answer carries %q:\n%s\n%s", what, secret, head.String(), got.body)
					}
				}
				checkNoTrace(t, got.body, []byte(what))
				// The configured agents are the server's configuration, not
				// the store's.
				needsStore := r.path != "/healthz" && r.path != "/metrics" && r.path != "/api/agents"
				if !needsStore {
					if got.status != 200 {
						t.Fatalf("%s: %d %s", what, got.status, got.body)
					}
					continue
				}
				if got.status < 500 {
					t.Fatalf("%s with a broken store: %d %s", what, got.status, got.body)
				}
				e, _ := got.json(t)["error"].(map[string]any)
				code, _ := e["code"].(string)
				msg, _ := e["message"].(string)
				want := c.code
				if r.path == "/readyz" {
					want = "unavailable" // not ready, whatever the cause
				}
				if code != want || (got.status == 500) != (code == "internal") || msg == "" {
					t.Fatalf("%s: %d %s, want the generic %s error", what, got.status, got.body, want)
				}
				if r.path == "/readyz" {
					continue // it says "not ready" in its own words
				}
				if first, seen := messages[code]; seen && first != msg {
					t.Fatalf("%s: %s message %q, another route said %q", what, code, msg, first)
				}
				messages[code] = msg
			}
		})
	}
}

// TestPanicsAnswerInternal: a handler that panics (its store panics) is
// answered 500 internal with the generic message and no trace; the panic
// and its stack go to the log under the request id, and the server goes on
// serving.
func TestPanicsAnswerInternal(t *testing.T) {
	t.Parallel()
	logs, logger := newLog()
	st := &brokenStore{Store: memory.New(), err: errors.New("index out of range [3] with length 2 at " + secretPath), panics: true}
	s := newStack(t, options{store: st, logger: logger})
	t.Cleanup(func() { st.broken.Store(false) })
	sid := s.createSession("")
	st.broken.Store(true)
	for _, path := range []string{"/api/sessions", "/api/sessions/" + sid + "/subagents"} {
		a := s.doWithID("GET", path, "")
		checkNoTrace(t, a.body, nil)
		for _, secret := range append(secrets, "index out of range", "goroutine") {
			if strings.Contains(string(a.body), secret) {
				t.Fatalf("GET %s: the answer carries %q: %s", path, secret, a.body)
			}
		}
		if a.status != 500 || a.code != "internal" || a.message == "" || a.requestID == "" {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		logged := false
		for _, rec := range logs.records(t) {
			stack, _ := rec["stack"].(string)
			if rec["request_id"] == a.requestID && rec["level"] == "ERROR" &&
				strings.Contains(fmt.Sprint(rec["panic"]), "index out of range") && strings.Contains(stack, "goroutine ") {
				logged = true
			}
		}
		if !logged {
			t.Fatalf("GET %s: no error record with the panic and its stack under request id %s:\n%s", path, a.requestID, logs.String())
		}
	}
	st.broken.Store(false)
	if r := s.do("GET", "/api/sessions/"+sid, "", nil); r.status != 200 {
		t.Fatalf("after the panics: %d %s", r.status, r.body)
	}
}

// TestErrorAnswersCarryNoTrace: every kind of refusal the server makes —
// no token, a wrong method on every route, unknown paths, malformed and
// oversized bodies, bad cursors, unknown ids, a busy session, a conflict —
// is a JSON error with no stack trace or panic text in it.
func TestErrorAnswersCarryNoTrace(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})
	sid := s.createSession("tok")
	runID := s.send("tok", sid, "note this", nil)["run_id"].(string)
	var req rein.ToolConfirmationRequestedPayload
	if err := s.waitEvent("tok", sid, is(rein.EventToolConfirmationRequested, runID)).DecodePayload(&req); err != nil {
		t.Fatal(err)
	}
	s.results("tok", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": req.ToolUseID, "allow": false}))
	long := s.send("tok", sid, "long", afterRun)["run_id"].(string)
	s.waitEvent("tok", sid, is(rein.EventToolUse, long))

	var reqs []struct {
		token string
		r     request
	}
	add := func(token string, r request) {
		reqs = append(reqs, struct {
			token string
			r     request
		}{token, r})
	}
	for _, r := range everyRoute(t, s.srv, sid, runID) {
		add("", r)            // no token (the public routes answer)
		add("wrong-token", r) // a bad one
		add("tok", r)         // the owner, for the routes' own errors below
		for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost} {
			add("tok", request{method: method, path: strings.SplitN(r.path, "?", 2)[0], body: "{"})
		}
	}
	events := "/api/sessions/" + sid + "/events"
	for _, body := range []string{"", "{", "[]", "null", `{"events":"x"}`, `{"events":[{"type":"x"}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"busy"}}]}`,
		`{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"` + req.ToolUseID + `","allow":true}}]}`,
		`{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"call_nope","allow":true}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"x","timeout_s":1e999}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"` + strings.Repeat("z", server.MaxBodyBytes) + `"}}]}`,
	} {
		add("tok", request{method: "POST", path: events, body: body})
	}
	for _, q := range []string{"?after=x", "?after=-1", "?limit=0", "?limit=1e3", "?after=99999999999999999999"} {
		add("tok", request{method: "GET", path: events + q})
		if strings.HasPrefix(q, "?after") {
			add("tok", request{method: "GET", path: events + "/stream" + q})
		}
	}
	for _, p := range []string{"/api", "/api/", "/api/sessions/", "/api/sessions/x/y", "/api/sessions/" + sid + "/runs/run_nope", "/api/sessions/ses_nope/events/stream", "/nothing", "/api/%zz"} {
		add("tok", request{method: "GET", path: p})
	}
	add("tok", request{method: "DELETE", path: "/api/sessions/" + sid}) // busy
	add("tok", request{method: "POST", path: "/api/sessions", body: `{"agent":"nobody"}`})
	add("tok", request{method: "GET", path: "/api/sessions/" + sid + "/events/stream", lastEventID: "abc"})

	errs := 0
	for _, c := range reqs {
		if c.r.path == "/api/%zz" {
			continue // not a URL net/http sends
		}
		if strings.Contains(c.r.path, "/events/stream") && c.token == "tok" && c.r.method == "GET" && !strings.Contains(c.r.path, "?") && c.r.lastEventID != "abc" && strings.Contains(c.r.path, sid) {
			continue // the owner's own stream answers 200 and stays open
		}
		got := s.sendRaw(c.token, c.r)
		checkNoTrace(t, got.body, []byte(c.r.path+c.r.body))
		if got.status >= 400 {
			errs++
			if got.errorCode(t) == "" {
				t.Fatalf("%s %s: %d %s", c.r.method, c.r.path, got.status, got.body)
			}
		}
		if got.status >= 500 {
			t.Fatalf("%s %s: %d %.300s", c.r.method, c.r.path, got.status, got.body)
		}
	}
	if errs < len(reqs)/2 {
		t.Fatalf("only %d of %d requests were refused: the checks above saw too few errors", errs, len(reqs))
	}
	t.Logf("%d error answers checked", errs)
}
