package agent

import (
	"context"
	"time"

	"github.com/reinhq/rein"
)

// Observer watches a run's model requests and tool calls as they happen,
// for metrics and traces. The loop calls it on the run's goroutines (tool
// calls run concurrently), so an implementation MUST be safe for concurrent
// use, and fast: it sits on every step.
//
// The Started methods return the context the request or the call then
// runs with, so a tracer can put its span there (the provider's HTTP
// request, a tool's own spans and a subagent's run become its children).
// They MUST return ctx itself or a context derived from it: a stop reaches
// the work through it. Each Started is followed by exactly one Ended with
// the context Started returned.
//
// The loop depends on no telemetry library: an implementation turns these
// calls into spans or metrics (the sessions service feeds both).
type Observer interface {
	// ModelRequestStarted is called before a step's model request is sent.
	ModelRequestStarted(ctx context.Context, r ModelRequest) context.Context
	// ModelRequestEnded is called once the request's stream has ended,
	// whether it finished, failed or was cut by a stop.
	ModelRequestEnded(ctx context.Context, r ModelResponse)
	// ToolCallStarted is called before a tool executes (after its
	// confirmation, if it needed one: the wait for a human is not part of
	// the call). A call that is denied or that a stop cut before it ran is
	// not executed and not observed.
	ToolCallStarted(ctx context.Context, c ToolCall) context.Context
	// ToolCallEnded is called when the tool has returned (or was abandoned
	// after a stop).
	ToolCallEnded(ctx context.Context, r ToolResult)
}

// ModelRequest describes a model request about to be made.
type ModelRequest struct {
	Session rein.SessionKey
	RunID   string
	// Step counts the run's model requests from 1.
	Step int
	// Model is the model's configured name (model.Model.Name, e.g.
	// "openai:gpt-4o-mini").
	Model string
}

// ModelResponse is how a model request went.
type ModelResponse struct {
	ModelRequest
	// Duration is from sending the request to the end of its stream.
	Duration time.Duration
	// FirstDelta is from sending the request to its first streamed text;
	// zero when it streamed none.
	FirstDelta time.Duration
	// Usage is this request's token usage, as the provider reported it.
	Usage rein.Usage
	// Finish is the normalised finish reason (model.FinishStop, ...); ""
	// when the stream did not end with one.
	Finish string
	// ToolCalls counts the complete tool calls the model asked for.
	ToolCalls int
	// Err is why the request failed, nil when it finished. A stop's cut
	// shows as Stopped, not as Err.
	Err error
	// Stopped: a cancel, interrupt or timeout of the run cut the request.
	Stopped bool
}

// ToolCall describes a tool call about to execute.
type ToolCall struct {
	Session rein.SessionKey
	RunID   string
	Step    int
	// ID is the call's tool_use_id.
	ID string
	// Name is the tool's name as the model gave it.
	Name string
	// Known reports whether Name is a tool of the run's registry (a model
	// can name tools that do not exist: aggregate those under one label).
	Known bool
}

// ToolResult is how a tool call went.
type ToolResult struct {
	ToolCall
	// Duration is the call's execution time.
	Duration time.Duration
	// IsError is the result's error flag (a failed, timed-out or unknown
	// call, or a stop's synthetic result).
	IsError bool
	// Stopped: a stop of the run cut the call.
	Stopped bool
}
