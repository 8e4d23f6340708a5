package agent

import (
	"context"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/inbox"
)

// Transcript is one session's history as a simple Journal keeps it.
type Transcript interface {
	// Load returns the history.
	Load(ctx context.Context) ([]rein.Message, error)
	// Append adds messages atomically.
	Append(ctx context.Context, msgs ...rein.Message) error
}

// NewJournal returns a Journal over separate parts — a transcript, an event
// sink and an optional inbox — for running the loop without a store (a
// library embedding the agent alone, tests). Its writes are not atomic
// across the parts: a crash between two of them is not recoverable the way
// the sessions service's journal is. runID tags the supplements it
// consumes.
func NewJournal(runID string, t Transcript, events Sink, in inbox.Session) Journal {
	return &simpleJournal{runID: runID, t: t, events: events, in: in}
}

type simpleJournal struct {
	runID  string
	t      Transcript
	events Sink
	in     inbox.Session
}

func (j *simpleJournal) Load(ctx context.Context) ([]rein.Message, error) { return j.t.Load(ctx) }

func (j *simpleJournal) SaveInput(ctx context.Context, m rein.Message) error {
	return j.t.Append(ctx, m)
}

func (j *simpleJournal) Consume(ctx context.Context, step int) ([]rein.Message, error) {
	if j.in == nil {
		return nil, nil
	}
	sups, err := j.in.Consume(ctx, j.runID, step)
	if err != nil || len(sups) == 0 {
		return nil, err
	}
	hints := make([]rein.Message, len(sups))
	evs := make([]rein.Event, len(sups))
	for i, s := range sups {
		hints[i] = inbox.Message(s)
		evs[i] = rein.NewEvent(rein.EventSupplementConsumed, j.runID,
			rein.SupplementConsumedPayload{SupplementID: s.ID, RunID: j.runID, Step: step})
	}
	if err := j.t.Append(ctx, hints...); err != nil {
		return nil, err
	}
	return hints, j.events.Emit(ctx, evs...)
}

func (j *simpleJournal) Pending(ctx context.Context) (int, error) {
	if j.in == nil {
		return 0, nil
	}
	return j.in.Pending(ctx)
}

func (j *simpleJournal) SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall, req *rein.ModelRequestPayload) error {
	if err := j.t.Append(ctx, asst); err != nil {
		return err
	}
	evs := StepEvents(j.runID, step, asst.ToolCalls, confirm)
	if req != nil {
		evs = append([]rein.Event{ModelRequestEvent(*req)}, evs...)
	}
	if len(evs) == 0 {
		return nil
	}
	return j.events.Emit(ctx, evs...)
}

func (j *simpleJournal) SaveResult(ctx context.Context, res rein.Message) error {
	if err := j.t.Append(ctx, res); err != nil {
		return err
	}
	return j.events.Emit(ctx, ResultEvent(res))
}

func (j *simpleJournal) Finish(ctx context.Context, msgs []rein.Message, evs []rein.Event) error {
	if len(msgs) > 0 {
		if err := j.t.Append(ctx, msgs...); err != nil {
			return err
		}
	}
	if len(evs) == 0 {
		return nil
	}
	return j.events.Emit(ctx, evs...)
}

// StepEvents returns the events SaveStep records for a step's calls: an
// agent.tool_use per call, then a session.tool_confirmation_requested per
// call in confirm, each in the model's order.
func StepEvents(runID string, step int, calls, confirm []rein.ToolCall) []rein.Event {
	evs := make([]rein.Event, 0, len(calls)+len(confirm))
	for _, c := range calls {
		evs = append(evs, rein.NewEvent(rein.EventToolUse, runID, rein.ToolUsePayload{
			RunID: runID, Step: step, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)}))
	}
	for _, c := range confirm {
		evs = append(evs, rein.NewEvent(rein.EventToolConfirmationRequested, runID, rein.ToolConfirmationRequestedPayload{
			RunID: runID, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)}))
	}
	return evs
}

// ModelRequestEvent returns the agent.model_request event of an ended
// model request.
func ModelRequestEvent(p rein.ModelRequestPayload) rein.Event {
	return rein.NewEvent(rein.EventModelRequest, p.RunID, p)
}

// ResultEvent returns the agent.tool_result event of a saved tool result.
func ResultEvent(res rein.Message) rein.Event {
	return rein.NewEvent(rein.EventToolResult, res.RunID, rein.ToolResultPayload{
		RunID: res.RunID, ToolUseID: res.ToolCallID, Output: res.Text, IsError: res.IsError})
}
