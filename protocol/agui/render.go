package agui

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
)

// frame is one AG-UI event to write, with the seq of the log event it
// renders (its SSE id; a frame made to reopen what a stream resumed in
// the middle of carries the stream's cursor).
type frame struct {
	seq  int64
	data map[string]any
}

// runState is what the renderer knows of one Rein run: everything is
// derived from the run's events in the log, so a stream that starts
// anywhere is primed by rendering the run's earlier events silently.
type runState struct {
	id   string
	open bool // between its RUN_STARTED and its RUN_FINISHED
	step int  // the open STEP ("step N"), 0 when none
	cur  int  // the step the run is in (for agent.message, which has none)
	msg  string
	// msgs counts the text messages opened per step (ids stay unique when
	// a step's text needs a second message).
	msgs map[int]int
	// shown is the text shown per step; redo, for a step restarted after
	// its instance was lost, the redo's text so far (nil: no redo).
	shown map[int]string
	redo  map[int]*string
	// awaiting are the calls asking for a confirmation, in order.
	awaiting []pending
}

type pending struct{ id, name string }

func newRunState(id string) *runState {
	return &runState{id: id, msgs: map[int]int{}, shown: map[int]string{}, redo: map[int]*string{}}
}

// renderer turns a thread's log into AG-UI events. In a run's stream (only
// set) it renders that run's events alone, named by the client's runId; in
// the thread stream every run, named by Rein's run id, one at a time.
type renderer struct {
	thread string
	only   string // the run of a run stream ("": the thread stream)
	name   string // the AG-UI runId of the run stream's run
	run    *runState
	seq    int64
	out    []frame
	done   bool // the run stream's run finished (or waits): end the stream
}

func newRenderer(thread, only, name string) *renderer {
	return &renderer{thread: thread, only: only, name: name}
}

func (rd *renderer) emit(data map[string]any) {
	rd.out = append(rd.out, frame{seq: rd.seq, data: data})
}

func (rd *renderer) runName(id string) string {
	if rd.only != "" {
		return rd.name
	}
	return id
}

// begin opens run st: RUN_STARTED, and (resuming mid-run) the step and
// text message it had open, so the client's verifier sees them opened.
// Frames that restate what a resumed stream's cursor is inside of carry
// metadata {"reinReopened": true}: the client saw them before the cut.
func (rd *renderer) begin(st *runState, reopen bool) {
	rd.run = st
	st.open = true
	md := map[string]any{"reinRunId": st.id}
	if reopen {
		md["reinReopened"] = true
	}
	rd.emit(map[string]any{"type": "RUN_STARTED", "threadId": rd.thread, "runId": rd.runName(st.id), "metadata": md})
	again := map[string]any{"reinReopened": true}
	if st.step != 0 {
		rd.emit(map[string]any{"type": "STEP_STARTED", "stepName": stepName(st.step), "metadata": again})
	}
	if st.msg != "" {
		rd.emit(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": st.msg, "role": "assistant", "metadata": again})
	}
}

// forget drops what is open without closing it: a stream primed from the
// log starts from a clean slate (RUN_STARTED reopens what is open).
func (st *runState) forget() { st.open, st.step, st.msg = false, 0, "" }

func stepName(n int) string { return "step " + strconv.Itoa(n) }

// closeOpen ends the open text message and step.
func (rd *renderer) closeOpen(st *runState) {
	rd.closeMsg(st)
	if st.step != 0 {
		rd.emit(map[string]any{"type": "STEP_FINISHED", "stepName": stepName(st.step)})
		st.step = 0
	}
}

func (rd *renderer) closeMsg(st *runState) {
	if st.msg != "" {
		rd.emit(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": st.msg})
		st.msg = ""
	}
}

func (rd *renderer) ensureStep(st *runState, n int) {
	if n > st.cur {
		st.cur = n
	}
	if st.step == n {
		return
	}
	rd.closeOpen(st)
	st.step = n
	rd.emit(map[string]any{"type": "STEP_STARTED", "stepName": stepName(n)})
}

func (rd *renderer) text(st *runState, n int, delta string) {
	if delta == "" {
		return
	}
	rd.ensureStep(st, n)
	if st.msg == "" {
		st.msgs[n]++
		st.msg = "msg_" + st.id + "_" + strconv.Itoa(n)
		if k := st.msgs[n]; k > 1 {
			st.msg += "_" + strconv.Itoa(k)
		}
		rd.emit(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": st.msg, "role": "assistant"})
	}
	st.shown[n] += delta
	rd.emit(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": st.msg, "delta": delta})
}

// event renders one log event.
func (rd *renderer) event(e rein.Event) {
	rd.seq = e.Seq
	if e.RunID == "" || (rd.only != "" && e.RunID != rd.only) || rd.done {
		return
	}
	st := rd.run
	if st == nil || st.id != e.RunID {
		if st != nil && st.open {
			// Another run's events while one is open (a message queued
			// behind it, a queued run cancelled): a thread shows one run
			// at a time, and those events render nothing of their own.
			return
		}
		switch e.Type {
		case rein.EventUserMessage, rein.EventRunQueued:
			if rd.only == "" {
				return // a thread shows a run from its start
			}
		}
		st = newRunState(e.RunID)
		rd.begin(st, false)
	} else if !st.open {
		if e.Type == rein.EventUserToolConfirmation {
			return
		}
		rd.begin(st, false) // a run going on after its approvals
	}
	switch e.Type {
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		rd.delta(st, p.Step, p.Text)
	case rein.EventStepRestarted:
		var p rein.StepRestartedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		empty := ""
		st.redo[p.Step] = &empty
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		rd.ensureStep(st, p.Step)
		parent := st.msg
		rd.closeMsg(st)
		start := map[string]any{"type": "TOOL_CALL_START", "toolCallId": p.ToolUseID, "toolCallName": p.Name}
		if parent != "" {
			start["parentMessageId"] = parent
		}
		rd.emit(start)
		args := string(p.Input)
		if args == "" {
			args = "{}"
		}
		rd.emit(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": p.ToolUseID, "delta": args})
		rd.emit(map[string]any{"type": "TOOL_CALL_END", "toolCallId": p.ToolUseID})
	case rein.EventToolConfirmationRequested:
		var p rein.ToolConfirmationRequestedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		st.awaiting = append(st.awaiting, pending{id: p.ToolUseID, name: p.Name})
	case rein.EventUserToolConfirmation:
		var p rein.UserToolConfirmationPayload
		if json.Unmarshal(e.Payload, &p) == nil {
			st.answered(p.ToolUseID)
		}
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		st.answered(p.ToolUseID)
		rd.closeMsg(st)
		rd.emit(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "res_" + p.ToolUseID, "toolCallId": p.ToolUseID, "content": p.Output, "role": "tool"})
	case rein.EventMessage:
		var p rein.MessagePayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		n := max(st.cur, 1)
		shown := st.shown[n]
		switch {
		case shown == "":
			rd.text(st, n, p.Text)
		case strings.HasPrefix(p.Text, shown) && st.msg != "":
			rd.text(st, n, p.Text[len(shown):])
		}
		rd.closeMsg(st)
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return
		}
		rd.finish(st, p)
	}
}

// delta renders streamed text. A step restarted after its instance was
// lost is asked of the model again: the redo's text is held against what
// the stream already showed of the step, and only what goes beyond it is
// shown; a redo that says something else ends the shown message and shows
// the redo in a new one. Either way no text is shown twice, and since both
// texts are in the log a stream resumed anywhere decides the same.
func (rd *renderer) delta(st *runState, step int, text string) {
	redo := st.redo[step]
	if redo == nil {
		rd.text(st, step, text)
		return
	}
	*redo += text
	shown := st.shown[step]
	switch {
	case strings.HasPrefix(shown, *redo):
		// Still inside what was shown.
	case strings.HasPrefix(*redo, shown):
		delete(st.redo, step)
		rd.text(st, step, (*redo)[len(shown):])
	default:
		delete(st.redo, step)
		rd.closeMsg(st)
		st.shown[step] = ""
		rd.text(st, step, *redo)
	}
}

func (st *runState) answered(id string) {
	for i, p := range st.awaiting {
		if p.id == id {
			st.awaiting = append(st.awaiting[:i], st.awaiting[i+1:]...)
			return
		}
	}
}

// finish ends the run as it ended in the log.
func (rd *renderer) finish(st *runState, p rein.RunCompletedPayload) {
	rd.closeOpen(st)
	md := map[string]any{"reinRunId": st.id, "status": p.Status, "reason": p.Reason}
	switch p.Status {
	case rein.StatusFailed:
		msg := p.Error
		if msg == "" {
			msg = "the run failed"
		}
		rd.emit(map[string]any{"type": "RUN_ERROR", "message": msg, "code": "run_failed", "metadata": md})
	case rein.StatusCancelled:
		rd.emit(map[string]any{"type": "RUN_FINISHED", "threadId": rd.thread, "runId": rd.runName(st.id), "outcome": map[string]any{"type": "cancelled"}, "metadata": md})
	default:
		rd.emit(map[string]any{"type": "RUN_FINISHED", "threadId": rd.thread, "runId": rd.runName(st.id), "outcome": map[string]any{"type": "success"}, "result": map[string]any{"reason": p.Reason}, "metadata": md})
	}
	st.forget()
	rd.run = nil
	if rd.only != "" {
		rd.done = true
	}
}

// waiting is the open run's calls that wait for an answer.
func (rd *renderer) waiting() []pending {
	if rd.run == nil || !rd.run.open {
		return nil
	}
	return rd.run.awaiting
}

// park ends the open run's AG-UI run where it waits for confirmations:
// RUN_FINISHED with the interrupt outcome, one interrupt per call (its id
// is the call's, which resume[] answers). The Rein run goes on when they
// are answered: a run stream ends here; the thread stream shows the rest
// as a new RUN_STARTED of the same run.
func (rd *renderer) park() {
	st := rd.run
	rd.closeOpen(st)
	ints := make([]map[string]any, 0, len(st.awaiting))
	for _, p := range st.awaiting {
		ints = append(ints, map[string]any{"id": p.id, "reason": "tool_confirmation", "toolCallId": p.id,
			"message": "allow " + p.name + "?"})
	}
	rd.emit(map[string]any{"type": "RUN_FINISHED", "threadId": rd.thread, "runId": rd.runName(st.id),
		"outcome": map[string]any{"type": "interrupt", "interrupts": ints}, "metadata": map[string]any{"reinRunId": st.id}})
	st.open = false
	if rd.only != "" {
		rd.done = true
	}
}
