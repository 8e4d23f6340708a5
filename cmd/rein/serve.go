package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/server"
)

// cmdServe is `rein serve`: the HTTP API of docs/api.md on one listener until
// SIGINT or SIGTERM, then a graceful shutdown (exit 0).
func cmdServe(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("rein serve", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "Usage: rein serve [flags]\n\nServes Rein's HTTP API (sessions, runs, events, SSE) until SIGINT or SIGTERM,\nthen shuts down gracefully: running runs are interrupted (cancelled after\n--drain-timeout), queued runs stay queued for the next start.\nEvery flag can also be set by its REIN_* environment variable (--drain-timeout → REIN_DRAIN_TIMEOUT).\n\nFlags:")
		fs.PrintDefaults()
	}
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on; without --tokens only a loopback address is allowed")
	storeSpec := fs.String("store", "sqlite:./rein.db", "where to keep sessions: sqlite:PATH, postgres://... or memory:")
	modelName := fs.String("model", "demo", "model: demo, scripted:PATH, openai:NAME, ollama:NAME, anthropic:NAME")
	tokensPath := fs.String("tokens", "", "tokens file: one \"TOKEN OWNER\" per line, # comments (none: single-user mode, owner \"local\")")
	var confirm optionalString
	fs.Var(&confirm, "confirm", "comma-separated tools that need confirmation (replaces the default set; \"\" for none)")
	drain := fs.Duration("drain-timeout", 10*time.Second, "on shutdown, how long interrupted runs may take before they are cancelled")
	workspace := fs.String("workspace", "./rein-workspace", "directory for files tools write")
	leaseTTL := fs.Duration("lease-ttl", 15*time.Second, "turn lease TTL: the runs of a lost instance are taken over (resumed, or failed once out of resume attempts) when their lease expires, within about this long")
	resumeAttempts := fs.Int("resume-attempts", 2, "how often a run whose instance was lost is resumed before it ends failed (0: never resumed)")
	configFile := fs.String("config", "", "configuration file (YAML): agents and MCP servers (see rein.example.yaml); without one, a single agent \"default\" from these flags")
	maxSteps := fs.Int("max-steps", 25, "model requests per run, for agents that set no max_steps")
	maxDepth := fs.Int("max-depth", 3, "how deep agents may delegate to subagents (a root session is depth 0)")
	instanceID := fs.String("instance-id", "", "this instance's name among instances sharing the store, in logs and metrics only (default: a fresh id)")
	if err := parseFlags(fs, args, io.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(io.err, "rein serve:", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(io.err, "rein serve: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *drain <= 0 {
		fmt.Fprintln(io.err, "rein serve: --drain-timeout must be positive")
		return exitUsage
	}
	if *leaseTTL <= 0 {
		fmt.Fprintln(io.err, "rein serve: --lease-ttl must be positive")
		return exitUsage
	}
	if *resumeAttempts < 0 {
		fmt.Fprintln(io.err, "rein serve: --resume-attempts must not be negative")
		return exitUsage
	}
	if *maxDepth < 1 {
		fmt.Fprintln(io.err, "rein serve: --max-depth must be at least 1")
		return exitUsage
	}
	if *maxSteps < 1 {
		fmt.Fprintln(io.err, "rein serve: --max-steps must be at least 1")
		return exitUsage
	}
	if *instanceID == "" {
		*instanceID = id.New("ins_")
	}
	// The instance names itself in logs and metrics only, never to clients.
	logger := slog.New(slog.NewTextHandler(io.err, nil)).With("instance", *instanceID)

	var tokens map[string]string
	if *tokensPath != "" {
		var err error
		if tokens, err = server.LoadTokens(*tokensPath); err != nil {
			fmt.Fprintln(io.err, "rein serve: --tokens:", err)
			return exitUsage
		}
	}
	// Check the address before opening anything, and again once bound
	// (a host name may resolve to anything).
	if len(tokens) == 0 && !loopbackAddr(*addr) {
		fmt.Fprintf(io.err, "rein serve: refusing to listen on %s without --tokens: single-user mode (no tokens) serves every request as owner %q, so it only listens on a loopback address such as 127.0.0.1:8080\n", *addr, server.LocalOwner)
		return exitUsage
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := server.NewInstanceMetrics(reg, *instanceID)
	if err != nil {
		fmt.Fprintln(io.err, "rein serve:", err)
		return exitFailed
	}
	rt, err := buildRuntime(ctx, runtimeOptions{
		Store: *storeSpec, Model: *modelName, Confirm: confirm.confirm(), Workspace: *workspace,
		Config: *configFile, MaxSteps: *maxSteps, Instance: *instanceID, MaxDepth: *maxDepth,
		LeaseTTL: *leaseTTL, ResumeAttempts: resumeOption(*resumeAttempts), Logger: logger, Observer: metrics, LookupEnv: io.lookupEnv,
		OnRetry: metrics.ModelRetry,
	})
	if err != nil {
		var cerr config.Errors
		if errors.As(err, &cerr) {
			// FILE:LINE: reason, one problem a line.
			fmt.Fprintln(io.err, err)
		} else {
			fmt.Fprintln(io.err, "rein serve:", err)
		}
		return exitUsage
	}
	defer rt.Close()
	svc := rt.svc
	// Settlements a crash skipped are written before anything else runs
	// (writes only: the service starts with the server).
	if err := rt.sub.Reconcile(ctx); err != nil {
		logger.Warn("settle subagents after a restart", "err", err)
	}
	srv, err := server.New(server.Config{Service: svc, Tokens: tokens, Logger: logger, Metrics: metrics, DrainTimeout: *drain})
	if err != nil {
		fmt.Fprintln(io.err, "rein serve:", err)
		return exitFailed
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(io.err, "rein serve:", err)
		return exitFailed
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); len(tokens) == 0 && (!ok || !tcp.IP.IsLoopback()) {
		ln.Close()
		fmt.Fprintf(io.err, "rein serve: refusing %s (bound to %s) without --tokens: single-user mode only listens on a loopback address\n", *addr, ln.Addr())
		return exitUsage
	}
	mode := "tokens"
	if len(tokens) == 0 {
		mode = "single-user (owner " + server.LocalOwner + ")"
	}
	logger.Info("rein serve listening", "url", "http://"+ln.Addr().String(), "store", *storeSpec, "model", *modelName, "auth", mode)

	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(sigCtx, ln); err != nil {
		fmt.Fprintln(io.err, "rein serve:", err)
		return exitFailed
	}
	return 0
}

// resumeOption turns a --resume-attempts value into
// runtimeOptions.ResumeAttempts, where 0 means the default: the flag's 0
// (never resume) becomes -1.
func resumeOption(n int) int {
	if n == 0 {
		return -1
	}
	return n
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
