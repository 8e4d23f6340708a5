package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync/atomic"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// stream turns Chat Completions chunks into model.Chunks. It is used by one
// goroutine at a time (model.Stream's contract), so its state has no
// locks; Close, which may come from another goroutine, only sets a flag and
// closes the body.
type stream struct {
	ctx      context.Context
	provider string
	sdk      *ssestream.Stream[oai.ChatCompletionChunk]

	pending []model.Chunk      // decoded, not yet returned
	calls   map[int64]*callBuf // the call each index is currently assembling
	order   []*callBuf         // every call, in order of first appearance
	usage   *rein.Usage

	finishRaw string // the finish_reason, once seen
	flushed   bool   // tool calls passed on
	ended     bool   // the server ended the stream; pending holds the rest
	err       error  // sticky: every Recv after a failure returns it

	closed atomic.Bool // set by Close, which may run while Recv blocks
}

type callBuf struct {
	id, name string
	args     strings.Builder
}

func newStream(ctx context.Context, provider string, sdk *ssestream.Stream[oai.ChatCompletionChunk]) *stream {
	return &stream{ctx: ctx, provider: provider, sdk: sdk, calls: map[int64]*callBuf{}}
}

// Recv returns the next chunk. Cancelling the stream's context makes a
// blocked Recv return at once: the HTTP transport aborts the body read.
func (s *stream) Recv() (model.Chunk, error) {
	for {
		if s.err != nil {
			return model.Chunk{}, s.err
		}
		if s.closed.Load() {
			return model.Chunk{}, s.fail(provider.ErrClosed(s.provider))
		}
		if s.ctx.Err() != nil {
			return model.Chunk{}, s.fail(provider.CtxErr(s.ctx, s.provider))
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
			s.end()
			continue
		}
		s.decode(s.sdk.Current())
	}
}

// end handles the end of the server's stream: a clean end after a finish
// reason queues the tool calls (if not yet passed on), usage and finish;
// anything else is an error.
func (s *stream) end() {
	if s.closed.Load() {
		s.fail(provider.ErrClosed(s.provider))
		return
	}
	if err := s.sdk.Err(); err != nil {
		if s.ctx.Err() != nil {
			s.fail(provider.CtxErr(s.ctx, s.provider))
			return
		}
		detail := ""
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			// {"error": {"message": ..., "type": ...}} sent as a data line.
			var body struct {
				Error struct{ Message, Type string }
			}
			if json.Unmarshal(se.Event.Data, &body) == nil && body.Error.Message != "" {
				detail = body.Error.Message
				if body.Error.Type != "" {
					detail = body.Error.Type + ": " + detail
				}
			} else {
				detail = se.Message
			}
		}
		s.fail(provider.StreamError(s.provider, detail, err))
		return
	}
	if s.finishRaw == "" {
		s.fail(provider.StreamEnded(s.provider, "without a finish reason"))
		return
	}
	s.flushCalls()
	if s.usage != nil {
		s.pending = append(s.pending, model.Chunk{Kind: model.ChunkUsage, Usage: s.usage})
	}
	s.pending = append(s.pending, model.Chunk{Kind: model.ChunkFinish, Finish: s.finish(), FinishRaw: s.finishRaw})
	s.ended = true
}

func (s *stream) decode(c oai.ChatCompletionChunk) {
	if c.JSON.Usage.Valid() && (c.Usage.PromptTokens != 0 || c.Usage.CompletionTokens != 0) {
		// Servers send usage once, in a last chunk with no choices; keep
		// the last value rather than summing, in case one repeats it.
		s.usage = &rein.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // n=1 is requested; other choices are not ours
		}
		d := ch.Delta
		if d.Content != "" {
			s.pending = append(s.pending, model.Chunk{Kind: model.ChunkText, Text: d.Content})
		}
		if d.Refusal != "" {
			// A refusal is the model's answer; show it like text.
			s.pending = append(s.pending, model.Chunk{Kind: model.ChunkText, Text: d.Refusal})
		}
		for _, tc := range d.ToolCalls {
			b := s.calls[tc.Index]
			if b == nil || (tc.ID != "" && b.id != "" && tc.ID != b.id) {
				// A new call; a new id at a used index is a new call too
				// (some servers number every call 0).
				b = &callBuf{}
				s.calls[tc.Index] = b
				s.order = append(s.order, b)
			}
			if tc.ID != "" {
				b.id = tc.ID
			}
			if tc.Function.Name != "" {
				// Some servers repeat the name in every delta; it is a
				// name, not a stream of name pieces.
				b.name = tc.Function.Name
			}
			b.args.WriteString(tc.Function.Arguments)
		}
		if ch.FinishReason != "" && s.finishRaw == "" {
			s.finishRaw = ch.FinishReason
			// The calls are complete once the model has finished; pass
			// them on now rather than after the trailing usage chunk.
			s.flushCalls()
		}
	}
}

func (s *stream) flushCalls() {
	if s.flushed {
		return
	}
	s.flushed = true
	for _, b := range s.order {
		callID := b.id
		if callID == "" {
			// Some compatible servers omit ids; a transcript needs one.
			callID = id.New(id.ToolUse)
		}
		s.pending = append(s.pending, model.Chunk{Kind: model.ChunkToolCall, ToolCall: &rein.ToolCall{
			ID: callID, Name: b.name, Input: provider.ToolInput(b.args.String()),
		}})
	}
}

// finish normalises the finish reason. Some compatible servers say "stop"
// for a reply that calls tools; the calls decide.
func (s *stream) finish() string {
	switch s.finishRaw {
	case "stop":
		if len(s.order) > 0 {
			return model.FinishToolCalls
		}
		return model.FinishStop
	case "tool_calls", "function_call":
		return model.FinishToolCalls
	case "length":
		return model.FinishLength
	default:
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
