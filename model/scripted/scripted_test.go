package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is everything one stream produced.
type reply struct {
	deltas []string
	calls  []rein.ToolCall
	usage  rein.Usage
	finish string
	err    error // the error that ended the stream (nil for io.EOF)
}

func (r reply) text() string { return strings.Join(r.deltas, "") }

// collect drains one request's stream, checking the chunk order contract:
// text deltas, then tool calls, then usage, then finish, then io.EOF.
func collect(t *testing.T, m *Model, req *model.Request) reply {
	t.Helper()
	s, err := m.Stream(context.Background(), req)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	defer s.Close()
	var r reply
	phase := model.ChunkText
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if r.finish == "" {
				t.Fatalf("io.EOF before ChunkFinish")
			}
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if r.finish != "" {
			t.Fatalf("chunk %v after ChunkFinish", c.Kind)
		}
		if c.Kind < phase {
			t.Fatalf("chunk %v after a chunk of a later kind %v", c.Kind, phase)
		}
		phase = c.Kind
		switch c.Kind {
		case model.ChunkText:
			if c.Text == "" {
				t.Fatalf("empty text delta")
			}
			r.deltas = append(r.deltas, c.Text)
		case model.ChunkToolCall:
			r.calls = append(r.calls, *c.ToolCall)
		case model.ChunkUsage:
			r.usage = r.usage.Add(*c.Usage)
		case model.ChunkFinish:
			r.finish = c.Finish
		}
	}
}

func mustParse(t *testing.T, src string) *Model {
	t.Helper()
	m, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}

func TestTemplateFields(t *testing.T) {
	user := func(text string) rein.Message { return rein.Message{Role: rein.RoleUser, Text: text} }
	hint := func(text, run string, step int) rein.Message {
		return rein.Message{Role: rein.RoleUser, Text: text, Hint: &rein.Hint{ID: "sup_" + text, Source: "user"}, RunID: run, Step: step}
	}
	call := func(id string) rein.Message {
		return rein.Message{Role: rein.RoleAssistant, ToolCalls: []rein.ToolCall{{ID: id, Name: "sleep", Input: json.RawMessage(`{}`)}}}
	}
	result := func(id, text string) rein.Message {
		return rein.Message{Role: rein.RoleTool, ToolCallID: id, ToolName: "sleep", Text: text}
	}
	tests := []struct {
		name     string
		template string
		req      model.Request
		want     string
	}{
		{"input", "{{.Input}}", model.Request{Input: "hello there"}, "hello there"},
		{"step", "{{.Step}}", model.Request{Step: 3}, "3"},
		{"step below 1 counts as 1", "{{.Step}}", model.Request{Step: 0}, "1"},
		{"system", "{{.System}}", model.Request{System: "be brief"}, "be brief"},
		{"no system", "[{{.System}}]", model.Request{}, "[]"},
		{"hints of this run and step only", "{{.Hints}}", model.Request{RunID: "run_1", Step: 2, Messages: []rein.Message{
			user("hi"),
			hint("old-run", "run_0", 2),
			hint("earlier-step", "run_1", 1),
			call("c1"), result("c1", "ok"),
			hint("first", "run_1", 2),
			hint("second", "run_1", 2),
		}}, "first; second"},
		{"no hints", "[{{.Hints}}]", model.Request{RunID: "run_1", Step: 1, Messages: []rein.Message{user("hi")}}, "[]"},
		{"tool result is the last one", "{{.ToolResult}}", model.Request{Messages: []rein.Message{
			user("hi"), call("c1"), result("c1", "first result"), call("c2"), result("c2", "denied: not today"),
		}}, "denied: not today"},
		{"no tool result", "[{{.ToolResult}}]", model.Request{Messages: []rein.Message{user("hi")}}, "[]"},
		{"turns count user messages without hints", "{{.Turns}}", model.Request{RunID: "r", Step: 1, Messages: []rein.Message{
			user("one"), {Role: rein.RoleAssistant, Text: "a"},
			user("two"), call("c1"), result("c1", "x"),
			hint("note", "r", 1), user("three"),
		}}, "3"},
		{"turns of an empty transcript", "{{.Turns}}", model.Request{}, "0"},
		{"root variable", "{{$.Input}}/{{with .Hints}}{{.}}{{else}}none{{end}}", model.Request{Input: "x"}, "x/none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustParse(t, "rules:\n  - steps:\n      - text: '"+tt.template+"'\n")
			got := collect(t, m, &tt.req)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.text() != tt.want {
				t.Errorf("text = %q, want %q", got.text(), tt.want)
			}
		})
	}
}

func TestRuleOrderAndNoMatch(t *testing.T) {
	m := mustParse(t, `
rules:
  - match: "^urgent"
    steps: [{text: "first rule"}]
  - match: "(?i)URGENT|later"
    steps: [{text: "second rule"}]
  - match: "^x$"
    steps: [{text: "third rule"}]
`)
	for input, want := range map[string]string{
		"urgent: both rules match": "first rule",
		"not Urgent":               "second rule",
		"later":                    "second rule",
		"x":                        "third rule",
	} {
		if got := collect(t, m, &model.Request{Input: input, Step: 1}).text(); got != want {
			t.Errorf("input %q: text %q, want %q", input, got, want)
		}
	}
	_, err := m.Stream(context.Background(), &model.Request{Input: "nothing matches", Step: 1})
	if !errors.Is(err, ErrNoMatch) {
		t.Fatalf("no matching rule: err = %v, want ErrNoMatch", err)
	}
	if !strings.Contains(err.Error(), `"nothing matches"`) || !strings.Contains(err.Error(), "scripted:test.yaml") {
		t.Errorf("error %q should name the model and quote the input", err)
	}
}

func TestLastStepRepeats(t *testing.T) {
	m := mustParse(t, `
rules:
  - steps:
      - text: "one"
      - text: "two"
      - text: "last {{.Step}}"
`)
	for step, want := range map[int]string{1: "one", 2: "two", 3: "last 3", 4: "last 4", 17: "last 17"} {
		if got := collect(t, m, &model.Request{Step: step}).text(); got != want {
			t.Errorf("step %d: %q, want %q", step, got, want)
		}
	}
}

func TestSplitRunes(t *testing.T) {
	tests := []struct {
		text   string
		chunks int
		want   []string
	}{
		{"hello", 1, []string{"hello"}},
		{"abcdefghij", 3, []string{"abcd", "efg", "hij"}},
		{"abcdef", 3, []string{"ab", "cd", "ef"}},
		{"abc", 10, []string{"a", "b", "c"}},
		{"héllo wörld", 4, []string{"hél", "lo ", "wör", "ld"}},
		{"日本語テキスト", 2, []string{"日本語テ", "キスト"}},
		{"", 5, nil},
		{"", 1, nil},
	}
	for _, tt := range tests {
		got := splitRunes(tt.text, tt.chunks)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("splitRunes(%q, %d) = %q, want %q", tt.text, tt.chunks, got, tt.want)
		}
	}
}

func TestChunksStreamed(t *testing.T) {
	m := mustParse(t, `
rules:
  - match: "^empty"
    steps: [{chunks: 3}]
  - steps:
      - text: "{{.Input}}"
        chunks: 4
`)
	got := collect(t, m, &model.Request{Input: "0123456789", Step: 1})
	if want := []string{"012", "345", "67", "89"}; strings.Join(got.deltas, "|") != strings.Join(want, "|") {
		t.Errorf("deltas = %q, want %q", got.deltas, want)
	}
	if got.finish != model.FinishStop {
		t.Errorf("finish = %q, want stop", got.finish)
	}
	empty := collect(t, m, &model.Request{Input: "empty", Step: 1})
	if len(empty.deltas) != 0 || empty.finish != model.FinishStop {
		t.Errorf("empty text: deltas %q finish %q, want none and stop", empty.deltas, empty.finish)
	}
}

func TestToolCalls(t *testing.T) {
	m := mustParse(t, `
rules:
  - steps:
      - text: "calling"
        tool_calls:
          - name: sleep
            input: {seconds: 1.5}
          - name: write_note
            input:
              text: "note: {{.Input}} \"quoted\""
              tags: [a, "{{.Step}}", 3, true, null]
              nested: {z: 1, a: 2}
          - name: list_agents
`)
	got := collect(t, m, &model.Request{Input: `say "hi"`, Step: 1})
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.text() != "calling" || got.finish != model.FinishToolCalls {
		t.Errorf("text %q finish %q", got.text(), got.finish)
	}
	wantInputs := []struct{ name, input string }{
		{"sleep", `{"seconds":1.5}`},
		{"write_note", `{"text":"note: say \"hi\" \"quoted\"","tags":["a","1",3,true,null],"nested":{"z":1,"a":2}}`},
		{"list_agents", `{}`},
	}
	if len(got.calls) != len(wantInputs) {
		t.Fatalf("got %d calls, want %d", len(got.calls), len(wantInputs))
	}
	ids := map[string]bool{}
	for i, c := range got.calls {
		if c.Name != wantInputs[i].name || string(c.Input) != wantInputs[i].input {
			t.Errorf("call %d = %s %s, want %s %s", i, c.Name, c.Input, wantInputs[i].name, wantInputs[i].input)
		}
		if !json.Valid(c.Input) {
			t.Errorf("call %d input is not JSON: %s", i, c.Input)
		}
		if !strings.HasPrefix(c.ID, "call_") || ids[c.ID] {
			t.Errorf("call %d id %q: want a fresh call_ id", i, c.ID)
		}
		ids[c.ID] = true
	}
	// A second request makes new ids: ids are unique across a session.
	for _, c := range collect(t, m, &model.Request{Step: 1}).calls {
		if ids[c.ID] {
			t.Errorf("id %q reused by a second request", c.ID)
		}
	}
}

func TestUsageEstimate(t *testing.T) {
	m := mustParse(t, "rules:\n  - steps: [{text: \"{{.Input}}\"}]\n")
	got := collect(t, m, &model.Request{System: strings.Repeat("s", 40), Input: strings.Repeat("é", 20), Messages: []rein.Message{
		{Role: rein.RoleUser, Text: strings.Repeat("é", 20)},
	}})
	if want := (rein.Usage{InputTokens: 15, OutputTokens: 5}); got.usage != want {
		t.Errorf("usage = %+v, want %+v", got.usage, want)
	}
	if got := collect(t, m, &model.Request{}).usage; got != (rein.Usage{InputTokens: 1, OutputTokens: 1}) {
		t.Errorf("usage of an empty request = %+v, want 1/1", got)
	}
}

// A step's stated usage replaces the estimate, each count on its own.
func TestStatedUsage(t *testing.T) {
	m := mustParse(t, "rules:\n  - steps:\n    - {text: hi, usage: {input_tokens: 1000, output_tokens: 50}}\n    - {text: hi, usage: {output_tokens: 0}}\n")
	if got := collect(t, m, &model.Request{Step: 1}).usage; got != (rein.Usage{InputTokens: 1000, OutputTokens: 50}) {
		t.Errorf("stated usage = %+v, want 1000/50", got)
	}
	if got := collect(t, m, &model.Request{Step: 2, System: strings.Repeat("s", 40)}).usage; got != (rein.Usage{InputTokens: 10, OutputTokens: 0}) {
		t.Errorf("output stated, input estimated = %+v, want 10/0", got)
	}
	for _, bad := range []string{"{input_tokens: -1}", "{input_tokens: 1.5}", "{tokens: 3}", "5"} {
		if _, err := Parse("x.yaml", []byte("rules:\n  - steps:\n    - {text: hi, usage: "+bad+"}\n")); err == nil {
			t.Errorf("usage %s parsed", bad)
		}
	}
}

func TestErrorStep(t *testing.T) {
	m := mustParse(t, `
rules:
  - match: partial
    steps: [{text: "abcd", chunks: 2, error: "boom after text"}]
  - steps:
      - error: "boom"
`)
	got := collect(t, m, &model.Request{Input: "partial", Step: 1})
	var se *StepError
	if !errors.As(got.err, &se) || got.err.Error() != "boom after text" {
		t.Fatalf("err = %v, want StepError with the message verbatim", got.err)
	}
	if strings.Join(got.deltas, "|") != "ab|cd" || got.finish != "" {
		t.Errorf("deltas %q finish %q: want the text, then the error instead of a finish", got.deltas, got.finish)
	}
	got = collect(t, m, &model.Request{Input: "x", Step: 1})
	if got.err == nil || got.err.Error() != "boom" || len(got.deltas) != 0 {
		t.Errorf("err %v deltas %q, want boom at once", got.err, got.deltas)
	}
}

func TestRecvAfterEnd(t *testing.T) {
	m := mustParse(t, "rules:\n  - steps: [{text: hi}]\n")
	s, err := m.Stream(context.Background(), &model.Request{Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // text, usage, finish
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := s.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("Recv after the end = %v, want io.EOF", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// pausing returns a model whose only step pauses an hour before each of
// its deltas, and a channel closed when a stream enters that pause.
func pausing(t *testing.T) (*Model, chan struct{}) {
	m := mustParse(t, "rules:\n  - steps: [{text: \"abc\", chunks: 3, chunk_delay: 1h}]\n")
	entered := make(chan struct{})
	m.onPause = func() { close(entered) }
	return m, entered
}

type recvResult struct {
	chunk model.Chunk
	err   error
}

func recvAsync(s model.Stream) chan recvResult {
	ch := make(chan recvResult, 1)
	go func() {
		c, err := s.Recv()
		ch <- recvResult{c, err}
	}()
	return ch
}

func TestDelayComesBeforeTheFirstDeltaAndCancelEndsIt(t *testing.T) {
	m, entered := pausing(t)
	cause := errors.New("user pressed stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := m.Stream(ctx, &model.Request{Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := recvAsync(s)
	select {
	case r := <-res:
		t.Fatalf("Recv returned %+v, %v without pausing first", r.chunk, r.err)
	case <-entered:
	}
	start := time.Now()
	cancel(cause)
	r := <-res
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("Recv took %v to notice the cancel", elapsed)
	}
	if r.chunk.Kind != 0 {
		t.Errorf("a delta was delivered: %+v", r.chunk)
	}
	if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, cause) {
		t.Errorf("err = %v, want one wrapping context.Canceled and the cause", r.err)
	}
	// The stream stays failed.
	if _, err := s.Recv(); !errors.Is(err, context.Canceled) {
		t.Errorf("Recv after cancel = %v", err)
	}
}

func TestCloseEndsAPause(t *testing.T) {
	m, entered := pausing(t)
	s, err := m.Stream(context.Background(), &model.Request{Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	res := recvAsync(s)
	<-entered
	s.Close()
	if r := <-res; r.err == nil || r.chunk.Kind != 0 {
		t.Fatalf("Recv after Close = %+v, %v; want an error and no chunk", r.chunk, r.err)
	}
}

func TestDeadlineDuringPause(t *testing.T) {
	m, _ := pausing(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	s, err := m.Stream(ctx, &model.Request{Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

func TestStreamWithDoneContext(t *testing.T) {
	m := mustParse(t, "rules:\n  - steps: [{text: hi}]\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Stream(ctx, &model.Request{Step: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream on a done context = %v", err)
	}
}

func TestShortDelaysStream(t *testing.T) {
	m := mustParse(t, "rules:\n  - steps: [{text: \"abcdef\", chunks: 3, chunk_delay: 1ms}]\n")
	start := time.Now()
	got := collect(t, m, &model.Request{Step: 1})
	if got.text() != "abcdef" || len(got.deltas) != 3 {
		t.Fatalf("deltas %q", got.deltas)
	}
	if elapsed := time.Since(start); elapsed < 3*time.Millisecond {
		t.Errorf("three 1ms pauses took only %v", elapsed)
	}
}

func TestOpenYAMLAndJSON(t *testing.T) {
	for _, path := range []string{"testdata/echo.yaml", "testdata/echo.json"} {
		m, err := Open(path)
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		if m.Name() != "scripted:"+path {
			t.Errorf("Name() = %q", m.Name())
		}
		if got := collect(t, m, &model.Request{Input: "ping", Step: 1}).text(); got != "echo: ping" {
			t.Errorf("%s: %q", path, got)
		}
	}
	if _, err := Open("testdata/missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Open of a missing file = %v", err)
	}
}

func TestTestdataScriptsParse(t *testing.T) {
	// Script files only: testdata/fuzz holds the fuzz targets' seed corpora.
	paths, err := filepath.Glob("testdata/*.*")
	if err != nil || len(paths) == 0 {
		t.Fatal("no testdata", err)
	}
	for _, p := range paths {
		if _, err := Open(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestFieldsScript(t *testing.T) {
	m, err := Open("testdata/fields.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, m, &model.Request{Input: "in", Step: 2, RunID: "r", System: "sys", Messages: []rein.Message{
		{Role: rein.RoleUser, Text: "in"},
		{Role: rein.RoleAssistant, ToolCalls: []rein.ToolCall{{ID: "c", Name: "sleep", Input: json.RawMessage(`{}`)}}},
		{Role: rein.RoleTool, ToolCallID: "c", Text: "slept 0s"},
		{Role: rein.RoleUser, Text: "h", Hint: &rein.Hint{ID: "sup_1", Source: "user"}, RunID: "r", Step: 2},
	}}).text()
	if want := "input=in step=2 hints=[h] tool=[slept 0s] system=[sys] turns=1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDemo(t *testing.T) {
	m := Demo()
	if m.Name() != "demo" {
		t.Errorf("Name() = %q", m.Name())
	}
	m.rules = withoutDelays(m.rules) // keep the test fast; the pauses are covered above

	hello := collect(t, m, &model.Request{Input: "What can you do?", Step: 1})
	if hello.err != nil || len(hello.deltas) < 4 || hello.finish != model.FinishStop {
		t.Fatalf("greeting: %+v", hello)
	}
	for _, want := range []string{"offline demo model", "What can you do?"} {
		if !strings.Contains(hello.text(), want) {
			t.Errorf("greeting %q does not mention %q", hello.text(), want)
		}
	}

	nap := collect(t, m, &model.Request{Input: "please wait a moment", Step: 1})
	if len(nap.calls) != 1 || nap.calls[0].Name != "sleep" || string(nap.calls[0].Input) != `{"seconds":3}` || nap.finish != model.FinishToolCalls {
		t.Fatalf("sleep request: %+v", nap)
	}
	after := collect(t, m, &model.Request{Input: "please wait a moment", Step: 2, Messages: []rein.Message{
		{Role: rein.RoleUser, Text: "please wait a moment"},
		{Role: rein.RoleAssistant, ToolCalls: nap.calls},
		{Role: rein.RoleTool, ToolCallID: nap.calls[0].ID, Text: "slept 3s"},
	}})
	if !strings.Contains(after.text(), "slept 3s") || after.finish != model.FinishStop {
		t.Errorf("after the nap: %+v", after)
	}

	note := collect(t, m, &model.Request{Input: "Remember to buy milk", Step: 1})
	if len(note.calls) != 1 || note.calls[0].Name != "write_note" || string(note.calls[0].Input) != `{"text":"Remember to buy milk"}` {
		t.Fatalf("note request: %+v", note)
	}
}

func withoutDelays(rules []rule) []rule {
	out := make([]rule, len(rules))
	for i, r := range rules {
		out[i] = rule{match: r.match, steps: append([]step(nil), r.steps...)}
		for j := range out[i].steps {
			out[i].steps[j].chunkDelay = 0
		}
	}
	return out
}

func TestDemoStreamsVisibly(t *testing.T) {
	// The demo must look like streaming in a terminal: several deltas, each
	// after a short but noticeable pause.
	for _, r := range Demo().rules {
		for _, st := range r.steps {
			if st.chunks < 4 || st.chunkDelay < 20*time.Millisecond || st.chunkDelay > 200*time.Millisecond {
				t.Errorf("%s: chunks %d, delay %v", st.path, st.chunks, st.chunkDelay)
			}
		}
	}
}

func BenchmarkStream(b *testing.B) {
	m := mustParseB(b, `
rules:
  - match: "(?i)sleep"
    steps: [{text: "x"}]
  - steps:
      - text: "step {{.Step}} of {{.Input}}: hints [{{.Hints}}], last tool result {{.ToolResult}}"
        chunks: 20
        tool_calls:
          - name: write_note
            input: {text: "{{.Input}}"}
`)
	msgs := make([]rein.Message, 0, 20)
	for i := range 10 {
		id := "call_" + string(rune('a'+i))
		msgs = append(msgs,
			rein.Message{Role: rein.RoleAssistant, Text: "thinking about it", ToolCalls: []rein.ToolCall{{ID: id, Name: "sleep", Input: json.RawMessage(`{"seconds":1}`)}}},
			rein.Message{Role: rein.RoleTool, ToolCallID: id, Text: "slept 1s"})
	}
	req := &model.Request{Input: "benchmark input text", Step: 11, RunID: "run_1", Messages: msgs}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := m.Stream(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := s.Recv(); err != nil {
				break
			}
		}
		s.Close()
	}
}

func mustParseB(b *testing.B, src string) *Model {
	m, err := Parse("bench.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// Text without template actions is written as it is — and stays the same
// whether or not the template is executed; text with actions is still
// rendered.
func TestPlainTextIsWrittenAsItIs(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{`token } { déjà vu ✓ <b> & "q" \n`, `token } { déjà vu ✓ <b> & "q" \n`},
		{`{{"lit"}} and {{.Input}}`, `lit and hi`},
		{`{{/* a comment */}}after`, `after`},
	} {
		m := mustParse(t, "rules:\n  - steps:\n      - text: '"+strings.ReplaceAll(c.text, "'", "''")+"'\n        chunks: 3\n")
		if got := collect(t, m, &model.Request{Input: "hi", Messages: []rein.Message{{Role: rein.RoleUser, Text: "hi"}}}).text(); got != c.want {
			t.Errorf("text %q streams %q, want %q", c.text, got, c.want)
		}
		if plain := m.rules[0].steps[0].literal != nil; plain != (c.text == c.want) {
			t.Errorf("text %q: written as it is %v", c.text, plain)
		}
	}
}
