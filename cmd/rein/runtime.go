package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/catalog"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
	"github.com/reinhq/rein/tool/mcp"
	"github.com/reinhq/rein/tool/workspace"

	"go.opentelemetry.io/otel/trace"
)

// runtimeOptions say how to assemble a sessions service from flags.
type runtimeOptions struct {
	// Store is the --store spec ("" → sqlite:./rein.db).
	Store string
	// Model is the --model spec ("" → demo): the model of agents that
	// name none.
	Model string
	// Confirm replaces the default set of tools needing confirmation when
	// not nil (--confirm).
	Confirm *[]string
	// Config is the --config file ("" → one agent, default, from the
	// flags).
	Config string
	// MaxSteps is the step budget of agents that set none (0 → 25).
	MaxSteps int
	// Instance names this instance among those sharing the store ("" → a
	// fresh id).
	Instance string
	// MaxDepth caps subagent delegation (0 → 3).
	MaxDepth int
	// WakeParents: a background subagent's end starts a run of its idle
	// parent (subagent.Options.WakeParents).
	WakeParents bool
	// Workspace is the root of session workspaces ("" → none).
	Workspace string
	// LeaseTTL is the turn lease TTL (0 → default).
	LeaseTTL time.Duration
	// ResumeAttempts bounds how often a run of a lost instance is resumed
	// (0 → default 2; negative → never), as sessions.Config.ResumeAttempts.
	ResumeAttempts int
	// System is the default system prompt.
	System string
	// Logger for everything (nil → discard).
	Logger *slog.Logger
	// Observer receives the service's measurements (nil → none).
	Observer sessions.Observer
	// LookupEnv reads provider settings (OPENAI_API_KEY, ...).
	LookupEnv func(string) (string, bool)
	// OnRetry observes model request retries (nil → logs only).
	OnRetry func(model.RetryInfo)
	// Retention is how long an idle root session is kept (0: for ever),
	// as sessions.Config.Retention.
	Retention time.Duration
	// MaxRunsInFlight and MaxPendingWrites are the admission bounds of
	// sessions.Config.
	MaxRunsInFlight, MaxPendingWrites int
	// TracerProvider makes the runs' spans (nil: no tracing).
	TracerProvider trace.TracerProvider
	// Flags names where --model, --store and --confirm came from in
	// errors (nil: the flags).
	Flags *flagSet
}

// flag names a flag in an error: --model, or REIN_MODEL (--model) when
// its variable set it.
func (o runtimeOptions) flag(name string) string {
	if o.Flags == nil {
		return "--" + name
	}
	return o.Flags.label(name)
}

// runtime is what buildRuntime assembled; Close releases it after the
// service has drained.
type runtime struct {
	svc *sessions.Service
	st  store.Store
	mcp *mcp.Manager
	sub *subagent.Manager
}

// Start starts the service and catches up on subagent settlements a crash
// may have skipped.
func (r *runtime) Start(ctx context.Context) error {
	if err := r.svc.Start(ctx); err != nil {
		return err
	}
	if err := r.sub.Reconcile(ctx); err != nil {
		return fmt.Errorf("settle subagents: %w", err)
	}
	return nil
}

// Close closes the MCP connections and the store.
func (r *runtime) Close() {
	if r.mcp != nil {
		r.mcp.Close()
	}
	r.st.Close()
}

// builtinTools are the tools every agent may be offered (docs/models.md).
func builtinTools() []tool.Tool { return append(builtin.All(), workspace.Tools()...) }

// buildRuntime reads the configuration, opens the models, the MCP servers
// and the store, and returns a sessions service over them (not yet
// started). A configuration error is reported as FILE:LINE: reason.
func buildRuntime(ctx context.Context, o runtimeOptions) (*runtime, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Model == "" {
		o.Model = "demo"
	}
	env := catalog.Env{
		Getenv:  func(k string) string { v, _ := o.LookupEnv(k); return v },
		Logger:  o.Logger,
		OnRetry: o.OnRetry,
	}
	models := map[string]model.Model{}
	openModel := func(spec string) (model.Model, error) {
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
		return nil, usagef("%s: %s", o.flag("model"), message(err))
	}
	sub := subagent.New(subagent.Options{MaxDepth: o.MaxDepth, Logger: o.Logger, WakeParents: o.WakeParents})
	builtins := append(builtinTools(), subagent.Tools(sub)...)
	known := make([]string, len(builtins))
	defaultConfirm := []string{}
	for i, t := range builtins {
		known[i] = t.Spec().Name
		if t.Spec().Confirm {
			defaultConfirm = append(defaultConfirm, t.Spec().Name)
		}
	}
	if o.Confirm != nil {
		for _, name := range *o.Confirm {
			if !slices.Contains(known, name) && !strings.Contains(name, "__") {
				return nil, usagef("%s: unknown tool %q: name tools among %s, or SERVER__TOOL for an MCP server's", o.flag("confirm"), name, strings.Join(known, ", "))
			}
		}
		defaultConfirm = *o.Confirm
	}
	copts := config.Options{
		DefaultModel: o.Model, DefaultConfirm: defaultConfirm, DefaultMaxSteps: o.MaxSteps, KnownTools: known,
		CheckModel: func(name string) error { _, err := openModel(name); return err },
	}
	cfg := config.Default(copts)
	if o.Config != "" {
		var err error
		if cfg, err = config.Load(o.Config, copts); err != nil {
			var cerr config.Errors
			if errors.As(err, &cerr) {
				// FILE:LINE: reason, one problem a line.
				return nil, &usageError{msg: err.Error(), located: true}
			}
			return nil, usagef("%s: %s", o.flag("config"), message(err))
		}
	}
	rt := &runtime{}
	servers := make([]mcp.Server, 0, len(cfg.MCPServerNames))
	for _, name := range cfg.MCPServerNames {
		c := cfg.MCPServers[name]
		servers = append(servers, mcp.Server{Name: c.Name, Command: c.Command, Env: c.Env, URL: c.URL, Headers: c.Headers})
	}
	toolsets := &toolsets{builtins: builtins}
	if len(servers) > 0 {
		m, err := mcp.NewManager(ctx, servers, mcp.Options{Logger: o.Logger, OnToolsChanged: toolsets.changed})
		if err != nil {
			return nil, fmt.Errorf("%s: mcp_servers: %w", o.Config, err)
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
		agents[name] = &sessions.Agent{Loop: loop, System: a.System, Tools: toolsets.forAgent(a, spawn, o.Logger), Model: a.Model}
	}
	sub.SetAgents(cfg.AgentNames)
	st, err := backend.Open(ctx, o.Store, backend.Options{LeaseTTL: o.LeaseTTL})
	if err != nil {
		rt.closeMCP()
		return nil, storeError(o.flag("store"), o.Store, err)
	}
	rt.st = st
	svc, err := sessions.New(sessions.Config{
		Store:            st,
		Agents:           agents,
		Instance:         o.Instance,
		LeaseTTL:         o.LeaseTTL,
		ResumeAttempts:   o.ResumeAttempts,
		Workspace:        o.Workspace,
		Logger:           o.Logger,
		Observer:         o.Observer,
		System:           o.System,
		OnRunEnd:         sub.OnRunEnd,
		Models:           openModel,
		Retention:        o.Retention,
		MaxRunsInFlight:  o.MaxRunsInFlight,
		MaxPendingWrites: o.MaxPendingWrites,
		TracerProvider:   o.TracerProvider,
	})
	if err != nil {
		rt.Close()
		return nil, err
	}
	sub.Bind(svc)
	rt.svc, rt.sub = svc, sub
	return rt, nil
}

// storeError reports a store that did not open, never with its password:
// a bad spec is a usage error; a database that is down is not.
func storeError(flag, spec string, err error) error {
	msg := message(err)
	if spec != "" {
		msg = strings.ReplaceAll(msg, spec, backend.Redact(spec))
	}
	if rein.CodeOf(err) == rein.CodeInvalidArgument {
		return usagef("%s: %s", flag, msg)
	}
	return fmt.Errorf("%s %s: %s", flag, backend.Redact(spec), msg)
}

func (r *runtime) closeMCP() {
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

// confirmList parses a --confirm value: a comma-separated list of tool
// names; "" means none.
func confirmList(v string) *[]string {
	out := []string{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return &out
}
