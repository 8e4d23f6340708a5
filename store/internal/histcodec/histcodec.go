// Package histcodec is how the database backends store one transcript
// message (rein.Message) as JSON: one codec, so that SQLite and PostgreSQL
// cannot drift apart on what a stored message means.
//
// The format is rein.Message's own JSON except in one place: a tool call's
// input may be invalid JSON (models produce such, and the transcript must
// keep it byte for byte so the tool registry can answer it with an error),
// which a json.RawMessage field cannot marshal and a json column would
// refuse. Such input is stored as bytes (base64) in raw_input, beside
// "invalid": true.
//
// Decode also reads the earlier PostgreSQL form, which wrote raw_input
// without the flag; Encode always writes the flag, which the earlier
// PostgreSQL reader understood as well (it looked only at raw_input).
// Messages without invalid tool input encode exactly as both backends
// wrote them before this package existed.
package histcodec

import (
	"encoding/json"

	"github.com/reinhq/rein"
)

// message is the stored form of a rein.Message. The field order is the
// order of the JSON keys and part of the format: changing it changes the
// bytes written (though not what they mean).
type message struct {
	Role       rein.Role  `json:"role"`
	Text       string     `json:"text,omitempty"`
	ToolCalls  []call     `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"`
	IsError    bool       `json:"is_error,omitempty"`
	Partial    bool       `json:"partial,omitempty"`
	Hint       *rein.Hint `json:"hint,omitempty"`
	RunID      string     `json:"run_id,omitempty"`
	Step       int        `json:"step,omitempty"`
}

type call struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// Invalid is set when the input is not valid JSON; RawInput then
	// holds it byte for byte (and is absent for an empty input).
	Invalid  bool   `json:"invalid,omitempty"`
	RawInput []byte `json:"raw_input,omitempty"`
}

// Encode returns the stored form of m.
func Encode(m rein.Message) ([]byte, error) {
	sm := message{
		Role: m.Role, Text: m.Text, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
		IsError: m.IsError, Partial: m.Partial, Hint: m.Hint, RunID: m.RunID, Step: m.Step,
	}
	if m.ToolCalls != nil {
		sm.ToolCalls = make([]call, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			sc := call{ID: c.ID, Name: c.Name}
			switch {
			case c.Input == nil:
			case json.Valid(c.Input):
				sc.Input = c.Input
			default:
				sc.Invalid, sc.RawInput = true, c.Input
			}
			sm.ToolCalls[i] = sc
		}
	}
	return json.Marshal(sm)
}

// Decode returns the message stored as b.
func Decode(b []byte) (rein.Message, error) {
	var sm message
	if err := json.Unmarshal(b, &sm); err != nil {
		return rein.Message{}, err
	}
	m := rein.Message{
		Role: sm.Role, Text: sm.Text, ToolCallID: sm.ToolCallID, ToolName: sm.ToolName,
		IsError: sm.IsError, Partial: sm.Partial, Hint: sm.Hint, RunID: sm.RunID, Step: sm.Step,
	}
	if sm.ToolCalls != nil {
		m.ToolCalls = make([]rein.ToolCall, len(sm.ToolCalls))
		for i, sc := range sm.ToolCalls {
			c := rein.ToolCall{ID: sc.ID, Name: sc.Name, Input: sc.Input}
			switch {
			case sc.Invalid:
				c.Input = json.RawMessage(sc.RawInput)
				if c.Input == nil {
					// An empty input is invalid JSON too, and omitempty
					// dropped its raw_input: give back the empty input.
					c.Input = json.RawMessage{}
				}
			case sc.RawInput != nil:
				// The earlier PostgreSQL form: raw_input without the flag.
				c.Input = json.RawMessage(sc.RawInput)
			}
			m.ToolCalls[i] = c
		}
	}
	return m, nil
}
