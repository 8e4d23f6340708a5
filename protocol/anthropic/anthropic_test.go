package anthropic_test

import (
	"context"
	"errors"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// newServer is a server as rein serve builds it, with /v1 mounted, and
// tokens for two owners.
func newServer(t *testing.T) *reintest.Server {
	return reintest.NewServer(t, reintest.ServerOptions{
		Script: protocoltest.WriteScript(t),
		Tokens: map[string]string{"tok-alice": "alice", "tok-bob": "bob"},
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{})}
		},
	})
}

// client is the official Go SDK pointed at srv with token.
func client(srv *reintest.Server, token string) sdk.Client {
	return sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(token), option.WithHTTPClient(srv.HTTP), option.WithMaxRetries(0))
}

// TestOneTurn drives one turn through the SDK: the session, the message,
// the stream from the log's start, the same events listed.
func TestOneTurn(t *testing.T) {
	srv := newServer(t)
	c := client(srv, "tok-alice")
	ctx := context.Background()
	s, err := c.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}, EnvironmentID: "env_1", Title: sdk.String("hi")})
	if err != nil {
		t.Fatal(err)
	}
	if s.Title != "hi" || s.EnvironmentID != "env_1" || s.Agent.ID != "default" || s.Status != "idle" {
		t.Fatalf("session = %s", s.RawJSON())
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, s.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
		OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &sdk.BetaManagedAgentsTextBlockParam{Text: "hello"}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	st := c.Beta.Sessions.Events.StreamEvents(ctx, s.ID, sdk.BetaSessionEventStreamParams{}, option.WithQuery("after", "0"))
	defer st.Close()
	var streamed []string
	for st.Next() {
		ev := st.Current()
		streamed = append(streamed, ev.Type+" "+ev.ID)
		if ev.Type == "agent.message" && ev.AsAgentMessage().Content[0].Text != "echo: hello" {
			t.Fatalf("agent.message = %s", ev.RawJSON())
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	want := []string{"user.message", "session.status_running", "span.model_request_start", "agent.message", "span.model_request_end", "session.status_idle"}
	if len(streamed) != len(want) {
		t.Fatalf("streamed %q, want types %q", streamed, want)
	}
	page, err := c.Beta.Sessions.Events.List(ctx, s.ID, sdk.BetaSessionEventListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range page.Data {
		if i >= len(streamed) || ev.Type+" "+ev.ID != streamed[i] || ev.Type != want[i] {
			t.Fatalf("listed %d: %s %s; streamed %q", i, ev.Type, ev.ID, streamed)
		}
	}
	if len(page.Data) != len(streamed) {
		t.Fatalf("listed %d events, streamed %d", len(page.Data), len(streamed))
	}
}

// TestNodeSDK runs the TypeScript SDK's interop test (testdata/node,
// @anthropic-ai/sdk pinned by its lockfile) against a server. Without node
// on PATH it is skipped, unless REIN_REQUIRE_NODE is set (CI sets it).
func TestNodeSDK(t *testing.T) {
	protocoltest.RunNode(t, "testdata/node", 3, func() []string {
		srv := newServer(t)
		return []string{"REIN_URL=" + srv.URL, "REIN_TOKEN=tok-alice"}
	})
}

// TestUpdateAndArchive: sessions.update sets the title and patches the
// metadata (a value sets its key, null deletes it); sessions.archive marks
// the session, which then leaves the default list and refuses messages
// with a 409 the SDK does not retry, while a stop still reaches its run.
func TestUpdateAndArchive(t *testing.T) {
	srv := newServer(t)
	c := client(srv, "tok-alice")
	ctx := context.Background()
	s, err := c.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")},
		Title: sdk.String("first"), Metadata: map[string]string{"k": "v", "x": "y"}, EnvironmentID: "env"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := c.Beta.Sessions.Update(ctx, s.ID, sdk.BetaSessionUpdateParams{Title: sdk.String("second")},
		option.WithJSONSet("metadata", map[string]any{"k": "v2", "x": nil, "n": "new"}))
	if err != nil {
		t.Fatal(err)
	}
	if u.Title != "second" || len(u.Metadata) != 2 || u.Metadata["k"] != "v2" || u.Metadata["n"] != "new" || u.EnvironmentID != "env" {
		t.Fatalf("updated: %s", u.RawJSON())
	}
	a, err := c.Beta.Sessions.Archive(ctx, s.ID, sdk.BetaSessionArchiveParams{})
	if err != nil {
		t.Fatal(err)
	}
	if a.ArchivedAt.IsZero() || a.Title != "second" {
		t.Fatalf("archived: %s", a.RawJSON())
	}
	again, err := c.Beta.Sessions.Archive(ctx, s.ID, sdk.BetaSessionArchiveParams{})
	if err != nil || !again.ArchivedAt.Equal(a.ArchivedAt) {
		t.Fatalf("archived again: %v %v", again, err)
	}
	list, err := c.Beta.Sessions.List(ctx, sdk.BetaSessionListParams{})
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("the default list shows an archived session: %v %v", list, err)
	}
	list, err = c.Beta.Sessions.List(ctx, sdk.BetaSessionListParams{IncludeArchived: sdk.Bool(true)})
	if err != nil || len(list.Data) != 1 {
		t.Fatalf("include_archived: %v %v", list, err)
	}
	_, err = c.Beta.Sessions.Events.Send(ctx, s.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
		OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: textParam("hello")}}}})
	var e *sdk.Error
	if !errors.As(err, &e) || e.StatusCode != 409 || e.Response.Header.Get("x-should-retry") != "false" {
		t.Fatalf("a message to an archived session: %v", err)
	}
	if _, err := c.Beta.Sessions.Events.Send(ctx, s.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
		OfUserInterrupt: &sdk.BetaManagedAgentsUserInterruptEventParams{}}}}); err != nil {
		t.Fatalf("a stop in an archived session: %v", err)
	}
	evs, _, err := srv.Service.ReadEvents(ctx, rein.SessionKey{Owner: "alice", ID: s.ID}, 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Type != rein.EventUserInterrupt {
		t.Fatalf("the archived session's log: %v %v", evs, err)
	}
}
