package langgraph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// readPage is how many events one read of a fold takes.
const readPage = 1000

// foldLog folds key's log in (from, to] into f and returns the seq it
// reached.
func (h *Handler) foldLog(ctx context.Context, key rein.SessionKey, f *fold, from, to int64) (int64, error) {
	cursor := from
	for cursor < to {
		evs, last, err := h.svc.ReadEvents(ctx, key, cursor, int(min(to-cursor, readPage)))
		if err != nil {
			return cursor, err
		}
		for _, e := range evs {
			f.event(e)
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
		}
		if len(evs) == 0 || cursor >= last {
			break
		}
	}
	return cursor, nil
}

// epoch stands for when an assistant was made: agents come from the
// configuration, which has no such time, and the same answer on every
// instance is worth more than a start-up time.
var epoch = time.Unix(0, 0).UTC()

// info is GET /info: what the server supports, as the SDK and
// agent-chat-ui read it.
func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"version":              "rein",
		"langgraph_js_version": nil,
		"langgraph_py_version": nil,
		"flags":                map[string]any{"assistants": true, "crons": false, "langsmith": false, "langsmith_tracing_replicas": false},
		"metadata":             map[string]any{"server": "rein"},
	})
}

func assistant(name string) map[string]any {
	return map[string]any{
		"assistant_id": name, "graph_id": name, "name": name, "description": nil,
		"config": map[string]any{}, "context": map[string]any{}, "metadata": map[string]any{"created_by": "rein"},
		"version": 1, "created_at": timeString(epoch), "updated_at": timeString(epoch),
	}
}

// searchAssistants is POST /assistants/search: the configured agents,
// filtered by graph_id or name, paged by limit and offset.
func (h *Handler) searchAssistants(w http.ResponseWriter, r *http.Request) {
	var body struct {
		GraphID *string `json:"graph_id"`
		Name    *string `json:"name"`
		Limit   *int    `json:"limit"`
		Offset  *int    `json:"offset"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, offset, err := page(body.Limit, body.Offset)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := []any{}
	for _, name := range h.svc.AgentNames() {
		if body.GraphID != nil && *body.GraphID != name || body.Name != nil && *body.Name != name {
			continue
		}
		out = append(out, assistant(name))
	}
	writeJSON(w, http.StatusOK, window(out, limit, offset))
}

// page checks a limit and offset (LangGraph's defaults: 10 and 0).
func page(limit, offset *int) (int, int, error) {
	l, o := 10, 0
	if limit != nil {
		if *limit < 1 || *limit > 1000 {
			return 0, 0, rein.InvalidArgument("limit", "limit must be 1 to 1000")
		}
		l = *limit
	}
	if offset != nil {
		if *offset < 0 {
			return 0, 0, rein.InvalidArgument("offset", "offset must be ≥ 0")
		}
		o = *offset
	}
	return l, o, nil
}

func window[T any](all []T, limit, offset int) []T {
	if offset >= len(all) {
		return []T{}
	}
	return all[offset:min(len(all), offset+limit)]
}

func (h *Handler) getAssistant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("assistant")
	if !h.knownAssistant(id) {
		h.writeError(w, r, assistantNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, assistant(id))
}

// assistantSchemas is GET /assistants/{id}/schemas: a ReAct agent's state
// is its messages; its input is a message, its config nothing.
func (h *Handler) assistantSchemas(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("assistant")
	if !h.knownAssistant(id) {
		h.writeError(w, r, assistantNotFound(id))
		return
	}
	messages := map[string]any{"type": "object", "properties": map[string]any{
		"messages": map[string]any{"type": "array", "items": map[string]any{"type": "object"}}}}
	writeJSON(w, http.StatusOK, map[string]any{
		"graph_id": id, "input_schema": messages, "output_schema": messages, "state_schema": messages,
		"config_schema":  map[string]any{"type": "object", "properties": map[string]any{}},
		"context_schema": map[string]any{"type": "object", "properties": map[string]any{}},
	})
}

// createThread is POST /threads {thread_id?, metadata?, if_exists?}: a
// session, of the agent metadata.graph_id names (else the default one).
func (h *Handler) createThread(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ThreadID   *string                    `json:"thread_id"`
		Metadata   map[string]json.RawMessage `json:"metadata"`
		IfExists   *string                    `json:"if_exists"`
		Supersteps json.RawMessage            `json:"supersteps"`
		TTL        json.RawMessage            `json:"ttl"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	ifExists := "raise"
	if body.IfExists != nil {
		ifExists = *body.IfExists
	}
	if ifExists != "raise" && ifExists != "do_nothing" {
		h.writeError(w, r, rein.InvalidArgument("if_exists", "if_exists must be raise or do_nothing"))
		return
	}
	if len(body.Supersteps) > 0 && string(body.Supersteps) != "null" {
		h.writeError(w, r, rein.InvalidArgument("supersteps", "supersteps are not supported: a thread's history is what its runs did"))
		return
	}
	if len(body.TTL) > 0 && string(body.TTL) != "null" {
		h.writeError(w, r, rein.InvalidArgument("ttl", "a thread ttl is not supported: Rein keeps a session until it is deleted (or by the server's retention)"))
		return
	}
	agent := sessions.DefaultAgent
	if raw, ok := body.Metadata["graph_id"]; ok && string(raw) != "null" {
		var g string
		if json.Unmarshal(raw, &g) != nil || !h.knownAssistant(g) {
			h.writeError(w, r, rein.Errorf(rein.CodeNotFound, "Graph %s not found", string(raw)))
			return
		}
		agent = g
	}
	delete(body.Metadata, "graph_id")
	md, _ := json.Marshal(orEmpty(body.Metadata))
	id := ""
	if body.ThreadID != nil {
		id = *body.ThreadID
		if !sessions.ValidSessionID(id) {
			h.writeError(w, r, rein.InvalidArgument("thread_id", "thread_id must be 1 to %d characters of A-Z a-z 0-9 . _ : -", sessions.MaxSessionIDLen))
			return
		}
	} else {
		id = newUUID()
	}
	owner := protocol.Owner(r)
	s, created, err := h.svc.CreateOrGetSession(r.Context(), owner, sessions.CreateSessionRequest{ID: id, Agent: agent, Metadata: md})
	switch {
	case errors.Is(err, rein.ErrConflict):
		h.writeError(w, r, rein.Errorf(rein.CodeConflict, "Thread %s already exists", id))
		return
	case err != nil:
		h.writeError(w, r, err)
		return
	case !created && ifExists == "raise":
		h.writeError(w, r, rein.Errorf(rein.CodeConflict, "Thread %s already exists", id))
		return
	}
	t, err := h.threadOf(r.Context(), s.Key())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func orEmpty(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return map[string]json.RawMessage{}
	}
	return m
}

// threadOf is the thread as LangGraph shows it: the session with its
// state folded from the log.
func (h *Handler) threadOf(ctx context.Context, key rein.SessionKey) (map[string]any, error) {
	info, err := h.svc.GetSession(ctx, key)
	if errors.Is(err, rein.ErrNotFound) {
		return nil, threadNotFound(key.ID)
	}
	if err != nil {
		return nil, err
	}
	f := newFold(key.ID)
	if _, err := h.foldLog(ctx, key, f, 0, info.LastSeq); err != nil {
		return nil, err
	}
	return h.threadView(ctx, info, f.head())
}

func (h *Handler) threadView(ctx context.Context, info *sessions.SessionInfo, head *checkpoint) (map[string]any, error) {
	status, errText, err := h.threadStatus(ctx, info)
	if err != nil {
		return nil, err
	}
	md := map[string]any{}
	_ = json.Unmarshal(info.Metadata, &md)
	md["graph_id"] = agentOf(info.Agent)
	md["assistant_id"] = agentOf(info.Agent)
	interrupts := map[string]any{}
	for _, in := range head.ints {
		interrupts[in.run] = append(asList(interrupts[in.run]), in)
	}
	updated := info.CreatedAt
	if !head.at.IsZero() {
		updated = head.at
	}
	t := map[string]any{
		"thread_id": info.ID, "created_at": timeString(info.CreatedAt), "updated_at": timeString(updated),
		"state_updated_at": timeString(updated), "metadata": md, "status": status,
		"values": head.values(false), "interrupts": interrupts,
		"config": map[string]any{"configurable": map[string]any{"thread_id": info.ID}},
	}
	if errText != "" {
		t["error"] = errText
	}
	return t, nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// threadStatus is LangGraph's status of a thread: interrupted while calls
// wait for a person, busy while a run is running or queued, error when
// its last run failed, else idle.
func (h *Handler) threadStatus(ctx context.Context, info *sessions.SessionInfo) (string, string, error) {
	switch {
	case len(info.PendingConfirmations) > 0:
		return "interrupted", "", nil
	case info.Busy:
		return "busy", "", nil
	}
	runs, err := h.svc.ListRuns(ctx, info.Key())
	if err != nil {
		return "", "", err
	}
	var last *store.RunRecord
	for _, run := range runs {
		if last == nil || run.CreatedAt.After(last.CreatedAt) || run.CreatedAt.Equal(last.CreatedAt) && run.ID > last.ID {
			last = run
		}
	}
	if last != nil && last.Status == rein.StatusFailed {
		return "error", last.Error, nil
	}
	return "idle", "", nil
}

func (h *Handler) getThread(w http.ResponseWriter, r *http.Request) {
	t, err := h.threadOf(r.Context(), thread(r))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// updateThread is PATCH /threads/{id} {metadata}: the keys given are
// merged into the thread's metadata, as LangGraph does.
func (h *Handler) updateThread(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
		TTL      json.RawMessage            `json:"ttl"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(body.TTL) > 0 && string(body.TTL) != "null" {
		h.writeError(w, r, rein.InvalidArgument("ttl", "a thread ttl is not supported"))
		return
	}
	key := thread(r)
	info, err := h.session(r, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.Metadata != nil {
		md := map[string]json.RawMessage{}
		_ = json.Unmarshal(info.Metadata, &md)
		for k, v := range body.Metadata {
			if k == "graph_id" || k == "assistant_id" {
				continue // the thread's agent is fixed; it is shown, not stored
			}
			md[k] = v
		}
		raw, _ := json.Marshal(md)
		if _, err := h.svc.UpdateSession(r.Context(), key, sessions.UpdateSessionRequest{Metadata: raw}); err != nil {
			if errors.Is(err, rein.ErrNotFound) {
				err = threadNotFound(key.ID)
			}
			h.writeError(w, r, err)
			return
		}
	}
	t, err := h.threadOf(r.Context(), key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (h *Handler) deleteThread(w http.ResponseWriter, r *http.Request) {
	key := thread(r)
	if err := h.svc.DeleteSession(r.Context(), key); err != nil {
		if errors.Is(err, rein.ErrNotFound) {
			err = threadNotFound(key.ID)
		}
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// searchThreads is POST /threads/search: the caller's threads, newest
// first, filtered by ids, metadata (every key given equal) and status.
func (h *Handler) searchThreads(w http.ResponseWriter, r *http.Request) {
	var body struct {
		IDs       []string                   `json:"ids"`
		Metadata  map[string]json.RawMessage `json:"metadata"`
		Status    *string                    `json:"status"`
		Limit     *int                       `json:"limit"`
		Offset    *int                       `json:"offset"`
		SortBy    *string                    `json:"sort_by"`
		SortOrder *string                    `json:"sort_order"`
		Values    json.RawMessage            `json:"values"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, offset, err := page(body.Limit, body.Offset)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.Status != nil {
		switch *body.Status {
		case "idle", "busy", "interrupted", "error":
		default:
			h.writeError(w, r, rein.InvalidArgument("status", "status must be idle, busy, interrupted or error"))
			return
		}
	}
	if body.SortBy != nil && *body.SortBy != "created_at" && *body.SortBy != "thread_id" {
		h.writeError(w, r, rein.InvalidArgument("sort_by", "threads are listed by created_at (newest first); sort_by %q is not supported", *body.SortBy))
		return
	}
	if len(body.Values) > 0 && string(body.Values) != "null" {
		h.writeError(w, r, rein.InvalidArgument("values", "a search by values is not supported"))
		return
	}
	ctx := r.Context()
	all, err := h.svc.ListSessions(ctx, protocol.Owner(r))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.SortOrder != nil && *body.SortOrder == "asc" {
		for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
			all[i], all[j] = all[j], all[i]
		}
	}
	out := []any{}
	skipped := 0
	for _, s := range all {
		if len(out) == limit {
			break
		}
		if len(body.IDs) > 0 && !contains(body.IDs, s.ID) || !metadataMatches(s, body.Metadata) {
			continue
		}
		t, err := h.threadOf(ctx, s.Key())
		if errors.Is(err, rein.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if body.Status != nil && t["status"] != *body.Status {
			continue
		}
		if skipped < offset {
			skipped++
			continue
		}
		out = append(out, t)
	}
	writeJSON(w, http.StatusOK, out)
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func metadataMatches(s *store.Session, want map[string]json.RawMessage) bool {
	if len(want) == 0 {
		return true
	}
	md := map[string]any{}
	_ = json.Unmarshal(s.Metadata, &md)
	md["graph_id"] = agentOf(s.Agent)
	md["assistant_id"] = agentOf(s.Agent)
	for k, raw := range want {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false
		}
		a, _ := json.Marshal(md[k])
		b, _ := json.Marshal(v)
		if _, ok := md[k]; !ok || string(a) != string(b) {
			return false
		}
	}
	return true
}

// stateView is a checkpoint as LangGraph's ThreadState.
func stateView(thread string, c *checkpoint, pending []interrupt) map[string]any {
	var parent any
	if c.parent > 0 {
		parent = checkpointRef(thread, c.parent)
	}
	var self any = checkpointRef(thread, c.seq)
	if c.seq == 0 {
		self = map[string]any{"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": nil, "checkpoint_map": nil}
	}
	next := c.next
	if next == nil {
		next = []string{}
	}
	tasks := []any{}
	interrupts := []interrupt{}
	if len(pending) > 0 {
		interrupts = pending
		tasks = append(tasks, map[string]any{"id": "tools:" + pending[0].run, "name": "tools", "error": nil,
			"interrupts": pending, "checkpoint": nil, "state": nil, "result": nil})
	}
	var createdAt any
	if !c.at.IsZero() {
		createdAt = timeString(c.at)
	}
	var run any
	if c.run != "" {
		run = c.run
	}
	return map[string]any{
		"values": c.values(false), "next": next, "tasks": tasks, "checkpoint": self,
		"metadata":   map[string]any{"source": c.source, "step": c.step, "run_id": run, "thread_id": thread, "writes": nil, "parents": map[string]any{}},
		"created_at": createdAt, "parent_checkpoint": parent, "interrupts": interrupts,
	}
}

func checkpointRef(thread string, seq int64) map[string]any {
	return map[string]any{"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpointID(seq), "checkpoint_map": nil}
}

// getState is GET /threads/{id}/state: the state now, its interrupts the
// calls waiting for a person.
func (h *Handler) getState(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := thread(r)
	info, err := h.session(r, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	f := newFold(key.ID)
	if _, err := h.foldLog(ctx, key, f, 0, info.LastSeq); err != nil {
		h.writeError(w, r, err)
		return
	}
	head := f.head()
	writeJSON(w, http.StatusOK, stateView(key.ID, head, head.ints))
}

// getStateAt is GET /threads/{id}/state/{checkpoint_id}: the state as of
// that checkpoint.
func (h *Handler) getStateAt(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := thread(r)
	seq, err := strconv.ParseInt(r.PathValue("checkpoint"), 10, 64)
	if err != nil || seq <= 0 {
		h.writeError(w, r, rein.Errorf(rein.CodeNotFound, "Checkpoint %s not found", r.PathValue("checkpoint")))
		return
	}
	info, err := h.session(r, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var found *checkpoint
	f := newFold(key.ID)
	f.onCheckpoint = func(c *checkpoint) {
		if c.seq == seq {
			found = c
		}
	}
	if _, err := h.foldLog(ctx, key, f, 0, min(seq+1, info.LastSeq)); err != nil {
		h.writeError(w, r, err)
		return
	}
	f.head()
	if found == nil {
		h.writeError(w, r, rein.Errorf(rein.CodeNotFound, "Checkpoint %s not found", r.PathValue("checkpoint")))
		return
	}
	writeJSON(w, http.StatusOK, stateView(key.ID, found, found.ints))
}

// history is POST /threads/{id}/history {limit?, before?}: one state per
// checkpoint, newest first; before (a checkpoint config) pages back.
func (h *Handler) history(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Limit  *int `json:"limit"`
		Before *struct {
			Configurable struct {
				CheckpointID *string `json:"checkpoint_id"`
			} `json:"configurable"`
			CheckpointID *string `json:"checkpoint_id"`
		} `json:"before"`
		Metadata   json.RawMessage `json:"metadata"`
		Checkpoint json.RawMessage `json:"checkpoint"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, _, err := page(body.Limit, nil)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	before := int64(0)
	if b := body.Before; b != nil {
		id := b.Configurable.CheckpointID
		if id == nil {
			id = b.CheckpointID
		}
		if id != nil {
			n, err := strconv.ParseInt(*id, 10, 64)
			if err != nil || n <= 0 {
				h.writeError(w, r, rein.InvalidArgument("before", "before names no checkpoint of this thread"))
				return
			}
			before = n
		}
	}
	if len(body.Metadata) > 0 && string(body.Metadata) != "null" && string(body.Metadata) != "{}" {
		h.writeError(w, r, rein.InvalidArgument("metadata", "a history filtered by metadata is not supported"))
		return
	}
	ctx := r.Context()
	key := thread(r)
	info, err := h.session(r, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	// The newest limit checkpoints before the cursor, kept as a ring.
	var ring []*checkpoint
	f := newFold(key.ID)
	f.onCheckpoint = func(c *checkpoint) {
		if before > 0 && c.seq >= before {
			return
		}
		ring = append(ring, c)
		if len(ring) > limit {
			ring = ring[1:]
		}
	}
	to := info.LastSeq
	if before > 0 {
		to = min(to, before)
	}
	if _, err := h.foldLog(ctx, key, f, 0, to); err != nil {
		h.writeError(w, r, err)
		return
	}
	head := f.head()
	out := make([]any, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		c := ring[i]
		pending := []interrupt(nil)
		if c == f.last && before == 0 {
			pending = head.ints
		}
		out = append(out, stateView(key.ID, c, pending))
	}
	writeJSON(w, http.StatusOK, out)
}

// note is POST /threads/{id}/notes {"text", "id"?}: a note the thread's
// next step reads (LangGraph has no input for steering a run).
func (h *Handler) note(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Text *string `json:"text"`
		ID   string  `json:"id"`
	}
	if err := decode(w, r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.Text == nil || *body.Text == "" {
		h.writeError(w, r, rein.InvalidArgument("text", "text must be a non-empty string"))
		return
	}
	key := thread(r)
	res, err := h.svc.Supplement(r.Context(), key, sessions.SupplementRequest{Text: *body.Text, ID: body.ID})
	if err != nil {
		if errors.Is(err, rein.ErrNotFound) {
			err = threadNotFound(key.ID)
		}
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"note_id": res.ID, "status": res.Status})
}

// command is POST /threads/{id}/commands, the streaming protocol's command
// route: input.inject is a note; its other commands are answered
// not_supported in the protocol's own error shape.
func (h *Handler) command(w http.ResponseWriter, r *http.Request) {
	var cmd struct {
		ID     *int64          `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := decode(w, r, &cmd); err != nil {
		h.writeError(w, r, err)
		return
	}
	fail := func(code, msg string) {
		writeJSON(w, http.StatusOK, map[string]any{"type": "error", "id": cmd.ID, "error": code, "message": msg})
	}
	if cmd.Method != "input.inject" {
		fail("not_supported", fmt.Sprintf("%s is not supported by Rein's LangGraph adapter; input.inject is (runs go through the runs API)", cmd.Method))
		return
	}
	var p struct {
		Namespace []string `json:"namespace"`
		Message   struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			ID      string          `json:"id"`
		} `json:"message"`
	}
	if json.Unmarshal(cmd.Params, &p) != nil {
		fail("invalid_argument", "params must be {namespace, message: {role, content}}")
		return
	}
	if len(p.Namespace) > 0 {
		fail("no_such_namespace", "a Rein agent has no subgraphs: namespace must be []")
		return
	}
	text, err := contentText(p.Message.Content, "params.message.content")
	if err != nil {
		fail("invalid_argument", protocol.PublicMessage(err.(*rein.Error)))
		return
	}
	key := thread(r)
	if _, err := h.svc.Supplement(r.Context(), key, sessions.SupplementRequest{Text: text, ID: p.Message.ID}); err != nil {
		if errors.Is(err, rein.ErrNotFound) {
			err = threadNotFound(key.ID)
		}
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"type": "success", "id": cmd.ID, "result": map[string]any{}})
}
