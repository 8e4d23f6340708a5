package sessions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/tool"
)

// logSink collects a service's JSON log lines; a waiter is woken by every
// line, so tests wait for the line itself, never for time.
type logSink struct {
	mu    sync.Mutex
	raw   bytes.Buffer
	lines []map[string]any
	wake  chan struct{} // closed (and replaced) on every line
}

func newLogSink() *logSink { return &logSink{wake: make(chan struct{})} }

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.Write(p)
	// The JSON handler writes one whole line per Write.
	var m map[string]any
	if err := json.Unmarshal(p, &m); err == nil {
		l.lines = append(l.lines, m)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return len(p), nil
}

func (l *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func logMatches(m map[string]any, msg string, want map[string]any) bool {
	if m["msg"] != msg {
		return false
	}
	for k, v := range want {
		if fmt.Sprint(m[k]) != fmt.Sprint(jsonValue(v)) {
			return false
		}
	}
	return true
}

// jsonValue is v as a decoded JSON line holds it (numbers as float64).
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// wait returns the first line msg whose keys have the values in want,
// waiting for it.
func (l *logSink) wait(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, m := range l.lines {
			if logMatches(m, msg, want) {
				l.mu.Unlock()
				return m
			}
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("no log line %q with %v; the log:\n%s", msg, want, l.text())
		}
	}
}

func (l *logSink) count(msg string, want map[string]any) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.lines {
		if logMatches(m, msg, want) {
			n++
		}
	}
	return n
}

func (l *logSink) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// deafTool is a tool that ignores its context: it returns only once the
// test lets it (the registry abandons it a grace period after a stop).
type deafTool struct {
	release chan struct{}
	entered chan struct{} // gets a value as each call begins
}

func (s *deafTool) Spec() tool.Spec {
	return tool.Spec{Name: "stubborn", Description: "ignores stops", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (s *deafTool) Call(context.Context, tool.Call) (tool.Result, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return tool.Result{Output: "released"}, nil
}

// obsService starts a service over st that runs testdata/observe.yaml and
// logs into sink.
func obsService(t *testing.T, st store.Store, sink *logSink, mod ...func(*sessions.Config)) *sessions.Service {
	t.Helper()
	svc, _ := obsServiceTool(t, st, sink, mod...)
	return svc
}

// obsServiceTool is obsService, with its stubborn tool.
func obsServiceTool(t *testing.T, st store.Store, sink *logSink, mod ...func(*sessions.Config)) (*sessions.Service, *deafTool) {
	t.Helper()
	stub := &deafTool{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	t.Cleanup(func() { close(stub.release) })
	svc, err := reintest.ServiceWithTools("testdata/observe.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.LeaseTTL, c.Logger = t.TempDir(), liveLease, sink.logger()
		for _, f := range mod {
			f(c)
		}
	}, stub)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc, stub
}

func obsSession(t *testing.T, svc *sessions.Service) rein.SessionKey {
	t.Helper()
	s, err := svc.CreateSession(context.Background(), "alice", sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Key()
}

func obsSend(t *testing.T, svc *sessions.Service, key rein.SessionKey, req sessions.MessageRequest) sessions.MessageResult {
	t.Helper()
	res, err := svc.SendMessage(context.Background(), key, req)
	if err != nil {
		t.Fatalf("send %q: %v", req.Text, err)
	}
	return res
}

// obsWaitEvent waits for an event of the run in the session's log.
func obsWaitEvent(t *testing.T, svc *sessions.Service, key rein.SessionKey, typ rein.EventType, runID string) rein.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	after := int64(0)
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == typ && e.RunID == runID {
				return e
			}
			after = e.Seq
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			t.Fatalf("waiting for %s of %s: %v", typ, runID, err)
		}
	}
}

// TestRunLogLines: every way a run ends has its line, with the keys an
// operator filters on, and no line carries what a user wrote.
func TestRunLogLines(t *testing.T) {
	t.Parallel()
	onBackends(t, testRunLogLines)
}

// longLease keeps a busy machine from losing a lease the test does not
// mean to lose.
func longLease(c *sessions.Config) { c.LeaseTTL = 10 * time.Second }

func testRunLogLines(t *testing.T, open opener) {
	sink := newLogSink()
	svc := obsService(t, open(t), sink, longLease)
	ctx := context.Background()
	const secret = "s3cr3t-user-text"

	// Completed, with its admission, start and token counts.
	k1 := obsSession(t, svc)
	a := obsSend(t, svc, k1, sessions.MessageRequest{Text: "hello " + secret})
	sess := k1.String()
	sink.wait(t, "run admitted", map[string]any{"session": sess, "run": a.RunID, "status": "RUNNING", "when_busy": "reject"})
	started := sink.wait(t, "run started", map[string]any{"run": a.RunID, "attempt": 1})
	if _, ok := started["queue_wait"]; !ok {
		t.Errorf("run started without queue_wait: %v", started)
	}
	end := sink.wait(t, "run ended", map[string]any{"session": sess, "run": a.RunID, "status": "COMPLETED", "reason": "stop", "level": "INFO"})
	rec, err := svc.GetRun(ctx, k1, a.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Usage.InputTokens == 0 || fmt.Sprint(end["input_tokens"]) != fmt.Sprint(jsonValue(rec.Usage.InputTokens)) ||
		fmt.Sprint(end["output_tokens"]) != fmt.Sprint(jsonValue(rec.Usage.OutputTokens)) {
		t.Errorf("run ended tokens %v/%v, the run's usage %+v", end["input_tokens"], end["output_tokens"], rec.Usage)
	}
	if d, ok := end["duration"].(float64); !ok || d <= 0 {
		t.Errorf("run ended duration %v", end["duration"])
	}
	if _, ok := end["trace_id"]; ok {
		t.Errorf("a trace_id without tracing: %v", end)
	}

	// Interrupted, with a run queued behind it that then runs.
	k2 := obsSession(t, svc)
	b := obsSend(t, svc, k2, sessions.MessageRequest{Text: "block"})
	q := obsSend(t, svc, k2, sessions.MessageRequest{Text: "next", WhenBusy: rein.WhenBusyEnqueue})
	sink.wait(t, "run admitted", map[string]any{"run": q.RunID, "status": "QUEUED", "when_busy": "enqueue"})
	obsWaitEvent(t, svc, k2, rein.EventToolUse, b.RunID)
	if _, err := svc.Interrupt(ctx, k2, sessions.InterruptRequest{RunID: &b.RunID, Mode: rein.StopInterrupt}); err != nil {
		t.Fatal(err)
	}
	sink.wait(t, "run ended", map[string]any{"run": b.RunID, "status": "COMPLETED", "reason": "interrupted"})
	sink.wait(t, "run started", map[string]any{"run": q.RunID, "attempt": 1})
	sink.wait(t, "run ended", map[string]any{"run": q.RunID, "status": "COMPLETED", "reason": "stop"})

	// Cancelled.
	k3 := obsSession(t, svc)
	c := obsSend(t, svc, k3, sessions.MessageRequest{Text: "block"})
	obsWaitEvent(t, svc, k3, rein.EventToolUse, c.RunID)
	if _, err := svc.Interrupt(ctx, k3, sessions.InterruptRequest{RunID: &c.RunID}); err != nil {
		t.Fatal(err)
	}
	sink.wait(t, "run ended", map[string]any{"run": c.RunID, "status": "CANCELLED", "reason": "cancelled"})

	// Failed: the provider's error is in the log, at level error.
	k4 := obsSession(t, svc)
	f := obsSend(t, svc, k4, sessions.MessageRequest{Text: "fail"})
	failed := sink.wait(t, "run failed", map[string]any{"run": f.RunID, "status": "FAILED", "reason": "error", "level": "ERROR"})
	if e, _ := failed["error"].(string); !strings.Contains(e, "401 Unauthorized: invalid API key") {
		t.Errorf("run failed without the provider's error: %v", failed)
	}

	// Timeout.
	k5 := obsSession(t, svc)
	d := obsSend(t, svc, k5, sessions.MessageRequest{Text: "block", Timeout: 200 * time.Millisecond})
	sink.wait(t, "run admitted", map[string]any{"run": d.RunID, "timeout": int64(200 * time.Millisecond)})
	sink.wait(t, "run ended", map[string]any{"run": d.RunID, "status": "CANCELLED", "reason": "timeout"})

	// Parked until its confirmation is answered, then taken up again.
	k6 := obsSession(t, svc)
	n := obsSend(t, svc, k6, sessions.MessageRequest{Text: "note"})
	req := obsWaitEvent(t, svc, k6, rein.EventToolConfirmationRequested, n.RunID)
	var cr rein.ToolConfirmationRequestedPayload
	if err := req.DecodePayload(&cr); err != nil {
		t.Fatal(err)
	}
	sink.wait(t, "run parked", map[string]any{"run": n.RunID})
	if got := svc.Stats().Parked; got != 1 {
		t.Errorf("Stats.Parked = %d with one parked run", got)
	}
	if _, err := svc.ConfirmTool(ctx, k6, sessions.ConfirmRequest{ToolUseID: cr.ToolUseID, Allow: true}); err != nil {
		t.Fatal(err)
	}
	sink.wait(t, "run unparked", map[string]any{"run": n.RunID, "attempt": 1})
	sink.wait(t, "run ended", map[string]any{"run": n.RunID, "status": "COMPLETED", "reason": "stop"})
	if got := svc.Stats().Parked; got != 0 {
		t.Errorf("Stats.Parked = %d after the run was taken up again", got)
	}

	// Debug lines tell sizes and durations of model requests and tool
	// calls; no line, at any level, carries a message's text.
	sink.wait(t, "model request", map[string]any{"run": a.RunID, "step": 1, "finish": "stop", "level": "DEBUG"})
	sink.wait(t, "tool call", map[string]any{"run": n.RunID, "tool": "write_note", "tool_use_id": cr.ToolUseID, "is_error": false})
	if strings.Contains(sink.text(), secret) {
		t.Errorf("a log line carries the user's text:\n%s", sink.text())
	}
}

// TestResumeLogLines: after an instance is lost, the instance that takes
// the run up logs the in-doubt call and the resume.
func TestResumeLogLines(t *testing.T) {
	t.Parallel()
	clk := &shiftClock{}
	st := memory.New(memory.WithClock(clk.now))
	k := storetest.NewFaulty(st)
	first := newLogSink()
	svc := obsService(t, k, first)
	key := obsSession(t, svc)
	a := obsSend(t, svc, key, sessions.MessageRequest{Text: "block"})
	use := obsWaitEvent(t, svc, key, rein.EventToolUse, a.RunID)
	var tu rein.ToolUsePayload
	if err := use.DecodePayload(&tu); err != nil {
		t.Fatal(err)
	}
	k.Kill() // the instance is lost: nothing it writes from now on lands
	svc.Close()
	clk.advance(lapse)

	second := newLogSink()
	obsService(t, st, second)
	second.wait(t, "tool call in doubt", map[string]any{"run": a.RunID, "tool": "sleep", "tool_use_id": tu.ToolUseID, "level": "WARN"})
	second.wait(t, "run resumed", map[string]any{"run": a.RunID, "attempt": 2})
	second.wait(t, "run ended", map[string]any{"run": a.RunID, "status": "COMPLETED", "reason": "stop"})
	if n := second.count("run started", map[string]any{"run": a.RunID}); n != 0 {
		t.Errorf("a resumed run logged as started %d times", n)
	}
}

// TestDrainSummary: the drain's closing line counts what it did with each
// run.
func TestDrainSummary(t *testing.T) {
	t.Parallel()
	onBackends(t, testDrainSummary)
}

func testDrainSummary(t *testing.T, open opener) {
	sink := newLogSink()
	svc, stub := obsServiceTool(t, open(t), sink, longLease)
	ctx := context.Background()

	// Ends at the interrupt; a run queued behind it stays queued.
	ka := obsSession(t, svc)
	a := obsSend(t, svc, ka, sessions.MessageRequest{Text: "block"})
	next := obsSend(t, svc, ka, sessions.MessageRequest{Text: "next", WhenBusy: rein.WhenBusyEnqueue})
	obsWaitEvent(t, svc, ka, rein.EventToolUse, a.RunID)
	// Ignores the interrupt: cancelled after the timeout.
	kb := obsSession(t, svc)
	b := obsSend(t, svc, kb, sessions.MessageRequest{Text: "stubborn"})
	<-stub.entered
	// Waits for a confirmation: left waiting.
	kc := obsSession(t, svc)
	c := obsSend(t, svc, kc, sessions.MessageRequest{Text: "note"})
	sink.wait(t, "run parked", map[string]any{"run": c.RunID})

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The stubborn run holds the drain for all of this, and is cancelled
	// at its end: it must come before the stubborn tool is abandoned (its
	// grace, 1 s), which would let that run end by its interrupt. The
	// blocking run must end by its interrupt well within it, also on a
	// machine whose cores are shared by other test runs (100 ms was not
	// always enough there: it was cancelled instead).
	const drainTimeout = 500 * time.Millisecond
	if err := svc.Drain(dctx, drainTimeout); err != nil {
		t.Fatal(err)
	}
	sum := sink.wait(t, "drain finished", nil)
	want := map[string]int{"interrupted": 1, "cancelled": 1, "parked": 1, "queued": 1}
	if sink.count("run started", map[string]any{"run": next.RunID}) > 0 {
		// The schedule claimed the queued run as the drain began (its turn
		// came free): the claim stopped it at once, like the others.
		want["interrupted"], want["queued"] = 2, 0
	}
	for k, want := range want {
		if fmt.Sprint(sum[k]) != fmt.Sprint(jsonValue(want)) {
			t.Errorf("drain finished %s = %v, want %d (%v); the log:\n%s", k, sum[k], want, sum, sink.text())
		}
	}
	if d, ok := sum["duration"].(float64); !ok || d < float64(drainTimeout) {
		t.Errorf("drain finished duration %v", sum["duration"])
	}
	sink.wait(t, "run ended", map[string]any{"run": a.RunID, "status": "COMPLETED", "reason": "interrupted"})
	sink.wait(t, "run ended", map[string]any{"run": b.RunID, "status": "CANCELLED", "reason": "cancelled"})
}

// spanWaiter wakes a test when a span ends.
type spanWaiter struct {
	mu    sync.Mutex
	ended []string
	wake  chan struct{}
}

func (p *spanWaiter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *spanWaiter) OnEnd(s sdktrace.ReadOnlySpan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = append(p.ended, s.Name())
	close(p.wake)
	p.wake = make(chan struct{})
}
func (p *spanWaiter) Shutdown(context.Context) error   { return nil }
func (p *spanWaiter) ForceFlush(context.Context) error { return nil }

func (p *spanWaiter) wait(t *testing.T, name string) {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		wake := p.wake
		for _, n := range p.ended {
			if n == name {
				p.mu.Unlock()
				return
			}
		}
		p.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("span %q did not end", name)
		}
	}
}

func tracerProvider() (*tracetest.InMemoryExporter, *spanWaiter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	w := &spanWaiter{wake: make(chan struct{})}
	return exp, w, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(w))
}

func runSpan(t *testing.T, exp *tracetest.InMemoryExporter, runID string) tracetest.SpanStub {
	t.Helper()
	for _, s := range exp.GetSpans() {
		if s.Name != "rein.run" {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "rein.run.id" && a.Value.AsString() == runID {
				return s
			}
		}
	}
	t.Fatalf("no span of run %s", runID)
	return tracetest.SpanStub{}
}

// TestRunSpanLinks: a run's span links to the span that admitted it; the
// span of its resume after the instance was lost has no link (that request
// is long gone), and says which attempt it is.
func TestRunSpanLinks(t *testing.T) {
	t.Parallel()
	clk := &shiftClock{}
	st := memory.New(memory.WithClock(clk.now))
	k := storetest.NewFaulty(st)
	exp1, ends1, tp1 := tracerProvider()
	svc := obsService(t, k, newLogSink(), func(c *sessions.Config) { c.TracerProvider = tp1 })
	key := obsSession(t, svc)
	ctx, admitting := tp1.Tracer("test").Start(context.Background(), "admitting request")
	res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "block"})
	admitting.End()
	if err != nil {
		t.Fatal(err)
	}
	obsWaitEvent(t, svc, key, rein.EventToolUse, res.RunID)
	k.Kill()
	svc.Close()
	clk.advance(lapse)
	ends1.wait(t, "rein.run")
	first := runSpan(t, exp1, res.RunID)
	if len(first.Links) != 1 || first.Links[0].SpanContext.SpanID() != admitting.SpanContext().SpanID() {
		t.Errorf("first execution's links %+v, want the admitting span", first.Links)
	}

	exp2, ends2, tp2 := tracerProvider()
	sink := newLogSink()
	obsService(t, st, sink, func(c *sessions.Config) { c.TracerProvider = tp2 })
	sink.wait(t, "run ended", map[string]any{"run": res.RunID, "status": "COMPLETED"})
	ends2.wait(t, "rein.run")
	resumed := runSpan(t, exp2, res.RunID)
	if len(resumed.Links) != 0 || resumed.Parent.IsValid() {
		t.Errorf("resumed run span links %+v parent %v, want none", resumed.Links, resumed.Parent)
	}
	got := map[string]string{}
	for _, a := range resumed.Attributes {
		got[string(a.Key)] = a.Value.String()
	}
	if got["rein.run.attempt"] != "2" || got["rein.run.status"] != "COMPLETED" || got["rein.run.reason"] != "stop" {
		t.Errorf("resumed run span attributes %v", got)
	}
	sink.wait(t, "run resumed", map[string]any{"run": res.RunID, "trace_id": resumed.SpanContext.TraceID().String()})
}
