package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/bench/peers/rein/harness"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/tool"
)

// fakeModel is Rein's model.Model playing the harness script. It is
// written against the interface directly rather than through
// model/scripted, so that Rein's fake costs what the peers' hand-written
// fakes cost (no templates, no rule matching).
type fakeModel struct {
	cfg harness.Config
}

func (m *fakeModel) Name() string { return "bench:fake" }

func (m *fakeModel) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	switch m.cfg.Model {
	case harness.ModelInstant:
		return &listStream{ctx: ctx, chunks: []model.Chunk{
			{Kind: model.ChunkText, Text: harness.InstantReply},
			{Kind: model.ChunkFinish, Finish: model.FinishStop},
		}}, nil
	case harness.ModelToolThenAnswer:
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == rein.RoleTool {
			chunks := make([]model.Chunk, 0, harness.AnswerChunks+1)
			for i := range harness.AnswerChunks {
				chunks = append(chunks, model.Chunk{Kind: model.ChunkText, Text: harness.AnswerChunk(i)})
			}
			return &listStream{ctx: ctx, chunks: append(chunks, model.Chunk{Kind: model.ChunkFinish, Finish: model.FinishStop})}, nil
		}
		call := &rein.ToolCall{ID: harness.EchoCallID, Name: harness.EchoTool, Input: json.RawMessage(harness.EchoArgs(req.Input))}
		return &listStream{ctx: ctx, chunks: []model.Chunk{
			{Kind: model.ChunkToolCall, ToolCall: call},
			{Kind: model.ChunkFinish, Finish: model.FinishToolCalls},
		}}, nil
	case harness.ModelTicking:
		return &tickStream{ctx: ctx, env: m.cfg.Env, input: req.Input}, nil
	case harness.ModelBlocked:
		return &blockedStream{ctx: ctx, env: m.cfg.Env, input: req.Input}, nil
	case harness.ModelStamped:
		return &stampStream{ctx: ctx, n: m.cfg.StampChunks, every: m.cfg.StampEvery}, nil
	}
	return nil, fmt.Errorf("fake model: unknown behaviour %d", m.cfg.Model)
}

// listStream hands over fixed chunks at once.
type listStream struct {
	ctx    context.Context
	chunks []model.Chunk
	i      int
}

func (s *listStream) Recv() (model.Chunk, error) {
	if err := s.ctx.Err(); err != nil {
		return model.Chunk{}, err
	}
	if s.i == len(s.chunks) {
		return model.Chunk{}, io.EOF
	}
	c := s.chunks[s.i]
	s.i++
	return c, nil
}

func (s *listStream) Close() error { return nil }

// tickStream is harness.ModelTicking: a chunk at once, then one every
// harness.TickEvery, until ctx ends.
type tickStream struct {
	ctx   context.Context
	env   *harness.Env
	input string
	i     int
	timer *time.Timer
}

func (s *tickStream) Recv() (model.Chunk, error) {
	if s.i > 0 {
		if s.i == 1 {
			s.env.Entered(s.input)
		}
		if s.timer == nil {
			s.timer = time.NewTimer(harness.TickEvery)
		} else {
			s.timer.Reset(harness.TickEvery)
		}
		select {
		case <-s.timer.C:
		case <-s.ctx.Done():
			return model.Chunk{}, s.ctx.Err()
		}
	}
	c := model.Chunk{Kind: model.ChunkText, Text: harness.TickChunk(s.i)}
	s.i++
	return c, nil
}

func (s *tickStream) Close() error {
	if s.timer != nil {
		s.timer.Stop()
	}
	return nil
}

// blockedStream is harness.ModelBlocked.
type blockedStream struct {
	ctx   context.Context
	env   *harness.Env
	input string
}

func (s *blockedStream) Recv() (model.Chunk, error) {
	s.env.Entered(s.input)
	<-s.ctx.Done()
	return model.Chunk{}, s.ctx.Err()
}

func (s *blockedStream) Close() error { return nil }

// stampStream is harness.ModelStamped.
type stampStream struct {
	ctx   context.Context
	n     int
	every time.Duration
	i     int
	timer *time.Timer
}

func (s *stampStream) Recv() (model.Chunk, error) {
	if s.i == s.n {
		s.i++
		return model.Chunk{Kind: model.ChunkFinish, Finish: model.FinishStop}, nil
	}
	if s.i > s.n {
		return model.Chunk{}, io.EOF
	}
	if s.i > 0 {
		if s.timer == nil {
			s.timer = time.NewTimer(s.every)
		} else {
			s.timer.Reset(s.every)
		}
		select {
		case <-s.timer.C:
		case <-s.ctx.Done():
			return model.Chunk{}, s.ctx.Err()
		}
	}
	s.i++
	return model.Chunk{Kind: model.ChunkText, Text: harness.Stamp()}, nil
}

func (s *stampStream) Close() error {
	if s.timer != nil {
		s.timer.Stop()
	}
	return nil
}

// echoTool is harness.EchoTool.
type echoTool struct{ env *harness.Env }

func (t echoTool) Spec() tool.Spec {
	return tool.Spec{Name: harness.EchoTool, Description: harness.EchoDescription, InputSchema: json.RawMessage(harness.EchoSchema)}
}

func (t echoTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Output: t.env.Echo(in.Text)}, nil
}
