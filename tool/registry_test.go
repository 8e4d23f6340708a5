package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTool is a tool whose behaviour a test writes inline.
type fakeTool struct {
	spec Spec
	call func(ctx context.Context, c Call) (Result, error)
}

func (f fakeTool) Spec() Spec { return f.spec }
func (f fakeTool) Call(ctx context.Context, c Call) (Result, error) {
	if f.call == nil {
		return Result{Output: "ok"}, nil
	}
	return f.call(ctx, c)
}

var echoSchema = json.RawMessage(`{
  "type": "object",
  "properties": {"text": {"type": "string", "minLength": 1}, "times": {"type": "integer", "minimum": 1}},
  "required": ["text"],
  "additionalProperties": false
}`)

func echoTool() fakeTool {
	return fakeTool{spec: Spec{Name: "echo", Description: "echoes", InputSchema: echoSchema}, call: func(_ context.Context, c Call) (Result, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(c.Input, &in); err != nil {
			return Result{}, err
		}
		return Result{Output: in.Text}, nil
	}}
}

// syncBuffer is a log sink safe for the registry's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newRegistry(t *testing.T, opts RegistryOptions, tools ...Tool) (*Registry, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	r, err := NewRegistry(opts, tools...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return r, logs
}

func TestNewRegistryRejects(t *testing.T) {
	named := func(name string, schema string) Tool {
		return fakeTool{spec: Spec{Name: name, InputSchema: json.RawMessage(schema)}}
	}
	list := func(names ...string) *[]string { return &names }
	tests := []struct {
		name  string
		opts  RegistryOptions
		tools []Tool
		want  string
	}{
		{"duplicate", RegistryOptions{}, []Tool{named("a", ""), named("b", ""), named("a", "")}, `tool "a" registered twice`},
		{"empty name", RegistryOptions{}, []Tool{named("", "")}, `tool name ""`},
		{"name with spaces", RegistryOptions{}, []Tool{named("do it", "")}, `tool name "do it"`},
		{"nil tool", RegistryOptions{}, []Tool{named("a", ""), nil}, "tool 1 is nil"},
		{"schema not JSON", RegistryOptions{}, []Tool{named("a", `{"type":`)}, `tool "a": input schema: not valid JSON`},
		{"schema not an object", RegistryOptions{}, []Tool{named("a", `true`)}, `tool "a": input schema: must be a JSON object`},
		{"schema with a bad keyword", RegistryOptions{}, []Tool{named("a", `{"type":"numbr"}`)}, `tool "a": input schema:`},
		{"schema with a bad minimum", RegistryOptions{}, []Tool{named("a", `{"type":"object","properties":{"n":{"minimum":"zero"}}}`)}, `tool "a": input schema:`},
		{"schema reading a file", RegistryOptions{}, []Tool{named("a", `{"$ref":"file:///etc/passwd"}`)}, "external references are not allowed"},
		{"confirm unknown tool", RegistryOptions{Confirm: list("a", "wirte_note")}, []Tool{named("a", "")}, `confirmation for unknown tool "wirte_note" (tools: a)`},
		{"timeout for unknown tool", RegistryOptions{Timeouts: map[string]time.Duration{"b": time.Second}}, []Tool{named("a", "")}, `timeout for unknown tool "b" (tools: a)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRegistry(tt.opts, tt.tools...)
			if err == nil {
				t.Fatal("NewRegistry accepted it")
			}
			if !errors.Is(err, rein.ErrInvalidArgument) {
				t.Errorf("err %v is not invalid_argument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestSpecsLookupFilter(t *testing.T) {
	r, _ := newRegistry(t, RegistryOptions{},
		fakeTool{spec: Spec{Name: "zeta", Confirm: true}},
		echoTool(),
		fakeTool{spec: Spec{Name: "alpha"}})
	var names []string
	for _, s := range r.Specs() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "alpha,echo,zeta" {
		t.Errorf("Specs names %v, want sorted", names)
	}
	if got := string(r.Specs()[0].InputSchema); got != `{"type":"object"}` {
		t.Errorf("default schema %s", got)
	}
	mt := r.ModelTools()
	if len(mt) != 3 || mt[1].Name != "echo" || mt[1].Description != "echoes" || !bytes.Equal(mt[1].InputSchema, echoSchema) {
		t.Errorf("ModelTools = %+v", mt)
	}
	if tl, ok := r.Lookup("echo"); !ok || tl.Spec().Name != "echo" {
		t.Errorf("Lookup(echo) = %v, %v", tl, ok)
	}
	if _, ok := r.Lookup("nope"); ok {
		t.Error("Lookup(nope) found something")
	}

	sub := r.Filter([]string{"zeta", "missing", "echo", "zeta"})
	if sub.Len() != 2 || sub.Specs()[0].Name != "echo" || sub.Specs()[1].Name != "zeta" {
		t.Errorf("Filter: %+v", sub.Specs())
	}
	if !sub.NeedsConfirmation("zeta") {
		t.Error("Filter lost the confirmation policy")
	}
	if res := sub.Execute(context.Background(), Call{Name: "alpha"}); !res.IsError || !strings.Contains(res.Output, "available tools: echo, zeta") {
		t.Errorf("filtered-out tool ran or was listed: %+v", res)
	}
	if r.Filter(nil).Len() != 0 {
		t.Error("Filter(nil) is not empty")
	}
	if r.Len() != 3 {
		t.Error("Filter changed the parent registry")
	}
}

func TestNeedsConfirmation(t *testing.T) {
	tools := []Tool{fakeTool{spec: Spec{Name: "write_note", Confirm: true}}, fakeTool{spec: Spec{Name: "sleep"}}}
	list := func(names ...string) *[]string { return &names }
	tests := []struct {
		name    string
		confirm *[]string
		want    map[string]bool
	}{
		{"default set", nil, map[string]bool{"write_note": true, "sleep": false, "unknown": false}},
		{"empty list confirms nothing", list(), map[string]bool{"write_note": false, "sleep": false}},
		{"list replaces the default", list("sleep"), map[string]bool{"write_note": false, "sleep": true}},
		{"list may repeat the default", list("sleep", "write_note"), map[string]bool{"write_note": true, "sleep": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newRegistry(t, RegistryOptions{Confirm: tt.confirm}, tools...)
			for name, want := range tt.want {
				if got := r.NeedsConfirmation(name); got != want {
					t.Errorf("NeedsConfirmation(%s) = %v, want %v", name, got, want)
				}
			}
		})
	}
}

func TestExecuteAnswers(t *testing.T) {
	failing := fakeTool{spec: Spec{Name: "failing"}, call: func(context.Context, Call) (Result, error) {
		return Result{Output: "ignored"}, errors.New("disk full")
	}}
	silentFail := fakeTool{spec: Spec{Name: "silent"}, call: func(context.Context, Call) (Result, error) {
		return Result{}, errors.New("")
	}}
	ownError := fakeTool{spec: Spec{Name: "own_error"}, call: func(context.Context, Call) (Result, error) {
		return Result{Output: "file not found: a.txt", IsError: true}, nil
	}}
	seen := make(chan Call, 1)
	recorder := fakeTool{spec: Spec{Name: "recorder"}, call: func(_ context.Context, c Call) (Result, error) {
		seen <- c
		return Result{Output: "recorded"}, nil
	}}
	r, _ := newRegistry(t, RegistryOptions{}, echoTool(), failing, silentFail, ownError, recorder)
	tests := []struct {
		name    string
		call    Call
		want    string
		isError bool
	}{
		{"success", Call{Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}, "hi", false},
		{"unknown tool", Call{Name: "rm_rf", Input: json.RawMessage(`{}`)}, `unknown tool "rm_rf"; available tools: echo, failing, own_error, recorder, silent`, true},
		{"not JSON", Call{Name: "echo", Input: json.RawMessage(`{"text":`)}, "invalid input for tool echo: not valid JSON: unexpected EOF", true},
		{"trailing garbage", Call{Name: "echo", Input: json.RawMessage(`{"text":"a"} x`)}, "invalid input for tool echo: not valid JSON: invalid character after top-level value", true},
		{"missing property", Call{Name: "echo", Input: json.RawMessage(`{}`)}, "invalid input for tool echo: missing property 'text'", true},
		{"empty input is {}", Call{Name: "echo"}, "invalid input for tool echo: missing property 'text'", true},
		{"wrong type", Call{Name: "echo", Input: json.RawMessage(`{"text": 5}`)}, "invalid input for tool echo: text: got number, want string", true},
		{"several problems", Call{Name: "echo", Input: json.RawMessage(`{"text": "", "times": 0, "extra": 1}`)}, "invalid input for tool echo: ", true},
		{"not an object", Call{Name: "echo", Input: json.RawMessage(`"hi"`)}, "invalid input for tool echo: got string, want object", true},
		{"tool error", Call{Name: "failing"}, "disk full", true},
		{"tool error without text", Call{Name: "silent"}, "tool silent failed", true},
		{"tool's own error result", Call{Name: "own_error"}, "file not found: a.txt", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.Execute(context.Background(), tt.call)
			if got.IsError != tt.isError {
				t.Errorf("IsError = %v, want %v (%q)", got.IsError, tt.isError, got.Output)
			}
			if strings.HasSuffix(tt.want, ": ") {
				if !strings.HasPrefix(got.Output, tt.want) || strings.Contains(got.Output, "\n") {
					t.Errorf("Output %q, want one line starting %q", got.Output, tt.want)
				}
			} else if got.Output != tt.want {
				t.Errorf("Output\n got: %q\nwant: %q", got.Output, tt.want)
			}
		})
	}

	// The tool gets the call as given, with the input trimmed.
	call := Call{ID: "call_1", Name: "recorder", Input: json.RawMessage(" {} \n"), Session: rein.SessionKey{Owner: "o", ID: "s"}, RunID: "run_1", Step: 2, Workspace: "/tmp/w"}
	if res := r.Execute(context.Background(), call); res.Output != "recorded" {
		t.Fatal(res)
	}
	got := <-seen
	call.Input = json.RawMessage("{}")
	if got.ID != call.ID || got.Session != call.Session || got.RunID != call.RunID || got.Step != call.Step || got.Workspace != call.Workspace || string(got.Input) != "{}" {
		t.Errorf("tool saw %+v, want %+v", got, call)
	}
}

func TestExecuteNoTools(t *testing.T) {
	r, _ := newRegistry(t, RegistryOptions{})
	if res := r.Execute(context.Background(), Call{Name: "x"}); !res.IsError || res.Output != `unknown tool "x": no tools are available` {
		t.Errorf("%+v", res)
	}
}

func TestExecutePanic(t *testing.T) {
	boom := fakeTool{spec: Spec{Name: "boom"}, call: func(context.Context, Call) (Result, error) {
		var m map[string]int
		//lint:ignore SA5000 the test needs a real runtime panic, not just panic("...")
		m["x"]++
		return Result{}, nil
	}}
	r, logs := newRegistry(t, RegistryOptions{}, boom)
	res := r.Execute(context.Background(), Call{ID: "call_9", Name: "boom"})
	if !res.IsError || res.Output != "tool boom panicked: assignment to entry in nil map" {
		t.Errorf("result %+v", res)
	}
	if strings.Contains(res.Output, "goroutine") || strings.Contains(res.Output, ".go:") {
		t.Errorf("stack leaked into the result: %q", res.Output)
	}
	if l := logs.String(); !strings.Contains(l, "tool panicked") || !strings.Contains(l, "registry_test.go") || !strings.Contains(l, "call_9") {
		t.Errorf("log lacks the panic and its stack:\n%s", l)
	}
}

// blockingTool reports each call's start on started and then waits for its
// context, returning what a well-behaved tool returns.
func blockingTool(name string, started chan<- struct{}) fakeTool {
	return fakeTool{spec: Spec{Name: name}, call: func(ctx context.Context, _ Call) (Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return Result{}, ctx.Err()
	}}
}

func TestExecuteTimeout(t *testing.T) {
	started := make(chan struct{}, 1)
	r, _ := newRegistry(t, RegistryOptions{Timeouts: map[string]time.Duration{"slow": 20 * time.Millisecond}}, blockingTool("slow", started))
	res := r.Execute(context.Background(), Call{Name: "slow"})
	if !res.IsError || res.Output != "tool slow timed out after 20ms" {
		t.Errorf("%+v", res)
	}
}

func TestExecuteDefaultTimeoutAppliesToAll(t *testing.T) {
	started := make(chan struct{}, 2)
	r, _ := newRegistry(t, RegistryOptions{Timeout: 15 * time.Millisecond, Timeouts: map[string]time.Duration{"unbounded": -1, "same": 0}},
		blockingTool("same", started), blockingTool("unbounded", started))
	if res := r.Execute(context.Background(), Call{Name: "same"}); res.Output != "tool same timed out after 15ms" {
		t.Errorf("%+v", res)
	}
	// A negative override means no limit: only the caller's context ends it.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; <-started; cancel() }()
	if res := r.Execute(ctx, Call{Name: "unbounded"}); res.Output != rein.InterruptedToolOutput {
		t.Errorf("%+v", res)
	}
}

func TestExecuteCancelledByCaller(t *testing.T) {
	started := make(chan struct{}, 1)
	r, _ := newRegistry(t, RegistryOptions{}, blockingTool("wait", started))
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { <-started; cancel(rein.ErrInterrupted) }()
	res := r.Execute(ctx, Call{Name: "wait"})
	if !res.IsError || res.Output != rein.InterruptedToolOutput {
		t.Errorf("%+v", res)
	}
	// A context already done never reaches the tool.
	if res := r.Execute(ctx, Call{Name: "wait"}); res.Output != rein.InterruptedToolOutput {
		t.Errorf("%+v", res)
	}
	select {
	case <-started:
		t.Error("the tool ran on a done context")
	default:
	}
}

func TestExecuteAbandonsAToolThatIgnoresItsContext(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	stubborn := fakeTool{spec: Spec{Name: "stubborn"}, call: func(ctx context.Context, _ Call) (Result, error) {
		started <- struct{}{}
		<-release // ignores ctx
		return Result{Output: "finished anyway"}, nil
	}}
	r, logs := newRegistry(t, RegistryOptions{Grace: 10 * time.Millisecond}, stubborn)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	res := r.Execute(ctx, Call{Name: "stubborn", ID: "call_s"})
	if res.Output != rein.InterruptedToolOutput {
		t.Errorf("%+v", res)
	}
	if !strings.Contains(logs.String(), "abandoning it") {
		t.Errorf("no warning logged:\n%s", logs)
	}
	close(release) // goleak checks that the abandoned goroutine then ends
}

func TestExecuteWaitsForAToolThatFinishesWithinGrace(t *testing.T) {
	started := make(chan struct{}, 1)
	// The tool notices the stop and still completes its work (for example
	// a write it had begun): the registry reports that real result.
	finisher := fakeTool{spec: Spec{Name: "finisher"}, call: func(ctx context.Context, _ Call) (Result, error) {
		started <- struct{}{}
		<-ctx.Done()
		return Result{Output: "saved before stopping"}, nil
	}}
	r, logs := newRegistry(t, RegistryOptions{}, finisher)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if res := r.Execute(ctx, Call{Name: "finisher"}); res.IsError || res.Output != "saved before stopping" {
		t.Errorf("%+v", res)
	}
	if strings.Contains(logs.String(), "abandon") {
		t.Errorf("a tool that returned was abandoned:\n%s", logs)
	}
}

func TestExecuteConcurrent(t *testing.T) {
	r, _ := newRegistry(t, RegistryOptions{}, echoTool())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			in, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", i+1)})
			if res := r.Execute(context.Background(), Call{Name: "echo", Input: in}); res.Output != strings.Repeat("x", i+1) {
				t.Errorf("%d: %+v", i, res)
			}
		})
	}
	wg.Wait()
}

func BenchmarkExecute(b *testing.B) {
	r, err := NewRegistry(RegistryOptions{}, echoTool())
	if err != nil {
		b.Fatal(err)
	}
	call := Call{Name: "echo", Input: json.RawMessage(`{"text":"hello","times":2}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Execute(ctx, call); res.IsError {
			b.Fatal(res.Output)
		}
	}
}
