package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var sess = rein.SessionKey{Owner: "alice", ID: "s1"}

// ---------------------------------------------------------------- harness

// history is an in-memory Transcript.
type history struct {
	mu   sync.Mutex
	msgs []rein.Message
}

func (h *history) Load(ctx context.Context) ([]rein.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rein.Message(nil), h.msgs...), nil
}

func (h *history) Append(ctx context.Context, msgs ...rein.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, msgs...)
	return nil
}

func (h *history) all() []rein.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rein.Message(nil), h.msgs...)
}

// sink records events and lets a test wait for one.
type sink struct {
	mu     sync.Mutex
	evs    []rein.Event
	notify chan struct{}
}

func newSink() *sink { return &sink{notify: make(chan struct{})} }

func (s *sink) Emit(ctx context.Context, evs ...rein.Event) error {
	s.mu.Lock()
	s.evs = append(s.evs, evs...)
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
	return nil
}

func (s *sink) events() []rein.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]rein.Event(nil), s.evs...)
}

// waitUntil blocks until done holds for the events emitted so far.
func (s *sink) waitUntil(t *testing.T, what string, done func([]rein.Event) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		ok, ch := done(s.evs), s.notify
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("waited in vain for %s", what)
		}
	}
}

// waitFor blocks until an event of type typ has been emitted and returns it.
func (s *sink) waitFor(t *testing.T, typ rein.EventType) rein.Event {
	t.Helper()
	var found rein.Event
	s.waitUntil(t, string(typ), func(evs []rein.Event) bool {
		for _, e := range evs {
			if e.Type == typ {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// recorder wraps a model and keeps every request it received.
type recorder struct {
	model.Model
	mu   sync.Mutex
	reqs []model.Request
}

func (r *recorder) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	r.mu.Lock()
	cp := *req
	cp.Messages = append([]rein.Message(nil), req.Messages...)
	r.reqs = append(r.reqs, cp)
	r.mu.Unlock()
	return r.Model.Stream(ctx, req)
}

func (r *recorder) requests() []model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.Request(nil), r.reqs...)
}

type env struct {
	t     *testing.T
	model *recorder
	tools *tool.Registry
	agent *agent.Agent
	hist  *history
	inbox *inbox.Memory
	gate  *tool.Gate
}

func newEnv(t *testing.T, script string, extra ...tool.Tool) *env {
	t.Helper()
	m, err := scripted.Parse("test.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tool.NewRegistry(tool.RegistryOptions{}, append(builtin.All(), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, model: &recorder{Model: m}, tools: reg,
		hist: &history{}, inbox: inbox.NewMemory(nil), gate: tool.NewGate()}
	e.agent, err = agent.New(agent.Config{Model: e.model, Tools: reg, MaxSteps: 4})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// confirmer is the in-process gate: SaveStep announces the request.
type confirmer struct {
	gate *tool.Gate
}

func (c confirmer) Open(req agent.ConfirmRequest) (agent.Pending, error) {
	return c.gate.Open(req.Session, req.ToolUseID)
}

// start starts a run of input and returns its handle and event sink.
func (e *env) start(runID, input string) (*execution, *sink) {
	e.t.Helper()
	sk := newSink()
	turn := &agent.Turn{Session: sess, RunID: runID, Input: input, Events: sk,
		Journal: agent.NewJournal(runID, e.hist, sk, e.inbox.Session(sess)), Confirm: confirmer{gate: e.gate}, Workspace: e.t.TempDir()}
	r := goRun(runID, func(ctx context.Context, c *run.Control) run.Outcome {
		return e.agent.Run(ctx, c, turn)
	})
	return r, sk
}

// execution is a run of the loop on a goroutine of its own, as a runtime
// executes it: the handle (the stop wire) and its end.
type execution struct {
	*run.Run
	done chan struct{}
	res  run.Result
}

// goRun executes fn as the run id on a goroutine of its own.
func goRun(id string, fn run.Func) *execution {
	x := &execution{Run: run.New(run.Options{ID: id}), done: make(chan struct{})}
	go func() {
		x.res, _ = x.Execute(context.Background(), fn)
		close(x.done)
	}()
	return x
}

// Done is closed once the run's result is decided.
func (x *execution) Done() <-chan struct{} { return x.done }

// Result is the run's result; ok is false until it is decided.
func (x *execution) Result() (run.Result, bool) {
	select {
	case <-x.done:
		return x.res, true
	default:
		return run.Result{}, false
	}
}

// Status is RUNNING until the run ended, then its result's status.
func (x *execution) Status() rein.RunStatus {
	if res, ok := x.Result(); ok {
		return res.Status
	}
	return rein.StatusRunning
}

func waitRun(t *testing.T, r *execution, within time.Duration) run.Result {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(within):
		t.Fatalf("run %s did not end within %v", r.ID(), within)
	}
	res, _ := r.Result()
	return res
}

func lastMessage(t *testing.T, evs []rein.Event) rein.MessagePayload {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == rein.EventMessage {
			var p rein.MessagePayload
			if err := json.Unmarshal(evs[i].Payload, &p); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("no agent.message")
	return rein.MessagePayload{}
}

func toolResults(t *testing.T, evs []rein.Event) []rein.ToolResultPayload {
	var out []rein.ToolResultPayload
	for _, e := range evs {
		if e.Type == rein.EventToolResult {
			var p rein.ToolResultPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// nextRunIsWellFormed runs another message in the session and checks that
// its first model request carries a valid transcript.
func (e *env) nextRunIsWellFormed(runID string) {
	e.t.Helper()
	if err := rein.ValidateTranscript(e.hist.all()); err != nil {
		e.t.Fatalf("saved transcript invalid: %v\n%+v", err, e.hist.all())
	}
	n := len(e.model.requests())
	r, _ := e.start(runID, "and now?")
	waitRun(e.t, r, 10*time.Second)
	reqs := e.model.requests()
	if len(reqs) <= n {
		e.t.Fatal("next run made no request")
	}
	if err := rein.ValidateTranscript(reqs[n].Messages); err != nil {
		e.t.Fatalf("next run's first request is malformed: %v", err)
	}
}

// ------------------------------------------------------------------ tests

// stallScript answers the follow-up runs of the stop tests; the run under
// test ("go") is served by stalledAfterFirstChunk instead.
const stallScript = `
rules:
  - match: "^and now"
    steps:
      - text: "fine"
`

func TestInterruptStalledModelIsPrompt(t *testing.T) {
	// A model that sends one chunk and then stalls (longer than any 10 s
	// gap between chunks): the interrupt must not wait for the next chunk.
	e := newEnv(t, stallScript)
	e.model.Model = stalledAfterFirstChunk{e.model.Model}
	r, sk := e.start("r1", "go")
	sk.waitFor(t, rein.EventMessageDelta) // the first chunk arrived; the model now stalls
	t0 := time.Now()
	if !r.Interrupt("stop") {
		t.Fatal("interrupt not accepted")
	}
	res := waitRun(t, r, time.Second)
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Fatalf("interrupt took %v", d)
	}
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonInterrupted {
		t.Fatalf("%+v", res)
	}
	msg := lastMessage(t, sk.events())
	if msg.Reason != rein.ReasonInterrupted || msg.Text != "a" {
		t.Fatalf("reply %+v", msg)
	}
	h := e.hist.all()
	if last := h[len(h)-1]; last.Role != rein.RoleAssistant || !last.Partial || last.Text != "a" {
		t.Fatalf("partial not kept: %+v", last)
	}
	e.nextRunIsWellFormed("r2")
}

// stalledAfterFirstChunk serves the run input "go" with a stream that
// delivers one delta at once and then stalls until its context ends (the
// scripted model's chunk_delay comes before every delta, the first
// included, so it cannot express "one chunk, then silence"). Other inputs
// go to the wrapped model.
type stalledAfterFirstChunk struct{ model.Model }

func (f stalledAfterFirstChunk) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	if req.Input != "go" {
		return f.Model.Stream(ctx, req)
	}
	return &fastFirst{ctx: ctx, text: "a"}, nil
}

// fastFirst yields one delta, then blocks until ctx ends (a stalled
// provider).
type fastFirst struct {
	ctx  context.Context
	text string
	sent bool
}

func (s *fastFirst) Recv() (model.Chunk, error) {
	if !s.sent {
		s.sent = true
		return model.Chunk{Kind: model.ChunkText, Text: s.text}, nil
	}
	<-s.ctx.Done()
	return model.Chunk{}, s.ctx.Err()
}

func (s *fastFirst) Close() error { return nil }

const longToolScript = `
rules:
  - match: "^and now"
    steps:
      - text: "fine"
  - match: ".*"
    steps:
      - text: "let me sleep"
        tool_calls:
          - name: sleep
            input: {seconds: 3600}
          - name: sleep
            input: {seconds: 0}
      - text: "woke: {{.ToolResult}}"
`

func TestInterruptDuringToolCall(t *testing.T) {
	e := newEnv(t, longToolScript)
	r, sk := e.start("r1", "go")
	sk.waitFor(t, rein.EventToolUse)
	// Wait until the quick sleep answered so one call is done, one is not.
	waitResults(t, sk, 1)
	if !r.Interrupt("") {
		t.Fatal("interrupt not accepted")
	}
	res := waitRun(t, r, 2*time.Second)
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonInterrupted {
		t.Fatalf("%+v", res)
	}
	evs := sk.events()
	trs := toolResults(t, evs)
	if len(trs) != 2 {
		t.Fatalf("tool results %+v", trs)
	}
	if trs[1].Output != rein.InterruptedToolOutput || !trs[1].IsError {
		t.Fatalf("cut-short call result %+v", trs[1])
	}
	if lastMessage(t, evs).Reason != rein.ReasonInterrupted {
		t.Fatal("no interrupted reply")
	}
	e.nextRunIsWellFormed("r2")
}

func waitResults(t *testing.T, sk *sink, n int) {
	t.Helper()
	sk.waitUntil(t, fmt.Sprintf("%d tool results", n), func(evs []rein.Event) bool {
		return len(toolResults(t, evs)) >= n
	})
}

func TestCancelDuringToolCall(t *testing.T) {
	e := newEnv(t, longToolScript)
	r, sk := e.start("r1", "go")
	waitResults(t, sk, 1)
	if !r.Cancel() {
		t.Fatal("cancel not accepted")
	}
	res := waitRun(t, r, 2*time.Second)
	if res.Status != rein.StatusCancelled || res.Reason != rein.ReasonCancelled {
		t.Fatalf("%+v", res)
	}
	evs := sk.events()
	for _, ev := range evs {
		if ev.Type == rein.EventMessage {
			t.Fatal("a cancelled run produced a final reply")
		}
	}
	trs := toolResults(t, evs)
	if len(trs) != 2 || !trs[1].IsError {
		t.Fatalf("tool results %+v", trs)
	}
	e.nextRunIsWellFormed("r2")
}

func TestCancelMidStreamDiscardPolicy(t *testing.T) {
	e := newEnv(t, stallScript)
	e.agent, _ = agent.New(agent.Config{Model: e.model, Tools: e.tools, Partial: agent.DiscardPartial})
	e.model.Model = stalledAfterFirstChunk{e.model.Model}
	r, sk := e.start("r1", "go")
	sk.waitFor(t, rein.EventMessageDelta)
	r.Interrupt("")
	res := waitRun(t, r, time.Second)
	if res.Reason != rein.ReasonInterrupted {
		t.Fatalf("%+v", res)
	}
	for _, m := range e.hist.all() {
		if m.Role == rein.RoleAssistant {
			t.Fatalf("discard policy kept %+v", m)
		}
	}
	e.nextRunIsWellFormed("r2")
}

func TestSupplementReachesNextRequest(t *testing.T) {
	blk := newBlockTool()
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "working"
        tool_calls:
          - name: block
            input: {}
      - text: "step {{.Step}} hints=[{{.Hints}}]"
`, blk)
	r, sk := e.start("r1", "go")
	<-blk.entered
	// Step 1's request is done; the notes must reach step 2's request.
	e.inbox.Push(sess, "sup_1", "use metric units", inbox.SourceUser)
	e.inbox.Push(sess, "sup_2", "and be brief", inbox.SourceUser)
	close(blk.release)
	res := waitRun(t, r, 10*time.Second)
	if res.Reply != "step 2 hints=[use metric units; and be brief]" {
		t.Fatalf("reply %q", res.Reply)
	}
	var consumed []rein.SupplementConsumedPayload
	for _, ev := range sk.events() {
		if ev.Type == rein.EventSupplementConsumed {
			var p rein.SupplementConsumedPayload
			_ = json.Unmarshal(ev.Payload, &p)
			consumed = append(consumed, p)
		}
	}
	if len(consumed) != 2 || consumed[0].Step != 2 || consumed[0].RunID != "r1" || consumed[0].SupplementID != "sup_1" {
		t.Fatalf("consumed %+v", consumed)
	}
	// Exactly once: nothing left, and the request of step 2 carried both.
	if s, _ := e.inbox.Get(sess, "sup_1"); s.Status != "consumed" || s.Step != 2 {
		t.Fatalf("sup_1 %+v", s)
	}
	reqs := e.model.requests()
	hints := 0
	for _, m := range reqs[1].Messages {
		if m.Hint != nil {
			hints++
		}
	}
	if hints != 2 {
		t.Fatalf("step 2 request had %d hints", hints)
	}
}

// blockTool blocks until the test releases it.
type blockTool struct {
	entered chan struct{}
	release chan struct{}
}

func newBlockTool() *blockTool {
	return &blockTool{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (*blockTool) Spec() tool.Spec {
	return tool.Spec{Name: "block", Description: "blocks", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (b *blockTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return tool.Result{Output: "unblocked"}, nil
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
}

func TestSupplementDuringFinalStepGetsOneMoreStep(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "final answer"
      - text: "revised with [{{.Hints}}]"
`)
	gated := &gatedModel{Model: e.model.Model, inFlight: make(chan struct{}), proceed: make(chan struct{})}
	e.model.Model = gated
	r, sk := e.start("r1", "go")
	<-gated.inFlight // step 1's request is in flight and will end without tool calls
	e.inbox.Push(sess, "late", "actually, in French", inbox.SourceUser)
	close(gated.proceed)
	res := waitRun(t, r, 10*time.Second)
	if res.Reply != "revised with [actually, in French]" || res.Reason != rein.ReasonStop {
		t.Fatalf("%+v", res)
	}
	if n := len(e.model.requests()); n != 2 {
		t.Fatalf("%d requests", n)
	}
	msg := lastMessage(t, sk.events())
	if msg.Text != res.Reply {
		t.Fatalf("agent.message %+v", msg)
	}
	if err := rein.ValidateTranscript(e.hist.all()); err != nil {
		t.Fatal(err)
	}
}

// gatedModel holds the first request open until the test says proceed.
type gatedModel struct {
	model.Model
	once     sync.Once
	inFlight chan struct{}
	proceed  chan struct{}
}

func (g *gatedModel) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.inFlight)
		select {
		case <-g.proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Model.Stream(ctx, req)
}

func TestNoSupplementNoExtraStep(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "hello {{.Input}}"
        chunks: 3
`)
	r, sk := e.start("r1", "world")
	res := waitRun(t, r, 10*time.Second)
	if res.Reply != "hello world" || len(e.model.requests()) != 1 {
		t.Fatalf("%+v", res)
	}
	var deltas string
	for _, ev := range sk.events() {
		if ev.Type == rein.EventMessageDelta {
			var p rein.MessageDeltaPayload
			_ = json.Unmarshal(ev.Payload, &p)
			deltas += p.Text
		}
	}
	if deltas != "hello world" {
		t.Fatalf("deltas %q", deltas)
	}
	if res.Usage.OutputTokens == 0 || lastMessage(t, sk.events()).Usage == nil {
		t.Fatal("usage not recorded")
	}
}

func TestBadToolCallsBecomeErrorResults(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "calling"
        tool_calls:
          - name: no_such_tool
            input: {}
      - text: "r1={{.ToolResult}}"
        tool_calls:
          - name: sleep
            input: {seconds: "abc"}
      - text: "r2={{.ToolResult}}"
`)
	r, sk := e.start("r1", "go")
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusCompleted {
		t.Fatalf("%+v", res)
	}
	trs := toolResults(t, sk.events())
	if len(trs) != 2 || !trs[0].IsError || !trs[1].IsError {
		t.Fatalf("%+v", trs)
	}
	if !strings.Contains(trs[0].Output, "no_such_tool") {
		t.Fatalf("unknown tool result %q", trs[0].Output)
	}
	reqs := e.model.requests()
	if !strings.Contains(res.Reply, "r2=") || len(reqs) != 3 {
		t.Fatalf("reply %q", res.Reply)
	}
	// The model saw the schema failure as its tool result.
	last := reqs[2].Messages[len(reqs[2].Messages)-1]
	if last.Role != rein.RoleTool || !last.IsError || !strings.Contains(res.Reply, last.Text) {
		t.Fatalf("model did not see the error: %+v / %q", last, res.Reply)
	}
}

func TestMaxSteps(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "again {{.Step}}"
        tool_calls:
          - name: sleep
            input: {seconds: 0}
`)
	r, sk := e.start("r1", "loop")
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusCompleted || res.Reason != rein.ReasonMaxSteps || res.Reply != "again 4" {
		t.Fatalf("%+v", res)
	}
	if n := len(e.model.requests()); n != 4 {
		t.Fatalf("%d requests", n)
	}
	if lastMessage(t, sk.events()).Reason != rein.ReasonMaxSteps {
		t.Fatal("reply reason")
	}
	if err := rein.ValidateTranscript(e.hist.all()); err != nil {
		t.Fatal(err)
	}
}

func TestModelErrorFails(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - error: "upstream exploded"
`)
	r, _ := e.start("r1", "go")
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusFailed || res.Reason != rein.ReasonError || !strings.Contains(res.Err.Error(), "upstream exploded") {
		t.Fatalf("%+v", res)
	}
	if err := rein.ValidateTranscript(e.hist.all()); err != nil {
		t.Fatal(err)
	}
}

func TestToolConfirmation(t *testing.T) {
	script := `
rules:
  - match: "^and now"
    steps:
      - text: "fine"
  - match: ".*"
    steps:
      - text: "saving"
        tool_calls:
          - name: write_note
            input: {text: "{{.Input}}"}
      - text: "result: {{.ToolResult}}"
`
	t.Run("allow", func(t *testing.T) {
		e := newEnv(t, script)
		r, sk := e.start("r1", "remember milk")
		ev := sk.waitFor(t, rein.EventToolConfirmationRequested)
		var p rein.ToolConfirmationRequestedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if r.Status() != rein.StatusRunning {
			t.Fatal("not running while waiting")
		}
		if err := e.gate.Resolve(sess, p.ToolUseID, tool.Decision{Allow: true}); err != nil {
			t.Fatal(err)
		}
		res := waitRun(t, r, 10*time.Second)
		if !strings.HasPrefix(res.Reply, "result: note saved") {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("deny", func(t *testing.T) {
		e := newEnv(t, script)
		r, sk := e.start("r1", "remember milk")
		ev := sk.waitFor(t, rein.EventToolConfirmationRequested)
		var p rein.ToolConfirmationRequestedPayload
		_ = json.Unmarshal(ev.Payload, &p)
		if err := e.gate.Resolve(sess, p.ToolUseID, tool.Decision{Allow: false, DenyMessage: "not today"}); err != nil {
			t.Fatal(err)
		}
		res := waitRun(t, r, 10*time.Second)
		if res.Status != rein.StatusCompleted || !strings.Contains(res.Reply, "not today") {
			t.Fatalf("%+v", res)
		}
	})
	t.Run("cancel while waiting", func(t *testing.T) {
		e := newEnv(t, script)
		r, sk := e.start("r1", "remember milk")
		sk.waitFor(t, rein.EventToolConfirmationRequested)
		r.Cancel()
		res := waitRun(t, r, time.Second)
		if res.Status != rein.StatusCancelled {
			t.Fatalf("%+v", res)
		}
		trs := toolResults(t, sk.events())
		if len(trs) != 1 || !trs[0].IsError {
			t.Fatalf("%+v", trs)
		}
		e.nextRunIsWellFormed("r2")
	})
}

func TestInterruptMessageIsNotInput(t *testing.T) {
	e := newEnv(t, longToolScript)
	r, sk := e.start("r1", "go")
	waitResults(t, sk, 1)
	r.Interrupt("please do something else entirely")
	waitRun(t, r, 2*time.Second)
	for _, m := range e.hist.all() {
		if strings.Contains(m.Text, "something else") {
			t.Fatalf("interrupt message entered the transcript: %+v", m)
		}
	}
}
