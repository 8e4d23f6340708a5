package a2a

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sort"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// Page sizes of ListTasks.
const (
	defaultPageSize = 50
	maxPageSize     = 100
)

// logPage is how many events one read of the log takes.
const logPage = 1000

// requests answers the A2A methods for the caller in the context
// (a2asrv.RequestHandler): each one the same calls on sessions.Service the
// native API makes, and the session's log folded into A2A's shapes.
type requests struct {
	svc *sessions.Service
	log *slog.Logger
}

var _ a2asrv.RequestHandler = (*requests)(nil)

// ----------------------------------------------------------------- sending

// SendMessage starts a task (a message without taskId) or continues one
// (with taskId: the answers to its confirmations, or a note), then waits
// — unless configuration.returnImmediately — until the task ends or
// waits for input.
func (q *requests) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	key, runID, from, err := q.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Config == nil || !req.Config.ReturnImmediately {
		for _, err := range q.runEvents(ctx, key, runID, from) {
			if err != nil {
				return nil, err
			}
		}
	}
	var hl *int
	if req.Config != nil {
		hl = req.Config.HistoryLength
	}
	t, err := q.fold(ctx, key, runID)
	if err != nil {
		return nil, toA2A(q.log, err)
	}
	return t.snapshot(hl, true), nil
}

// SendStreamingMessage is SendMessage whose answer is the task's stream:
// the task, then its status and artifact updates as the log gains them,
// until it ends or waits for input.
func (q *requests) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		key, runID, from, err := q.send(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		for ev, err := range q.runEvents(ctx, key, runID, from) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// send applies a message and returns the task it concerns and a cursor
// no later than that task's first event.
func (q *requests) send(ctx context.Context, req *a2a.SendMessageRequest) (rein.SessionKey, string, int64, error) {
	c := callerOf(ctx)
	msg := req.Message
	switch {
	case msg == nil:
		return rein.SessionKey{}, "", 0, invalidParams("message", "message is required")
	case msg.ID == "":
		return rein.SessionKey{}, "", 0, invalidParams("message.messageId", "message.messageId is required")
	case msg.Role != a2a.MessageRoleUser:
		return rein.SessionKey{}, "", 0, invalidParams("message.role", "message.role must be ROLE_USER")
	case len(msg.Parts) == 0:
		return rein.SessionKey{}, "", 0, invalidParams("message.parts", "message.parts must not be empty")
	}
	if req.Config != nil {
		if hl := req.Config.HistoryLength; hl != nil && *hl < 0 {
			return rein.SessionKey{}, "", 0, invalidParams("configuration.historyLength", "configuration.historyLength must be ≥ 0")
		}
		if req.Config.PushConfig != nil {
			return rein.SessionKey{}, "", 0, pushNotSupported()
		}
	}
	if msg.TaskID != "" {
		key, runID, err := q.continueTask(ctx, c, msg)
		return key, runID, 0, err
	}
	text, err := messageText(msg)
	if err != nil {
		return rein.SessionKey{}, "", 0, err
	}
	whenBusy, err := whenBusyOf(msg)
	if err != nil {
		return rein.SessionKey{}, "", 0, err
	}
	key, err := q.context(ctx, c, msg.ContextID)
	if err != nil {
		return rein.SessionKey{}, "", 0, err
	}
	// The run's events all come after the log's last seq now: a stream
	// reads from there, not from the session's beginning.
	_, from, err := q.svc.ReadEvents(ctx, key, 1<<62, 1)
	if err != nil {
		return rein.SessionKey{}, "", 0, toA2A(q.log, err)
	}
	// The message id is the client's id for this unit of work: a retried
	// request names the run the first one started (client_id).
	res, err := q.svc.SendMessage(ctx, key, sessions.MessageRequest{Text: text, WhenBusy: whenBusy, ClientID: msg.ID})
	if err != nil {
		return rein.SessionKey{}, "", 0, toA2A(q.log, messageParam(err))
	}
	if res.Repeat {
		from = 0
	}
	return key, res.RunID, from, nil
}

// whenBusyOf is what a message does to a busy context: queue (A2A's
// default), or Rein's extension message.metadata.rein_when_busy —
// interrupt or rollback the running task, or be refused.
func whenBusyOf(msg *a2a.Message) (rein.WhenBusy, error) {
	v, ok := msg.Metadata[metaWhenBusy]
	if !ok {
		return rein.WhenBusyEnqueue, nil
	}
	s, _ := v.(string)
	if w := rein.WhenBusy(s); s != "" && w.Valid() {
		return w, nil
	}
	return "", invalidParams("message.metadata."+metaWhenBusy, "%s must be reject, enqueue, interrupt or rollback", metaWhenBusy)
}

// stopModeOf is how CancelTask stops: at once (A2A's cancel), or Rein's
// extension metadata.rein_mode "interrupt" — cooperatively, the task
// ending COMPLETED with the reply streamed so far.
func stopModeOf(ctx context.Context, req *a2a.CancelTaskRequest) (rein.StopMode, error) {
	v, ok := req.Metadata[metaMode]
	if !ok {
		// HTTP+JSON's cancel has no body: the query carries it.
		if q := callerOf(ctx).mode; q != nil {
			v, ok = *q, true
		}
	}
	if !ok {
		return rein.StopCancel, nil
	}
	s, _ := v.(string)
	if m := rein.StopMode(s); s != "" && m.Valid() {
		return m, nil
	}
	return "", invalidParams("metadata."+metaMode, "%s must be cancel or interrupt", metaMode)
}

// messageParam names a field of the service's user.message in A2A's
// terms.
func messageParam(err error) error {
	var re *rein.Error
	if errors.As(err, &re) && re.Code == rein.CodeInvalidArgument && re.Param == "text" {
		out := *re
		out.Param = "message.parts"
		return &out
	}
	return err
}

// messageText is the text of a message's text parts, joined by newlines.
func messageText(msg *a2a.Message) (string, error) {
	var texts []string
	for i, p := range msg.Parts {
		switch v := p.Content.(type) {
		case a2a.Text:
			texts = append(texts, string(v))
		case a2a.Data:
			if _, ok := v.Value.(map[string]any)["confirmations"]; ok {
				return "", invalidParams(fmt.Sprintf("message.parts[%d].data.confirmations", i), "confirmations answer an INPUT_REQUIRED task: send them with that task's taskId")
			}
		default:
			return "", invalidParams(fmt.Sprintf("message.parts[%d]", i), "only text parts are accepted as input (a file or raw part is not)")
		}
	}
	text := strings.Join(texts, "\n")
	if strings.TrimSpace(text) == "" {
		return "", invalidParams("message.parts", "the message must have a non-empty text part")
	}
	return text, nil
}

// context is the session of a contextId: a new session without one, the
// caller's session with that id, or — for an id the caller does not have
// — a new session with that id.
func (q *requests) context(ctx context.Context, c caller, contextID string) (rein.SessionKey, error) {
	if contextID == "" {
		sess, err := q.svc.CreateSession(ctx, c.owner, sessions.CreateSessionRequest{Agent: c.agent})
		if err != nil {
			return rein.SessionKey{}, toA2A(q.log, err)
		}
		return sess.Key(), nil
	}
	key := rein.SessionKey{Owner: c.owner, ID: contextID}
	info, err := q.svc.GetSession(ctx, key)
	switch {
	case err == nil:
		if agentOf(info.Session) != c.agent {
			return key, invalidParams("message.contextId", "context %q belongs to the agent %q, not %q", contextID, agentOf(info.Session), c.agent)
		}
		return key, nil
	case rein.CodeOf(err) != rein.CodeNotFound:
		return key, toA2A(q.log, err)
	}
	sess, err := createContext(ctx, q.svc, c, contextID)
	if err != nil {
		var re *rein.Error
		if errors.As(err, &re) {
			switch re.Code {
			case rein.CodeConflict:
				return key, invalidParams("message.contextId", "the context id %q is not available; choose another", contextID)
			case rein.CodeInvalidArgument:
				return key, invalidParams("message.contextId", "%s", re.Message)
			}
		}
		return key, toA2A(q.log, err)
	}
	if agentOf(sess) != c.agent {
		// Created meanwhile by a first message to another agent.
		return key, invalidParams("message.contextId", "context %q belongs to the agent %q, not %q", contextID, agentOf(sess), c.agent)
	}
	return sess.Key(), nil
}

func agentOf(s *store.Session) string {
	if s.Agent == "" {
		return sessions.DefaultAgent
	}
	return s.Agent
}

// continueTask applies a message to an existing task: the answers to the
// confirmations it waits for, or a note to it while it works.
func (q *requests) continueTask(ctx context.Context, c caller, msg *a2a.Message) (rein.SessionKey, string, error) {
	key, rec, err := q.findTask(ctx, c, msg.TaskID)
	if err != nil {
		return key, "", err
	}
	if msg.ContextID != "" && msg.ContextID != key.ID {
		return key, "", invalidParams("message.contextId", "task %s belongs to another context", rec.ID)
	}
	t, err := q.fold(ctx, key, rec.ID)
	if err != nil {
		return key, "", toA2A(q.log, err)
	}
	if t.terminal() {
		return key, "", a2a.NewError(a2a.ErrUnsupportedOperation, fmt.Sprintf("task %s has ended (%s): send a message without taskId (same contextId) to continue the conversation", rec.ID, t.state))
	}
	answers, err := confirmations(msg, t)
	if err != nil {
		return key, "", err
	}
	switch {
	case t.state == a2a.TaskStateInputRequired:
		if len(answers) == 0 {
			return key, "", invalidParams("message.parts", "task %s waits for confirmations: send a data part {\"confirmations\": [{\"tool_use_id\", \"allow\", \"deny_message\"?}]}", rec.ID)
		}
		for _, a := range answers {
			if _, err := q.svc.ConfirmTool(ctx, key, a); err != nil {
				return key, "", toA2A(q.log, err)
			}
		}
		return key, rec.ID, nil
	case t.state == a2a.TaskStateWorking:
		if len(answers) > 0 {
			return key, "", invalidParams("message.parts", "task %s waits for no confirmation (it is WORKING)", rec.ID)
		}
		text, err := messageText(msg)
		if err != nil {
			return key, "", err
		}
		// A note to the run, read at its next step (the steer A2A lacks);
		// the message id makes a retry add nothing.
		if _, err := q.svc.Supplement(ctx, key, sessions.SupplementRequest{Text: text, ID: msg.ID}); err != nil {
			return key, "", toA2A(q.log, messageParam(err))
		}
		return key, rec.ID, nil
	}
	return key, "", a2a.NewError(a2a.ErrUnsupportedOperation, fmt.Sprintf("task %s is queued (SUBMITTED): a note reaches a WORKING task; cancel it, or wait for it to start", rec.ID))
}

// confirmations reads the answers a message carries (data parts
// {"confirmations": [...]}) and checks each against the calls the task
// waits for: all are valid or none is applied.
func confirmations(msg *a2a.Message, t *task) ([]sessions.ConfirmRequest, error) {
	var out []sessions.ConfirmRequest
	for i, p := range msg.Parts {
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		obj, _ := d.Value.(map[string]any)
		raw, ok := obj["confirmations"]
		if !ok {
			continue
		}
		param := fmt.Sprintf("message.parts[%d].data.confirmations", i)
		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return nil, invalidParams(param, "confirmations must be a non-empty array")
		}
		for j, item := range list {
			at := fmt.Sprintf("%s[%d]", param, j)
			m, ok := item.(map[string]any)
			if !ok {
				return nil, invalidParams(at, "each confirmation must be an object {\"tool_use_id\", \"allow\", \"deny_message\"?}")
			}
			id, ok := m["tool_use_id"].(string)
			if !ok || id == "" {
				return nil, invalidParams(at+".tool_use_id", "tool_use_id must be a non-empty string")
			}
			allow, ok := m["allow"].(bool)
			if !ok {
				return nil, invalidParams(at+".allow", "allow must be true or false")
			}
			req := sessions.ConfirmRequest{ToolUseID: id, Allow: allow}
			for _, k := range []string{"deny_message", "denyMessage"} {
				if v, present := m[k]; present && v != nil {
					s, ok := v.(string)
					if !ok {
						return nil, invalidParams(at+"."+k, "%s must be a string", k)
					}
					req.DenyMessage = &s
				}
			}
			if !t.waitsFor(id) {
				return nil, invalidParams(at+".tool_use_id", "task %s does not wait for a confirmation of %q", t.id, id)
			}
			out = append(out, req)
		}
	}
	return out, nil
}

// waitsFor reports whether the task waits for a confirmation of the call.
func (t *task) waitsFor(toolUseID string) bool {
	for _, c := range t.pending {
		if c.ToolUseID == toolUseID {
			return true
		}
	}
	return false
}

// ----------------------------------------------------------------- reading

// GetTask answers a task: its status, history and reply.
func (q *requests) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	if hl := req.HistoryLength; hl != nil && *hl < 0 {
		return nil, invalidParams("historyLength", "historyLength must be ≥ 0")
	}
	key, rec, err := q.findTask(ctx, callerOf(ctx), req.ID)
	if err != nil {
		return nil, err
	}
	t, err := q.fold(ctx, key, rec.ID)
	if err != nil {
		return nil, toA2A(q.log, err)
	}
	return t.snapshot(req.HistoryLength, true), nil
}

// ListTasks lists the caller's tasks of this agent — one context's when
// contextId is given — newest first, in pages whose token is a position
// (the last task listed), so tasks started meanwhile never shift a page.
func (q *requests) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	c := callerOf(ctx)
	size := req.PageSize
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		return nil, invalidParams("pageSize", "pageSize must be between 1 and %d", maxPageSize)
	}
	if hl := req.HistoryLength; hl != nil && *hl < 0 {
		return nil, invalidParams("historyLength", "historyLength must be ≥ 0")
	}
	if req.Status != "" && !knownState(req.Status) {
		return nil, invalidParams("status", "unknown task state %q", req.Status)
	}
	var keys []rein.SessionKey
	if req.ContextID != "" {
		key := rein.SessionKey{Owner: c.owner, ID: req.ContextID}
		switch info, err := q.svc.GetSession(ctx, key); {
		case err == nil && agentOf(info.Session) == c.agent:
			keys = append(keys, key)
		case err != nil && rein.CodeOf(err) != rein.CodeNotFound:
			return nil, toA2A(q.log, err)
		}
	} else {
		list, err := q.svc.ListSessions(ctx, c.owner)
		if err != nil {
			return nil, toA2A(q.log, err)
		}
		for _, s := range list {
			if agentOf(s) == c.agent && s.ParentID == "" {
				keys = append(keys, s.Key())
			}
		}
	}
	type item struct {
		rec *store.RunRecord
		t   *task
	}
	var all []item
	for _, key := range keys {
		runs, err := q.svc.ListRuns(ctx, key)
		if err != nil {
			return nil, toA2A(q.log, err)
		}
		tasks, err := q.foldAll(ctx, key, "")
		if err != nil {
			return nil, toA2A(q.log, err)
		}
		for _, r := range runs {
			t := tasks[r.ID]
			if t == nil {
				t = newTask(key.ID, r.ID, nil)
			}
			if req.Status != "" && t.state != req.Status {
				continue
			}
			if after := req.StatusTimestampAfter; after != nil && !t.updated.After(*after) {
				continue
			}
			all = append(all, item{rec: r, t: t})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i].rec, all[j].rec
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.ID > b.ID
	})
	start := 0
	if req.PageToken != "" {
		start = -1
		for i, it := range all {
			if it.rec.ID == req.PageToken {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, invalidParams("pageToken", "pageToken %q names no task of this listing", req.PageToken)
		}
	}
	end := min(start+size, len(all))
	out := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, TotalSize: len(all), PageSize: size}
	for _, it := range all[start:end] {
		out.Tasks = append(out.Tasks, it.t.snapshot(req.HistoryLength, req.IncludeArtifacts))
	}
	if end < len(all) && end > start {
		out.NextPageToken = all[end-1].rec.ID
	}
	return out, nil
}

func knownState(s a2a.TaskState) bool {
	switch s {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateInputRequired, a2a.TaskStateCompleted,
		a2a.TaskStateCanceled, a2a.TaskStateFailed, a2a.TaskStateRejected, a2a.TaskStateAuthRequired:
		return true
	}
	return false
}

// SubscribeToTask streams a task from its first event — the task, then
// every update — and then live, until it ends or waits for input. Any
// number of subscribers, at any time: after the end it is the whole run
// replayed from the log.
func (q *requests) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		key, rec, err := q.findTask(ctx, callerOf(ctx), req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		for ev, err := range q.runEvents(ctx, key, rec.ID, 0) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// ---------------------------------------------------------------- stopping

// CancelTask stops exactly the task's run (queued or running), as a
// user.interrupt with its run id does, and answers the task once its end
// is in the log. An ended task is not cancelable. Metadata rein_mode
// "interrupt" stops it cooperatively instead: the run answers with what it
// has (COMPLETED, reason interrupted).
func (q *requests) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	mode, err := stopModeOf(ctx, req)
	if err != nil {
		return nil, err
	}
	key, rec, err := q.findTask(ctx, callerOf(ctx), req.ID)
	if err != nil {
		return nil, err
	}
	if rec.Status.Terminal() {
		return nil, notCancelable(rec)
	}
	id := rec.ID
	res, err := q.svc.Interrupt(ctx, key, sessions.InterruptRequest{RunID: &id, Mode: mode})
	if err != nil {
		return nil, toA2A(q.log, err)
	}
	if !res.Accepted {
		// It ended between the read and the stop.
		if rec, err = q.svc.GetRun(ctx, key, id); err != nil {
			return nil, toA2A(q.log, err)
		}
		return nil, notCancelable(rec)
	}
	if _, err := q.svc.WaitRun(ctx, key, id); err != nil {
		return nil, toA2A(q.log, err)
	}
	t, err := q.fold(ctx, key, id)
	if err != nil {
		return nil, toA2A(q.log, err)
	}
	return t.snapshot(nil, true), nil
}

func notCancelable(rec *store.RunRecord) error {
	return a2a.NewError(a2a.ErrTaskNotCancelable, fmt.Sprintf("task %s has ended (%s); it cannot be canceled", rec.ID, terminalState(rec.Status)))
}

// ------------------------------------------------------- not supported yet

func pushNotSupported() error {
	return a2a.NewError(a2a.ErrPushNotificationNotSupported, "push notifications are not supported by this server yet: stream the task (SendStreamingMessage, SubscribeToTask) or poll GetTask")
}

// GetTaskPushConfig answers PushNotificationNotSupported.
func (q *requests) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, pushNotSupported()
}

// ListTaskPushConfigs answers PushNotificationNotSupported.
func (q *requests) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, pushNotSupported()
}

// CreateTaskPushConfig answers PushNotificationNotSupported.
func (q *requests) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, pushNotSupported()
}

// DeleteTaskPushConfig answers PushNotificationNotSupported.
func (q *requests) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return pushNotSupported()
}

// GetExtendedAgentCard answers that there is none: the public card says
// everything.
func (q *requests) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.NewError(a2a.ErrExtendedCardNotConfigured, "this agent has no extended card: its public card is complete")
}

// ------------------------------------------------------------- the log

// findTask finds the caller's run with that id (sessions.FindRun: one
// read where the store locates runs); another owner's run, or another
// agent's, is not found, exactly like an unknown one.
func (q *requests) findTask(ctx context.Context, c caller, id a2a.TaskID) (rein.SessionKey, *store.RunRecord, error) {
	if id == "" {
		return rein.SessionKey{}, nil, invalidParams("id", "a task id is required")
	}
	notFound := a2a.NewError(a2a.ErrTaskNotFound, fmt.Sprintf("no task %q", id))
	rec, err := q.svc.FindRun(ctx, c.owner, string(id))
	if rein.CodeOf(err) == rein.CodeNotFound {
		return rein.SessionKey{}, nil, notFound
	}
	if err != nil {
		return rein.SessionKey{}, nil, toA2A(q.log, err)
	}
	key := rein.SessionKey{Owner: c.owner, ID: rec.SessionID}
	info, err := q.svc.GetSession(ctx, key)
	switch {
	case rein.CodeOf(err) == rein.CodeNotFound:
		return rein.SessionKey{}, nil, notFound
	case err != nil:
		return rein.SessionKey{}, nil, toA2A(q.log, err)
	case agentOf(info.Session) != c.agent:
		return rein.SessionKey{}, nil, notFound
	}
	return key, rec, nil
}

// fold folds one run's events into its task.
func (q *requests) fold(ctx context.Context, key rein.SessionKey, runID string) (*task, error) {
	tasks, err := q.foldAll(ctx, key, runID)
	if err != nil {
		return nil, err
	}
	if t := tasks[runID]; t != nil {
		return t, nil
	}
	return newTask(key.ID, runID, nil), nil
}

// foldAll reads the session's log once and folds the events of each run
// (only that run when only is set) into its task.
func (q *requests) foldAll(ctx context.Context, key rein.SessionKey, only string) (map[string]*task, error) {
	tasks := map[string]*task{}
	notes := map[string]string{}
	var cursor int64
	for {
		evs, last, err := q.svc.ReadEvents(ctx, key, cursor, logPage)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			cursor = e.Seq
			if e.RunID == "" || only != "" && e.RunID != only {
				recordNote(notes, e)
				continue
			}
			t := tasks[e.RunID]
			if t == nil {
				t = newTask(key.ID, e.RunID, notes)
				tasks[e.RunID] = t
			}
			t.apply(e)
		}
		if len(evs) == 0 || cursor >= last {
			return tasks, nil
		}
	}
}

// runEvents renders one run's events after the cursor from (no later than
// its first event) as A2A stream items, read from the log and then live.
// It ends after the run's end, or when the run waits for input as of the
// log's last event (the client answers with a message and streams again),
// or with ctx, or when the service shuts down.
func (q *requests) runEvents(ctx context.Context, key rein.SessionKey, runID string, from int64) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		t := newTask(key.ID, runID, map[string]string{})
		for e, err := range q.svc.Events(ctx, key, from) {
			if err != nil {
				yield(nil, toA2A(q.log, err))
				return
			}
			if ev := t.apply(e); ev != nil && t.seen {
				if !yield(ev, nil) {
					return
				}
				if t.terminal() {
					return
				}
			}
			if t.state == a2a.TaskStateInputRequired {
				// Waiting as of the log's end: the log is the truth, so
				// the calls listed are the ones waiting now.
				_, last, err := q.svc.ReadEvents(ctx, key, e.Seq, 1)
				if err != nil {
					yield(nil, toA2A(q.log, err))
					return
				}
				if last == e.Seq {
					return
				}
			}
		}
	}
}

// ---------------------------------------------------------------- errors

// invalidParams is A2A's invalid-params error naming the field (in the
// JSON-RPC error's data and the HTTP+JSON ErrorInfo's metadata, "param").
func invalidParams(param, format string, args ...any) error {
	return a2a.NewError(a2a.ErrInvalidParams, param+": "+fmt.Sprintf(format, args...)).
		WithErrorInfoMeta(map[string]string{"param": param})
}

// toA2A maps a service error onto A2A's errors. No internal cause reaches
// the client; it is logged.
func toA2A(log *slog.Logger, err error) error {
	var ae *a2a.Error
	if errors.As(err, &ae) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return a2a.NewError(a2a.ErrServerError, "the request ended before its answer (cancelled or timed out)")
	}
	var re *rein.Error
	if !errors.As(err, &re) {
		log.Error("a2a request failed", "err", err)
		return a2a.NewError(a2a.ErrInternalError, "internal error")
	}
	meta := map[string]string{"rein_code": string(re.Code)}
	switch re.Code {
	case rein.CodeNotFound:
		return a2a.NewError(a2a.ErrTaskNotFound, re.Message).WithErrorInfoMeta(meta)
	case rein.CodeInvalidArgument:
		if re.Param != "" {
			meta["param"] = re.Param
			return a2a.NewError(a2a.ErrInvalidParams, re.Param+": "+re.Message).WithErrorInfoMeta(meta)
		}
		return a2a.NewError(a2a.ErrInvalidParams, re.Message).WithErrorInfoMeta(meta)
	case rein.CodeConflict, rein.CodeSessionBusy:
		if re.RunID != "" {
			meta["busy_task_id"] = re.RunID
		}
		return a2a.NewError(a2a.ErrInvalidRequest, re.Message).WithErrorInfoMeta(meta)
	case rein.CodeTooLarge:
		return a2a.NewError(a2a.ErrInvalidRequest, re.Message).WithErrorInfoMeta(meta)
	case rein.CodeUnavailable, rein.CodeTooManyRequests:
		return a2a.NewError(a2a.ErrServerError, re.Message).WithErrorInfoMeta(meta)
	}
	log.Error("a2a request failed", "err", err)
	return a2a.NewError(a2a.ErrInternalError, "internal error").WithErrorInfoMeta(meta)
}
