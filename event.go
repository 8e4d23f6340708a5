package rein

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"github.com/reinhq/rein/internal/jsonx"
)

// EventType names an event in a session's log (docs/api.md "Event vocabulary").
type EventType string

// The event vocabulary.
const (
	EventUserMessage               EventType = "user.message"
	EventUserInterrupt             EventType = "user.interrupt"
	EventUserSupplement            EventType = "user.supplement"
	EventUserToolConfirmation      EventType = "user.tool_confirmation"
	EventSystemMessage             EventType = "system.message"
	EventRunQueued                 EventType = "session.run_queued"
	EventRunStarted                EventType = "session.run_started"
	EventRunCompleted              EventType = "session.run_completed"
	EventToolConfirmationRequested EventType = "session.tool_confirmation_requested"
	EventConfirmationExpired       EventType = "session.confirmation_expired"
	EventMessageDelta              EventType = "agent.message.delta"
	EventMessage                   EventType = "agent.message"
	EventToolUse                   EventType = "agent.tool_use"
	EventToolResult                EventType = "agent.tool_result"
	EventSupplementConsumed        EventType = "agent.supplement_consumed"
	EventStepRestarted             EventType = "agent.step_restarted"
	EventModelRequest              EventType = "agent.model_request"
	EventSubagentStarted           EventType = "subagent.started"
	EventSubagentCompleted         EventType = "subagent.completed"
	// EventRunEdited: a queued run's input was replaced (the editable
	// queue, docs/api.md).
	EventRunEdited EventType = "session.run_edited"
	// EventQueueChanged: the session's queue changed (a run admitted into
	// it, leaving it, moved or promoted); the payload is the whole new
	// order.
	EventQueueChanged EventType = "session.queue_changed"
)

// Event is one record of a session's append-only log.
//
// Seq, ID, SessionID and CreatedAt are assigned by the store on append; a
// writer fills Type, RunID and Payload.
type Event struct {
	// Seq is the per-session sequence number: 1, 2, 3, … without gaps.
	Seq int64
	// ID is globally unique ("evt_" + ULID).
	ID string
	// SessionID is the session the event belongs to.
	SessionID string
	// RunID is the run the event concerns, or "" (written as null).
	RunID string
	// Type names the event.
	Type EventType
	// Payload is the type's JSON object (see the *Payload types).
	Payload json.RawMessage
	// CreatedAt is when the store appended the event (UTC).
	CreatedAt time.Time
}

type eventJSON struct {
	Seq       int64           `json:"seq"`
	ID        string          `json:"id"`
	SessionID string          `json:"session_id"`
	RunID     *string         `json:"run_id"`
	Type      EventType       `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt string          `json:"created_at"`
}

// TimeFormat is how every time is written on the wire: RFC 3339 in UTC with
// the precision the clock has.
const TimeFormat = time.RFC3339Nano

// FormatTime writes t the way the wire wants it.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// MarshalJSON writes the docs/api.md event JSON.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.AppendJSON(nil)
}

// AppendJSON appends to b what MarshalJSON returns. Event streams write
// every event they send this way, so the common case — a payload already
// compact and free of what encoding/json escapes for HTML — is written
// directly, byte for byte what encoding/json writes, without its
// reflection and allocations; any other payload goes through
// encoding/json.
func (e Event) AppendJSON(b []byte) ([]byte, error) {
	payload := e.Payload
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = json.RawMessage("{}")
	}
	if !compactJSON(payload) || !jsonx.Valid(payload) {
		j := eventJSON{Seq: e.Seq, ID: e.ID, SessionID: e.SessionID, Type: e.Type, Payload: payload, CreatedAt: FormatTime(e.CreatedAt)}
		if e.RunID != "" {
			// A copy: a pointer into e would move e to the heap on every call.
			rid := e.RunID
			j.RunID = &rid
		}
		out, err := json.Marshal(j)
		if err != nil {
			return b, err
		}
		return append(b, out...), nil
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"id":`...)
	b = jsonx.AppendString(b, e.ID)
	b = append(b, `,"session_id":`...)
	b = jsonx.AppendString(b, e.SessionID)
	if e.RunID == "" {
		b = append(b, `,"run_id":null`...)
	} else {
		b = append(b, `,"run_id":`...)
		b = jsonx.AppendString(b, e.RunID)
	}
	b = append(b, `,"type":`...)
	b = jsonx.AppendString(b, string(e.Type))
	b = append(b, `,"payload":`...)
	b = append(b, payload...)
	b = append(b, `,"created_at":"`...)
	b = e.CreatedAt.UTC().AppendFormat(b, TimeFormat)
	return append(b, `"}`...), nil
}

// UnmarshalJSON reads the docs/api.md event JSON.
func (e *Event) UnmarshalJSON(b []byte) error {
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339Nano, j.CreatedAt)
	if err != nil && j.CreatedAt != "" {
		return err
	}
	*e = Event{Seq: j.Seq, ID: j.ID, SessionID: j.SessionID, Type: j.Type, Payload: j.Payload, CreatedAt: t.UTC()}
	if j.RunID != nil {
		e.RunID = *j.RunID
	}
	return nil
}

// compactJSON reports whether encoding/json would write the JSON text p
// unchanged: no whitespace outside strings, and none of what it escapes
// for HTML anywhere (<, >, &, and U+2028 and U+2029, which start with the
// byte 0xE2: any 0xE2 counts, to be safe).
func compactJSON(p []byte) bool {
	for i := 0; i < len(p); i++ {
		switch jsonClass[p[i]] {
		case classRefused:
			return false
		case classSpace:
			return false
		case classQuote:
			// A string: skip to its closing quote.
			for i++; i < len(p); i++ {
				c := p[i]
				if k := jsonClass[c]; k == classRefused {
					return false
				} else if c == '\\' {
					i++
				} else if c == '"' {
					break
				}
			}
		}
	}
	return true
}

// The byte classes compactJSON tells apart.
const (
	_ = iota // anything else
	classRefused
	classSpace
	classQuote
)

var jsonClass = func() (t [256]uint8) {
	for _, c := range []byte{'<', '>', '&', 0xE2} {
		t[c] = classRefused
	}
	for _, c := range []byte{' ', '\t', '\n', '\r'} {
		t[c] = classSpace
	}
	t['"'] = classQuote
	return t
}()

// NewEvent builds an unsequenced event of type t about run runID ("" for
// none) with payload p marshalled to JSON. Payload types in this package
// always marshal; a payload that fails to marshal is a programming error and
// panics.
func NewEvent(t EventType, runID string, p any) Event {
	// Written on the stack, then copied once at its size: growing a heap
	// slice from nothing took three allocations.
	var buf [256]byte
	if b, ok := appendPayload(buf[:0], p); ok {
		return Event{Type: t, RunID: runID, Payload: bytes.Clone(b)}
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic("rein: event payload does not marshal: " + err.Error())
	}
	return Event{Type: t, RunID: runID, Payload: b}
}

// appendPayload appends what json.Marshal writes for the payloads every
// run writes (its message, start, deltas, reply and end), without
// encoding/json's reflection: a tenth of a short run's cost went there.
// ok is false for any other payload, which encoding/json writes.
func appendPayload(b []byte, p any) (_ []byte, ok bool) {
	switch p := p.(type) {
	case UserMessagePayload:
		b = append(b, `{"text":`...)
		b = jsonx.AppendString(b, p.Text)
		b = append(b, `,"run_id":`...)
		b = jsonx.AppendString(b, p.RunID)
	case RunStartedPayload:
		b = append(b, `{"run_id":`...)
		b = jsonx.AppendString(b, p.RunID)
	case MessageDeltaPayload:
		b = append(b, `{"run_id":`...)
		b = jsonx.AppendString(b, p.RunID)
		b = append(b, `,"step":`...)
		b = strconv.AppendInt(b, int64(p.Step), 10)
		b = append(b, `,"text":`...)
		b = jsonx.AppendString(b, p.Text)
	case MessagePayload:
		b = append(b, `{"run_id":`...)
		b = jsonx.AppendString(b, p.RunID)
		b = append(b, `,"text":`...)
		b = jsonx.AppendString(b, p.Text)
		b = append(b, `,"reason":`...)
		b = jsonx.AppendString(b, string(p.Reason))
		if p.Usage != nil {
			b = append(b, `,"usage":{"input_tokens":`...)
			b = strconv.AppendInt(b, p.Usage.InputTokens, 10)
			b = append(b, `,"output_tokens":`...)
			b = strconv.AppendInt(b, p.Usage.OutputTokens, 10)
			if p.Usage.CostUSD == nil {
				b = append(b, `,"cost_usd":null}`...)
			} else {
				b = append(b, `,"cost_usd":`...)
				b = appendFloat(b, *p.Usage.CostUSD)
				b = append(b, '}')
			}
		}
	case RunCompletedPayload:
		b = append(b, `{"run_id":`...)
		b = jsonx.AppendString(b, p.RunID)
		b = append(b, `,"status":`...)
		b = jsonx.AppendString(b, string(p.Status))
		b = append(b, `,"reason":`...)
		b = jsonx.AppendString(b, string(p.Reason))
		if p.Error != "" {
			b = append(b, `,"error":`...)
			b = jsonx.AppendString(b, p.Error)
		}
		if p.RolledBack {
			b = append(b, `,"rolled_back":true`...)
		}
	default:
		return b, false
	}
	return append(b, '}'), true
}

// DecodePayload unmarshals the event's payload into v.
func (e Event) DecodePayload(v any) error { return json.Unmarshal(e.Payload, v) }

// Payloads. Field tags follow docs/api.md: a key marked "?" in the SPEC is
// omitempty here; every other key is always written, as null when empty.

// UserMessagePayload is the payload of user.message.
type UserMessagePayload struct {
	Text  string `json:"text"`
	RunID string `json:"run_id"`
}

// RunQueuedPayload is the payload of session.run_queued.
type RunQueuedPayload struct {
	RunID    string `json:"run_id"`
	Position int    `json:"position"`
}

// RunEditedPayload is the payload of session.run_edited.
type RunEditedPayload struct {
	RunID string `json:"run_id"`
	Text  string `json:"text"`
}

// QueueChangedPayload is the payload of session.queue_changed: the
// session's queued run ids in the order they will run (never null).
type QueueChangedPayload struct {
	Queued []string `json:"queued"`
}

// RunStartedPayload is the payload of session.run_started.
type RunStartedPayload struct {
	RunID string `json:"run_id"`
}

// MessageDeltaPayload is the payload of agent.message.delta.
type MessageDeltaPayload struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	Text  string `json:"text"`
}

// ToolUsePayload is the payload of agent.tool_use.
type ToolUsePayload struct {
	RunID     string          `json:"run_id"`
	Step      int             `json:"step"`
	ToolUseID string          `json:"tool_use_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// ToolConfirmationRequestedPayload is the payload of
// session.tool_confirmation_requested.
type ToolConfirmationRequestedPayload struct {
	RunID     string          `json:"run_id"`
	ToolUseID string          `json:"tool_use_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// ConfirmationExpiredPayload is the payload of session.confirmation_expired:
// the call's confirmation expired unanswered, and the call was denied with
// the deny message "expired" (ConfirmationExpiredMessage).
type ConfirmationExpiredPayload struct {
	RunID     string `json:"run_id"`
	ToolUseID string `json:"tool_use_id"`
}

// ConfirmationExpiredMessage is the deny message of a call whose
// confirmation expired.
const ConfirmationExpiredMessage = "expired"

// UserToolConfirmationPayload is the payload of user.tool_confirmation.
type UserToolConfirmationPayload struct {
	ToolUseID   string  `json:"tool_use_id"`
	Allow       bool    `json:"allow"`
	DenyMessage *string `json:"deny_message"`
}

// ToolResultPayload is the payload of agent.tool_result.
type ToolResultPayload struct {
	RunID     string `json:"run_id"`
	ToolUseID string `json:"tool_use_id"`
	Output    string `json:"output"`
	IsError   bool   `json:"is_error"`
	// InDoubt marks the result of a call that was executing as its
	// instance was lost: it may or may not have taken effect, and it is
	// never run again.
	InDoubt bool `json:"in_doubt,omitempty"`
}

// StepRestartedPayload is the payload of agent.step_restarted: a resumed
// run makes this step's model request again, and readers drop the deltas
// they hold for it.
type StepRestartedPayload struct {
	RunID   string `json:"run_id"`
	Step    int    `json:"step"`
	Attempt int    `json:"attempt"`
}

// SupplementPayload is the payload of user.supplement.
type SupplementPayload struct {
	SupplementID string `json:"supplement_id"`
	Text         string `json:"text"`
	Source       string `json:"source"`
}

// SupplementConsumedPayload is the payload of agent.supplement_consumed.
type SupplementConsumedPayload struct {
	SupplementID string `json:"supplement_id"`
	RunID        string `json:"run_id"`
	Step         int    `json:"step"`
}

// MessagePayload is the payload of agent.message (a run's final reply).
type MessagePayload struct {
	RunID  string `json:"run_id"`
	Text   string `json:"text"`
	Reason Reason `json:"reason"`
	// Usage is the run's token usage (an addition to the SPEC's keys).
	Usage *Usage `json:"usage,omitempty"`
}

// Outcomes of a model request (ModelRequestPayload.Outcome).
const (
	RequestOK      = "ok"      // the stream ended normally
	RequestError   = "error"   // the request or its stream failed
	RequestStopped = "stopped" // a stop (cancel, interrupt, timeout) cut it
)

// ModelRequestPayload is the payload of agent.model_request: one model
// request that ended, logged in the write that saved what its step
// produced, or in the run's end write.
type ModelRequestPayload struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	// Model is the configured model name, e.g. "openai:gpt-4o-mini".
	Model string `json:"model"`
	// Usage is the request's own usage; its cost is nil without a price.
	Usage      Usage  `json:"usage"`
	DurationMS int64  `json:"duration_ms"`
	Outcome    string `json:"outcome"`
}

// UserInterruptPayload is the payload of user.interrupt.
type UserInterruptPayload struct {
	RunID *string `json:"run_id"`
	// ClientID is the client id the stop named (a stop by client id), nil
	// otherwise.
	ClientID *string `json:"client_id,omitempty"`
	Mode     string  `json:"mode"`
	Accepted bool    `json:"accepted"`
	Message  *string `json:"message,omitempty"`
}

// SystemMessagePayload is the payload of system.message.
type SystemMessagePayload struct {
	Text string `json:"text"`
}

// RunCompletedPayload is the payload of session.run_completed.
type RunCompletedPayload struct {
	RunID  string    `json:"run_id"`
	Status RunStatus `json:"status"`
	Reason Reason    `json:"reason"`
	Error  string    `json:"error,omitempty"`
	// RolledBack is true for a run stopped by when_busy=rollback.
	RolledBack bool `json:"rolled_back,omitempty"`
}

// SubagentStartedPayload is the payload of subagent.started.
type SubagentStartedPayload struct {
	ChildID string `json:"child_id"`
	TaskID  string `json:"task_id"`
}

// SubagentCompletedPayload is the payload of subagent.completed.
type SubagentCompletedPayload struct {
	ChildID string    `json:"child_id"`
	TaskID  string    `json:"task_id"`
	Status  RunStatus `json:"status"`
	Reason  Reason    `json:"reason"`
	Output  *string   `json:"output"`
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(b []byte, f float64) []byte {
	out, err := json.Marshal(f)
	if err != nil {
		// NaN or ±Inf: never a cost (prices and token counts are finite).
		return append(b, "null"...)
	}
	return append(b, out...)
}
