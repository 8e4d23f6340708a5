package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store/memory"
)

// Helpers of the tests of serving beyond loopback (TLS, CORS, timeouts,
// stream caps) and of error answers: stacks whose server.Config the test
// adjusts, and a log the test can read.

// configured is newStack with the server's Config adjusted by the test and,
// when wrap is set, its handler wrapped (to observe requests).
func configured(t *testing.T, o options, adjust func(*server.Config), wrap func(http.Handler) http.Handler) *stack {
	t.Helper()
	if o.store == nil {
		o.store = memory.New()
	}
	svc, metrics, err := assemble(o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Service: svc, Tokens: o.tokens, Logger: o.logger, Metrics: metrics, Heartbeat: o.heartbeat}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = svc.Close()
		_ = srv.Close()
		ts.Close()
		_ = o.store.Close()
	})
	return &stack{t: t, st: o.store, svc: svc, srv: srv, url: ts.URL}
}

// serveConfigured is serve (Serve on a loopback listener, as `rein serve`
// runs it) with the Config adjusted by the test; scheme is the URL's.
func serveConfigured(t *testing.T, o options, scheme string, adjust func(*server.Config)) *served {
	t.Helper()
	if o.store == nil {
		o.store = memory.New()
	}
	svc, metrics, err := assemble(o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Service: svc, Tokens: o.tokens, Logger: o.logger, Metrics: metrics, Heartbeat: o.heartbeat, DrainTimeout: 5 * time.Second}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	sv := &served{
		stack: &stack{t: t, st: o.store, svc: svc, srv: srv, url: scheme + "://" + ln.Addr().String()},
		stop:  stop,
		done:  make(chan error, 1),
	}
	go func() { sv.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		<-sv.done
		_ = o.store.Close()
	})
	return sv
}

var requestIDField = regexp.MustCompile(`"request_id":"[^"]*"`)

// withoutRequestID is an answer's body with its request id blanked: two
// answers that must be the same byte for byte still differ in it.
func withoutRequestID(body []byte) string {
	return requestIDField.ReplaceAllString(string(body), `"request_id":""`)
}

// logBuffer collects a JSON slog handler's records. slog's handlers write
// each record with one Write, so a line is a record.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// records decodes every record logged so far.
func (l *logBuffer) records(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Bytes())
		}
		out = append(out, rec)
	}
	return out
}

// newLog returns a debug-level JSON logger writing to a buffer.
func newLog() (*logBuffer, *slog.Logger) {
	lb := &logBuffer{}
	return lb, slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
