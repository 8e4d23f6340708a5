// Package modeltest is the conformance suite every Rein model provider
// passes: the same scenarios, the same normalised expectations, whatever
// the provider's wire format.
//
// An HTTP provider (openai, anthropic) supplies, per scenario, a recorded
// wire stream (see Wire; kept under the provider's testdata) and a way to
// build a model pointed at a test server. The suite serves the recording
// from an httptest server, with the behaviour the scenario needs (stall,
// drop the connection, fail then succeed), drives the model's Stream and
// Recv, and checks the chunks against the model.Model contract:
// text deltas as they arrive, complete tool calls, usage, one finish and
// then io.EOF; errors instead of a short reply when the stream breaks;
// prompt return on cancellation; retries only before the stream starts.
//
// A provider without HTTP (scripted) supplies models that play a scenario
// from a script instead (Provider.Scripts), and runs the scenarios that
// make sense without a wire: text, tool calls, cancellation.
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

// Scenario names a situation every provider must handle.
type Scenario string

// The scenarios. Each names a recording DIR/NAME.http for HTTP providers.
const (
	// Text: a plain text reply in several deltas (TextReply), finish stop.
	Text Scenario = "text"
	// ToolCalls: text (ToolCallsText), then two parallel tool calls
	// (ToolCallsWant) whose arguments arrive split across many chunks,
	// finish tool_calls. The request offers WeatherTool.
	ToolCalls Scenario = "tool_calls"
	// ToolResult: the request is a turn with tool results, a supplement, a
	// partial reply and a system prompt (ToolResultRequest); the reply is
	// text. The recording's .request.json pins the provider's mapping.
	ToolResult Scenario = "tool_result"
	// Usage: a short reply ("Hi.") whose usage arrives in its own chunk;
	// the usage chunks sum to UsageWant.
	Usage Scenario = "usage"
	// StallAfterHeaders: the server sends headers and nothing else;
	// cancelling returns from Recv within CancelBound.
	StallAfterHeaders Scenario = "stall_after_headers"
	// StallMidStream: the server sends one text delta and stops; the delta
	// arrives before the stall (streaming, not buffering), and cancelling
	// returns from Recv within CancelBound.
	StallMidStream Scenario = "stall_mid_stream"
	// CancelBeforeHeaders: the server never answers; cancelling returns
	// from Stream within CancelBound. Needs no recording.
	CancelBeforeHeaders Scenario = "cancel_before_headers"
	// CancelDuringRetryWait: the server answers 503 with a long
	// Retry-After; cancelling during the wait returns from Stream within
	// CancelBound. Needs no recording (the body is not JSON on purpose:
	// the status must be seen whatever the body).
	CancelDuringRetryWait Scenario = "cancel_during_retry_wait"
	// Drop: some text, then the connection drops mid-body: an error, no
	// finish.
	Drop Scenario = "drop"
	// RateLimited: 429 with a Retry-After, then the Text reply: one retry
	// that waited what the server asked (capped by Options.MaxRetryWait).
	RateLimited Scenario = "rate_limited"
	// ServerError: 500 to every request: Options.MaxRetries retries, then
	// a retryable *model.Error with status 500.
	ServerError Scenario = "server_error"
	// Malformed: some text, then a data line that is not valid JSON: an
	// error, no finish.
	Malformed Scenario = "malformed"
	// UnknownFinish: a reply whose finish reason is "brand_new_reason":
	// finish other, FinishRaw kept.
	UnknownFinish Scenario = "unknown_finish"
	// NoFinish: some text, then the stream ends cleanly without saying the
	// reply is complete: an error, no finish.
	NoFinish Scenario = "no_finish"
	// StreamErrorEvent: some text, then the server reports an error inside
	// the stream: an error, no finish, not retried.
	StreamErrorEvent Scenario = "stream_error_event"
	// Unauthorized: 401: an error naming Provider.KeySetting, not retried.
	Unauthorized Scenario = "unauthorized"
	// Forbidden: 403: an error naming Provider.KeySetting, not retried.
	Forbidden Scenario = "forbidden"
	// NotFound: 404: an error naming the model (and
	// Provider.BaseURLSetting when set), not retried.
	NotFound Scenario = "not_found"
)

// Scenarios lists every scenario in a stable order.
func Scenarios() []Scenario {
	return []Scenario{Text, ToolCalls, ToolResult, Usage, StallAfterHeaders, StallMidStream,
		CancelBeforeHeaders, CancelDuringRetryWait, Drop, RateLimited, ServerError, Malformed,
		UnknownFinish, NoFinish, StreamErrorEvent, Unauthorized, Forbidden, NotFound}
}

// needsWire reports whether an HTTP provider must record the scenario.
func needsWire(s Scenario) bool { return s != CancelBeforeHeaders && s != CancelDuringRetryWait }

// Expected results shared by every provider's recordings.
const (
	TextReply     = "Hello! How can I help you today?"
	ToolCallsText = "Let me check both cities."
	UsageReply    = "Hi."
	UnknownRaw    = "brand_new_reason"
	// TestModel is the model name the suite configures.
	TestModel = "test-model"
	// TestAPIKey is the API key the suite configures; the suite checks it
	// reached the server in some header.
	TestAPIKey = "test-key-5f1c"
)

// UsageWant is the usage the Usage scenario's recordings report.
var UsageWant = rein.Usage{InputTokens: 42, OutputTokens: 3}

// CancelBound is how soon after cancellation a blocked call must return.
const CancelBound = 100 * time.Millisecond

// Options is how the suite configures a provider's model.
type Options struct {
	BaseURL        string
	Model          string
	APIKey         string
	HTTPClient     *http.Client
	MaxRetries     int
	RetryBaseDelay time.Duration
	MaxRetryWait   time.Duration
	OnRetry        func(model.RetryInfo)
}

// Provider is what a provider gives the suite.
type Provider struct {
	// Name names the provider in failures.
	Name string
	// New builds a model from o (HTTP providers). Nil for providers
	// without HTTP.
	New func(t *testing.T, o Options) model.Model
	// Wires are the recordings, usually LoadWires("testdata"). An HTTP
	// provider must record every scenario that needs one.
	Wires map[Scenario]Wire
	// Path, when set, is the URL path every request must use.
	Path string
	// KeySetting and BaseURLSetting are the settings that 401/403 and 404
	// errors must name (e.g. "OPENAI_API_KEY", "OPENAI_BASE_URL").
	KeySetting, BaseURLSetting string
	// Scripts build models that play a scenario without a wire, for
	// providers without HTTP. A scenario with neither wire nor script is
	// skipped for such providers.
	Scripts map[Scenario]func(t *testing.T) model.Model
}

// Run runs every scenario against p, each as a parallel subtest.
func Run(t *testing.T, p Provider) {
	t.Helper()
	for _, sc := range Scenarios() {
		t.Run(string(sc), func(t *testing.T) {
			t.Parallel()
			if p.New == nil {
				mk := p.Scripts[sc]
				if mk == nil {
					t.Skipf("%s has no wire and no script for scenario %s", p.Name, sc)
				}
				runScripted(t, sc, mk(t))
				return
			}
			w, ok := p.Wires[sc]
			if !ok && needsWire(sc) {
				t.Fatalf("%s: no recording for scenario %s (want testdata/%s.http)", p.Name, sc, sc)
			}
			runWire(t, p, sc, w)
		})
	}
}

// WeatherTool is the tool the ToolCalls and ToolResult requests offer.
var WeatherTool = model.ToolSpec{
	Name:        "get_weather",
	Description: "Current weather for a city.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}`),
}

// ToolCallsWant are the calls the ToolCalls recordings make, in order
// (ids are the provider's).
var ToolCallsWant = []rein.ToolCall{
	{Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
	{Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo","unit":"celsius"}`)},
}

// Request returns the request the suite sends in scenario sc.
func Request(sc Scenario) *model.Request {
	user := func(s string) rein.Message { return rein.Message{Role: rein.RoleUser, Text: s} }
	switch sc {
	case ToolCalls:
		return &model.Request{Messages: []rein.Message{user("What's the weather in Paris and Tokyo?")}, Tools: []model.ToolSpec{WeatherTool}, Input: "What's the weather in Paris and Tokyo?", Step: 1, RunID: "run_test"}
	case ToolResult:
		return ToolResultRequest()
	case Usage:
		return &model.Request{Messages: []rein.Message{user("Greet me briefly.")}, Input: "Greet me briefly.", Step: 1, RunID: "run_test"}
	default:
		return &model.Request{System: "You are terse.", Messages: []rein.Message{user("Say hello.")}, Input: "Say hello.", Step: 1, RunID: "run_test"}
	}
}

// ToolResultRequest is a second step with everything a transcript can
// hold: a system prompt, a partial reply kept from an interrupted run, a
// user turn, an assistant message with text and two tool calls, their
// results (one an error), and a supplement that arrived meanwhile.
func ToolResultRequest() *model.Request {
	msgs := []rein.Message{
		{Role: rein.RoleUser, Text: "Hi"},
		{Role: rein.RoleAssistant, Text: "Hello! I was about to", Partial: true},
		{Role: rein.RoleUser, Text: "What's the weather in Paris and Tokyo?"},
		{Role: rein.RoleAssistant, Text: "Let me check both cities.", ToolCalls: []rein.ToolCall{
			{ID: "call_P4r1s", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
			{ID: "call_T0ky0", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo","unit":"celsius"}`)},
		}},
		{Role: rein.RoleTool, ToolCallID: "call_P4r1s", ToolName: "get_weather", Text: "18°C, light rain"},
		{Role: rein.RoleTool, ToolCallID: "call_T0ky0", ToolName: "get_weather", Text: "weather service timed out", IsError: true},
		{Role: rein.RoleUser, Text: "Use Fahrenheit too, please.", Hint: &rein.Hint{ID: "sup_1", Source: "user"}},
	}
	if err := rein.ValidateTranscript(msgs); err != nil {
		panic("modeltest: ToolResultRequest is not a valid transcript: " + err.Error())
	}
	return &model.Request{System: "You are a weather assistant.", Messages: msgs, Tools: []model.ToolSpec{WeatherTool}, MaxTokens: 512, Input: "What's the weather in Paris and Tokyo?", Step: 2, RunID: "run_test"}
}

// result is what a stream produced.
type result struct {
	chunks []model.Chunk
	err    error // the error that ended it; nil for io.EOF
}

func (r result) text() string {
	var b strings.Builder
	for _, c := range r.chunks {
		if c.Kind == model.ChunkText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

func (r result) count(k model.ChunkKind) int {
	n := 0
	for _, c := range r.chunks {
		if c.Kind == k {
			n++
		}
	}
	return n
}

func (r result) calls() []rein.ToolCall {
	var out []rein.ToolCall
	for _, c := range r.chunks {
		if c.Kind == model.ChunkToolCall {
			out = append(out, *c.ToolCall)
		}
	}
	return out
}

func (r result) usage() (rein.Usage, bool) {
	var u rein.Usage
	seen := false
	for _, c := range r.chunks {
		if c.Kind == model.ChunkUsage {
			u, seen = u.Add(*c.Usage), true
		}
	}
	return u, seen
}

func (r result) finish() (model.Chunk, bool) {
	if n := len(r.chunks); n > 0 && r.chunks[n-1].Kind == model.ChunkFinish {
		return r.chunks[n-1], true
	}
	return model.Chunk{}, false
}

// drain reads s to the end and checks the contract's shape: well-formed
// chunks, nothing after the finish, io.EOF (again) after it, and no
// finish at all when the stream failed.
func drain(t *testing.T, s model.Stream) result {
	t.Helper()
	var r result
	for {
		c, err := s.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			break
		}
		if _, done := r.finish(); done {
			t.Fatalf("chunk %+v after the finish chunk", c)
		}
		checkChunk(t, c)
		r.chunks = append(r.chunks, c)
	}
	_, finished := r.finish()
	if r.err == nil && !finished {
		t.Fatalf("io.EOF without a finish chunk (chunks %+v)", r.chunks)
	}
	if r.err != nil && r.count(model.ChunkFinish) > 0 {
		t.Fatalf("stream failed (%v) after a finish chunk: a half message presented as complete", r.err)
	}
	// The end is sticky: io.EOF again, or an error again (never io.EOF
	// after an error).
	_, err := s.Recv()
	switch {
	case r.err == nil && !errors.Is(err, io.EOF):
		t.Fatalf("Recv after io.EOF = %v, want io.EOF", err)
	case r.err != nil && (err == nil || errors.Is(err, io.EOF)):
		t.Fatalf("Recv after error %v = %v, want an error", r.err, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	return r
}

func checkChunk(t *testing.T, c model.Chunk) {
	t.Helper()
	switch c.Kind {
	case model.ChunkText:
		if c.Text == "" {
			t.Fatalf("empty text chunk")
		}
	case model.ChunkToolCall:
		tc := c.ToolCall
		if tc == nil || tc.ID == "" || tc.Name == "" || !json.Valid(tc.Input) {
			t.Fatalf("malformed tool call chunk %+v", tc)
		}
	case model.ChunkUsage:
		if c.Usage == nil {
			t.Fatalf("usage chunk without usage")
		}
	case model.ChunkFinish:
		switch c.Finish {
		case model.FinishStop, model.FinishToolCalls, model.FinishLength, model.FinishOther:
		default:
			t.Fatalf("finish %q is not one of the normalised reasons", c.Finish)
		}
	default:
		t.Fatalf("chunk of unknown kind %d", c.Kind)
	}
}

// stream opens a stream with a generous deadline, so that a provider that
// ignores cancellation fails the test instead of hanging it.
func stream(t *testing.T, m model.Model, sc Scenario) (model.Stream, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return m.Stream(ctx, Request(sc))
}

// checkOutcome checks the normalised result of the scenarios that end in
// a reply or a stream error.
func checkOutcome(t *testing.T, sc Scenario, r result) {
	t.Helper()
	fin, _ := r.finish()
	switch sc {
	case Text, RateLimited:
		wantReply(t, r)
		if got := r.text(); got != TextReply {
			t.Errorf("text = %q, want %q", got, TextReply)
		}
		if n := r.count(model.ChunkText); n < 2 {
			t.Errorf("%d text chunks, want the deltas as they arrived (≥ 2)", n)
		}
		if n := r.count(model.ChunkToolCall); n != 0 {
			t.Errorf("%d tool calls, want none", n)
		}
		if fin.Finish != model.FinishStop {
			t.Errorf("finish = %q (raw %q), want %q", fin.Finish, fin.FinishRaw, model.FinishStop)
		}
	case ToolCalls:
		wantReply(t, r)
		if got := r.text(); got != ToolCallsText {
			t.Errorf("text = %q, want %q", got, ToolCallsText)
		}
		got := r.calls()
		if len(got) != len(ToolCallsWant) {
			t.Fatalf("tool calls = %+v, want %d", got, len(ToolCallsWant))
		}
		for i, c := range got {
			if c.Name != ToolCallsWant[i].Name || !jsonEqual(c.Input, ToolCallsWant[i].Input) {
				t.Errorf("call %d = %s %s, want %s %s", i, c.Name, c.Input, ToolCallsWant[i].Name, ToolCallsWant[i].Input)
			}
		}
		if got[0].ID == got[1].ID {
			t.Errorf("both calls have id %q", got[0].ID)
		}
		last := -1
		for i, c := range r.chunks {
			if c.Kind == model.ChunkText {
				last = i
			}
		}
		for i, c := range r.chunks {
			if c.Kind == model.ChunkToolCall && i < last {
				t.Errorf("tool call at chunk %d before text at chunk %d: the text came first", i, last)
			}
		}
		if fin.Finish != model.FinishToolCalls {
			t.Errorf("finish = %q (raw %q), want %q", fin.Finish, fin.FinishRaw, model.FinishToolCalls)
		}
	case ToolResult:
		wantReply(t, r)
		if r.text() == "" {
			t.Errorf("no text")
		}
		if fin.Finish != model.FinishStop {
			t.Errorf("finish = %q (raw %q), want %q", fin.Finish, fin.FinishRaw, model.FinishStop)
		}
	case Usage:
		wantReply(t, r)
		if got := r.text(); got != UsageReply {
			t.Errorf("text = %q, want %q", got, UsageReply)
		}
		u, ok := r.usage()
		if !ok || u != UsageWant {
			t.Errorf("usage = %+v (present %v), want %+v", u, ok, UsageWant)
		}
		for i, c := range r.chunks {
			if c.Kind == model.ChunkUsage && i != len(r.chunks)-2 {
				t.Errorf("usage at chunk %d of %d, want it right before the finish", i, len(r.chunks))
			}
		}
	case UnknownFinish:
		wantReply(t, r)
		if fin.Finish != model.FinishOther || fin.FinishRaw != UnknownRaw {
			t.Errorf("finish = %q raw %q, want %q raw %q", fin.Finish, fin.FinishRaw, model.FinishOther, UnknownRaw)
		}
	case Drop, Malformed, NoFinish, StreamErrorEvent:
		if r.err == nil {
			t.Fatalf("stream ended with io.EOF after %+v; want an error", r.chunks)
		}
		if errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) {
			t.Fatalf("error %v looks like a cancellation; want a stream error", r.err)
		}
		if r.text() == "" {
			t.Errorf("no text before the failure; the recording should stream some first")
		}
		t.Logf("stream error: %v", r.err)
		var me *model.Error
		if !errors.As(r.err, &me) || !me.Streaming || me.Retryable {
			t.Errorf("error %v (%T): want a *model.Error with Streaming set and Retryable unset", r.err, r.err)
		}
	}
}

func wantReply(t *testing.T, r result) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("stream failed: %v (after %+v)", r.err, r.chunks)
	}
}

// awaitWithin waits for ch at most CancelBound after start (and fails the
// test after a longer grace, so a provider that never returns does not
// hang the suite).
func awaitWithin[T any](t *testing.T, what string, start time.Time, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		d := time.Since(start)
		if d > CancelBound {
			t.Errorf("%s returned %v after cancel, want within %v", what, d, CancelBound)
		}
		t.Logf("%s returned %v after cancel", what, d)
		return v
	case <-timer.C:
		t.Fatalf("%s did not return within 5s of cancel", what)
		panic("unreachable")
	}
}

func wantCancelled(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%s error = %v, want one wrapping context.Canceled", what, err)
	}
}

type recvResult struct {
	c   model.Chunk
	err error
}

// cancelRecv cancels while Recv is blocked and checks it returns promptly
// with the cancellation.
func cancelRecv(t *testing.T, s model.Stream, cancel context.CancelFunc) {
	t.Helper()
	ch := make(chan recvResult, 1)
	go func() {
		c, err := s.Recv()
		ch <- recvResult{c, err}
	}()
	start := time.Now()
	cancel()
	r := awaitWithin(t, "Recv", start, ch)
	if r.err == nil {
		t.Fatalf("Recv after cancel returned chunk %+v, want an error", r.c)
	}
	wantCancelled(t, "Recv", r.err)
	if _, err := s.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Recv after cancellation = %v, want the error again", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// retries collects OnRetry calls.
type retries struct {
	mu    sync.Mutex
	infos []model.RetryInfo
	ch    chan model.RetryInfo
}

func newRetries() *retries { return &retries{ch: make(chan model.RetryInfo, 16)} }

func (r *retries) on(i model.RetryInfo) {
	r.mu.Lock()
	r.infos = append(r.infos, i)
	r.mu.Unlock()
	select {
	case r.ch <- i:
	default:
	}
}

func (r *retries) all() []model.RetryInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.RetryInfo(nil), r.infos...)
}

func prettyJSON(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Sprintf("(not JSON: %v) %s", err, b)
	}
	var out strings.Builder
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return out.String()
}
