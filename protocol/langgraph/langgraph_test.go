package langgraph_test

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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

func newServer(t *testing.T) *reintest.Server {
	return reintest.NewServer(t, reintest.ServerOptions{
		Script: protocoltest.WriteScript(t),
		Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{langgraph.Mount(svc, langgraph.Options{})}
		},
	})
}

// TestScenarios runs the scenarios every adapter passes, speaking the
// Agent Server API from Go as the SDK does: x-api-key, threads, runs,
// the thread stream and its Last-Event-ID, command.resume, notes.
func TestScenarios(t *testing.T) {
	srv := newServer(t)
	protocoltest.Run(t, protocoltest.Env{
		Driver:  &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice", "bob": "tok-bob"}},
		Service: srv.Service,
		Owners:  [2]string{"alice", "bob"},
	})
}

// driver is protocoltest.Driver over the Agent Server API's wire.
type driver struct {
	srv    *reintest.Server
	tokens map[string]string
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
	req, err := http.NewRequestWithContext(ctx, method, d.srv.URL+"/langgraph"+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("x-api-key", d.tokens[owner])
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

func (d *driver) json(ctx context.Context, owner, method, path string, body, out any) error {
	res, err := d.do(ctx, owner, method, path, body, nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(res.Body).Decode(out)
}

func (d *driver) CreateSession(ctx context.Context, owner string) (string, error) {
	var th struct {
		ThreadID string `json:"thread_id"`
	}
	err := d.json(ctx, owner, http.MethodPost, "/threads", map[string]any{"metadata": map[string]any{"graph_id": "default"}}, &th)
	return th.ThreadID, err
}

func (d *driver) Send(ctx context.Context, owner, session, text string) (string, error) {
	var run struct {
		RunID string `json:"run_id"`
	}
	err := d.json(ctx, owner, http.MethodPost, "/threads/"+session+"/runs", map[string]any{
		"assistant_id": "default", "input": map[string]any{"messages": []any{map[string]any{"type": "human", "content": text}}},
		"multitask_strategy": "enqueue"}, &run)
	return run.RunID, err
}

func (d *driver) Stop(ctx context.Context, owner, session, runID string) error {
	return d.json(ctx, owner, http.MethodPost, "/threads/"+session+"/runs/"+runID+"/cancel?wait=0&action=interrupt", nil, nil)
}

func (d *driver) Note(ctx context.Context, owner, session, text string) error {
	return d.json(ctx, owner, http.MethodPost, "/threads/"+session+"/notes", map[string]any{"text": text}, nil)
}

func (d *driver) Answer(ctx context.Context, owner, session, ref string, allow bool, denyMessage string) error {
	dec := map[string]any{"allow": allow}
	if !allow {
		dec["deny_message"] = denyMessage
	}
	return d.json(ctx, owner, http.MethodPost, "/threads/"+session+"/runs", map[string]any{
		"assistant_id": "default", "command": map[string]any{"resume": map[string]any{ref: dec}}}, nil)
}

func (d *driver) Get(ctx context.Context, owner, session string) error {
	return d.json(ctx, owner, http.MethodGet, "/threads/"+session, nil, nil)
}

func (d *driver) NotFound(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.status == http.StatusNotFound && strings.Contains(he.body, `"detail"`)
}

// History lists the thread's checkpoints oldest first, as items: the
// input, each model node (its ai message), each tools node, each run's end.
func (d *driver) History(ctx context.Context, owner, session string) ([]protocoltest.Item, error) {
	var states []struct {
		Values struct {
			Messages []map[string]any `json:"messages"`
		} `json:"values"`
		Checkpoint struct {
			CheckpointID string `json:"checkpoint_id"`
		} `json:"checkpoint"`
		Metadata struct {
			Source string `json:"source"`
			RunID  string `json:"run_id"`
		} `json:"metadata"`
		Next []string `json:"next"`
	}
	if err := d.json(ctx, owner, http.MethodPost, "/threads/"+session+"/history", map[string]any{"limit": 1000}, &states); err != nil {
		return nil, err
	}
	var out []protocoltest.Item
	prev := 0
	for i := len(states) - 1; i >= 0; i-- {
		s := states[i]
		msgs := s.Values.Messages
		added := msgs[min(prev, len(msgs)):]
		prev = len(msgs)
		it := protocoltest.Item{Cursor: s.Checkpoint.CheckpointID}
		switch {
		case s.Metadata.Source == "input":
			out = append(out, protocoltest.Item{Cursor: it.Cursor, Kind: protocoltest.KindOther, ID: "run:" + s.Metadata.RunID})
			it.Kind, it.ID = protocoltest.KindRunning, added[len(added)-1]["id"].(string)
		case len(added) == 0:
			it.Kind, it.ID = protocoltest.KindIdle, "end:"+s.Metadata.RunID
		case added[len(added)-1]["type"] == "tool":
			it.Kind, it.ID = protocoltest.KindOther, "tools:"+added[0]["id"].(string)
		default:
			m := added[len(added)-1]
			it.ID = m["id"].(string)
			it.Kind = protocoltest.KindOther
			if c, _ := m["content"].(string); c != "" {
				it.Kind, it.Text = protocoltest.KindText, c
			}
		}
		out = append(out, it)
	}
	return out, nil
}

// Stream is the thread's stream (threads.joinStream) after cursor.
func (d *driver) Stream(ctx context.Context, owner, session, cursor string, previews bool) (protocoltest.Stream, error) {
	q := url.Values{"stream_mode": {"updates"}}
	if previews {
		q.Add("stream_mode", "messages-tuple")
	}
	hdr := map[string]string{"Accept": "text/event-stream"}
	if cursor != "" {
		hdr["Last-Event-ID"] = cursor
	}
	ctx, cancel := context.WithCancel(ctx)
	res, err := d.do(ctx, owner, http.MethodGet, "/threads/"+session+"/stream?"+q.Encode(), nil, hdr)
	if err != nil {
		cancel()
		return nil, err
	}
	st := newStream(res)
	st.cancel = cancel
	return st, nil
}

func newStream(res *http.Response) *stream {
	return &stream{body: res.Body, cancel: func() {}, sc: bufio.NewScanner(res.Body)}
}

type stream struct {
	body    io.ReadCloser
	cancel  context.CancelFunc
	sc      *bufio.Scanner
	pending []protocoltest.Item
}

type sseFrame struct {
	id, event string
	data      json.RawMessage
}

func (s *stream) frame() (sseFrame, error) {
	var f sseFrame
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if f.event != "" {
				return f, nil
			}
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = json.RawMessage(line[6:])
		}
	}
	if err := s.sc.Err(); err != nil {
		return f, err
	}
	return f, io.EOF
}

func (s *stream) Next() (protocoltest.Item, error) {
	for len(s.pending) == 0 {
		f, err := s.frame()
		if err != nil {
			return protocoltest.Item{}, err
		}
		s.pending = items(f)
	}
	it := s.pending[0]
	s.pending = s.pending[1:]
	return it, nil
}

// items is what one part shows, as the scenarios see it.
func items(f sseFrame) []protocoltest.Item {
	switch f.event {
	case "end":
		var p struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal(f.data, &p)
		return []protocoltest.Item{{ID: "end:" + p.RunID, Cursor: f.id, Kind: protocoltest.KindIdle}}
	case "metadata":
		var p struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal(f.data, &p)
		return []protocoltest.Item{{ID: "run:" + p.RunID, Cursor: f.id, Kind: protocoltest.KindOther}}
	case "messages":
		var tuple []map[string]any
		_ = json.Unmarshal(f.data, &tuple)
		if len(tuple) == 2 && tuple[0]["type"] == "AIMessageChunk" {
			if c, _ := tuple[0]["content"].(string); c != "" {
				return []protocoltest.Item{{Cursor: f.id, Kind: protocoltest.KindPreview, Text: c}}
			}
		}
		return nil
	case "updates":
		var u map[string]json.RawMessage
		_ = json.Unmarshal(f.data, &u)
		var node struct {
			Messages []map[string]any `json:"messages"`
		}
		switch {
		case u["__interrupt__"] != nil:
			var ints []struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(u["__interrupt__"], &ints)
			it := protocoltest.Item{Cursor: f.id, Kind: protocoltest.KindApproval}
			for _, in := range ints {
				it.Refs = append(it.Refs, in.ID)
			}
			it.ID = "interrupt:" + strings.Join(it.Refs, ",")
			return []protocoltest.Item{it}
		case u["__start__"] != nil:
			_ = json.Unmarshal(u["__start__"], &node)
			return []protocoltest.Item{{ID: node.Messages[0]["id"].(string), Cursor: f.id, Kind: protocoltest.KindRunning}}
		case u["tools"] != nil:
			_ = json.Unmarshal(u["tools"], &node)
			return []protocoltest.Item{{ID: "tools:" + node.Messages[0]["id"].(string), Cursor: f.id, Kind: protocoltest.KindOther}}
		case u["model"] != nil:
			_ = json.Unmarshal(u["model"], &node)
			m := node.Messages[0]
			it := protocoltest.Item{ID: m["id"].(string), Cursor: f.id, Kind: protocoltest.KindOther}
			if c, _ := m["content"].(string); c != "" {
				it.Kind, it.Text = protocoltest.KindText, c
			}
			return []protocoltest.Item{it}
		}
	}
	return nil
}

func (s *stream) Close() error {
	s.cancel()
	return s.body.Close()
}

// TestNodeSDK drives the adapter with the official LangGraph SDK
// (@langchain/langgraph-sdk's Client, pinned in testdata/node with a
// lockfile) under node --test: assistants and threads; runs.stream in
// values, updates and messages-tuple read back by getState and
// getHistory; an interrupt answered by command.resume; a background run
// joined from its start and from any event, the multitask strategies and
// cancel; notes by input.inject and the notes route; the error shapes;
// and useStream's core (the SDK's StreamOrchestrator, which the React hook
// wraps): submit, an interrupt approved, a queued message, stop, and a
// reload mid-run rejoined without duplicated text. REIN_REQUIRE_NODE makes a missing node a failure (CI).
func TestNodeSDK(t *testing.T) {
	protocoltest.RunNode(t, "testdata/node", 8, func() []string {
		srv := newServer(t)
		return []string{"REIN_URL=" + srv.URL, "REIN_TOKEN=tok-alice"}
	})
}

// TestBadInput: every refused request answers LangGraph's {"detail"}
// shape with its status (422 for a body that does not validate, naming
// the field; 404 for an unknown thread, assistant or run; 409 for a busy
// thread under reject and a resume with nothing to resume), and nothing of
// it is applied: the thread's log is unchanged.
func TestBadInput(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}}
	ctx := context.Background()
	id, err := d.CreateSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := d.CreateSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Send(ctx, "alice", busy, "long busy"); err != nil {
		t.Fatal(err)
	}
	msg := `"input":{"messages":[{"type":"human","content":"hi"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		param                    string
	}{
		{"not json", "POST", "/threads/" + id + "/runs", `{`, 422, "body"},
		{"no assistant", "POST", "/threads/" + id + "/runs", `{` + msg + `}`, 422, "assistant_id"},
		{"unknown assistant", "POST", "/threads/" + id + "/runs", `{"assistant_id":"nobody",` + msg + `}`, 404, ""},
		{"unknown thread", "POST", "/threads/nope/runs", `{"assistant_id":"default",` + msg + `}`, 404, ""},
		{"no input", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default"}`, 422, "input"},
		{"input and resume", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default",` + msg + `,"command":{"resume":true}}`, 422, "input"},
		{"no human message", "POST", "/threads/" + id + "/runs/stream", `{"assistant_id":"default","input":{"messages":[{"type":"ai","content":"x"}]}}`, 422, "input.messages"},
		{"image part", "POST", "/threads/" + id + "/runs/wait", `{"assistant_id":"default","input":{"messages":[{"type":"human","content":[{"type":"image_url","image_url":"x"}]}]}}`, 422, "input.messages[0].content[0]"},
		{"bad strategy", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default","multitask_strategy":"maybe",` + msg + `}`, 422, "multitask_strategy"},
		{"bad stream mode", "POST", "/threads/" + id + "/runs/stream", `{"assistant_id":"default","stream_mode":["events"],` + msg + `}`, 422, "stream_mode"},
		{"goto", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default","command":{"goto":"model"}}`, 422, "command"},
		{"interrupt_before", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default","interrupt_before":["tools"],` + msg + `}`, 422, "interrupt_before"},
		{"a fork", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default","checkpoint_id":"1",` + msg + `}`, 422, "checkpoint_id"},
		{"nothing to resume", "POST", "/threads/" + id + "/runs", `{"assistant_id":"default","command":{"resume":true}}`, 409, ""},
		{"busy under reject", "POST", "/threads/" + busy + "/runs", `{"assistant_id":"default","multitask_strategy":"reject",` + msg + `}`, 409, ""},
		{"unknown run", "GET", "/threads/" + id + "/runs/run_nope", ``, 404, ""},
		{"cancel unknown run", "POST", "/threads/" + id + "/runs/run_nope/cancel", ``, 404, ""},
		{"bad history limit", "POST", "/threads/" + id + "/history", `{"limit":0}`, 422, "limit"},
		{"bad thread id", "POST", "/threads", `{"thread_id":"a b"}`, 422, "thread_id"},
		{"empty note", "POST", "/threads/" + id + "/notes", `{"text":""}`, 422, "text"},
		{"no route", "GET", "/store/items", ``, 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := rein.SessionKey{Owner: "alice", ID: id}
			_, before, _ := srv.Service.ReadEvents(ctx, key, 0, 1)
			var body any
			if tc.body != "" {
				body = tc.body
			}
			_, err := d.do(ctx, "alice", tc.method, tc.path, body, nil)
			he, ok := err.(*httpError)
			if !ok || he.status != tc.status {
				t.Fatalf("answer %v, want %d", err, tc.status)
			}
			var b struct{ Detail, Param string }
			if err := json.Unmarshal([]byte(he.body), &b); err != nil || b.Detail == "" || b.Param != tc.param {
				t.Fatalf("body %s, want a detail and param %q", he.body, tc.param)
			}
			if _, after, _ := srv.Service.ReadEvents(ctx, key, 0, 1); after != before {
				t.Fatalf("the thread's log grew from %d to %d events", before, after)
			}
		})
	}
	// The busy thread holds its one run: the refused message started none.
	runs, err := srv.Service.ListRuns(ctx, rein.SessionKey{Owner: "alice", ID: busy})
	if err != nil || len(runs) != 1 {
		t.Fatalf("busy thread's runs = %d (%v), want 1", len(runs), err)
	}
}

// TestCancelRollback: runs.cancel with action rollback cancels exactly
// that run and drops its turn from the thread's state (and, as a
// when_busy rollback, from every later model request); the run reads
// interrupted; a second rollback of it is a no-op; a queued run rolled
// back is cancelled without ever joining the state.
func TestCancelRollback(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.CreateSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	key := rein.SessionKey{Owner: "alice", ID: id}
	if _, err := d.Send(ctx, "alice", id, "hello"); err != nil {
		t.Fatal(err)
	}
	long, err := d.Send(ctx, "alice", id, "long rollback")
	if err != nil {
		t.Fatal(err)
	}
	queued, err := d.Send(ctx, "alice", id, "queued rollback")
	if err != nil {
		t.Fatal(err)
	}
	// The long run is asleep in its tool: its turn is in the state.
	for {
		info, err := srv.Service.GetSession(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, _ := srv.Service.ReadEvents(ctx, key, 0, 1000)
		if slices.ContainsFunc(evs, func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == long }) {
			break
		}
		if err := srv.Service.WaitEvents(ctx, key, info.LastSeq); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range []string{queued, long} {
		if err := d.json(ctx, "alice", http.MethodPost, "/threads/"+id+"/runs/"+run+"/cancel?wait=1&action=rollback", nil, nil); err != nil {
			t.Fatalf("rollback %s: %v", run, err)
		}
	}
	out, err := srv.Service.WaitRun(ctx, key, long)
	if err != nil || out.Status != rein.StatusCancelled || !out.RolledBack {
		t.Fatalf("long run ended %+v (%v), want CANCELLED and rolled back", out, err)
	}
	if out, err := srv.Service.WaitRun(ctx, key, queued); err != nil || out.Status != rein.StatusCancelled {
		t.Fatalf("queued run ended %+v (%v), want CANCELLED", out, err)
	}
	var state struct {
		Values struct {
			Messages []struct{ Type, Content string } `json:"messages"`
		} `json:"values"`
	}
	if err := d.json(ctx, "alice", http.MethodGet, "/threads/"+id+"/state", nil, &state); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range state.Values.Messages {
		got = append(got, m.Type+": "+m.Content)
	}
	if want := []string{"human: hello", "ai: echo: hello"}; !slices.Equal(got, want) {
		t.Fatalf("state messages %q, want %q", got, want)
	}
	var run struct{ Status string }
	if err := d.json(ctx, "alice", http.MethodGet, "/threads/"+id+"/runs/"+long, nil, &run); err != nil || run.Status != "interrupted" {
		t.Fatalf("run %+v (%v), want interrupted", run, err)
	}
	res, err := srv.Service.RollbackRun(ctx, key, long)
	if err != nil || res.Accepted {
		t.Fatalf("a second rollback: %+v (%v), want not accepted", res, err)
	}
}

// TestJoinStreamAnywhere: a finished run with a tool call, an approval and
// two steps, joined after each of its parts' ids, gives exactly the parts
// after that id — the parts a fold makes lazily (a step's model node ends
// when the event after its calls is read) carry the same ids live and
// replayed.
func TestJoinStreamAnywhere(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := d.CreateSession(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	run, err := d.Send(ctx, "alice", id, "note the tea")
	if err != nil {
		t.Fatal(err)
	}
	key := rein.SessionKey{Owner: "alice", ID: id}
	read := func(last string) []sseFrame {
		t.Helper()
		hdr := map[string]string{"Last-Event-ID": last}
		res, err := d.do(ctx, "alice", http.MethodGet, "/threads/"+id+"/runs/"+run+"/stream?stream_mode=values&stream_mode=updates&stream_mode=messages-tuple", nil, hdr)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		st := newStream(res)
		var out []sseFrame
		for {
			f, err := st.frame()
			if err != nil {
				return out
			}
			out = append(out, f)
		}
	}
	// Live up to the interrupt, then answered, then whole.
	live := read("-1")
	if last := live[len(live)-1]; last.event != "values" || !strings.Contains(string(last.data), "__interrupt__") {
		t.Fatalf("the live stream ended with %s %s, want the interrupt", last.event, last.data)
	}
	info, err := srv.Service.GetSession(ctx, key)
	if err != nil || len(info.PendingConfirmations) != 1 {
		t.Fatalf("pending = %v (%v)", info, err)
	}
	if _, err := srv.Service.ConfirmTool(ctx, key, sessions.ConfirmRequest{ToolUseID: info.PendingConfirmations[0].ToolUseID, Allow: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Service.WaitRun(ctx, key, run); err != nil {
		t.Fatal(err)
	}
	all := read("-1")
	show := func(fs []sseFrame) []string {
		var out []string
		for _, f := range fs {
			if f.event != "metadata" {
				out = append(out, f.id+" "+f.event+" "+string(f.data))
			}
		}
		return out
	}
	// What the live stream showed before its interrupt is the replay's
	// beginning, ids included.
	if got, want := show(live[:len(live)-2]), show(all[:len(live)-2]); !slices.Equal(got, want) {
		t.Fatalf("live %q\nreplay %q", got, want)
	}
	for i, f := range all {
		if i+1 < len(all) && all[i+1].id == f.id {
			continue // parts of one event: resume after the last
		}
		if got, want := show(read(f.id)), show(all[i+1:]); !slices.Equal(got, want) {
			t.Fatalf("joined after %s: %q\nwant %q", f.id, got, want)
		}
	}
}

// TestMultitaskStrategies: on a busy thread, interrupt stops the running
// run cooperatively (it reads interrupted, its reply kept) and rollback
// cancels it and drops its turn from the state; either way the new run
// runs next.
func TestMultitaskStrategies(t *testing.T) {
	srv := newServer(t)
	d := &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, strategy := range []string{"interrupt", "rollback"} {
		t.Run(strategy, func(t *testing.T) {
			id, err := d.CreateSession(ctx, "alice")
			if err != nil {
				t.Fatal(err)
			}
			key := rein.SessionKey{Owner: "alice", ID: id}
			long, err := d.Send(ctx, "alice", id, "long "+strategy)
			if err != nil {
				t.Fatal(err)
			}
			for {
				evs, last, err := srv.Service.ReadEvents(ctx, key, 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				if slices.ContainsFunc(evs, func(e rein.Event) bool { return e.Type == rein.EventToolUse }) {
					break
				}
				if err := srv.Service.WaitEvents(ctx, key, last); err != nil {
					t.Fatal(err)
				}
			}
			var values struct {
				Messages []struct{ Type, Content string } `json:"messages"`
			}
			if err := d.json(ctx, "alice", http.MethodPost, "/threads/"+id+"/runs/wait", map[string]any{
				"assistant_id": "default", "multitask_strategy": strategy,
				"input": map[string]any{"messages": []any{map[string]any{"type": "human", "content": "next"}}}}, &values); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range values.Messages {
				got = append(got, m.Type+": "+m.Content)
			}
			// Interrupted, the run's turn stays: its call's synthetic error
			// result, and its reply (the step's text, not repeated).
			want := []string{"human: long interrupt", "ai: sleeping for an hour", "tool: tool call did not complete: the run was stopped", "human: next", "ai: echo: next"}
			if strategy == "rollback" {
				want = []string{"human: next", "ai: echo: next"}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("values %q, want %q", got, want)
			}
			var run struct{ Status string }
			if err := d.json(ctx, "alice", http.MethodGet, "/threads/"+id+"/runs/"+long, nil, &run); err != nil || run.Status != "interrupted" {
				t.Fatalf("the stopped run %+v (%v), want interrupted", run, err)
			}
		})
	}
}
