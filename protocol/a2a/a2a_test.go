package a2a_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	a2aproto "github.com/reinhq/rein/protocol/a2a"
	"github.com/reinhq/rein/protocol/protocoltest"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/postgres"
	"github.com/reinhq/rein/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait of a test, so a bug hangs nothing.
const testTimeout = 20 * time.Second

// Tokens of the test server's two owners.
const (
	aliceToken = "tok-alice"
	bobToken   = "tok-bob"
)

// gate is a tool that holds its run WORKING until the test opens it.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	entered chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan struct{}, 16)} }

func (g *gate) Spec() tool.Spec {
	return tool.Spec{Name: "gate", Description: "waits for the test", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (g *gate) Call(ctx context.Context, _ tool.Call) (tool.Result, error) {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return tool.Result{Output: "opened"}, nil
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
}

// Open lets every held run go on.
func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// stack is the A2A handler over a real sessions service, behind the
// server's bearer authentication.
type stack struct {
	url  string
	svc  *sessions.Service
	gate *gate
}

func newStack(t *testing.T) *stack {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() }) // after the stack's own cleanup
	return newInstance(t, st, "")
}

// newInstance is a stack over a store that other instances may share;
// instance names it among them ("": the service's default).
func newInstance(t *testing.T, st store.Store, instance string) *stack {
	t.Helper()
	g := newGate()
	svc, err := reintest.ServiceWithTools("testdata/script.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.Instance = t.TempDir(), instance
	}, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	auth, err := server.BearerAuth(map[string]string{aliceToken: "alice", bobToken: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	h := a2aproto.New(a2aproto.Options{Service: svc, Owner: func(r *http.Request) (string, bool) {
		return auth(r.Header.Get("Authorization"))
	}})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		g.Open()
		_ = svc.Close()
		ts.Close()
	})
	return &stack{url: ts.URL, svc: svc, gate: g}
}

// noSessions checks that the owner has no session: rejected requests
// applied nothing.
func (s *stack) noSessions(t *testing.T, owner string) {
	t.Helper()
	if list, err := s.svc.ListSessions(context.Background(), owner); err != nil || len(list) != 0 {
		t.Errorf("%s has %d sessions after rejected requests (%v), want none", owner, len(list), err)
	}
}

// client is the official client for the default agent, over one binding,
// presenting token through the card's security scheme.
func (s *stack) client(t *testing.T, binding a2a.TransportProtocol, token string) (*a2aclient.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	card, err := agentcard.DefaultResolver.Resolve(ctx, s.url+"/a2a/default")
	if err != nil {
		t.Fatal(err)
	}
	creds := a2aclient.NewInMemoryCredentialsStore()
	creds.Set("test", "bearer", a2aclient.AuthCredential(token))
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{binding}}),
		a2aclient.WithCallInterceptors(&a2aclient.AuthInterceptor{Service: creds}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c, a2aclient.AttachSessionID(ctx, "test")
}

func userText(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
}

// inContext is a user message in an existing context.
func inContext(text, contextID string) *a2a.Message {
	m := userText(text)
	m.ContextID = contextID
	return m
}

func send(t *testing.T, c *a2aclient.Client, ctx context.Context, msg *a2a.Message, immediately bool) *a2a.Task {
	t.Helper()
	req := &a2a.SendMessageRequest{Message: msg}
	if immediately {
		req.Config = &a2a.SendMessageConfig{ReturnImmediately: true}
	}
	res, err := c.SendMessage(ctx, req)
	if err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", res)
	}
	return task
}

func replyText(t *testing.T, task *a2a.Task) string {
	t.Helper()
	if len(task.Artifacts) != 1 || len(task.Artifacts[0].Parts) != 1 {
		t.Fatalf("task %s has artifacts %+v, want one reply", task.ID, task.Artifacts)
	}
	return task.Artifacts[0].Parts[0].Text()
}

// seqOf is the log position Rein puts on every rendered item.
func seqOf(t *testing.T, ev a2a.Event) int64 {
	t.Helper()
	var meta map[string]any
	switch v := ev.(type) {
	case *a2a.Task:
		meta = v.Metadata
	case *a2a.TaskStatusUpdateEvent:
		meta = v.Metadata
	case *a2a.TaskArtifactUpdateEvent:
		meta = v.Metadata
	default:
		t.Fatalf("unexpected stream item %T", ev)
	}
	n, ok := meta["rein_seq"].(float64)
	if !ok {
		t.Fatalf("stream item %T without rein_seq: %v", ev, meta)
	}
	return int64(n)
}

// collect reads a stream to its end.
func collect(t *testing.T, events func(yield func(a2a.Event, error) bool)) []a2a.Event {
	t.Helper()
	var out []a2a.Event
	for ev, err := range events {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

// lastState is the state the last status update (or task) of a stream says.
func lastState(evs []a2a.Event) a2a.TaskState {
	for i := len(evs) - 1; i >= 0; i-- {
		switch v := evs[i].(type) {
		case *a2a.TaskStatusUpdateEvent:
			return v.Status.State
		case *a2a.Task:
			return v.Status.State
		}
	}
	return ""
}

// waitUntil subscribes to the task and reads until an update satisfies ok.
func waitUntil(t *testing.T, c *a2aclient.Client, ctx context.Context, id a2a.TaskID, ok func(a2a.Event) bool) {
	t.Helper()
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			t.Fatalf("subscribe %s: %v", id, err)
		}
		if ok(ev) {
			return
		}
	}
	t.Fatalf("the stream of %s ended before the awaited update", id)
}

func isState(s a2a.TaskState) func(a2a.Event) bool {
	return func(ev a2a.Event) bool {
		u, ok := ev.(*a2a.TaskStatusUpdateEvent)
		return ok && u.Status.State == s
	}
}

// toolUse reports an update announcing a tool call.
func toolUse(ev a2a.Event) bool { return hasData(ev, "tool_use") }

// hasData reports a status update whose message has a data part with key.
func hasData(ev a2a.Event, key string) bool {
	u, ok := ev.(*a2a.TaskStatusUpdateEvent)
	if !ok || u.Status.Message == nil {
		return false
	}
	for _, p := range u.Status.Message.Parts {
		if m, ok := p.Data().(map[string]any); ok && m[key] != nil {
			return true
		}
	}
	return false
}

var bindings = []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON}

// forBindings runs f once per binding, each on a fresh server.
func forBindings(t *testing.T, f func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, binding a2a.TransportProtocol)) {
	for _, b := range bindings {
		t.Run(string(b), func(t *testing.T) {
			s := newStack(t)
			c, ctx := s.client(t, b, aliceToken)
			f(t, s, c, ctx, b)
		})
	}
}

func TestAgentCard(t *testing.T) {
	s := newStack(t)
	for _, path := range []string{"/a2a/default/.well-known/agent-card.json", "/.well-known/agent-card.json"} {
		resp, err := http.Get(s.url + path) // no token: cards are public
		if err != nil {
			t.Fatal(err)
		}
		var card a2a.AgentCard
		err = json.NewDecoder(resp.Body).Decode(&card)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		if card.Name != "default" || !card.Capabilities.Streaming || card.Capabilities.PushNotifications {
			t.Errorf("%s: card %+v", path, card)
		}
		want := map[a2a.TransportProtocol]string{
			a2a.TransportProtocolJSONRPC:  s.url + "/a2a/default",
			a2a.TransportProtocolHTTPJSON: s.url + "/a2a/default/rest",
		}
		if len(card.SupportedInterfaces) != 2 {
			t.Fatalf("%s: interfaces %+v", path, card.SupportedInterfaces)
		}
		for _, in := range card.SupportedInterfaces {
			if in.URL != want[in.ProtocolBinding] || in.ProtocolVersion != "1.0" {
				t.Errorf("%s: interface %+v", path, in)
			}
		}
		if _, ok := card.SecuritySchemes["bearer"].(a2a.HTTPAuthSecurityScheme); !ok || len(card.SecurityRequirements) != 1 {
			t.Errorf("%s: security %+v %+v", path, card.SecuritySchemes, card.SecurityRequirements)
		}
	}
	for path, want := range map[string]int{
		"/a2a/nobody/.well-known/agent-card.json": http.StatusNotFound,
		"/a2a/default/rest/tasks":                 http.StatusUnauthorized,
	} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestSendBlockingAndGet(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		task := send(t, c, ctx, userText("hello"), false)
		if task.Status.State != a2a.TaskStateCompleted || task.ContextID == "" {
			t.Fatalf("blocking send answered %s in %q", task.Status.State, task.ContextID)
		}
		if got := replyText(t, task); got != "echo: hello" {
			t.Errorf("reply %q", got)
		}
		if len(task.History) != 2 || task.History[0].Role != a2a.MessageRoleUser || task.History[1].Role != a2a.MessageRoleAgent {
			t.Errorf("history %+v", task.History)
		}
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != a2a.TaskStateCompleted || replyText(t, got) != "echo: hello" {
			t.Errorf("GetTask %+v", got)
		}
		// The task is the run: the native API finds it by the same ids.
		run, err := s.svc.GetRun(ctx, keyOf("alice", task.ContextID), string(task.ID))
		if err != nil || run.Status != "COMPLETED" {
			t.Errorf("native run %+v, %v", run, err)
		}
		// The same message id again is the same task (client_id): nothing
		// new starts.
		msg := inContext("once", task.ContextID)
		first := send(t, c, ctx, msg, false)
		again := send(t, c, ctx, msg, false)
		if again.ID != first.ID {
			t.Errorf("a repeated message id started task %s after %s", again.ID, first.ID)
		}
	})
}

func TestClientChosenContext(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		first := send(t, c, ctx, inContext("one", "my-chat.1"), false)
		second := send(t, c, ctx, inContext("two", "my-chat.1"), false)
		if first.ContextID != "my-chat.1" || second.ContextID != "my-chat.1" || first.ID == second.ID {
			t.Fatalf("tasks %s in %q and %s in %q, want two tasks in my-chat.1", first.ID, first.ContextID, second.ID, second.ContextID)
		}
		// The context is the session: the native API has it, both runs in it.
		runs, err := s.svc.ListRuns(ctx, keyOf("alice", "my-chat.1"))
		if err != nil || len(runs) != 2 {
			t.Errorf("native runs of my-chat.1: %d %v", len(runs), err)
		}
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: inContext("bad", "no spaces allowed")}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Errorf("an invalid context id: %v", err)
		}
	})
}

func TestSendNonBlockingThenSubscribe(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		task := send(t, c, ctx, userText("gate 1"), true)
		if task.Status.State != a2a.TaskStateSubmitted && task.Status.State != a2a.TaskStateWorking {
			t.Fatalf("returnImmediately answered %s", task.Status.State)
		}
		waitUntil(t, c, ctx, task.ID, toolUse)
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
		if err != nil || got.Status.State != a2a.TaskStateWorking {
			t.Fatalf("GetTask of a held task: %+v %v", got, err)
		}
		s.gate.Open()
		evs := collect(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		if lastState(evs) != a2a.TaskStateCompleted {
			t.Fatalf("subscription ended in %s", lastState(evs))
		}
	})
}

func TestStream(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		evs := collect(t, c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userText("stream it")}))
		if len(evs) < 4 {
			t.Fatalf("stream of %d items: %+v", len(evs), evs)
		}
		first, ok := evs[0].(*a2a.Task)
		if !ok || first.Status.State != a2a.TaskStateSubmitted {
			t.Fatalf("first item %T %+v, want the SUBMITTED task", evs[0], evs[0])
		}
		var deltas strings.Builder
		var reply string
		for _, ev := range evs {
			switch v := ev.(type) {
			case *a2a.TaskStatusUpdateEvent:
				if v.TaskID != first.ID || v.ContextID != first.ContextID {
					t.Errorf("update of %s/%s in the stream of %s", v.ContextID, v.TaskID, first.ID)
				}
				if v.Status.Message != nil && v.Status.State == a2a.TaskStateWorking {
					for _, p := range v.Status.Message.Parts {
						deltas.WriteString(p.Text())
					}
				}
			case *a2a.TaskArtifactUpdateEvent:
				reply = v.Artifact.Parts[0].Text()
			}
		}
		const want = "0123456789abcdefghijklmnopqrstuvwxyz"
		if deltas.String() != want || reply != want {
			t.Errorf("streamed %q, reply %q, want %q", deltas.String(), reply, want)
		}
		if lastState(evs) != a2a.TaskStateCompleted {
			t.Errorf("stream ended in %s", lastState(evs))
		}
		// What the stream showed, a later GetTask says.
		got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: first.ID})
		if err != nil || replyText(t, got) != want {
			t.Errorf("GetTask after the stream: %+v %v", got, err)
		}
	})
}

func TestSubscribeMidRunAndAfterEnd(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		task := send(t, c, ctx, userText("gate"), true)
		// Mid-run: read the subscription while the run is held in the
		// gate, then let it finish and read on.
		var mid []a2a.Event
		opened := false
		for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
			if err != nil {
				t.Fatal(err)
			}
			mid = append(mid, ev)
			if toolUse(ev) && !opened {
				opened = true
				s.gate.Open()
			}
		}
		after := collect(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		again := collect(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		seqs := func(evs []a2a.Event) []int64 {
			var out []int64
			for _, ev := range evs {
				out = append(out, seqOf(t, ev))
			}
			return out
		}
		m, a, g := seqs(mid), seqs(after), seqs(again)
		if !slices.IsSorted(m) || len(slices.Compact(slices.Clone(m))) != len(m) {
			t.Errorf("mid-run subscription repeats or reorders: %v", m)
		}
		if !slices.Equal(m, a) || !slices.Equal(a, g) {
			t.Errorf("subscriptions differ:\nmid   %v\nafter %v\nagain %v", m, a, g)
		}
		if _, ok := after[0].(*a2a.Task); !ok || lastState(after) != a2a.TaskStateCompleted {
			t.Errorf("a subscription after the end: first %T, last state %s", after[0], lastState(after))
		}
	})
}

// confirmations reads the calls an INPUT_REQUIRED status lists.
func confirmationIDs(t *testing.T, task *a2a.Task) []string {
	t.Helper()
	if task.Status.State != a2a.TaskStateInputRequired || task.Status.Message == nil {
		t.Fatalf("task %s is %s, want INPUT_REQUIRED with a message", task.ID, task.Status.State)
	}
	var ids []string
	for _, p := range task.Status.Message.Parts {
		m, ok := p.Data().(map[string]any)
		if !ok {
			continue
		}
		list, _ := m["confirmations"].([]any)
		for _, item := range list {
			c, _ := item.(map[string]any)
			if c["name"] != "write_note" {
				t.Errorf("confirmation %v", c)
			}
			ids = append(ids, c["tool_use_id"].(string))
		}
	}
	return ids
}

func answer(task *a2a.Task, id string, allow bool, deny string) *a2a.Message {
	c := map[string]any{"tool_use_id": id, "allow": allow}
	if deny != "" {
		c["deny_message"] = deny
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"confirmations": []any{c}}))
	msg.TaskID, msg.ContextID = task.ID, task.ContextID
	return msg
}

func TestInputRequiredAnsweredByMessage(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		// Allowed.
		task := send(t, c, ctx, userText("note alpha"), false)
		ids := confirmationIDs(t, task)
		if len(ids) != 1 {
			t.Fatalf("confirmations %v", ids)
		}
		done := send(t, c, ctx, answer(task, ids[0], true, ""), false)
		if done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("answered task: %s %s", done.ID, done.Status.State)
		}
		if got := replyText(t, done); strings.Contains(got, "denied") || !strings.HasPrefix(got, "note result: ") {
			t.Errorf("allowed call's reply %q", got)
		}
		// Denied, in a stream that ends at INPUT_REQUIRED.
		evs := collect(t, c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: userText("note beta")}))
		if lastState(evs) != a2a.TaskStateInputRequired {
			t.Fatalf("stream of a call waiting for confirmation ended in %s", lastState(evs))
		}
		id := evs[0].(*a2a.Task).ID
		parked, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		ids = confirmationIDs(t, parked)
		done = send(t, c, ctx, answer(parked, ids[0], false, "not today"), false)
		if got := replyText(t, done); !strings.Contains(got, "not today") {
			t.Errorf("denied call's reply %q", got)
		}
		// A message to an ended task is refused.
		_, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: answer(parked, ids[0], true, "")})
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Errorf("a message to an ended task: %v", err)
		}
	})
}

func TestNoteToWorkingTask(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		task := send(t, c, ctx, userText("gate"), true)
		waitUntil(t, c, ctx, task.ID, toolUse)
		note := userText("use blue")
		note.TaskID, note.ContextID = task.ID, task.ContextID
		if got := send(t, c, ctx, note, true); got.ID != task.ID || got.Status.State != a2a.TaskStateWorking {
			t.Fatalf("note answered %s %s", got.ID, got.Status.State)
		}
		s.gate.Open()
		evs := collect(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: task.ID}))
		done, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
		if err != nil || lastState(evs) != a2a.TaskStateCompleted {
			t.Fatalf("%v, ended %s", err, lastState(evs))
		}
		if got := replyText(t, done); got != "hints=[use blue]" {
			t.Errorf("the next step saw %q, want the note", got)
		}
		// The note joined the task's history, between the message and the
		// reply, and the stream said when it was read.
		var hist []string
		for _, m := range done.History {
			hist = append(hist, fmt.Sprintf("%s:%s", m.Role, m.Parts[0].Text()))
		}
		if want := []string{"ROLE_USER:gate", "ROLE_USER:use blue", "ROLE_AGENT:hints=[use blue]"}; !slices.Equal(hist, want) {
			t.Errorf("history %q, want %q", hist, want)
		}
		if !slices.ContainsFunc(evs, func(ev a2a.Event) bool { return hasData(ev, "note_consumed") }) {
			t.Error("no update says the note was read")
		}
	})
}

func TestCancelExact(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		first := send(t, c, ctx, userText("long one"), true)
		queued := send(t, c, ctx, inContext("long two", first.ContextID), true)
		if queued.Status.State != a2a.TaskStateSubmitted {
			t.Fatalf("a message to a busy context: %s, want SUBMITTED (queued)", queued.Status.State)
		}
		waitUntil(t, c, ctx, first.ID, toolUse)
		behind := send(t, c, ctx, inContext("long three", first.ContextID), true)

		// Cancel the queued one: only it ends.
		got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: queued.ID})
		if err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel of the queued task: %+v %v", got, err)
		}
		for id, want := range map[a2a.TaskID]a2a.TaskState{first.ID: a2a.TaskStateWorking, behind.ID: a2a.TaskStateSubmitted} {
			if got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id}); err != nil || got.Status.State != want {
				t.Errorf("task %s after another's cancel: %v %v, want %s", id, got.Status.State, err, want)
			}
		}
		// Cancel the running one: it ends at once, the next one starts.
		if got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: first.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
			t.Fatalf("cancel of the working task: %+v %v", got, err)
		}
		waitUntil(t, c, ctx, behind.ID, toolUse)
		if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: first.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Errorf("cancel of an ended task: %v, want TaskNotCancelable", err)
		}
		if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: behind.ID}); err != nil {
			t.Fatal(err)
		}
	})
}

// Rein's extensions: a message that interrupts the working task instead
// of queueing, and a cancel that interrupts cooperatively.
func TestWhenBusyAndInterruptMode(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, binding a2a.TransportProtocol) {
		first := send(t, c, ctx, userText("long one"), true)
		waitUntil(t, c, ctx, first.ID, toolUse)
		bad := inContext("two", first.ContextID)
		bad.Metadata = map[string]any{"rein_when_busy": "now"}
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: bad}); !errors.Is(err, a2a.ErrInvalidParams) || !strings.Contains(err.Error(), "rein_when_busy") {
			t.Errorf("rein_when_busy now: %v", err)
		}
		next := inContext("two", first.ContextID)
		next.Metadata = map[string]any{"rein_when_busy": "interrupt"}
		if got := send(t, c, ctx, next, false); replyText(t, got) != "echo: two" {
			t.Errorf("the interrupting message's reply %q", replyText(t, got))
		}
		stopped, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: first.ID})
		if err != nil || stopped.Status.State != a2a.TaskStateCompleted || stopped.Artifacts[0].Metadata["rein_reason"] != "interrupted" {
			t.Errorf("the interrupted task: %+v %v", stopped, err)
		}
		third := send(t, c, ctx, inContext("long three", first.ContextID), true)
		waitUntil(t, c, ctx, third.ID, toolUse)
		var got *a2a.Task
		if binding == a2a.TransportProtocolJSONRPC {
			got, err = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: third.ID, Metadata: map[string]any{"rein_mode": "interrupt"}})
		} else {
			// HTTP+JSON's cancel has no body: the extension is a query.
			got, err = restCancel(s.url+"/a2a/default/rest/tasks/"+string(third.ID)+":cancel?rein_mode=interrupt", aliceToken)
		}
		if err != nil || got.Status.State != a2a.TaskStateCompleted || got.Artifacts[0].Metadata["rein_reason"] != "interrupted" {
			t.Errorf("a cooperative cancel: %+v %v", got, err)
		}
	})
}

func TestListTasks(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		a := send(t, c, ctx, userText("one"), false)
		b := send(t, c, ctx, inContext("two", a.ContextID), false)
		send(t, c, ctx, userText("elsewhere"), false) // another context
		page, err := c.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: a.ContextID, PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if page.TotalSize != 2 || len(page.Tasks) != 1 || page.Tasks[0].ID != b.ID || page.NextPageToken == "" {
			t.Fatalf("first page %+v", page)
		}
		next, err := c.ListTasks(ctx, &a2a.ListTasksRequest{ContextID: a.ContextID, PageSize: 1, PageToken: page.NextPageToken})
		if err != nil {
			t.Fatal(err)
		}
		if len(next.Tasks) != 1 || next.Tasks[0].ID != a.ID || next.NextPageToken != "" {
			t.Fatalf("second page %+v", next)
		}
		all, err := c.ListTasks(ctx, &a2a.ListTasksRequest{})
		if err != nil || all.TotalSize != 3 {
			t.Fatalf("every context: %+v %v", all, err)
		}
		if _, err := c.ListTasks(ctx, &a2a.ListTasksRequest{PageSize: 1000}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Errorf("pageSize 1000: %v", err)
		}
	})
}

func TestOwnerIsolation(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, b a2a.TransportProtocol) {
		task := send(t, c, ctx, userText("mine"), false)
		bob, bctx := s.client(t, b, bobToken)
		if _, err := bob.GetTask(bctx, &a2a.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's GetTask of alice's task: %v", err)
		}
		if _, err := bob.CancelTask(bctx, &a2a.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's CancelTask of alice's task: %v", err)
		}
		for _, err := range bob.SubscribeToTask(bctx, &a2a.SubscribeToTaskRequest{ID: task.ID}) {
			if !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Errorf("bob's SubscribeToTask of alice's task: %v", err)
			}
			break
		}
		list, err := bob.ListTasks(bctx, &a2a.ListTasksRequest{ContextID: task.ContextID})
		if err != nil || list.TotalSize != 0 || len(list.Tasks) != 0 {
			t.Errorf("bob lists alice's context: %+v %v", list, err)
		}
		// Alice's context id is not bob's to use: refused, nothing applied.
		if _, err := bob.SendMessage(bctx, &a2a.SendMessageRequest{Message: inContext("mine too", task.ContextID)}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Errorf("bob's message to alice's context: %v", err)
		}
		s.noSessions(t, "bob")
		note := userText("hijack")
		note.TaskID = task.ID
		if _, err := bob.SendMessage(bctx, &a2a.SendMessageRequest{Message: note}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("bob's message to alice's task: %v", err)
		}
	})
}

func TestMalformed(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		empty := a2a.NewMessage(a2a.MessageRoleUser)
		agentRole := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("hi"))
		badConf := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"confirmations": "yes"}))
		for name, msg := range map[string]*a2a.Message{"no parts": empty, "agent role": agentRole, "confirmations without a task": badConf} {
			_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
			if !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("%s: %v, want invalid params", name, err)
			}
		}
		s.noSessions(t, "alice") // nothing was applied
		// An answer that does not fit the waiting task applies nothing.
		task := send(t, c, ctx, userText("note gamma"), false)
		wrong := answer(task, "toolu_unknown", true, "")
		if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: wrong}); !errors.Is(err, a2a.ErrInvalidParams) {
			t.Errorf("an answer for an unknown call: %v", err)
		}
		if got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateInputRequired {
			t.Errorf("task after a rejected answer: %+v %v", got, err)
		}
		if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "run_nothing"}); !errors.Is(err, a2a.ErrTaskNotFound) {
			t.Errorf("unknown task: %v", err)
		}
		if _, err := c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, URL: "https://example.com/hook"}); !errors.Is(err, a2a.ErrPushNotificationNotSupported) {
			t.Errorf("push config: %v", err)
		}
	})
}

// TestMalformedWire sends what no client would, to see the errors each
// binding answers with the field named and nothing applied.
func TestMalformedWire(t *testing.T) {
	s := newStack(t)
	post := func(path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("A2A-Version", "1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	// JSON-RPC: errors are HTTP 200 with a JSON-RPC error.
	for body, wantCode := range map[string]float64{
		`{not json`: -32700,
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[]}}}`: -32602,
		`{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":"run_none"}}`:                                                -32001,
		`{"jsonrpc":"2.0","id":3,"method":"NoSuchMethod","params":{}}`:                                                          -32601,
	} {
		status, out := post("/a2a/default", body)
		e, _ := out["error"].(map[string]any)
		if status != http.StatusOK || e == nil || e["code"] != wantCode {
			t.Errorf("JSON-RPC %s: %d %v, want code %v", body, status, out, wantCode)
		}
	}
	status, out := post("/a2a/default", `{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"m2","role":"ROLE_USER","parts":[{"text":"hi"}],"taskId":"run_x","contextId":""},"configuration":{"historyLength":-1}}}`)
	if e, _ := out["error"].(map[string]any); status != http.StatusOK || e == nil || !strings.Contains(fmt.Sprint(e), "configuration.historyLength") {
		t.Errorf("JSON-RPC historyLength -1: %d %v", status, out)
	}
	// HTTP+JSON: an ErrorInfo names the reason and the field.
	status, out = post("/a2a/default/rest/message:send", `{"message":{"messageId":"m3","role":"ROLE_USER","parts":[{"raw":"AAAA"}]}}`)
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out), "INVALID_PARAMS") || !strings.Contains(fmt.Sprint(out), "message.parts[0]") {
		t.Errorf("REST raw part: %d %v", status, out)
	}
	s.noSessions(t, "alice")
}

func keyOf(owner, id string) rein.SessionKey { return rein.SessionKey{Owner: owner, ID: id} }

// TestNodeSDK runs the JavaScript SDK's interop test (testdata/node,
// @a2a-js/sdk pinned by its lockfile) against a server. Without node on
// PATH it is skipped, unless REIN_REQUIRE_NODE is set (CI sets it).
func TestNodeSDK(t *testing.T) {
	protocoltest.RunNode(t, "testdata/node", 6, func() []string {
		s := newStack(t)
		return []string{"REIN_URL=" + s.url, "REIN_TOKEN=" + aliceToken}
	})
}

// TestTwoInstances drives one task through two instances sharing a
// PostgreSQL store: a stream on B of a run that A executes, and an exact
// cancel on B of A's task. Nothing of a task lives in an instance's
// memory.
func TestTwoInstances(t *testing.T) {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	st := openPostgres(t, dsn)
	t.Cleanup(func() { _ = st.Close() })
	a, b := newInstance(t, st, "a"), newInstance(t, st, "b")
	for _, binding := range bindings {
		t.Run(string(binding), func(t *testing.T) {
			ca, actx := a.client(t, binding, aliceToken)
			cb, bctx := b.client(t, binding, aliceToken)
			task := send(t, ca, actx, userText("long on a"), true)
			waitUntil(t, cb, bctx, task.ID, toolUse) // streamed by B
			rec, err := b.svc.GetRun(bctx, keyOf("alice", task.ContextID), string(task.ID))
			if err != nil || rec.Instance != "a" {
				t.Fatalf("the run is executed by %q (%v), want instance a", rec.Instance, err)
			}
			got, err := cb.CancelTask(bctx, &a2a.CancelTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("B's cancel of A's task: %+v %v", got, err)
			}
			if got, err := ca.GetTask(actx, &a2a.GetTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
				t.Errorf("A's view after B's cancel: %+v %v", got, err)
			}
		})
	}
}

// openPostgres opens a PostgreSQL store in a fresh schema that t's cleanup
// drops.
func openPostgres(t *testing.T, dsn string) store.Store {
	t.Helper()
	schema := fmt.Sprintf("a2a_test_%d", time.Now().UnixNano())
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return st
}

// restCancel is HTTP+JSON's cancel sent by hand, with a query no client
// adds.
func restCancel(url, token string) (*a2a.Task, error) {
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cancel: HTTP %d", resp.StatusCode)
	}
	var task a2a.Task
	return &task, json.NewDecoder(resp.Body).Decode(&task)
}

// A client that leaves a stream stops nothing: the run goes on and a later
// subscription sees it end.
func TestDisconnectStopsNothing(t *testing.T) {
	forBindings(t, func(t *testing.T, s *stack, c *a2aclient.Client, ctx context.Context, _ a2a.TransportProtocol) {
		sctx, leave := context.WithCancel(ctx)
		var id a2a.TaskID
		for ev, err := range c.SendStreamingMessage(sctx, &a2a.SendMessageRequest{Message: userText("gate")}) {
			if err != nil {
				t.Fatal(err)
			}
			if task, ok := ev.(*a2a.Task); ok {
				id = task.ID
			}
			if toolUse(ev) {
				break // the client leaves mid-run
			}
		}
		leave()
		// Still working after the client left (a subscription is another
		// request: the server has seen the first one go by then).
		waitUntil(t, c, ctx, id, toolUse)
		if got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id}); err != nil || got.Status.State != a2a.TaskStateWorking {
			t.Fatalf("the run after its client left: %+v %v", got, err)
		}
		s.gate.Open()
		evs := collect(t, c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}))
		if lastState(evs) != a2a.TaskStateCompleted {
			t.Errorf("the run after its client left ended %s, want COMPLETED", lastState(evs))
		}
	})
}
