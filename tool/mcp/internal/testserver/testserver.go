// Package testserver is the MCP server the tests of package mcp talk to:
// the same tools served in-process (over the SDK's in-memory or streamable
// HTTP transports) and, through cmd/testserver, as a separate process on
// stdio, so one set of expectations covers both the wire and the client.
package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tools the server offers, besides those that Options turn on.
const (
	// ToolEcho answers {"text": s} with s.
	ToolEcho = "echo"
	// ToolAdd answers {"a": x, "b": y} with x+y.
	ToolAdd = "add"
	// ToolFail answers with an isError result whose text is FailText.
	ToolFail = "fail"
	// ToolIdem answers with the call's _meta.idempotency_key ("" when absent).
	ToolIdem = "idem"
	// ToolMixed answers with two text contents and an image.
	ToolMixed = "mixed"
	// ToolPID answers with the server process's id.
	ToolPID = "pid"
	// ToolEnv answers {"name": k} with the server process's $k.
	ToolEnv = "env"
	// ToolSlow blocks until its call is cancelled, and counts that.
	ToolSlow = "slow"
	// ToolWaitCancelled blocks until {"n"} calls of slow have started and
	// been cancelled (or its own call ends), then answers "started=S
	// cancelled=C". It lets a test on another process wait for the server
	// to observe a cancellation without sleeping.
	ToolWaitCancelled = "wait_cancelled"
	// ToolWaitStarted blocks until {"n"} calls of slow have started.
	ToolWaitStarted = "wait_started"
	// ToolCrash makes the process exit before answering (Options.Exit).
	ToolCrash = "crash"
	// ToolGarble writes a line that is not JSON where the answer should be
	// (Options.Garble).
	ToolGarble = "garble"
)

// FailText is the text of fail's error result.
const FailText = "it failed on purpose"

// Options add the tools that only make sense on a separate process.
type Options struct {
	// Exit, when not nil, adds the crash tool, which calls it.
	Exit func()
	// Garble, when not nil, adds the garble tool, which calls it and then
	// blocks until its call ends.
	Garble func()
}

// Server is an MCP server with the test tools and counters of what its slow
// tool saw.
type Server struct {
	*mcp.Server

	stop     chan struct{} // closed by Stop
	stopOnce sync.Once

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	started   int
	cancelled int
}

// New returns a server named name.
func New(name string, opts Options) *Server {
	s := &Server{
		Server:  mcp.NewServer(&mcp.Implementation{Name: name, Version: "test"}, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}}),
		changed: make(chan struct{}),
		stop:    make(chan struct{}),
	}
	type echoIn struct {
		Text string `json:"text" jsonschema:"what to say back"`
	}
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolEcho, Description: "Say the text back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	type addIn struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolAdd, Description: "Add two numbers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(in.A + in.B)), nil, nil
		})
	s.AddTool(&mcp.Tool{Name: ToolFail, Description: "Always fails.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res := text(FailText)
			res.IsError = true
			return res, nil
		})
	s.AddTool(&mcp.Tool{Name: ToolIdem, Description: "Tells the idempotency key it was called with.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta["idempotency_key"].(string)
			return text(key), nil
		})
	s.AddTool(&mcp.Tool{Name: ToolMixed, Description: "Answers with text and an image.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "first"},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}},
				&mcp.TextContent{Text: "second"},
			}}, nil
		})
	s.AddTool(&mcp.Tool{Name: ToolPID, Description: "Tells the server's process id.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprint(os.Getpid())), nil
		})
	type envIn struct {
		Name string `json:"name"`
	}
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolEnv, Description: "Tells an environment variable of the server."},
		func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolSlow, Description: "Waits until cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			s.update(func() { s.started++ })
			select {
			case <-ctx.Done():
			case <-s.stop:
				return nil, nil, errors.New("stopped")
			}
			s.update(func() { s.cancelled++ })
			return nil, nil, ctx.Err()
		})
	type waitIn struct {
		N int `json:"n"`
	}
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolWaitCancelled, Description: "Waits for n cancelled slow calls."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in waitIn) (*mcp.CallToolResult, any, error) {
			st, c := s.WaitCancelled(ctx, in.N)
			return text(fmt.Sprintf("started=%d cancelled=%d", st, c)), nil, nil
		})
	mcp.AddTool(s.Server, &mcp.Tool{Name: ToolWaitStarted, Description: "Waits for n started slow calls."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in waitIn) (*mcp.CallToolResult, any, error) {
			st := s.WaitStarted(ctx, in.N)
			return text(fmt.Sprintf("started=%d", st)), nil, nil
		})
	if opts.Exit != nil {
		s.AddTool(&mcp.Tool{Name: ToolCrash, Description: "Makes the server exit.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				opts.Exit()
				return text("still alive"), nil
			})
	}
	if opts.Garble != nil {
		s.AddTool(&mcp.Tool{Name: ToolGarble, Description: "Answers with garbage.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				opts.Garble()
				<-ctx.Done()
				return nil, ctx.Err()
			})
	}
	return s
}

// Stop ends the calls of slow in progress, as the death of the server's
// process would; a server in-process cannot otherwise close its sessions
// while they run (the SDK's ServerSession.Close waits for them).
func (s *Server) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func (s *Server) update(f func()) {
	s.mu.Lock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// wait blocks until cond holds (read under the lock) or ctx ends.
func (s *Server) wait(ctx context.Context, cond func() bool) {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// WaitStarted blocks until n calls of slow have started or ctx ends, and
// tells how many have.
func (s *Server) WaitStarted(ctx context.Context, n int) int {
	s.wait(ctx, func() bool { return s.started >= n })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// WaitCancelled blocks until n calls of slow have seen their context end or
// ctx ends, and tells how many have started and how many ended.
func (s *Server) WaitCancelled(ctx context.Context, n int) (started, cancelled int) {
	s.wait(ctx, func() bool { return s.cancelled >= n })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.cancelled
}
