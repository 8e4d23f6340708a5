package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// testTimeout bounds every wait of a test, so a bug hangs nothing: a wait
// that needs longer than this has failed.
const testTimeout = 20 * time.Second

// options shape a test stack.
type options struct {
	store     store.Store
	tokens    map[string]string
	heartbeat time.Duration
	leaseTTL  time.Duration
	grace     time.Duration
	// resumeAttempts is sessions.Config.ResumeAttempts (0: the default;
	// negative: never resume).
	resumeAttempts int
	logger         *slog.Logger
	// noStart leaves svc.Start to the test (Serve starts it).
	noStart bool
	// workspace, for serve, is the workspace folder (default: a fresh one).
	workspace string
	// agents, when set, are the configured agents' names, each running
	// the stack's agent.
	agents []string
}

// stack is a server with everything behind it: the scripted model of
// testdata/script.yaml, the built-in tools, the sessions service and a
// store (memory unless given).
type stack struct {
	t   testing.TB
	st  store.Store
	svc *sessions.Service
	srv *server.Server
	url string
}

// assemble builds the runtime the way `rein serve` does, without HTTP,
// with its files in workspace.
func assemble(o options, workspace string) (*sessions.Service, *server.Metrics, error) {
	metrics, err := server.NewMetrics(nil)
	if err != nil {
		return nil, nil, err
	}
	svc, err := reintest.Service("testdata/script.yaml", o.store, func(c *sessions.Config) {
		c.Observer, c.Logger, c.Workspace = metrics, o.logger, workspace
		c.LeaseTTL, c.InterruptGrace, c.ResumeAttempts = o.leaseTTL, o.grace, o.resumeAttempts
	})
	return svc, metrics, err
}

func newStack(t testing.TB, o options) *stack {
	t.Helper()
	ts := reintest.NewServer(t, reintest.ServerOptions{
		Script: "testdata/script.yaml", Store: o.store, Tokens: o.tokens, Logger: o.logger,
		Heartbeat: o.heartbeat, NoStart: o.noStart,
		Configure: func(c *sessions.Config) {
			c.LeaseTTL, c.InterruptGrace, c.ResumeAttempts = o.leaseTTL, o.grace, o.resumeAttempts
			if len(o.agents) > 0 {
				c.Agents = map[string]*sessions.Agent{}
				for _, name := range o.agents {
					c.Agents[name] = &sessions.Agent{Loop: c.Agent}
				}
			}
		},
	})
	return &stack{t: t, st: ts.Store, svc: ts.Service, srv: ts.Handler, url: ts.URL}
}

// ---------------------------------------------------------------- raw HTTP

// reply is a raw HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic value.
func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return v
}

// errorCode returns error.code of an error body, failing the test when the
// body is not the docs/api.md error shape.
func (r reply) errorCode(t testing.TB) string {
	t.Helper()
	v := r.json(t)
	e, ok := v["error"].(map[string]any)
	if !ok {
		t.Fatalf("status %d body has no error object: %s", r.status, r.body)
	}
	if _, ok := e["message"].(string); !ok {
		t.Fatalf("error has no message: %s", r.body)
	}
	code, _ := e["code"].(string)
	return code
}

func (r reply) errorParam(t testing.TB) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	p, _ := e["param"].(string)
	return p
}

// do sends a request with an optional bearer token and body (a string is
// sent as is; anything else is marshalled).
func (s *stack) do(method, path, token string, body any) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// must sends a request and fails unless the status is want; it returns the
// decoded body.
func (s *stack) must(want int, method, path, token string, body any) map[string]any {
	s.t.Helper()
	r := s.do(method, path, token, body)
	if r.status != want {
		s.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, r.status, want, r.body)
	}
	return r.json(s.t)
}

// createSession makes a session and returns its id.
func (s *stack) createSession(token string) string {
	s.t.Helper()
	v := s.must(201, "POST", "/api/sessions", token, map[string]any{})
	return v["id"].(string)
}

// ev is one event of a batch.
func ev(typ string, payload map[string]any) map[string]any {
	return map[string]any{"type": typ, "payload": payload}
}

// post submits a batch of events.
func (s *stack) post(token, sid string, events ...map[string]any) reply {
	s.t.Helper()
	return s.do("POST", "/api/sessions/"+sid+"/events", token, map[string]any{"events": events})
}

// results posts a batch that must succeed and returns its results.
func (s *stack) results(token, sid string, events ...map[string]any) []map[string]any {
	s.t.Helper()
	r := s.post(token, sid, events...)
	if r.status != 200 {
		s.t.Fatalf("batch: status %d: %s", r.status, r.body)
	}
	var v struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		s.t.Fatal(err)
	}
	if len(v.Results) != len(events) {
		s.t.Fatalf("batch of %d events: %d results: %s", len(events), len(v.Results), r.body)
	}
	return v.Results
}

// afterRun is the when_busy of a message sent right after a run's
// session.run_completed was seen. The store frees the turn in the write
// that logs it, so "reject" would do too; enqueue keeps these tests about
// what they test, whatever the moment.
var afterRun = map[string]any{"when_busy": "enqueue"}

// send posts one user.message and returns its result.
func (s *stack) send(token, sid, text string, extra map[string]any) map[string]any {
	s.t.Helper()
	p := map[string]any{"text": text}
	for k, v := range extra {
		p[k] = v
	}
	return s.results(token, sid, ev("user.message", p))[0]
}

// events reads the whole log with GET .../events.
func (s *stack) events(token, sid string) []rein.Event {
	s.t.Helper()
	var all []rein.Event
	after := int64(0)
	for {
		r := s.do("GET", fmt.Sprintf("/api/sessions/%s/events?after=%d&limit=1000", sid, after), token, nil)
		if r.status != 200 {
			s.t.Fatalf("GET events: %d %s", r.status, r.body)
		}
		var page struct {
			Events  []rein.Event `json:"events"`
			LastSeq int64        `json:"last_seq"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			s.t.Fatal(err)
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 || page.Events[len(page.Events)-1].Seq >= page.LastSeq {
			return all
		}
		after = page.Events[len(page.Events)-1].Seq
	}
}

// ---------------------------------------------------------------------- SSE

// frame is one Server-Sent Events frame, or a comment.
type frame struct {
	id      string
	event   string
	data    string
	comment string
}

// sse is an open event stream.
type sse struct {
	t      testing.TB
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

// stream opens GET .../events/stream with an optional query and
// Last-Event-ID; it fails the test unless the answer is 200.
func (s *stack) stream(token, sid, query, lastEventID string) *sse {
	s.t.Helper()
	resp, cancel := s.openStream(token, sid, query, lastEventID)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		s.t.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		s.t.Fatalf("stream Content-Type %q", ct)
	}
	st := &sse{t: s.t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	s.t.Cleanup(st.close)
	return st
}

func (s *stack) openStream(token, sid, query, lastEventID string) (*http.Response, context.CancelFunc) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	u := s.url + "/api/sessions/" + sid + "/events/stream"
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		s.t.Fatalf("stream: %v", err)
	}
	return resp, cancel
}

func (c *sse) close() {
	c.cancel()
	c.resp.Body.Close()
}

// next reads one frame (a comment line counts as one).
func (c *sse) next() (frame, error) {
	var f frame
	seen := false
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if seen {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
			if !seen {
				return frame{comment: strings.TrimSpace(line[1:])}, nil
			}
		default:
			seen = true
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				f.id = v
			case "event":
				f.event = v
			case "data":
				if f.data != "" {
					f.data += "\n"
				}
				f.data += v
			}
		}
	}
}

// event reads frames until the next event (skipping comments) and checks
// that its id and event lines agree with its JSON.
func (c *sse) event() rein.Event {
	c.t.Helper()
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("stream: %v", err)
		}
		if f.comment != "" {
			continue
		}
		var e rein.Event
		if err := json.Unmarshal([]byte(f.data), &e); err != nil {
			c.t.Fatalf("stream data is not an event: %v: %q", err, f.data)
		}
		if f.id != strconv.FormatInt(e.Seq, 10) || f.event != string(e.Type) {
			c.t.Fatalf("frame id %q / event %q disagree with its data %s", f.id, f.event, f.data)
		}
		return e
	}
}

// until reads events until one satisfies pred, returning all read.
func (c *sse) until(pred func(rein.Event) bool) []rein.Event {
	c.t.Helper()
	var got []rein.Event
	for {
		e := c.event()
		got = append(got, e)
		if pred(e) {
			return got
		}
	}
}

// is matches an event by type and (when runID is not "") run.
func is(typ rein.EventType, runID string) func(rein.Event) bool {
	return func(e rein.Event) bool { return e.Type == typ && (runID == "" || e.RunID == runID) }
}

// waitEvent follows the session's log from the start until an event
// matches: the way tests wait for "A is running" without sleeping.
func (s *stack) waitEvent(token, sid string, pred func(rein.Event) bool) rein.Event {
	s.t.Helper()
	st := s.stream(token, sid, "", "")
	defer st.close()
	got := st.until(pred)
	return got[len(got)-1]
}

// completion returns the run's session.run_completed payload, waiting for
// it.
func (s *stack) completion(token, sid, runID string) rein.RunCompletedPayload {
	s.t.Helper()
	e := s.waitEvent(token, sid, is(rein.EventRunCompleted, runID))
	var p rein.RunCompletedPayload
	if err := e.DecodePayload(&p); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// checkLog checks docs/api.md's log invariants: seqs 1..n without gaps, and
// every run that started completed exactly once, as its last event.
func checkLog(t testing.TB, evs []rein.Event) {
	t.Helper()
	completed := map[string]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a duplicate", i, e.Seq)
		}
		// A stop naming a finished run is logged with that run id; it is
		// the user's input, not the run's.
		if e.RunID != "" && completed[e.RunID] > 0 && e.Type != rein.EventUserInterrupt {
			t.Fatalf("seq %d (%s) comes after run %s completed", e.Seq, e.Type, e.RunID)
		}
		if e.Type == rein.EventRunCompleted {
			completed[e.RunID]++
		}
	}
}

// payloadOf decodes an event's payload generically.
func payloadOf(t testing.TB, e rein.Event) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

var errNotFound = errors.New("not found")

// find returns the first event matching pred.
func find(evs []rein.Event, pred func(rein.Event) bool) (rein.Event, error) {
	for _, e := range evs {
		if pred(e) {
			return e, nil
		}
	}
	return rein.Event{}, errNotFound
}
