package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"html"

	"github.com/reinhq/rein"
)

// PartialMarker is appended to a partial assistant message (a reply cut
// short and kept by the partial-output policy) so that the model does not
// take its own truncated text for a finished answer.
const PartialMarker = "[reply cut short]"

// UserText is the text a user-role message shows the model. A hint
// (supplement or subagent notice) is a note about the work, not the user's
// next request, so it is wrapped:
//
//	<supplement source="user">TEXT</supplement>
//
// where source is the hint's label ("user", "parent", "subagent"; "user"
// when empty), attribute-escaped. TEXT is passed verbatim: a supplement
// comes from the session's owner, so the wrapper marks intent and is not a
// security boundary.
func UserText(m rein.Message) string {
	if m.Hint == nil {
		return m.Text
	}
	src := m.Hint.Source
	if src == "" {
		src = "user"
	}
	return `<supplement source="` + html.EscapeString(src) + `">` + m.Text + `</supplement>`
}

// AssistantText is the text an assistant message shows the model: its
// text, and for a partial message the text followed by a blank line and
// PartialMarker (the marker alone when no text was kept).
func AssistantText(m rein.Message) string {
	if !m.Partial {
		return m.Text
	}
	if m.Text == "" {
		return PartialMarker
	}
	return m.Text + "\n\n" + PartialMarker
}

// ToolInput turns the argument text a model streamed for a tool call into
// rein.ToolCall.Input, which must be valid JSON because it is stored in
// events and transcripts as JSON:
//   - empty (a call without arguments) → {}
//   - valid JSON → the text itself
//   - anything else (the model produced broken JSON, or the reply was cut
//     off mid-call) → the text as a JSON string, which no tool's object
//     schema accepts, so the registry answers with an error result the
//     model can read and correct.
func ToolInput(raw string) json.RawMessage {
	b := bytes.TrimSpace([]byte(raw))
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(raw) // a string always marshals
	return q
}

// ArgumentsText is the inverse of ToolInput for APIs that carry arguments
// as text (OpenAI): the model sees again the exact text it produced. A
// JSON string input is taken to be broken arguments that ToolInput wrapped.
func ArgumentsText(input json.RawMessage) string {
	b := bytes.TrimSpace(input)
	if len(b) == 0 {
		return "{}"
	}
	if b[0] == '"' {
		var s string
		if json.Unmarshal(b, &s) == nil {
			return s
		}
	}
	return string(b)
}

// RawInputKey is the key under which ObjectInput keeps an input that is
// not a JSON object.
const RawInputKey = "_raw_input"

// ObjectInput is tool input for APIs that require an object (Anthropic):
// an object passes through, empty becomes {}, and anything else (broken
// arguments kept as a string by ToolInput, or a non-object value) is kept
// as {"_raw_input": VALUE} so that the model still sees what it sent.
func ObjectInput(input json.RawMessage) json.RawMessage {
	b := bytes.TrimSpace(input)
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	if b[0] == '{' && json.Valid(b) {
		return json.RawMessage(b)
	}
	if !json.Valid(b) {
		q, _ := json.Marshal(string(b))
		b = q
	}
	out, _ := json.Marshal(map[string]json.RawMessage{RawInputKey: b})
	return out
}

// ShortID maps a tool call id to one an API accepts: id itself when ok
// says so, else prefix + a hash of id. The mapping is deterministic, so a
// call and its result still match, and a hash keeps distinct ids distinct.
func ShortID(id, prefix string, ok func(string) bool) string {
	if ok(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:])[:32]
}
