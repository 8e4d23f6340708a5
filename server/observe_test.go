package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/telemetry"
)

const obsModel = "scripted:testdata/observe.yaml"

// obsLog collects JSON log lines and wakes waiters on each one.
type obsLog struct {
	mu    sync.Mutex
	lines []map[string]any
	wake  chan struct{}
}

func newObsLog() *obsLog { return &obsLog{wake: make(chan struct{})} }

func (l *obsLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m map[string]any
	if json.Unmarshal(p, &m) == nil {
		l.lines = append(l.lines, m)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return len(p), nil
}

// wait returns the first line msg with the given string values.
func (l *obsLog) wait(t *testing.T, msg string, want map[string]string) map[string]any {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
	lines:
		for _, m := range l.lines {
			if m["msg"] != msg {
				continue
			}
			for k, v := range want {
				if fmt.Sprint(m[k]) != v {
					continue lines
				}
			}
			l.mu.Unlock()
			return m
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("no log line %q with %v", msg, want)
		}
	}
}

// spanEnds tells a test about every span that ends, so it waits for the
// span itself (a run's span ends after its end is recorded; a request's
// after its answer is sent).
type spanEnds struct {
	mu    sync.Mutex
	names []string
	wake  chan struct{}
}

func (p *spanEnds) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *spanEnds) OnEnd(s sdktrace.ReadOnlySpan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, s.Name())
	close(p.wake)
	p.wake = make(chan struct{})
}
func (p *spanEnds) Shutdown(context.Context) error   { return nil }
func (p *spanEnds) ForceFlush(context.Context) error { return nil }

func (p *spanEnds) wait(t *testing.T, name string, n int) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		got := 0
		for _, s := range p.names {
			if s == name {
				got++
			}
		}
		wake := p.wake
		p.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("span %q did not end", name)
		}
	}
}

// obsStack is a server over testdata/observe.yaml with metrics, a JSON
// log and tp (nil: no tracing).
type obsStack struct {
	t       *testing.T
	url     string
	svc     *sessions.Service
	metrics *server.Metrics
	log     *obsLog
}

func newObsStack(t *testing.T, tp trace.TracerProvider) *obsStack {
	t.Helper()
	metrics, err := server.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	lg := newObsLog()
	logger := slog.New(slog.NewJSONHandler(lg, nil))
	svc, err := reintest.ServiceWithTools("testdata/observe.yaml", memory.New(), func(c *sessions.Config) {
		c.Workspace, c.Observer, c.Logger, c.TracerProvider = t.TempDir(), metrics, logger, tp
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Service: svc, Logger: logger, Metrics: metrics, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		_ = svc.Close()
		_ = srv.Close()
		ts.Close()
	})
	return &obsStack{t: t, url: ts.URL, svc: svc, metrics: metrics, log: lg}
}

func (s *obsStack) do(method, path, body string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (s *obsStack) session() string {
	s.t.Helper()
	code, b := s.do("POST", "/api/sessions", "{}")
	var out struct{ ID string }
	if code != http.StatusCreated || json.Unmarshal(b, &out) != nil {
		s.t.Fatalf("create session: %d %s", code, b)
	}
	return out.ID
}

// event submits one event and returns its result.
func (s *obsStack) event(sessionID, typ string, payload any) map[string]any {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"events": []any{map[string]any{"type": typ, "payload": payload}}})
	code, b := s.do("POST", "/api/sessions/"+sessionID+"/events", string(body))
	var out struct{ Results []map[string]any }
	if code != http.StatusOK || json.Unmarshal(b, &out) != nil || len(out.Results) != 1 {
		s.t.Fatalf("%s: %d %s", typ, code, b)
	}
	return out.Results[0]
}

func (s *obsStack) send(sessionID, text string) string {
	s.t.Helper()
	return s.event(sessionID, "user.message", map[string]any{"text": text})["run_id"].(string)
}

// waitEvent waits for an event of the run in the session's log.
func (s *obsStack) waitEvent(sessionID string, typ rein.EventType, runID string) rein.Event {
	s.t.Helper()
	key := rein.SessionKey{Owner: server.LocalOwner, ID: sessionID}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	after := int64(0)
	for {
		evs, _, err := s.svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == typ && e.RunID == runID {
				return e
			}
			after = e.Seq
		}
		if err := s.svc.WaitEvents(ctx, key, after); err != nil {
			s.t.Fatalf("waiting for %s of %s: %v", typ, runID, err)
		}
	}
}

func (s *obsStack) usage(sessionID, runID string) rein.Usage {
	s.t.Helper()
	rec, err := s.svc.GetRun(context.Background(), rein.SessionKey{Owner: server.LocalOwner, ID: sessionID}, runID)
	if err != nil {
		s.t.Fatal(err)
	}
	return rec.Usage
}

func (s *obsStack) toolUseIDs(sessionID, runID string) map[string]string {
	s.t.Helper()
	evs, _, err := s.svc.ReadEvents(context.Background(), rein.SessionKey{Owner: server.LocalOwner, ID: sessionID}, 0, 1000)
	if err != nil {
		s.t.Fatal(err)
	}
	ids := map[string]string{}
	for _, e := range evs {
		if e.Type == rein.EventToolUse && e.RunID == runID {
			var p rein.ToolUsePayload
			_ = e.DecodePayload(&p)
			ids[p.Name] = p.ToolUseID
		}
	}
	return ids
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// TestTraceOfARun: the request that sends a message, the run it starts
// (linked to it, in a trace of its own), the run's model requests and its
// tool calls (children of the run), with the GenAI attributes and the
// scripted model's token counts; the log lines carry the trace ids.
func TestTraceOfARun(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	ends := &spanEnds{wake: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ends))
	s := newObsStack(t, tp)
	sid := s.session()
	runID := s.send(sid, "tools")
	s.waitEvent(sid, rein.EventRunCompleted, runID)
	ends.wait(t, "rein.run", 1)
	ends.wait(t, "POST /api/sessions/{id}/events", 1)

	var req, run tracetest.SpanStub
	var chats, tools []tracetest.SpanStub
	for _, sp := range exp.GetSpans() {
		switch {
		case sp.Name == "POST /api/sessions/{id}/events":
			req = sp
		case sp.Name == "rein.run":
			run = sp
		case strings.HasPrefix(sp.Name, "chat "):
			chats = append(chats, sp)
		case strings.HasPrefix(sp.Name, "execute_tool "):
			tools = append(tools, sp)
		}
	}
	if !req.SpanContext.IsValid() || req.SpanKind != trace.SpanKindServer {
		t.Fatalf("no server span for the request: %+v", req)
	}
	ra := attrs(req.Attributes)
	if ra["http.route"].AsString() != "/api/sessions/{id}/events" || ra["http.request.method"].AsString() != "POST" ||
		ra["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("request span attributes %v", ra)
	}

	// The run: a root of its own trace, linked to the request.
	if !run.SpanContext.IsValid() {
		t.Fatal("no run span")
	}
	if run.Parent.IsValid() || run.SpanContext.TraceID() == req.SpanContext.TraceID() {
		t.Errorf("the run span is not a root of its own trace (parent %v)", run.Parent)
	}
	if len(run.Links) != 1 || run.Links[0].SpanContext.SpanID() != req.SpanContext.SpanID() ||
		run.Links[0].SpanContext.TraceID() != req.SpanContext.TraceID() {
		t.Errorf("run span links %+v, want the request span %v", run.Links, req.SpanContext)
	}
	wantRun := map[string]string{"rein.run.id": runID, "rein.session.id": sid, "rein.agent": "default",
		"rein.run.status": "COMPLETED", "rein.run.reason": "stop", "rein.run.attempt": "1"}
	runAttrs := attrs(run.Attributes)
	for k, v := range wantRun {
		if got := runAttrs[k].String(); got != v {
			t.Errorf("run span %s = %q, want %q", k, got, v)
		}
	}

	// Two model requests, children of the run, with their tokens.
	if len(chats) != 2 {
		t.Fatalf("%d chat spans, want 2", len(chats))
	}
	var in, out int64
	for i, c := range chats {
		a := attrs(c.Attributes)
		if c.Name != "chat "+obsModel || c.Parent.SpanID() != run.SpanContext.SpanID() || c.SpanKind != trace.SpanKindClient {
			t.Errorf("chat span %q: parent %v, kind %v", c.Name, c.Parent.SpanID(), c.SpanKind)
		}
		if a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.request.model"].AsString() != obsModel {
			t.Errorf("chat span attributes %v", a)
		}
		if _, ok := a["gen_ai.provider.name"]; ok {
			t.Errorf("the scripted model has a provider name: %v", a["gen_ai.provider.name"])
		}
		wantFinish := []string{"tool_calls", "stop"}[i]
		if f := a["gen_ai.response.finish_reasons"].AsStringSlice(); len(f) != 1 || f[0] != wantFinish {
			t.Errorf("chat span %d finish reasons %v, want [%s]", i, f, wantFinish)
		}
		if a["gen_ai.usage.input_tokens"].AsInt64() <= 0 || a["gen_ai.usage.output_tokens"].AsInt64() <= 0 {
			t.Errorf("chat span %d without token counts: %v", i, a)
		}
		in += a["gen_ai.usage.input_tokens"].AsInt64()
		out += a["gen_ai.usage.output_tokens"].AsInt64()
	}
	if u := s.usage(sid, runID); in != u.InputTokens || out != u.OutputTokens {
		t.Errorf("chat spans count %d/%d tokens, the run %+v", in, out, u)
	}

	// Three tool executions, children of the run; the failed ones are
	// errors.
	ids := s.toolUseIDs(sid, runID)
	if len(tools) != 3 {
		t.Fatalf("%d tool spans, want 3", len(tools))
	}
	for _, sp := range tools {
		a := attrs(sp.Attributes)
		name := a["gen_ai.tool.name"].AsString()
		if sp.Name != "execute_tool "+name || sp.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("tool span %q (tool %q): parent %v", sp.Name, name, sp.Parent.SpanID())
		}
		if a["gen_ai.operation.name"].AsString() != "execute_tool" || a["gen_ai.tool.call.id"].AsString() != ids[name] || ids[name] == "" {
			t.Errorf("tool span %q attributes %v (tool_use ids %v)", sp.Name, a, ids)
		}
		wantErr := name != "sleep"
		if (sp.Status.Code == codes.Error) != wantErr {
			t.Errorf("tool span %q status %v, want error %v", sp.Name, sp.Status, wantErr)
		}
	}

	// The log lines of the run carry its trace id; the request's its own.
	runTrace := run.SpanContext.TraceID().String()
	s.log.wait(t, "run started", map[string]string{"run": runID, "trace_id": runTrace})
	s.log.wait(t, "run ended", map[string]string{"run": runID, "trace_id": runTrace})
	s.log.wait(t, "run admitted", map[string]string{"run": runID, "trace_id": req.SpanContext.TraceID().String()})
	s.log.wait(t, "http request", map[string]string{"method": "POST", "run": runID, "trace_id": req.SpanContext.TraceID().String()})
}

// TestTraceparentContinued: a request that carries a W3C traceparent
// continues the caller's trace; health checks make no spans.
func TestTraceparentContinued(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	ends := &spanEnds{wake: make(chan struct{})}
	s := newObsStack(t, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(ends)))
	// Probes are not traced (this one is answered before the request below
	// is read, on the same connection).
	if code, _ := s.do("GET", "/healthz", ""); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	req, _ := http.NewRequest("GET", s.url+"/api/sessions", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ends.wait(t, "GET /api/sessions", 1)
	for _, sp := range exp.GetSpans() {
		if strings.Contains(sp.Name, "healthz") || sp.Name == "GET" {
			t.Errorf("a health check was traced: %q", sp.Name)
		}
	}
	for _, sp := range exp.GetSpans() {
		if sp.Name == "GET /api/sessions" {
			if sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
				t.Fatalf("the request span is not in the caller's trace: %v parent %v", sp.SpanContext, sp.Parent)
			}
			return
		}
	}
	t.Fatal("no request span")
}

// TestTracingOff: with the provider telemetry.FromEnv gives when no
// endpoint is configured, nothing is traced and no log line has a
// trace_id.
func TestTracingOff(t *testing.T) {
	t.Parallel()
	tp, shutdown, err := telemetry.FromEnv(context.Background(), func(string) (string, bool) { return "", false }, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	s := newObsStack(t, tp)
	sid := s.session()
	runID := s.send(sid, "tools")
	s.waitEvent(sid, rein.EventRunCompleted, runID)
	end := s.log.wait(t, "run ended", map[string]string{"run": runID})
	req := s.log.wait(t, "http request", map[string]string{"run": runID})
	if _, ok := end["trace_id"]; ok {
		t.Errorf("run ended has a trace_id with tracing off: %v", end)
	}
	if _, ok := req["trace_id"]; ok {
		t.Errorf("http request has a trace_id with tracing off: %v", req)
	}
}

// scrape returns the /metrics text.
func (s *obsStack) scrape() string {
	s.t.Helper()
	code, b := s.do("GET", "/metrics", "")
	if code != http.StatusOK {
		s.t.Fatalf("/metrics: %d", code)
	}
	return string(b)
}

// sample finds the sample of metric name whose labels include want
// (k="v" pairs) in a /metrics text.
func sample(text, name string, want ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, labels, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		all := true
		for _, w := range want {
			if !strings.Contains(labels, w) {
				all = false
				break
			}
		}
		if all {
			v, err := strconv.ParseFloat(value, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestMetricsOfRuns: after runs with tool calls, a failed model request,
// a parked run and an open event stream, /metrics shows every series with
// the values those runs imply.
func TestMetricsOfRuns(t *testing.T) {
	t.Parallel()
	s := newObsStack(t, nil)
	var text string
	check := func(name string, want float64, labels ...string) {
		t.Helper()
		got, ok := sample(text, name, labels...)
		if !ok || got != want {
			t.Errorf("%s%v = %v (found %v), want %v", name, labels, got, ok, want)
		}
	}
	m := `model="` + obsModel + `"`

	// A run with three tool calls: one works, one fails, one names no tool.
	sid := s.session()
	tools := s.send(sid, "tools")
	s.waitEvent(sid, rein.EventRunCompleted, tools)
	text = s.scrape()
	u := s.usage(sid, tools)
	check("rein_model_request_duration_seconds_count", 2, m)
	check("rein_model_first_delta_seconds_count", 2, m)
	check("rein_model_request_errors_total", 0, m)
	check("rein_model_tokens_total", float64(u.InputTokens), m, `direction="input"`)
	check("rein_model_tokens_total", float64(u.OutputTokens), m, `direction="output"`)
	check("rein_tool_call_duration_seconds_count", 1, `tool="sleep"`)
	check("rein_tool_call_duration_seconds_count", 1, `tool="read_file"`)
	check("rein_tool_call_duration_seconds_count", 1, `tool="(unknown)"`)
	check("rein_tool_call_errors_total", 0, `tool="sleep"`)
	check("rein_tool_call_errors_total", 1, `tool="read_file"`)
	check("rein_tool_call_errors_total", 1, `tool="(unknown)"`)
	check("rein_queue_wait_seconds_count", 1)
	if strings.Contains(text, "no_such_tool") {
		t.Error("a tool name the model made up is a label value")
	}
	firstIn, _ := sample(text, "rein_model_tokens_total", m, `direction="input"`)

	// A model request that fails, a run that parks, and an event stream
	// open while /metrics is read (it has sent its replay: it is counted).
	fail := s.send(sid, "fail")
	s.waitEvent(sid, rein.EventRunCompleted, fail)
	note := s.send(sid, "note")
	req := s.waitEvent(sid, rein.EventToolConfirmationRequested, note)
	s.log.wait(t, "run parked", map[string]string{"run": note})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sreq, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/api/sessions/"+sid+"/events/stream", nil)
	stream, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if _, err := bufio.NewReader(stream.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	text = s.scrape()
	check("rein_sse_subscribers", 1)
	check("rein_runs_parked", 1)
	check("rein_runs_parked_total", 1)
	check("rein_runs_unparked_total", 0)
	check("rein_model_request_duration_seconds_count", 3, m)
	check("rein_model_request_errors_total", 1, m)
	check("rein_queue_wait_seconds_count", 3)

	// The answer takes the parked run up again, and it finishes.
	var cr rein.ToolConfirmationRequestedPayload
	if err := req.DecodePayload(&cr); err != nil {
		t.Fatal(err)
	}
	s.event(sid, "user.tool_confirmation", map[string]any{"tool_use_id": cr.ToolUseID, "allow": true})
	s.waitEvent(sid, rein.EventRunCompleted, note)
	cancel()
	text = s.scrape()
	check("rein_runs_unparked_total", 1)
	check("rein_runs_parked", 0)
	check("rein_model_request_duration_seconds_count", 4, m)
	check("rein_tool_call_duration_seconds_count", 1, `tool="write_note"`)
	check("rein_queue_wait_seconds_count", 3)
	if in, _ := sample(text, "rein_model_tokens_total", m, `direction="input"`); in <= firstIn {
		t.Errorf("input tokens %v after two more requests, %v before", in, firstIn)
	}
}

// TestMethodNotAllowedCountedUnderItsRoute: a wrong method on a known path
// is counted under the path's route pattern, not as unmatched.
func TestMethodNotAllowedCountedUnderItsRoute(t *testing.T) {
	t.Parallel()
	s := newObsStack(t, nil)
	sid := s.session()
	if code, _ := s.do("POST", "/healthz", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /healthz: %d", code)
	}
	if code, _ := s.do("PUT", "/api/sessions/"+sid+"/runs", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT runs: %d", code)
	}
	if code, _ := s.do("GET", "/no/such/path", ""); code != http.StatusNotFound {
		t.Fatalf("GET /no/such/path: %d", code)
	}
	text := s.scrape()
	for _, want := range [][]string{
		{`method="POST"`, `route="/healthz"`, `code="405"`},
		{`method="PUT"`, `route="/api/sessions/{id}/runs"`, `code="405"`},
		{`method="GET"`, `route="unmatched"`, `code="404"`},
	} {
		if v, ok := sample(text, "rein_http_requests_total", want...); !ok || v != 1 {
			t.Errorf("rein_http_requests_total%v = %v (found %v), want 1", want, v, ok)
		}
	}
	if _, ok := sample(text, "rein_http_requests_total", `route="unmatched"`, `code="405"`); ok {
		t.Error("a 405 counted as unmatched")
	}
}

// TestModelAndToolObservationsDoNotAllocate: the observer methods on every
// step reuse their series.
func TestModelAndToolObservationsDoNotAllocate(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process's allocations.
	m, err := server.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := agent.ModelResponse{ModelRequest: agent.ModelRequest{Model: "openai:gpt-4o-mini", Step: 1},
		Duration: time.Second, FirstDelta: time.Millisecond, Usage: rein.Usage{InputTokens: 10, OutputTokens: 5}, Finish: "stop"}
	c := agent.ToolResult{ToolCall: agent.ToolCall{Name: "sleep", Known: true}, Duration: time.Millisecond}
	m.ModelRequest(r)
	m.ToolCall(c)
	if n := testing.AllocsPerRun(100, func() { m.ModelRequest(r) }); n != 0 {
		t.Errorf("ModelRequest allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.ToolCall(c) }); n != 0 {
		t.Errorf("ToolCall allocates %v times", n)
	}
}
