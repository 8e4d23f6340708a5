package aisdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// newServer is a server as rein serve builds it, with /ai-sdk mounted, and
// tokens for two owners.
func newServer(t *testing.T) *reintest.Server {
	return reintest.NewServer(t, reintest.ServerOptions{
		Script: protocoltest.WriteScript(t),
		Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{aisdk.Mount(svc, aisdk.Options{})}
		},
	})
}

// wire speaks the AI SDK's wire as DefaultChatTransport does.
type wire struct {
	srv   *reintest.Server
	token string
}

func (c wire) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.srv.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return c.srv.HTTP.Do(req)
}

// userMessage is a UI message of the user's with one text part.
func userMessage(id, text string) map[string]any {
	return map[string]any{"id": id, "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}}
}

// send posts a chat request as sendMessage does.
func (c wire) send(ctx context.Context, chat string, msgs ...map[string]any) (*http.Response, error) {
	return c.do(ctx, http.MethodPost, "/ai-sdk/chat", map[string]any{"id": chat, "messages": msgs, "trigger": "submit-message"})
}

// chunks reads a UI message stream to its end: the chunks, and whether it
// ended with [DONE].
func chunks(t *testing.T, resp *http.Response) ([]map[string]any, bool) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if resp.Header.Get("x-vercel-ai-ui-message-stream") != "v1" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return out, true
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		out = append(out, m)
	}
	return out, false
}

// summary is the chunks' types, with text deltas joined into one "text:"
// entry per text part.
func summary(cs []map[string]any) []string {
	var out []string
	for _, c := range cs {
		typ := c["type"].(string)
		switch typ {
		case "text-delta":
			last := out[len(out)-1]
			if strings.HasPrefix(last, "text:") {
				out[len(out)-1] = last + c["delta"].(string)
			} else {
				out = append(out, "text:"+c["delta"].(string))
			}
		default:
			out = append(out, typ)
		}
	}
	return out
}

func find(cs []map[string]any, typ string) map[string]any {
	for _, c := range cs {
		if c["type"] == typ {
			return c
		}
	}
	return nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOneTurn(t *testing.T) {
	srv := newServer(t)
	c := wire{srv, "tok-alice"}
	ctx := ctxT(t)
	resp, err := c.send(ctx, "chat-1", userMessage("m1", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	cs, done := chunks(t, resp)
	got := strings.Join(summary(cs), " ")
	want := "start start-step text-start text:echo: hello text-end finish-step finish"
	if got != want || !done {
		t.Fatalf("chunks %q (done %v), want %q", got, done, want)
	}
	run := cs[0]["messageId"].(string)
	meta := find(cs, "finish")["messageMetadata"].(map[string]any)["rein"].(map[string]any)
	if meta["run_id"] != run || meta["status"] != "COMPLETED" || meta["reason"] != "stop" || find(cs, "finish")["finishReason"] != "stop" {
		t.Fatalf("finish = %v", find(cs, "finish"))
	}
	// The chat is a session with the chat's id; the message id is the
	// run's client id.
	rec, err := srv.Service.GetRun(ctx, rein.SessionKey{Owner: "alice", ID: "chat-1"}, run)
	if err != nil || rec.ClientID != "m1" || rec.Input != "hello" {
		t.Fatalf("run = %+v, %v", rec, err)
	}
	// The same message again (a retried request) starts nothing: its run
	// is streamed again.
	resp, err = c.send(ctx, "chat-1", userMessage("m1", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := chunks(t, resp)
	if strings.Join(summary(again), " ") != want || again[0]["messageId"] != run {
		t.Fatalf("repeat: %q", summary(again))
	}
	// Idle: nothing to resume.
	resp, err = c.do(ctx, http.MethodGet, "/ai-sdk/chat/chat-1/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("resume of an idle chat: %d", resp.StatusCode)
	}
}

func TestApprovalContinuesTheRun(t *testing.T) {
	srv := newServer(t)
	c := wire{srv, "tok-alice"}
	ctx := ctxT(t)
	for _, allow := range []bool{true, false} {
		chat := fmt.Sprintf("chat-approve-%v", allow)
		resp, err := c.send(ctx, chat, userMessage("m1", "note this"))
		if err != nil {
			t.Fatal(err)
		}
		cs, done := chunks(t, resp)
		got := strings.Join(summary(cs), " ")
		if got != "start start-step text-start text:saving a note; hints=[] text-end tool-input-available tool-approval-request finish-step finish" || !done {
			t.Fatalf("first stream %q", got)
		}
		fin := find(cs, "finish")
		meta := fin["messageMetadata"].(map[string]any)["rein"].(map[string]any)
		ap := find(cs, "tool-approval-request")
		if fin["finishReason"] != "tool-calls" || meta["status"] != "RUNNING" || fmt.Sprint(meta["waiting_for_approval"]) != fmt.Sprintf("[%s]", ap["approvalId"]) {
			t.Fatalf("parked finish = %v", fin)
		}
		run := cs[0]["messageId"].(string)
		// The client's answer: the assistant message with its tool part
		// approval-responded, no new user message.
		assistant := map[string]any{"id": run, "role": "assistant", "parts": []any{
			map[string]any{"type": "step-start"},
			map[string]any{"type": "tool-write_note", "toolCallId": ap["toolCallId"], "state": "approval-responded", "input": map[string]any{},
				"approval": map[string]any{"id": ap["approvalId"], "approved": allow, "reason": "not now"}},
		}}
		resp, err = c.do(ctx, http.MethodPost, "/ai-sdk/chat", map[string]any{"id": chat, "trigger": "submit-message", "messageId": run,
			"messages": []any{userMessage("m1", "note this"), assistant}})
		if err != nil {
			t.Fatal(err)
		}
		cs, done = chunks(t, resp)
		got = strings.Join(summary(cs), " ")
		outcome := "tool-output-available"
		if !allow {
			outcome = "tool-output-denied"
		}
		if !strings.HasPrefix(got, "start "+outcome+" start-step text-start text:note result: ") || !strings.HasSuffix(got, " text-end finish-step finish") || !done {
			t.Fatalf("continuation %q", got)
		}
		if cs[0]["messageId"] != run || strings.Contains(got, "not now") == allow {
			t.Fatalf("continuation of run %s: %q", run, got)
		}
		// Answered again (a retried request): conflict, nothing applied.
		resp, err = c.do(ctx, http.MethodPost, "/ai-sdk/chat", map[string]any{"id": chat, "trigger": "submit-message", "messageId": run,
			"messages": []any{assistant}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), `"code":"conflict"`) {
			t.Fatalf("answer again: %d %s", resp.StatusCode, b)
		}
	}
}

// TestNodeSDK runs the `ai` package's interop test (testdata/node, ai
// pinned by its lockfile: AbstractChat and DefaultChatTransport) against a
// server (protocoltest.RunNode).
func TestNodeSDK(t *testing.T) {
	protocoltest.RunNode(t, "testdata/node", 8, func() []string {
		srv := newServer(t)
		return []string{"REIN_URL=" + srv.URL, "REIN_TOKEN=tok-alice"}
	})
}

// Every malformed request is a 400 naming the field, with nothing applied;
// another owner's chat is not found; no token is a 401.
func TestBadInput(t *testing.T) {
	srv := newServer(t)
	c := wire{srv, "tok-alice"}
	ctx := ctxT(t)
	resp, err := c.send(ctx, "mine", userMessage("m1", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	chunks(t, resp)
	key := rein.SessionKey{Owner: "alice", ID: "mine"}
	before, _, _ := srv.Service.ReadEvents(ctx, key, 0, 1000)
	assistantNoAnswer := map[string]any{"id": "a1", "role": "assistant", "parts": []any{map[string]any{"type": "text", "text": "x"}}}
	for _, tc := range []struct {
		path, param string
		body        any
	}{
		{"/ai-sdk/chat", "body", "not an object"},
		{"/ai-sdk/chat", "id", map[string]any{"messages": []any{userMessage("m2", "hi")}}},
		{"/ai-sdk/chat", "id", map[string]any{"id": "has space", "messages": []any{userMessage("m2", "hi")}}},
		{"/ai-sdk/chat", "messages", map[string]any{"id": "mine", "messages": []any{}}},
		{"/ai-sdk/chat", "trigger", map[string]any{"id": "mine", "trigger": "shout", "messages": []any{userMessage("m2", "hi")}}},
		{"/ai-sdk/chat", "when_busy", map[string]any{"id": "mine", "when_busy": "later", "messages": []any{userMessage("m2", "hi")}}},
		{"/ai-sdk/chat", "messages[0].parts", map[string]any{"id": "mine", "messages": []any{userMessage("m2", " ")}}},
		{"/ai-sdk/chat", "messages[0].id", map[string]any{"id": "mine", "messages": []any{userMessage("", "hi")}}},
		{"/ai-sdk/chat", "messages[0].role", map[string]any{"id": "mine", "messages": []any{map[string]any{"id": "s", "role": "system", "parts": []any{}}}}},
		{"/ai-sdk/chat", "messages[0]", map[string]any{"id": "mine", "messages": []any{assistantNoAnswer}}},
		{"/ai-sdk/chat/mine/stop", "mode", map[string]any{"mode": "pause"}},
		{"/ai-sdk/chat/mine/stop", "message_id", map[string]any{"message_id": ""}},
		{"/ai-sdk/chat/mine/notes", "text", map[string]any{"text": ""}},
		{"/ai-sdk/chat/mine/notes", "id", map[string]any{"text": "x", "id": ""}},
	} {
		resp, err := c.do(ctx, http.MethodPost, tc.path, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Code, Param string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Code != "invalid_argument" || e.Error.Param != tc.param {
			t.Errorf("%s %v: %d %+v, want 400 naming %s", tc.path, tc.body, resp.StatusCode, e.Error, tc.param)
		}
	}
	for _, q := range []string{"?after=-1", "?after=x"} {
		resp, err := c.do(ctx, http.MethodGet, "/ai-sdk/chat/mine/stream"+q, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"after"`) {
			t.Errorf("stream%s: %d %s", q, resp.StatusCode, b)
		}
	}
	after, _, _ := srv.Service.ReadEvents(ctx, key, 0, 1000)
	if len(after) != len(before) {
		t.Fatalf("bad requests wrote %d events", len(after)-len(before))
	}
	// Bob: alice's chat is not found by every route, and his message to
	// it creates nothing.
	bob := wire{srv, "tok-bob"}
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/ai-sdk/chat", map[string]any{"id": "mine", "messages": []any{userMessage("b1", "theirs")}}},
		{http.MethodPost, "/ai-sdk/chat", map[string]any{"id": "mine", "trigger": "regenerate-message", "messages": []any{}}},
		{http.MethodGet, "/ai-sdk/chat/mine/stream", nil},
		{http.MethodGet, "/ai-sdk/chat/mine/stream?after=0", nil},
		{http.MethodPost, "/ai-sdk/chat/mine/stop", map[string]any{}},
		{http.MethodPost, "/ai-sdk/chat/mine/notes", map[string]any{"text": "theirs"}},
	} {
		resp, err := bob.do(ctx, r.method, r.path, r.body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_found"`) {
			t.Errorf("bob %s %s: %d %s", r.method, r.path, resp.StatusCode, b)
		}
	}
	if after2, _, _ := srv.Service.ReadEvents(ctx, key, 0, 1000); len(after2) != len(before) {
		t.Fatal("bob's requests reached alice's chat")
	}
	resp, err = wire{srv, ""}.send(ctx, "mine", userMessage("m3", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
}
