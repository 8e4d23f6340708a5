package load

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
)

// target is the server under load and how to observe it.
type target struct {
	// url is the server's root.
	url string
	// inProcess is true when Run started the server itself: then the
	// script is known (and checked), and the measurements of CPU and
	// memory cover this whole process, the load client included.
	inProcess bool
	// store describes the in-process server's store (a DSN's password
	// redacted); "" for a remote server.
	store string
	// probe samples the server's CPU, memory and counters.
	probe probe
	// hc is the HTTP client every request and stream uses.
	hc *http.Client
	// closeFn releases the target (for an in-process server, stops it).
	closeFn func()
}

func (t *target) close() {
	t.hc.CloseIdleConnections()
	if t.closeFn != nil {
		t.closeFn()
	}
}

// newHTTPClient is a client for many concurrent sessions. The default
// transport keeps only two idle connections per host, so at a few hundred
// sessions most requests would pay for a new TCP connection and the
// figures would measure connection setup, not Rein. HTTP/2 is off: over
// TLS it would multiplex every event stream onto one connection, whose
// stream limit (250 for a Go server) would stall the streams beyond it;
// with HTTP/1.1 each stream has its connection, as in the plain-HTTP case.
func newHTTPClient(conns int) *http.Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: tr}
}

// checkURL validates Options.URL.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return rein.InvalidArgument("url", "want the server's root, such as http://127.0.0.1:8080, got %q", raw)
	}
	return nil
}

// openTarget connects to o.URL, or starts a server in this process.
func openTarget(ctx context.Context, o Options) (*target, error) {
	hc := newHTTPClient(o.Concurrency)
	if o.URL != "" {
		root := strings.TrimRight(o.URL, "/")
		t := &target{url: root, hc: hc, probe: &scrapeProbe{url: root, hc: hc}}
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := pingServer(hctx, t); err != nil {
			t.close()
			return nil, err
		}
		return t, nil
	}
	return startInProcess(ctx, o, hc)
}

// pingServer checks that the server answers /readyz.
func pingServer(ctx context.Context, t *target) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url+"/readyz", nil)
	if err != nil {
		return rein.InvalidArgument("url", "%v", err)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return rein.Errorf(rein.CodeUnavailable, "rein bench: the server at %s does not answer: %w", t.url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rein.Errorf(rein.CodeUnavailable, "rein bench: the server at %s is not ready (GET /readyz: %s)", t.url, resp.Status)
	}
	return nil
}

// startInProcess assembles what `rein serve --model scripted:…` runs — the
// store, the scripted model with the built-in tools, the agent loop, the
// sessions service and the HTTP server with its Go and process metrics —
// and serves it on a loopback port.
func startInProcess(ctx context.Context, o Options, hc *http.Client) (_ *target, err error) {
	var cleanups []func()
	undo := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			hc.CloseIdleConnections()
			undo()
		}
	}()

	spec, shown := o.Store, o.Store
	if spec == "" {
		dir, err := os.MkdirTemp("", "rein-bench-*")
		if err != nil {
			return nil, fmt.Errorf("rein bench: temporary store: %w", err)
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		spec, shown = "sqlite:"+filepath.Join(dir, "bench.db"), "sqlite (temporary file)"
	}
	shown = backend.Redact(shown)
	st, err := backend.Open(ctx, spec, backend.Options{})
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { st.Close() })

	m, err := scripted.Parse("rein-bench.yaml", o.Script())
	if err != nil {
		return nil, fmt.Errorf("rein bench: the generated script: %w", err)
	}
	logger := slog.New(slog.DiscardHandler)
	if o.ServerLog != "" {
		f, err := os.OpenFile(o.ServerLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, rein.InvalidArgument("server-log", "%v", err)
		}
		cleanups = append(cleanups, func() { f.Close() })
		logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	tools, err := tool.NewRegistry(tool.RegistryOptions{Logger: logger}, builtin.All()...)
	if err != nil {
		return nil, err
	}
	loop, err := agent.New(agent.Config{Model: m, Tools: tools, Logger: logger})
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	metrics, err := server.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	svc, err := sessions.New(sessions.Config{Store: st, Agent: loop, Logger: logger, Observer: metrics})
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Config{Service: svc, Logger: logger, Metrics: metrics})
	if err != nil {
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, fmt.Errorf("rein bench: start the sessions service: %w", err)
	}
	cleanups = append(cleanups, func() { svc.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("rein bench: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln)
	}()
	// The order of rein serve's shutdown: runs end (their completions
	// reach the log), then streams after a last read, then connections,
	// then the store.
	cleanups[len(cleanups)-1] = func() {
		svc.Close()
		srv.Close()
		hs.Close()
		<-served
	}
	t := &target{
		url:       "http://" + ln.Addr().String(),
		inProcess: true,
		store:     shown,
		probe:     &selfProbe{reg: reg},
		hc:        hc,
	}
	t.closeFn = undo
	return t, nil
}
