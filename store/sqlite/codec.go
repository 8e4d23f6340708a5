package sqlite

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/reinhq/rein"
)

// Times are stored as microseconds since the epoch: exact for what Rein
// keeps (UTC, microsecond precision), cheap to compare and index. The zero
// time is NULL.

func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func micros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// storedMessage is how a rein.Message is kept in the history table. It
// differs from rein.Message's own JSON in one place: a tool call's input may
// be invalid JSON (models produce such), which a json.RawMessage field
// cannot marshal, so such input is kept as bytes beside a flag.
type storedMessage struct {
	Role       rein.Role    `json:"role"`
	Text       string       `json:"text,omitempty"`
	ToolCalls  []storedCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
	ToolName   string       `json:"tool_name,omitempty"`
	IsError    bool         `json:"is_error,omitempty"`
	Partial    bool         `json:"partial,omitempty"`
	Hint       *rein.Hint   `json:"hint,omitempty"`
	RunID      string       `json:"run_id,omitempty"`
	Step       int          `json:"step,omitempty"`
}

type storedCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
	// Invalid is set when the input is not valid JSON; RawInput then
	// holds it byte for byte.
	Invalid  bool   `json:"invalid,omitempty"`
	RawInput []byte `json:"raw_input,omitempty"`
}

func encodeMessage(m rein.Message) ([]byte, error) {
	sm := storedMessage{
		Role: m.Role, Text: m.Text, ToolCallID: m.ToolCallID, ToolName: m.ToolName,
		IsError: m.IsError, Partial: m.Partial, Hint: m.Hint, RunID: m.RunID, Step: m.Step,
	}
	if m.ToolCalls != nil {
		sm.ToolCalls = make([]storedCall, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			sc := storedCall{ID: c.ID, Name: c.Name}
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

func decodeMessage(b []byte) (rein.Message, error) {
	var sm storedMessage
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
			if sc.Invalid {
				c.Input = json.RawMessage(sc.RawInput)
				if c.Input == nil {
					c.Input = json.RawMessage{}
				}
			}
			m.ToolCalls[i] = c
		}
	}
	return m, nil
}

// jsonOrEmpty validates client JSON and defaults empty to {}.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return b, nil
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
