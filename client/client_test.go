package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// recorder is a fake API answering one canned response and recording the
// request. The e2e tests run the real server; this checks the client's own
// half of the wire in isolation: paths, headers, bodies, error decoding.
type recorder struct {
	status int
	body   string
	ctype  string

	method, path, query, auth, ctypeIn string
	reqBody                            string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.method, r.path, r.query, r.auth, r.ctypeIn, r.reqBody = req.Method, req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Get("Authorization"), req.Header.Get("Content-Type"), string(b)
	ct := r.ctype
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(r.status)
	io.WriteString(w, r.body)
}

func newRecorder(t *testing.T, status int, body string, opts ...Option) (*recorder, *Client) {
	t.Helper()
	rec := &recorder{status: status, body: body}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, New(srv.URL+"/", append([]Option{WithHTTPClient(srv.Client())}, opts...)...)
}

func jsonEq(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("request body %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("body = %s, want %s", gb, wb)
	}
}

func TestRequestsOnTheWire(t *testing.T) {
	t.Parallel()
	runID, msg := "run_9", "stop it"
	sys := "be brief"
	tests := []struct {
		name       string
		call       func(c *Client) error
		answer     string
		method     string
		path       string
		query      string
		body       string // "" = no body
		checkReply func(t *testing.T)
	}{
		{
			name: "create session",
			call: func(c *Client) error {
				_, err := c.CreateSession(t.Context(), CreateSessionRequest{Metadata: map[string]int{"a": 1}, System: &sys})
				return err
			},
			answer: `{"id":"ses_1","created_at":"2025-01-01T00:00:00Z","metadata":{"a":1}}`,
			method: "POST", path: "/api/sessions", body: `{"metadata":{"a":1},"system":"be brief"}`,
		},
		{
			name:   "create session with nothing",
			call:   func(c *Client) error { _, err := c.CreateSession(t.Context(), CreateSessionRequest{}); return err },
			answer: `{"id":"ses_1","created_at":"2025-01-01T00:00:00Z","metadata":{}}`,
			method: "POST", path: "/api/sessions", body: `{}`,
		},
		{
			name: "message",
			call: func(c *Client) error {
				_, err := c.SendMessage(t.Context(), "ses_1", Message{Text: "hi", WhenBusy: rein.WhenBusyEnqueue, ClientID: "c1", TimeoutS: 2.5})
				return err
			},
			answer: `{"results":[{"run_id":"run_1","status":"QUEUED"}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.message","payload":{"text":"hi","when_busy":"enqueue","client_id":"c1","timeout_s":2.5}}]}`,
		},
		{
			name: "rollback message",
			call: func(c *Client) error {
				_, err := c.SendMessage(t.Context(), "ses_1", Message{Text: "instead", WhenBusy: rein.WhenBusyRollback})
				return err
			},
			answer: `{"results":[{"run_id":"run_2","status":"QUEUED"}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.message","payload":{"text":"instead","when_busy":"rollback"}}]}`,
		},
		{
			name:   "minimal message",
			call:   func(c *Client) error { _, err := c.SendMessage(t.Context(), "ses_1", Message{Text: "hi"}); return err },
			answer: `{"results":[{"run_id":"run_1","status":"RUNNING"}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.message","payload":{"text":"hi"}}]}`,
		},
		{
			name: "exact stop",
			call: func(c *Client) error {
				_, err := c.Interrupt(t.Context(), "ses_1", Interrupt{RunID: &runID, Mode: rein.StopInterrupt, Message: &msg})
				return err
			},
			answer: `{"results":[{"accepted":true,"run_id":"run_9"}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.interrupt","payload":{"run_id":"run_9","mode":"interrupt","message":"stop it"}}]}`,
		},
		{
			name:   "session-level stop",
			call:   func(c *Client) error { _, err := c.Interrupt(t.Context(), "ses_1", Interrupt{}); return err },
			answer: `{"results":[{"accepted":false,"run_id":null}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.interrupt","payload":{}}]}`,
		},
		{
			name: "supplement",
			call: func(c *Client) error {
				_, err := c.Supplement(t.Context(), "ses_1", Supplement{Text: "note", ID: "k"})
				return err
			},
			answer: `{"results":[{"supplement_id":"k","status":"queued"}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.supplement","payload":{"text":"note","id":"k"}}]}`,
		},
		{
			name: "deny a tool",
			call: func(c *Client) error {
				_, err := c.ConfirmTool(t.Context(), "ses_1", ToolConfirmation{ToolUseID: "call_1", DenyMessage: "no"})
				return err
			},
			answer: `{"results":[{"tool_use_id":"call_1","allow":false}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"call_1","allow":false,"deny_message":"no"}}]}`,
		},
		{
			name:   "system",
			call:   func(c *Client) error { return c.SetSystem(t.Context(), "ses_1", "terse") },
			answer: `{"results":[{}]}`,
			method: "POST", path: "/api/sessions/ses_1/events",
			body: `{"events":[{"type":"system.message","payload":{"text":"terse"}}]}`,
		},
		{
			name:   "list events",
			call:   func(c *Client) error { _, _, err := c.ListEvents(t.Context(), "ses_1", 5, 10); return err },
			answer: `{"events":[],"last_seq":5}`,
			method: "GET", path: "/api/sessions/ses_1/events", query: "after=5&limit=10",
		},
		{
			name:   "list events, server's default limit",
			call:   func(c *Client) error { _, _, err := c.ListEvents(t.Context(), "ses_1", 0, 0); return err },
			answer: `{"events":[],"last_seq":0}`,
			method: "GET", path: "/api/sessions/ses_1/events", query: "after=0",
		},
		{
			name:   "ids are escaped into one path segment",
			call:   func(c *Client) error { _, err := c.GetRun(t.Context(), "a/../b", "r?x"); return err },
			answer: `{"run_id":"r?x","status":"QUEUED","reason":null,"created_at":"2025-01-01T00:00:00Z","started_at":null,"ended_at":null}`,
			method: "GET", path: "/api/sessions/a%2F..%2Fb/runs/r%3Fx",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, c := newRecorder(t, 200, tc.answer, WithToken("tok"))
			if err := tc.call(c); err != nil {
				t.Fatal(err)
			}
			if rec.method != tc.method || rec.path != tc.path || rec.query != tc.query {
				t.Fatalf("request %s %s?%s, want %s %s?%s", rec.method, rec.path, rec.query, tc.method, tc.path, tc.query)
			}
			if rec.auth != "Bearer tok" {
				t.Fatalf("Authorization = %q", rec.auth)
			}
			if tc.body == "" {
				if rec.reqBody != "" {
					t.Fatalf("unexpected body %q", rec.reqBody)
				}
				return
			}
			if rec.ctypeIn != "application/json" {
				t.Fatalf("Content-Type = %q", rec.ctypeIn)
			}
			jsonEq(t, rec.reqBody, tc.body)
		})
	}
}

func TestNoTokenNoAuthorizationHeader(t *testing.T) {
	t.Parallel()
	rec, c := newRecorder(t, 200, `{"sessions":null}`)
	ss, err := c.ListSessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rec.auth != "" {
		t.Fatalf("Authorization = %q without a token", rec.auth)
	}
	if ss == nil || len(ss) != 0 {
		t.Fatalf("sessions = %#v, want an empty non-nil slice", ss)
	}
}

func TestDecodesAnswers(t *testing.T) {
	t.Parallel()
	_, c := newRecorder(t, 200, `{"id":"ses_1","created_at":"2025-01-01T00:00:00.5Z","metadata":{"k":"v"},"parent_session_id":null,"state":"busy","current_run_id":"run_1","queued_run_ids":["run_2","run_3"],"last_seq":42}`)
	s, err := c.GetSession(t.Context(), "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "ses_1" || s.State != "busy" || s.CurrentRunID != "run_1" || strings.Join(s.QueuedRunIDs, ",") != "run_2,run_3" || s.LastSeq != 42 || s.ParentSessionID != "" || string(s.Metadata) != `{"k":"v"}` || s.CreatedAt.Nanosecond() != 5e8 {
		t.Fatalf("session = %+v", s)
	}

	_, c = newRecorder(t, 200, `{"results":[{"accepted":false,"run_id":null}]}`)
	r, err := c.Interrupt(t.Context(), "s", Interrupt{})
	if err != nil || r.Accepted || r.RunID != "" {
		t.Fatalf("interrupt = %+v, %v", r, err)
	}

	_, c = newRecorder(t, 200, `{"events":[{"seq":1,"id":"evt_1","session_id":"s","run_id":null,"type":"user.supplement","payload":{"supplement_id":"sup_1","text":"x","source":"user"},"created_at":"2025-01-01T00:00:00Z"}],"last_seq":3}`)
	evs, last, err := c.ListEvents(t.Context(), "s", 0, 1)
	if err != nil || len(evs) != 1 || last != 3 || evs[0].Type != rein.EventUserSupplement || evs[0].RunID != "" {
		t.Fatalf("events = %+v, %d, %v", evs, last, err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		body    string
		ctype   string
		is      error
		code    rein.Code
		param   string
		runID   string
		message string
	}{
		{"session busy", 409, `{"error":{"code":"session_busy","message":"busy","run_id":"run_7"}}`, "", rein.ErrSessionBusy, rein.CodeSessionBusy, "", "run_7", "busy"},
		{"invalid argument", 400, `{"error":{"code":"invalid_argument","message":"bad","param":"events[0].payload.text"}}`, "", rein.ErrInvalidArgument, rein.CodeInvalidArgument, "events[0].payload.text", "", "bad"},
		{"not found", 404, `{"error":{"code":"not_found","message":"no such session"}}`, "", rein.ErrNotFound, rein.CodeNotFound, "", "", "no such session"},
		{"conflict", 409, `{"error":{"code":"conflict","message":"answered"}}`, "", rein.ErrConflict, rein.CodeConflict, "", "", "answered"},
		{"proxy page", 502, `<html>bad gateway</html>`, "text/html", rein.ErrInternal, rein.CodeInternal, "", "", "Bad Gateway: <html>bad gateway</html>"},
		{"unavailable without a body", 503, ``, "text/plain", rein.ErrUnavailable, rein.CodeUnavailable, "", "", "Service Unavailable"},
		{"unauthenticated without a body", 401, ``, "text/plain", rein.ErrUnauthenticated, rein.CodeUnauthenticated, "", "", "Unauthorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, c := newRecorder(t, tc.status, tc.body)
			rec.ctype = tc.ctype
			_, err := c.SendMessage(t.Context(), "s", Message{Text: "x"})
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want errors.Is %v", err, tc.is)
			}
			if rein.CodeOf(err) != tc.code {
				t.Fatalf("rein.CodeOf = %s, want %s", rein.CodeOf(err), tc.code)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("%T is not a *client.Error", err)
			}
			if ce.Status != tc.status || ce.Code != tc.code || ce.Param != tc.param || ce.RunID != tc.runID || ce.Message != tc.message {
				t.Fatalf("error = %+v", ce)
			}
			var re *rein.Error
			if !errors.As(err, &re) || re.RunID != tc.runID || re.Param != tc.param {
				t.Fatalf("errors.As *rein.Error = %+v", re)
			}
		})
	}
}

func TestPostEventsReturnsPartialResults(t *testing.T) {
	t.Parallel()
	_, c := newRecorder(t, 409, `{"error":{"code":"session_busy","message":"busy","run_id":"run_1"},"results":[{"supplement_id":"sup_1","status":"queued"}]}`)
	res, err := c.PostEvents(t.Context(), "s", []EventInput{
		{Type: rein.EventUserSupplement, Payload: Supplement{Text: "a"}},
		{Type: rein.EventUserMessage, Payload: json.RawMessage(`{"text":"b"}`)},
	})
	if !errors.Is(err, rein.ErrSessionBusy) {
		t.Fatalf("err = %v", err)
	}
	if len(res) != 1 || !strings.Contains(string(res[0]), "sup_1") {
		t.Fatalf("partial results = %s", res)
	}
}

func TestPostEventsSendsEmptyPayloadForNil(t *testing.T) {
	t.Parallel()
	rec, c := newRecorder(t, 200, `{"results":[{"accepted":false,"run_id":null}]}`)
	if _, err := c.PostEvents(t.Context(), "s", []EventInput{{Type: rein.EventUserInterrupt}}); err != nil {
		t.Fatal(err)
	}
	jsonEq(t, rec.reqBody, `{"events":[{"type":"user.interrupt","payload":{}}]}`)
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	_, c := newRecorder(t, 200, `ok`)
	if err := c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, c = newRecorder(t, 503, `{"error":{"code":"unavailable","message":"draining"}}`)
	if err := c.Ready(t.Context()); !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("Ready = %v", err)
	}
}

func TestBadBaseURL(t *testing.T) {
	t.Parallel()
	if _, err := New("://nope").ListSessions(t.Context()); err == nil {
		t.Fatal("a malformed base URL did not fail")
	}
}
