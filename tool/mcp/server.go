package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein/tool"
)

// IdempotencyKey is the _meta key that carries a call's tool_use_id.
const IdempotencyKey = "idempotency_key"

var errClosed = errors.New("the MCP manager is closed")

// server is one configured MCP server and its current session, if any.
//
// A session is made on demand by session(), one attempt at a time: every
// caller that needs one while an attempt is under way waits for that same
// attempt (or for its own context). A session that ends — the process
// exited, the connection broke, a call failed below the protocol — is
// forgotten, and the next session() makes a new one.
type server struct {
	m      *Manager
	cfg    Server
	log    *slog.Logger
	client *mcp.Client

	// HTTP only: a transport of its own, so Close can drop its idle
	// keep-alive connections (and their goroutines).
	httpTransport *http.Transport
	httpClient    *http.Client

	mu      sync.Mutex
	cs      *mcp.ClientSession // nil: not connected
	pending *attempt           // connection attempt under way
	tools   []tool.Tool        // as last listed

	refreshMu sync.Mutex // one tools/list refresh at a time
}

// attempt is one connection attempt; done is closed when cs or err is set.
type attempt struct {
	done chan struct{}
	cs   *mcp.ClientSession
	err  error
}

func newServer(m *Manager, cfg Server) *server {
	s := &server{m: m, cfg: cfg, log: m.log.With("mcp_server", cfg.Name)}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "rein", Version: "1"}, &mcp.ClientOptions{
		// Rein serves no roots, sampling or elicitation: advertise nothing.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
			// The handler runs on the session's reading goroutine: listing
			// from here would wait for a reply that goroutine must read.
			cs := req.Session
			s.m.spawn(func() { s.refresh(cs) })
		},
	})
	if cfg.URL != "" {
		s.httpTransport = http.DefaultTransport.(*http.Transport).Clone()
		var rt http.RoundTripper = s.httpTransport
		if len(cfg.Headers) > 0 {
			rt = headerTransport{base: s.httpTransport, headers: cfg.Headers}
		}
		s.httpClient = &http.Client{Transport: rt}
	}
	return s
}

// errorf builds an error naming the server, as the model will read it.
func (s *server) errorf(format string, args ...any) error {
	return fmt.Errorf("MCP server %q: "+format, append([]any{s.cfg.Name}, args...)...)
}

// keepTrying makes the first connection attempt, closes first, and, if the
// attempt failed, tries again with capped exponential backoff until one
// succeeds or the Manager closes. A call in between makes its own attempt
// (shared with this loop's, if one is under way).
func (s *server) keepTrying(first chan<- struct{}) {
	_, err := s.session(s.m.ctx)
	close(first)
	if err == nil || s.m.ctx.Err() != nil {
		return
	}
	delay := s.m.opts.RetryMin
	s.log.Error("MCP server failed at start-up; retrying in the background", "err", err, "retry_in", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-s.m.ctx.Done():
			return
		case <-t.C:
		}
		if _, err = s.session(s.m.ctx); err == nil || s.m.ctx.Err() != nil {
			return
		}
		delay = min(2*delay, s.m.opts.RetryMax)
		s.log.Warn("MCP server still unavailable", "err", err, "retry_in", delay)
		t.Reset(delay)
	}
}

// session returns the live session, connecting if there is none.
func (s *server) session(ctx context.Context) (*mcp.ClientSession, error) {
	s.mu.Lock()
	if cs := s.cs; cs != nil {
		s.mu.Unlock()
		return cs, nil
	}
	a := s.pending
	if a == nil {
		a = &attempt{done: make(chan struct{})}
		if !s.m.spawn(func() { s.connect(a) }) {
			s.mu.Unlock()
			return nil, errClosed
		}
		s.pending = a
	}
	s.mu.Unlock()
	select {
	case <-a.done:
		return a.cs, a.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// connect runs attempt a. It is bounded by ConnectTimeout and by the
// Manager's life, never by one caller's context: the callers waiting for it
// may come and go.
func (s *server) connect(a *attempt) {
	ctx, cancel := context.WithTimeout(s.m.ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	start := time.Now()
	cs, listed, err := s.dial(ctx)
	if err != nil && s.m.ctx.Err() != nil {
		err = errClosed
	}
	var changed bool
	s.mu.Lock()
	s.pending = nil
	if err == nil {
		if s.m.spawn(func() { s.watch(cs) }) {
			s.cs = cs
			changed = s.setTools(listed)
		} else {
			err = errClosed
		}
	}
	s.mu.Unlock()
	if err != nil {
		if cs != nil {
			_ = cs.Close()
			cs = nil
		}
		if !errors.Is(err, errClosed) {
			err = fmt.Errorf("cannot connect: %w", err)
		}
	} else {
		s.log.Info("MCP server connected", "tools", len(listed), "took", time.Since(start).Round(time.Millisecond))
	}
	a.cs, a.err = cs, err
	close(a.done)
	if changed {
		s.m.toolsChanged()
	}
}

// dial starts the process or reaches the URL, makes the MCP handshake and
// lists the tools.
func (s *server) dial(ctx context.Context) (*mcp.ClientSession, []*mcp.Tool, error) {
	var (
		t      mcp.Transport
		stderr *lineLogger
	)
	if len(s.cfg.Command) > 0 {
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Env = environ(os.LookupEnv, s.cfg.Env)
		stderr = &lineLogger{log: s.log}
		cmd.Stderr = stderr
		// A grandchild that keeps stderr open must not hold Close hostage.
		cmd.WaitDelay = s.m.opts.StopTimeout
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: s.m.opts.StopTimeout}
	} else {
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.httpClient}
	}
	var opts *mcp.ClientSessionOptions
	if s.m.opts.ProtocolVersion != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: s.m.opts.ProtocolVersion}
	}
	cs, err := s.client.Connect(ctx, t, opts)
	if err != nil {
		if last := stderr.last(); last != "" {
			err = fmt.Errorf("%w (its stderr said: %s)", err, last)
		}
		return nil, nil, err
	}
	listed, err := listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		return nil, nil, err
	}
	return cs, listed, nil
}

func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing tools: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// watch forgets cs when it ends, so that the next call reconnects rather
// than fail on a dead session.
func (s *server) watch(cs *mcp.ClientSession) {
	err := cs.Wait()
	if err == nil {
		err = errors.New("closed by the server")
	}
	s.lose(cs, err)
}

// lose forgets cs, if it is still the current session, and closes it.
func (s *server) lose(cs *mcp.ClientSession, why error) {
	s.mu.Lock()
	mine := s.cs == cs
	if mine {
		s.cs = nil
	}
	s.mu.Unlock()
	if !mine {
		return
	}
	if s.m.ctx.Err() == nil {
		s.log.Warn("MCP server connection lost; the next call reconnects", "err", why)
	}
	// Closing a stdio session waits for the process to exit: not on the
	// caller's time.
	if !s.m.spawn(func() { _ = cs.Close() }) {
		_ = cs.Close()
	}
}

// refresh lists cs's tools again after the server announced a change.
func (s *server) refresh(cs *mcp.ClientSession) {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	ctx, cancel := context.WithTimeout(s.m.ctx, s.m.opts.ConnectTimeout)
	defer cancel()
	listed, err := listTools(ctx, cs)
	if err != nil {
		if s.m.ctx.Err() == nil {
			s.log.Warn("MCP server announced new tools but listing them failed", "err", err)
		}
		return
	}
	s.mu.Lock()
	changed := s.cs == cs && s.setTools(listed)
	s.mu.Unlock()
	if changed {
		s.log.Info("MCP server changed its tools", "tools", len(listed))
		s.m.toolsChanged()
	}
}

// shutdown closes the current session (Manager.Close).
func (s *server) shutdown() {
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	if cs != nil {
		_ = cs.Close()
	}
}

func (s *server) closeIdle() {
	if s.httpTransport != nil {
		s.httpTransport.CloseIdleConnections()
	}
}

func (s *server) snapshot() []tool.Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tools)
}

// setTools replaces the offered tools with listed (s.mu held) and reports
// whether anything a model sees changed.
func (s *server) setTools(listed []*mcp.Tool) bool {
	next := make([]tool.Tool, 0, len(listed))
	seen := make(map[string]bool, len(listed))
	for _, t := range listed {
		rt, err := s.offer(t)
		if err != nil {
			s.log.Warn("MCP tool left out", "tool", t.Name, "err", err)
			continue
		}
		if seen[rt.spec.Name] {
			s.log.Warn("MCP tool listed twice; keeping the first", "tool", t.Name)
			continue
		}
		seen[rt.spec.Name] = true
		next = append(next, rt)
	}
	changed := !slices.EqualFunc(s.tools, next, func(a, b tool.Tool) bool {
		x, y := a.Spec(), b.Spec()
		return x.Name == y.Name && x.Description == y.Description && bytes.Equal(x.InputSchema, y.InputSchema)
	})
	s.tools = next
	return changed
}

// offer turns a listed tool into the tool.Tool the agent sees, or says why
// the registry would refuse it.
func (s *server) offer(t *mcp.Tool) (*remoteTool, error) {
	schema := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		schema = b
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	rt := &remoteTool{s: s, remote: t.Name, spec: tool.Spec{Name: s.cfg.Name + Separator + t.Name, Description: desc, InputSchema: schema}}
	// The registry's own checks (name, schema), so they cannot drift: a
	// tool it would refuse must not make a whole agent's registry fail.
	if _, err := tool.NewRegistry(tool.RegistryOptions{}, rt); err != nil {
		return nil, err
	}
	return rt, nil
}

// remoteTool is one MCP tool as a tool.Tool.
type remoteTool struct {
	s      *server
	remote string // the tool's name on its server
	spec   tool.Spec
}

func (t *remoteTool) Spec() tool.Spec { return t.spec }

func (t *remoteTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	return t.s.call(ctx, t.remote, call)
}

// call calls the server's tool remote.
func (s *server) call(ctx context.Context, remote string, c tool.Call) (tool.Result, error) {
	args := json.RawMessage(bytes.TrimSpace(c.Input))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// Close must not wait for calls in flight: the SDK's session Close
	// waits for them, and a slow tool could hold it for ever.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.m.ctx, func() { cancel(errClosed) })
	defer stop()
	for retried := false; ; retried = true {
		cs, err := s.session(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return tool.Result{}, s.errorf("call of %q cancelled: %w", remote, context.Cause(ctx))
			}
			return tool.Result{}, s.errorf("not available: %w", err)
		}
		// Fresh params per attempt: the SDK adds its own _meta keys.
		params := &mcp.CallToolParams{Name: remote, Arguments: args}
		if c.ID != "" {
			params.Meta = mcp.Meta{IdempotencyKey: c.ID}
		}
		res, err := cs.CallTool(ctx, params)
		if err == nil {
			return s.result(remote, res), nil
		}
		if ctx.Err() != nil {
			// The SDK has sent notifications/cancelled; the session is fine.
			return tool.Result{}, s.errorf("call of %q cancelled: %w", remote, context.Cause(ctx))
		}
		var wire *jsonrpc.Error
		if errors.As(err, &wire) {
			if wire.Code != codeRejected {
				// The server answered, with a protocol error: the session is fine.
				return tool.Result{}, s.errorf("tool %q: %s", remote, wire.Message)
			}
			// The HTTP exchange failed — the SDK says "not delivered", but
			// a server that died before its answer's headers looks the same,
			// so the call may have run — or got a transient status (5xx,
			// 429). The SDK keeps the session, and so do we: if the server
			// restarted, the next call meets a 404 and goes to a new one.
			return tool.Result{}, s.errorf("call of %q failed (the server may have crashed or restarted; the next call reconnects): %v", remote, err)
		}
		// Anything else is below the protocol — the process exited, the
		// connection broke, the answer was not MCP: this session is done.
		s.lose(cs, err)
		if !retried && refusedForSession(err) {
			// The server no longer knows the session (it restarted): it
			// answered this very request 404 without running it, so run it
			// on a new session.
			s.log.Info("MCP server dropped the session; reconnecting", "err", err)
			continue
		}
		return tool.Result{}, s.errorf("call of %q failed (the server may have crashed; the next call reconnects): %v", remote, err)
	}
}

// result maps an MCP result (docs/tools.md): the text of the text contents joined
// by "\n", other contents as their JSON; structured content as JSON when
// there is no content at all; isError: true → an error result.
func (s *server) result(remote string, res *mcp.CallToolResult) tool.Result {
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
			continue
		}
		b, err := json.Marshal(c)
		if err != nil {
			b = fmt.Appendf(nil, "(%T content that cannot be shown: %v)", c, err)
		}
		parts = append(parts, string(b))
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			parts = append(parts, string(b))
		}
	}
	out := tool.Result{Output: joinLines(parts), IsError: res.IsError}
	if out.IsError && out.Output == "" {
		out.Output = fmt.Sprintf("MCP server %q: tool %q failed without saying why", s.cfg.Name, remote)
	}
	return out
}

func joinLines(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	var b bytes.Buffer
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p)
	}
	return b.String()
}

// refusedForSession reports whether err says that the server answered the
// tools/call POST itself 404 "session not found", so the call never ran.
// The SDK returns ErrSessionMissing also when a stream broke and could not
// be resumed — after the call may have run — and tells the two apart only
// by its message, which names the request it was sending. Should that
// wording change, this errs on the safe side: no retry, an error result,
// and the next call reconnects.
func refusedForSession(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing) && strings.Contains(err.Error(), `sending "tools/call"`)
}

// codeRejected is the JSON-RPC code of the SDK's jsonrpc2.ErrRejected
// (internal to the SDK): a message its HTTP transport could not deliver.
const codeRejected = -32005

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// lineLogger logs a stdio server's stderr, one record per line, and keeps
// the last line for the error of a failed start.
type lineLogger struct {
	log *slog.Logger

	mu      sync.Mutex
	partial []byte
	lastOne string
}

// maxLine bounds what one stderr line may take in memory and in the log.
const maxLine = 4096

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLine - len(l.partial)
			l.partial = append(l.partial, p[:min(len(p), max(room, 0))]...)
			break
		}
		room := maxLine - len(l.partial)
		l.partial = append(l.partial, p[:min(i, max(room, 0))]...)
		line := string(bytes.TrimRight(l.partial, "\r"))
		l.partial = l.partial[:0]
		p = p[i+1:]
		if line != "" {
			l.lastOne = line
			l.log.Info("MCP server stderr", "line", line)
		}
	}
	return n, nil
}

func (l *lineLogger) last() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOne
}
