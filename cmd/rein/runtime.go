package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/catalog"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/backend"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
	"github.com/reinhq/rein/tool/workspace"
)

// runtimeOptions say how to assemble a sessions service from flags.
type runtimeOptions struct {
	// Store is the --store spec ("" → sqlite:./rein.db).
	Store string
	// Model is the --model spec ("" → demo).
	Model string
	// Confirm replaces the default set of tools needing confirmation when
	// not nil (--confirm).
	Confirm *[]string
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
}

// buildRuntime opens the store, the model and the tools and returns a
// sessions service over them (not yet started) and the store, which the
// caller closes after draining the service.
func buildRuntime(ctx context.Context, o runtimeOptions) (*sessions.Service, store.Store, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Model == "" {
		o.Model = "demo"
	}
	m, err := catalog.Open(o.Model, catalog.Env{
		Getenv:  func(k string) string { v, _ := o.LookupEnv(k); return v },
		Logger:  o.Logger,
		OnRetry: o.OnRetry,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--model %s: %w", o.Model, err)
	}
	reg, err := tool.NewRegistry(tool.RegistryOptions{Confirm: o.Confirm, Logger: o.Logger}, append(builtin.All(), workspace.Tools()...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("--confirm: %w", err)
	}
	ag, err := agent.New(agent.Config{Model: m, Tools: reg, Logger: o.Logger})
	if err != nil {
		return nil, nil, err
	}
	st, err := backend.Open(ctx, o.Store, backend.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("--store: %w", err)
	}
	svc, err := sessions.New(sessions.Config{
		Store:          st,
		Agent:          ag,
		LeaseTTL:       o.LeaseTTL,
		ResumeAttempts: o.ResumeAttempts,
		Workspace:      o.Workspace,
		Logger:         o.Logger,
		Observer:       o.Observer,
		System:         o.System,
	})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return svc, st, nil
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
