package anthropic_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/sessions"
)

// threadScript: the parent delegates to a background subagent, whose
// first activation echoes its prompt.
const threadScript = `rules:
  - match: "^spawn"
    steps:
      - text: "delegating"
        tool_calls:
          - name: spawn_agent
            input: {description: "helper", prompt: "child work", background: true}
      - text: "delegated"
  - match: ""
    steps:
      - text: "echo: {{.Input}}"
`

// TestThreads drives a session's threads through the SDK: a subagent child
// is a child thread (threads.list and threads.get, its parent the primary
// thread), its events are the child session's log (threads.events.list and
// the thread's stream), and the parent's stream shows the thread created,
// running and idle; a thread of another session is not found; archiving
// marks it.
func TestThreads(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(threadScript), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := reintest.NewServer(t, reintest.ServerOptions{
		Script: script,
		Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{})}
		},
	})
	c := client(srv, "tok-alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}, EnvironmentID: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, s.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
		OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &sdk.BetaManagedAgentsTextBlockParam{Text: "spawn a helper"}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	// The parent's stream: the thread is created, runs, and goes idle.
	st := c.Beta.Sessions.Events.StreamEvents(ctx, s.ID, sdk.BetaSessionEventStreamParams{}, option.WithQuery("after", "0"))
	defer st.Close()
	var child string
	var seen []string
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "session.thread_created":
			child = ev.AsSessionThreadCreated().SessionThreadID
			if ev.AsSessionThreadCreated().AgentName != "default" {
				t.Fatalf("thread_created = %s", ev.RawJSON())
			}
			seen = append(seen, ev.Type)
		case "session.thread_status_running", "session.thread_status_idle":
			seen = append(seen, ev.Type)
		}
		if ev.Type == "session.thread_status_idle" {
			if ev.AsSessionThreadStatusIdle().SessionThreadID != child {
				t.Fatalf("thread_status_idle = %s, want thread %s", ev.RawJSON(), child)
			}
			break
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"session.thread_created", "session.thread_status_running", "session.thread_status_idle"}; len(seen) != 3 || seen[0] != want[0] || seen[1] != want[1] || seen[2] != want[2] {
		t.Fatalf("thread events in the parent's stream: %q, want %q", seen, want)
	}

	page, err := c.Beta.Sessions.Threads.List(ctx, s.ID, sdk.BetaSessionThreadListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != s.ID || page.Data[0].ParentThreadID != "" || page.Data[1].ID != child ||
		page.Data[1].ParentThreadID != s.ID || page.Data[1].SessionID != s.ID || page.Data[1].Status != "idle" {
		t.Fatalf("threads = %s", page.RawJSON())
	}
	th, err := c.Beta.Sessions.Threads.Get(ctx, child, sdk.BetaSessionThreadGetParams{SessionID: s.ID})
	if err != nil || th.ID != child || th.Agent.Name != "default" {
		t.Fatalf("threads.get = %v, %v", th, err)
	}

	// The thread's events are the child's log: its prompt and its echo.
	evs, err := c.Beta.Sessions.Threads.Events.List(ctx, child, sdk.BetaSessionThreadEventListParams{SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	var reply string
	for _, ev := range evs.Data {
		if ev.Type == "agent.message" {
			reply = ev.AsAgentMessage().Content[0].Text
		}
	}
	if reply != "echo: child work" {
		t.Fatalf("the thread's events = %s", evs.RawJSON())
	}
	ts := c.Beta.Sessions.Threads.Events.StreamEvents(ctx, child, sdk.BetaSessionThreadEventStreamParams{SessionID: s.ID}, option.WithQuery("after", "0"))
	defer ts.Close()
	streamed := ""
	for ts.Next() {
		ev := ts.Current()
		if ev.Type == "agent.message" {
			streamed = ev.AsAgentMessage().Content[0].Text
			break
		}
	}
	if streamed != reply {
		t.Fatalf("the thread's stream showed %q, its list %q (err %v)", streamed, reply, ts.Err())
	}

	// Another session's thread, and another owner's, are not found.
	other, err := c.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}, EnvironmentID: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Sessions.Threads.Get(ctx, child, sdk.BetaSessionThreadGetParams{SessionID: other.ID}); !isStatus(err, 404) {
		t.Fatalf("a thread of another session: %v, want 404", err)
	}
	bob := client(srv, "tok-bob")
	if _, err := bob.Beta.Sessions.Threads.Get(ctx, child, sdk.BetaSessionThreadGetParams{SessionID: s.ID}); !isStatus(err, 404) {
		t.Fatalf("bob reads alice's thread: %v, want 404", err)
	}

	archived, err := c.Beta.Sessions.Threads.Archive(ctx, child, sdk.BetaSessionThreadArchiveParams{SessionID: s.ID})
	if err != nil || archived.ArchivedAt.IsZero() {
		t.Fatalf("threads.archive = %v, %v", archived, err)
	}
}

// isStatus reports whether err is the SDK's error for an HTTP status.
func isStatus(err error, status int) bool {
	var e *sdk.Error
	return errors.As(err, &e) && e.StatusCode == status
}

// usageScript states each request's usage.
const usageScript = `rules:
  - match: "^tools"
    steps:
      - text: "first"
        usage: {input_tokens: 100, output_tokens: 10}
        tool_calls:
          - name: sleep
            input: {seconds: 0}
      - text: "second"
        usage: {input_tokens: 200, output_tokens: 20}
`

// TestSpanUsage: each span.model_request_end carries its request's usage,
// from the agent.model_request logged with the step.
func TestSpanUsage(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(usageScript), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := reintest.NewServer(t, reintest.ServerOptions{
		Script: script,
		Tokens: map[string]string{"tok-alice": "alice"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{})}
		},
	})
	c := client(srv, "tok-alice")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}, EnvironmentID: "env"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, s.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
		OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &sdk.BetaManagedAgentsTextBlockParam{Text: "tools please"}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	st := c.Beta.Sessions.Events.StreamEvents(ctx, s.ID, sdk.BetaSessionEventStreamParams{}, option.WithQuery("after", "0"))
	defer st.Close()
	var got [][2]int64
	for st.Next() {
		ev := st.Current()
		if ev.Type == "span.model_request_end" {
			u := ev.AsSpanModelRequestEnd().ModelUsage
			got = append(got, [2]int64{u.InputTokens, u.OutputTokens})
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	if len(got) != 2 || got[0] != [2]int64{100, 10} || got[1] != [2]int64{200, 20} {
		t.Fatalf("span usages %v, want [[100 10] [200 20]] (err %v)", got, st.Err())
	}
}
