package aisdk_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol/protocoltest"
)

// TestScenarios runs the scenarios every adapter passes, through the AI
// SDK's wire as DefaultChatTransport speaks it, and Rein's extensions of
// it: the stop and notes routes, and the chat's stream after a cursor
// (Last-Event-ID), which is what a session's stream is in this protocol.
func TestScenarios(t *testing.T) {
	srv := newServer(t)
	protocoltest.Run(t, protocoltest.Env{
		Driver:  &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice", "bob": "tok-bob"}, messages: map[string]string{}},
		Service: srv.Service,
		Owners:  [2]string{"alice", "bob"},
	})
}

// driver is protocoltest.Driver over /ai-sdk.
type driver struct {
	srv    *reintest.Server
	tokens map[string]string
	mu     sync.Mutex
	// messages maps the run ids Send saw to the user message ids that
	// started them: the stop route names a run by its message.
	messages map[string]string
}

// httpError is a refused request.
type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("%d %s", e.status, e.body) }

func (d *driver) wire(owner string) wire { return wire{d.srv, d.tokens[owner]} }

// call sends a request; a non-2xx answer is an *httpError.
func (d *driver) call(ctx context.Context, owner, method, path string, body any) (*http.Response, error) {
	resp, err := d.wire(owner).do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, &httpError{resp.StatusCode, string(b)}
	}
	return resp, nil
}

// CreateSession names a new chat, as the SDK's chat does (a client-made
// id): the chat is created by its first message.
func (d *driver) CreateSession(context.Context, string) (string, error) {
	return id.New("chat_"), nil
}

// Send posts a user message and reads the run id from its stream's start;
// closing the stream leaves the run going.
func (d *driver) Send(ctx context.Context, owner, session, text string) (string, error) {
	msg := id.New("msg_")
	resp, err := d.call(ctx, owner, http.MethodPost, "/ai-sdk/chat", map[string]any{"id": session, "trigger": "submit-message", "messages": []any{userMessage(msg, text)}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	fr := frames{sc: bufio.NewScanner(resp.Body)}
	f, err := fr.next()
	if err != nil {
		return "", err
	}
	run, _ := f.chunk["messageId"].(string)
	if f.chunk["type"] != "start" || run == "" {
		return "", fmt.Errorf("the stream opened with %v", f.chunk)
	}
	d.mu.Lock()
	d.messages[run] = msg
	d.mu.Unlock()
	return run, nil
}

// Stop stops the run by its user message's id.
func (d *driver) Stop(ctx context.Context, owner, session, runID string) error {
	d.mu.Lock()
	msg, ok := d.messages[runID]
	d.mu.Unlock()
	if !ok {
		msg = runID
	}
	resp, err := d.call(ctx, owner, http.MethodPost, "/ai-sdk/chat/"+session+"/stop", map[string]any{"message_id": msg, "mode": "cancel"})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (d *driver) Note(ctx context.Context, owner, session, text string) error {
	resp, err := d.call(ctx, owner, http.MethodPost, "/ai-sdk/chat/"+session+"/notes", map[string]any{"text": text})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Answer posts the assistant message with the approval responded, as
// addToolApprovalResponse and sendMessage() do.
func (d *driver) Answer(ctx context.Context, owner, session, ref string, allow bool, denyMessage string) error {
	assistant := map[string]any{"id": "a", "role": "assistant", "parts": []any{map[string]any{
		"type": "tool-write_note", "toolCallId": ref, "state": "approval-responded",
		"approval": map[string]any{"id": ref, "approved": allow, "reason": denyMessage}}}}
	resp, err := d.call(ctx, owner, http.MethodPost, "/ai-sdk/chat", map[string]any{"id": session, "trigger": "submit-message", "messages": []any{assistant}})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Stream opens the chat's stream after cursor. The chat may not exist
// yet (its first message creates it): the request is sent at the first
// Next, which the scenarios call after sending.
func (d *driver) Stream(ctx context.Context, owner, session, cursor string, previews bool) (protocoltest.Stream, error) {
	if cursor == "" {
		cursor = "0"
	}
	ctx, cancel := context.WithCancel(ctx)
	return &stream{open: func() (*http.Response, error) {
		return d.call(ctx, owner, http.MethodGet, "/ai-sdk/chat/"+session+"/stream?after="+cursor, nil)
	}, cancel: cancel, previews: previews}, nil
}

// stream reads UI message stream chunks as scenario items.
type stream struct {
	open     func() (*http.Response, error)
	cancel   context.CancelFunc
	previews bool
	resp     *http.Response
	fr       frames
	text     map[string]string // open text parts' text so far
	// history: stop at the caught-up comment.
	history bool
}

func (s *stream) Next() (protocoltest.Item, error) {
	if s.resp == nil {
		resp, err := s.open()
		if err != nil {
			return protocoltest.Item{}, err
		}
		s.resp, s.fr, s.text = resp, frames{sc: bufio.NewScanner(resp.Body)}, map[string]string{}
	}
	for {
		f, err := s.fr.next()
		if err != nil {
			return protocoltest.Item{}, err
		}
		if f.caughtUp {
			if s.history {
				return protocoltest.Item{}, io.EOF
			}
			continue
		}
		if it, ok := s.item(f); ok {
			return it, nil
		}
	}
}

// item is a chunk as the scenarios see it (false: a chunk they do not
// see, a preview not asked for).
func (s *stream) item(f frame) (protocoltest.Item, bool) {
	c := f.chunk
	typ, _ := c["type"].(string)
	own := ""
	for _, k := range []string{"id", "toolCallId", "messageId"} {
		if v, ok := c[k].(string); ok {
			own = v
			break
		}
	}
	it := protocoltest.Item{ID: typ + "/" + own + "@" + f.id, Cursor: f.id, Kind: protocoltest.KindOther}
	switch typ {
	case "start":
		it.Kind = protocoltest.KindRunning
	case "text-delta":
		s.text[own] += c["delta"].(string)
		if !s.previews {
			return it, false
		}
		it.ID, it.Kind, it.Text = "", protocoltest.KindPreview, c["delta"].(string)
	case "text-end":
		it.ID, it.Kind, it.Text = own, protocoltest.KindText, s.text[own]
		delete(s.text, own)
	case "tool-approval-request":
		it.Kind, it.Refs = protocoltest.KindApproval, []string{c["approvalId"].(string)}
	case "finish":
		it.Kind = protocoltest.KindIdle
	}
	return it, true
}

func (s *stream) Close() error {
	s.cancel()
	if s.resp != nil {
		return s.resp.Body.Close()
	}
	return nil
}

// frame is one SSE frame: its id: line and its chunk, or the caught-up
// comment.
type frame struct {
	id       string
	chunk    map[string]any
	caughtUp bool
}

type frames struct{ sc *bufio.Scanner }

func (fr *frames) next() (frame, error) {
	var f frame
	for fr.sc.Scan() {
		line := fr.sc.Text()
		switch {
		case line == strings.TrimSpace(caughtUp):
			return frame{caughtUp: true}, nil
		case strings.HasPrefix(line, "id: "):
			f.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if data == "[DONE]" {
				continue
			}
			if err := json.Unmarshal([]byte(data), &f.chunk); err != nil {
				return frame{}, err
			}
			return f, nil
		}
	}
	if err := fr.sc.Err(); err != nil {
		return frame{}, err
	}
	return frame{}, io.EOF
}

// caughtUp is the comment a cursor stream writes once it has sent what
// the log held.
const caughtUp = ": caught-up\n\n"

// History is the chat's stream from the log's start, up to where it has
// caught up.
func (d *driver) History(ctx context.Context, owner, session string) ([]protocoltest.Item, error) {
	st, err := d.Stream(ctx, owner, session, "0", false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	st.(*stream).history = true
	var out []protocoltest.Item
	for {
		it, err := st.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
}

// Get reads the chat: its stream's answer (204 when idle).
func (d *driver) Get(ctx context.Context, owner, session string) error {
	resp, err := d.call(ctx, owner, http.MethodGet, "/ai-sdk/chat/"+session+"/stream", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (d *driver) NotFound(err error) bool {
	var e *httpError
	return errors.As(err, &e) && e.status == http.StatusNotFound && strings.Contains(e.body, `"code":"not_found"`)
}
