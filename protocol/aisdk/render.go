package aisdk

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/reinhq/rein"
)

// Rendering a run's events as UI message stream chunks (docs/protocols.md
// has the table).
//
// A stream is one run's: the renderer reads the session's log from a cursor
// and renders the events of its run only. Every chunk's identity comes from
// the log — a text part's id is the id of the delta that opened it, a tool
// part's id is Rein's tool_use_id — so a replay renders the same chunks as
// the live stream did. State is what the events so far imply: the open
// step, the open text part and the text it has shown, the approvals asked
// and not yet answered, the calls denied.

// chunk is one UI message stream chunk, with the seq of the event it
// renders (the frame's id: line).
type chunk struct {
	seq  int64
	data any
}

// runRenderer renders one run's events.
type runRenderer struct {
	chat, run string
	out       []chunk
	seq       int64

	stepOpen bool
	step     int
	// textID is the open text part ("": none); shown its text so far.
	textID string
	shown  strings.Builder
	// stepText is the text the run's last step showed (an agent.message
	// repeating it is not shown again).
	stepText string
	// cut is the text a restarted step had shown, while its redo has not
	// gone past it; redo is the redo's text so far.
	cutting bool
	cut     string
	redo    strings.Builder
	// queued is true once a queue position was shown.
	queued bool
	// awaiting are the approvals asked and not yet answered.
	awaiting map[string]bool
	denied   map[string]bool
	// done is set by the run's end.
	done bool
}

func newRunRenderer(chat, run string) *runRenderer {
	return &runRenderer{chat: chat, run: run, awaiting: map[string]bool{}, denied: map[string]bool{}}
}

func (r *runRenderer) add(v any) { r.out = append(r.out, chunk{seq: r.seq, data: v}) }

// Chunk shapes (the `ai` package's uiMessageChunkSchema).
type (
	typed struct {
		Type string `json:"type"`
	}
	textChunk struct {
		Type  string `json:"type"`
		ID    string `json:"id"`
		Delta string `json:"delta,omitempty"`
	}
	dataChunk struct {
		Type string `json:"type"`
		ID   string `json:"id,omitempty"`
		Data any    `json:"data"`
	}
	toolInputChunk struct {
		Type       string          `json:"type"`
		ToolCallID string          `json:"toolCallId"`
		ToolName   string          `json:"toolName"`
		Input      json.RawMessage `json:"input"`
	}
	approvalChunk struct {
		Type       string `json:"type"`
		ApprovalID string `json:"approvalId"`
		ToolCallID string `json:"toolCallId"`
	}
	toolOutputChunk struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
		Output     string `json:"output"`
	}
	toolErrorChunk struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
		ErrorText  string `json:"errorText"`
	}
	toolDeniedChunk struct {
		Type       string `json:"type"`
		ToolCallID string `json:"toolCallId"`
	}
	startChunk struct {
		Type            string   `json:"type"`
		MessageID       string   `json:"messageId"`
		MessageMetadata metadata `json:"messageMetadata"`
	}
	finishChunk struct {
		Type            string   `json:"type"`
		FinishReason    string   `json:"finishReason"`
		MessageMetadata metadata `json:"messageMetadata"`
	}
	// metadata is the message's metadata: Rein's part under "rein".
	metadata struct {
		Rein runMeta `json:"rein"`
	}
	runMeta struct {
		ChatID string `json:"chat_id"`
		RunID  string `json:"run_id"`
		// Status and Reason are the run's at finish ("RUNNING" while it
		// waits for approvals: Waiting lists them).
		Status     rein.RunStatus `json:"status,omitempty"`
		Reason     rein.Reason    `json:"reason,omitempty"`
		Error      string         `json:"error,omitempty"`
		RolledBack bool           `json:"rolled_back,omitempty"`
		Waiting    []string       `json:"waiting_for_approval,omitempty"`
	}
)

// event renders e when it concerns the run.
func (r *runRenderer) event(e rein.Event) {
	if e.RunID != r.run || r.done {
		return
	}
	r.seq = e.Seq
	switch e.Type {
	case rein.EventRunQueued:
		var p rein.RunQueuedPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.queued = true
		r.add(dataChunk{Type: "data-rein-queue", ID: "queue", Data: map[string]any{"position": p.Position}})
	case rein.EventRunStarted:
		if r.queued {
			r.add(dataChunk{Type: "data-rein-queue", ID: "queue", Data: map[string]any{"position": nil}})
		}
	case rein.EventSupplementConsumed:
		var p rein.SupplementConsumedPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.enterStep(p.Step)
		r.add(dataChunk{Type: "data-rein-note", ID: p.SupplementID, Data: map[string]any{"note_id": p.SupplementID, "step": p.Step}})
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.enterStep(p.Step)
		r.delta(e.ID, p.Text)
	case rein.EventStepRestarted:
		var p rein.StepRestartedPayload
		_ = json.Unmarshal(e.Payload, &p)
		var textID *string
		if r.textID != "" {
			// The cut text part stays open: the redo's text is shown only
			// where it goes past what the client already has.
			id := r.textID
			textID = &id
			r.cutting, r.cut = true, r.shown.String()
			r.redo.Reset()
		}
		r.add(dataChunk{Type: "data-rein-step-restarted", ID: e.ID, Data: map[string]any{"step": p.Step, "attempt": p.Attempt, "text_id": textID}})
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		_ = json.Unmarshal(e.Payload, &p)
		r.enterStep(p.Step)
		r.endText()
		input := p.Input
		if !json.Valid(input) {
			input, _ = json.Marshal(string(p.Input))
		}
		r.add(toolInputChunk{Type: "tool-input-available", ToolCallID: p.ToolUseID, ToolName: p.Name, Input: input})
	case rein.EventToolConfirmationRequested:
		var p rein.ToolConfirmationRequestedPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.awaiting[p.ToolUseID] = true
		r.add(approvalChunk{Type: "tool-approval-request", ApprovalID: p.ToolUseID, ToolCallID: p.ToolUseID})
	case rein.EventUserToolConfirmation:
		var p rein.UserToolConfirmationPayload
		_ = json.Unmarshal(e.Payload, &p)
		delete(r.awaiting, p.ToolUseID)
		if !p.Allow {
			r.denied[p.ToolUseID] = true
			r.add(toolDeniedChunk{Type: "tool-output-denied", ToolCallID: p.ToolUseID})
		}
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		_ = json.Unmarshal(e.Payload, &p)
		switch {
		case r.denied[p.ToolUseID]:
			// Shown as denied; the result only repeats the deny message.
		case p.InDoubt:
			r.add(toolErrorChunk{Type: "tool-output-error", ToolCallID: p.ToolUseID, ErrorText: "in doubt: the call was executing when its server was lost; it may or may not have taken effect, and it is not run again. " + p.Output})
		case p.IsError:
			r.add(toolErrorChunk{Type: "tool-output-error", ToolCallID: p.ToolUseID, ErrorText: p.Output})
		default:
			r.add(toolOutputChunk{Type: "tool-output-available", ToolCallID: p.ToolUseID, Output: p.Output})
		}
	case rein.EventMessage:
		var p rein.MessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		r.endText()
		if p.Text != "" && p.Text != r.stepText {
			// A reply made after the last request (a stop during tool
			// calls, the step limit) that no step streamed.
			r.add(textChunk{Type: "text-start", ID: e.ID})
			r.add(textChunk{Type: "text-delta", ID: e.ID, Delta: p.Text})
			r.add(textChunk{Type: "text-end", ID: e.ID})
			r.stepText = p.Text
		}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.endStep()
		r.add(finishChunk{Type: "finish", FinishReason: finishReason(p), MessageMetadata: metadata{Rein: runMeta{
			ChatID: r.chat, RunID: r.run, Status: p.Status, Reason: p.Reason, Error: p.Error, RolledBack: p.RolledBack}}})
		r.done = true
	}
}

// finishReason is the protocol's closest word for how the run ended.
func finishReason(p rein.RunCompletedPayload) string {
	switch {
	case p.Status == rein.StatusFailed:
		return "error"
	case p.Reason == rein.ReasonStop:
		return "stop"
	case p.Reason == rein.ReasonMaxSteps:
		return "length"
	default:
		return "other"
	}
}

// enterStep opens step n (closing the one before) at its first event.
func (r *runRenderer) enterStep(n int) {
	if n == r.step && r.stepOpen {
		return
	}
	if n != r.step {
		r.endStep()
		r.step = n
	}
	r.stepOpen = true
	r.add(typed{Type: "start-step"})
}

// endStep closes the open text part and step.
func (r *runRenderer) endStep() {
	r.endText()
	if r.stepOpen {
		r.add(typed{Type: "finish-step"})
		r.stepOpen = false
	}
}

func (r *runRenderer) endText() {
	if r.textID == "" {
		return
	}
	r.add(textChunk{Type: "text-end", ID: r.textID})
	r.stepText = r.shown.String()
	r.textID, r.cutting = "", false
	r.shown.Reset()
}

// delta shows streamed text. After a restart the redo's text is held back
// while it repeats what the cut request showed, and only what goes past
// it is shown, in the same part; a redo that says something else ends the
// cut part and opens a new one (the data-rein-step-restarted part named
// the cut part: a client drops it).
func (r *runRenderer) delta(id, text string) {
	if r.cutting {
		r.redo.WriteString(text)
		redo := r.redo.String()
		switch {
		case strings.HasPrefix(r.cut, redo):
			return
		case strings.HasPrefix(redo, r.cut):
			text = redo[len(r.cut):]
			r.cutting = false
		default:
			r.add(textChunk{Type: "text-end", ID: r.textID})
			r.textID, r.cutting, text = "", false, redo
			r.shown.Reset()
		}
	}
	if text == "" {
		return
	}
	if r.textID == "" {
		r.textID = id
		r.add(textChunk{Type: "text-start", ID: id})
	}
	r.shown.WriteString(text)
	r.add(textChunk{Type: "text-delta", ID: r.textID, Delta: text})
}

// park ends the stream of a run that waits for approvals: the step is
// closed and the finish says what it waits for. The client's answer
// (addToolApprovalResponse, then a request) continues the same run.
func (r *runRenderer) park() {
	r.endStep()
	waiting := make([]string, 0, len(r.awaiting))
	for id := range r.awaiting {
		waiting = append(waiting, id)
	}
	slices.Sort(waiting)
	r.add(finishChunk{Type: "finish", FinishReason: "tool-calls", MessageMetadata: metadata{Rein: runMeta{
		ChatID: r.chat, RunID: r.run, Status: rein.StatusRunning, Waiting: waiting}}})
	r.done = true
}
