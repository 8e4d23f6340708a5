package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/mcp/internal/testserver"
)

// testserverBin is the stdio test server, built by TestMain.
var testserverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rein-mcp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testserverBin = filepath.Join(dir, "testserver")
	build := exec.Command("go", "build", "-o", testserverBin, "./internal/testserver/cmd/testserver")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the stdio test server: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// noLeaks makes t fail if goroutines outlive it; call it first, so that
// its check runs after every other cleanup.
func noLeaks(t testing.TB) {
	t.Cleanup(func() {
		if !t.Failed() {
			goleak.VerifyNone(t)
		}
	})
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stdio configures the test server binary as server name.
func stdio(name string, args ...string) Server {
	return Server{Name: name, Command: append([]string{testserverBin, "-name", name}, args...)}
}

// testLogger sends the Manager's log to t.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tLogWriter struct{ t testing.TB }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newManager starts a Manager that the test closes at its end.
func newManager(t testing.TB, opts Options, servers ...Server) *Manager {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.RetryMin == 0 {
		opts.RetryMin, opts.RetryMax = 10*time.Millisecond, 100*time.Millisecond
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 2 * time.Second
	}
	m, err := NewManager(testCtx(t), servers, opts)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

func toolNamed(t testing.TB, m *Manager, name string) tool.Tool {
	t.Helper()
	for _, tl := range m.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q in %v", name, names(m.Tools()))
	return nil
}

func names(tools []tool.Tool) []string {
	out := make([]string, len(tools))
	for i, tl := range tools {
		out[i] = tl.Spec().Name
	}
	return out
}

// call calls name through m and fails t on a Go error.
func call(t testing.TB, m *Manager, name, input string) tool.Result {
	t.Helper()
	res, err := m.Call(testCtx(t), tool.Call{ID: "toolu_" + name, Name: name, Input: []byte(input)})
	if err != nil {
		t.Fatalf("%s(%s): %v", name, input, err)
	}
	return res
}

// callErr calls name and wants it to fail with an error naming server.
func callErr(t testing.TB, m *Manager, name, input, server string) error {
	t.Helper()
	res, err := m.Call(testCtx(t), tool.Call{ID: "toolu_x", Name: name, Input: []byte(input)})
	if err == nil {
		t.Fatalf("%s(%s) = %+v, want an error", name, input, res)
	}
	if want := fmt.Sprintf("MCP server %q: ", server); !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("%s(%s) error %q, want it to start with %q", name, input, err, want)
	}
	return err
}

// httpServer is the test server served in-process over streamable HTTP on
// a loopback port that survives restarts.
type httpServer struct {
	t     testing.TB
	name  string
	addr  string
	wrap  func(http.Handler) http.Handler
	stats *httpStats

	mu  sync.Mutex
	srv *testserver.Server
	hs  *http.Server
}

// httpStats counts what the handler saw.
type httpStats struct {
	mu          sync.Mutex
	initialized int // sessions that completed the handshake
	notFound    int // answers 404 (unknown session)
}

func (s *httpStats) get() (initialized, notFound int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized, s.notFound
}

func newHTTPServer(t testing.TB, name string, wrap func(http.Handler) http.Handler) *httpServer {
	t.Helper()
	h := &httpServer{t: t, name: name, wrap: wrap, stats: &httpStats{}}
	h.start("127.0.0.1:0")
	t.Cleanup(h.stop)
	return h
}

func (h *httpServer) url() string { return "http://" + h.addr + "/mcp" }

// config is h as a Server.
func (h *httpServer) config() Server { return Server{Name: h.name, URL: h.url()} }

// current is the SDK server now serving.
func (h *httpServer) current() *testserver.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.srv
}

func (h *httpServer) start(addr string) {
	h.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port of a server just closed may take a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		h.t.Fatalf("listen %s: %v", addr, err)
	}
	srv := testserver.New(h.name, testserver.Options{})
	stats := h.stats
	srv.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "notifications/initialized" || method == "server/discover" {
				stats.mu.Lock()
				stats.initialized++
				stats.mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	var handler http.Handler = sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv.Server }, nil)
	inner := handler
	handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(&statusRecorder{ResponseWriter: w, stats: stats}, r)
	})
	if h.wrap != nil {
		handler = h.wrap(handler)
	}
	hs := &http.Server{Handler: handler, ErrorLog: nil}
	go func() { _ = hs.Serve(ln) }()
	h.mu.Lock()
	h.addr, h.srv, h.hs = ln.Addr().String(), srv, hs
	h.mu.Unlock()
}

// stop kills the server: connections cut, sessions gone.
func (h *httpServer) stop() {
	h.mu.Lock()
	hs, srv := h.hs, h.srv
	h.hs = nil
	h.mu.Unlock()
	if hs == nil {
		return
	}
	_ = hs.Close()
	srv.Stop()
	for ss := range srv.Sessions() {
		_ = ss.Close()
	}
}

// restart stops the server and starts a new one, knowing no sessions, on
// the same address.
func (h *httpServer) restart() {
	h.stop()
	h.start(h.addr)
}

type statusRecorder struct {
	http.ResponseWriter
	stats *httpStats
}

func (r *statusRecorder) WriteHeader(code int) {
	if code == http.StatusNotFound {
		r.stats.mu.Lock()
		r.stats.notFound++
		r.stats.mu.Unlock()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// gate answers 503 while closed: a server that is down.
type gate struct {
	mu   sync.Mutex
	open bool
}

func (g *gate) set(open bool) {
	g.mu.Lock()
	g.open = open
	g.mu.Unlock()
}

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		if !open {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// waitFor blocks until cond holds, checking after every tools change
// signalled on ch, or fails t when ctx ends.
func waitFor(ctx context.Context, t testing.TB, ch <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, context.Cause(ctx))
		}
	}
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
