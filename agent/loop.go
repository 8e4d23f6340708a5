// The loop itself: load what the run saved, then one model request per
// step until the model answers without tool calls, the step budget is spent
// or a stop comes.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
)

type loop struct {
	a     *Agent
	c     Control
	t     *Turn
	model model.Model
	tools *tool.Registry

	msgs  []rein.Message // the transcript as the next request sees it
	usage rein.Usage     // this attempt's requests
	// req is the agent.model_request of the last request that ended, until
	// a write records it (SaveStep, or Finish with the run's end).
	req *rein.ModelRequestPayload
	// open is the step whose tool calls are being answered: its assistant
	// message is saved, and every call without a saved result needs one
	// before the run may end (transcript validity).
	open     *stepState
	answered map[string]bool
	// opened holds the confirmations saveStep opened before recording
	// their requests, for runTools to wait on.
	opened map[string]Pending

	// live is the context of every store call made while the run is live
	// (stopCtx): one per run, not one per call. liveCancel releases it
	// when the run's loop returns.
	live       *liveCtx
	liveCancel context.CancelFunc
}

func (l *loop) emit(ctx context.Context, evs ...rein.Event) error {
	return l.t.Events.Emit(ctx, evs...)
}

// emitDelta streams one chunk of the step's text.
func (l *loop) emitDelta(ctx context.Context, step int, text string) error {
	if ds, ok := l.t.Events.(DeltaSink); ok {
		return ds.EmitDelta(ctx, l.t.RunID, step, text)
	}
	return l.emit(ctx, rein.NewEvent(rein.EventMessageDelta, l.t.RunID,
		rein.MessageDeltaPayload{RunID: l.t.RunID, Step: step, Text: text}))
}

// errStore marks a failure to record the run's progress: the run fails
// (reason error), it was not stopped.
type errStore struct{ err error }

func (e errStore) Error() string { return e.err.Error() }

func (e errStore) Unwrap() error { return e.err }

// fail ends the run with reason error. Calls of the open step that have no
// result get synthetic ones, so the transcript stays valid.
func (l *loop) fail(err error) run.Outcome {
	msgs, evs := l.closeOpenStep(rein.InterruptedToolOutput)
	evs = l.withRequest(evs)
	if len(msgs) > 0 || len(evs) > 0 {
		sctx, cancel := l.stopCtx()
		if ferr := l.t.Journal.Finish(sctx, msgs, evs); ferr != nil {
			l.a.cfg.Logger.Error("record synthetic tool results", "session", l.t.Session.String(), "run", l.t.RunID, "err", ferr)
		}
		cancel()
	}
	return run.Outcome{Reason: rein.ReasonError, Err: err, Usage: l.usage}
}

func (l *loop) run(ctx context.Context) run.Outcome {
	hist, err := l.t.Journal.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return l.stopped(ctx, nil)
		}
		return l.fail(fmt.Errorf("load transcript: %w", err))
	}
	// This run's own messages are the tail of the transcript (one run of a
	// session at a time). Earlier turns are repaired if a lost run left
	// them invalid; this run's tail is taken as saved, since a resumed
	// run's open step may still be waiting for answers.
	i := len(hist)
	for i > 0 && hist[i-1].RunID == l.t.RunID {
		i--
	}
	l.msgs = append(rein.RepairTranscript(hist[:i]), rein.OrderToolResults(hist[i:])...)
	own := l.msgs[len(l.msgs)-(len(hist)-i):]
	hasInput := false
	last := 0 // the last step whose model request ended and was saved
	var openAsst *rein.Message
	for k := range own {
		m := &own[k]
		switch {
		case m.Role == rein.RoleUser && m.Hint == nil:
			hasInput = true
		case m.Role == rein.RoleAssistant && !m.Partial:
			last, openAsst = m.Step, nil
			if len(m.ToolCalls) > 0 {
				openAsst = m
			}
		case m.Role == rein.RoleTool:
			if l.answered == nil {
				l.answered = map[string]bool{}
			}
			l.answered[m.ToolCallID] = true
		}
	}
	if openAsst != nil && l.answered == nil {
		// Made only for a run with tool calls to answer (saveStep makes
		// one per step), not for every run.
		l.answered = map[string]bool{}
	}
	if !hasInput {
		user := rein.Message{Role: rein.RoleUser, Text: l.t.Input, RunID: l.t.RunID}
		sctx, cancel := l.stopCtx()
		err := l.t.Journal.SaveInput(sctx, user)
		cancel()
		if err != nil {
			return l.fail(fmt.Errorf("save transcript: %w", err))
		}
		l.msgs = append(l.msgs, user)
	}

	// A resumed run's next model request may repeat one its lost attempt
	// had begun, streaming deltas: so whenever that attempt had left the
	// last saved step's tool phase (no calls, or every call answered), as
	// it was then free to make the next request. The announcement tells
	// readers to drop what they hold of that step.
	restart := l.t.Attempt >= 2 && !l.t.InTools && (openAsst == nil || answeredAll(openAsst.ToolCalls, l.answered))
	var lastText string
	if openAsst != nil {
		// Resumed in the tool phase of step last: the calls still without a
		// result are waiting for answers (the runtime answered every other
		// one, in doubt if it may have run).
		st := &stepState{step: last, text: openAsst.Text, calls: openAsst.ToolCalls, toolsStarted: true}
		l.open = st
		lastText = st.text
		if out, ok := l.runTools(ctx, st); !ok {
			return out
		}
	}
	extra := false // this step exists only by the final-step rule
	for step := last + 1; ; step++ {
		if step > l.a.cfg.MaxSteps && !extra {
			return l.finish(ctx, rein.ReasonMaxSteps, step-1, lastText, nil)
		}
		extra = false
		if ctx.Err() != nil {
			return l.stopped(ctx, nil)
		}
		if l.overBudget() {
			// Reached after an earlier request (of this run, or of the
			// session's other runs): no further request.
			return l.finish(ctx, rein.ReasonBudget, step-1, lastText, nil)
		}
		if err := l.readInbox(step); err != nil {
			return l.fail(err)
		}
		if restart {
			restart = false
			if err := l.emit(ctx, rein.NewEvent(rein.EventStepRestarted, l.t.RunID, rein.StepRestartedPayload{
				RunID: l.t.RunID, Step: step, Attempt: l.t.Attempt})); err != nil {
				return l.fail(errStore{err})
			}
		}
		st, err := l.request(ctx, step)
		if err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx, st)
			}
			return l.fail(err)
		}
		lastText = st.text
		asst := rein.Message{Role: rein.RoleAssistant, Text: st.text, ToolCalls: st.calls, RunID: l.t.RunID, Step: step}
		if len(st.calls) == 0 {
			// The final-step rule (docs/api.md): a supplement that arrived while
			// this request was in flight gets one more step in this run,
			// also past MaxSteps.
			n, err := l.pending(ctx)
			if err != nil && ctx.Err() != nil {
				return l.stopped(ctx, st)
			}
			if err == nil && n > 0 {
				sctx, cancel := l.stopCtx()
				err := l.t.Journal.SaveStep(sctx, step, asst, nil, l.req)
				cancel()
				if err != nil {
					return l.fail(fmt.Errorf("save transcript: %w", err))
				}
				l.req = nil
				l.msgs = append(l.msgs, asst)
				extra = true
				continue
			}
			return l.finish(ctx, rein.ReasonStop, step, st.text, &asst)
		}
		if l.overBudget() {
			// The step's calls are not made: answered as for a stop, in
			// the run's end write with the step itself.
			return l.budgetEnd(ctx, st, asst)
		}
		if out, ok := l.saveStep(ctx, st, asst); !ok {
			return out
		}
		if out, ok := l.runTools(ctx, st); !ok {
			return out
		}
	}
}

// answeredAll reports whether every call has a saved result.
func answeredAll(calls []rein.ToolCall, answered map[string]bool) bool {
	for _, c := range calls {
		if !answered[c.ID] {
			return false
		}
	}
	return true
}

func (l *loop) pending(ctx context.Context) (int, error) {
	return l.t.Journal.Pending(ctx)
}

// readInbox consumes queued supplements into this step's request. The
// write is not cut short by a stop arriving meanwhile: consumed is then
// consumed, and the hints are in the transcript of the next run.
func (l *loop) readInbox(step int) error {
	sctx, cancel := l.stopCtx()
	defer cancel()
	hints, err := l.t.Journal.Consume(sctx, step)
	if err != nil {
		return fmt.Errorf("read inbox: %w", err)
	}
	l.msgs = append(l.msgs, hints...)
	return nil
}

// stepState is what one model request produced so far.
type stepState struct {
	step  int
	text  string
	calls []rein.ToolCall
	// toolsStarted: the step's assistant message is saved and its calls
	// were dispatched.
	toolsStarted bool
	// For the Observer: the request's own usage, its finish reason and
	// when its first text arrived.
	usage     rein.Usage
	finish    string
	firstText time.Time
}

// request makes the step's model request, observed when the turn has an
// Observer.
func (l *loop) request(ctx context.Context, step int) (*stepState, error) {
	obs := l.t.Observer
	start := time.Now()
	if obs == nil {
		st, err := l.streamRequest(ctx, step)
		l.ended(ctx, st, time.Since(start), err)
		return st, err
	}
	info := ModelRequest{Session: l.t.Session, RunID: l.t.RunID, Step: step, Model: l.model.Name()}
	rctx := obs.ModelRequestStarted(ctx, info)
	st, err := l.streamRequest(rctx, step)
	d := time.Since(start)
	l.ended(ctx, st, d, err)
	r := ModelResponse{ModelRequest: info, Duration: d, Usage: st.usage, Finish: st.finish, ToolCalls: len(st.calls)}
	if !st.firstText.IsZero() {
		r.FirstDelta = st.firstText.Sub(start)
	}
	if err != nil {
		if ctx.Err() != nil {
			r.Stopped = true
		} else {
			r.Err = err
		}
	}
	obs.ModelRequestEnded(rctx, r)
	return st, err
}

func (l *loop) streamRequest(ctx context.Context, step int) (*stepState, error) {
	st := &stepState{step: step}
	req := &model.Request{
		System:   l.t.System,
		Messages: l.msgs,
		RunID:    l.t.RunID,
		Step:     step,
		Input:    l.t.Input,
	}
	req.Tools = l.toolSpecs()
	stream, err := l.model.Stream(ctx, req)
	if err != nil {
		return st, fmt.Errorf("model request: %w", err)
	}
	defer stream.Close()
	var seen map[string]bool
	var text strings.Builder
	defer func() { st.text = text.String() }()
	for {
		ch, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return st, nil
			}
			return st, fmt.Errorf("model stream: %w", err)
		}
		switch ch.Kind {
		case model.ChunkText:
			if ch.Text == "" {
				continue
			}
			if st.firstText.IsZero() && l.t.Observer != nil {
				st.firstText = time.Now()
			}
			text.WriteString(ch.Text)
			if err := l.emitDelta(ctx, step, ch.Text); err != nil {
				return st, errStore{err}
			}
		case model.ChunkToolCall:
			if ch.ToolCall == nil {
				continue
			}
			call := *ch.ToolCall
			if call.ID == "" || seen[call.ID] {
				call.ID = fmt.Sprintf("call_%s_%d_%d", l.t.RunID, step, len(st.calls)+1)
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[call.ID] = true
			if len(call.Input) == 0 {
				call.Input = json.RawMessage("{}")
			}
			st.calls = append(st.calls, call)
		case model.ChunkUsage:
			if ch.Usage != nil {
				st.usage = st.usage.Add(*ch.Usage)
			}
		case model.ChunkFinish:
			// The stream ends with io.EOF next.
			st.finish = ch.Finish
		}
	}
}

// toolSpecs are the tools offered to the model: built once per registry
// and shared by the requests of every run that offers it (a model reads a
// request's Tools, never changes them).
func (l *loop) toolSpecs() []model.ToolSpec {
	if l.tools == nil {
		return nil
	}
	if c := l.a.specs.Load(); c != nil && c.reg == l.tools {
		return c.specs
	}
	specs := l.tools.ModelTools()
	if len(specs) == 0 {
		specs = nil
	}
	l.a.specs.Store(&toolSpecs{reg: l.tools, specs: specs})
	return specs
}

// ended accounts for a request that ended (d after it began, err its
// failure): its usage, priced, joins the run's, and its agent.model_request
// waits for the write that records the step (l.req).
func (l *loop) ended(ctx context.Context, st *stepState, d time.Duration, err error) {
	name := l.model.Name()
	if l.t.Price != nil {
		if p, ok := l.t.Price(name); ok {
			c := p.Cost(st.usage)
			st.usage.CostUSD = &c
		}
	}
	l.usage = l.usage.Add(st.usage)
	outcome := rein.RequestOK
	switch {
	case err != nil && ctx.Err() != nil:
		outcome = rein.RequestStopped
	case err != nil:
		outcome = rein.RequestError
	}
	l.req = &rein.ModelRequestPayload{RunID: l.t.RunID, Step: st.step, Model: name, Usage: st.usage,
		DurationMS: d.Milliseconds(), Outcome: outcome}
}

// withRequest puts the agent.model_request still owed to the log (l.req)
// ahead of evs, for the run's end write.
func (l *loop) withRequest(evs []rein.Event) []rein.Event {
	if l.req == nil {
		return evs
	}
	out := make([]rein.Event, 0, len(evs)+2) // room for the end's own event
	out = append(out, ModelRequestEvent(*l.req))
	l.req = nil
	return append(out, evs...)
}

// overBudget reports whether the run's total (its budget) or the
// session's (the session's budget) has reached a bound.
func (l *loop) overBudget() bool {
	if l.t.Budget.IsZero() && l.t.SessionBudget.IsZero() {
		return false
	}
	own := l.t.Spent.Add(l.usage)
	return l.t.Budget.Reached(own) || l.t.SessionBudget.Reached(l.t.SessionSpent.Add(own))
}
