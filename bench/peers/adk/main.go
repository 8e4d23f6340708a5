// Command adk is the adk-go peer of Rein's peer comparison (bench/peers):
// an llmagent with the echo tool (functiontool), run by a runner.Runner
// over session.InMemoryService() in SSE streaming mode, with a fake
// model.LLM playing the harness script. adk-go's only stop is cancelling
// the context the run was started with; it has no cooperative stop.
//
// It is its own module so the main module never depends on adk-go.
package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/adk/v2/agent"
	"google.golang.org/adk/v2/agent/llmagent"
	"google.golang.org/adk/v2/model"
	"google.golang.org/adk/v2/runner"
	"google.golang.org/adk/v2/session"
	"google.golang.org/adk/v2/tool"
	"google.golang.org/adk/v2/tool/functiontool"
	"google.golang.org/genai"

	"github.com/reinhq/rein/bench/peers/adk/harness"
)

const module = "google.golang.org/adk/v2"

func main() {
	harness.Main(harness.ModuleVersion(module), map[string]harness.Builder{"adk": build})
}

type peer struct {
	r   *runner.Runner
	seq atomic.Int64
}

type echoArgs struct {
	Text string `json:"text"`
}

type echoResult struct {
	Text string `json:"text"`
}

func build(_ context.Context, cfg harness.Config) (harness.Peer, error) {
	echo, err := functiontool.New(functiontool.Config{Name: harness.EchoTool, Description: harness.EchoDescription},
		func(_ agent.Context, in echoArgs) (echoResult, error) {
			return echoResult{Text: cfg.Env.Echo(in.Text)}, nil
		})
	if err != nil {
		return nil, err
	}
	a, err := llmagent.New(llmagent.Config{
		Name:        "bench",
		Description: "peer comparison agent",
		Model:       &fakeLLM{cfg: cfg},
		Tools:       []tool.Tool{echo},
	})
	if err != nil {
		return nil, err
	}
	r, err := runner.New(runner.Config{AppName: "bench", Agent: a, SessionService: session.InMemoryService(), AutoCreateSession: true})
	if err != nil {
		return nil, err
	}
	return &peer{r: r}, nil
}

// run starts one run in a fresh session; the events come as the caller
// pulls them (the run executes in the caller's goroutine).
func (p *peer) run(ctx context.Context, input string) iter.Seq2[*session.Event, error] {
	sid := fmt.Sprint("s", p.seq.Add(1))
	return p.r.Run(ctx, "bench", sid, genai.NewContentFromText(input, genai.RoleUser),
		agent.RunConfig{StreamingMode: agent.StreamingModeSSE})
}

// consume reads a run's events as a caller does and returns the streamed
// (partial) text.
func consume(events iter.Seq2[*session.Event, error]) (string, error) {
	var b strings.Builder
	for ev, err := range events {
		if err != nil {
			return b.String(), err
		}
		if ev == nil || !ev.Partial || ev.Content == nil {
			continue
		}
		for _, part := range ev.Content.Parts {
			b.WriteString(part.Text)
		}
	}
	return b.String(), nil
}

func (p *peer) Run(ctx context.Context, input string) (string, error) {
	return consume(p.run(ctx, input))
}

func (p *peer) Start(ctx context.Context, input string) (harness.Handle, error) {
	ctx, cancel := context.WithCancel(ctx)
	h := &handle{cancel: cancel, done: make(chan error, 1)}
	events := p.run(ctx, input)
	// adk-go makes progress only while its iterator is pulled: the run
	// needs a goroutine of its own from the start.
	go func() {
		_, err := consume(events)
		h.done <- err
	}()
	return h, nil
}

type handle struct {
	cancel context.CancelFunc
	done   chan error
}

func (h *handle) Cancel() { h.cancel() }

func (h *handle) Stop() error {
	return fmt.Errorf("%w: adk-go has no cooperative stop (only cancelling the run's context)", harness.ErrUnsupported)
}

func (h *handle) Wait(ctx context.Context) error {
	select {
	case err := <-h.done:
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("ended with %v, want context.Canceled", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the run did not end: %w", ctx.Err())
	}
}

// fakeLLM is adk-go's model.LLM playing the harness script. It streams
// the way adk-go's Gemini model does: partial responses carrying the text
// chunks, then one complete response with the whole text.
type fakeLLM struct{ cfg harness.Config }

func (m *fakeLLM) Name() string { return "bench-fake" }

// input is the run's user text: the first user content's text.
func input(req *model.LLMRequest) string {
	for _, c := range req.Contents {
		if c == nil || c.Role != genai.RoleUser {
			continue
		}
		for _, p := range c.Parts {
			if p.Text != "" {
				return p.Text
			}
		}
	}
	return ""
}

// afterTool reports whether the request's last content is a tool result.
func afterTool(req *model.LLMRequest) bool {
	if n := len(req.Contents); n > 0 && req.Contents[n-1] != nil {
		for _, p := range req.Contents[n-1].Parts {
			if p.FunctionResponse != nil {
				return true
			}
		}
	}
	return false
}

func partial(text string) *model.LLMResponse {
	return &model.LLMResponse{Content: genai.NewContentFromText(text, genai.RoleModel), Partial: true}
}

func final(c *genai.Content) *model.LLMResponse {
	return &model.LLMResponse{Content: c, TurnComplete: true, FinishReason: genai.FinishReasonStop}
}

func (m *fakeLLM) GenerateContent(ctx context.Context, req *model.LLMRequest, _ bool) iter.Seq2[*model.LLMResponse, error] {
	return func(yield func(*model.LLMResponse, error) bool) {
		switch m.cfg.Model {
		case harness.ModelInstant:
			if yield(partial(harness.InstantReply), nil) {
				yield(final(genai.NewContentFromText(harness.InstantReply, genai.RoleModel)), nil)
			}
		case harness.ModelToolThenAnswer:
			if !afterTool(req) {
				call := &genai.FunctionCall{ID: harness.EchoCallID, Name: harness.EchoTool, Args: map[string]any{"text": input(req)}}
				yield(final(&genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: call}}}), nil)
				return
			}
			for i := range harness.AnswerChunks {
				if !yield(partial(harness.AnswerChunk(i)), nil) {
					return
				}
			}
			yield(final(genai.NewContentFromText(harness.Answer(), genai.RoleModel)), nil)
		case harness.ModelTicking:
			in := input(req)
			t := time.NewTimer(0)
			defer t.Stop()
			for i := 0; ; i++ {
				if i > 0 {
					t.Reset(harness.TickEvery)
					select {
					case <-t.C:
					case <-ctx.Done():
						yield(nil, ctx.Err())
						return
					}
				}
				if !yield(partial(harness.TickChunk(i)), nil) {
					return
				}
				if i == 0 {
					m.cfg.Env.Entered(in)
				}
			}
		case harness.ModelBlocked:
			m.cfg.Env.Entered(input(req))
			<-ctx.Done()
			yield(nil, ctx.Err())
		default:
			yield(nil, fmt.Errorf("%w: model behaviour %d", harness.ErrUnsupported, m.cfg.Model))
		}
	}
}
