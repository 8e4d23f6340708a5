package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
)

// recJournal wraps a Journal, records the order of its calls, and can fail
// SaveResult.
type recJournal struct {
	agent.Journal
	failResult error

	mu    sync.Mutex
	calls []string
	done  bool // Finish was called
	late  []string
}

func (j *recJournal) note(name string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done {
		j.late = append(j.late, name)
	}
	j.calls = append(j.calls, name)
}

func (j *recJournal) SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall, req *rein.ModelRequestPayload) error {
	j.note("SaveStep")
	return j.Journal.SaveStep(ctx, step, asst, confirm, req)
}

func (j *recJournal) SaveResult(ctx context.Context, res rein.Message) error {
	j.note("SaveResult")
	if j.failResult != nil {
		return j.failResult
	}
	return j.Journal.SaveResult(ctx, res)
}

func (j *recJournal) Finish(ctx context.Context, msgs []rein.Message, evs []rein.Event) error {
	j.note("Finish")
	j.mu.Lock()
	j.done = true
	j.mu.Unlock()
	return j.Journal.Finish(ctx, msgs, evs)
}

// startWith starts a run whose journal is wrapped by wrap and whose turn
// is adjusted by mod.
func (e *env) startWith(runID, input string, wrap func(agent.Journal) agent.Journal, mod func(*agent.Turn)) (*execution, *sink) {
	e.t.Helper()
	sk := newSink()
	j := agent.NewJournal(runID, e.hist, sk, e.inbox.Session(sess))
	if wrap != nil {
		j = wrap(j)
	}
	turn := &agent.Turn{Session: sess, RunID: runID, Input: input, Events: sk, Journal: j,
		Confirm: confirmer{gate: e.gate}, Workspace: e.t.TempDir()}
	if mod != nil {
		mod(turn)
	}
	r := goRun(runID, func(ctx context.Context, c *run.Control) run.Outcome {
		return e.agent.Run(ctx, c, turn)
	})
	return r, sk
}

// The final-step rule holds at the step budget too: a supplement that
// arrives during the last allowed request still gets its step.
func TestFinalStepRuleAtMaxSteps(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "calling"
        tool_calls:
          - name: sleep
            input: {seconds: 0}
      - text: "final answer"
      - text: "revised with [{{.Hints}}]"
`)
	var err error
	if e.agent, err = agent.New(agent.Config{Model: e.model, Tools: e.tools, MaxSteps: 2}); err != nil {
		t.Fatal(err)
	}
	gated := &gatedNth{Model: e.model.Model, n: 2, inFlight: make(chan struct{}), proceed: make(chan struct{})}
	e.model.Model = gated
	r, _ := e.start("r1", "go")
	<-gated.inFlight // step 2, the last allowed, is in flight and ends without tool calls
	e.inbox.Push(sess, "late", "in French", inbox.SourceUser)
	close(gated.proceed)
	res := waitRun(t, r, 10*time.Second)
	if res.Reason != rein.ReasonStop || res.Reply != "revised with [in French]" {
		t.Fatalf("%+v", res)
	}
	if n := len(e.model.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// A failure to record a tool result fails the run (it was not stopped),
// and the saved transcript stays valid.
func TestToolResultStoreFailureFails(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "calling"
        tool_calls:
          - name: sleep
            input: {seconds: 0}
      - text: "never"
`)
	boom := errors.New("disk full")
	r, _ := e.startWith("r1", "go", func(j agent.Journal) agent.Journal { return &recJournal{Journal: j, failResult: boom} }, nil)
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusFailed || res.Reason != rein.ReasonError || !errors.Is(res.Err, boom) {
		t.Fatalf("%+v", res)
	}
	if err := rein.ValidateTranscript(e.hist.all()); err != nil {
		t.Fatal(err)
	}
}

// slowStop is a tool that notices its context late and then claims
// success: its result must not be written after the run's end.
type slowStop struct{ entered chan struct{} }

func (slowStop) Spec() tool.Spec {
	return tool.Spec{Name: "slow_stop", Description: "slow to stop", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (s slowStop) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	s.entered <- struct{}{}
	<-ctx.Done()
	time.Sleep(30 * time.Millisecond) // a tool that takes its time to clean up
	return tool.Result{Output: "finished anyway"}, nil
}

func TestToolGoroutinesJoinedOnStop(t *testing.T) {
	tl := slowStop{entered: make(chan struct{}, 1)}
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "calling"
        tool_calls:
          - name: slow_stop
            input: {}
      - text: "never"
`, tl)
	var rj *recJournal
	r, _ := e.startWith("r1", "go", func(j agent.Journal) agent.Journal { rj = &recJournal{Journal: j}; return rj }, nil)
	<-tl.entered
	r.Cancel()
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusCancelled {
		t.Fatalf("%+v", res)
	}
	rj.mu.Lock()
	defer rj.mu.Unlock()
	if len(rj.late) > 0 || rj.calls[len(rj.calls)-1] != "Finish" {
		t.Fatalf("journal calls %v (after Finish: %v)", rj.calls, rj.late)
	}
}

// Several calls of one step that need confirmation are requested together,
// in the model's order, and the results keep that order.
func TestConfirmationsInModelOrder(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "noting"
        tool_calls:
          - name: write_note
            input: {text: "first"}
          - name: write_note
            input: {text: "second"}
          - name: sleep
            input: {seconds: 0}
      - text: "last={{.ToolResult}}"
`)
	for range 5 {
		e.hist = &history{}
		r, sk := e.start("r1", "go")
		sk.waitUntil(t, "two requests", func(evs []rein.Event) bool {
			n := 0
			for _, e := range evs {
				if e.Type == rein.EventToolConfirmationRequested {
					n++
				}
			}
			return n == 2
		})
		var ids []string
		for _, ev := range sk.events() {
			if ev.Type == rein.EventToolConfirmationRequested {
				var p rein.ToolConfirmationRequestedPayload
				_ = json.Unmarshal(ev.Payload, &p)
				if !strings.Contains(string(p.Input), []string{"first", "second"}[len(ids)]) {
					t.Fatalf("request %d is for %s", len(ids), p.Input)
				}
				ids = append(ids, p.ToolUseID)
			}
		}
		// Answered out of order: the second first.
		if err := e.gate.Resolve(sess, ids[1], tool.Decision{Allow: false, DenyMessage: "not that one"}); err != nil {
			t.Fatal(err)
		}
		if err := e.gate.Resolve(sess, ids[0], tool.Decision{Allow: true}); err != nil {
			t.Fatal(err)
		}
		res := waitRun(t, r, 10*time.Second)
		reqs := e.model.requests()
		last := reqs[len(reqs)-1].Messages
		var order []string
		for _, m := range last {
			if m.Role == rein.RoleTool {
				order = append(order, m.ToolCallID)
			}
		}
		if len(order) != 3 || order[0] != ids[0] || order[1] != ids[1] {
			t.Fatalf("results in the next request: %v (calls %v)", order, ids)
		}
		if !strings.HasPrefix(res.Reply, "last=") {
			t.Fatalf("%+v", res)
		}
	}
}

// A resumed run whose step was cut in its model request makes the request
// again, announced by agent.step_restarted.
func TestResumeRestartsCutStep(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "hello"
`)
	e.hist.msgs = []rein.Message{{Role: rein.RoleUser, Text: "go", RunID: "r1"}}
	r, sk := e.startWith("r1", "go", nil, func(tn *agent.Turn) { tn.Attempt = 2 })
	res := waitRun(t, r, 10*time.Second)
	if res.Reason != rein.ReasonStop || res.Reply != "hello" {
		t.Fatalf("%+v", res)
	}
	evs := sk.events()
	if evs[0].Type != rein.EventStepRestarted {
		t.Fatalf("first event %s", evs[0].Type)
	}
	var p rein.StepRestartedPayload
	_ = json.Unmarshal(evs[0].Payload, &p)
	if p.Step != 1 || p.Attempt != 2 || p.RunID != "r1" {
		t.Fatalf("%+v", p)
	}
	// The input is not saved twice.
	users := 0
	for _, m := range e.hist.all() {
		if m.Role == rein.RoleUser {
			users++
		}
	}
	if users != 1 {
		t.Fatalf("%d user messages", users)
	}
}

// A resumed run in the tool phase waits for the calls still pending
// confirmation, runs none of the answered ones again, and does not repeat
// the step's model request.
func TestResumeOpenStep(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "never requested again"
      - text: "after: {{.ToolResult}}"
`)
	calls := []rein.ToolCall{
		{ID: "c1", Name: "write_note", Input: json.RawMessage(`{"text":"x"}`)},
		{ID: "c2", Name: "sleep", Input: json.RawMessage(`{"seconds":0}`)},
	}
	e.hist.msgs = []rein.Message{
		{Role: rein.RoleUser, Text: "go", RunID: "r1"},
		{Role: rein.RoleAssistant, Text: "calling", ToolCalls: calls, RunID: "r1", Step: 1},
		{Role: rein.RoleTool, ToolCallID: "c2", ToolName: "sleep", Text: "slept", RunID: "r1", Step: 1},
	}
	r, sk := e.startWith("r1", "go", nil, func(tn *agent.Turn) { tn.Attempt = 2 })
	// The pending call waits for its answer (its request was recorded
	// before the restart, so no new request event is logged).
	for e.gate.Waiting() == 0 {
		select {
		case <-r.Done():
			t.Fatal("run ended without waiting")
		case <-time.After(time.Millisecond):
		}
	}
	if err := e.gate.Resolve(sess, "c1", tool.Decision{Allow: true}); err != nil {
		t.Fatal(err)
	}
	res := waitRun(t, r, 10*time.Second)
	reqs := e.model.requests()
	if len(reqs) != 1 || reqs[0].Step != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var order []string
	for _, m := range reqs[0].Messages {
		if m.Role == rein.RoleTool {
			order = append(order, m.ToolCallID)
		}
	}
	if strings.Join(order, ",") != "c1,c2" {
		t.Fatalf("results %v", order)
	}
	if !strings.HasPrefix(res.Reply, "after: ") {
		t.Fatalf("%+v", res)
	}
	for _, ev := range sk.events() {
		if ev.Type == rein.EventStepRestarted || ev.Type == rein.EventToolConfirmationRequested {
			t.Fatalf("unexpected %s", ev.Type)
		}
	}
	if n := len(toolResults(t, sk.events())); n != 1 {
		t.Fatalf("%d tool results recorded, want only c1's", n)
	}
}

// gatedNth holds the nth request open until the test says proceed.
type gatedNth struct {
	model.Model
	mu       sync.Mutex
	seen     int
	n        int
	inFlight chan struct{}
	proceed  chan struct{}
}

func (g *gatedNth) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	g.mu.Lock()
	g.seen++
	hold := g.seen == g.n
	g.mu.Unlock()
	if hold {
		close(g.inFlight)
		select {
		case <-g.proceed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Model.Stream(ctx, req)
}

// cancelAtPending cancels its run when the loop asks for the pending
// supplements after a final step: the stop lands after the model's last
// word and before the reply is committed.
type cancelAtPending struct {
	agent.Journal
	cancel func()

	mu   sync.Mutex
	msgs []rein.Message
}

func (j *cancelAtPending) Pending(ctx context.Context) (int, error) {
	n, err := j.Journal.Pending(ctx)
	j.cancel()
	return n, err
}

func (j *cancelAtPending) Finish(ctx context.Context, msgs []rein.Message, evs []rein.Event) error {
	j.mu.Lock()
	j.msgs = append(j.msgs, msgs...)
	j.mu.Unlock()
	return j.Journal.Finish(ctx, msgs, evs)
}

// A reply whose commit loses to a cancel is saved as a partial reply of
// the step that produced it (it was saved with Step 0).
func TestPartialReplyOfLostCommitKeepsItsStep(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "calling"
        tool_calls:
          - name: sleep
            input: {seconds: 0}
      - text: "the final answer"
`)
	handle := make(chan *execution, 1)
	var j *cancelAtPending
	h, _ := e.startWith("r1", "go", func(inner agent.Journal) agent.Journal {
		j = &cancelAtPending{Journal: inner, cancel: func() {
			h := <-handle
			h.Cancel()
			handle <- h
		}}
		return j
	}, nil)
	handle <- h
	res := waitRun(t, h, 10*time.Second)
	if res.Status != rein.StatusCancelled {
		t.Fatalf("run ended %+v, want CANCELLED", res)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	found := false
	for _, m := range j.msgs {
		if m.Role == rein.RoleAssistant && m.Partial {
			found = true
			if m.Step != 2 || m.Text != "the final answer" {
				t.Errorf("partial reply %+v, want step 2 with the final answer", m)
			}
		}
	}
	if !found {
		t.Fatalf("no partial reply saved: %+v", j.msgs)
	}
}
