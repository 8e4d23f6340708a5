// A step's tool phase: saving the step with its calls, confirmations,
// dispatching the calls and saving each result as it comes.

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
)

// needsConfirmation reports whether call c waits for a human.
func (l *loop) needsConfirmation(c rein.ToolCall) bool {
	if l.tools == nil || l.t.Confirm == nil {
		return false
	}
	_, known := l.tools.Lookup(c.Name)
	return known && l.tools.NeedsConfirmation(c.Name)
}

func (l *loop) confirmRequest(step int, c rein.ToolCall) ConfirmRequest {
	return ConfirmRequest{Session: l.t.Session, RunID: l.t.RunID, Step: step, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)}
}

// saveStep records the step's assistant message with its calls, and the
// confirmation requests of the calls that need one, in one write.
func (l *loop) saveStep(ctx context.Context, st *stepState, asst rein.Message) (run.Outcome, bool) {
	var confirm []rein.ToolCall
	for _, c := range st.calls {
		if l.needsConfirmation(c) {
			confirm = append(confirm, c)
		}
	}
	// Opened before the requests are recorded (and so announced), so an
	// answer given the moment they are seen finds them (Confirmer.Open).
	opened := make(map[string]Pending, len(confirm))
	for _, c := range confirm {
		p, err := l.t.Confirm.Open(l.confirmRequest(st.step, c))
		if err != nil {
			for _, p := range opened {
				p.Close()
			}
			return l.fail(fmt.Errorf("open confirmation: %w", err)), false
		}
		opened[c.ID] = p
	}
	sctx, cancel := l.stopCtx()
	err := l.t.Journal.SaveStep(sctx, st.step, asst, confirm, l.req)
	cancel()
	if err != nil {
		for _, p := range opened {
			p.Close()
		}
		return l.fail(fmt.Errorf("save transcript: %w", err)), false
	}
	l.req = nil
	l.opened = opened
	st.toolsStarted = true
	l.open = st
	l.answered = map[string]bool{}
	l.msgs = append(l.msgs, asst)
	return run.Outcome{}, true
}

// runTools answers the open step's calls that have no result yet: they run
// concurrently (those that need confirmation once allowed), and each result
// is saved the moment it is there. It returns ok once every call has its
// result; otherwise the run ends with the returned outcome. The tool
// goroutines are joined before it returns (bounded by StopTimeout for a
// tool that ignores its context), so nothing of the step is written after
// the run's end.
func (l *loop) runTools(ctx context.Context, st *stepState) (run.Outcome, bool) {
	type done struct {
		i   int
		m   rein.Message
		err error // the result could not be saved
		cut bool  // a stop cut the call short: the stop path answers it
	}
	// Confirmations are opened before anything can answer them.
	pend := make([]Pending, len(st.calls))
	defer func() {
		for _, p := range pend {
			if p != nil {
				p.Close()
			}
		}
	}()
	opened := l.opened
	l.opened = nil
	defer func() {
		for _, p := range opened { // not handed to a call (e.g. a failed Open below)
			p.Close()
		}
	}()
	for i, c := range st.calls {
		if p, ok := opened[c.ID]; ok {
			delete(opened, c.ID)
			if !l.answered[c.ID] {
				pend[i] = p
				continue
			}
			p.Close()
		}
		if !l.answered[c.ID] && l.needsConfirmation(c) {
			p, err := l.t.Confirm.Open(l.confirmRequest(st.step, c))
			if err != nil {
				return l.fail(fmt.Errorf("open confirmation: %w", err)), false
			}
			pend[i] = p
		}
	}
	// A failed save stops the step's other calls too: the run fails.
	tctx, tcancel := context.WithCancelCause(ctx)
	defer tcancel(nil)
	ch := make(chan done, len(st.calls))
	n := 0 // calls running
	start := func(i int) {
		c := st.calls[i]
		n++
		go func() {
			res := l.callTool(tctx, st.step, c, pend[i])
			if tctx.Err() != nil {
				ch <- done{i: i, cut: true}
				return
			}
			m := rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: res.Output, IsError: res.IsError, RunID: l.t.RunID, Step: st.step}
			sctx, cancel := l.stopCtx()
			err := l.t.Journal.SaveResult(sctx, m)
			cancel()
			ch <- done{i: i, m: m, err: err}
		}()
	}
	// With Park, a call whose confirmation has no answer yet is not waited
	// for in a goroutine: once nothing else runs, the run parks.
	var deferred []int
	for i, c := range st.calls {
		if l.answered[c.ID] {
			continue
		}
		if l.t.Park && pend[i] != nil && !l.hasAnswer(pend[i]) {
			deferred = append(deferred, i)
			continue
		}
		start(i)
	}
	var saveErr error
	receive := func(d done) {
		switch {
		case d.cut:
		case d.err != nil:
			if saveErr == nil {
				saveErr = d.err
				tcancel(d.err)
			}
		default:
			l.answered[st.calls[d.i].ID] = true
			l.msgs = append(l.msgs, d.m)
		}
	}
	stopped := false
	for {
		for ; n > 0 && !stopped && saveErr == nil; n-- {
			select {
			case d := <-ch:
				receive(d)
			case <-ctx.Done():
				stopped = true
				n++ // nothing received this round
			}
		}
		if stopped || saveErr != nil || len(deferred) == 0 {
			break
		}
		still := deferred[:0]
		for _, i := range deferred {
			if l.hasAnswer(pend[i]) {
				start(i)
			} else {
				still = append(still, i)
			}
		}
		deferred = still
		if n == 0 {
			// Only answers are awaited: park. The step stays open in the
			// journal; the runtime takes the run up again when an answer
			// comes (docs/tools.md: confirmations are durable). A stop that has
			// landed meanwhile is answered instead, unless the runtime says
			// a stop now parks (a shutdown leaves such runs waiting).
			if ctx.Err() != nil && (l.t.ParkOnStop == nil || !l.t.ParkOnStop()) {
				break
			}
			l.msgs = rein.OrderToolResults(l.msgs)
			return run.Outcome{Reason: rein.ReasonError, Err: ErrParked, Usage: l.usage}, false
		}
	}
	if n > 0 {
		t := time.NewTimer(l.a.cfg.StopTimeout)
	join:
		for ; n > 0; n-- {
			select {
			case d := <-ch:
				receive(d)
			case <-t.C:
				l.a.cfg.Logger.Warn("tool calls did not return after the stop", "session", l.t.Session.String(), "run", l.t.RunID, "calls", n)
				break join
			}
		}
		t.Stop()
	}
	// The next request sees the step's results in the model's order.
	l.msgs = rein.OrderToolResults(l.msgs)
	if saveErr != nil && ctx.Err() == nil {
		return l.fail(errStore{fmt.Errorf("save tool result: %w", saveErr)}), false
	}
	if ctx.Err() != nil {
		return l.stopped(ctx, st), false
	}
	l.open = nil
	return run.Outcome{}, true
}

// hasAnswer reports whether p's answer is there; without a way to know, or
// when asking fails, it says yes, so the call is waited for as usual.
func (l *loop) hasAnswer(p Pending) bool {
	a, ok := p.(Answerable)
	if !ok {
		return true
	}
	// Asked on a context a stop does not cut short: whether to park is
	// decided on what the store says, not on the stop.
	sctx, cancel := l.stopCtx()
	defer cancel()
	yes, err := a.Answered(sctx)
	return err != nil || yes
}

// DeniedOutput is the tool result for a call a human denied; it contains
// the deny message verbatim.
func DeniedOutput(msg string) string {
	if msg == "" {
		return "The user denied this tool call."
	}
	return "The user denied this tool call: " + msg
}

func (l *loop) callTool(ctx context.Context, step int, c rein.ToolCall, p Pending) tool.Result {
	if l.tools == nil {
		return tool.Result{Output: fmt.Sprintf("unknown tool %q: no tools are available", c.Name), IsError: true}
	}
	if _, known := l.tools.Lookup(c.Name); known && l.tools.NeedsConfirmation(c.Name) {
		if p == nil {
			return tool.Result{Output: DeniedOutput("no one can confirm tool calls in this runtime"), IsError: true}
		}
		d, err := p.Wait(ctx)
		if err != nil {
			return tool.Result{Output: rein.InterruptedToolOutput, IsError: true}
		}
		if !d.Allow {
			return tool.Result{Output: DeniedOutput(d.DenyMessage), IsError: true}
		}
	}
	call := tool.Call{ID: c.ID, Name: c.Name, Input: c.Input, Session: l.t.Session, RunID: l.t.RunID, Step: step, Workspace: l.t.Workspace}
	obs := l.t.Observer
	if obs == nil {
		return l.tools.Execute(ctx, call)
	}
	_, known := l.tools.Lookup(c.Name)
	info := ToolCall{Session: l.t.Session, RunID: l.t.RunID, Step: step, ID: c.ID, Name: c.Name, Known: known}
	start := time.Now()
	cctx := obs.ToolCallStarted(ctx, info)
	res := l.tools.Execute(cctx, call)
	obs.ToolCallEnded(cctx, ToolResult{ToolCall: info, Duration: time.Since(start), IsError: res.IsError, Stopped: ctx.Err() != nil})
	return res
}

// validJSON returns b if it is valid JSON, else b as a JSON string, so an
// event payload always marshals.
func validJSON(b json.RawMessage) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
