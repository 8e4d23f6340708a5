// Ending a run: the store calls' context once a stop came, the normal
// finish, and the stop path that closes the open step so the transcript
// stays valid.

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/run"
)

// stopCtx is the context of a store call the run must see through even
// though its work context may end meanwhile: a stop that lands during a
// write does not leave it half-known. While the run is live (not cancelled,
// not past its deadline, not interrupted) the call waits as long as the
// store needs — a store slow for a moment under load must not fail the run
// ("read inbox: context deadline exceeded"); the run's deadline, a cancel
// or a lost lease still end it, and StopTimeout bounds the call from then
// on. On a stopped run StopTimeout bounds it from the start.
//
// The live calls of a run share one context (openLive), so a call costs no
// context, timer or callback of its own; its cancel func does nothing.
func (l *loop) stopCtx() (context.Context, context.CancelFunc) {
	rctx := l.c.RunContext()
	if interrupted, _ := l.c.Interrupted(); interrupted || rctx.Err() != nil || l.live == nil {
		return context.WithTimeout(context.WithoutCancel(rctx), l.a.cfg.StopTimeout)
	}
	return l.live, noCancel
}

func noCancel() {}

// liveCtx is the run's shared store-call context (stopCtx). It outlives
// the run context by StopTimeout, counted from the moment the run context
// ends, so a call in flight when a stop lands still gets that long to
// finish. Only a call that can wait needs that watch: the watch (a callback
// on the run context, which runs on a goroutine of its own when the run is
// stopped) is set up the first time anyone asks for Done — a store that
// blocks, or a context derived from this one — and never for a run whose
// store calls only check Err, so such a run's stop costs no goroutine.
type liveCtx struct {
	context.Context // WithCancel(WithoutCancel(run context))
	l               *loop
	watch           sync.Once
}

func (c *liveCtx) Done() <-chan struct{} {
	c.watch.Do(c.l.watchLive)
	return c.Context.Done()
}

// openLive makes the run's shared store-call context.
func (l *loop) openLive() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.c.RunContext()))
	l.live, l.liveCancel = &liveCtx{Context: ctx, l: l}, cancel
}

// watchLive ends the shared context StopTimeout after the run context
// ends (or when the loop returns first).
func (l *loop) watchLive() {
	stop := context.AfterFunc(l.c.RunContext(), func() {
		t := time.AfterFunc(l.a.cfg.StopTimeout, l.liveCancel)
		context.AfterFunc(l.live.Context, func() { t.Stop() })
	})
	context.AfterFunc(l.live.Context, func() { stop() })
}

// closeLive releases the shared context when the loop returns: nothing of
// the run calls the store on it after that.
func (l *loop) closeLive() { l.liveCancel() }

// finish ends the run with a final reply: asst (nil when the reply's
// message is already saved, as at max_steps) and the agent.message. step
// is the step that produced the reply: a reply whose commit loses to a stop
// is saved as that step's partial text.
func (l *loop) finish(ctx context.Context, reason rein.Reason, step int, text string, asst *rein.Message) run.Outcome {
	if !l.c.Commit() {
		return l.stopped(ctx, &stepState{step: step, text: text})
	}
	sctx, cancel := l.stopCtx()
	defer cancel()
	var msgs []rein.Message
	if asst != nil {
		msgs = append(msgs, *asst)
	}
	// Room for one more event: a runtime that holds the closing events
	// for the run's end appends its own after them without a copy. The
	// payload is encoded here, so it may point at the loop's usage.
	var evs []rein.Event
	if l.req != nil {
		evs = make([]rein.Event, 1, 3)
		evs[0] = ModelRequestEvent(*l.req)
		l.req = nil
	} else {
		evs = make([]rein.Event, 0, 2)
	}
	evs = append(evs, rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: text, Reason: reason, Usage: &l.usage}))
	if err := l.t.Journal.Finish(sctx, msgs, evs); err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("record reply: %w", err), Usage: l.usage}
	}
	return run.Outcome{Reason: reason, Reply: text, Usage: l.usage}
}

// closeOpenStep returns synthetic results, with their agent.tool_result
// events, for every call of the open step that has none.
func (l *loop) closeOpenStep(output string) ([]rein.Message, []rein.Event) {
	st := l.open
	if st == nil {
		return nil, nil
	}
	l.open = nil
	var msgs []rein.Message
	var evs []rein.Event
	for _, c := range st.calls {
		if l.answered[c.ID] {
			continue
		}
		msgs = append(msgs, rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: output, IsError: true, RunID: l.t.RunID, Step: st.step})
		evs = append(evs, rein.NewEvent(rein.EventToolResult, l.t.RunID, rein.ToolResultPayload{
			RunID: l.t.RunID, ToolUseID: c.ID, Output: output, IsError: true}))
	}
	return msgs, evs
}

// stopped is the path after a cancel, timeout or interrupt: it makes the
// transcript valid (synthetic error results for every unanswered call of
// the open step, partial text per policy) and for an interrupt produces the
// interrupted reply; all of it goes to Journal.Finish, so a runtime can
// write it with the run's end.
func (l *loop) stopped(ctx context.Context, st *stepState) run.Outcome {
	interrupted := errors.Is(context.Cause(ctx), rein.ErrInterrupted) && l.c.RunContext().Err() == nil
	sctx, cancel := l.stopCtx()
	defer cancel()

	save, evs := l.closeOpenStep(rein.InterruptedToolOutput)
	evs = l.withRequest(evs)
	replyText := ""
	if st != nil {
		replyText = st.text
		if !st.toolsStarted && st.text != "" && l.a.cfg.Partial == KeepPartial {
			// Cut short mid-stream: tool calls not yet complete are dropped.
			save = append(save, rein.Message{Role: rein.RoleAssistant, Text: st.text, Partial: true, RunID: l.t.RunID, Step: st.step})
		}
	}
	if interrupted && l.c.Commit() {
		u := l.usage
		evs = append(evs, rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: replyText, Reason: rein.ReasonInterrupted, Usage: &u}))
		if err := l.t.Journal.Finish(sctx, save, evs); err != nil {
			return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("save transcript after interrupt: %w", err), Usage: l.usage}
		}
		return run.Outcome{Reason: rein.ReasonInterrupted, Reply: replyText, Usage: l.usage}
	}
	if len(save) > 0 || len(evs) > 0 {
		if err := l.t.Journal.Finish(sctx, save, evs); err != nil {
			l.a.cfg.Logger.Error("save transcript after stop", "session", l.t.Session.String(), "run", l.t.RunID, "err", err)
		}
	}
	if errors.Is(context.Cause(ctx), rein.ErrTimeout) || errors.Is(context.Cause(l.c.RunContext()), rein.ErrTimeout) {
		return run.Outcome{Reason: rein.ReasonTimeout, Err: rein.ErrTimeout, Usage: l.usage}
	}
	return run.Outcome{Reason: rein.ReasonCancelled, Err: rein.ErrCancelled, Usage: l.usage}
}

// budgetEnd ends the run after a request whose tool calls the budget does
// not allow: the step's assistant message, its agent.tool_use events and
// a synthetic result for each call (as for a stop) are saved with the
// reply — the step's text — in the run's end write.
func (l *loop) budgetEnd(ctx context.Context, st *stepState, asst rein.Message) run.Outcome {
	if !l.c.Commit() {
		return l.stopped(ctx, st)
	}
	sctx, cancel := l.stopCtx()
	defer cancel()
	msgs := make([]rein.Message, 0, len(st.calls)+1)
	msgs = append(msgs, asst)
	evs := l.withRequest(StepEvents(l.t.RunID, st.step, st.calls, nil))
	for _, c := range st.calls {
		msgs = append(msgs, rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: rein.InterruptedToolOutput, IsError: true, RunID: l.t.RunID, Step: st.step})
		evs = append(evs, rein.NewEvent(rein.EventToolResult, l.t.RunID, rein.ToolResultPayload{
			RunID: l.t.RunID, ToolUseID: c.ID, Output: rein.InterruptedToolOutput, IsError: true}))
	}
	evs = append(evs, rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: st.text, Reason: rein.ReasonBudget, Usage: &l.usage}))
	if err := l.t.Journal.Finish(sctx, msgs, evs); err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("record reply: %w", err), Usage: l.usage}
	}
	return run.Outcome{Reason: rein.ReasonBudget, Reply: st.text, Usage: l.usage}
}
