// Package app assembles Rein the way `rein serve` does, for a Go program
// that wants the same runtime in one call: Open turns Options (the fields
// `rein serve` has flags for, plus a program's own models and tools) into
// a Runtime holding the store, the models, the MCP servers and their
// tools, the agents with their subagent wiring, the sessions service and
// the HTTP API over it.
//
// It exists so that there is one assembly. cmd/rein parses flags, listens,
// handles signals and prints; everything it builds from those flags is
// built here, so an embedder's runtime and the server's cannot drift
// apart. A program that wants less (its own agent loop, no configuration,
// no HTTP) can still put the pieces together itself: sessions.New over a
// store and an agent.Agent is the lower-level route (docs/library.md).
//
//	rt, err := app.Open(ctx, app.Options{Store: "sqlite:rein.db", Model: "openai:gpt-4o"})
//	if err != nil { ... }
//	defer rt.Close()
//	if err := rt.Start(ctx); err != nil { ... }
//	sess, err := rt.Service().CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
package app
