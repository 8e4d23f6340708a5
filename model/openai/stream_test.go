package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/openai"
	"github.com/reinhq/rein/tool"
)

// serve answers every request with status and body.
func serve(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusOK {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(func() { srv.Client().CloseIdleConnections(); srv.Close() })
	return srv
}

func open(t *testing.T, srv *httptest.Server, provider string) model.Stream {
	t.Helper()
	m, err := openai.New(openai.Config{Model: "m", BaseURL: srv.URL, HTTPClient: srv.Client(), MaxRetries: -1, Provider: provider})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Stream(context.Background(), &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func all(s model.Stream) ([]model.Chunk, error) {
	var out []model.Chunk
	for {
		c, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
}

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		fmt.Fprintf(&b, "data: %s\n\n", c)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func TestToolCallsFromLenientServers(t *testing.T) {
	// Ollama-style: no ids, the whole call in one delta, the name repeated,
	// finish_reason "stop" although the reply calls tools, no usage.
	srv := serve(t, 200, sse(
		`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"function":{"name":"sleep","arguments":"{\"seconds\":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"write_note","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"name":"write_note","arguments":"{\"text\": \"unfinished"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	))
	got, err := all(open(t, srv, "ollama"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Kind != model.ChunkToolCall || got[1].Kind != model.ChunkToolCall || got[2].Kind != model.ChunkFinish {
		t.Fatalf("chunks %+v", got)
	}
	a, b := got[0].ToolCall, got[1].ToolCall
	if a.ID == "" || b.ID == "" || a.ID == b.ID || !strings.HasPrefix(a.ID, "call_") {
		t.Errorf("generated ids %q %q", a.ID, b.ID)
	}
	if a.Name != "sleep" || string(a.Input) != `{"seconds":1}` || b.Name != "write_note" {
		t.Errorf("calls %+v %+v", a, b)
	}
	// Arguments that are not JSON are kept, as a JSON string, so the
	// registry can answer with an error the model can read.
	var raw string
	if err := json.Unmarshal(b.Input, &raw); err != nil || raw != `{"text": "unfinished` {
		t.Errorf("broken arguments → %s", b.Input)
	}
	if got[2].Finish != model.FinishToolCalls || got[2].FinishRaw != "stop" {
		t.Errorf("finish %+v, want tool_calls (raw stop)", got[2])
	}
}

func TestFinishReasons(t *testing.T) {
	for raw, want := range map[string]string{
		"stop": model.FinishStop, "length": model.FinishLength, "tool_calls": model.FinishToolCalls,
		"function_call": model.FinishToolCalls, "content_filter": model.FinishOther,
	} {
		srv := serve(t, 200, sse(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`, `{"choices":[{"index":0,"delta":{},"finish_reason":"`+raw+`"}]}`))
		got, err := all(open(t, srv, ""))
		if err != nil || len(got) != 2 || got[1].Finish != want || got[1].FinishRaw != raw {
			t.Errorf("%s: %+v, %v", raw, got, err)
		}
	}
}

func TestRefusalIsText(t *testing.T) {
	srv := serve(t, 200, sse(`{"choices":[{"index":0,"delta":{"refusal":"I can't help with that."}}]}`, `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	got, err := all(open(t, srv, ""))
	if err != nil || len(got) != 2 || got[0].Text != "I can't help with that." {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestStreamErrorEventMessage(t *testing.T) {
	srv := serve(t, 200, sse(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`, `{"error":{"message":"The server had an error","type":"server_error"}}`))
	_, err := all(open(t, srv, ""))
	var me *model.Error
	if !errors.As(err, &me) || !me.Streaming || !strings.Contains(err.Error(), "server_error: The server had an error") {
		t.Fatalf("err = %v", err)
	}
}

func TestStatusErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		provider string
		status   int
		body     string
		want     []string
	}{
		{"openai", 401, `{"error":{"message":"Incorrect API key provided: sk-***","type":"invalid_request_error","code":"invalid_api_key"}}`, []string{"openai: 401 Unauthorized", "Incorrect API key provided", "set OPENAI_API_KEY"}},
		{"openai", 404, `{"error":{"message":"The model m does not exist"}}`, []string{`model "m" was not found`, "--model openai:m", "OPENAI_BASE_URL"}},
		{"ollama", 404, `{"error":{"message":"model \"m\" not found, try pulling it first","type":"api_error"}}`, []string{"ollama: 404", "ollama pull m"}},
		{"openai", 400, `not json at all`, []string{"400 Bad Request", "rejected"}},
	}
	for _, c := range cases {
		srv := serve(t, c.status, c.body)
		m, err := openai.New(openai.Config{Model: "m", BaseURL: srv.URL, HTTPClient: srv.Client(), Provider: c.provider})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Stream(context.Background(), &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}})
		var me *model.Error
		if !errors.As(err, &me) || me.Status != c.status {
			t.Fatalf("%d: err = %v", c.status, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q lacks %q", err.Error(), w)
			}
		}
	}
}

func TestCancellationCarriesTheCause(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	m, err := openai.New(openai.Config{Model: "m", BaseURL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s, err := m.Stream(ctx, &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-started
	cancel(rein.ErrInterrupted)
	_, err = s.Recv()
	if !errors.Is(err, context.Canceled) || !errors.Is(err, rein.ErrInterrupted) {
		t.Fatalf("Recv = %v, want context.Canceled and the cause", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	if _, err := openai.New(openai.Config{APIKey: "k"}); err == nil || !strings.Contains(err.Error(), "openai:NAME") {
		t.Errorf("no model: %v", err)
	}
	if _, err := openai.New(openai.Config{Model: "gpt-4o"}); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Errorf("no key for api.openai.com: %v", err)
	}
	m, err := openai.New(openai.Config{Model: "llama3.2", BaseURL: openai.OllamaBaseURL, Provider: "ollama"})
	if err != nil || m.Name() != "ollama:llama3.2" {
		t.Errorf("ollama: %v %v", m, err)
	}
}

type weatherTool struct{}

func (weatherTool) Spec() tool.Spec {
	return tool.Spec{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
}

func (weatherTool) Call(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{Output: "sunny"}, nil
}

// TestBrokenArgumentsBecomeAnErrorResult follows arguments that are not
// JSON from the wire to the tool registry: the call can be logged as an
// event (its input is valid JSON), and the registry answers it with an
// error result the model can read, instead of running the tool.
func TestBrokenArgumentsBecomeAnErrorResult(t *testing.T) {
	srv := serve(t, 200, sse(
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Par"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
	))
	got, err := all(open(t, srv, ""))
	if err != nil || len(got) != 2 || got[0].Kind != model.ChunkToolCall {
		t.Fatalf("%+v, %v", got, err)
	}
	tc := got[0].ToolCall
	ev := rein.NewEvent(rein.EventToolUse, "run_1", rein.ToolUsePayload{RunID: "run_1", Step: 1, ToolUseID: tc.ID, Name: tc.Name, Input: tc.Input})
	if !json.Valid(ev.Payload) {
		t.Fatalf("event payload %s", ev.Payload)
	}
	reg, err := tool.NewRegistry(tool.RegistryOptions{}, weatherTool{})
	if err != nil {
		t.Fatal(err)
	}
	res := reg.Execute(context.Background(), tool.Call{ID: tc.ID, Name: tc.Name, Input: tc.Input})
	if !res.IsError || !strings.Contains(res.Output, "invalid input for tool get_weather") || res.Output == "sunny" {
		t.Fatalf("registry answered %+v", res)
	}
	t.Logf("the model reads: %s", res.Output)
}

// TestCloseUnblocksRecv: Close from another goroutine ends a Recv that is
// waiting for the network.
func TestCloseUnblocksRecv(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	m, err := openai.New(openai.Config{Model: "m", BaseURL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Stream(context.Background(), &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	ch := make(chan error, 1)
	go func() {
		_, err := s.Recv()
		ch <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	select {
	case err := <-ch:
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("Recv after Close = %v, want an error", err)
		}
	case <-timer.C:
		t.Fatal("Recv still blocked 5s after Close")
	}
	if _, err := s.Recv(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close = %v, want net.ErrClosed", err)
	}
}

func TestCallsThatReuseIndexZero(t *testing.T) {
	srv := serve(t, 200, sse(
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"sleep","arguments":"{\"seconds\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","function":{"name":"write_note","arguments":"{\"text\":\"hi\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	))
	got, err := all(open(t, srv, ""))
	if err != nil || len(got) != 3 {
		t.Fatalf("%+v, %v", got, err)
	}
	a, b := got[0].ToolCall, got[1].ToolCall
	if a.ID != "call_a" || string(a.Input) != `{"seconds":1}` || b.ID != "call_b" || string(b.Input) != `{"text":"hi"}` {
		t.Fatalf("calls %+v %+v", a, b)
	}
}
