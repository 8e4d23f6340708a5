// Package model defines how Rein talks to a language model: one streaming
// request per agent step, yielding text deltas, complete tool calls and token
// usage. Providers live in subpackages (openai, anthropic, scripted); the
// modeltest suite holds them all to the same contract.
//
// The interface is deliberately small so that a provider is "map Rein's
// transcript to the API, map the stream back", and so that cancellation has
// one meaning everywhere: cancelling the request's context aborts the
// stream at once.
package model

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/reinhq/rein"
)

// Model is a language model provider.
type Model interface {
	// Name is the model's configured name, e.g. "openai:gpt-4o" or
	// "scripted:testdata/x.yaml".
	Name() string
	// Stream starts one model request. The returned Stream is bound to ctx:
	// once ctx is done, Recv MUST return promptly (without waiting for the
	// next chunk from the network) with an error wrapping ctx's error, and
	// MUST NOT present a partial message as complete. An error from Stream
	// itself means the request failed before any output.
	Stream(ctx context.Context, req *Request) (Stream, error)
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	// InputSchema is a JSON Schema object for the tool's input.
	InputSchema json.RawMessage
}

// Request is one model request (one agent step).
type Request struct {
	// System is the system prompt ("" for none).
	System string
	// Messages is the transcript; it satisfies rein.ValidateTranscript.
	// Hint messages carry supplements and notices.
	Messages []rein.Message
	// Tools the model may call.
	Tools []ToolSpec
	// MaxTokens caps the reply; 0 means the provider's default.
	MaxTokens int

	// RunID, Step and Input describe where the request comes from. Real
	// providers ignore them; the scripted model uses them (docs/models.md: .Step,
	// .Input, and .Hints = hint messages of this run and step).
	RunID string
	Step  int
	Input string
}

// ChunkKind says what a Chunk carries.
type ChunkKind int

// Chunk kinds.
const (
	// ChunkText carries a text delta.
	ChunkText ChunkKind = iota + 1
	// ChunkToolCall carries one complete tool call (arguments assembled).
	ChunkToolCall
	// ChunkUsage carries token usage; may come more than once (summed).
	ChunkUsage
	// ChunkFinish carries the finish reason; it is the last chunk.
	ChunkFinish
)

// Finish reasons, normalised across providers.
const (
	FinishStop      = "stop"       // the model ended its turn
	FinishToolCalls = "tool_calls" // the model wants tool results
	FinishLength    = "length"     // the token limit cut the reply
	FinishOther     = "other"      // anything else the provider said
)

// Chunk is one piece of a streamed reply.
type Chunk struct {
	Kind     ChunkKind
	Text     string
	ToolCall *rein.ToolCall
	Usage    *rein.Usage
	// Finish is one of the Finish* constants; Raw keeps the provider's word.
	Finish    string
	FinishRaw string
}

// Stream is an in-flight model reply.
type Stream interface {
	// Recv returns the next chunk, or io.EOF after the last one (which is a
	// ChunkFinish). After ctx is done it returns an error wrapping ctx's
	// error promptly.
	Recv() (Chunk, error)
	// Close releases the stream; it is safe to call more than once and
	// after Recv returned an error.
	Close() error
}

// ErrUnknownModel is returned (wrapped) when a model name names no provider.
var ErrUnknownModel = errors.New("unknown model")
