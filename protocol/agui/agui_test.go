package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/agui"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

func newServer(t *testing.T) *reintest.Server {
	return reintest.NewServer(t, reintest.ServerOptions{
		Script: protocoltest.WriteScript(t),
		Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{agui.Mount(svc, agui.Options{})}
		},
	})
}

// TestScenarios runs the scenarios every adapter passes, speaking AG-UI
// from Go: RunAgentInput POSTs, the cancel, notes and thread stream routes.
func TestScenarios(t *testing.T) {
	srv := newServer(t)
	protocoltest.Run(t, protocoltest.Env{
		Driver:  &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice", "bob": "tok-bob"}, runs: map[string]string{}},
		Service: srv.Service,
		Owners:  [2]string{"alice", "bob"},
	})
}

// driver is protocoltest.Driver over AG-UI's wire.
type driver struct {
	srv    *reintest.Server
	tokens map[string]string
	mu     sync.Mutex
	runs   map[string]string // Rein run id → the client's runId
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *driver) do(ctx context.Context, owner, method, path string, body any, hdr map[string]string) (*http.Response, error) {
	var rd io.Reader
	if raw, ok := body.(string); ok {
		rd = strings.NewReader(raw)
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.srv.URL+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+d.tokens[owner])
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := d.srv.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return nil, &httpError{status: res.StatusCode, body: string(b)}
	}
	return res, nil
}

// CreateSession: AG-UI has no verb that only creates a thread (its first
// run does), so the thread is made through the service.
func (d *driver) CreateSession(ctx context.Context, owner string) (string, error) {
	id := "thread-" + newID()
	_, err := d.srv.Service.CreateSession(ctx, owner, sessions.CreateSessionRequest{ID: id, Agent: "default"})
	return id, err
}

// post sends a RunAgentInput and returns the stream's first event's Rein
// run id; the stream is closed there (a disconnect never stops a run).
func (d *driver) post(ctx context.Context, owner string, in map[string]any) (string, error) {
	res, err := d.do(ctx, owner, http.MethodPost, "/ag-ui/default", in, map[string]string{"Accept": "text/event-stream"})
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	st := &stream{body: res.Body, sc: bufio.NewScanner(res.Body), previews: true}
	f, err := st.frame()
	if err != nil {
		return "", err
	}
	if f.data["type"] != "RUN_STARTED" {
		return "", fmt.Errorf("first event %v", f.data)
	}
	md, _ := f.data["metadata"].(map[string]any)
	run, _ := md["reinRunId"].(string)
	return run, nil
}

func (d *driver) Send(ctx context.Context, owner, session, text string) (string, error) {
	runID := newID()
	run, err := d.post(ctx, owner, map[string]any{"threadId": session, "runId": runID,
		"messages": []any{map[string]any{"id": newID(), "role": "user", "content": text}}})
	if err == nil {
		d.mu.Lock()
		d.runs[run] = runID
		d.mu.Unlock()
	}
	return run, err
}

// Stop is the cancel route, by the client's runId of the run.
func (d *driver) Stop(ctx context.Context, owner, session, runID string) error {
	d.mu.Lock()
	client, ok := d.runs[runID]
	d.mu.Unlock()
	if !ok {
		client = runID
	}
	res, err := d.do(ctx, owner, http.MethodPost, "/ag-ui/default/threads/"+session+"/runs/"+client+"/cancel", nil, nil)
	if err != nil {
		return err
	}
	var out struct{ Accepted bool }
	err = json.NewDecoder(res.Body).Decode(&out)
	res.Body.Close()
	if err == nil && !out.Accepted && ok {
		err = fmt.Errorf("cancel of %s not accepted", client)
	}
	return err
}

func (d *driver) Note(ctx context.Context, owner, session, text string) error {
	res, err := d.do(ctx, owner, http.MethodPost, "/ag-ui/default/threads/"+session+"/notes", map[string]any{"text": text}, nil)
	if err == nil {
		res.Body.Close()
	}
	return err
}

// Answer is a resume[] entry answering the interrupt ref.
func (d *driver) Answer(ctx context.Context, owner, session, ref string, allow bool, denyMessage string) error {
	_, err := d.post(ctx, owner, map[string]any{"threadId": session, "runId": newID(), "messages": []any{},
		"resume": []any{map[string]any{"interruptId": ref, "status": "resolved", "payload": map[string]any{"approved": allow, "message": denyMessage}}}})
	return err
}

func (d *driver) Stream(ctx context.Context, owner, session, cursor string, previews bool) (protocoltest.Stream, error) {
	return d.open(ctx, owner, session, cursor, previews, true)
}

func (d *driver) open(ctx context.Context, owner, session, cursor string, previews, follow bool) (*stream, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("after", cursor)
	}
	if !follow {
		q.Set("follow", "false")
	}
	res, err := d.do(ctx, owner, http.MethodGet, "/ag-ui/default/threads/"+session+"/stream?"+q.Encode(), nil, nil)
	if err != nil {
		return nil, err
	}
	return &stream{body: res.Body, sc: bufio.NewScanner(res.Body), previews: previews}, nil
}

func (d *driver) History(ctx context.Context, owner, session string) ([]protocoltest.Item, error) {
	st, err := d.open(ctx, owner, session, "", false, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []protocoltest.Item
	for {
		it, err := st.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
}

func (d *driver) Get(ctx context.Context, owner, session string) error {
	_, err := d.History(ctx, owner, session)
	return err
}

func (d *driver) NotFound(err error) bool {
	he, ok := err.(*httpError)
	return ok && he.status == http.StatusNotFound && strings.Contains(he.body, `"code":"not_found"`)
}

type frame struct {
	id   string
	data map[string]any
}

type stream struct {
	body     io.ReadCloser
	sc       *bufio.Scanner
	previews bool
	text     map[string]string
}

func (s *stream) frame() (frame, error) {
	var f frame
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if f.data != nil {
				return f, nil
			}
		case strings.HasPrefix(line, "id: "):
			f.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &f.data); err != nil {
				return f, err
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		return f, err
	}
	return f, io.EOF
}

// Next maps AG-UI events onto the scenarios' kinds; frames that restate
// what a resumed stream is inside of (reinReopened) are not new items.
func (s *stream) Next() (protocoltest.Item, error) {
	if s.text == nil {
		s.text = map[string]string{}
	}
	for {
		f, err := s.frame()
		if err != nil {
			return protocoltest.Item{}, err
		}
		md, _ := f.data["metadata"].(map[string]any)
		if md["reinReopened"] == true {
			continue
		}
		typ, _ := f.data["type"].(string)
		it := protocoltest.Item{Cursor: f.id, Kind: protocoltest.KindOther}
		ref := ""
		for _, k := range []string{"messageId", "toolCallId", "stepName", "runId"} {
			if v, ok := f.data[k].(string); ok {
				ref = v
				break
			}
		}
		it.ID = typ + "/" + ref + "@" + f.id
		switch typ {
		case "RUN_STARTED":
			it.Kind = protocoltest.KindRunning
		case "TEXT_MESSAGE_CONTENT":
			s.text[ref] += f.data["delta"].(string)
			if !s.previews {
				continue
			}
			it.Kind, it.Text, it.ID = protocoltest.KindPreview, f.data["delta"].(string), ""
		case "TEXT_MESSAGE_END":
			it.Kind, it.Text = protocoltest.KindText, s.text[ref]
		case "RUN_ERROR":
			it.Kind = protocoltest.KindIdle
		case "RUN_FINISHED":
			it.Kind = protocoltest.KindIdle
			if o, _ := f.data["outcome"].(map[string]any); o["type"] == "interrupt" {
				it.Kind = protocoltest.KindApproval
				for _, i := range o["interrupts"].([]any) {
					it.Refs = append(it.Refs, i.(map[string]any)["id"].(string))
				}
			}
		}
		return it, nil
	}
}

func (s *stream) Close() error { return s.body.Close() }

// TestNodeSDK drives the adapter with the official AG-UI client
// (@ag-ui/client, pinned in testdata/node with a lockfile) under node
// --test: a run's events through HttpAgent's verifier, an interrupt
// answered with resume[], the cancel route before the run's POST, and the
// thread stream resumed by Last-Event-ID. REIN_REQUIRE_NODE makes a
// missing node a failure (CI).
func TestNodeSDK(t *testing.T) {
	protocoltest.RunNode(t, "testdata/node", 4, func() []string {
		srv := newServer(t)
		return []string{"REIN_URL=" + srv.URL, "REIN_TOKEN=tok-alice"}
	})
}

// TestBadInput: a malformed RunAgentInput is an HTTP error with a
// RUN_ERROR-shaped body naming the field, and nothing is applied (the
// thread is not even created); an unknown agent is not found.
func TestBadInput(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}, runs: map[string]string{}}
	ctx := context.Background()
	user := func(content string) string { return `[{"id":"m1","role":"user","content":` + content + `}]` }
	for _, tc := range []struct {
		name, path, body string
		status           int
		code, param      string
	}{
		{"not json", "/ag-ui/default", `{`, 400, "invalid_argument", "body"},
		{"no threadId", "/ag-ui/default", `{"runId":"r","messages":` + user(`"hi"`) + `}`, 400, "invalid_argument", "threadId"},
		{"no runId", "/ag-ui/default", `{"threadId":"T","messages":` + user(`"hi"`) + `}`, 400, "invalid_argument", "runId"},
		{"bad threadId", "/ag-ui/default", `{"threadId":"a b","runId":"r","messages":` + user(`"hi"`) + `}`, 400, "invalid_argument", "threadId"},
		{"no messages", "/ag-ui/default", `{"threadId":"T","runId":"r","messages":[]}`, 400, "invalid_argument", "messages"},
		{"last not user", "/ag-ui/default", `{"threadId":"T","runId":"r","messages":[{"id":"a","role":"assistant","content":"x"}]}`, 400, "invalid_argument", "messages[0].role"},
		{"empty text", "/ag-ui/default", `{"threadId":"T","runId":"r","messages":` + user(`"  "`) + `}`, 400, "invalid_argument", "messages[0].content"},
		{"image part", "/ag-ui/default", `{"threadId":"T","runId":"r","messages":` + user(`[{"type":"image","url":"x"}]`) + `}`, 400, "invalid_argument", "messages[0].content[0]"},
		{"unknown agent", "/ag-ui/nobody", `{"threadId":"T","runId":"r","messages":` + user(`"hi"`) + `}`, 404, "not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.do(ctx, "alice", http.MethodPost, tc.path, tc.body, nil)
			he, ok := err.(*httpError)
			if !ok || he.status != tc.status {
				t.Fatalf("answer %v, want %d", err, tc.status)
			}
			var body struct{ Type, Code, Param, Message string }
			if err := json.Unmarshal([]byte(he.body), &body); err != nil || body.Type != "RUN_ERROR" || body.Code != tc.code || body.Param != tc.param || body.Message == "" {
				t.Fatalf("body %s, want RUN_ERROR %s param %q", he.body, tc.code, tc.param)
			}
			if _, err := srv.Service.Session(ctx, rein.SessionKey{Owner: "alice", ID: "T"}); !errors.Is(err, rein.ErrNotFound) {
				t.Fatalf("the thread exists after a refused request: %v", err)
			}
		})
	}
}

// TestResumeBadEntryAppliesNothing: a resume[] with one entry that answers
// no waiting call is refused whole: the good entry's call still waits.
func TestResumeBadEntryAppliesNothing(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}, runs: map[string]string{}}
	ctx := context.Background()
	thread, _ := d.CreateSession(ctx, "alice")
	st, err := d.Stream(ctx, "alice", thread, "", false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := d.Send(ctx, "alice", thread, "note the milk"); err != nil {
		t.Fatal(err)
	}
	var ap protocoltest.Item
	for ap.Kind != protocoltest.KindApproval {
		if ap, err = st.Next(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = d.post(ctx, "alice", map[string]any{"threadId": thread, "runId": "r2", "messages": []any{},
		"resume": []any{map[string]any{"interruptId": ap.Refs[0], "status": "resolved"}, map[string]any{"interruptId": "call_nope", "status": "resolved"}}})
	if he, ok := err.(*httpError); !ok || he.status != 400 || !strings.Contains(he.body, `"param":"resume[1].interruptId"`) {
		t.Fatalf("answer %v", err)
	}
	info, err := srv.Service.GetSession(ctx, rein.SessionKey{Owner: "alice", ID: thread})
	if err != nil || len(info.PendingConfirmations) != 1 || info.PendingConfirmations[0].ToolUseID != ap.Refs[0] {
		t.Fatalf("pending after a refused resume: %+v %v", info, err)
	}
}

// TestBusyThreadQueues: a run POSTed to a busy thread is queued, and its
// stream, opened at once with RUN_STARTED, waits for it and then shows it.
func TestBusyThreadQueues(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}, runs: map[string]string{}}
	ctx := context.Background()
	thread, _ := d.CreateSession(ctx, "alice")
	first, err := d.Send(ctx, "alice", thread, "long first")
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.do(ctx, "alice", http.MethodPost, "/ag-ui/default", map[string]any{"threadId": thread, "runId": "second",
		"messages": []any{map[string]any{"id": "m2", "role": "user", "content": "queued one"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	st := &stream{body: res.Body, sc: bufio.NewScanner(res.Body), previews: true}
	f, err := st.frame()
	if err != nil || f.data["type"] != "RUN_STARTED" || f.data["runId"] != "second" {
		t.Fatalf("first frame %v, %v", f.data, err)
	}
	second := f.data["metadata"].(map[string]any)["reinRunId"].(string)
	key := rein.SessionKey{Owner: "alice", ID: thread}
	if run, err := srv.Service.GetRun(ctx, key, second); err != nil || run.Status != rein.StatusQueued {
		t.Fatalf("second run %+v, %v; want QUEUED", run, err)
	}
	if err := d.Stop(ctx, "alice", thread, first); err != nil {
		t.Fatal(err)
	}
	var text string
	for {
		it, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended (%v) before the run did", err)
		}
		if it.Kind == protocoltest.KindText {
			text = it.Text
		}
		if it.Kind == protocoltest.KindIdle {
			break
		}
	}
	if text != "echo: queued one" {
		t.Fatalf("queued run's text %q", text)
	}
}
