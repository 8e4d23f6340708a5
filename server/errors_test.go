package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
)

// failingStore is a store whose reads of the session list, session
// creation and ping fail with err, the rest working.
type failingStore struct {
	store.Store
	err error
}

func (f *failingStore) Ping(context.Context) error { return f.err }
func (f *failingStore) ListSessions(context.Context, string) ([]*store.Session, error) {
	return nil, f.err
}
func (f *failingStore) ListSessionSummaries(context.Context, string, store.SessionPage) ([]*store.SessionSummary, error) {
	return nil, f.err
}
func (f *failingStore) CreateSession(context.Context, *store.Session) error { return f.err }
func (f *failingStore) CreateSessionOnce(context.Context, *store.Session) (*store.Session, bool, error) {
	return nil, false, f.err
}

// errorAnswer is an error answer with what these tests check of it.
type errorAnswer struct {
	reply
	code, message, requestID string
}

func (s *stack) doWithID(method, path, requestID string) errorAnswer {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		s.t.Fatalf("%s %s: %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		s.t.Fatal(err)
	}
	return errorAnswer{reply: reply{status: resp.StatusCode, header: resp.Header, body: raw},
		code: body.Error.Code, message: body.Error.Message, requestID: body.Error.RequestID}
}

// checkHidden checks an error answer: the status, no trace of the secrets
// in its headers or body, the request id in the header and the body, and
// a warn or error log record under that id holding the cause.
func checkHidden(t *testing.T, a errorAnswer, status int, logs *logBuffer, secrets []string, cause string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	var head strings.Builder
	_ = a.header.Write(&head)
	for _, s := range secrets {
		if strings.Contains(string(a.body), s) || strings.Contains(head.String(), s) {
			t.Fatalf("the answer carries %q:\n%s\n%s", s, head.String(), a.body)
		}
	}
	if strings.HasPrefix(a.message, a.code) {
		t.Fatalf("message %q repeats its code", a.message)
	}
	if a.requestID == "" || a.header.Get("X-Request-Id") != a.requestID {
		t.Fatalf("request id: header %q, body %q", a.header.Get("X-Request-Id"), a.requestID)
	}
	for _, rec := range logs.records(t) {
		if rec["request_id"] != a.requestID || (rec["level"] != "WARN" && rec["level"] != "ERROR") {
			continue
		}
		if e, _ := rec["err"].(string); strings.Contains(e, cause) {
			return
		}
	}
	t.Fatalf("no warn/error log record under request id %s holds the cause %q:\n%s", a.requestID, cause, logs.String())
}

// TestErrorsWithoutInternals: a store failing with errors that name its
// database (a DSN with a password, a host, a file path), in the shapes
// Rein's stores produce: the answers — /readyz, which needs no token,
// included — say what happened without any of it, carry the request id
// (the caller's own when it sends one), and the log has the cause under
// that id.
func TestErrorsWithoutInternals(t *testing.T) {
	t.Parallel()
	const (
		dsn  = "postgres://rein:s3cret@db.internal.example:5432/rein"
		path = "/var/lib/rein/rein.db"
	)
	secrets := []string{"s3cret", "db.internal.example", "5432", "/var/lib/rein"}
	dial := fmt.Errorf("failed to connect to %s: dial tcp 10.0.0.7:5432: connect: connection refused", dsn)
	for _, c := range []struct {
		name   string
		err    error
		status int // of the /api answers; /readyz is always 503
		cause  string
	}{
		{"unreachable, cause beside the message", &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: list sessions: database unreachable", Err: dial}, 503, "s3cret"},
		{"unreachable, cause formatted into the message", rein.Errorf(rein.CodeUnavailable, "store unreachable: %w", dial), 503, "s3cret"},
		{"an error without a code", fmt.Errorf("sqlite %s: disk I/O error", path), 500, path},
		{"internal", rein.Errorf(rein.CodeInternal, "sqlite %s: the database file is damaged", path), 500, path},
		{"a conflict with a driver cause", rein.Errorf(rein.CodeConflict, "the write conflicts with a stored row: %w", fmt.Errorf("UNIQUE constraint failed (%s)", path)), 409, path},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			logs, logger := newLog()
			s := configured(t, options{store: &failingStore{Store: memory.New(), err: c.err}, logger: logger}, nil, nil)
			checkHidden(t, s.doWithID("GET", "/readyz", ""), 503, logs, secrets, c.cause)
			checkHidden(t, s.doWithID("GET", "/api/sessions", ""), c.status, logs, secrets, c.cause)
			a := s.doWithID("POST", "/api/sessions", "my-req.42")
			checkHidden(t, a, c.status, logs, secrets, c.cause)
			if a.requestID != "my-req.42" {
				t.Fatalf("the caller's request id was not kept: %q", a.requestID)
			}
		})
	}
}

// TestWrappedCauseIsNotAnswered: a store error built with rein.Errorf
// around a cause full of secrets is answered with the message alone —
// written as it is, nothing cut — while errors.Is still finds the cause
// and the log holds it under the request id.
func TestWrappedCauseIsNotAnswered(t *testing.T) {
	t.Parallel()
	cause := errors.New("UNIQUE constraint failed in /var/lib/rein/rein.db (user rein:s3cret)")
	err := rein.Errorf(rein.CodeConflict, "the session conflicts with a stored one: %w", cause)
	if !errors.Is(err, cause) || !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("errors.Is lost the cause or the code: %v", err)
	}
	logs, logger := newLog()
	s := configured(t, options{store: &failingStore{Store: memory.New(), err: err}, logger: logger}, nil, nil)
	a := s.doWithID("POST", "/api/sessions", "")
	checkHidden(t, a, 409, logs, []string{"s3cret", "/var/lib", "UNIQUE"}, "UNIQUE constraint failed")
	if a.code != "conflict" || a.message != "the session conflicts with a stored one" {
		t.Fatalf("answer %s %q, want conflict %q", a.code, a.message, "the session conflicts with a stored one")
	}
}

// TestSQLiteErrorsKeepThePathInTheLog: a real SQLite store that fails
// (closed under the server): the answers do not carry the database's
// absolute path; the log does.
func TestSQLiteErrorsKeepThePathInTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "rein.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := newLog()
	s := configured(t, options{store: st, logger: logger}, nil, nil)
	s.createSession("")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/readyz", "/api/sessions"} {
		a := s.doWithID("GET", path, "")
		checkHidden(t, a, 503, logs, []string{dir}, dir)
		if a.code != "unavailable" || a.message == "" {
			t.Fatalf("GET %s: %s", path, a.body)
		}
	}
}

// TestErrorBodyCarriesRequestID: every error answer — 401, 404, 405, 400 —
// has the request id in its body, equal to its X-Request-Id, and its
// message does not start with its code.
func TestErrorBodyCarriesRequestID(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})
	sid := s.createSession("tok")
	for _, c := range []struct {
		method, path, token string
		body                any
		status              int
	}{
		{"GET", "/api/sessions", "", nil, 401},
		{"GET", "/api/sessions/nope", "tok", nil, 404},
		{"PUT", "/api/sessions", "tok", nil, 405},
		{"POST", "/api/sessions/" + sid + "/events", "tok", `{"events":[]}`, 400},
		{"GET", "/api/sessions/" + sid + "/events?after=x", "tok", nil, 400},
	} {
		r := s.do(c.method, c.path, c.token, c.body)
		e, _ := r.json(t)["error"].(map[string]any)
		if r.status != c.status || e == nil {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
		if id := r.header.Get("X-Request-Id"); id == "" || e["request_id"] != id {
			t.Fatalf("%s %s: X-Request-Id %q, body %s", c.method, c.path, id, r.body)
		}
		if msg, _ := e["message"].(string); msg == "" || strings.HasPrefix(msg, e["code"].(string)) {
			t.Fatalf("%s %s: message %q", c.method, c.path, msg)
		}
	}
}
