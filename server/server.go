// Package server is Rein's HTTP API (docs/api.md): sessions, runs, submitted
// events, the event log by page and as Server-Sent Events, bearer-token
// authentication, health and Prometheus metrics, and the graceful shutdown
// of `rein serve`.
//
// It exists to put the sessions service on the wire and nothing more: every
// decision about runs (admission, queueing, stops, idempotency) is the
// service's, so HTTP clients get exactly what Go callers get. What the
// server owns is the wire contract — routing, request validation with exact
// error parameters, status codes and JSON shapes — and the request
// lifecycle: a request never owns a run it starts (DESIGN.md rule 3), so a
// client that disconnects, or closes its event stream, stops nothing.
//
// Everything a client sees comes from the event log (rule 1): the stream is
// "read the log after the cursor, wait, read again", so a reconnect with
// Last-Event-ID resumes with no gap and no duplicate, whichever instance
// serves it.
//
// A Server holds no process-wide state: metrics go to its own registry and
// shutdown is driven by the context given to Serve, so tests run several
// servers in one process.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/server/web"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// Config configures a Server.
type Config struct {
	// Service is the sessions service the API exposes (required).
	Service *sessions.Service
	// Outbox is the store's webhook outbox, for /api/webhooks (nil: no
	// webhook ever delivered; the list is empty).
	Outbox store.Outbox
	// Tokens maps bearer tokens to owners. Nil or empty is single-user
	// mode: every request is owner "local" and needs no token (and
	// `rein serve` then refuses a non-loopback address).
	Tokens map[string]string
	// Logger receives request logs (nil: discard).
	Logger *slog.Logger
	// Metrics are the server's collectors; pass the ones given to the
	// service as its Observer (see NewMetrics). Nil creates fresh ones in
	// Registry.
	Metrics *Metrics
	// Registry is where fresh Metrics are registered when Metrics is nil
	// (nil: a new registry). Never the process-wide default registry.
	Registry *prometheus.Registry
	// TracerProvider makes one span per request (nil: no tracing); pass
	// the service's, so runs link to the requests that admitted them.
	TracerProvider trace.TracerProvider
	// Heartbeat is the longest an event stream stays silent: a comment
	// line is sent after this long without events (default 15 s).
	Heartbeat time.Duration
	// DrainTimeout is how long Serve's graceful shutdown lets interrupted
	// runs finish before cancelling them (default 10 s).
	DrainTimeout time.Duration
	// ShutdownTimeout bounds the last phase of Serve's shutdown, waiting
	// for in-flight requests once runs are drained (default 5 s).
	ShutdownTimeout time.Duration
	// TLSCertFile and TLSKeyFile are PEM files of a certificate (with its
	// chain) and its key: both set, Serve answers HTTPS only, and re-reads
	// the files when they change. Both or neither.
	TLSCertFile, TLSKeyFile string
	// CORSOrigins are the origins (scheme://host[:port]) whose web pages
	// may call the API from a browser. Empty: CORS is off and no answer
	// carries a CORS header. "*" allows any origin, and only with Tokens.
	CORSOrigins []string
	// MaxStreamsPerOwner caps each owner's open event streams; one more
	// is answered 429 too_many_requests (0: DefaultMaxStreamsPerOwner;
	// negative: no cap).
	MaxStreamsPerOwner int
	// ReadTimeout bounds reading one request, its body included
	// (default DefaultReadTimeout); it ends once the request is read, so
	// event streams and slow answers outlive it.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (default
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Protocols are adapters of foreign wire protocols (docs/protocols.md),
	// each answering everything under its prefix on the same listener,
	// behind the same authentication (a token from Authorization: Bearer
	// or x-api-key), metrics, limits and shutdown as /api. Prefixes must
	// be distinct and may not be /api, /console, /healthz, /readyz or
	// /metrics.
	Protocols []protocol.Mount
}

// Server is the HTTP API. It is an http.Handler; Serve runs it on a
// listener with graceful shutdown.
type Server struct {
	svc       *sessions.Service
	outbox    store.Outbox
	auth      *authenticator
	log       *slog.Logger
	metrics   *Metrics
	tracing   *tracing // nil: tracing off
	heartbeat time.Duration
	drain     time.Duration
	shutdown  time.Duration
	mux       *http.ServeMux
	routes    []Route
	protocols []protocol.Mount
	// Serving beyond loopback (tls.go, cors.go, limits.go).
	certs       *certFiles // nil: plain HTTP
	corsPolicy  *corsPolicy
	streamLimit *streamLimit
	readTimeout time.Duration
	idleTimeout time.Duration

	// streams is the parent of every event stream's lifetime: cancelling
	// it (Close, or the end of Serve's drain) ends them all after a last
	// catch-up read, so a closing server never hangs on a stream.
	streams     context.Context
	stopStreams context.CancelFunc
	streamMu    sync.Mutex
	closed      bool // no new streams; guarded by streamMu
	streamWG    sync.WaitGroup
}

// Route is one method and path pattern the server answers.
type Route struct {
	Method string
	// Path is a net/http pattern path, e.g. /api/sessions/{id}/runs/{run_id}.
	Path string
	// Public routes need no token.
	Public bool
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("server: Config.Service is required")
	}
	auth, err := newAuthenticator(cfg.Tokens)
	if err != nil {
		return nil, err
	}
	certs, err := loadCertFiles(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return nil, err
	}
	cors, err := newCORS(cfg.CORSOrigins, auth.singleUser())
	if err != nil {
		return nil, err
	}
	m := cfg.Metrics
	if m == nil {
		if m, err = NewMetrics(cfg.Registry); err != nil {
			return nil, err
		}
	} else if cfg.Registry != nil && cfg.Registry != m.reg {
		return nil, errors.New("server: Config.Registry differs from the registry of Config.Metrics")
	}
	if err := m.bind(cfg.Service.Stats); err != nil {
		return nil, err
	}
	if err := checkMounts(cfg.Protocols); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	s := &Server{
		svc:       cfg.Service,
		auth:      auth,
		log:       cfg.Logger,
		metrics:   m,
		tracing:   newTracing(cfg.TracerProvider),
		heartbeat: cfg.Heartbeat,
		drain:     cfg.DrainTimeout,
		shutdown:  cfg.ShutdownTimeout,
		mux:       http.NewServeMux(),

		certs:       certs,
		corsPolicy:  cors,
		streamLimit: newStreamLimit(cfg.MaxStreamsPerOwner),
		readTimeout: cfg.ReadTimeout,
		idleTimeout: cfg.IdleTimeout,
		protocols:   slices.Clone(cfg.Protocols),
		outbox:      cfg.Outbox,
	}
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	metricsHandler := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	s.handle("GET", "/healthz", true, s.healthz)
	s.handle("GET", "/readyz", true, s.readyz)
	s.handle("GET", "/metrics", true, metricsHandler.ServeHTTP)
	s.handle("GET", "/api/agents", false, s.listAgents)
	s.handle("POST", "/api/sessions", false, s.createSession)
	s.handle("GET", "/api/sessions", false, s.listSessions)
	s.handle("GET", "/api/sessions/{id}", false, s.getSession)
	s.handle("PATCH", "/api/sessions/{id}", false, s.updateSession)
	s.handle("DELETE", "/api/sessions/{id}", false, s.deleteSession)
	s.handle("GET", "/api/sessions/{id}/subagents", false, s.listSubagents)
	s.handle("GET", "/api/sessions/{id}/runs", false, s.listRuns)
	s.handle("GET", "/api/sessions/{id}/runs/{run_id}", false, s.getRun)
	s.handle("PATCH", "/api/sessions/{id}/runs/{run_id}", false, s.editRun)
	s.handle("POST", "/api/sessions/{id}/runs/{run_id}/promote", false, s.promoteRun)
	s.handle("POST", "/api/sessions/{id}/events", false, s.postEvents)
	s.handle("GET", "/api/sessions/{id}/events", false, s.listEvents)
	s.handle("GET", "/api/sessions/{id}/events/stream", false, s.streamEvents)
	s.handle("GET", "/api/confirmations", false, s.listConfirmations)
	s.handle("GET", "/api/webhooks/deliveries", false, s.listDeliveries)
	s.handle("POST", "/api/webhooks/deliveries/{id}/retry", false, s.retryDelivery)
	// The web console (docs/console.md): GET / and its assets under /console/,
	// public like /healthz. Registered on the mux directly, not with
	// handle: Routes lists the API that docs/openapi.yaml documents, and
	// the console is a client of that API, not a part of it.
	console := web.Handler()
	s.mux.Handle("GET /{$}", console)
	s.mux.Handle("GET "+web.Prefix, console)
	return s, nil
}

func (s *Server) handle(method, path string, public bool, h http.HandlerFunc) {
	s.routes = append(s.routes, Route{Method: method, Path: path, Public: public})
	s.mux.HandleFunc(method+" "+path, h)
}

// Routes lists what the server answers (for docs and their tests).
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// Observer returns the sessions.Observer that feeds this server's metrics
// (the Metrics given in Config, or the ones New created).
func (s *Server) Observer() sessions.Observer { return s.metrics }

// Metrics returns the server's collectors.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Close ends every open event stream (after a last read of the log) and
// waits for them to return; later stream requests get 503. It does not
// touch the service or any run. Serve calls it after draining; a test
// serving through httptest calls it before closing the test server, whose
// Close otherwise waits for streams that never end on their own.
func (s *Server) Close() error {
	s.streamMu.Lock()
	s.closed = true
	s.streamMu.Unlock()
	s.stopStreams()
	s.streamWG.Wait()
	return nil
}

// joinStreams counts a new stream in, unless the server is closing.
func (s *Server) joinStreams() bool {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.closed {
		return false
	}
	s.streamWG.Add(1)
	return true
}

// ------------------------------------------------------------ the request

// reqInfo is what a request's log line says; handlers fill in what they
// learn (session, run).
type reqInfo struct {
	id      string
	owner   string
	session string
	run     string
	stream  bool
	errCode rein.Code
}

type infoKey struct{}

func infoOf(ctx context.Context) *reqInfo {
	if i, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

// ownerOf returns the authenticated owner of the request.
func ownerOf(r *http.Request) string { return infoOf(r.Context()).owner }

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID keeps a caller's X-Request-Id when it is a sane token, so a
// proxy's id follows the request into our logs, and makes one otherwise.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); validRequestID.MatchString(v) {
		return v
	}
	return id.New("req_")
}

// statusWriter remembers the status for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets event streams flush through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP implements http.Handler: request id, authentication of /api
// routes, routing with JSON 404/405 answers, panic recovery, metrics and
// one log line per request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &reqInfo{id: requestID(r)}
	w.Header().Set("X-Request-Id", info.id)
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
	r, span := s.tracing.start(r)
	sw := &statusWriter{ResponseWriter: w}
	route := "unmatched"
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "request_id", info.id, "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if sw.status == 0 {
				s.writeError(sw, r, rein.Errorf(rein.CodeInternal, "panic"), nil)
			}
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		d := time.Since(start)
		s.metrics.observeRequest(r.Method, route, status, d, info.stream)
		s.tracing.end(span, r.Method, route, status)
		level := slog.LevelInfo
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{
			slog.String("request_id", info.id), slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("duration", d),
		}
		for _, kv := range [][2]string{{"owner", info.owner}, {"session", info.session}, {"run", info.run}, {"code", string(info.errCode)}, {"trace_id", traceID(span)}} {
			if kv[1] != "" {
				attrs = append(attrs, slog.String(kv[0], kv[1]))
			}
		}
		s.log.LogAttrs(context.Background(), level, "http request", attrs...)
	}()

	if s.cors(sw, r) {
		route = "(cors preflight)"
		return
	}
	if m := s.mountOf(r.URL.Path); m != nil {
		route = s.serveProtocol(sw, r, m)
		return
	}
	if r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/") {
		owner, ok := s.auth.owner(r.Header.Get("Authorization"))
		if !ok {
			route = "/api (unauthenticated)"
			s.writeError(sw, r, rein.Errorf(rein.CodeUnauthenticated, "a valid bearer token is required (Authorization: Bearer TOKEN)"), nil)
			return
		}
		info.owner = owner
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		route = s.noRoute(sw, r)
		return
	}
	s.mux.ServeHTTP(sw, r)
	if p := r.Pattern; p != "" {
		route = p[strings.IndexByte(p, ' ')+1:]
	}
}

// noRoute answers a request no pattern matches: 405 with Allow when the
// path exists under other methods, 404 otherwise, both as JSON errors. It
// returns the route to count the request under: the path's pattern for a
// 405 (a wrong method on a known path), "unmatched" for a 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) string {
	var allow []string
	route := "unmatched"
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		alt := *r
		alt.Method = m
		if _, p := s.mux.Handler(&alt); p != "" {
			if len(allow) == 0 {
				route = p[strings.IndexByte(p, ' ')+1:]
			}
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		s.writeError(w, r, rein.Errorf(rein.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path), nil)
		return route
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	status, body := http.StatusMethodNotAllowed, errorBody{
		// docs/api.md has no code of its own for this; the request is what is
		// wrong, so it is invalid_argument (decision 0050).
		Code:      rein.CodeInvalidArgument,
		Message:   "method " + r.Method + " is not allowed on " + r.URL.Path + "; allowed: " + strings.Join(allow, ", "),
		Param:     "method",
		RequestID: infoOf(r.Context()).id,
	}
	infoOf(r.Context()).errCode = body.Code
	writeJSON(w, status, map[string]any{"error": body})
	return route
}
