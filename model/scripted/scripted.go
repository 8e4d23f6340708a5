// Package scripted is a deterministic model.Model driven by a script file
// (docs/models.md), and the home of Rein's offline demo model.
//
// It exists so that everything above the model — the agent loop, streaming,
// interrupts, confirmations, supplements, subagents — can be exercised
// exactly and repeatably, in tests and in a terminal, without a network or
// an API key. A script says, per run input, what each model request of the
// run answers: text (a text/template), how it is streamed (chunks and a
// pause before each chunk), which tools it calls, or that it fails.
//
// The script format is a public contract (`--model scripted:PATH`):
//
//	rules:                     # first rule whose match (Go regexp) matches the run input wins
//	  - match: "(?i)slow"      # unanchored, like regexp.MatchString; omitted = any input
//	    steps:                 # one per model request of the run (Request.Step 1, 2, …); the last repeats
//	      - text: "working on {{.Input}}"   # fields: .Input .Step .Hints .ToolResult .System .Turns
//	        chunks: 20         # stream the text as this many deltas (default 1)
//	        chunk_delay: 100ms # pause before every delta, the first included
//	        tool_calls:        # made after the text
//	          - name: sleep
//	            input: {seconds: 5}
//	      - text: "done: {{.ToolResult}}"
//	      - error: "upstream exploded"   # this request fails with exactly this message
//	      - text: "costly"
//	        usage: {input_tokens: 1000, output_tokens: 50}   # the tokens this request reports (default: an estimate)
//
// Additions to docs/models.md, all backwards compatible:
//   - error: the request streams its text (if any) and then Recv fails with
//     a *StepError whose text is the message verbatim; a step with error has
//     no tool_calls.
//   - String values inside a tool call's input are templates too, with the
//     same fields as text (so a script can pass the user's words to a tool).
//   - An omitted match matches any input.
//
// Streaming details: the text is split by runes into at most `chunks`
// deltas, as even as possible (earlier deltas get the extra rune), never an
// empty delta; empty text streams no delta at all (and so no pause). After
// the deltas come one ChunkToolCall per tool call, one ChunkUsage with a
// deterministic estimate (runes/4, at least 1 each way) and a ChunkFinish.
package scripted

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
)

// ErrNoMatch is returned (wrapped) by Stream when no rule of the script
// matches the run's input.
var ErrNoMatch = errors.New("no rule matches the input")

// StepError is the error a step with an `error:` field fails with. Its text
// is the script's message verbatim so that a run's recorded error shows
// exactly what the script said.
type StepError struct {
	Message string
}

func (e *StepError) Error() string { return e.Message }

// Model is a parsed script. It is immutable and safe for concurrent use by
// any number of runs.
type Model struct {
	name  string
	file  string // for error messages
	rules []rule

	// onPause, when set (by tests), is called as a stream enters a pause,
	// so a test can act "during the delay" without guessing with time.
	onPause func()

	// bufs holds the buffers replies are rendered into: a reply is kept
	// as a string, so its buffer serves the next request.
	bufs sync.Pool
}

type rule struct {
	match *regexp.Regexp // nil matches everything
	steps []step
}

type step struct {
	path string // e.g. rules[0].steps[1], for runtime errors
	text *template.Template
	// literal is text's output when the template has no actions (plain
	// text): a reply written as it is, without executing the template,
	// whose walk cost as much as the rest of a load test's model request.
	literal    *string
	chunks     int
	chunkDelay time.Duration
	toolCalls  []toolCall
	err        string
	// usage is the step's stated token usage (docs/models.md); nil: the
	// estimate.
	usage *stepUsage
}

// stepUsage is a step's `usage:`; a count left out is estimated.
type stepUsage struct {
	input, output *int64
}

type toolCall struct {
	name  string
	input *inputValue
}

// Open loads the script at path. The format follows the extension: .json
// is JSON, anything else (.yaml, .yml, …) is YAML, which also accepts JSON.
// The model's name is "scripted:" + path.
func Open(path string) (*Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted model: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a script held in memory. name is what errors cite (use the
// file's path) and decides the format like Open does; the model's name is
// "scripted:" + name. Every error is a *ParseError naming name and a line.
func Parse(name string, data []byte) (*Model, error) {
	rules, err := parseScript(name, data)
	if err != nil {
		return nil, err
	}
	return &Model{name: "scripted:" + name, file: name, rules: rules}, nil
}

//go:embed demo.yaml
var demoScript []byte

// Demo returns Rein's offline demo model (named "demo"): a friendly script
// that streams its reply visibly, takes a nap with the sleep tool when asked
// to sleep or wait, counts to 20 one step a second when asked to count (a
// run long enough to steer by hand), and calls write_note when asked to note
// or remember something. Each call returns a fresh value.
func Demo() *Model {
	m, err := Parse("demo.yaml", demoScript)
	if err != nil {
		// The script is compiled into the binary and covered by tests.
		panic("scripted: embedded demo script is invalid: " + err.Error())
	}
	m.name = "demo"
	return m
}

// Name is "scripted:PATH", or "demo" for the demo model.
func (m *Model) Name() string { return m.name }

// templateData is what a step's templates see (docs/models.md).
type templateData struct {
	Input      string
	Step       int
	Hints      string
	ToolResult string
	System     string
	Turns      int
}

func newTemplateData(req *model.Request, stepNo int) templateData {
	d := templateData{Input: req.Input, Step: stepNo, System: req.System}
	var hints []string
	for _, msg := range req.Messages {
		switch {
		case msg.Role == rein.RoleUser && msg.Hint != nil:
			if msg.RunID == req.RunID && msg.Step == req.Step {
				hints = append(hints, msg.Text)
			}
		case msg.Role == rein.RoleUser:
			d.Turns++
		case msg.Role == rein.RoleTool:
			d.ToolResult = msg.Text
		}
	}
	d.Hints = strings.Join(hints, "; ")
	return d
}

// Stream answers one model request. The rule is chosen by req.Input and the
// step by req.Step (values below 1 count as 1); the text and tool inputs are
// rendered now, so they reflect exactly what this request carries.
func (m *Model) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	if err := ctxError(ctx); err != nil {
		return nil, err
	}
	if req == nil {
		req = &model.Request{}
	}
	var r *rule
	for i := range m.rules {
		if m.rules[i].match == nil || m.rules[i].match.MatchString(req.Input) {
			r = &m.rules[i]
			break
		}
	}
	if r == nil {
		return nil, fmt.Errorf("%s: input %q: %w", m.name, abbreviate(req.Input, 80), ErrNoMatch)
	}
	stepNo := max(req.Step, 1)
	st := &r.steps[min(stepNo, len(r.steps))-1]
	data := newTemplateData(req, stepNo)

	reply := ""
	if st.literal != nil {
		reply = *st.literal
	} else if st.text != nil {
		text, _ := m.bufs.Get().(*bytes.Buffer)
		if text == nil {
			text = new(bytes.Buffer)
		}
		text.Reset()
		err := st.text.Execute(text, data)
		reply = text.String()
		m.bufs.Put(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %s.text: %w", m.name, st.path, err)
		}
	}
	s := &stream{ctx: ctx, delay: st.chunkDelay, onPause: m.onPause}
	if s.delay > 0 {
		// Only a pause waits on Close.
		s.closed = make(chan struct{})
	}
	outRunes := utf8.RuneCountInString(reply)
	// The text parts, the tool calls, usage and finish: in the stream's
	// own array when they fit (a one-chunk reply), else one allocation.
	if n := min(max(st.chunks, 1), outRunes) + len(st.toolCalls) + 2; n > len(s.own) {
		s.chunks = make([]model.Chunk, 0, n)
	} else {
		s.chunks = s.own[:0]
	}
	s.chunks = appendTextChunks(s.chunks, reply, st.chunks)
	if st.err != "" {
		s.err = &StepError{Message: st.err}
		return s, nil
	}
	for i, tc := range st.toolCalls {
		var in bytes.Buffer
		if err := tc.input.render(&in, data); err != nil {
			return nil, fmt.Errorf("%s: %s.tool_calls[%d].input: %w", m.name, st.path, i, err)
		}
		outRunes += utf8.RuneCount(in.Bytes()) + utf8.RuneCountInString(tc.name)
		call := &rein.ToolCall{ID: id.New(id.ToolUse), Name: tc.name, Input: json.RawMessage(in.Bytes())}
		s.chunks = append(s.chunks, model.Chunk{Kind: model.ChunkToolCall, ToolCall: call})
	}
	s.usage = rein.Usage{InputTokens: estimateTokens(inputRunes(req)), OutputTokens: estimateTokens(outRunes)}
	if st.usage != nil {
		if st.usage.input != nil {
			s.usage.InputTokens = *st.usage.input
		}
		if st.usage.output != nil {
			s.usage.OutputTokens = *st.usage.output
		}
	}
	s.chunks = append(s.chunks, model.Chunk{Kind: model.ChunkUsage, Usage: &s.usage})
	finish := model.FinishStop
	if len(st.toolCalls) > 0 {
		finish = model.FinishToolCalls
	}
	s.chunks = append(s.chunks, model.Chunk{Kind: model.ChunkFinish, Finish: finish, FinishRaw: finish})
	return s, nil
}

// inputRunes counts what a real provider would bill as input: the system
// prompt, every message's text and every tool call's input.
func inputRunes(req *model.Request) int {
	n := utf8.RuneCountInString(req.System)
	for _, msg := range req.Messages {
		n += utf8.RuneCountInString(msg.Text)
		for _, c := range msg.ToolCalls {
			n += utf8.RuneCountInString(c.Name) + utf8.RuneCount(c.Input)
		}
	}
	return n
}

// estimateTokens is the usual "four characters per token" rule of thumb,
// never below 1 so usage is visibly counted.
func estimateTokens(runes int) int64 { return int64(max(runes/4, 1)) }

// splitRunes splits s into min(n, runes in s) non-empty parts of nearly
// equal rune counts; the first len%n parts are one rune longer. Empty s
// gives no parts.
func splitRunes(s string, n int) []string {
	var parts []string
	forParts(s, n, func(part string) { parts = append(parts, part) })
	return parts
}

// appendTextChunks appends the text chunks of splitRunes(s, n) to chunks.
func appendTextChunks(chunks []model.Chunk, s string, n int) []model.Chunk {
	forParts(s, n, func(part string) { chunks = append(chunks, model.Chunk{Kind: model.ChunkText, Text: part}) })
	return chunks
}

// forParts calls f with each part of splitRunes(s, n), in order.
func forParts(s string, n int, f func(string)) {
	total := utf8.RuneCountInString(s)
	if total == 0 {
		return
	}
	n = min(max(n, 1), total)
	size, extra := total/n, total%n
	for i := range n {
		want := size
		if i < extra {
			want++
		}
		end := 0
		for range want {
			_, w := utf8.DecodeRuneInString(s[end:])
			end += w
		}
		f(s[:end])
		s = s[end:]
	}
}

func abbreviate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// ctxError is nil while ctx is live, and otherwise an error that wraps
// ctx.Err() and, when different, the cancellation cause (so an agent can
// tell an interrupt from a cancel).
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("scripted model: %w (%w)", err, cause)
	}
	return fmt.Errorf("scripted model: %w", err)
}

// errClosed is what Recv returns after Close.
var errClosed = errors.New("scripted model: stream closed")

// stream replays a precomputed reply. Only the pauses are live: each one
// waits on a timer, the request's context and Close at once.
type stream struct {
	ctx    context.Context
	delay  time.Duration
	chunks []model.Chunk
	err    error // returned after the chunks instead of io.EOF
	next   int

	onPause func()
	usage   rein.Usage
	own     [4]model.Chunk

	// done is set by Close; closed (made only for a stream with pauses)
	// is closed with it, to end a pause at once.
	done   atomic.Bool
	closed chan struct{}
	// pause is the timer of the pauses, made by the first and reset for
	// each after it (Recv's alone: a new timer per chunk was a third of a
	// streamed chunk's cost in the model).
	pause *time.Timer
}

func (s *stream) Recv() (model.Chunk, error) {
	if s.done.Load() {
		return model.Chunk{}, errClosed
	}
	if err := ctxError(s.ctx); err != nil {
		return model.Chunk{}, err
	}
	if s.next >= len(s.chunks) {
		if s.err != nil {
			return model.Chunk{}, s.err
		}
		return model.Chunk{}, io.EOF
	}
	c := s.chunks[s.next]
	if c.Kind == model.ChunkText && s.delay > 0 {
		if s.pause == nil {
			s.pause = time.NewTimer(s.delay)
		} else {
			// Stopped or fired: a reset timer delivers only its new
			// expiry (Go's timers since 1.23).
			s.pause.Reset(s.delay)
		}
		if s.onPause != nil {
			s.onPause()
		}
		select {
		case <-s.pause.C:
		case <-s.ctx.Done():
			s.pause.Stop()
			return model.Chunk{}, ctxError(s.ctx)
		case <-s.closed:
			s.pause.Stop()
			return model.Chunk{}, errClosed
		}
	}
	s.next++
	return c, nil
}

// Close ends the stream; a Recv blocked in a pause returns at once.
func (s *stream) Close() error {
	if s.done.CompareAndSwap(false, true) && s.closed != nil {
		close(s.closed)
	}
	return nil
}
