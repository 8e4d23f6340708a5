package anthropic

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// stream turns Messages API events into model.Chunks. It is used by one
// goroutine at a time (model.Stream's contract), so its state has no
// locks; Close, which may come from another goroutine, only sets a flag and
// closes the body.
type stream struct {
	ctx context.Context
	sdk *ssestream.Stream[sdk.MessageStreamEventUnion]

	pending []model.Chunk
	tools   map[int64]*toolBuf // open tool_use blocks by content index

	input, output int64 // usage so far
	sawUsage      bool
	stopReason    string
	ended         bool
	err           error

	closed atomic.Bool // set by Close, which may run while Recv blocks
}

type toolBuf struct {
	id, name string
	json     strings.Builder
}

func newStream(ctx context.Context, s *ssestream.Stream[sdk.MessageStreamEventUnion]) *stream {
	return &stream{ctx: ctx, sdk: s, tools: map[int64]*toolBuf{}}
}

// Recv returns the next chunk. Cancelling the stream's context makes a
// blocked Recv return at once: the HTTP transport aborts the body read.
func (s *stream) Recv() (model.Chunk, error) {
	for {
		if s.err != nil {
			return model.Chunk{}, s.err
		}
		if s.closed.Load() {
			return model.Chunk{}, s.fail(provider.ErrClosed(name))
		}
		if s.ctx.Err() != nil {
			return model.Chunk{}, s.fail(provider.CtxErr(s.ctx, name))
		}
		if len(s.pending) > 0 {
			c := s.pending[0]
			s.pending = s.pending[1:]
			return c, nil
		}
		if s.ended {
			return model.Chunk{}, io.EOF
		}
		if !s.sdk.Next() {
			s.broken()
			continue
		}
		s.decode(s.sdk.Current())
	}
}

// broken handles the server's stream ending before message_stop.
func (s *stream) broken() {
	err := s.sdk.Err()
	switch {
	case s.closed.Load():
		s.fail(provider.ErrClosed(name))
	case err == nil:
		s.fail(provider.StreamEnded(name, "before message_stop"))
	case s.ctx.Err() != nil:
		s.fail(provider.CtxErr(s.ctx, name))
	default:
		detail := ""
		var apiErr *sdk.Error
		if errors.As(err, &apiErr) {
			// An error event: {"type":"error","error":{"type":..., "message":...}}.
			detail = apiErr.Message
			if t := string(apiErr.Type()); t != "" {
				detail = t + ": " + detail
			}
		}
		s.fail(provider.StreamError(name, detail, err))
	}
}

func (s *stream) decode(ev sdk.MessageStreamEventUnion) {
	switch ev.Type {
	case "message_start":
		u := ev.Message.Usage
		s.input = u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
		s.output = u.OutputTokens
		s.sawUsage = ev.Message.JSON.Usage.Valid()
	case "content_block_start":
		cb := ev.ContentBlock
		switch cb.Type {
		case "text":
			s.text(cb.Text)
		case "tool_use":
			s.tools[ev.Index] = &toolBuf{id: cb.ID, name: cb.Name}
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			s.text(ev.Delta.Text)
		case "input_json_delta":
			if b := s.tools[ev.Index]; b != nil {
				b.json.WriteString(ev.Delta.PartialJSON)
			}
		}
		// thinking, signature and citation deltas are not part of the reply.
	case "content_block_stop":
		s.closeTool(ev.Index)
	case "message_delta":
		if r := string(ev.Delta.StopReason); r != "" {
			s.stopReason = r
		}
		// message_delta counts are cumulative: they replace, not add.
		u := ev.Usage
		if u.JSON.OutputTokens.Valid() {
			s.output, s.sawUsage = u.OutputTokens, true
		}
		if in := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens; in > 0 {
			s.input, s.sawUsage = in, true
		}
	case "message_stop":
		if s.stopReason == "" {
			s.fail(provider.StreamEnded(name, "without a stop reason"))
			return
		}
		// A tool_use block still open here was cut off; pass on what came.
		for _, i := range slices.Sorted(maps.Keys(s.tools)) {
			s.closeTool(i)
		}
		if s.sawUsage {
			s.pending = append(s.pending, model.Chunk{Kind: model.ChunkUsage, Usage: &rein.Usage{InputTokens: s.input, OutputTokens: s.output}})
		}
		s.pending = append(s.pending, model.Chunk{Kind: model.ChunkFinish, Finish: finish(s.stopReason), FinishRaw: s.stopReason})
		s.ended = true
	}
}

// closeTool passes on the tool call of content block i, if it is one.
func (s *stream) closeTool(i int64) {
	b := s.tools[i]
	if b == nil {
		return
	}
	delete(s.tools, i)
	callID := b.id
	if callID == "" {
		callID = id.New(id.ToolUse)
	}
	// An empty input streams no input_json_delta: ToolInput makes it {}.
	s.pending = append(s.pending, model.Chunk{Kind: model.ChunkToolCall, ToolCall: &rein.ToolCall{
		ID: callID, Name: b.name, Input: provider.ToolInput(b.json.String()),
	}})
}

func (s *stream) text(t string) {
	if t != "" {
		s.pending = append(s.pending, model.Chunk{Kind: model.ChunkText, Text: t})
	}
}

// finish normalises a stop reason.
func finish(r string) string {
	switch r {
	case "end_turn", "stop_sequence":
		return model.FinishStop
	case "tool_use":
		return model.FinishToolCalls
	case "max_tokens", "model_context_window_exceeded":
		return model.FinishLength
	default: // pause_turn, refusal, and whatever comes next
		return model.FinishOther
	}
}

func (s *stream) fail(err error) error {
	s.err = err
	s.pending = nil
	_ = s.sdk.Close()
	return err
}

// Close releases the connection. It is safe to call more than once, and
// while another goroutine is blocked in Recv, which then fails at once (the
// body is closed under it); Recv after Close fails.
func (s *stream) Close() error {
	s.closed.Store(true)
	_ = s.sdk.Close()
	return nil
}
