package agent_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
)

// obsMark is the context key an observer uses to prove that the context it
// returned is the one the request or the call runs with.
type obsMark struct{}

// watcher is an agent.Observer that records what it is told.
type watcher struct {
	mu      sync.Mutex
	models  []agent.ModelResponse
	tools   []agent.ToolResult
	badCtx  []string
	started int
	// modelStarted and toolStarted get a value at each start (buffered).
	modelStarted, toolStarted chan struct{}
}

func newWatcher() *watcher {
	return &watcher{modelStarted: make(chan struct{}, 8), toolStarted: make(chan struct{}, 8)}
}

func (w *watcher) ModelRequestStarted(ctx context.Context, r agent.ModelRequest) context.Context {
	w.mu.Lock()
	w.started++
	w.mu.Unlock()
	w.modelStarted <- struct{}{}
	return context.WithValue(ctx, obsMark{}, "model")
}

func (w *watcher) ModelRequestEnded(ctx context.Context, r agent.ModelResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Value(obsMark{}) != "model" {
		w.badCtx = append(w.badCtx, "ModelRequestEnded")
	}
	w.models = append(w.models, r)
}

func (w *watcher) ToolCallStarted(ctx context.Context, c agent.ToolCall) context.Context {
	w.toolStarted <- struct{}{}
	return context.WithValue(ctx, obsMark{}, "tool:"+c.ID)
}

func (w *watcher) ToolCallEnded(ctx context.Context, r agent.ToolResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Value(obsMark{}) != "tool:"+r.ID {
		w.badCtx = append(w.badCtx, "ToolCallEnded "+r.Name)
	}
	w.tools = append(w.tools, r)
}

// markedModel checks that every stream runs with the observer's context.
type markedModel struct {
	model.Model
	mu       sync.Mutex
	unmarked int
}

func (m *markedModel) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	if ctx.Value(obsMark{}) != "model" {
		m.mu.Lock()
		m.unmarked++
		m.mu.Unlock()
	}
	return m.Model.Stream(ctx, req)
}

// markTool reports whether its call ran with the observer's context.
type markTool struct{}

func (markTool) Spec() tool.Spec {
	return tool.Spec{Name: "mark", Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (markTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	if ctx.Value(obsMark{}) != "tool:"+c.ID {
		return tool.Result{Output: "unmarked", IsError: true}, nil
	}
	return tool.Result{Output: "marked"}, nil
}

const observeScript = `
rules:
  - match: "^tools"
    steps:
      - text: "calling tools"
        tool_calls:
          - name: mark
            input: {}
          - name: ghost
            input: {}
      - text: "done"
  - match: "^slow"
    steps:
      - text: "one two three four"
        chunks: 4
        chunk_delay: 1h
  - match: "^block"
    steps:
      - text: "blocking"
        tool_calls:
          - name: sleep
            input: {seconds: 3600}
      - text: "unblocked"
`

func observedRun(t *testing.T, input string, w *watcher) (*execution, *sink, *markedModel) {
	t.Helper()
	base, err := scripted.Parse("observe.yaml", []byte(observeScript))
	if err != nil {
		t.Fatal(err)
	}
	m := &markedModel{Model: base}
	e := newEnv(t, observeScript, markTool{})
	a, err := agent.New(agent.Config{Model: m, Tools: e.tools, MaxSteps: 4})
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink()
	turn := &agent.Turn{Session: sess, RunID: "run_obs", Input: input, Events: sk, Observer: w,
		Journal: agent.NewJournal("run_obs", e.hist, sk, e.inbox.Session(sess))}
	r := goRun("run_obs", func(ctx context.Context, c *run.Control) run.Outcome {
		return a.Run(ctx, c, turn)
	})
	return r, sk, m
}

// TestObserverSeesEveryRequestAndCall: each model request and tool
// execution is observed once, with its measurements, and runs with the
// context the observer returned.
func TestObserverSeesEveryRequestAndCall(t *testing.T) {
	w := newWatcher()
	r, _, m := observedRun(t, "tools", w)
	res := waitRun(t, r, 10*time.Second)
	if res.Status != rein.StatusCompleted {
		t.Fatalf("run %+v", res)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.badCtx) > 0 || m.unmarked > 0 {
		t.Errorf("not run with the observer's context: %v, %d model streams", w.badCtx, m.unmarked)
	}
	if w.started != 2 || len(w.models) != 2 {
		t.Fatalf("%d requests started, %d ended; want 2", w.started, len(w.models))
	}
	var sum rein.Usage
	for i, want := range []struct {
		finish string
		calls  int
	}{{model.FinishToolCalls, 2}, {model.FinishStop, 0}} {
		got := w.models[i]
		if got.Step != i+1 || got.RunID != "run_obs" || got.Session != sess || got.Model != "scripted:observe.yaml" ||
			got.Finish != want.finish || got.ToolCalls != want.calls || got.Err != nil || got.Stopped {
			t.Errorf("request %d: %+v", i+1, got)
		}
		if got.Usage.InputTokens <= 0 || got.Usage.OutputTokens <= 0 || got.FirstDelta <= 0 || got.Duration < got.FirstDelta {
			t.Errorf("request %d measurements: %+v", i+1, got)
		}
		sum = sum.Add(got.Usage)
	}
	if sum != res.Usage {
		t.Errorf("requests' usage adds up to %+v, the run's is %+v", sum, res.Usage)
	}
	if len(w.tools) != 2 {
		t.Fatalf("%d tool calls observed, want 2", len(w.tools))
	}
	byName := map[string]agent.ToolResult{}
	for _, c := range w.tools {
		byName[c.Name] = c
	}
	if c := byName["mark"]; !c.Known || c.IsError || c.Stopped || c.ID == "" || c.Step != 1 {
		t.Errorf("mark call %+v", c)
	}
	if c := byName["ghost"]; c.Known || !c.IsError || c.Stopped {
		t.Errorf("call to an unknown tool %+v", c)
	}
}

// TestObserverSeesStops: a stop that cuts a model request or a tool call
// is reported as stopped, not as a failure.
func TestObserverSeesStops(t *testing.T) {
	t.Run("model request", func(t *testing.T) {
		w := newWatcher()
		r, _, _ := observedRun(t, "slow", w)
		<-w.modelStarted // its first delta is an hour away
		r.Cancel()
		waitRun(t, r, 10*time.Second)
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.models) != 1 || !w.models[0].Stopped || w.models[0].Err != nil {
			t.Fatalf("cut request observed as %+v", w.models)
		}
	})
	t.Run("tool call", func(t *testing.T) {
		w := newWatcher()
		r, _, _ := observedRun(t, "block", w)
		<-w.toolStarted // an hour-long sleep
		r.Interrupt("")
		res := waitRun(t, r, 10*time.Second)
		w.mu.Lock()
		defer w.mu.Unlock()
		if res.Reason != rein.ReasonInterrupted || len(w.tools) != 1 || !w.tools[0].Stopped || w.tools[0].Name != "sleep" || !w.tools[0].IsError {
			t.Fatalf("run %s, tool calls observed %+v", res.Reason, w.tools)
		}
	})
}
