package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/catalog"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
	"github.com/reinhq/rein/tool/mcp"
	"github.com/reinhq/rein/tool/workspace"
)

// DefaultStore is the store of Options that name none: in memory, so a
// program that forgets to choose keeps no file it did not ask for.
const DefaultStore = "memory:"

// Options say what to assemble. The zero value is a working runtime: the
// offline demo model, an in-memory store, the built-in tools and one
// agent, "default". Each field is what a `rein serve` flag sets
// (docs/cli.md), named in its comment.
type Options struct {
	// Store is where sessions live (--store): "memory:" (DefaultStore),
	// "sqlite:PATH" or "postgres://…".
	Store string
	// Model is the model of agents that name none (--model): "demo"
	// (the default), "scripted:PATH", "openai:NAME", "ollama:NAME",
	// "anthropic:NAME", or a key of Models.
	Model string
	// Models are models given as values, by the name agents use for them
	// (Model, or an agent's model: in the configuration): a program's own
	// model, or a script parsed in memory. A name here is looked up before
	// the forms above.
	Models map[string]model.Model
	// Tools are the program's own tools (tool.Func), offered to agents
	// beside the built-in ones; a configuration's tools lists may name
	// them. Their names must differ from the built-ins'.
	Tools []tool.Tool
	// ConfigFile is a configuration file to read (--config): agents and
	// MCP servers, as in rein.example.yaml. Its mistakes are reported all
	// at once, as FILE:LINE: reason (a config.Errors in the chain).
	ConfigFile string
	// ConfigData is a configuration's text, for a program that carries it
	// (go:embed, say) instead of a file; it is checked like a file, and
	// named ConfigFile in errors when that is set. Empty: ConfigFile, or
	// without one a single agent, "default", made from these options.
	ConfigData []byte
	// Confirm replaces the set of tools that need a human's confirmation
	// (--confirm) when not nil; an empty, non-nil list confirms nothing.
	// Nil: the tools that ask for it (tool.RequireConfirmation, and the
	// built-ins marked so).
	Confirm []string
	// System is the system prompt of agents that set none.
	System string
	// MaxSteps is the step budget of agents that set none (--max-steps;
	// 0: 25).
	MaxSteps int
	// MaxDepth caps subagent delegation (--max-depth; 0: 3).
	MaxDepth int
	// WakeParents: a background subagent's end starts a run of its idle
	// parent (--wake-parents).
	WakeParents bool
	// Workspace is the root of the sessions' workspaces, where the file
	// tools work (--workspace; "": none, and those tools refuse).
	Workspace string
	// LeaseTTL is the turn lease TTL (--lease-ttl; 0: the default).
	LeaseTTL time.Duration
	// ConfirmTTL is how long a tool confirmation waits for an answer
	// before it expires, for agents that set no confirm_ttl
	// (--confirmation-ttl; 0: never).
	ConfirmTTL time.Duration
	// ResumeAttempts bounds how often a run of a lost instance is resumed
	// (0: the default, 2; negative: never), as
	// sessions.Config.ResumeAttempts. The flag's 0 is this field's -1.
	ResumeAttempts int
	// Instance names this instance among those sharing the store, in logs
	// and metrics only (--instance-id; "": a fresh id, see
	// Runtime.Instance).
	Instance string
	// Retention is how long an idle root session is kept (--retention; 0:
	// for ever).
	Retention time.Duration
	// MaxRunsInFlight and MaxPendingWrites are the admission bounds
	// (--max-runs-in-flight, --max-pending-writes), as in
	// sessions.Config.
	MaxRunsInFlight, MaxPendingWrites int
	// Logger receives every package's log (nil: discard).
	Logger *slog.Logger
	// TracerProvider makes the runs' and the requests' spans (nil: no
	// tracing).
	TracerProvider trace.TracerProvider
	// Registry is where the metrics are registered, served at /metrics
	// (nil: a registry of their own). Never the process-wide default.
	Registry *prometheus.Registry
	// LookupEnv reads the providers' settings (OPENAI_API_KEY, …; nil:
	// os.LookupEnv).
	LookupEnv func(string) (string, bool)

	// The HTTP API (Runtime.Handler, Runtime.Serve).

	// Tokens maps bearer tokens to owners (--tokens; none: single-user
	// mode, every request is owner "local"), as server.Config.Tokens.
	Tokens map[string]string
	// DrainTimeout is how long Serve's shutdown lets interrupted runs
	// finish before cancelling them (--drain-timeout; 0: 10 s).
	DrainTimeout time.Duration
	// TLSCertFile and TLSKeyFile are a PEM certificate and its key
	// (--tls-cert, --tls-key): both set, Serve answers HTTPS only.
	TLSCertFile, TLSKeyFile string
	// CORSOrigins are the origins whose web pages may call the API
	// (--cors-origin; none: CORS off).
	CORSOrigins []string
	// MaxStreamsPerOwner caps each owner's open event streams
	// (--max-streams-per-owner; 0: the server's default; negative: none).
	MaxStreamsPerOwner int
	// Protocols names the wire protocols served beside the native API,
	// each under its prefix (--protocols; see Protocols for the names):
	// nil serves all of them, an empty list none.
	Protocols []string
}

// OptionError is an Options field Open could not use. Err says why: an
// invalid_argument *rein.Error when the value itself is wrong (an unknown
// model or tool, a malformed store spec), config.Errors for a
// configuration's mistakes, or what failed when the value names something
// that did not answer (a database that is down).
type OptionError struct {
	// Option is the field's name: "Store", "Model", "Tools", "Confirm",
	// "ConfigFile", "TLSCertFile" (the pair) or "CORSOrigins".
	Option string
	Err    error
	// redact hides a store spec's password wherever Err's text quotes it.
	redact func(string) string
}

func (e *OptionError) Error() string {
	msg := e.Err.Error()
	if e.redact != nil {
		msg = e.redact(msg)
	}
	return "app: " + e.Option + ": " + msg
}

// Unwrap returns the reason.
func (e *OptionError) Unwrap() error { return e.Err }

// Runtime is an assembled Rein: the store, the models, the MCP servers and
// their tools, the agents and their subagent wiring, the sessions service
// over them, and the HTTP API over the service. Use it either way:
//
//   - in Go: Start, then Service(); Close when done;
//   - over HTTP: Serve on a listener (it starts the service and drains it
//     on the way out), or mount Handler() in a server of your own after
//     Start; Close when done.
type Runtime struct {
	instance string
	svc      *sessions.Service
	st       store.Store
	mcp      *mcp.Manager
	sub      *subagent.Manager
	srv      *server.Server
	logger   *slog.Logger
	// hooks delivers to the configured webhooks (nil: none), from Start
	// or Serve until Close (hooks.go).
	hooks *hookRunner

	mu      sync.Mutex
	started bool // Start or Serve took the service up
	served  bool // Serve drained it
	closed  bool
}

// Service is the sessions service: everything the HTTP API offers, in Go.
func (r *Runtime) Service() *sessions.Service { return r.svc }

// Store is the store the service writes to; the Runtime closes it.
func (r *Runtime) Store() store.Store { return r.st }

// Handler is the HTTP API (docs/api.md), the web console and /metrics.
// It answers once the service is started (Start); Close ends its event
// streams.
func (r *Runtime) Handler() http.Handler { return r.srv }

// Instance is this instance's name (Options.Instance, or the fresh id
// Open gave it).
func (r *Runtime) Instance() string { return r.instance }

// errStarted refuses a second Start or Serve.
var errStarted = errors.New("app: the runtime was already started")

// Start takes up the work the store holds (queued runs, runs of lost
// instances) and settles the subagents a crash left unsettled. Call it
// once, before using Service or Handler; Serve does it itself.
func (r *Runtime) Start(ctx context.Context) error {
	if err := r.begin(false); err != nil {
		return err
	}
	if err := r.svc.Start(ctx); err != nil {
		return err
	}
	if err := r.sub.Reconcile(ctx); err != nil {
		return fmt.Errorf("app: settle subagents: %w", err)
	}
	return nil
}

// Serve serves the HTTP API on ln until ctx is done, then shuts down
// gracefully (server.Server.Serve: running runs are interrupted, and
// cancelled after Options.DrainTimeout; queued runs stay queued). It
// starts the service itself, after writing the subagent settlements a
// crash skipped. Close afterwards.
func (r *Runtime) Serve(ctx context.Context, ln net.Listener) error {
	if err := r.begin(true); err != nil {
		ln.Close()
		return err
	}
	// Settlements a crash skipped are written before anything else runs
	// (writes only: the service starts with the server).
	if err := r.sub.Reconcile(ctx); err != nil {
		r.logger.Warn("settle subagents after a restart", "err", err)
	}
	return r.srv.Serve(ctx, ln)
}

func (r *Runtime) begin(serve bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("app: the runtime is closed")
	}
	if r.started {
		return errStarted
	}
	r.started, r.served = true, serve
	r.hooks.start()
	return nil
}

// Close stops what still runs (running runs are cancelled and their ends
// recorded; queued runs stay queued in the store), ends the HTTP event
// streams, and closes the MCP servers and the store. After Serve, whose
// drain already stopped the runs, it only releases. It returns the
// store's error on closing.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	startedHere := r.started && !r.served
	r.mu.Unlock()
	_ = r.srv.Close()
	if startedHere {
		_ = r.svc.Close()
	}
	r.hooks.stop()
	if r.mcp != nil {
		r.mcp.Close()
	}
	return r.st.Close()
}

// builtinTools are the tools every agent may be offered (docs/models.md).
func builtinTools() []tool.Tool { return append(builtin.All(), workspace.Tools()...) }

// Open assembles a Runtime from o: it opens the models, reads the
// configuration, connects the MCP servers, opens the store, and builds the
// sessions service and the HTTP API over them. Nothing runs until Start or
// Serve. A field it cannot use is an *OptionError naming it.
func Open(ctx context.Context, o Options) (*Runtime, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Model == "" {
		o.Model = "demo"
	}
	if o.Store == "" {
		o.Store = DefaultStore
	}
	instance := o.Instance
	if instance == "" {
		instance = id.New("ins_")
	}
	metrics, err := server.NewInstanceMetrics(o.Registry, instance)
	if err != nil {
		return nil, fmt.Errorf("app: metrics: %w", err)
	}
	env := catalog.Env{
		Getenv:  func(k string) string { v, _ := o.LookupEnv(k); return v },
		Logger:  o.Logger,
		OnRetry: metrics.ModelRetry,
	}
	var modelsMu sync.Mutex // Models is called by runs, concurrently
	models := map[string]model.Model{}
	openModel := func(spec string) (model.Model, error) {
		if m, ok := o.Models[spec]; ok {
			return m, nil
		}
		modelsMu.Lock()
		defer modelsMu.Unlock()
		if m, ok := models[spec]; ok {
			return m, nil
		}
		m, err := catalog.Open(spec, env)
		if err != nil {
			return nil, err
		}
		models[spec] = m
		return m, nil
	}
	if _, err := openModel(o.Model); err != nil {
		return nil, &OptionError{Option: "Model", Err: err}
	}
	sub := subagent.New(subagent.Options{MaxDepth: o.MaxDepth, Logger: o.Logger, WakeParents: o.WakeParents})
	offered := append(append(builtinTools(), subagent.Tools(sub)...), o.Tools...)
	if _, err := tool.NewRegistry(tool.RegistryOptions{}, offered...); err != nil {
		// The program's tools: a name taken twice, a schema that is not one.
		return nil, &OptionError{Option: "Tools", Err: err}
	}
	known := make([]string, len(offered))
	defaultConfirm := []string{}
	for i, t := range offered {
		known[i] = t.Spec().Name
		if t.Spec().Confirm {
			defaultConfirm = append(defaultConfirm, t.Spec().Name)
		}
	}
	if o.Confirm != nil {
		for _, name := range o.Confirm {
			if !slices.Contains(known, name) && !strings.Contains(name, config.ToolSeparator) {
				return nil, &OptionError{Option: "Confirm", Err: rein.InvalidArgument("", "unknown tool %q: name tools among %s, or SERVER__TOOL for an MCP server's", name, strings.Join(known, ", "))}
			}
		}
		defaultConfirm = slices.Clone(o.Confirm)
	}
	cfg, err := loadConfig(o, config.Options{
		DefaultModel: o.Model, DefaultConfirm: defaultConfirm, DefaultMaxSteps: o.MaxSteps, KnownTools: known,
		CheckModel: func(name string) error { _, err := openModel(name); return err },
	})
	if err != nil {
		return nil, err
	}
	rt := &Runtime{instance: instance, sub: sub, logger: o.Logger}
	servers := make([]mcp.Server, 0, len(cfg.MCPServerNames))
	for _, name := range cfg.MCPServerNames {
		c := cfg.MCPServers[name]
		servers = append(servers, mcp.Server{Name: c.Name, Command: c.Command, Env: c.Env, URL: c.URL, Headers: c.Headers})
	}
	toolsets := &toolsets{builtins: offered}
	if len(servers) > 0 {
		m, err := mcp.NewManager(ctx, servers, mcp.Options{Logger: o.Logger, OnToolsChanged: toolsets.changed})
		if err != nil {
			return nil, fmt.Errorf("%s: mcp_servers: %w", configName(o), err)
		}
		rt.mcp, toolsets.mcp = m, m
	}
	agents := map[string]*sessions.Agent{}
	for _, name := range cfg.AgentNames {
		a := cfg.Agents[name]
		m, err := openModel(a.Model)
		if err != nil {
			rt.closeMCP()
			return nil, fmt.Errorf("agent %s: model %s: %w", name, a.Model, err)
		}
		loop, err := agent.New(agent.Config{Model: m, MaxSteps: a.MaxSteps, Logger: o.Logger})
		if err != nil {
			rt.closeMCP()
			return nil, err
		}
		var spawn tool.Tool // nil: spawn_agent offers every agent
		if a.Delegates != nil {
			spawn = subagent.SpawnTool(sub, delegates(a, cfg.AgentNames))
		}
		agents[name] = &sessions.Agent{Loop: loop, System: a.System, Tools: toolsets.forAgent(a, spawn, o.Logger), Model: a.Model, ConfirmTTL: a.ConfirmTTL}
	}
	sub.SetAgents(cfg.AgentNames)
	st, err := backend.Open(ctx, o.Store, backend.Options{LeaseTTL: o.LeaseTTL})
	if err != nil {
		rt.closeMCP()
		return nil, storeError(o.Store, err)
	}
	rt.st = st
	if rt.hooks, err = newHooks(ctx, o, cfg, st, instance); err != nil {
		rt.closeMCP()
		st.Close()
		return nil, err
	}
	svc, err := sessions.New(sessions.Config{
		Store:            st,
		Agents:           agents,
		Instance:         instance,
		LeaseTTL:         o.LeaseTTL,
		ConfirmTTL:       o.ConfirmTTL,
		ResumeAttempts:   o.ResumeAttempts,
		Workspace:        o.Workspace,
		Logger:           o.Logger,
		Observer:         metrics,
		System:           o.System,
		OnRunEnd:         sub.OnRunEnd,
		Models:           openModel,
		Prices:           prices(cfg),
		Retention:        o.Retention,
		MaxRunsInFlight:  o.MaxRunsInFlight,
		MaxPendingWrites: o.MaxPendingWrites,
		TracerProvider:   o.TracerProvider,
	})
	if err != nil {
		rt.closeMCP()
		st.Close()
		return nil, err
	}
	sub.Bind(svc)
	rt.svc = svc
	if rt.srv, err = newServer(o, svc, st, metrics); err != nil {
		rt.closeMCP()
		st.Close()
		return nil, err
	}
	return rt, nil
}

// newServer builds the HTTP API over svc: the one place the server is
// made, so that what it mounts is decided here.
func newServer(o Options, svc *sessions.Service, st store.Store, metrics *server.Metrics) (*server.Server, error) {
	mounts, err := protocolMounts(o, svc)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Config{
		Service: svc, Outbox: outboxOf(st), Tokens: o.Tokens, Logger: o.Logger, Metrics: metrics, DrainTimeout: o.DrainTimeout,
		TracerProvider: o.TracerProvider, TLSCertFile: o.TLSCertFile, TLSKeyFile: o.TLSKeyFile,
		CORSOrigins: o.CORSOrigins, MaxStreamsPerOwner: o.MaxStreamsPerOwner, Protocols: mounts,
	})
	if err != nil {
		// What the server refuses is its configuration: a certificate
		// that does not load, an origin that is not one.
		switch msg := err.Error(); {
		case strings.Contains(msg, "CORS"):
			return nil, &OptionError{Option: "CORSOrigins", Err: err}
		case strings.Contains(msg, "TLS"):
			return nil, &OptionError{Option: "TLSCertFile", Err: err}
		}
		return nil, fmt.Errorf("app: %w", err)
	}
	return srv, nil
}

// loadConfig reads the configuration o names (ConfigData, ConfigFile), or
// makes the default one.
func loadConfig(o Options, copts config.Options) (*config.Config, error) {
	var (
		cfg *config.Config
		err error
	)
	switch {
	case len(o.ConfigData) > 0:
		cfg, err = config.Parse(configName(o), o.ConfigData, copts)
	case o.ConfigFile != "":
		cfg, err = config.Load(o.ConfigFile, copts)
	default:
		return config.Default(copts), nil
	}
	if err != nil {
		return nil, &OptionError{Option: "ConfigFile", Err: err}
	}
	return cfg, nil
}

// configName names the configuration in errors.
func configName(o Options) string {
	if o.ConfigFile != "" {
		return o.ConfigFile
	}
	return "configuration"
}

// storeError is a store that did not open, never with its password.
func storeError(spec string, err error) error {
	return &OptionError{Option: "Store", Err: err, redact: func(s string) string {
		return strings.ReplaceAll(s, spec, backend.Redact(spec))
	}}
}

func (r *Runtime) closeMCP() {
	if r.mcp != nil {
		r.mcp.Close()
	}
}

// toolsets builds each agent's tool registry — the built-in tools and the
// MCP servers' current tools it is allowed, with its confirmation set —
// and rebuilds it only when the MCP tools changed.
type toolsets struct {
	builtins []tool.Tool
	mcp      *mcp.Manager

	mu  sync.Mutex
	gen int // bumped when the MCP tools change
}

func (ts *toolsets) changed() {
	ts.mu.Lock()
	ts.gen++
	ts.mu.Unlock()
}

// delegates are the agents a child of a's sessions may run: its own
// first, then those its delegates list allows, in the file's order.
func delegates(a *config.Agent, names []string) []string {
	out := []string{a.Name}
	for _, n := range names {
		if n != a.Name && a.MayDelegate(n) {
			out = append(out, n)
		}
	}
	return out
}

// forAgent returns a's registry, rebuilt when the MCP tools change; spawn,
// when set, is a's own spawn_agent (its delegates), in place of the
// shared one.
func (ts *toolsets) forAgent(a *config.Agent, spawn tool.Tool, logger *slog.Logger) func() *tool.Registry {
	var (
		mu    sync.Mutex
		gen   = -1
		cache *tool.Registry
	)
	return func() *tool.Registry {
		ts.mu.Lock()
		cur := ts.gen
		ts.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if cache != nil && gen == cur {
			return cache
		}
		all := slices.Clone(ts.builtins)
		if spawn != nil {
			for i, t := range all {
				if t.Spec().Name == subagent.ToolSpawn {
					all[i] = spawn
				}
			}
		}
		if ts.mcp != nil {
			all = append(all, ts.mcp.Tools()...)
		}
		var allowed []tool.Tool
		confirm := []string{}
		for _, t := range all {
			name := t.Spec().Name
			if !a.Allows(name) {
				continue
			}
			allowed = append(allowed, t)
			if a.NeedsConfirmation(name) {
				confirm = append(confirm, name)
			}
		}
		reg, err := tool.NewRegistry(tool.RegistryOptions{Confirm: &confirm, Logger: logger}, allowed...)
		if err != nil {
			// Names are unique by construction (SERVER__ prefixes); keep the
			// last good set rather than run without tools.
			logger.Error("build the tools of an agent", "agent", a.Name, "err", err)
			if cache != nil {
				return cache
			}
		}
		cache, gen = reg, cur
		return reg
	}
}

// prices prices a model by name: the configuration's `models` map first,
// then the catalog's known prices.
func prices(cfg *config.Config) model.Prices {
	return func(name string) (model.Price, bool) {
		if p, ok := cfg.PriceOf(name); ok {
			return model.Price{InputPerMTok: p.InputPerMTok, OutputPerMTok: p.OutputPerMTok}, true
		}
		return catalog.Price(name)
	}
}
