package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// maxBatch bounds the events of one events.send, as the native API does.
const maxBatch = 100

// The event types a client sends (user.supplement is Rein's extension).
const (
	typeUserMessage      = "user.message"
	typeUserInterrupt    = "user.interrupt"
	typeToolConfirmation = "user.tool_confirmation"
	typeSystemMessage    = "system.message"
	typeUserSupplement   = "user.supplement"
)

// command is one checked event of a batch, ready to apply.
type command struct {
	typ        string
	message    sessions.MessageRequest
	interrupt  sessions.InterruptRequest
	supplement sessions.SupplementRequest
	// confirm is a tool confirmation; its ToolUseID is the reference the
	// client sent (the agent.tool_use event's id), resolved when applied.
	confirm sessions.ConfirmRequest
	system  string
	// content is the text as sent, for the answer.
	content string
}

// fields is a JSON object's keys, with the path errors name.
type fields struct {
	path string
	m    map[string]json.RawMessage
}

func fieldsOf(path string, m map[string]json.RawMessage) fields { return fields{path: path, m: m} }

func (f fields) param(key string) string {
	if f.path == "" {
		return key
	}
	return f.path + "." + key
}

// present returns key's value unless it is absent or null.
func (f fields) present(key string) (json.RawMessage, bool) {
	raw, ok := f.m[key]
	if !ok || kind(raw) == 'n' {
		return nil, false
	}
	return raw, true
}

// str reads a string field (nil when absent, an error when required).
func (f fields) str(key string, required bool) (*string, error) {
	raw, ok := f.present(key)
	if !ok {
		if required {
			return nil, badRequest(f.param(key), "%s is required: a string", key)
		}
		return nil, nil
	}
	var s string
	if kind(raw) != '"' || json.Unmarshal(raw, &s) != nil {
		return nil, badRequest(f.param(key), "%s must be a string", key)
	}
	return &s, nil
}

// agentName reads sessions.create's agent: a name, or {"type": "agent",
// "id": name, "version"?: n}.
func (f fields) agentName() (string, error) {
	raw, ok := f.present("agent")
	if !ok {
		return "", badRequest(f.param("agent"), "agent is required: the name of a configured agent, or {\"type\": \"agent\", \"id\": NAME}")
	}
	switch kind(raw) {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			return s, nil
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil {
			id, err := fieldsOf(f.param("agent"), obj).str("id", true)
			if err != nil {
				return "", err
			}
			if *id != "" {
				return *id, nil
			}
		}
	}
	return "", badRequest(f.param("agent"), "agent must be a configured agent's name, or {\"type\": \"agent\", \"id\": NAME}")
}

// metadata reads a map of strings (nil when absent).
func (f fields) metadata() (map[string]string, error) {
	raw, ok := f.present("metadata")
	if !ok {
		return nil, nil
	}
	var md map[string]string
	if kind(raw) != '{' || json.Unmarshal(raw, &md) != nil {
		return nil, badRequest(f.param("metadata"), "metadata must be an object of string values")
	}
	if _, ok := md[metaKey]; ok {
		return nil, badRequest(f.param("metadata")+"."+metaKey, "the metadata key %s is the server's own", metaKey)
	}
	return md, nil
}

// text reads content blocks — [{"type": "text", "text": ...}, ...] — and
// joins their text with newlines. Only text blocks are accepted: Rein's
// input is text.
func (f fields) text(key string, required bool) (string, error) {
	raw, ok := f.present(key)
	if !ok {
		if required {
			return "", badRequest(f.param(key), "%s is required: an array of text blocks", key)
		}
		return "", nil
	}
	var blocks []map[string]json.RawMessage
	if kind(raw) != '[' || json.Unmarshal(raw, &blocks) != nil {
		return "", badRequest(f.param(key), "%s must be an array of content blocks", key)
	}
	parts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		bf := fieldsOf(fmt.Sprintf("%s[%d]", f.param(key), i), b)
		typ, err := bf.str("type", true)
		if err != nil {
			return "", err
		}
		if *typ != "text" {
			return "", badRequest(bf.param("type"), "only text blocks are supported, got %q", *typ)
		}
		t, err := bf.str("text", true)
		if err != nil {
			return "", err
		}
		parts = append(parts, *t)
	}
	joined := strings.Join(parts, "\n")
	if required && joined == "" {
		return "", badRequest(f.param(key), "%s must hold some text", key)
	}
	return joined, nil
}

// enum reads an optional string that must be one of values.
func (f fields) enum(key string, values ...string) (string, error) {
	s, err := f.str(key, false)
	if err != nil || s == nil {
		return "", err
	}
	for _, v := range values {
		if *s == v {
			return v, nil
		}
	}
	return "", badRequest(f.param(key), "%s must be one of %s, got %q", key, strings.Join(values, ", "), *s)
}

// kind is the first byte of a JSON value: its type.
func kind(v []byte) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// decodeEvents checks a whole batch (events.send's events, or
// sessions.create's initial_events): any problem is a 400 naming the
// field, and nothing of the batch is applied.
func decodeEvents(path string, raw json.RawMessage, allowEmpty bool) ([]command, error) {
	var items []json.RawMessage
	if kind(raw) != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, badRequest(path, "%s must be an array of events", path)
	}
	if len(items) == 0 && !allowEmpty {
		return nil, badRequest(path, "%s must hold at least one event", path)
	}
	if len(items) > maxBatch {
		return nil, badRequest(path, "a batch holds at most %d events, got %d", maxBatch, len(items))
	}
	cmds := make([]command, len(items))
	for i, item := range items {
		var m map[string]json.RawMessage
		p := fmt.Sprintf("%s[%d]", path, i)
		if kind(item) != '{' || json.Unmarshal(item, &m) != nil {
			return nil, badRequest(p, "an event must be an object with a type")
		}
		c, err := decodeEvent(fieldsOf(p, m))
		if err != nil {
			return nil, err
		}
		cmds[i] = c
	}
	return cmds, nil
}

func decodeEvent(f fields) (command, error) {
	typ, err := f.str("type", true)
	if err != nil {
		return command{}, err
	}
	c := command{typ: *typ}
	if raw, ok := f.present("session_thread_id"); ok && kind(raw) == '"' && string(raw) != `""` {
		return c, badRequest(f.param("session_thread_id"), "session threads are not supported by this server")
	}
	switch c.typ {
	case typeUserMessage:
		if c.content, err = f.text("content", true); err != nil {
			return c, err
		}
		c.message.Text = c.content
		wb, err := f.enum("when_busy", string(rein.WhenBusyReject), string(rein.WhenBusyEnqueue), string(rein.WhenBusyInterrupt), string(rein.WhenBusyRollback))
		if err != nil {
			return c, err
		}
		// The protocol queues a message sent to a busy session.
		c.message.WhenBusy = rein.WhenBusyEnqueue
		if wb != "" {
			c.message.WhenBusy = rein.WhenBusy(wb)
		}
		if cid, err := f.str("client_id", false); err != nil {
			return c, err
		} else if cid != nil {
			c.message.ClientID = *cid
		}
	case typeUserInterrupt:
		// run_id present must name a run: "" or a non-string would
		// silently widen an exact stop to the session's current run.
		if raw, ok := f.m["run_id"]; ok {
			var id string
			if kind(raw) != '"' || json.Unmarshal(raw, &id) != nil || id == "" {
				return c, badRequest(f.param("run_id"), "run_id, when present, must be a non-empty string (omit it to stop the session's current run)")
			}
			c.interrupt.RunID = &id
		}
		// client_id names the run of the user.message sent with it — or to
		// be sent with it: a stop that overtakes its message is
		// remembered, and the message's run never starts.
		if raw, ok := f.m["client_id"]; ok {
			var cid string
			if kind(raw) != '"' || json.Unmarshal(raw, &cid) != nil || cid == "" {
				return c, badRequest(f.param("client_id"), "client_id, when present, must be a non-empty string")
			}
			if c.interrupt.RunID != nil {
				return c, badRequest(f.param("client_id"), "name the run with run_id or client_id, not both")
			}
			c.interrupt.ClientID = cid
		}
		mode, err := f.enum("mode", string(rein.StopInterrupt), string(rein.StopCancel))
		if err != nil {
			return c, err
		}
		// The protocol's interrupt lets the agent end its turn: Rein's
		// cooperative interrupt, unless the extension asks to cancel.
		c.interrupt.Mode = rein.StopInterrupt
		if mode != "" {
			c.interrupt.Mode = rein.StopMode(mode)
		}
		if c.interrupt.Message, err = f.str("message", false); err != nil {
			return c, err
		}
	case typeToolConfirmation:
		ref, err := f.str("tool_use_id", true)
		if err != nil {
			return c, err
		}
		if *ref == "" {
			return c, badRequest(f.param("tool_use_id"), "tool_use_id must be the id of the agent.tool_use event that asked")
		}
		c.confirm.ToolUseID = *ref
		res, err := f.enum("result", "allow", "deny")
		if err != nil {
			return c, err
		}
		if res == "" {
			return c, badRequest(f.param("result"), "result is required: allow or deny")
		}
		c.confirm.Allow = res == "allow"
		if c.confirm.DenyMessage, err = f.str("deny_message", false); err != nil {
			return c, err
		}
		if c.confirm.Allow && c.confirm.DenyMessage != nil {
			return c, badRequest(f.param("deny_message"), "deny_message goes only with result deny")
		}
	case typeSystemMessage:
		if c.content, err = f.text("content", true); err != nil {
			return c, err
		}
		c.system = c.content
	case typeUserSupplement:
		// content blocks as a user.message has them, or Rein's text.
		if _, ok := f.present("content"); ok {
			c.content, err = f.text("content", true)
		} else {
			var t *string
			if t, err = f.str("text", true); err == nil {
				c.content = *t
				if c.content == "" {
					err = badRequest(f.param("text"), "text must be a non-empty string")
				}
			}
		}
		if err != nil {
			return c, err
		}
		c.supplement.Text = c.content
		if id, err := f.str("id", false); err != nil {
			return c, err
		} else if id != nil {
			c.supplement.ID = *id
		}
	default:
		return c, badRequest(f.param("type"), "event type %q is not supported by this server: send user.message, user.interrupt, user.tool_confirmation, system.message or user.supplement", *typ)
	}
	return c, nil
}

// sentJSON is one event of events.send's answer: the event as logged (its
// id is the log's), with Rein's result fields beside the protocol's.
type sentJSON struct {
	ID          string      `json:"id"`
	Type        string      `json:"type"`
	ProcessedAt *string     `json:"processed_at"`
	Content     []textBlock `json:"content,omitempty"`
	// user.message
	RunID  *string `json:"run_id,omitempty"`
	Status string  `json:"status,omitempty"`
	// user.interrupt
	Accepted *bool `json:"accepted,omitempty"`
	// user.tool_confirmation
	ToolUseID   string  `json:"tool_use_id,omitempty"`
	Result      string  `json:"result,omitempty"`
	DenyMessage *string `json:"deny_message,omitempty"`
	// user.supplement
	SupplementID string `json:"supplement_id,omitempty"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func textBlocks(s string) []textBlock { return []textBlock{{Type: "text", Text: s}} }

func (h *Handler) sendEvents(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	body, err := readJSONObject(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	raw, ok := body["events"]
	if !ok || kind(raw) == 'n' {
		h.writeError(w, r, badRequest("events", "events is required: an array of 1 to %d events", maxBatch))
		return
	}
	cmds, err := decodeEvents("events", raw, false)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ctx, cancel := ctxOK(r)
	defer cancel()
	sent, err := h.apply(ctx, key, cmds)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": sent})
}

// apply performs checked events in order through the sessions service, as
// the native API's POST .../events does; the first failure stops the
// batch. The answer's ids are those of the events the calls logged.
func (h *Handler) apply(ctx context.Context, key rein.SessionKey, cmds []command) ([]sentJSON, error) {
	// One read of the record (not GetSession's live state): it is on every
	// message's path.
	sess, err := h.svc.Session(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		if (c.typ == typeUserMessage || c.typ == typeUserSupplement) && archived(sess) {
			return nil, refuseArchived(key.ID)
		}
	}
	// Where the batch's events will be: after the log's end as it is now
	// (a message's answer names its event without a read of the log).
	var from int64
	readBack := slices.ContainsFunc(cmds, func(c command) bool { return c.typ != typeUserMessage })
	if readBack {
		if _, from, err = h.svc.ReadEvents(ctx, key, math.MaxInt64, 1); err != nil {
			return nil, err
		}
	}
	out := make([]sentJSON, 0, len(cmds))
	// logged[i] says whether cmds[i] appended an event (a repeat does not).
	logged := make([]bool, 0, len(cmds))
	for i, c := range cmds {
		s := sentJSON{Type: c.typ}
		appended := true
		switch c.typ {
		case typeUserMessage:
			res, err := h.svc.SendMessage(ctx, key, c.message)
			if err != nil {
				return nil, inBatch(err, i)
			}
			s.Content, s.RunID, s.Status, s.ID = textBlocks(c.content), &res.RunID, string(res.Status), res.MessageID
			appended = !res.Repeat
		case typeUserInterrupt:
			res, err := h.svc.Interrupt(ctx, key, c.interrupt)
			if err != nil {
				return nil, inBatch(err, i)
			}
			s.Accepted = &res.Accepted
			if res.RunID != "" {
				s.RunID = &res.RunID
			}
		case typeToolConfirmation:
			req := c.confirm
			if req.ToolUseID, err = h.toolUseID(ctx, key, from, req.ToolUseID); err != nil {
				return nil, inBatch(err, i)
			}
			if _, err := h.svc.ConfirmTool(ctx, key, req); err != nil {
				return nil, inBatch(err, i)
			}
			s.ToolUseID, s.DenyMessage, s.Result = c.confirm.ToolUseID, req.DenyMessage, "deny"
			if req.Allow {
				s.Result = "allow"
			}
		case typeSystemMessage:
			if err := h.svc.SetSystem(ctx, key, c.system); err != nil {
				return nil, inBatch(err, i)
			}
			s.Content = textBlocks(c.content)
		case typeUserSupplement:
			res, err := h.svc.Supplement(ctx, key, c.supplement)
			if err != nil {
				return nil, inBatch(err, i)
			}
			s.Content, s.SupplementID, s.Status, appended = textBlocks(c.content), res.ID, string(res.Status), res.Created
		}
		out = append(out, s)
		logged = append(logged, appended)
	}
	if readBack {
		h.fillIDs(ctx, key, from, cmds, out, logged)
	}
	return out, nil
}

// inBatch makes an error about a field name it inside the batch.
func inBatch(err error, i int) error {
	re, ok := err.(*rein.Error)
	if !ok || re.Code != rein.CodeInvalidArgument {
		return err
	}
	out := *re
	if out.Param == "" {
		out.Param = fmt.Sprintf("events[%d]", i)
	} else {
		out.Param = fmt.Sprintf("events[%d].%s", i, re.Param)
	}
	return &out
}

// logType is the type of the event a command logs.
func logType(c command) rein.EventType {
	switch c.typ {
	case typeUserMessage:
		return rein.EventUserMessage
	case typeUserInterrupt:
		return rein.EventUserInterrupt
	case typeToolConfirmation:
		return rein.EventUserToolConfirmation
	case typeSystemMessage:
		return rein.EventSystemMessage
	}
	return rein.EventUserSupplement
}

// fillIDs gives each answered event the id and time of the event it
// logged: the batch's events are in the log after from, in order, among
// whatever the session's runs logged meanwhile.
func (h *Handler) fillIDs(ctx context.Context, key rein.SessionKey, from int64, cmds []command, out []sentJSON, logged []bool) {
	evs, _, err := h.svc.ReadEvents(ctx, key, from, maxPageLimit)
	if err != nil {
		return
	}
	j := 0
	for i, c := range cmds {
		if !logged[i] {
			continue
		}
		want := logType(c)
		for ; j < len(evs); j++ {
			e := evs[j]
			if e.Type != want || (out[i].ID != "" && e.ID != out[i].ID) {
				continue
			}
			out[i].ID = e.ID
			at := rein.FormatTime(e.CreatedAt)
			out[i].ProcessedAt = &at
			j++
			break
		}
	}
}

// toolUseID resolves a confirmation's reference to Rein's tool call id:
// the protocol names the agent.tool_use event that asked (its id is the
// log's event id); Rein's own call id is accepted too. The event is found
// by reading the log back from its end: a call waiting for an answer was
// logged recently.
func (h *Handler) toolUseID(ctx context.Context, key rein.SessionKey, last int64, ref string) (string, error) {
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return "", err
	}
	for _, c := range info.PendingConfirmations {
		if c.ToolUseID == ref {
			return ref, nil
		}
	}
	e, err := findBack(ctx, h.svc, key, info.LastSeq, func(e rein.Event) bool {
		return e.ID == ref && e.Type == rein.EventToolUse
	})
	if err != nil {
		return "", err
	}
	if e == nil {
		return "", &rein.Error{Code: rein.CodeNotFound, Param: "tool_use_id", Message: "no agent.tool_use event " + ref + " in this session"}
	}
	var p rein.ToolUsePayload
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return "", err
	}
	return p.ToolUseID, nil
}

// backPage is how many events one step of a backward read takes.
const backPage = 256

// findBack returns the latest event at or before seq last that match
// accepts, reading the log backwards a page at a time (nil: none).
func findBack(ctx context.Context, svc *sessions.Service, key rein.SessionKey, last int64, match func(rein.Event) bool) (*rein.Event, error) {
	for hi := last; hi > 0; hi -= backPage {
		lo := max(0, hi-backPage)
		evs, _, err := svc.ReadEvents(ctx, key, lo, int(hi-lo))
		if err != nil {
			return nil, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Seq <= hi && match(evs[i]) {
				return &evs[i], nil
			}
		}
	}
	return nil, nil
}
