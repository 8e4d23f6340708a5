// Command eino is the Eino peer of Rein's peer comparison (bench/peers):
// an adk.ChatModelAgent with the echo tool, run by an adk.Runner with
// streaming on, a fake model.ToolCallingChatModel playing the harness
// script. Immediate stop is adk.WithCancel's CancelImmediate; cooperative
// stop is CancelAfterChatModel bounded by WithAgentCancelTimeout (Eino's
// safe-point stop, which escalates to immediate when the bound passes).
//
// It is its own module so the main module never depends on Eino.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudwego/eino/adk"
	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/schema"

	"github.com/reinhq/rein/bench/peers/eino/harness"
)

const module = "github.com/cloudwego/eino"

func main() {
	harness.Main(harness.ModuleVersion(module), map[string]harness.Builder{"eino": build})
}

type peer struct {
	cfg       harness.Config
	runner    *adk.Runner
	escalated atomic.Int64
	stops     atomic.Int64
	started   atomic.Bool
}

func build(ctx context.Context, cfg harness.Config) (harness.Peer, error) {
	r, err := newRunner(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &peer{cfg: cfg, runner: r}, nil
}

// newRunner builds the agent and its runner.
func newRunner(ctx context.Context, cfg harness.Config) (*adk.Runner, error) {
	a, err := adk.NewChatModelAgent(ctx, &adk.ChatModelAgentConfig{
		Name:        "bench",
		Description: "peer comparison agent",
		Model:       &fakeModel{cfg: cfg},
		ToolsConfig: adk.ToolsConfig{ToolsNodeConfig: compose.ToolsNodeConfig{
			Tools: []tool.BaseTool{newEchoTool(cfg.Env)},
		}},
	})
	if err != nil {
		return nil, err
	}
	return adk.NewRunner(ctx, adk.RunnerConfig{Agent: a, EnableStreaming: true}), nil
}

// Notes implements harness.Noter.
func (p *peer) Notes() []string {
	var notes []string
	if p.started.Load() {
		notes = append(notes, "a started run gets a ChatModelAgent of its own: concurrent runs of one agent with WithCancel race on its per-run cancel state (cloudwego/eino#1177, open)")
	}
	if n := p.stops.Load(); n > 0 {
		notes = append(notes, fmt.Sprintf("cooperative stop = CancelAfterChatModel with WithAgentCancelTimeout(%v): %d of %d stops escalated to immediate on the timeout",
			p.cfg.StopTimeout, p.escalated.Load(), n))
	}
	return notes
}

// drain consumes a run's events as a caller does, reading every streamed
// message, and returns the assistant text and the last event error.
func drain(it *adk.AsyncIterator[*adk.AgentEvent]) (string, error) {
	var (
		b    strings.Builder
		last error
	)
	for {
		ev, ok := it.Next()
		if !ok {
			return b.String(), last
		}
		if ev.Err != nil {
			last = ev.Err
			continue
		}
		if ev.Output == nil || ev.Output.MessageOutput == nil {
			continue
		}
		mo := ev.Output.MessageOutput
		if !mo.IsStreaming {
			if mo.Role == schema.Assistant && mo.Message != nil {
				b.WriteString(mo.Message.Content)
			}
			continue
		}
		for {
			c, err := mo.MessageStream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					last = err
				}
				break
			}
			if mo.Role == schema.Assistant {
				b.WriteString(c.Content)
			}
		}
		mo.MessageStream.Close()
	}
}

func (p *peer) Run(ctx context.Context, input string) (string, error) {
	return drain(p.runner.Query(ctx, input))
}

// Start builds a fresh agent for the run (see Notes): a shared one lets a
// run pick up another's cancel scope when they start together.
func (p *peer) Start(ctx context.Context, input string) (harness.Handle, error) {
	p.started.Store(true)
	r, err := newRunner(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	opt, cancel := adk.WithCancel()
	return &handle{p: p, it: r.Query(ctx, input, opt), cancel: cancel}, nil
}

type handle struct {
	p      *peer
	it     *adk.AsyncIterator[*adk.AgentEvent]
	cancel adk.AgentCancelFunc
	coop   bool
}

func (h *handle) Cancel() {
	h.cancel(adk.WithAgentCancelMode(adk.CancelImmediate))
}

func (h *handle) Stop() error {
	h.coop = true
	h.p.stops.Add(1)
	h.cancel(adk.WithAgentCancelMode(adk.CancelAfterChatModel), adk.WithAgentCancelTimeout(h.p.cfg.StopTimeout))
	return nil
}

func (h *handle) Wait(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		_, err := drain(h.it)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("the run did not end: %w", ctx.Err())
	}
	var ce *adk.CancelError
	if !errors.As(err, &ce) {
		return fmt.Errorf("ended with %v, want a CancelError", err)
	}
	if h.coop && ce.Info != nil && ce.Info.Escalated {
		h.p.escalated.Add(1)
	}
	return nil
}

// fakeModel is Eino's model.ToolCallingChatModel playing the harness
// script.
type fakeModel struct{ cfg harness.Config }

func (m *fakeModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

// input is the run's user text: the first user message.
func input(msgs []*schema.Message) string {
	for _, m := range msgs {
		if m.Role == schema.User {
			return m.Content
		}
	}
	return ""
}

func (m *fakeModel) Generate(ctx context.Context, msgs []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	sr, err := m.Stream(ctx, msgs)
	if err != nil {
		return nil, err
	}
	defer sr.Close()
	var chunks []*schema.Message
	for {
		c, err := sr.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		chunks = append(chunks, c)
	}
	return schema.ConcatMessages(chunks)
}

func (m *fakeModel) Stream(ctx context.Context, msgs []*schema.Message, _ ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	switch m.cfg.Model {
	case harness.ModelInstant:
		return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage(harness.InstantReply, nil)}), nil
	case harness.ModelToolThenAnswer:
		if n := len(msgs); n > 0 && msgs[n-1].Role == schema.Tool {
			chunks := make([]*schema.Message, harness.AnswerChunks)
			for i := range chunks {
				chunks[i] = schema.AssistantMessage(harness.AnswerChunk(i), nil)
			}
			return schema.StreamReaderFromArray(chunks), nil
		}
		call := schema.ToolCall{ID: harness.EchoCallID, Type: "function",
			Function: schema.FunctionCall{Name: harness.EchoTool, Arguments: harness.EchoArgs(input(msgs))}}
		return schema.StreamReaderFromArray([]*schema.Message{schema.AssistantMessage("", []schema.ToolCall{call})}), nil
	case harness.ModelTicking:
		sr, sw := schema.Pipe[*schema.Message](1)
		in := input(msgs)
		go func() {
			defer sw.Close()
			t := time.NewTimer(0)
			defer t.Stop()
			for i := 0; ; i++ {
				if i > 0 {
					t.Reset(harness.TickEvery)
					select {
					case <-t.C:
					case <-ctx.Done():
						sw.Send(nil, ctx.Err())
						return
					}
				}
				if sw.Send(schema.AssistantMessage(harness.TickChunk(i), nil), nil) {
					return // the reader went away
				}
				if i == 0 {
					m.cfg.Env.Entered(in)
				}
			}
		}()
		return sr, nil
	case harness.ModelBlocked:
		// No answer yet: the request itself waits, as an HTTP request
		// waits for response headers.
		m.cfg.Env.Entered(input(msgs))
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("%w: model behaviour %d", harness.ErrUnsupported, m.cfg.Model)
}

// echoTool is harness.EchoTool.
type echoTool struct {
	env  *harness.Env
	info *schema.ToolInfo
}

func newEchoTool(env *harness.Env) echoTool {
	return echoTool{env: env, info: &schema.ToolInfo{Name: harness.EchoTool, Desc: harness.EchoDescription,
		ParamsOneOf: schema.NewParamsOneOfByParams(map[string]*schema.ParameterInfo{
			"text": {Type: schema.String, Required: true},
		})}}
}

func (t echoTool) Info(context.Context) (*schema.ToolInfo, error) { return t.info, nil }

func (t echoTool) InvokableRun(_ context.Context, args string, _ ...tool.Option) (string, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(args), &in); err != nil {
		return "", err
	}
	return t.env.Echo(in.Text), nil
}
