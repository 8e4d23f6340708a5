package a2a

import (
	"encoding/json"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/reinhq/rein"
)

// replyArtifactID names the artifact that carries a run's final reply.
const replyArtifactID a2a.ArtifactID = "reply"

// Keys of the metadata Rein adds to what it renders (docs/protocols.md,
// "Extensions"): a client that knows them can place an update in the
// session's log, or drop the text of a step that was made again.
const (
	metaSeq           = "rein_seq"
	metaStep          = "rein_step"
	metaStepRestarted = "rein_step_restarted"
	metaReason        = "rein_reason"
	metaNote          = "rein_note"
	metaWhenBusy      = "rein_when_busy"
	metaMode          = "rein_mode"
)

// confirmationJSON is one call waiting for an answer, as an
// INPUT_REQUIRED status message lists it.
type confirmationJSON struct {
	ToolUseID string          `json:"tool_use_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// task is one run as A2A sees it, folded from the run's events in the
// session's log. The same fold answers GetTask and renders every stream,
// so what a stream showed and what GetTask says afterwards agree.
type task struct {
	id, contextID string
	state         a2a.TaskState
	// statusMsg is the status message of the current state (nil: none).
	statusMsg *a2a.Message
	updated   time.Time
	history   []*a2a.Message
	// reply is the final reply, once the run has one.
	reply *a2a.Artifact
	// pending are the calls waiting for a confirmation, in request order.
	pending []confirmationJSON
	// seen is true once the run's first event was folded.
	seen bool
	// notes are the texts of the session's notes by supplement id, so a
	// note the run consumed joins its history; shared by the tasks of one
	// fold of the log.
	notes map[string]string
}

func newTask(contextID, runID string, notes map[string]string) *task {
	return &task{id: runID, contextID: contextID, state: a2a.TaskStateSubmitted, notes: notes}
}

// recordNote remembers a note's text (notes are the session's, not a
// run's: the run that consumes one says so later).
func recordNote(notes map[string]string, e rein.Event) {
	if notes == nil || e.Type != rein.EventUserSupplement {
		return
	}
	var p rein.SupplementPayload
	if json.Unmarshal(e.Payload, &p) == nil {
		notes[p.SupplementID] = p.Text
	}
}

// terminal reports whether the run has ended.
func (t *task) terminal() bool { return t.state.Terminal() }

// snapshot renders the task as GetTask answers it: historyLength (nil:
// all) keeps the last messages of the history; artifacts says whether the
// reply is included.
func (t *task) snapshot(historyLength *int, artifacts bool) *a2a.Task {
	out := &a2a.Task{ID: a2a.TaskID(t.id), ContextID: t.contextID, Status: t.status()}
	hist := t.history
	if historyLength != nil && *historyLength < len(hist) {
		hist = hist[len(hist)-max(*historyLength, 0):]
	}
	out.History = append([]*a2a.Message(nil), hist...)
	if artifacts && t.reply != nil {
		out.Artifacts = []*a2a.Artifact{t.reply}
	}
	return out
}

func (t *task) status() a2a.TaskStatus {
	st := a2a.TaskStatus{State: t.state, Message: t.statusMsg}
	if !t.updated.IsZero() {
		ts := t.updated
		st.Timestamp = &ts
	}
	return st
}

func (t *task) info() a2a.TaskInfo {
	return a2a.TaskInfo{TaskID: a2a.TaskID(t.id), ContextID: t.contextID}
}

// agentMessage is a message of the agent about this task.
func (t *task) agentMessage(id string, parts ...*a2a.Part) *a2a.Message {
	m := a2a.NewMessageForTask(a2a.MessageRoleAgent, t.info(), parts...)
	m.ID = id
	return m
}

// statusUpdate is the update announcing the task's current status, with
// the metadata of the event that caused it.
func (t *task) statusUpdate(e rein.Event, extra map[string]any) *a2a.TaskStatusUpdateEvent {
	u := &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(t.id), ContextID: t.contextID, Status: t.status()}
	u.Metadata = map[string]any{metaSeq: e.Seq}
	for k, v := range extra {
		u.Metadata[k] = v
	}
	return u
}

// apply folds one event of the run into the task and returns what a
// stream shows for it (nil: nothing). The task's first rendering is the
// Task itself, at the run's user.message.
func (t *task) apply(e rein.Event) a2a.Event {
	recordNote(t.notes, e)
	if e.RunID != t.id {
		return nil
	}
	t.updated = e.CreatedAt
	switch e.Type {
	case rein.EventUserMessage:
		var p rein.UserMessagePayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		m := a2a.NewMessageForTask(a2a.MessageRoleUser, t.info(), a2a.NewTextPart(p.Text))
		m.ID = e.ID
		t.history = append(t.history, m)
		t.seen = true
		snap := t.snapshot(nil, true)
		snap.Metadata = map[string]any{metaSeq: e.Seq}
		return snap
	case rein.EventRunQueued:
		t.state, t.statusMsg = a2a.TaskStateSubmitted, nil
		return t.statusUpdate(e, nil)
	case rein.EventRunStarted:
		t.state, t.statusMsg = a2a.TaskStateWorking, nil
		return t.statusUpdate(e, nil)
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		if json.Unmarshal(e.Payload, &p) != nil || p.Text == "" {
			return nil
		}
		// Progress, not state: the status message of a stream's update,
		// never kept on the task (the reply is its artifact).
		u := t.statusUpdate(e, map[string]any{metaStep: p.Step})
		u.Status.Message = t.agentMessage(e.ID, a2a.NewTextPart(p.Text))
		return u
	case rein.EventStepRestarted:
		var p rein.StepRestartedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		return t.statusUpdate(e, map[string]any{metaStepRestarted: p.Step})
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		u := t.statusUpdate(e, map[string]any{metaStep: p.Step})
		u.Status.Message = t.agentMessage(e.ID, a2a.NewDataPart(map[string]any{"tool_use": map[string]any{
			"tool_use_id": p.ToolUseID, "name": p.Name, "input": rawOrString(p.Input)}}))
		return u
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		u := t.statusUpdate(e, nil)
		u.Status.Message = t.agentMessage(e.ID, a2a.NewDataPart(map[string]any{"tool_result": map[string]any{
			"tool_use_id": p.ToolUseID, "output": p.Output, "is_error": p.IsError}}))
		return u
	case rein.EventSupplementConsumed:
		var p rein.SupplementConsumedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		consumed := map[string]any{"supplement_id": p.SupplementID, "step": p.Step}
		// A stream that began after the note was sent has not read its
		// text; GetTask, folding the whole log, always has.
		if text, ok := t.notes[p.SupplementID]; ok {
			note := a2a.NewMessageForTask(a2a.MessageRoleUser, t.info(), a2a.NewTextPart(text))
			note.ID, note.Metadata = p.SupplementID, map[string]any{metaNote: true}
			t.history = append(t.history, note)
			consumed["text"] = text
		}
		u := t.statusUpdate(e, map[string]any{metaStep: p.Step})
		u.Status.Message = t.agentMessage(e.ID, a2a.NewDataPart(map[string]any{"note_consumed": consumed}))
		return u
	case rein.EventToolConfirmationRequested:
		var p rein.ToolConfirmationRequestedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		t.pending = append(t.pending, confirmationJSON{ToolUseID: p.ToolUseID, Name: p.Name, Input: rawOrString(p.Input)})
		t.inputRequired(e.ID)
		return t.statusUpdate(e, nil)
	case rein.EventUserToolConfirmation:
		var p rein.UserToolConfirmationPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		return t.answered(e, p.ToolUseID)
	case rein.EventMessage:
		var p rein.MessagePayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		t.reply = &a2a.Artifact{ID: replyArtifactID, Name: "reply", Parts: a2a.ContentParts{a2a.NewTextPart(p.Text)},
			Metadata: map[string]any{metaReason: string(p.Reason)}}
		reply := t.agentMessage(e.ID, a2a.NewTextPart(p.Text))
		t.history = append(t.history, reply)
		return &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(t.id), ContextID: t.contextID, Artifact: t.reply,
			LastChunk: true, Metadata: map[string]any{metaSeq: e.Seq}}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			return nil
		}
		t.pending = nil
		t.state, t.statusMsg = terminalState(p.Status), nil
		if p.Error != "" {
			t.statusMsg = t.agentMessage(e.ID, a2a.NewTextPart(p.Error))
		}
		return t.statusUpdate(e, map[string]any{metaReason: string(p.Reason)})
	}
	return nil
}

// inputRequired makes the task wait for the answers to its pending calls.
func (t *task) inputRequired(msgID string) {
	list := append([]confirmationJSON(nil), t.pending...)
	t.state = a2a.TaskStateInputRequired
	t.statusMsg = t.agentMessage(msgID,
		a2a.NewTextPart("waiting for a confirmation of the tool calls listed; answer with a message to this task carrying a data part {\"confirmations\": [{\"tool_use_id\", \"allow\", \"deny_message\"?}]}"),
		a2a.NewDataPart(map[string]any{"confirmations": list}))
}

// answered removes an answered call from the pending ones.
func (t *task) answered(e rein.Event, toolUseID string) a2a.Event {
	for i, c := range t.pending {
		if c.ToolUseID == toolUseID {
			t.pending = append(t.pending[:i:i], t.pending[i+1:]...)
			break
		}
	}
	if t.terminal() {
		return nil
	}
	if len(t.pending) > 0 {
		t.inputRequired(e.ID)
	} else {
		t.state, t.statusMsg = a2a.TaskStateWorking, nil
	}
	return t.statusUpdate(e, nil)
}

// terminalState maps a run's end onto A2A's states.
func terminalState(s rein.RunStatus) a2a.TaskState {
	switch s {
	case rein.StatusCompleted:
		return a2a.TaskStateCompleted
	case rein.StatusCancelled:
		return a2a.TaskStateCanceled
	default:
		return a2a.TaskStateFailed
	}
}

// rawOrString keeps valid JSON as it is and shows anything else (a model
// may produce an invalid tool input) as the string it was.
func rawOrString(b json.RawMessage) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
