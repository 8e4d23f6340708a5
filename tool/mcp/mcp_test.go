package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/mcp/internal/testserver"
)

// transports runs f against the test server over stdio (a separate
// process) and over streamable HTTP (in-process, loopback), under the name
// "calc".
func transports(t *testing.T, f func(t *testing.T, m *Manager)) {
	t.Run("stdio", func(t *testing.T) {
		noLeaks(t)
		f(t, newManager(t, Options{}, stdio("calc")))
	})
	t.Run("http", func(t *testing.T) {
		noLeaks(t)
		h := newHTTPServer(t, "calc", nil)
		f(t, newManager(t, Options{}, h.config()))
	})
}

func TestToolsAreOfferedAsServerToolWithTheirSchema(t *testing.T) {
	transports(t, func(t *testing.T, m *Manager) {
		got := names(m.Tools())
		for _, want := range []string{"calc__add", "calc__echo", "calc__fail", "calc__idem", "calc__slow"} {
			if !slices.Contains(got, want) {
				t.Errorf("Tools() = %v, want %s among them", got, want)
			}
		}
		if !slices.IsSorted(got) {
			t.Errorf("Tools() = %v, not sorted", got)
		}
		spec := toolNamed(t, m, "calc__echo").Spec()
		if spec.Description != "Say the text back." {
			t.Errorf("description = %q", spec.Description)
		}
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(spec.InputSchema, &schema); err != nil {
			t.Fatalf("schema %s: %v", spec.InputSchema, err)
		}
		if schema.Type != "object" || schema.Properties["text"] == nil || !slices.Equal(schema.Required, []string{"text"}) {
			t.Errorf("schema = %s, want the server's (object with required text)", spec.InputSchema)
		}
	})
}

func TestRegistryValidatesInputAgainstTheServersSchema(t *testing.T) {
	transports(t, func(t *testing.T, m *Manager) {
		reg, err := tool.NewRegistry(tool.RegistryOptions{}, m.Tools()...)
		if err != nil {
			t.Fatalf("NewRegistry(m.Tools()): %v", err)
		}
		ctx := testCtx(t)
		res := reg.Execute(ctx, tool.Call{ID: "1", Name: "calc__echo", Input: []byte(`{"text": 5}`)})
		if !res.IsError || !strings.Contains(res.Output, "invalid input") {
			t.Errorf("echo with a number = %+v, want an invalid input error result", res)
		}
		res = reg.Execute(ctx, tool.Call{ID: "2", Name: "calc__echo", Input: []byte(`{}`)})
		if !res.IsError || !strings.Contains(res.Output, "text") {
			t.Errorf("echo without text = %+v, want an error result naming the missing property", res)
		}
		res = reg.Execute(ctx, tool.Call{ID: "3", Name: "calc__add", Input: []byte(`{"a": 2, "b": 3.5}`)})
		if res != (tool.Result{Output: "5.5"}) {
			t.Errorf("add = %+v, want 5.5", res)
		}
	})
}

func TestResults(t *testing.T) {
	transports(t, func(t *testing.T, m *Manager) {
		if got := call(t, m, "calc__echo", `{"text":"hello\nworld"}`); got != (tool.Result{Output: "hello\nworld"}) {
			t.Errorf("echo = %+v", got)
		}
		got := call(t, m, "calc__fail", `{}`)
		if got != (tool.Result{Output: testserver.FailText, IsError: true}) {
			t.Errorf("fail = %+v, want an error result with the server's text", got)
		}
		got = call(t, m, "calc__mixed", ``)
		want := `first` + "\n" + `{"type":"image","mimeType":"image/png","data":"AQID"}` + "\n" + `second`
		if got != (tool.Result{Output: want}) {
			t.Errorf("mixed = %q, want %q", got.Output, want)
		}
		// A protocol error (no such tool) names the server and keeps the
		// session.
		pid := call(t, m, "calc__pid", `{}`).Output
		err := callErr(t, m, "calc__nosuch", `{}`, "calc")
		if !strings.Contains(err.Error(), "nosuch") {
			t.Errorf("unknown tool error %q does not name the tool", err)
		}
		if again := call(t, m, "calc__pid", `{}`).Output; again != pid {
			t.Errorf("pid after a protocol error = %s, want %s (same session)", again, pid)
		}
	})
}

func TestIdempotencyKeyIsTheToolUseID(t *testing.T) {
	transports(t, func(t *testing.T, m *Manager) {
		idem := toolNamed(t, m, "calc__idem")
		res, err := idem.Call(testCtx(t), tool.Call{ID: "toolu_01ABC", Name: "calc__idem", Input: []byte(`{}`)})
		if err != nil || res != (tool.Result{Output: "toolu_01ABC"}) {
			t.Errorf("idem = %+v, %v; want the tool_use_id", res, err)
		}
	})
}

func TestCancellationReachesTheServer(t *testing.T) {
	transports(t, func(t *testing.T, m *Manager) {
		ctx, cancel := context.WithCancel(testCtx(t))
		type answer struct {
			res tool.Result
			err error
			at  time.Time
		}
		done := make(chan answer, 1)
		go func() {
			res, err := m.Call(ctx, tool.Call{ID: "slow1", Name: "calc__slow", Input: []byte(`{}`)})
			done <- answer{res, err, time.Now()}
		}()
		if got := call(t, m, "calc__wait_started", `{"n":1}`).Output; got != "started=1" {
			t.Fatalf("wait_started = %q", got)
		}
		cancelled := time.Now()
		cancel()
		a := <-done
		if a.err == nil || !isCancel(a.err) || !strings.HasPrefix(a.err.Error(), `MCP server "calc": `) {
			t.Errorf("cancelled call = %+v, %v; want a cancellation error naming the server", a.res, a.err)
		}
		if d := a.at.Sub(cancelled); d > time.Second {
			t.Errorf("cancelled call returned after %v", d)
		}
		// The server saw its handler's context end: notifications/cancelled
		// arrived.
		if got := call(t, m, "calc__wait_cancelled", `{"n":1}`).Output; got != "started=1 cancelled=1" {
			t.Errorf("wait_cancelled = %q, want the slow call cancelled on the server", got)
		}
	})
}

func TestStdioServerThatCrashesIsStartedAgain(t *testing.T) {
	noLeaks(t)
	m := newManager(t, Options{}, stdio("crashy"))
	pid := call(t, m, "crashy__pid", `{}`).Output

	// A call in flight when the process dies fails too.
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	inflight := make(chan error, 1)
	go func() {
		_, err := m.Call(ctx, tool.Call{ID: "s", Name: "crashy__slow", Input: []byte(`{}`)})
		inflight <- err
	}()
	call(t, m, "crashy__wait_started", `{"n":1}`)

	err := callErr(t, m, "crashy__crash", `{}`, "crashy")
	t.Logf("crash: %v", err)
	if err := <-inflight; err == nil || !strings.HasPrefix(err.Error(), `MCP server "crashy": `) || isCancel(err) {
		t.Errorf("call in flight during the crash: %v, want an error naming the server", err)
	}
	again := call(t, m, "crashy__pid", `{}`).Output
	if again == pid || again == "" {
		t.Errorf("pid after the crash = %q, want a new process (was %s)", again, pid)
	}
	if got := call(t, m, "crashy__echo", `{"text":"back"}`).Output; got != "back" {
		t.Errorf("echo after restart = %q", got)
	}
}

func TestStdioServerThatWritesGarbage(t *testing.T) {
	t.Run("from the start", func(t *testing.T) {
		noLeaks(t)
		m := newManager(t, Options{}, stdio("junk", "-garbage"))
		if got := m.Tools(); len(got) != 0 {
			t.Errorf("Tools() = %v, want none", names(got))
		}
		err := callErr(t, m, "junk__echo", `{"text":"x"}`, "junk")
		t.Logf("garbage server: %v", err)
	})
	t.Run("mid-call", func(t *testing.T) {
		noLeaks(t)
		m := newManager(t, Options{}, stdio("junk"))
		pid := call(t, m, "junk__pid", `{}`).Output
		err := callErr(t, m, "junk__garble", `{}`, "junk")
		t.Logf("garbled answer: %v", err)
		if again := call(t, m, "junk__pid", `{}`).Output; again == pid {
			t.Errorf("pid after garbage = %s, want a fresh process", again)
		}
	})
}

func TestHTTPServerRestartedBetweenCalls(t *testing.T) {
	for _, version := range []string{"", "2025-11-25", "2025-03-26"} {
		t.Run("protocol="+version, func(t *testing.T) {
			noLeaks(t)
			h := newHTTPServer(t, "web", nil)
			m := newManager(t, Options{ProtocolVersion: version}, h.config())
			if got := call(t, m, "web__echo", `{"text":"one"}`).Output; got != "one" {
				t.Fatalf("echo = %q", got)
			}
			h.restart()
			settle(m)
			if got := call(t, m, "web__echo", `{"text":"two"}`).Output; got != "two" {
				t.Errorf("echo after restart = %q", got)
			}
			initialized, notFound := h.stats.get()
			t.Logf("handshakes %d, 404s %d", initialized, notFound)
			if version != "" && notFound == 0 {
				t.Errorf("no 404: the restart did not drop the session, so this tested nothing")
			}

			// Down: an error naming the server; up again: works.
			h.stop()
			callErr(t, m, "web__echo", `{"text":"three"}`, "web")
			h.start(h.addr)
			settle(m)
			if got := call(t, m, "web__echo", `{"text":"four"}`).Output; got != "four" {
				t.Errorf("echo after coming back = %q", got)
			}
		})
	}
}

// settle drops m's idle keep-alive connections, as Go's HTTP client does by
// itself within microseconds of the server closing them. A real restart
// takes far longer than that; these tests restart within microseconds, and
// a request that raced the close would fail as a call that may have run
// (which TestHTTPCallInFlightWhenTheServerRestartsIsNotRunAgain covers).
func settle(m *Manager) {
	for _, s := range m.servers {
		s.closeIdle()
	}
}

func TestServerDownAtStartUpIsRetried(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		noLeaks(t)
		g := &gate{}
		h := newHTTPServer(t, "late", g.wrap)
		changed := make(chan struct{}, 1)
		m := newManager(t, Options{OnToolsChanged: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}}, h.config())
		if got := m.Tools(); len(got) != 0 {
			t.Fatalf("Tools() while down = %v", names(got))
		}
		err := callErr(t, m, "late__echo", `{"text":"x"}`, "late")
		t.Logf("down: %v", err)
		g.set(true)
		waitFor(testCtx(t), t, changed, "the server's tools", func() bool { return len(m.Tools()) > 0 })
		if got := call(t, m, "late__echo", `{"text":"up"}`).Output; got != "up" {
			t.Errorf("echo = %q", got)
		}
	})
	t.Run("stdio", func(t *testing.T) {
		noLeaks(t)
		ready := filepath.Join(t.TempDir(), "ready")
		changed := make(chan struct{}, 1)
		m := newManager(t, Options{OnToolsChanged: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}}, stdio("late", "-require", ready))
		if got := m.Tools(); len(got) != 0 {
			t.Fatalf("Tools() while down = %v", names(got))
		}
		err := callErr(t, m, "late__echo", `{"text":"x"}`, "late")
		if !strings.Contains(err.Error(), "not ready") {
			t.Errorf("error %q does not quote the server's stderr", err)
		}
		if err := os.WriteFile(ready, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(testCtx(t), t, changed, "the server's tools", func() bool { return len(m.Tools()) > 0 })
		if got := call(t, m, "late__echo", `{"text":"up"}`).Output; got != "up" {
			t.Errorf("echo = %q", got)
		}
	})
}

func TestUnreachableServers(t *testing.T) {
	noLeaks(t)
	m := newManager(t, Options{ConnectTimeout: 5 * time.Second},
		Server{Name: "nohost", URL: "http://127.0.0.1:1/mcp"},
		Server{Name: "noexec", Command: []string{filepath.Join(t.TempDir(), "does-not-exist")}},
	)
	if got := m.Tools(); len(got) != 0 {
		t.Errorf("Tools() = %v", names(got))
	}
	callErr(t, m, "nohost__x", `{}`, "nohost")
	callErr(t, m, "noexec__x", `{}`, "noexec")
	if _, err := m.Call(testCtx(t), tool.Call{Name: "other__x"}); err == nil {
		t.Error("a call to an unconfigured server succeeded")
	}
}

func TestToolListChanged(t *testing.T) {
	noLeaks(t)
	h := newHTTPServer(t, "grow", nil)
	changed := make(chan struct{}, 1)
	m := newManager(t, Options{OnToolsChanged: func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}}, h.config())
	h.current().AddTool(&sdk.Tool{Name: "extra", Description: "New.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "extra!"}}}, nil
		})
	waitFor(testCtx(t), t, changed, "grow__extra", func() bool { return slices.Contains(names(m.Tools()), "grow__extra") })
	if got := call(t, m, "grow__extra", `{}`).Output; got != "extra!" {
		t.Errorf("extra = %q", got)
	}
}

func TestToolsTheRegistryWouldRefuseAreLeftOut(t *testing.T) {
	noLeaks(t)
	h := newHTTPServer(t, "odd", nil)
	srv := h.current()
	ok := func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{}, nil
	}
	srv.AddTool(&sdk.Tool{Name: "dotted.name", InputSchema: json.RawMessage(`{"type":"object"}`)}, ok)
	srv.AddTool(&sdk.Tool{Name: strings.Repeat("x", 70), InputSchema: json.RawMessage(`{"type":"object"}`)}, ok)
	srv.AddTool(&sdk.Tool{Name: "bad_schema", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"nosuchtype"}}}`)}, ok)
	srv.AddTool(&sdk.Tool{Name: "fine", InputSchema: json.RawMessage(`{"type":"object"}`)}, ok)
	m := newManager(t, Options{}, h.config())
	got := names(m.Tools())
	if !slices.Contains(got, "odd__fine") || !slices.Contains(got, "odd__echo") {
		t.Errorf("Tools() = %v, want odd__fine and odd__echo", got)
	}
	for _, n := range got {
		if strings.Contains(n, "dotted") || strings.Contains(n, "xxxx") || strings.Contains(n, "bad_schema") {
			t.Errorf("Tools() offers %s, which the registry refuses", n)
		}
	}
	if _, err := tool.NewRegistry(tool.RegistryOptions{}, m.Tools()...); err != nil {
		t.Errorf("NewRegistry(m.Tools()): %v", err)
	}
}

func TestHeadersAreSent(t *testing.T) {
	noLeaks(t)
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h := newHTTPServer(t, "search", auth)
	cfg := h.config()
	cfg.Headers = map[string]string{"Authorization": "Bearer s3cret"}
	m := newManager(t, Options{}, cfg)
	if got := call(t, m, "search__echo", `{"text":"in"}`).Output; got != "in" {
		t.Errorf("echo = %q", got)
	}
	bare := newManager(t, Options{}, h.config())
	callErr(t, bare, "search__echo", `{"text":"in"}`, "search")
}

func TestStdioEnvironment(t *testing.T) {
	noLeaks(t)
	t.Setenv("REIN_TEST_SECRET", "do-not-leak")
	srv := stdio("env")
	srv.Env = map[string]string{"CALC_MODE": "fast"}
	m := newManager(t, Options{}, srv)
	if got := call(t, m, "env__env", `{"name":"CALC_MODE"}`).Output; got != "fast" {
		t.Errorf("CALC_MODE = %q, want the configured value", got)
	}
	if got := call(t, m, "env__env", `{"name":"REIN_TEST_SECRET"}`).Output; got != "" {
		t.Errorf("REIN_TEST_SECRET = %q, want it not inherited", got)
	}
	if got := call(t, m, "env__env", `{"name":"PATH"}`).Output; got != os.Getenv("PATH") {
		t.Errorf("PATH = %q, want it inherited", got)
	}
}

func TestEnviron(t *testing.T) {
	env := map[string]string{"B": "2", "A": "1", "PATH": "/mine"}
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"PATH": "/usr/bin", "HOME": "/root", "SECRET": "x"}[k]
		return v, ok
	}
	got := environ(lookup, env)
	want := []string{"HOME=/root", "A=1", "B=2", "PATH=/mine"}
	if !slices.Equal(got, want) {
		t.Errorf("environ = %v, want %v", got, want)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	noLeaks(t)
	g := &gate{}
	down := newHTTPServer(t, "down", g.wrap)
	up := newHTTPServer(t, "up", nil)
	m, err := NewManager(testCtx(t), []Server{stdio("a"), stdio("b"), up.config(), down.config()},
		Options{Logger: testLogger(t), RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan error, 1)
	go func() {
		_, err := m.Call(context.Background(), tool.Call{Name: "a__slow"})
		slow <- err
	}()
	call(t, m, "a__wait_started", `{"n":1}`)
	m.Close()
	if err := <-slow; err == nil || !strings.HasPrefix(err.Error(), `MCP server "a": `) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a call in flight at Close: %v, want an error naming the server saying it closed", err)
	}
	m.Close() // idempotent
	if _, err := m.Call(testCtx(t), tool.Call{Name: "b__echo", Input: []byte(`{"text":"x"}`)}); err == nil {
		t.Error("a call after Close succeeded")
	}
}

func TestNewManagerRefusesBadConfigurations(t *testing.T) {
	noLeaks(t)
	cases := []struct {
		name    string
		servers []Server
	}{
		{"no name", []Server{{Command: []string{"x"}}}},
		{"double underscore", []Server{{Name: "a__b", Command: []string{"x"}}}},
		{"trailing underscore", []Server{{Name: "a_", Command: []string{"x"}}}},
		{"dot", []Server{{Name: "a.b", Command: []string{"x"}}}},
		{"too long", []Server{{Name: strings.Repeat("a", 49), Command: []string{"x"}}}},
		{"both", []Server{{Name: "a", Command: []string{"x"}, URL: "http://h/mcp"}}},
		{"neither", []Server{{Name: "a"}}},
		{"empty program", []Server{{Name: "a", Command: []string{""}}}},
		{"env with url", []Server{{Name: "a", URL: "http://h/mcp", Env: map[string]string{"A": "1"}}}},
		{"headers with command", []Server{{Name: "a", Command: []string{"x"}, Headers: map[string]string{"A": "1"}}}},
		{"ftp", []Server{{Name: "a", URL: "ftp://h/mcp"}}},
		{"no host", []Server{{Name: "a", URL: "http:///mcp"}}},
		{"duplicate", []Server{{Name: "a", Command: []string{"x"}}, {Name: "a", URL: "http://h/mcp"}}},
	}
	for _, c := range cases {
		m, err := NewManager(context.Background(), c.servers, Options{})
		if err == nil {
			m.Close()
			t.Errorf("%s: NewManager succeeded", c.name)
			continue
		}
		if rein.CodeOf(err) != rein.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", c.name, err)
		}
	}
	for _, ok := range []string{"calc", "my_server", "a-b_c-1", strings.Repeat("a", 48)} {
		if err := (Server{Name: ok, Command: []string{"x"}}).Validate(); err != nil {
			t.Errorf("Validate(%q): %v", ok, err)
		}
	}
}

func TestNewManagerReturnsWhenItsContextEnds(t *testing.T) {
	noLeaks(t)
	// A server that accepts connections and never answers a request.
	// (It does take notifications: the SDK's notifications/cancelled for
	// the abandoned handshake is waited for by its session's Close, up to
	// a fixed 5 s.)
	release := make(chan struct{})
	hang := newHTTPServer(t, "hang", func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"method":"notifications/`) {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
	})
	t.Cleanup(func() { close(release) }) // before the server stops
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	m, err := NewManager(ctx, []Server{hang.config()}, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("NewManager took %v with a 100ms context", d)
	}
	if got := m.Tools(); len(got) != 0 {
		t.Errorf("Tools() = %v", names(got))
	}
}

func TestStderrIsLogged(t *testing.T) {
	l := &lineLogger{log: testLogger(t)}
	for _, p := range []string{"one\ntw", "o\r\n", "\n", strings.Repeat("x", maxLine+10) + "\nlast"} {
		if n, err := l.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got := l.last(); got != strings.Repeat("x", maxLine) {
		t.Errorf("last line = %d bytes, want it capped at %d", len(got), maxLine)
	}
}

func TestHTTPCallInFlightWhenTheServerRestartsIsNotRunAgain(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("protocol="+version, func(t *testing.T) {
			noLeaks(t)
			h := newHTTPServer(t, "web", nil)
			m := newManager(t, Options{ProtocolVersion: version}, h.config())
			done := make(chan error, 1)
			go func() {
				_, err := m.Call(testCtx(t), tool.Call{ID: "slow1", Name: "web__slow", Input: []byte(`{}`)})
				done <- err
			}()
			old := h.current()
			if n := old.WaitStarted(testCtx(t), 1); n != 1 {
				t.Fatalf("slow calls started: %d", n)
			}
			h.restart()
			err := <-done
			t.Logf("in flight: %v", err)
			if err == nil || !strings.HasPrefix(err.Error(), `MCP server "web": `) {
				t.Errorf("call in flight during the restart: %v, want an error naming the server", err)
			}
			// The new server never saw it: a call that may have run is not
			// run again behind the model's back. (Had it been sent again,
			// that would have been before the error came back.)
			ctx, cancel := context.WithCancel(testCtx(t))
			cancel()
			if n := h.current().WaitStarted(ctx, 1); n != 0 {
				t.Errorf("the restarted server ran slow %d times", n)
			}
			if got := call(t, m, "web__echo", `{"text":"after"}`).Output; got != "after" {
				t.Errorf("echo after the restart = %q", got)
			}
		})
	}
}

func TestResultMapping(t *testing.T) {
	s := &server{cfg: Server{Name: "calc"}}
	cases := []struct {
		name string
		res  *sdk.CallToolResult
		want tool.Result
	}{
		{"empty", &sdk.CallToolResult{}, tool.Result{}},
		{"texts", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: ""}, &sdk.TextContent{Text: "b"}}},
			tool.Result{Output: "a\n\nb"}},
		{"link", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ResourceLink{URI: "file:///x", Name: "x"}}},
			tool.Result{Output: `{"type":"resource_link","uri":"file:///x","name":"x"}`}},
		{"structured only", &sdk.CallToolResult{StructuredContent: map[string]any{"sum": 3}},
			tool.Result{Output: `{"sum":3}`}},
		{"structured beside content", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "3"}}, StructuredContent: map[string]any{"sum": 3}},
			tool.Result{Output: "3"}},
		{"error", &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "division by zero"}}},
			tool.Result{Output: "division by zero", IsError: true}},
		{"silent error", &sdk.CallToolResult{IsError: true},
			tool.Result{Output: `MCP server "calc": tool "divide" failed without saying why`, IsError: true}},
	}
	for _, c := range cases {
		if got := s.result("divide", c.res); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
