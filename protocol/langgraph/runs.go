package langgraph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// runStatus is LangGraph's status of a run: a run waiting for a person is
// interrupted (never running, so the SDK's stream ends at the interrupt),
// and so is a cancelled one, as LangGraph reports a cancel.
func runStatus(rec *store.RunRecord, parked bool) string {
	switch rec.Status {
	case rein.StatusCreated, rein.StatusQueued:
		return "pending"
	case rein.StatusRunning:
		if parked {
			return "interrupted"
		}
		return "running"
	case rein.StatusCompleted:
		if rec.Reason == rein.ReasonInterrupted {
			return "interrupted"
		}
		return "success"
	case rein.StatusCancelled:
		if rec.Reason == rein.ReasonTimeout {
			return "timeout"
		}
		return "interrupted"
	default:
		return "error"
	}
}

// runView is a run as LangGraph's Run.
func runView(rec *store.RunRecord, agent string, parked bool, strategy any) map[string]any {
	updated := rec.CreatedAt
	if !rec.StartedAt.IsZero() {
		updated = rec.StartedAt
	}
	if !rec.EndedAt.IsZero() {
		updated = rec.EndedAt
	}
	v := map[string]any{
		"run_id": rec.ID, "thread_id": rec.SessionID, "assistant_id": agentOf(agent),
		"created_at": timeString(rec.CreatedAt), "updated_at": timeString(updated),
		"status": runStatus(rec, parked), "metadata": map[string]any{}, "multitask_strategy": strategy,
		"kwargs": map[string]any{"input": map[string]any{"messages": []any{map[string]any{"type": "human", "content": rec.Input}}}},
	}
	if rec.Status == rein.StatusFailed && rec.Error != "" {
		v["error"] = rec.Error
	}
	return v
}

// parkedRuns are the runs with calls waiting for a person.
func parkedRuns(info *sessions.SessionInfo) map[string]bool {
	out := map[string]bool{}
	for _, c := range info.PendingConfirmations {
		out[c.RunID] = true
	}
	return out
}

// runRequest is the body of POST /threads/{id}/runs[/stream|/wait], as
// far as Rein reads it.
type runRequest struct {
	AssistantID       *string         `json:"assistant_id"`
	Input             json.RawMessage `json:"input"`
	Command           *command        `json:"command"`
	StreamMode        json.RawMessage `json:"stream_mode"`
	MultitaskStrategy *string         `json:"multitask_strategy"`
	OnDisconnect      *string         `json:"on_disconnect"`
	IfNotExists       *string         `json:"if_not_exists"`
	AfterSeconds      *float64        `json:"after_seconds"`
	InterruptBefore   json.RawMessage `json:"interrupt_before"`
	InterruptAfter    json.RawMessage `json:"interrupt_after"`
	Webhook           *string         `json:"webhook"`
	Checkpoint        *struct {
		CheckpointID *string `json:"checkpoint_id"`
	} `json:"checkpoint"`
	CheckpointID *string `json:"checkpoint_id"`
}

type command struct {
	Resume json.RawMessage `json:"resume"`
	Update json.RawMessage `json:"update"`
	Goto   json.RawMessage `json:"goto"`
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// The stream modes: what Rein renders, and what it accepts and has
// nothing to render for (a ReAct agent has no custom events, subgraph
// tasks or separate checkpoint stream).
var (
	renderedModes = []string{"values", "updates", "messages-tuple"}
	silentModes   = []string{"custom", "tools", "checkpoints", "tasks"}
)

// streamModes reads stream_mode: a string or a list (default values).
func streamModes(raw json.RawMessage, param string) ([]string, error) {
	var modes []string
	if present(raw) {
		var one string
		if json.Unmarshal(raw, &one) == nil {
			modes = []string{one}
		} else if json.Unmarshal(raw, &modes) != nil {
			return nil, rein.InvalidArgument(param, "stream_mode must be a string or a list of strings")
		}
	}
	if len(modes) == 0 {
		modes = []string{"values"}
	}
	for _, m := range modes {
		if !contains(renderedModes, m) && !contains(silentModes, m) {
			return nil, rein.InvalidArgument(param, "stream_mode %q is not supported: Rein streams values, updates and messages-tuple", m)
		}
	}
	return modes, nil
}

// admitted is a run request turned into Rein's operation: the run it
// started or resumed, and where its stream starts.
type admitted struct {
	key      rein.SessionKey
	run      string
	agent    string
	from     int64
	modes    []string
	strategy any
	resumed  bool
}

// admit validates a run request and applies it: a user.message, or the
// confirmation answers of a command's resume. Nothing is applied from a
// request that does not validate.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) (*admitted, error) {
	var req runRequest
	if err := decode(w, r, &req); err != nil {
		return nil, err
	}
	modes, err := streamModes(req.StreamMode, "stream_mode")
	if err != nil {
		return nil, err
	}
	if req.AssistantID == nil || *req.AssistantID == "" {
		return nil, rein.InvalidArgument("assistant_id", "assistant_id is required: the name of a configured agent")
	}
	strategy := rein.WhenBusyEnqueue
	if req.MultitaskStrategy != nil {
		strategy = rein.WhenBusy(*req.MultitaskStrategy)
		if !strategy.Valid() || strategy == "" {
			return nil, rein.InvalidArgument("multitask_strategy", "multitask_strategy must be reject, enqueue, interrupt or rollback")
		}
	}
	if req.OnDisconnect != nil && *req.OnDisconnect != "continue" && *req.OnDisconnect != "cancel" {
		return nil, rein.InvalidArgument("on_disconnect", "on_disconnect must be continue or cancel (Rein always continues)")
	}
	ifNotExists := "reject"
	if req.IfNotExists != nil {
		ifNotExists = *req.IfNotExists
		if ifNotExists != "reject" && ifNotExists != "create" {
			return nil, rein.InvalidArgument("if_not_exists", "if_not_exists must be reject or create")
		}
	}
	switch {
	case req.AfterSeconds != nil && *req.AfterSeconds > 0:
		return nil, rein.InvalidArgument("after_seconds", "a delayed run is not supported: schedule it (POST /api/sessions/{id}/schedules)")
	case present(req.InterruptBefore) && string(req.InterruptBefore) != "[]":
		return nil, rein.InvalidArgument("interrupt_before", "interrupt_before is not supported: a Rein agent asks for a person before the tools its configuration names (confirm)")
	case present(req.InterruptAfter) && string(req.InterruptAfter) != "[]":
		return nil, rein.InvalidArgument("interrupt_after", "interrupt_after is not supported")
	case req.Webhook != nil && *req.Webhook != "":
		return nil, rein.InvalidArgument("webhook", "a run's webhook is not supported: configure webhooks for the server")
	}
	hasInput := present(req.Input)
	hasResume := req.Command != nil && present(req.Command.Resume)
	if req.Command != nil && (present(req.Command.Update) || present(req.Command.Goto)) {
		return nil, rein.InvalidArgument("command", "only command.resume is supported (update and goto change a graph Rein does not have)")
	}
	if hasInput == hasResume {
		return nil, rein.InvalidArgument("input", "give input (a message) or command.resume (answers to the thread's interrupts), one of them")
	}
	text := ""
	if hasInput {
		if text, err = inputText(req.Input); err != nil {
			return nil, err
		}
	}
	ctx := r.Context()
	key := thread(r)
	agent := *req.AssistantID
	if !h.knownAssistant(agent) {
		return nil, assistantNotFound(agent)
	}
	info, err := h.svc.GetSession(ctx, key)
	if errors.Is(err, rein.ErrNotFound) {
		if ifNotExists != "create" || hasResume {
			return nil, threadNotFound(key.ID)
		}
		if !sessions.ValidSessionID(key.ID) {
			return nil, rein.InvalidArgument("thread_id", "thread_id must be 1 to %d characters of A-Z a-z 0-9 . _ : -", sessions.MaxSessionIDLen)
		}
		if _, _, err := h.svc.CreateOrGetSession(ctx, key.Owner, sessions.CreateSessionRequest{ID: key.ID, Agent: agent}); err != nil {
			if errors.Is(err, rein.ErrConflict) {
				return nil, threadNotFound(key.ID)
			}
			return nil, err
		}
		info, err = h.svc.GetSession(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	if agentOf(info.Agent) != agent {
		return nil, rein.Errorf(rein.CodeConflict, "Thread %s runs assistant %s, not %s: start a new thread for another assistant", key.ID, agentOf(info.Agent), agent)
	}
	if id := checkpointOf(req); id != "" {
		if err := h.atHead(ctx, key, info, id); err != nil {
			return nil, err
		}
	}
	a := &admitted{key: key, agent: agent, modes: modes, strategy: string(strategy)}
	if hasResume {
		answers, err := resumeAnswers(req.Command.Resume, info.PendingConfirmations)
		if err != nil {
			return nil, err
		}
		a.from, a.run, a.resumed, a.strategy = info.LastSeq, info.PendingConfirmations[0].RunID, true, nil
		for _, ans := range answers {
			if _, err := h.svc.ConfirmTool(ctx, key, ans); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	res, err := h.svc.SendMessage(ctx, key, sessions.MessageRequest{Text: text, WhenBusy: strategy})
	if errors.Is(err, rein.ErrSessionBusy) {
		return nil, rein.Errorf(rein.CodeConflict, "Thread is already running a task. Wait for it to finish or choose a different multitask strategy.")
	}
	if err != nil {
		return nil, err
	}
	a.run = res.RunID
	if a.from, err = h.runStart(ctx, key, res.RunID); err != nil {
		return nil, err
	}
	return a, nil
}

func checkpointOf(req runRequest) string {
	if req.CheckpointID != nil && *req.CheckpointID != "" {
		return *req.CheckpointID
	}
	if req.Checkpoint != nil && req.Checkpoint.CheckpointID != nil {
		return *req.Checkpoint.CheckpointID
	}
	return ""
}

// atHead accepts a run's checkpoint only when it is the thread's latest:
// a run from an earlier checkpoint (a fork) is not supported.
func (h *Handler) atHead(ctx context.Context, key rein.SessionKey, info *sessions.SessionInfo, id string) error {
	f := newFold(key.ID)
	if _, err := h.foldLog(ctx, key, f, 0, info.LastSeq); err != nil {
		return err
	}
	if head := f.head(); head.seq > 0 && checkpointID(head.seq) == id {
		return nil
	}
	return rein.InvalidArgument("checkpoint_id", "a run from an earlier checkpoint (a fork) is not supported: Rein's threads have one history")
}

// runStart is the cursor just before the run's user.message.
func (h *Handler) runStart(ctx context.Context, key rein.SessionKey, runID string) (int64, error) {
	return protocol.RunStart(ctx, func(ctx context.Context, after int64, limit int) ([]rein.Event, int64, error) {
		return h.svc.ReadEvents(ctx, key, after, limit)
	}, runID)
}

// inputText is a run's input: the text of the last human message of
// input.messages (Rein keeps the history; earlier messages are the
// client's copy of it and are not read).
func inputText(raw json.RawMessage) (string, error) {
	var in struct {
		Messages json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(raw, &in) != nil || !present(in.Messages) {
		return "", rein.InvalidArgument("input.messages", "input must be {\"messages\": [...]}, ending with the user's message")
	}
	var msgs []json.RawMessage
	if json.Unmarshal(in.Messages, &msgs) != nil {
		msgs = []json.RawMessage{in.Messages}
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		var s string
		if json.Unmarshal(msgs[i], &s) == nil {
			if strings.TrimSpace(s) == "" {
				return "", rein.InvalidArgument(fmt.Sprintf("input.messages[%d]", i), "the user's message must have text")
			}
			return s, nil
		}
		var m struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(msgs[i], &m) != nil {
			return "", rein.InvalidArgument(fmt.Sprintf("input.messages[%d]", i), "a message must be an object {type or role, content}")
		}
		switch strings.ToLower(m.Type + m.Role) {
		case "human", "user", "humanuser", "humanhuman":
			return contentText(m.Content, fmt.Sprintf("input.messages[%d].content", i))
		}
	}
	return "", rein.InvalidArgument("input.messages", "input.messages has no human message: it must end with the user's message")
}

// contentText is a message's content as text: a string, or a list of
// text parts.
func contentText(raw json.RawMessage, param string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return "", rein.InvalidArgument(param, "the message must have text")
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", rein.InvalidArgument(param, "content must be a string or a list of text parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", rein.InvalidArgument(fmt.Sprintf("%s[%d]", param, j), "only text parts are supported, not %q", p.Type)
		}
		b.WriteString(*p.Text)
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", rein.InvalidArgument(param, "the message must have text")
	}
	return b.String(), nil
}

// resumeAnswers reads a command's resume as answers to the calls waiting:
// {"<tool_use_id>": decision, …} (LangGraph's resume by interrupt id), a
// list of decisions or {"decisions": [...]} in the calls' order
// (LangChain's human-in-the-loop middleware), or one decision for all. A
// decision is true/false, {"allow", "deny_message"?}, or {"type":
// "approve"|"accept"|"reject"|"ignore"|"response", "message"|"args"?}.
func resumeAnswers(raw json.RawMessage, pending []*store.Confirmation) ([]sessions.ConfirmRequest, error) {
	if len(pending) == 0 {
		return nil, rein.Errorf(rein.CodeConflict, "the thread has no interrupt to resume")
	}
	run := pending[0].RunID
	var calls []*store.Confirmation
	for _, c := range pending {
		if c.RunID == run {
			calls = append(calls, c)
		}
	}
	var byID map[string]json.RawMessage
	if json.Unmarshal(raw, &byID) == nil && len(byID) > 0 {
		named := true
		for id := range byID {
			if !hasCall(calls, id) {
				named = false
			}
		}
		if named {
			var out []sessions.ConfirmRequest
			for _, c := range calls {
				if d, ok := byID[c.ToolUseID]; ok {
					a, err := decision(d, "command.resume."+c.ToolUseID)
					if err != nil {
						return nil, err
					}
					a.ToolUseID = c.ToolUseID
					out = append(out, a)
				}
			}
			return out, nil
		}
		if d, ok := byID["decisions"]; ok {
			raw = d
		}
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil {
		if len(list) != len(calls) {
			return nil, rein.InvalidArgument("command.resume", "%d decisions for %d interrupts: give one per interrupt, in order, or name them by id", len(list), len(calls))
		}
		out := make([]sessions.ConfirmRequest, len(list))
		for i, d := range list {
			a, err := decision(d, fmt.Sprintf("command.resume[%d]", i))
			if err != nil {
				return nil, err
			}
			a.ToolUseID = calls[i].ToolUseID
			out[i] = a
		}
		return out, nil
	}
	a, err := decision(raw, "command.resume")
	if err != nil {
		return nil, err
	}
	out := make([]sessions.ConfirmRequest, len(calls))
	for i, c := range calls {
		out[i] = a
		out[i].ToolUseID = c.ToolUseID
	}
	return out, nil
}

func hasCall(calls []*store.Confirmation, id string) bool {
	for _, c := range calls {
		if c.ToolUseID == id {
			return true
		}
	}
	return false
}

// decision reads one answer.
func decision(raw json.RawMessage, param string) (sessions.ConfirmRequest, error) {
	deny := func(msg string) sessions.ConfirmRequest {
		if msg == "" {
			msg = "denied"
		}
		return sessions.ConfirmRequest{Allow: false, DenyMessage: &msg}
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		if b {
			return sessions.ConfirmRequest{Allow: true}, nil
		}
		return deny(""), nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch strings.ToLower(s) {
		case "approve", "accept", "allow", "yes":
			return sessions.ConfirmRequest{Allow: true}, nil
		case "reject", "deny", "ignore", "no":
			return deny(""), nil
		}
		return sessions.ConfirmRequest{}, rein.InvalidArgument(param, "a decision must be approve or reject, not %q", s)
	}
	var d struct {
		Allow       *bool           `json:"allow"`
		DenyMessage *string         `json:"deny_message"`
		Type        string          `json:"type"`
		Message     *string         `json:"message"`
		Args        json.RawMessage `json:"args"`
	}
	if json.Unmarshal(raw, &d) != nil {
		return sessions.ConfirmRequest{}, rein.InvalidArgument(param, "a decision must be true/false, {\"allow\": bool, \"deny_message\"?} or {\"type\": \"approve\"|\"reject\", \"message\"?}")
	}
	if d.Allow != nil {
		if *d.Allow {
			return sessions.ConfirmRequest{Allow: true}, nil
		}
		msg := ""
		if d.DenyMessage != nil {
			msg = *d.DenyMessage
		}
		return deny(msg), nil
	}
	msg := ""
	if d.Message != nil {
		msg = *d.Message
	} else if present(d.Args) {
		var s string
		if json.Unmarshal(d.Args, &s) == nil {
			msg = s
		} else {
			msg = string(d.Args)
		}
	}
	switch d.Type {
	case "approve", "accept":
		return sessions.ConfirmRequest{Allow: true}, nil
	case "reject", "ignore", "response":
		return deny(msg), nil
	case "edit":
		return sessions.ConfirmRequest{}, rein.InvalidArgument(param+".type", "an edit decision is not supported: Rein runs the call the model made, or denies it")
	}
	return sessions.ConfirmRequest{}, rein.InvalidArgument(param, "a decision must be true/false, {\"allow\": bool, \"deny_message\"?} or {\"type\": \"approve\"|\"reject\", \"message\"?}")
}

// runLocation is the run's path relative to the client's apiUrl (the SDK
// resolves Location and Content-Location against it), and its stream's,
// with the stream modes, so the SDK's reconnect streams the same parts.
func runLocation(a *admitted) (string, string) {
	run := "/threads/" + url.PathEscape(a.key.ID) + "/runs/" + url.PathEscape(a.run)
	q := url.Values{"stream_mode": a.modes}
	return run, run + "/stream?" + q.Encode()
}

// createRun is POST /threads/{id}/runs: a background run.
func (h *Handler) createRun(w http.ResponseWriter, r *http.Request) {
	a, err := h.admit(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	v, err := h.runOf(r.Context(), a.key, a.run, a.agent, a.strategy)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	loc, _ := runLocation(a)
	w.Header().Set("Content-Location", loc)
	writeJSON(w, http.StatusOK, v)
}

// runOf reads a run as LangGraph shows it.
func (h *Handler) runOf(ctx context.Context, key rein.SessionKey, runID, agent string, strategy any) (map[string]any, error) {
	rec, err := h.svc.GetRun(ctx, key, runID)
	if errors.Is(err, rein.ErrNotFound) {
		return nil, runNotFound(runID)
	}
	if err != nil {
		return nil, err
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return nil, err
	}
	return runView(rec, agent, parkedRuns(info)[rec.ID], strategy), nil
}

// streamRun is POST /threads/{id}/runs/stream: the run, streamed.
func (h *Handler) streamRun(w http.ResponseWriter, r *http.Request) {
	a, err := h.admit(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	loc, streamLoc := runLocation(a)
	w.Header().Set("Content-Location", loc)
	w.Header().Set("Location", streamLoc)
	h.serve(w, r, a.key, a.run, a.from, a.modes, true)
}

// waitRun is POST /threads/{id}/runs/wait: the run, then the thread's
// values once it ends or waits for a person.
func (h *Handler) waitRun(w http.ResponseWriter, r *http.Request) {
	a, err := h.admit(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	loc, _ := runLocation(a)
	w.Header().Set("Content-Location", loc)
	h.wait(w, r, a.key, a.run, a.from)
}

// wait answers the values of the thread once run ends or parks.
func (h *Handler) wait(w http.ResponseWriter, r *http.Request, key rein.SessionKey, run string, from int64) {
	f := newFold(key.ID)
	f.render(run, nil)
	ctx := r.Context()
	if err := h.prime(ctx, key, f, from); err != nil {
		h.writeError(w, r, err)
		return
	}
	parked := false
	err := h.follow(ctx, key, f, from, func(fs []frame) error { return nil }, func(wait func(context.Context) error) error { return wait(ctx) }, &parked)
	if err != nil {
		if ctx.Err() == nil {
			h.writeError(w, r, err)
		}
		return // the client left; the run goes on
	}
	head := f.head()
	v := head.values(false)
	if ints := f.runInterrupts(run); parked && len(ints) > 0 {
		v["__interrupt__"] = ints
	}
	if f.failed != "" {
		v = map[string]any{"__error__": map[string]any{"error": "RunError", "message": f.failed}}
	}
	writeJSON(w, http.StatusOK, v)
}

// prime folds the log up to from silently: the state a stream or wait
// starting there builds on. A step whose calls end at from ends there (the
// parts of its model node were before the cursor).
func (h *Handler) prime(ctx context.Context, key rein.SessionKey, f *fold, from int64) error {
	if _, err := h.foldLog(ctx, key, f, 0, from); err != nil {
		return err
	}
	run, step, ok := f.openCalls()
	if !ok {
		return nil
	}
	next, _, err := h.svc.ReadEvents(ctx, key, from, 1)
	if err != nil {
		return err
	}
	if len(next) == 0 || !(next[0].Type == rein.EventToolUse && next[0].RunID == run && stepOf(next[0]) == step) {
		f.settle()
	}
	return nil
}

// follow folds the log after from into f until f's run ends or parks,
// handing the frames of each read to write; between reads it waits for
// the log to grow (through beat, which keeps a stream alive).
func (h *Handler) follow(ctx context.Context, key rein.SessionKey, f *fold, from int64, write func([]frame) error, beat func(func(context.Context) error) error, parked *bool) error {
	cursor := from
	checked := int64(-1)
	for {
		evs, last, err := h.svc.ReadEvents(ctx, key, cursor, readPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			f.event(e)
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
		}
		if cursor >= last {
			f.settle()
		}
		if !f.done && !f.all && cursor >= last {
			ended, park, err := h.runState(ctx, key, f)
			if err != nil {
				return err
			}
			switch {
			case park:
				f.park()
				*parked = true
			case ended && checked == cursor:
				// Its end was before the cursor: nothing more to show.
				f.done = true
			case ended:
				// Read once more: its end may have been logged after the
				// read above.
				checked = cursor
				continue
			}
		}
		if err := write(f.out); err != nil {
			return err
		}
		f.out = f.out[:0]
		if f.done {
			return nil
		}
		if cursor < last {
			continue
		}
		if err := beat(func(ctx context.Context) error { return h.svc.WaitEvents(ctx, key, cursor) }); err != nil {
			return err
		}
	}
}

// runState reports whether f's run has ended, or waits for the calls the
// fold shows asking (they are still pending in the store).
func (h *Handler) runState(ctx context.Context, key rein.SessionKey, f *fold) (ended, parked bool, err error) {
	rec, err := h.svc.GetRun(ctx, key, f.run)
	if err != nil {
		return false, false, err
	}
	if rec.Status.Terminal() {
		return true, false, nil
	}
	ints := f.runInterrupts(f.run)
	if len(ints) == 0 || rec.Status != rein.StatusRunning {
		return false, false, nil
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return false, false, err
	}
	for _, c := range info.PendingConfirmations {
		for _, in := range ints {
			if c.RunID == f.run && c.ToolUseID == in.ID {
				return false, true, nil
			}
		}
	}
	return false, false, nil
}

// serve streams run's parts after from: the log before from is folded
// silently (the state the parts build on), then read page by page and
// live, in one loop, so the seam can neither skip nor repeat. Each part's
// SSE id is the seq of the event it renders; the stream ends with the
// run, or where it waits for a person.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, key rein.SessionKey, run string, from int64, modes []string, announce bool) {
	ctx := r.Context()
	f := newFold(key.ID)
	if err := h.prime(ctx, key, f, from); err != nil {
		h.writeError(w, r, err)
		return
	}
	f.render(run, modes)
	f.all = run == ""
	closing, release, err := protocol.OpenStream(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer release()
	protocol.StreamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	out := protocol.NewSSE(w)
	if announce {
		if err := writeFrames(out, []frame{{seq: from, event: "metadata", data: map[string]any{"run_id": run, "attempt": 1}}}); err != nil {
			return
		}
	} else if err := out.Write(nil); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(closing, cancel)
	defer stop()
	var parked bool
	err = h.follow(ctx, key, f, from, func(fs []frame) error { return writeFrames(out, fs) },
		func(wait func(context.Context) error) error { return out.WaitOrBeat(ctx, h.heartbeat, wait) }, &parked)
	if err != nil && ctx.Err() == nil {
		_, body := h.errorOf(r, err)
		_ = writeFrames(out, []frame{{seq: from, event: "error", data: map[string]any{"error": body.Code, "message": body.Detail}}})
	}
}

// writeFrames sends frames in one write: `event:`, `data:` and `id:`
// lines, the id the seq of the event a frame renders (a reconnect after it
// resumes after that event; the frames of one event are written together).
func writeFrames(out *protocol.SSE, fs []frame) error {
	if len(fs) == 0 {
		return nil
	}
	out.Buf.Reset()
	for _, f := range fs {
		b, err := json.Marshal(f.data)
		if err != nil {
			return err
		}
		out.Buf.WriteString("event: ")
		out.Buf.WriteString(f.event)
		out.Buf.WriteString("\ndata: ")
		out.Buf.Write(b)
		out.Buf.WriteString("\nid: ")
		out.Buf.WriteString(strconv.FormatInt(f.seq, 10))
		out.Buf.WriteString("\n\n")
	}
	return out.Write(out.Buf.Bytes())
}

// listRuns is GET /threads/{id}/runs?limit&offset&status: newest first.
func (h *Handler) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var limit, offset *int
	for _, p := range []struct {
		name string
		dst  **int
	}{{"limit", &limit}, {"offset", &offset}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				h.writeError(w, r, rein.InvalidArgument(p.name, "%s must be an integer", p.name))
				return
			}
			*p.dst = &n
		}
	}
	l, o, err := page(limit, offset)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := q.Get("status")
	switch status {
	case "", "pending", "running", "error", "success", "timeout", "interrupted":
	default:
		h.writeError(w, r, rein.InvalidArgument("status", "status must be pending, running, error, success, timeout or interrupted"))
		return
	}
	key := thread(r)
	info, err := h.session(r, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	runs, err := h.svc.ListRuns(r.Context(), key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	parked := parkedRuns(info)
	out := []map[string]any{}
	for _, rec := range runs {
		v := runView(rec, info.Agent, parked[rec.ID], nil)
		if status == "" || v["status"] == status {
			out = append(out, v)
		}
	}
	writeJSON(w, http.StatusOK, window(out, l, o))
}

// runOfRequest is the run the path names, of the thread it names.
func (h *Handler) runOfRequest(r *http.Request) (*sessions.SessionInfo, *store.RunRecord, error) {
	key := thread(r)
	info, err := h.session(r, key)
	if err != nil {
		return nil, nil, err
	}
	rec, err := h.svc.GetRun(r.Context(), key, r.PathValue("run"))
	if errors.Is(err, rein.ErrNotFound) {
		return nil, nil, runNotFound(r.PathValue("run"))
	}
	return info, rec, err
}

func (h *Handler) getRun(w http.ResponseWriter, r *http.Request) {
	info, rec, err := h.runOfRequest(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, runView(rec, info.Agent, parkedRuns(info)[rec.ID], nil))
}

// joinRun is GET /threads/{id}/runs/{run}/join: the thread's values once
// the run ends or waits for a person.
func (h *Handler) joinRun(w http.ResponseWriter, r *http.Request) {
	_, rec, err := h.runOfRequest(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	key := thread(r)
	from, err := h.runStart(r.Context(), key, rec.ID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.wait(w, r, key, rec.ID, from)
}

// joinStream is GET /threads/{id}/runs/{run}/stream: the run's parts from
// its first event, or after Last-Event-ID (any event, at any age; "-1" is
// the start), then live.
func (h *Handler) joinStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	modes, err := streamModes(modesParam(q["stream_mode"]), "stream_mode")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	_, rec, err := h.runOfRequest(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	key := thread(r)
	start, err := h.runStart(r.Context(), key, rec.ID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	from, announce := start, true
	if v := r.Header.Get("Last-Event-ID"); v != "" && v != "-1" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			h.writeError(w, r, rein.InvalidArgument("Last-Event-ID", "Last-Event-ID must be an event's id"))
			return
		}
		from, announce = max(n, start), false
	}
	h.serve(w, r, key, rec.ID, from, modes, announce)
}

func modesParam(v []string) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// cancelRun is POST /threads/{id}/runs/{run}/cancel?wait&action: a cancel
// of exactly that run (action interrupt), or its rollback (action
// rollback: cancelled, and its turn dropped from the thread's state and
// from every later model request); with wait=1 the answer comes once it
// has ended.
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	action := q.Get("action")
	if action == "" {
		action = "interrupt"
	}
	if action != "interrupt" && action != "rollback" {
		h.writeError(w, r, rein.InvalidArgument("action", "action must be interrupt or rollback"))
		return
	}
	wait := false
	if v := q.Get("wait"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			h.writeError(w, r, rein.InvalidArgument("wait", "wait must be 0 or 1"))
			return
		}
		wait = b
	}
	_, rec, err := h.runOfRequest(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	key := thread(r)
	id := rec.ID
	var err2 error
	if action == "rollback" {
		_, err2 = h.svc.RollbackRun(r.Context(), key, id)
	} else {
		_, err2 = h.svc.Interrupt(r.Context(), key, sessions.InterruptRequest{RunID: &id, Mode: rein.StopCancel})
	}
	if err := err2; err != nil {
		h.writeError(w, r, err)
		return
	}
	if !wait {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if _, err := h.svc.WaitRun(r.Context(), key, id); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// threadStream is GET /threads/{id}/stream (threads.joinStream): every
// run's parts after Last-Event-ID (else from the thread's first event),
// live, with an `end` part where each run ended. It goes on until the
// client leaves.
func (h *Handler) threadStream(w http.ResponseWriter, r *http.Request) {
	modes, err := streamModes(modesParam(r.URL.Query()["stream_mode"]), "stream_mode")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	key := thread(r)
	if _, err := h.session(r, key); err != nil {
		h.writeError(w, r, err)
		return
	}
	var from int64
	if v := r.Header.Get("Last-Event-ID"); v != "" && v != "-1" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			h.writeError(w, r, rein.InvalidArgument("Last-Event-ID", "Last-Event-ID must be an event's id"))
			return
		}
		from = n
	}
	h.serve(w, r, key, "", from, modes, false)
}
