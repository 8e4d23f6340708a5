package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/telemetry"
)

const serveSynopsis = "rein serve [--addr HOST:PORT] [--store S] [--model M] [--tokens FILE] [--config FILE] [flags]"

const serveAbout = `Serves Rein's HTTP API (sessions, runs, events, SSE) and the web console until
SIGINT or SIGTERM, then shuts down gracefully: running runs are interrupted
(cancelled after --drain-timeout), queued runs stay queued for the next start.
Without --tokens it runs in single-user mode (owner "local", no token needed)
and listens only on a loopback address. The log goes to stderr.`

// minTokenLength is the length below which a token draws a warning: a
// short token is guessable.
const minTokenLength = 16

// serveFlags are the flags of `rein serve`.
type serveFlags struct {
	fs             *flagSet
	addr           *string
	store          *string
	model          *string
	tokens         *string
	confirm        optionalString
	drain          *time.Duration
	workspace      *string
	leaseTTL       *time.Duration
	resumeAttempts *int
	config         *string
	maxSteps       *int
	maxDepth       *int
	instanceID     *string
	logLevel       *choice
	logFormat      *choice
	tlsCert        *string
	tlsKey         *string
	corsOrigin     *string
	maxStreams     *int
	retention      *time.Duration
	confirmTTL     *time.Duration
	maxRuns        *int
	maxPending     *int
	wakeParents    *bool
	pprofAddr      *string
	protocols      *string
}

func newServeFlags(std stdio) *serveFlags {
	fs := newFlagSet(std, "serve", serveSynopsis, serveAbout)
	f := &serveFlags{
		fs:             fs,
		addr:           fs.String("addr", "127.0.0.1:8080", "`HOST:PORT` to listen on; without --tokens only a loopback address is allowed"),
		store:          fs.String("store", "sqlite:./rein.db", "where to keep sessions (`STORE`): sqlite:PATH, postgres://... or memory:"),
		model:          fs.String("model", "demo", "the `MODEL` of agents that name none: demo, scripted:PATH, openai:NAME, ollama:NAME, anthropic:NAME"),
		tokens:         fs.String("tokens", "", "`FILE` of tokens: one \"TOKEN OWNER\" per line, # comments (none: single-user mode, owner \"local\")"),
		drain:          fs.Duration("drain-timeout", 10*time.Second, "on shutdown, how long interrupted runs may take before they are cancelled"),
		workspace:      fs.String("workspace", "./rein-workspace", "`DIR` for files tools write"),
		leaseTTL:       fs.Duration("lease-ttl", 15*time.Second, "turn lease TTL: the runs of a lost instance are taken over (resumed, or failed once out of resume attempts) when their lease expires, within about this long"),
		resumeAttempts: fs.Int("resume-attempts", 2, "how often a run whose instance was lost is resumed before it ends failed (0: never resumed)"),
		config:         fs.String("config", "", "configuration `FILE` (YAML): agents and MCP servers (see rein.example.yaml); without one, a single agent \"default\" from these flags"),
		maxSteps:       fs.Int("max-steps", 25, "model requests per run, for agents that set no max_steps"),
		maxDepth:       fs.Int("max-depth", 3, "how deep agents may delegate to subagents (a root session is depth 0)"),
		instanceID:     fs.String("instance-id", "", "this instance's `NAME` among instances sharing the store, in logs and metrics only (default: a fresh id)"),
		tlsCert:        fs.String("tls-cert", "", "PEM `FILE` of the certificate (with its chain): with --tls-key, serve HTTPS only; re-read when it changes"),
		tlsKey:         fs.String("tls-key", "", "PEM `FILE` of the certificate's private key (with --tls-cert)"),
		corsOrigin:     fs.String("cors-origin", "", "comma-separated `ORIGINS` (scheme://host[:port]) whose web pages may call the API; \"*\" any, only with --tokens (none: CORS off)"),
		maxStreams:     fs.Int("max-streams-per-owner", server.DefaultMaxStreamsPerOwner, "event streams each owner may have open at once; one more is answered 429 (negative: no cap)"),
		retention:      fs.Duration("retention", 0, "delete root sessions, with their subagents, once idle longer than this, e.g. 720h (0: keep them)"),
		confirmTTL:     fs.Duration("confirmation-ttl", 0, "how long a tool confirmation waits for an answer before the call is denied as \"expired\", e.g. 1h, for agents that set no confirm_ttl (0: it waits for ever)"),
		maxRuns:        fs.Int("max-runs-in-flight", sessions.DefaultMaxRunsInFlight, "runs this instance holds at once (running or queued); beyond it a message is answered 503 with Retry-After (negative: no bound)"),
		maxPending:     fs.Int("max-pending-writes", 0, "writes waiting for the store beyond which new runs and sessions are answered 503 with Retry-After (0: the store's writer queue size; negative: no bound)"),
		wakeParents:    fs.Bool("wake-parents", false, "when a background subagent finishes, start a run of its parent session if the parent is idle, so it reacts to the subagent's note at once (default: the note waits for the parent's next message)"),
		pprofAddr:      fs.String("pprof-addr", "", "loopback `HOST:PORT` on which to serve Go's profiles (/debug/pprof/) for diagnosing the server's CPU and memory (none: off)"),
		protocols:      fs.String("protocols", strings.Join(app.Protocols(), ","), "comma-separated wire `PROTOCOLS` to serve beside the native API, each under its prefix: anthropic (/v1, the Claude Managed Agents sessions API), a2a (/a2a, A2A 1.0, and the default agent's card at /.well-known/agent-card.json), ai-sdk (/ai-sdk, the AI SDK useChat protocol), ag-ui (/ag-ui, AG-UI 1.0), langgraph (/langgraph, LangGraph's Agent Server API); none for none"),
		logLevel:       newChoice("info", "debug", "info", "warn", "error"),
		logFormat:      newChoice("text", "text", "json"),
	}
	fs.Var(&f.confirm, "confirm", "comma-separated `TOOLS` that need confirmation (replaces the default set; \"\" for none)")
	fs.Var(f.logLevel, "log-level", "the least important log records written (`LEVEL`): debug, info, warn or error")
	fs.Var(f.logFormat, "log-format", "how log records are written (`FORMAT`): text (key=value) or json (one object a line)")
	return f
}

// parse parses and checks the flags.
func (f *serveFlags) parse(args []string, std stdio) error {
	fs := f.fs
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	switch {
	case !validListenAddr(*f.addr):
		return fs.invalid("addr", "not a listen address; use HOST:PORT, e.g. 127.0.0.1:8080 (port 0 picks a free one; :8080 is every interface)")
	case *f.drain <= 0:
		return fs.invalid("drain-timeout", "must be a positive duration such as 10s")
	case *f.leaseTTL <= 0:
		return fs.invalid("lease-ttl", "must be a positive duration such as 15s")
	case *f.confirmTTL < 0:
		return fs.invalid("confirmation-ttl", "must be a duration ≥ 0 such as 1h (0: confirmations never expire)")
	case *f.resumeAttempts < 0:
		return fs.invalid("resume-attempts", "must be a whole number ≥ 0, e.g. 2 (0: never resume)")
	case *f.maxDepth < 1:
		return fs.invalid("max-depth", "must be at least 1, e.g. 3")
	case *f.maxSteps < 1:
		return fs.invalid("max-steps", "must be at least 1, e.g. 25")
	case (*f.tlsCert == "") != (*f.tlsKey == ""):
		return usagef("%s and %s go together: give both (a PEM certificate and its key) to serve HTTPS, or neither", fs.label("tls-cert"), fs.label("tls-key"))
	case *f.maxStreams == 0:
		return fs.invalid("max-streams-per-owner", "must be at least 1, e.g. %d (or negative for no cap)", server.DefaultMaxStreamsPerOwner)
	case *f.retention < 0:
		return fs.invalid("retention", "must be a duration ≥ 0, e.g. 720h (0: keep sessions)")
	case *f.maxRuns == 0:
		return fs.invalid("max-runs-in-flight", "must be at least 1, e.g. %d (or negative for no bound)", sessions.DefaultMaxRunsInFlight)
	case *f.pprofAddr != "" && (!validListenAddr(*f.pprofAddr) || !loopbackAddr(*f.pprofAddr)):
		return fs.invalid("pprof-addr", "must be a loopback HOST:PORT such as 127.0.0.1:6060: profiles reveal the server's memory, so they are never served on another interface")
	}
	if _, err := app.ParseProtocols(*f.protocols); err != nil {
		return fs.invalid("protocols", "%s", message(err))
	}
	return nil
}

// corsOrigins is the --cors-origin list (nil: CORS off).
// protocolNames is the --protocols list (checked by parse).
func (f *serveFlags) protocolNames() []string {
	names, _ := app.ParseProtocols(*f.protocols)
	return names
}

func (f *serveFlags) corsOrigins() []string {
	var out []string
	for _, o := range strings.Split(*f.corsOrigin, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// logger builds the server's logger from --log-level and --log-format.
func (f *serveFlags) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
	}[f.logLevel.val]}
	if f.logFormat.val == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// cmdServe is `rein serve`: the HTTP API of docs/api.md on one listener until
// SIGINT or SIGTERM, then a graceful shutdown (exit 0).
func cmdServe(ctx context.Context, args []string, std stdio) error {
	f := newServeFlags(std)
	if err := f.parse(args, std); err != nil {
		return err
	}
	if *f.instanceID == "" {
		*f.instanceID = id.New("ins_")
	}
	// The instance names itself in logs and metrics only, never to clients.
	logger := f.logger(std.err).With("instance", *f.instanceID)

	var tokens map[string]string
	if *f.tokens != "" {
		var err error
		if tokens, err = server.LoadTokens(*f.tokens); err != nil {
			return usagef("%s: %v", f.fs.label("tokens"), err)
		}
	}
	// Check the address before opening anything, and again once bound
	// (a host name may resolve to anything).
	if len(tokens) == 0 && !loopbackAddr(*f.addr) {
		return usagef("refusing to listen on %s without --tokens: single-user mode (no tokens) serves every request as owner %q, so it only listens on a loopback address such as 127.0.0.1:8080", *f.addr, server.LocalOwner)
	}
	warnShortTokens(logger, tokens)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or its traces
	// variant) is set; the provider is flushed after the drain.
	tp, shutdownTracing, err := telemetry.FromEnv(ctx, std.lookupEnv, buildVersion())
	if err != nil {
		return usagef("tracing: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			logger.Warn("flush traces", "err", err)
		}
	}()
	rt, err := openRuntime(ctx, app.Options{
		Store: *f.store, Model: *f.model, Confirm: f.confirm.confirm(), Workspace: *f.workspace,
		ConfigFile: *f.config, MaxSteps: *f.maxSteps, Instance: *f.instanceID, MaxDepth: *f.maxDepth, WakeParents: *f.wakeParents,
		LeaseTTL: *f.leaseTTL, ConfirmTTL: *f.confirmTTL, ResumeAttempts: resumeOption(*f.resumeAttempts), Logger: logger, LookupEnv: std.lookupEnv,
		Retention: *f.retention, MaxRunsInFlight: *f.maxRuns, MaxPendingWrites: *f.maxPending,
		TracerProvider: tp, Registry: reg,
		Tokens: tokens, DrainTimeout: *f.drain, TLSCertFile: *f.tlsCert, TLSKeyFile: *f.tlsKey,
		CORSOrigins: f.corsOrigins(), MaxStreamsPerOwner: *f.maxStreams, Protocols: f.protocolNames(),
	}, f.fs)
	if err != nil {
		return err
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", *f.addr)
	if err != nil {
		return err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); len(tokens) == 0 && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		return usagef("refusing %s (bound to %s) without --tokens: single-user mode only listens on a loopback address such as 127.0.0.1:8080", *f.addr, ln.Addr())
	}
	mode := "tokens"
	if len(tokens) == 0 {
		mode = "single-user (owner " + server.LocalOwner + ")"
	}
	scheme := "http://"
	if *f.tlsCert != "" {
		scheme = "https://"
	}
	logger.Info("rein serve listening", "url", scheme+ln.Addr().String(), "store", backend.Redact(*f.store), "model", *f.model, "auth", mode)

	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *f.pprofAddr != "" {
		closeProfiles, err := serveProfiles(*f.pprofAddr, logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer closeProfiles()
	}
	return rt.Serve(sigCtx, ln)
}

// warnShortTokens warns about every token shorter than minTokenLength,
// naming its owner and its length, never the token.
func warnShortTokens(logger *slog.Logger, tokens map[string]string) {
	type short struct {
		owner string
		n     int
	}
	var found []short
	for tok, owner := range tokens {
		if len(tok) < minTokenLength {
			found = append(found, short{owner, len(tok)})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].owner != found[j].owner {
			return found[i].owner < found[j].owner
		}
		return found[i].n < found[j].n
	})
	for _, s := range found {
		logger.Warn("short token: it can be guessed; use a random one of at least 16 characters", "owner", s.owner, "length", s.n, "min_length", minTokenLength)
	}
}

// resumeOption turns a --resume-attempts value into
// app.Options.ResumeAttempts, where 0 means the default: the flag's 0
// (never resume) becomes -1.
func resumeOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// validListenAddr reports whether addr is HOST:PORT with a port number
// (the host may be empty: every interface).
func validListenAddr(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535 && (host == "" || !containsSpace(host))
}

func containsSpace(s string) bool {
	for _, r := range s {
		if r == ' ' || r == '\t' {
			return true
		}
	}
	return false
}

// loopbackAddr reports whether a listen address names only the loopback
// interface. An empty host (":8080") means every interface: not loopback.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
