package langgraph

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The thread's state, folded from the session's log (docs/protocols.md has
// the table).
//
// A LangGraph thread's state is {"messages": [...]} of a ReAct graph with
// two nodes: "model" (one Rein step's model request: an ai message, with
// tool_calls when it asked for tools) and "tools" (the step's tool
// results: one tool message per call). The fold reads the log in order and
// keeps what the events so far imply: the messages, the ai message the
// open step is writing, the calls still without a result, the
// confirmations still waiting (LangGraph's interrupts). A checkpoint is
// taken where LangGraph would take one — the input added, a model node
// ended, a tools node ended, a run ended — and identified by the seq of the
// event that ended it, so the same log always gives the same checkpoints:
// getState, getHistory and every stream are the same fold read from a
// different cursor. Nothing here is kept between requests.

// message is one LangChain message dict of the state; immutable once it is
// in the state's messages (checkpoints share them).
type message struct {
	run string
	v   map[string]any
}

func humanMessage(id, text, run string) *message {
	return &message{run: run, v: map[string]any{
		"type": "human", "content": text, "id": id, "name": nil,
		"additional_kwargs": map[string]any{}, "response_metadata": map[string]any{},
	}}
}

func aiMessage(id, text string, calls []map[string]any, run string) *message {
	if calls == nil {
		calls = []map[string]any{}
	}
	return &message{run: run, v: map[string]any{
		"type": "ai", "content": text, "id": id, "name": nil,
		"tool_calls": calls, "invalid_tool_calls": []any{},
		"additional_kwargs": map[string]any{}, "response_metadata": map[string]any{},
	}}
}

// interrupt is a call waiting for a person, as LangGraph shows an
// interrupt: its id is the call's tool_use_id, which a resume names.
type interrupt struct {
	run   string
	ID    string         `json:"id"`
	Value map[string]any `json:"value"`
}

func newInterrupt(p rein.ToolConfirmationRequestedPayload) interrupt {
	args := inputValue(p.Input)
	return interrupt{run: p.RunID, ID: p.ToolUseID, Value: map[string]any{
		// The shape of LangChain's human-in-the-loop middleware, which
		// agent-chat-ui renders, plus Rein's own names.
		"action_requests": []any{map[string]any{"name": p.Name, "args": args,
			"description": "Tool execution requires approval: " + p.Name}},
		"review_configs": []any{map[string]any{"action_name": p.Name, "allowed_decisions": []string{"approve", "reject"}}},
		"tool_use_id":    p.ToolUseID,
		"run_id":         p.RunID,
		"name":           p.Name,
		"input":          args,
	}}
}

// inputValue is a tool call's input as a JSON value (an input that is not
// valid JSON is shown as its text).
func inputValue(raw json.RawMessage) any {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return v
}

// checkpoint is the state as of one event of the log.
type checkpoint struct {
	seq    int64
	parent int64 // 0: none
	step   int   // LangGraph's step counter: -1 for the input, then 0, 1, …
	source string
	node   string // what ended: "input", "model", "tools", "end"
	run    string
	next   []string
	msgs   []*message
	ints   []interrupt
	at     time.Time
}

// values is the checkpoint's values, with the interrupts waiting under
// "__interrupt__" as LangGraph's stream shows them.
func (c *checkpoint) values(withInterrupts bool) map[string]any {
	msgs := make([]map[string]any, len(c.msgs))
	for i, m := range c.msgs {
		msgs[i] = m.v
	}
	v := map[string]any{"messages": msgs}
	if withInterrupts && len(c.ints) > 0 {
		v["__interrupt__"] = c.ints
	}
	return v
}

// frame is one stream part to write: an SSE event name and its data, with
// the seq of the log event it renders (its SSE id).
type frame struct {
	seq   int64
	event string
	data  any
}

// step is the ai message a Rein step is writing.
type step struct {
	run   string
	n     int
	id    string
	text  strings.Builder
	calls []map[string]any
	// cut is the text a restarted step had streamed, while its redo has
	// not gone past it (the redo streams only what goes beyond).
	cutting bool
	cut     string
	redo    strings.Builder
	// last is the seq of the step's last event: a step with calls ends
	// there, whenever the fold learns it ended.
	last int64
}

// stepOf is a tool_use's step.
func stepOf(e rein.Event) int {
	var p struct {
		Step int `json:"step"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	return p.Step
}

// fold is a thread's state folded from its log; with a run and modes set
// it also renders that run's events as stream parts.
type fold struct {
	thread string
	msgs   []*message
	cur    *step
	// open are the calls of the last ai message without a result, in the
	// model's order, and the tool messages of those that have one.
	open    []string
	results []*message
	ints    []interrupt
	notes   map[string]string
	// inputs are the human messages of runs admitted and not started.
	inputs map[string]*message
	step   int
	last   *checkpoint
	seq    int64
	at     time.Time
	// lastText is the text of the last ai message per run (a final reply
	// that repeats it is not a new message).
	lastText map[string]string

	// onCheckpoint, when set, sees every checkpoint as it is taken.
	onCheckpoint func(*checkpoint)

	// Rendering: the run whose events become frames (all: every run's, a
	// thread's stream), and the modes.
	all   bool
	run   string
	modes map[string]bool
	out   []frame
	done  bool
	// failed is the error of a run that ended FAILED.
	failed string
}

func newFold(thread string) *fold {
	return &fold{thread: thread, notes: map[string]string{}, inputs: map[string]*message{}, lastText: map[string]string{}, step: -2}
}

// render makes f render run's events in modes from now on.
func (f *fold) render(run string, modes []string) {
	f.run = run
	f.modes = map[string]bool{}
	for _, m := range modes {
		f.modes[m] = true
	}
}

func (f *fold) rendering(run string) bool {
	return (f.all || f.run != "" && run == f.run) && !f.done
}

func (f *fold) emit(mode, event string, data any) {
	if f.modes[mode] {
		f.out = append(f.out, frame{seq: f.seq, event: event, data: data})
	}
}

// event folds e in.
func (f *fold) event(e rein.Event) {
	f.seq, f.at = e.Seq, e.CreatedAt
	if st := f.cur; st != nil && len(st.calls) > 0 && !(e.Type == rein.EventToolUse && e.RunID == st.run && stepOf(e) == st.n) {
		// A step's calls are logged in one write: the first event after
		// them ends its model node.
		f.endStep()
	}
	switch e.Type {
	case rein.EventToolResult, rein.EventMessage, rein.EventRunCompleted, rein.EventSupplementConsumed, rein.EventRunStarted:
		// What follows a step's model output: its ai message is whole.
		f.endStep()
	}
	switch e.Type {
	case rein.EventUserMessage:
		var p rein.UserMessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		f.inputs[e.RunID] = humanMessage(e.ID, p.Text, e.RunID)
	case rein.EventRunStarted:
		// A run's input joins the state when the run starts, as
		// LangGraph's does: a queued run's is not in the state before
		// the runs ahead of it, and one cancelled while queued never is.
		m := f.inputs[e.RunID]
		if m == nil {
			break
		}
		delete(f.inputs, e.RunID)
		f.flushTools()
		if f.all && f.rendering(e.RunID) {
			// A thread's stream announces each run, as a run's stream does.
			f.out = append(f.out, frame{seq: e.Seq, event: "metadata", data: map[string]any{"run_id": e.RunID, "attempt": 1}})
		}
		f.msgs = append(f.msgs, m)
		f.take("input", e.RunID, map[string]any{"__start__": map[string]any{"messages": []any{m.v}}})
	case rein.EventUserSupplement:
		var p rein.SupplementPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.notes[p.SupplementID] = p.Text
	case rein.EventSupplementConsumed:
		var p rein.SupplementConsumedPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.flushTools()
		// A note is a human message where the model read it: before the
		// ai message of the step that included it.
		m := humanMessage(p.SupplementID, f.notes[p.SupplementID], p.RunID)
		m.v["name"] = "note"
		f.msgs = append(f.msgs, m)
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := f.enter(e, p.Step)
		st.last = e.Seq
		f.delta(st, e.RunID, p.Text)
	case rein.EventStepRestarted:
		var p rein.StepRestartedPayload
		_ = json.Unmarshal(e.Payload, &p)
		if st := f.cur; st != nil && st.run == e.RunID && st.n == p.Step {
			// The step's model request is made again: its calls are
			// dropped, and its text is held back while the redo repeats it.
			st.calls = nil
			st.cutting, st.cut = true, st.text.String()
			st.redo.Reset()
		}
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		_ = json.Unmarshal(e.Payload, &p)
		st := f.enter(e, p.Step)
		st.last = e.Seq
		if st.cutting {
			// The redo said less than the cut request showed; what it
			// said is the message.
			st.cutting = false
			st.text.Reset()
			st.text.WriteString(st.redo.String())
		}
		args := inputValue(p.Input)
		call := map[string]any{"name": p.Name, "args": args, "id": p.ToolUseID, "type": "tool_call"}
		st.calls = append(st.calls, call)
		if f.rendering(e.RunID) {
			argText, _ := json.Marshal(args)
			chunk := aiMessage(st.id, "", []map[string]any{call}, e.RunID).v
			chunk["type"] = "AIMessageChunk"
			chunk["tool_call_chunks"] = []any{map[string]any{"name": p.Name, "args": string(argText), "id": p.ToolUseID, "index": len(st.calls) - 1, "type": "tool_call_chunk"}}
			f.emit("messages-tuple", "messages", []any{chunk, f.meta("model", e.RunID)})
		}
	case rein.EventToolConfirmationRequested:
		var p rein.ToolConfirmationRequestedPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.endStep()
		in := newInterrupt(p)
		f.ints = append(f.ints, in)
		if f.all && f.rendering(e.RunID) {
			// A thread's stream goes on past a run that waits: each call
			// waiting shows as it asks.
			f.emit("updates", "updates", map[string]any{"__interrupt__": []interrupt{in}})
		}
	case rein.EventUserToolConfirmation:
		var p rein.UserToolConfirmationPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.dropInterrupt(p.ToolUseID)
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.dropInterrupt(p.ToolUseID)
		f.result(e, p)
	case rein.EventMessage:
		var p rein.MessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		f.flushTools()
		if p.Text != "" && p.Text != f.lastText[e.RunID] {
			// A reply no step streamed (a stop during tool calls, the
			// step limit): a message of its own.
			f.msgs = append(f.msgs, aiMessage(e.ID, p.Text, nil, e.RunID))
			f.lastText[e.RunID] = p.Text
			if f.rendering(e.RunID) {
				chunk := aiMessage(e.ID, p.Text, nil, e.RunID).v
				chunk["type"] = "AIMessageChunk"
				f.emit("messages-tuple", "messages", []any{chunk, f.meta("model", e.RunID)})
			}
			f.take("model", e.RunID, map[string]any{"model": map[string]any{"messages": []any{f.msgs[len(f.msgs)-1].v}}})
		}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		_ = json.Unmarshal(e.Payload, &p)
		f.flushTools()
		delete(f.inputs, e.RunID)
		kept := f.ints[:0]
		for _, in := range f.ints {
			if in.run != e.RunID {
				kept = append(kept, in)
			}
		}
		f.ints = kept
		if p.RolledBack {
			// Its turn is left out of every later model request: and out
			// of the thread's state, as LangGraph drops a rolled-back run.
			msgs := make([]*message, 0, len(f.msgs))
			for _, m := range f.msgs {
				if m.run != e.RunID {
					msgs = append(msgs, m)
				}
			}
			f.msgs = msgs
		}
		f.take("end", e.RunID, nil)
		if f.all && f.rendering(e.RunID) {
			// A thread's stream marks where each run ended.
			f.out = append(f.out, frame{seq: e.Seq, event: "end", data: map[string]any{"run_id": e.RunID, "status": runStatus(&store.RunRecord{Status: p.Status, Reason: p.Reason}, false)}})
			break
		}
		if f.rendering(e.RunID) {
			if p.Status == rein.StatusFailed {
				msg := p.Error
				if msg == "" {
					msg = "the run failed"
				}
				f.failed = msg
				f.out = append(f.out, frame{seq: e.Seq, event: "error", data: map[string]any{"error": "RunError", "message": msg}})
			}
			f.done = true
		}
	}
}

// meta is a messages-tuple part's metadata.
func (f *fold) meta(node, run string) map[string]any {
	return map[string]any{"langgraph_node": node, "langgraph_step": f.step + 1, "run_id": run, "thread_id": f.thread, "langgraph_checkpoint_ns": ""}
}

// enter is the open step for e's step n, opening it (and ending the one
// before) at its first event.
func (f *fold) enter(e rein.Event, n int) *step {
	if st := f.cur; st != nil && st.run == e.RunID && st.n == n {
		return st
	}
	f.endStep()
	f.flushTools()
	f.cur = &step{run: e.RunID, n: n, id: e.ID}
	return f.cur
}

// delta adds streamed text. After a restart the redo's text is held back
// while it repeats what the cut request showed; a redo that says
// something else replaces the message's text (the next values part
// carries it whole).
func (f *fold) delta(st *step, run, text string) {
	if st.cutting {
		st.redo.WriteString(text)
		redo := st.redo.String()
		switch {
		case strings.HasPrefix(st.cut, redo):
			return
		case strings.HasPrefix(redo, st.cut):
			text = redo[len(st.cut):]
			st.cutting = false
		default:
			st.cutting = false
			st.text.Reset()
			text = redo
		}
	}
	if text == "" {
		return
	}
	st.text.WriteString(text)
	if f.rendering(run) {
		chunk := aiMessage(st.id, text, nil, run).v
		chunk["type"] = "AIMessageChunk"
		chunk["tool_call_chunks"] = []any{}
		f.emit("messages-tuple", "messages", []any{chunk, f.meta("model", run)})
	}
}

// endStep ends the open step's ai message: the model node's checkpoint.
func (f *fold) endStep() {
	st := f.cur
	if st == nil {
		return
	}
	f.cur = nil
	text := st.text.String()
	if st.cutting {
		text = st.redo.String()
	}
	m := aiMessage(st.id, text, st.calls, st.run)
	f.msgs = append(f.msgs, m)
	f.lastText[st.run] = text
	f.open = f.open[:0]
	for _, c := range st.calls {
		f.open = append(f.open, c["id"].(string))
	}
	f.results = f.results[:0]
	seq := f.seq
	if len(st.calls) > 0 {
		// Its checkpoint is as of its last call, read live or replayed.
		f.seq = st.last
	}
	f.take("model", st.run, map[string]any{"model": map[string]any{"messages": []any{m.v}}})
	f.seq = seq
}

// settle ends a step whose calls are logged once the fold has read to the
// log's end (or to where the next event is not one of them): they were
// logged in one write, so no other call of the step follows.
func (f *fold) settle() {
	if st := f.cur; st != nil && len(st.calls) > 0 {
		f.endStep()
	}
}

// openCalls reports whether the open step has calls (a fold that stopped
// at a cursor must look at the next event to know whether the step ended).
func (f *fold) openCalls() (run string, step int, ok bool) {
	if st := f.cur; st != nil && len(st.calls) > 0 {
		return st.run, st.n, true
	}
	return "", 0, false
}

// result adds a tool result; the tools node ends when every call of the
// step has one.
func (f *fold) result(e rein.Event, p rein.ToolResultPayload) {
	content := p.Output
	if p.InDoubt {
		content = "in doubt: the call was executing when its server was lost; it may or may not have taken effect, and it is not run again. " + strings.TrimPrefix(p.Output, "in doubt: ")
	}
	status := "success"
	if p.IsError || p.InDoubt {
		status = "error"
	}
	name := ""
	for _, m := range f.msgs {
		if calls, ok := m.v["tool_calls"].([]map[string]any); ok {
			for _, c := range calls {
				if c["id"] == p.ToolUseID {
					name, _ = c["name"].(string)
				}
			}
		}
	}
	m := &message{run: e.RunID, v: map[string]any{
		"type": "tool", "content": content, "id": e.ID, "name": name, "tool_call_id": p.ToolUseID, "status": status,
		"additional_kwargs": map[string]any{}, "response_metadata": map[string]any{},
	}}
	f.msgs = append(f.msgs, m)
	if f.rendering(e.RunID) {
		f.emit("messages-tuple", "messages", []any{m.v, f.meta("tools", e.RunID)})
	}
	for i, id := range f.open {
		if id == p.ToolUseID {
			f.open = append(f.open[:i], f.open[i+1:]...)
			f.results = append(f.results, m)
			if len(f.open) == 0 {
				f.flushTools()
			}
			return
		}
	}
}

// flushTools ends a tools node whose results are in (a stop can end a
// step whose calls never all got one).
func (f *fold) flushTools() {
	if len(f.results) == 0 {
		f.open = f.open[:0]
		return
	}
	msgs := make([]any, len(f.results))
	for i, m := range f.results {
		msgs[i] = m.v
	}
	run := f.results[0].run
	f.results, f.open = f.results[:0], f.open[:0]
	f.take("tools", run, map[string]any{"tools": map[string]any{"messages": msgs}})
}

func (f *fold) dropInterrupt(id string) {
	for i, in := range f.ints {
		if in.ID == id {
			f.ints = append(f.ints[:i], f.ints[i+1:]...)
			return
		}
	}
}

// take takes a checkpoint after node ran in run, with the update it made
// (nil: none to show).
func (f *fold) take(node, run string, update map[string]any) {
	f.step++
	c := &checkpoint{seq: f.seq, step: f.step, node: node, run: run, at: f.at, source: "loop",
		msgs: append([]*message(nil), f.msgs...), ints: append([]interrupt(nil), f.ints...)}
	if node == "input" {
		c.source = "input"
	}
	switch node {
	case "input", "tools":
		c.next = []string{"model"}
	case "model":
		if len(f.open) > 0 {
			c.next = []string{"tools"}
		}
	}
	if f.last != nil {
		c.parent = f.last.seq
	}
	f.last = c
	if f.onCheckpoint != nil {
		f.onCheckpoint(c)
	}
	if f.rendering(run) {
		if update != nil {
			f.emit("updates", "updates", update)
		}
		f.emit("values", "values", c.values(false))
	}
}

// park ends the rendering of a run that waits for confirmations: the
// interrupts as LangGraph streams them.
func (f *fold) park() {
	ints := f.runInterrupts(f.run)
	f.emit("updates", "updates", map[string]any{"__interrupt__": ints})
	if f.last != nil {
		v := f.last.values(false)
		v["__interrupt__"] = ints
		f.emit("values", "values", v)
	}
	f.done = true
}

// runInterrupts are the interrupts of run still waiting.
func (f *fold) runInterrupts(run string) []interrupt {
	out := []interrupt{}
	for _, in := range f.ints {
		if in.run == run {
			out = append(out, in)
		}
	}
	return out
}

// head is the state as of the whole log read so far: the last checkpoint
// with the interrupts waiting now.
func (f *fold) head() *checkpoint {
	f.endStep()
	if f.last == nil {
		return &checkpoint{step: -1, next: []string{}, msgs: nil}
	}
	c := *f.last
	c.ints = append([]interrupt(nil), f.ints...)
	if len(c.ints) > 0 {
		c.next = []string{"tools"}
	}
	return &c
}

// checkpointID is how a checkpoint is named to clients: the seq of the
// event it is as of.
func checkpointID(seq int64) string { return strconv.FormatInt(seq, 10) }
