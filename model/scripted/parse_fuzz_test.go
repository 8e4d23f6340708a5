package scripted

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

// FuzzScript: any bytes as a script, read as YAML or (asJSON) as JSON.
// Parse never panics: it refuses with a *ParseError naming the file and a
// line of it, or returns a model that answers requests — for several inputs
// and every step of each rule, with hints, tool results and a system prompt
// in the transcript — without panicking, streaming exactly what a model
// stream may: non-empty text deltas, then tool calls with JSON object
// inputs, usage and a finish last; or text and the step's error.
func FuzzScript(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*.json", "demo.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data, strings.HasSuffix(file, ".json"))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		name := "fuzz.yaml"
		if asJSON {
			name = "fuzz.json"
		}
		m, err := Parse(name, data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != name || !strings.HasPrefix(err.Error(), name+":") {
				t.Fatalf("error %T does not name the file: %v", err, err)
			}
			if lines := bytes.Count(data, []byte("\n")) + 1; pe.Line < 0 || pe.Line > lines {
				t.Fatalf("error names line %d of a file of %d lines: %v", pe.Line, lines, err)
			}
			if strings.ContainsAny(pe.Msg, "\n\r") && !strings.Contains(pe.Msg, "invalid JSON") {
				t.Fatalf("message on several lines: %q", pe.Msg)
			}
			return
		}
		if m == nil || len(m.rules) == 0 {
			t.Fatal("no error and no rules")
		}
		// Pauses are real time; what the fuzzer explores is what is said.
		maxSteps := 0
		for i := range m.rules {
			for j := range m.rules[i].steps {
				m.rules[i].steps[j].chunkDelay = 0
			}
			maxSteps = max(maxSteps, len(m.rules[i].steps))
		}
		for _, input := range []string{"", "hello", "note this", "LONG wait", "spawn a child", string(data[:min(len(data), 64)])} {
			for step := 1; step <= maxSteps+1; step++ {
				runRequest(t, m, input, step)
			}
		}
	})
}

// runRequest makes one request of the model and checks its stream.
func runRequest(t *testing.T, m *Model, input string, step int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &model.Request{
		System: "be brief", RunID: "run_fuzz", Step: step, Input: input,
		Messages: []rein.Message{
			{Role: rein.RoleUser, Text: input},
			{Role: rein.RoleUser, Text: "a hint", Hint: &rein.Hint{}, RunID: "run_fuzz", Step: step},
			{Role: rein.RoleTool, Text: "a tool's result"},
		},
	}
	s, err := m.Stream(ctx, req)
	if err != nil {
		// No rule matches, or a template failed on this request's data.
		return
	}
	defer s.Close()
	const (
		texts = iota
		calls
		usage
		finish
	)
	phase := texts
	for {
		c, err := s.Recv()
		if err != nil {
			var se *StepError
			switch {
			case errors.As(err, &se) && phase == texts:
			case err == io.EOF && phase == finish:
			default:
				t.Fatalf("input %q step %d: stream ended with %v after phase %d", input, step, err, phase)
			}
			return
		}
		switch {
		case c.Kind == model.ChunkText && phase == texts:
			if c.Text == "" {
				t.Fatalf("input %q step %d: an empty text delta", input, step)
			}
		case c.Kind == model.ChunkToolCall && phase <= calls:
			phase = calls
			in := bytes.TrimSpace(c.ToolCall.Input)
			if c.ToolCall.Name == "" || c.ToolCall.ID == "" || !json.Valid(in) || in[0] != '{' {
				t.Fatalf("input %q step %d: tool call %+v", input, step, c.ToolCall)
			}
		case c.Kind == model.ChunkUsage && phase <= calls:
			phase = usage
		case c.Kind == model.ChunkFinish && phase == usage:
			phase = finish
		default:
			t.Fatalf("input %q step %d: chunk %+v out of order (phase %d)", input, step, c, phase)
		}
	}
}

// TestInputAliases: YAML aliases in a tool call's input can neither make it
// endless (an alias to a value it is inside: this hung Parse until the
// stack overflowed) nor expand it past maxInputValues (a "billion laughs"
// of nested aliases); both are located errors, and a shared alias that is
// neither still works.
func TestInputAliases(t *testing.T) {
	t.Parallel()
	bomb := "rules:\n  - steps:\n      - text: a\n        tool_calls:\n          - name: t\n            input:\n              l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i <= 8; i++ {
		bomb += fmt.Sprintf("              l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	for src, want := range map[string]string{
		"rules:\n  - steps:\n      - text: a\n        tool_calls:\n          - name: t\n            input: &x {a: [1, *x]}\n": "x.yaml:6: rules[0].steps[0].tool_calls[0].input.a[1]: an alias here includes the value it is in",
		"rules:\n  - steps:\n      - tool_calls:\n          - &tc {name: t, input: *tc}\n":                                    "x.yaml:4: rules[0].steps[0].tool_calls[0].input.input: an alias here includes the value it is in",
		bomb: fmt.Sprintf("tool call inputs hold more than %d values", maxInputValues),
	} {
		_, err := Parse("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s\n→ %v, want %q", src, err, want)
		}
	}
	m, err := Parse("x.yaml", []byte("rules:\n  - steps:\n      - tool_calls:\n          - name: t\n            input: {a: &v [1, {b: 2}], c: *v}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Stream(context.Background(), &model.Request{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Recv()
	if err != nil || c.ToolCall == nil || string(c.ToolCall.Input) != `{"a":[1,{"b":2}],"c":[1,{"b":2}]}` {
		t.Fatalf("shared alias: %+v %v", c, err)
	}
}
