// Package config reads Rein's configuration file, rein.yaml (docs/tools.md): the
// agents a server offers (model, system prompt, the tools each may call and
// which of them need confirmation, a step budget) and the MCP servers whose
// tools they may use.
//
// It exists so that every mistake in that file is found, and located, before
// `rein serve` listens: an unknown key, a value of the wrong type, a model
// name no provider knows or a tools entry that matches no tool is reported
// as FILE:LINE: reason, all problems at once, instead of surfacing as an
// agent that silently cannot call anything. The rest of Rein gets plain,
// validated structs with the command line's defaults already applied.
//
// The package imports no providers and no tools: the caller says which
// model names are usable (Options.CheckModel) and which tools exist before
// any MCP server is connected (Options.KnownTools). See
// docs/decisions/0070-configuration-file.md for the rules and why.
package config

import (
	"os"
	"path"
	"slices"
	"time"
)

// DefaultAgent is the name of the agent used by sessions created without
// one. Every Config has it: from the file, or built from the Options.
const DefaultAgent = "default"

// DefaultMaxSteps is the step budget used when Options.DefaultMaxSteps is
// not set (docs/cli.md `--max-steps`).
const DefaultMaxSteps = 25

// ToolSeparator joins an MCP server's name and one of its tools' names into
// the name the model sees: "calc" + "__" + "add" = "calc__add" (docs/tools.md).
const ToolSeparator = "__"

// Options are what the configuration file does not say itself: the
// defaults from the command line, and the knowledge of other packages.
type Options struct {
	// DefaultModel is the model of agents that name none (`--model`).
	DefaultModel string
	// DefaultConfirm is the confirm set of agents that set none
	// (`--confirm`). It is copied, never shared.
	DefaultConfirm []string
	// DefaultMaxSteps is the max_steps of agents that set none
	// (`--max-steps`); below 1 means DefaultMaxSteps (25).
	DefaultMaxSteps int
	// KnownTools are the names of the tools that exist before any MCP
	// server is connected: the built-ins. A tools or confirm entry must
	// match one of them, or start with SERVER__ for a configured MCP
	// server, or it is an error.
	KnownTools []string
	// CheckModel reports whether a model name written in the file is
	// usable; its error is the reason of the FILE:LINE error. It is not
	// called for DefaultModel. Nil accepts every name.
	CheckModel func(name string) error
}

func (o Options) maxSteps() int {
	if o.DefaultMaxSteps < 1 {
		return DefaultMaxSteps
	}
	return o.DefaultMaxSteps
}

// Config is a loaded, validated configuration.
type Config struct {
	// File is the file it was read from; "" for Default.
	File string
	// Agents by name. It always holds DefaultAgent.
	Agents map[string]*Agent
	// AgentNames are the agents' names in file order; a DefaultAgent that
	// the file does not define comes first.
	AgentNames []string
	// MCPServers by name.
	MCPServers map[string]*MCPServer
	// MCPServerNames are the servers' names in file order.
	MCPServerNames []string
	// Webhooks are the webhooks, in file order (webhooks.go).
	Webhooks []*Webhook
	// Models are the entries of the top-level `models` map, by the model
	// value an agent names (e.g. "openai:gpt-4o-mini"). Nil when none.
	Models map[string]*Model
}

// Model is one entry of `models:`: what Rein knows of a model beyond how
// to reach it.
type Model struct {
	Name string
	// Price is what its tokens cost; nil when not given.
	Price *Price
	// ContextTokens is the context budget of agents on this model (docs:
	// context compaction); 0 when not given.
	ContextTokens int
	// Line is the line of the model's name in the file.
	Line int
}

// Price is a model's price in US dollars per million tokens.
type Price struct {
	InputPerMTok  float64
	OutputPerMTok float64
}

// PriceOf is the price the file gives the model named name, if any.
func (c *Config) PriceOf(name string) (Price, bool) {
	if m := c.Models[name]; m != nil && m.Price != nil {
		return *m.Price, true
	}
	return Price{}, false
}

// Agent is one entry of `agents:` with the defaults applied.
type Agent struct {
	Name string
	// Model is a `--model` value, e.g. "openai:gpt-4o-mini".
	Model string
	// System is the default system prompt of the agent's sessions.
	System string
	// Tools are the names or path.Match globs of the tools the agent may
	// call. Nil allows every tool; an empty, non-nil list allows none.
	Tools []string
	// Confirm are the names or globs of the tools that need confirmation.
	Confirm []string
	// MaxSteps is the number of model requests a run may make, ≥ 1.
	MaxSteps int
	// ConfirmTTL is how long a confirmation of the agent's runs waits for
	// an answer before it expires (confirm_ttl, e.g. 1h); 0: the
	// server's --confirmation-ttl.
	ConfirmTTL time.Duration
	// Delegates are the other agents of the file its sessions may name
	// for a child (spawn_agent's "agent"). Nil allows every agent; an
	// empty, non-nil list none but its own, which a child may always run.
	Delegates []string
	// Line is the line of the agent's name in the file; 0 for an agent
	// built from the Options.
	Line int
}

// Allows reports whether the agent may call the tool: its Tools list is nil,
// or an entry equals the name or matches it as a path.Match glob.
func (a *Agent) Allows(toolName string) bool {
	return a.Tools == nil || matchAny(a.Tools, toolName)
}

// MayDelegate reports whether the agent's sessions may give a child the
// named agent: its own, or one its Delegates allow.
func (a *Agent) MayDelegate(name string) bool {
	return a.Delegates == nil || name == a.Name || slices.Contains(a.Delegates, name)
}

// NeedsConfirmation reports whether a call of the tool must be confirmed
// first: an entry of Confirm equals the name or matches it as a glob.
func (a *Agent) NeedsConfirmation(toolName string) bool {
	return matchAny(a.Confirm, toolName)
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if p == name {
			return true
		}
		// A malformed pattern matches nothing; Parse rejects them, so
		// only a hand-built Agent can have one.
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// MCPServer is one entry of `mcp_servers:`. Exactly one of Command (stdio)
// and URL (streamable HTTP) is set.
type MCPServer struct {
	Name string
	// Command is the program and its arguments, for a stdio server.
	Command []string
	// Env holds environment variables for the stdio server, as written
	// (no ${VAR} expansion); whether Rein's own environment is passed on
	// too is the MCP client's choice. Nil when none.
	Env map[string]string
	// URL is the http or https endpoint of a streamable HTTP server.
	URL string
	// Headers are sent with every request to an HTTP server. Nil when none.
	Headers map[string]string
	// Line is the line of the server's name in the file.
	Line int
}

// Stdio reports whether Rein starts the server and talks to it over its
// stdin and stdout (else it is reached at URL).
func (s *MCPServer) Stdio() bool { return len(s.Command) > 0 }

// ToolPrefix is what the names of this server's tools start with, as the
// model sees them: "calc__".
func (s *MCPServer) ToolPrefix() string { return s.Name + ToolSeparator }

// Default is the configuration without a file: a single agent
// DefaultAgent built from the options, and no MCP servers.
func Default(opts Options) *Config {
	c := &Config{Agents: map[string]*Agent{}, MCPServers: map[string]*MCPServer{}}
	c.addDefault(opts)
	return c
}

// addDefault puts the options' agent first when the file has no
// DefaultAgent (decision 0070).
func (c *Config) addDefault(opts Options) {
	if _, ok := c.Agents[DefaultAgent]; ok {
		return
	}
	c.Agents[DefaultAgent] = &Agent{
		Name:     DefaultAgent,
		Model:    opts.DefaultModel,
		Confirm:  slices.Clone(opts.DefaultConfirm),
		MaxSteps: opts.maxSteps(),
	}
	c.AgentNames = slices.Insert(c.AgentNames, 0, DefaultAgent)
}

// Load reads and validates the configuration file at path. A file that
// cannot be read is reported as by os.ReadFile; every problem in its
// content is an Errors.
func Load(path string, opts Options) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, opts)
}

// Parse validates data as the content of the configuration file name (used
// in errors only). On any problem it returns an Errors listing all it found,
// in file order, and no Config.
func Parse(name string, data []byte, opts Options) (*Config, error) {
	p := &parser{file: name, opts: opts}
	c := p.parse(data)
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	c.File = name
	c.addDefault(opts)
	return c, nil
}
