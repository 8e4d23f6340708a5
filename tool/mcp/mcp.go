// Package mcp offers the tools of MCP (Model Context Protocol) servers to
// Rein's agents as ordinary tool.Tool values (docs/tools.md), so the agent loop,
// the registry's schema validation and the confirmation gate treat them like
// any built-in tool.
//
// It exists to keep everything that is particular to MCP — starting stdio
// servers, speaking streamable HTTP, the protocol's result format, and the
// failure modes of a process or a connection Rein does not control — in one
// place, behind one Manager. The wire protocol itself is the official Go SDK
// (github.com/modelcontextprotocol/go-sdk); this package adds the policy:
//
//   - A tool TOOL of server SERVER is offered as SERVER__TOOL, with the
//     server's description and input schema. A tool whose name or schema the
//     registry would refuse is left out, with a warning in the log, rather
//     than making every agent's registry fail.
//   - A call carries the run's context: cancelling it makes the SDK send
//     notifications/cancelled and the call returns at once. It carries the
//     tool_use_id as _meta.idempotency_key (docs/api.md).
//   - A result is the text of its text contents joined by "\n", other
//     contents as their JSON; isError: true gives an error result.
//   - Every failure — a server that cannot be reached, crashed mid-call,
//     answered garbage or with a protocol error — is an error whose text
//     starts with `MCP server "NAME": `; it never stops the run.
//   - Connections are repaired lazily: a stdio server that exited is started
//     again by the next call, a streamable HTTP session that was dropped (the
//     server restarted) is re-established by the next call — and a call that
//     the server answered 404 because it no longer knew the session is sent
//     once more on the new one, since it never ran. A call that may have
//     reached the server (it crashed or restarted mid-call) is never sent
//     again: it fails, like any call whose fate is unknown.
//   - A server that fails at start-up is logged and retried in the
//     background with capped exponential backoff until it connects or the
//     Manager is closed; its tools appear in Tools() once it does.
//
// Tools() is a snapshot: the runtime reads it when it builds an agent's tool
// list, which it does once per run, so a server that connects (or changes
// its tools) later is seen by the next run, never in the middle of one.
//
// Close stops everything the Manager started: processes, connections,
// goroutines. One thing it cannot cut short: when a call or handshake to an
// HTTP server is cancelled, the SDK sends notifications/cancelled on its
// own goroutine with a fixed 5 s timeout, and closing that session waits
// for it, so Close can take up to 5 s when an HTTP server hangs.
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/tool"
)

// Separator joins a server's name and its tool's name: SERVER__TOOL.
const Separator = "__"

// Defaults of Options.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultRetryMin       = time.Second
	DefaultRetryMax       = time.Minute
	DefaultStopTimeout    = 5 * time.Second
)

// Server configures one MCP server: either a command speaking MCP on its
// stdin/stdout (Command, Env) or a streamable HTTP endpoint (URL, Headers).
type Server struct {
	// Name prefixes the server's tools (NAME__TOOL) and names it in errors
	// and logs. See Validate for the rule.
	Name string
	// Command is the program and its arguments (stdio). The program is
	// looked up in PATH like a shell would.
	Command []string
	// Env is added to the environment of Command. The process does not
	// inherit Rein's whole environment, which holds credentials it has no
	// business seeing: only HOME, LANG, LC_ALL, LOGNAME, PATH, SHELL, TERM,
	// TMPDIR, TZ and USER are passed on, then Env.
	Env map[string]string
	// URL is the streamable HTTP endpoint (http or https).
	URL string
	// Headers are sent with every HTTP request (e.g. Authorization).
	Headers map[string]string
}

// validServerName: letters, digits and '-', with single underscores inside,
// so that the first "__" of SERVER__TOOL always ends the server's name.
var validServerName = regexp.MustCompile(`^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$`)

// Validate reports what is wrong with a server's configuration: a name that
// is not letters, digits, '-' and single inner '_' (at most 48 characters,
// leaving room for the tool's name in the 64 providers accept), both or
// neither of Command and URL, an empty program, or a URL that is not http(s).
func (s Server) Validate() error {
	switch {
	case !validServerName.MatchString(s.Name) || len(s.Name) > 48:
		return fmt.Errorf("MCP server name %q: want letters, digits, '-' and single '_' between them, at most 48", s.Name)
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("MCP server %q: both command and url are set; want one", s.Name)
	case len(s.Command) == 0 && s.URL == "":
		return fmt.Errorf("MCP server %q: neither command nor url is set; want one", s.Name)
	case len(s.Command) > 0 && s.Command[0] == "":
		return fmt.Errorf("MCP server %q: empty command", s.Name)
	case len(s.Command) == 0 && len(s.Env) > 0:
		return fmt.Errorf("MCP server %q: env is for a command, not a url", s.Name)
	case len(s.Command) > 0 && len(s.Headers) > 0:
		return fmt.Errorf("MCP server %q: headers are for a url, not a command", s.Name)
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil {
			return fmt.Errorf("MCP server %q: url: %w", s.Name, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("MCP server %q: url %q: want http:// or https:// and a host", s.Name, s.URL)
		}
	}
	return nil
}

// Options configure a Manager. The zero value is ready to use.
type Options struct {
	// Logger receives connections, losses, start-up failures and retries,
	// skipped tools, and the stderr of stdio servers (one record per
	// line, level Info). nil discards.
	Logger *slog.Logger
	// ConnectTimeout bounds one connection attempt: starting the process
	// or reaching the URL, the MCP handshake and listing the tools. 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// RetryMin and RetryMax bound the wait between two background
	// attempts to connect a server that failed at start-up: it starts at
	// RetryMin and doubles up to RetryMax. 0 means DefaultRetryMin,
	// DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// StopTimeout is how long closing a stdio server waits for it to exit
	// after its stdin is closed, and again after SIGTERM, before SIGKILL.
	// 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// OnToolsChanged, when not nil, is called (on its own goroutine, never
	// concurrently with itself) after Tools() changed: a server connected
	// or reconnected with other tools, or announced a new tool list.
	OnToolsChanged func()
	// ProtocolVersion pins the MCP protocol version offered to servers;
	// "" lets the SDK offer its latest and negotiate down.
	ProtocolVersion string
}

// Manager connects to a set of MCP servers and offers their tools. It is
// safe for concurrent use. Close it to stop every process, connection and
// goroutine it started.
type Manager struct {
	opts    Options
	log     *slog.Logger
	servers map[string]*server
	order   []string // sorted server names

	ctx    context.Context // ends on Close
	cancel context.CancelFunc

	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup

	notify chan struct{} // OnToolsChanged pending (capacity 1)
	once   sync.Once
}

// NewManager validates the servers (an invalid or duplicate one is an
// invalid_argument error, and nothing is started) and connects to all of
// them in parallel. It returns once every server has connected or failed
// its first attempt, or ctx ends, whichever is first; a server that has not
// connected by then goes on trying in the background (see Options.RetryMin),
// so a slow or broken server never keeps Rein from starting.
func NewManager(ctx context.Context, servers []Server, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryMin)
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	m := &Manager{opts: opts, log: opts.Logger, servers: make(map[string]*server, len(servers)), notify: make(chan struct{}, 1)}
	for _, cfg := range servers {
		if err := cfg.Validate(); err != nil {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "%w", err)
		}
		if _, dup := m.servers[cfg.Name]; dup {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "MCP server %q configured twice", cfg.Name)
		}
		m.servers[cfg.Name] = newServer(m, cfg)
		m.order = append(m.order, cfg.Name)
	}
	slices.Sort(m.order)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if opts.OnToolsChanged != nil {
		m.spawn(m.notifier)
	}
	first := make([]chan struct{}, 0, len(m.order))
	for _, name := range m.order {
		s := m.servers[name]
		done := make(chan struct{})
		first = append(first, done)
		m.spawn(func() { s.keepTrying(done) })
	}
	for _, done := range first {
		select {
		case <-done:
		case <-ctx.Done():
			return m, nil
		}
	}
	return m, nil
}

// Tools returns the tools of every server as last listed, sorted by name:
// those of a server that has never connected are missing, those of one that
// was lost stay (a call reconnects it or fails with an error result). Read
// it when building an agent's tool list (once per run); a later call sees
// servers that connected since.
func (m *Manager) Tools() []tool.Tool {
	var out []tool.Tool
	for _, name := range m.order {
		out = append(out, m.servers[name].snapshot()...)
	}
	slices.SortFunc(out, func(a, b tool.Tool) int { return strings.Compare(a.Spec().Name, b.Spec().Name) })
	return out
}

// Call calls the tool named SERVER__TOOL, whether or not Tools() currently
// lists it: a caller holding a name from an older snapshot, or naming a tool
// of a server that has not connected yet, gets the server's answer or an
// error naming the server (and the server is tried again). It does not
// validate the input: the registry does that for the tools it holds.
func (m *Manager) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	srv, remote, ok := strings.Cut(call.Name, Separator)
	s := m.servers[srv]
	if !ok || s == nil || remote == "" {
		return tool.Result{}, fmt.Errorf("no MCP server offers a tool %q (servers: %s)", call.Name, m.list())
	}
	return s.call(ctx, remote, call)
}

func (m *Manager) list() string {
	if len(m.order) == 0 {
		return "none"
	}
	return strings.Join(m.order, ", ")
}

// Close disconnects every server, stops every stdio process (closing its
// stdin, then SIGTERM, then SIGKILL, StopTimeout apart) and every
// goroutine the Manager started, and waits for them. Calls in flight fail
// with an error result. Close is idempotent; calls after it fail.
func (m *Manager) Close() {
	m.once.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.cancel()
		var wg sync.WaitGroup
		for _, s := range m.servers {
			wg.Go(s.shutdown)
		}
		wg.Wait()
		m.wg.Wait()
		for _, s := range m.servers {
			s.closeIdle()
		}
	})
}

// spawn runs f on a goroutine that Close waits for; it reports false, and
// does not run f, once the Manager is closed.
func (m *Manager) spawn(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Go(f)
	return true
}

// toolsChanged schedules OnToolsChanged.
func (m *Manager) toolsChanged() {
	if m.opts.OnToolsChanged == nil {
		return
	}
	select {
	case m.notify <- struct{}{}:
	default: // one is pending already; it will see this change too
	}
}

func (m *Manager) notifier() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.notify:
			m.opts.OnToolsChanged()
		}
	}
}

// safeEnv is what a stdio server inherits from Rein's environment.
var safeEnv = []string{"HOME", "LANG", "LC_ALL", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR", "TZ", "USER"}

// environ is a stdio server's environment: safeEnv from lookup, then env
// (sorted, so a test or a log sees a stable order).
func environ(lookup func(string) (string, bool), env map[string]string) []string {
	var out []string
	for _, k := range safeEnv {
		if _, over := env[k]; over {
			continue
		}
		if v, ok := lookup(k); ok {
			out = append(out, k+"="+v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
