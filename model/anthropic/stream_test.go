package anthropic_test

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
	"github.com/reinhq/rein/model/anthropic"
)

func serve(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// SDK v2 sends the key as a bearer token; we add the documented
		// x-api-key header too.
		if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("X-Api-Key") != "k" || r.Header.Get("Anthropic-Version") == "" {
			http.Error(w, "missing key or anthropic-version", http.StatusTeapot)
			return
		}
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

func request() *model.Request {
	return &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}}
}

func open(t *testing.T, srv *httptest.Server) model.Stream {
	t.Helper()
	m, err := anthropic.New(anthropic.Config{Model: "m", APIKey: "k", BaseURL: srv.URL, HTTPClient: srv.Client(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Stream(context.Background(), request())
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

// events renders "type json" pairs as an event stream.
func events(evs ...string) string {
	var b strings.Builder
	for _, e := range evs {
		typ, data, _ := strings.Cut(e, " ")
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, data)
	}
	return b.String()
}

const msgStart = `message_start {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}`

func TestToolUseCutOffByMaxTokens(t *testing.T) {
	srv := serve(t, 200, events(
		msgStart,
		`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`,
		`content_block_stop {"type":"content_block_stop","index":0}`,
		`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"write_note","input":{}}}`,
		`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\": \"a long no"}}`,
		`message_delta {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":64}}`,
		`message_stop {"type":"message_stop"}`,
	))
	got, err := all(open(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Kind != model.ChunkToolCall || got[1].Kind != model.ChunkUsage || got[2].Kind != model.ChunkFinish {
		t.Fatalf("chunks %+v (thinking must not show as text)", got)
	}
	var raw string
	if tc := got[0].ToolCall; tc.ID != "toolu_1" || json.Unmarshal(tc.Input, &raw) != nil || raw != `{"text": "a long no` {
		t.Errorf("cut-off call %+v", tc)
	}
	if u := *got[1].Usage; u != (rein.Usage{InputTokens: 15, OutputTokens: 64}) {
		t.Errorf("usage %+v: message_delta counts are cumulative and replace message_start's", u)
	}
	if got[2].Finish != model.FinishLength || got[2].FinishRaw != "max_tokens" {
		t.Errorf("finish %+v", got[2])
	}
}

func TestStopReasons(t *testing.T) {
	for raw, want := range map[string]string{
		"end_turn": model.FinishStop, "stop_sequence": model.FinishStop, "tool_use": model.FinishToolCalls,
		"max_tokens": model.FinishLength, "model_context_window_exceeded": model.FinishLength,
		"pause_turn": model.FinishOther, "refusal": model.FinishOther,
	} {
		srv := serve(t, 200, events(msgStart,
			`message_delta {"type":"message_delta","delta":{"stop_reason":"`+raw+`"},"usage":{"output_tokens":1}}`,
			`message_stop {"type":"message_stop"}`))
		got, err := all(open(t, srv))
		if err != nil || len(got) != 2 || got[1].Finish != want || got[1].FinishRaw != raw {
			t.Errorf("%s: %+v, %v", raw, got, err)
		}
	}
}

func TestMessageStopWithoutStopReasonIsAnError(t *testing.T) {
	srv := serve(t, 200, events(msgStart, `message_stop {"type":"message_stop"}`))
	got, err := all(open(t, srv))
	var me *model.Error
	if !errors.As(err, &me) || !me.Streaming || len(got) != 0 {
		t.Fatalf("%+v, %v", got, err)
	}
}

func TestStreamErrorEventMessage(t *testing.T) {
	srv := serve(t, 200, events(msgStart, `error {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	_, err := all(open(t, srv))
	var me *model.Error
	if !errors.As(err, &me) || !me.Streaming || me.Retryable || !strings.Contains(err.Error(), "overloaded_error: Overloaded") {
		t.Fatalf("err = %v", err)
	}
}

func TestStatusErrorsNameTheSetting(t *testing.T) {
	srv := serve(t, 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
	m, err := anthropic.New(anthropic.Config{Model: "m", APIKey: "k", BaseURL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Stream(context.Background(), request())
	for _, w := range []string{"anthropic: 401 Unauthorized", "authentication_error: invalid x-api-key", "ANTHROPIC_API_KEY"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("%v lacks %q", err, w)
		}
	}
}

func TestOverloadedIsRetried(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, events(msgStart, `message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, `message_stop {"type":"message_stop"}`))
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	var infos []model.RetryInfo
	m, err := anthropic.New(anthropic.Config{Model: "m", APIKey: "k", BaseURL: srv.URL, HTTPClient: srv.Client(), RetryBaseDelay: 1, OnRetry: func(i model.RetryInfo) { infos = append(infos, i) }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Stream(context.Background(), request())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := all(s); err != nil || len(got) != 2 || len(infos) != 1 || infos[0].Status != 529 || infos[0].Provider != "anthropic" {
		t.Fatalf("%+v, %v, retries %+v", got, err, infos)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	if _, err := anthropic.New(anthropic.Config{Model: "m"}); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("no key: %v", err)
	}
	if _, err := anthropic.New(anthropic.Config{APIKey: "k"}); err == nil || !strings.Contains(err.Error(), "anthropic:NAME") {
		t.Errorf("no model: %v", err)
	}
	if m, err := anthropic.New(anthropic.Config{Model: "claude-x", APIKey: "k"}); err != nil || m.Name() != "anthropic:claude-x" {
		t.Errorf("%v %v", m, err)
	}
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
	m, err := anthropic.New(anthropic.Config{Model: "m", APIKey: "k", BaseURL: srv.URL, HTTPClient: srv.Client()})
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
