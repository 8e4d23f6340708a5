package app_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// send runs text in a fresh session of agent and returns the run's outcome.
func send(t *testing.T, svc *sessions.Service, agentName, text string) sessions.RunOutcome {
	t.Helper()
	ctx := testContext(t)
	sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Agent: agentName})
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: text})
	if err != nil {
		t.Fatal(err)
	}
	out, err := res.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenZeroOptions: the zero Options are a working runtime — the demo
// model, in memory, one agent.
func TestOpenZeroOptions(t *testing.T) {
	ctx := testContext(t)
	rt, err := app.Open(ctx, app.Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if out := send(t, rt.Service(), "", "hello"); out.Status != rein.StatusCompleted || out.Reply == "" {
		t.Fatalf("demo run: %+v", out)
	}
	if !strings.HasPrefix(rt.Instance(), "ins_") {
		t.Fatalf("instance %q: want a fresh ins_ id", rt.Instance())
	}
	if err := rt.Start(ctx); err == nil {
		t.Fatal("a second Start was accepted")
	}
}

const script = `
rules:
  - match: "(?i)weather"
    steps:
      - tool_calls:
          - name: weather
            input: {city: "Oslo"}
      - text: "Forecast: {{.ToolResult}}"
`

type weatherInput struct {
	City string `json:"city"`
}

// TestOpenProgramModelsAndTools: a program's own model (by name) and tool
// are offered like the built-in ones, and a configuration given as text
// may restrict an agent to them.
func TestOpenProgramModelsAndTools(t *testing.T) {
	ctx := testContext(t)
	m, err := scripted.Parse("test-script.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	weather := tool.Func("weather", "Today's weather.", func(_ context.Context, in weatherInput) (string, error) {
		return "sunny in " + in.City, nil
	})
	rt, err := app.Open(ctx, app.Options{
		Models:     map[string]model.Model{"mine": m},
		Model:      "mine",
		Tools:      []tool.Tool{weather},
		ConfigData: []byte("agents:\n  forecaster:\n    tools: [weather]\n    system: \"Report the weather.\"\n"),
		LookupEnv:  noEnv,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, agentName := range []string{"", "forecaster"} {
		if out := send(t, rt.Service(), agentName, "weather?"); out.Reply != "Forecast: sunny in Oslo" {
			t.Fatalf("agent %q: %+v", agentName, out)
		}
	}
	if agents := rt.Service().AgentNames(); len(agents) != 2 {
		t.Fatalf("agents %+v: want default and forecaster", agents)
	}
}

// TestOpenOptionErrors: a field Open cannot use is an *OptionError naming
// it, with the reason in its chain, and a store's password never in its
// text; nothing is left open.
func TestOpenOptionErrors(t *testing.T) {
	ctx := testContext(t)
	dup := tool.Func("sleep", "A second sleep.", func(context.Context, weatherInput) (string, error) { return "", nil })
	for _, c := range []struct {
		name   string
		o      app.Options
		option string
		check  func(error) bool
		hidden string
	}{
		{"unknown model", app.Options{Model: "gpt-4o"}, "Model", func(err error) bool { return errors.Is(err, model.ErrUnknownModel) }, ""},
		{"unknown store", app.Options{Store: "nosuch:x"}, "Store", func(err error) bool { return rein.CodeOf(err) == rein.CodeInvalidArgument }, ""},
		{"store down", app.Options{Store: "postgres://rein:s3cretPW@127.0.0.1:1/rein?connect_timeout=2"}, "Store", func(err error) bool { return rein.CodeOf(err) != rein.CodeInvalidArgument }, "s3cretPW"},
		{"unknown confirm", app.Options{Confirm: []string{"no_such_tool"}}, "Confirm", func(err error) bool { return rein.CodeOf(err) == rein.CodeInvalidArgument }, ""},
		{"bad configuration", app.Options{ConfigData: []byte("agents:\n  a:\n    tools: [nope]\n")}, "ConfigFile", func(err error) bool {
			var cerr config.Errors
			return errors.As(err, &cerr) && strings.HasPrefix(cerr.Error(), "configuration:3:")
		}, ""},
		{"tool name taken", app.Options{Tools: []tool.Tool{dup}}, "Tools", func(err error) bool { return strings.Contains(err.Error(), "sleep") }, ""},
		{"CORS without an origin", app.Options{CORSOrigins: []string{"not an origin"}}, "CORSOrigins", func(err error) bool { return err != nil }, ""},
		{"TLS files missing", app.Options{TLSCertFile: "/nonexistent/cert.pem", TLSKeyFile: "/nonexistent/key.pem"}, "TLSCertFile", func(err error) bool { return err != nil }, ""},
		{"unknown protocol", app.Options{Protocols: []string{"anthropic", "smoke-signals"}}, "Protocols", func(err error) bool {
			return rein.CodeOf(err) == rein.CodeInvalidArgument && strings.Contains(err.Error(), "smoke-signals")
		}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.LookupEnv = noEnv
			rt, err := app.Open(ctx, c.o)
			if err == nil {
				rt.Close()
				t.Fatal("Open accepted it")
			}
			var oe *app.OptionError
			if !errors.As(err, &oe) || oe.Option != c.option || !c.check(err) {
				t.Fatalf("error %v (%T): want an OptionError for %s", err, err, c.option)
			}
			if c.hidden != "" && strings.Contains(err.Error(), c.hidden) {
				t.Fatalf("error %q shows %q", err, c.hidden)
			}
		})
	}
}

// TestProtocols: a nil list mounts every protocol, "none" (an empty list)
// none; the prefix answers only when mounted.
func TestProtocols(t *testing.T) {
	ctx := testContext(t)
	if got, err := app.ParseProtocols(" none "); err != nil || got == nil || len(got) != 0 {
		t.Fatalf(`ParseProtocols("none") = %v, %v: want an empty, non-nil list`, got, err)
	}
	if got, err := app.ParseProtocols("anthropic"); err != nil || len(got) != 1 || got[0] != "anthropic" {
		t.Fatalf(`ParseProtocols("anthropic") = %v, %v`, got, err)
	}
	if _, err := app.ParseProtocols("anthropic,x"); rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf(`ParseProtocols("anthropic,x") = %v: want invalid_argument`, err)
	}
	for _, c := range []struct {
		protocols []string
		want      int
	}{{nil, http.StatusOK}, {[]string{}, http.StatusNotFound}} {
		rt, err := app.Open(ctx, app.Options{Protocols: c.protocols, LookupEnv: noEnv})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(rt.Handler())
		for _, path := range []string{"/v1/sessions", "/a2a/default/.well-known/agent-card.json", "/.well-known/agent-card.json"} {
			resp, err := http.Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("Protocols %v: GET %s answered %d, want %d", c.protocols, path, resp.StatusCode, c.want)
			}
		}
		rt.Close()
		hs.Close()
	}
}

// TestOpenConfigFile: a file is named in its errors, and read like text.
func TestOpenConfigFile(t *testing.T) {
	ctx := testContext(t)
	file := filepath.Join(t.TempDir(), "rein.yaml")
	if err := os.WriteFile(file, []byte("agents:\n  helper:\n    max_steps: zero\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := app.Open(ctx, app.Options{ConfigFile: file, LookupEnv: noEnv})
	var cerr config.Errors
	if !errors.As(err, &cerr) || !strings.HasPrefix(cerr.Error(), file+":3:") {
		t.Fatalf("error %v: want %s:3: …", err, file)
	}
}

// TestHandler: the HTTP API over the same service, mounted in a server
// of the program's own.
func TestHandler(t *testing.T) {
	ctx := testContext(t)
	rt, err := app.Open(ctx, app.Options{Tokens: map[string]string{"tok-0123456789abcdef": "alice"}, LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt.Handler())
	defer hs.Close()
	defer rt.Close() // before hs.Close: it ends the event streams
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/api/sessions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/sessions: %d", resp.StatusCode)
	}
	list, err := rt.Service().ListSessions(ctx, "alice")
	if err != nil || len(list) != 1 {
		t.Fatalf("the session made over HTTP is not the service's: %d %v", len(list), err)
	}
}

// TestServe: Serve answers on the listener until its context ends, then
// drains; Close afterwards only releases, and a second Serve is refused.
func TestServe(t *testing.T) {
	ctx := testContext(t)
	rt, err := app.Open(ctx, app.Options{LookupEnv: noEnv, DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- rt.Serve(sctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	stop()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Serve(ctx, ln2); err == nil {
		t.Fatal("a second Serve was accepted")
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("Close after Serve: %v", err)
	}
}

func noEnv(string) (string, bool) { return "", false }
