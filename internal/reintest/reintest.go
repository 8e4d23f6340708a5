// Package reintest assembles Rein's real runtime for the tests of the
// packages above it: a scripted model, the built-in tools, the agent loop,
// the sessions service over a store, and — for HTTP tests — the server on a
// loopback test listener. One assembly, so the server, client and CLI tests
// exercise the same stack `rein serve` runs, rather than each keeping its
// own copy that drifts.
package reintest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
	"github.com/reinhq/rein/tool/workspace"
)

// Service builds (without starting it) a sessions service over st whose
// agent runs the scripted model at script with the built-in tools.
// configure, when set, adjusts the service's configuration (workspace,
// lease TTL, observer, ...).
func Service(script string, st store.Store, configure func(*sessions.Config)) (*sessions.Service, error) {
	return ServiceWithTools(script, st, configure)
}

// ServiceWithSubagents is Service with the subagent tools and settlement
// wired in, as rein serve has them.
func ServiceWithSubagents(script string, st store.Store, configure func(*sessions.Config), opts subagent.Options, extra ...tool.Tool) (*sessions.Service, *subagent.Manager, error) {
	m := subagent.New(opts)
	svc, err := ServiceWithTools(script, st, func(c *sessions.Config) {
		c.OnRunEnd = m.OnRunEnd
		if configure != nil {
			configure(c)
		}
	}, append(subagent.Tools(m), extra...)...)
	if err != nil {
		return nil, nil, err
	}
	m.Bind(svc)
	return svc, m, nil
}

// ServiceWithTools is Service with extra tools beside the built-in ones.
func ServiceWithTools(script string, st store.Store, configure func(*sessions.Config), extra ...tool.Tool) (*sessions.Service, error) {
	return ServiceWithModel(script, nil, st, configure, extra...)
}

// ServiceWithModel is ServiceWithTools whose scripted model is wrapped by
// wrap (when set): a test that must see, or pace, what the model streams.
func ServiceWithModel(script string, wrap func(model.Model) model.Model, st store.Store, configure func(*sessions.Config), extra ...tool.Tool) (*sessions.Service, error) {
	var m model.Model
	m, err := scripted.Open(script)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		m = wrap(m)
	}
	cfg := sessions.Config{Store: st}
	if configure != nil {
		configure(&cfg)
	}
	tools, err := tool.NewRegistry(tool.RegistryOptions{Logger: cfg.Logger}, append(append(builtin.All(), workspace.Tools()...), extra...)...)
	if err != nil {
		return nil, err
	}
	if cfg.Agent, err = agent.New(agent.Config{Model: m, Tools: tools, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	// Agents configured without a loop run the scripted one.
	for _, a := range cfg.Agents {
		if a != nil && a.Loop == nil {
			a.Loop = cfg.Agent
		}
	}
	return sessions.New(cfg)
}

// ServerOptions shape a test server.
type ServerOptions struct {
	// Script is the scripted model file (required).
	Script string
	// Store is the backend; nil means a fresh memory store. Either way the
	// server's cleanup closes it.
	Store store.Store
	// Tokens maps bearer tokens to owners; nil is single-user mode.
	Tokens map[string]string
	// Logger for the service and server (nil: discard).
	Logger *slog.Logger
	// Heartbeat is the SSE comment interval (0: the server's default).
	Heartbeat time.Duration
	// NoStart leaves Service.Start to the test.
	NoStart bool
	// Configure adjusts the service's configuration.
	Configure func(*sessions.Config)
	// Wrap, when set, wraps the server's handler (to observe requests).
	Wrap func(http.Handler) http.Handler
	// Protocols, when set, builds the protocol adapters the server mounts
	// (as rein serve --protocols does).
	Protocols func(*sessions.Service) []protocol.Mount
}

// Server is a running test server and what is behind it.
type Server struct {
	URL     string
	HTTP    *http.Client
	Service *sessions.Service
	Handler *server.Server
	Metrics *server.Metrics
	Store   store.Store
}

// NewServer starts a server on a loopback test listener. Its cleanup ends
// runs first (their completions reach the log), then event streams (after
// a last read), then connections, then the store.
func NewServer(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	if o.Store == nil {
		o.Store = memory.New()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	metrics, err := server.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	workspace := t.TempDir()
	svc, _, err := ServiceWithSubagents(o.Script, o.Store, func(c *sessions.Config) {
		c.Workspace, c.Observer, c.Logger = workspace, metrics, o.Logger
		if o.Configure != nil {
			o.Configure(c)
		}
	}, subagent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mounts []protocol.Mount
	if o.Protocols != nil {
		mounts = o.Protocols(svc)
	}
	ob, _ := o.Store.(store.Outbox) // the webhook outbox, for /api/webhooks
	srv, err := server.New(server.Config{Service: svc, Outbox: ob, Tokens: o.Tokens, Logger: o.Logger, Metrics: metrics, Heartbeat: o.Heartbeat, Protocols: mounts})
	if err != nil {
		t.Fatal(err)
	}
	if !o.NoStart {
		if err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var h http.Handler = srv
	if o.Wrap != nil {
		h = o.Wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = svc.Close()
		_ = srv.Close()
		ts.Close()
		_ = o.Store.Close()
	})
	return &Server{URL: ts.URL, HTTP: ts.Client(), Service: svc, Handler: srv, Metrics: metrics, Store: o.Store}
}
