// The loop's ports: what a runtime binds for each run (the Turn and its
// Journal, Sink and Confirmer) and the Control it steers the run with.

package agent

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/tool"
)

// Sink receives the events a run streams while it works: the
// agent.message.delta events of a model request and agent.step_restarted.
// It MUST be safe for concurrent use and keep Emit order. An implementation
// may write asynchronously and coalesce consecutive deltas; it reports a
// write failure no later than the next Emit. Everything else a run records
// goes through its Journal, in atomic writes.
type Sink interface {
	Emit(ctx context.Context, evs ...rein.Event) error
}

// DeltaSink is optionally implemented by a Sink that takes streamed text
// as it is: EmitDelta(ctx, runID, step, text) is Emit of the
// agent.message.delta {run_id, step, text}, and the loop calls it instead,
// so a Sink that coalesces deltas encodes each merged event once rather
// than every chunk.
type DeltaSink interface {
	EmitDelta(ctx context.Context, runID string, step int, text string) error
}

// Journal is where a run's progress becomes durable. Each method is one
// lifecycle transition of the run (DESIGN.md rule 5): one atomic write, so
// a crash between two calls leaves the run at a step boundary it can be
// resumed from (docs/api.md). Events a method records come after every event
// emitted to the Sink before the call.
type Journal interface {
	// Load returns the transcript the run continues from: the session's
	// earlier turns (rolled-back runs left out), this run's input, and
	// whatever this run saved before (a resumed run). Messages of this run
	// carry its RunID.
	Load(ctx context.Context) ([]rein.Message, error)
	// SaveInput saves the run's input message. The loop calls it only when
	// Load shows no input of the run: a runtime that saves the input when
	// the run starts never sees it called.
	SaveInput(ctx context.Context, m rein.Message) error
	// Consume moves the session's queued supplements into step: their
	// consumed state, their hint messages in the transcript and their
	// agent.supplement_consumed events are one write (docs/api.md). It returns
	// the hint messages, in push order (none: nil).
	Consume(ctx context.Context, step int) ([]rein.Message, error)
	// Pending reports how many supplements are queued.
	Pending(ctx context.Context) (int, error)
	// SaveStep saves a step's assistant message once its model request has
	// ended. The same write records req, the request's agent.model_request
	// (first, and its usage added to the run's), and with tool calls their
	// agent.tool_use events and, for the calls in confirm, the pending
	// confirmations and their session.tool_confirmation_requested events,
	// in the model's order (docs/tools.md). From then on the step's request
	// is never made again.
	SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall, req *rein.ModelRequestPayload) error
	// SaveResult saves one tool result and its agent.tool_result event in
	// one write, as soon as the call has finished: a call with a saved
	// result is never run again. Results may be saved in any order; Load
	// returns a step's results in the order of its calls.
	SaveResult(ctx context.Context, res rein.Message) error
	// Finish records the run's closing writes: transcript messages (the
	// final reply, a kept partial reply, synthetic results for calls a stop
	// cut short) and events (the agent.model_request of a request whose step
	// SaveStep did not save, their agent.tool_result, the agent.message). A
	// runtime may hold them to write with the run's terminal record in the
	// same write. It is the loop's last call.
	Finish(ctx context.Context, msgs []rein.Message, evs []rein.Event) error
}

// ConfirmRequest asks whether a tool call may run.
type ConfirmRequest struct {
	Session   rein.SessionKey
	RunID     string
	Step      int
	ToolUseID string
	Name      string
	Input     json.RawMessage
}

// Confirmer holds tool calls until a human decides (docs/tools.md).
type Confirmer interface {
	// Open registers interest in the answer to req before the request is
	// recorded (Journal.SaveStep), so an answer given the moment it is
	// announced is not missed. A resumed run opens calls whose request was
	// recorded before: their answer may already be stored.
	Open(req ConfirmRequest) (Pending, error)
}

// Pending is one open confirmation (*tool.Pending satisfies it).
type Pending interface {
	// Wait blocks until the decision arrives or ctx is done.
	Wait(ctx context.Context) (tool.Decision, error)
	// Close releases the confirmation; idempotent.
	Close()
}

// Turn binds one run to its session.
type Turn struct {
	Session rein.SessionKey
	RunID   string
	// Input is the user text that started the run.
	Input string
	// System is the system prompt for this run.
	System string
	// Model and Tools override the Agent's when set.
	Model model.Model
	Tools *tool.Registry
	// Workspace is the session's directory for tools that write files.
	Workspace string

	// Journal makes the run's progress durable (required).
	Journal Journal
	// Events receives streamed deltas (required).
	Events Sink
	// Confirm is optional: without one, a tool that needs confirmation is
	// denied.
	Confirm Confirmer
	// Park lets the loop end with ErrParked, writing nothing more, when its
	// step waits only for confirmation answers (the runtime keeps them
	// durable and takes the run up again when one comes); without it the
	// loop waits.
	Park bool
	// ParkOnStop, when set and true at the moment a stop reaches a step
	// that waits only for confirmation answers, parks the run instead of
	// stopping it (a server shutting down leaves such runs waiting).
	ParkOnStop func() bool
	// Attempt is 0 for a fresh run and 2, 3, … for a run resumed after its
	// instance was lost (docs/api.md): the loop continues from what Load shows,
	// and a step whose model request is made again is announced with
	// agent.step_restarted.
	Attempt int
	// InTools, with Attempt, says the lost attempt was cut in the tool
	// phase of the last saved step (some of its calls had no result when
	// the run was taken up): it never began the next model request, so that
	// request is no restart. Otherwise the next request may repeat one the
	// lost attempt had begun, and is announced.
	InTools bool
	// Observer, when set, watches the run's model requests and tool calls
	// (metrics, traces).
	Observer Observer

	// Price, when set, prices the run's model requests by model name; a
	// request of a model without a price costs nil.
	Price model.Prices
	// Budget bounds the run's own usage (the user.message's budget) and
	// SessionBudget the session's (docs/api.md "Budgets and usage"); zero:
	// no bound. Once one is reached the run makes no further model request
	// and ends with reason budget.
	Budget, SessionBudget rein.Budget
	// Spent is what the run's requests used before this attempt (a resumed
	// run's saved usage), and SessionSpent what the session's other runs
	// used: the budgets count them.
	Spent, SessionSpent rein.Usage
}

// Control is the part of a run's control the loop needs (run.Control
// satisfies it).
type Control interface {
	// RunContext survives an interrupt, not a cancel.
	RunContext() context.Context
	// Interrupted reports an interrupt and its message.
	Interrupted() (bool, string)
	// Commit declares the final reply; false if the run was cancelled.
	Commit() bool
}

// ErrParked is the error of a run that parked: its step waits only for
// confirmation answers, and the runtime (Turn.Park) keeps nothing of it
// running until one comes. The run is not over.
var ErrParked = errors.New("agent: run parked until its confirmations are answered")

// Answerable is optionally implemented by a Pending: it reports, without
// waiting, whether the answer is there. Parking needs it.
type Answerable interface {
	Answered(ctx context.Context) (bool, error)
}
