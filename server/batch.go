package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
	"github.com/reinhq/rein/sessions"
)

// Batch limits (docs/api.md).
const (
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 1 << 20
	// MaxBatchEvents bounds the events of one POST .../events.
	MaxBatchEvents = 100
)

// maxTimeoutSeconds is the largest timeout_s that fits a time.Duration.
const maxTimeoutSeconds = float64(math.MaxInt64/int64(time.Second)) - 1

// command is one validated event of a batch, ready to apply.
type command struct {
	typ        rein.EventType
	message    sessions.MessageRequest
	interrupt  sessions.InterruptRequest
	supplement sessions.SupplementRequest
	confirm    sessions.ConfirmRequest
	system     string
}

// decodeBatch parses and validates a whole POST .../events body. Any
// problem is an invalid_argument *rein.Error whose Param names the field
// exactly (events[1].payload.run_id), and nothing of the batch is applied.
//
// Unknown keys are ignored, at every level: a newer client may send fields
// this server does not know yet (decision 0050).
func decodeBatch(body []byte) ([]command, error) {
	if !jsonx.Valid(body) {
		return nil, malformed(body)
	}
	var top map[string]json.RawMessage
	if kind(body) != '{' || json.Unmarshal(body, &top) != nil {
		return nil, rein.InvalidArgument("", "the request body must be a JSON object {\"events\": [...]}")
	}
	raw, ok := top["events"]
	if !ok || kind(raw) == 'n' {
		return nil, rein.InvalidArgument("events", "events is required: an array of 1 to %d events", MaxBatchEvents)
	}
	if kind(raw) != '[' {
		return nil, rein.InvalidArgument("events", "events must be an array")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, rein.InvalidArgument("events", "events must be an array")
	}
	if len(items) == 0 {
		return nil, rein.InvalidArgument("events", "events must hold at least one event")
	}
	if len(items) > MaxBatchEvents {
		return nil, rein.InvalidArgument("events", "a batch holds at most %d events, got %d", MaxBatchEvents, len(items))
	}
	cmds := make([]command, len(items))
	for i, item := range items {
		c, err := decodeEvent(fmt.Sprintf("events[%d]", i), item)
		if err != nil {
			return nil, err
		}
		cmds[i] = c
	}
	return cmds, nil
}

// malformed describes a body that is not JSON, with the offset of the
// problem when the decoder knows it.
func malformed(body []byte) error {
	var v any
	err := json.Unmarshal(body, &v)
	if se, ok := err.(*json.SyntaxError); ok {
		return rein.InvalidArgument("", "the request body is not valid JSON (at byte %d: %s)", se.Offset, se.Error())
	}
	return rein.InvalidArgument("", "the request body is not valid JSON")
}

// kind returns the first byte of a JSON value, which says its type:
// '{' object, '[' array, '"' string, 't'/'f' bool, 'n' null, else a number.
// It returns 0 for an empty value.
func kind(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

func decodeEvent(path string, item json.RawMessage) (command, error) {
	var ev map[string]json.RawMessage
	if kind(item) != '{' || json.Unmarshal(item, &ev) != nil {
		return command{}, rein.InvalidArgument(path, "an event must be an object {\"type\": ..., \"payload\": {...}}")
	}
	var typ string
	if raw, ok := ev["type"]; !ok || kind(raw) != '"' || json.Unmarshal(raw, &typ) != nil || typ == "" {
		return command{}, rein.InvalidArgument(path+".type", "type is required: a string naming the event")
	}
	p := payload{path: path + ".payload", fields: map[string]json.RawMessage{}}
	if raw, ok := ev["payload"]; ok && kind(raw) != 'n' {
		if kind(raw) != '{' || json.Unmarshal(raw, &p.fields) != nil {
			return command{}, rein.InvalidArgument(p.path, "payload must be an object")
		}
	}
	c := command{typ: rein.EventType(typ)}
	var err error
	switch c.typ {
	case rein.EventUserMessage:
		c.message, err = p.message()
	case rein.EventUserInterrupt:
		c.interrupt, err = p.interrupt()
	case rein.EventUserSupplement:
		c.supplement, err = p.supplement()
	case rein.EventUserToolConfirmation:
		c.confirm, err = p.confirmation()
	case rein.EventSystemMessage:
		var text *string
		if text, err = p.str("text", true, false); err == nil {
			c.system = *text
		}
	default:
		err = rein.InvalidArgument(path+".type", "unknown event type %q: a client may send user.message, user.interrupt, user.supplement, user.tool_confirmation or system.message", typ)
	}
	return c, err
}

// payload is one event's payload fields, with the path errors name.
type payload struct {
	path   string
	fields map[string]json.RawMessage
}

// param names a field of the payload for an error.
func (p payload) param(key string) string {
	if p.path == "" {
		return key
	}
	return p.path + "." + key
}

// present reports whether key is given with a non-null value.
func (p payload) present(key string) (json.RawMessage, bool) {
	raw, ok := p.fields[key]
	if !ok || kind(raw) == 'n' {
		return nil, false
	}
	return raw, true
}

// str reads a string field. Absent or null gives nil unless required; an
// empty string is refused when nonEmpty.
func (p payload) str(key string, required, nonEmpty bool) (*string, error) {
	raw, ok := p.present(key)
	if !ok {
		if required {
			if nonEmpty {
				return nil, rein.InvalidArgument(p.param(key), "%s is required: a non-empty string", key)
			}
			return nil, rein.InvalidArgument(p.param(key), "%s is required: a string", key)
		}
		return nil, nil
	}
	var s string
	if kind(raw) != '"' || json.Unmarshal(raw, &s) != nil {
		return nil, rein.InvalidArgument(p.param(key), "%s must be a string", key)
	}
	if nonEmpty && s == "" {
		return nil, rein.InvalidArgument(p.param(key), "%s must be a non-empty string", key)
	}
	return &s, nil
}

// enum reads an optional string field that must be one of values.
func (p payload) enum(key string, values ...string) (string, error) {
	s, err := p.str(key, false, false)
	if err != nil || s == nil {
		return "", err
	}
	for _, v := range values {
		if *s == v {
			return v, nil
		}
	}
	return "", rein.InvalidArgument(p.param(key), "%s must be one of %q, got %q", key, values, *s)
}

func (p payload) message() (sessions.MessageRequest, error) {
	var req sessions.MessageRequest
	text, err := p.str("text", true, true)
	if err != nil {
		return req, err
	}
	req.Text = *text
	wb, err := p.enum("when_busy", string(rein.WhenBusyReject), string(rein.WhenBusyEnqueue), string(rein.WhenBusyInterrupt), string(rein.WhenBusyRollback))
	if err != nil {
		return req, err
	}
	req.WhenBusy = rein.WhenBusy(wb)
	// An empty client_id means none, as in Go's zero value: only a real
	// key makes a call idempotent.
	if cid, err := p.str("client_id", false, false); err != nil {
		return req, err
	} else if cid != nil {
		req.ClientID = *cid
	}
	if raw, ok := p.present("timeout_s"); ok {
		var secs float64
		if c := kind(raw); !(c == '-' || c >= '0' && c <= '9') || json.Unmarshal(raw, &secs) != nil {
			return req, rein.InvalidArgument(p.param("timeout_s"), "timeout_s must be a number of seconds > 0")
		}
		if !(secs > 0) || secs > maxTimeoutSeconds {
			return req, rein.InvalidArgument(p.param("timeout_s"), "timeout_s must be a number of seconds > 0 (and at most %.0f)", maxTimeoutSeconds)
		}
		req.Timeout = time.Duration(secs * float64(time.Second))
		if req.Timeout <= 0 {
			req.Timeout = 1 // a positive timeout below a nanosecond still times out
		}
	}
	if req.Budget, _, err = p.budget("budget"); err != nil {
		return req, err
	}
	return req, nil
}

// budget reads an optional budget object {"tokens"?: int > 0, "cost_usd"?:
// number > 0} (docs/api.md "Budgets and usage"). given reports that the key
// was there: with null, b is nil (no budget, or PATCH's "clear it").
func (p payload) budget(key string) (b *rein.Budget, given bool, err error) {
	raw, ok := p.fields[key]
	if !ok {
		return nil, false, nil
	}
	if kind(raw) == 'n' {
		return nil, true, nil
	}
	var fields map[string]json.RawMessage
	if kind(raw) != '{' || json.Unmarshal(raw, &fields) != nil {
		return nil, true, rein.InvalidArgument(p.param(key), "%s must be an object {\"tokens\"?: int > 0, \"cost_usd\"?: number > 0}, or null", key)
	}
	b = &rein.Budget{}
	if v, ok := fields["tokens"]; ok && kind(v) != 'n' {
		var n float64
		if c := kind(v); !(c == '-' || c >= '0' && c <= '9') || json.Unmarshal(v, &n) != nil || n != math.Trunc(n) || n <= 0 || n > math.MaxInt64/2 {
			return nil, true, rein.InvalidArgument(p.param(key+".tokens"), "%s.tokens must be a whole number > 0", key)
		}
		b.Tokens = int64(n)
	}
	if v, ok := fields["cost_usd"]; ok && kind(v) != 'n' {
		var f float64
		if c := kind(v); !(c == '-' || c >= '0' && c <= '9') || json.Unmarshal(v, &f) != nil || !(f > 0) || math.IsInf(f, 0) {
			return nil, true, rein.InvalidArgument(p.param(key+".cost_usd"), "%s.cost_usd must be a number > 0 (US dollars)", key)
		}
		b.CostUSD = f
	}
	if b.IsZero() {
		return nil, true, rein.InvalidArgument(p.param(key), "%s must set tokens, cost_usd or both (null: no budget)", key)
	}
	return b, true, nil
}

func (p payload) interrupt() (sessions.InterruptRequest, error) {
	var req sessions.InterruptRequest
	// run_id absent stops the session's current run; present, it must
	// name a run: "", null or a non-string would silently turn an exact
	// stop into a session-wide one, so they are refused (docs/api.md).
	if raw, ok := p.fields["run_id"]; ok {
		var id string
		if kind(raw) != '"' || json.Unmarshal(raw, &id) != nil || id == "" {
			return req, rein.InvalidArgument(p.param("run_id"), "run_id, when present, must be a non-empty string (omit it to stop the session's current run)")
		}
		req.RunID = &id
	}
	// client_id names the run by its message's client id — also one that
	// has not arrived yet (docs/api.md). Present, it must be a real key.
	if raw, ok := p.fields["client_id"]; ok {
		var cid string
		if kind(raw) != '"' || json.Unmarshal(raw, &cid) != nil || cid == "" {
			return req, rein.InvalidArgument(p.param("client_id"), "client_id, when present, must be a non-empty string")
		}
		if req.RunID != nil {
			return req, rein.InvalidArgument(p.param("client_id"), "give run_id or client_id, not both")
		}
		req.ClientID = cid
	}
	mode, err := p.enum("mode", string(rein.StopCancel), string(rein.StopInterrupt))
	if err != nil {
		return req, err
	}
	req.Mode = rein.StopMode(mode)
	if req.Mode == "" {
		req.Mode = rein.StopCancel
	}
	if req.Message, err = p.str("message", false, false); err != nil {
		return req, err
	}
	return req, nil
}

func (p payload) supplement() (sessions.SupplementRequest, error) {
	var req sessions.SupplementRequest
	text, err := p.str("text", true, true)
	if err != nil {
		return req, err
	}
	req.Text = *text
	if id, err := p.str("id", false, false); err != nil {
		return req, err
	} else if id != nil {
		req.ID = *id
	}
	return req, nil
}

func (p payload) confirmation() (sessions.ConfirmRequest, error) {
	var req sessions.ConfirmRequest
	id, err := p.str("tool_use_id", true, true)
	if err != nil {
		return req, err
	}
	req.ToolUseID = *id
	raw, ok := p.present("allow")
	if !ok {
		return req, rein.InvalidArgument(p.param("allow"), "allow is required: true or false")
	}
	if c := kind(raw); (c != 't' && c != 'f') || json.Unmarshal(raw, &req.Allow) != nil {
		return req, rein.InvalidArgument(p.param("allow"), "allow must be a boolean")
	}
	deny, err := p.str("deny_message", false, false)
	if err != nil {
		return req, err
	}
	// denyMessage is an accepted alias (docs/api.md). Given both, they must
	// agree: picking one silently would hide a client bug.
	alias, err := p.str("denyMessage", false, false)
	if err != nil {
		return req, err
	}
	switch {
	case deny != nil && alias != nil && *deny != *alias:
		return req, rein.InvalidArgument(p.param("denyMessage"), "deny_message and its alias denyMessage disagree; send one of them")
	case deny == nil:
		deny = alias
	}
	req.DenyMessage = deny
	return req, nil
}
