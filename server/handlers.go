package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// applyTimeout bounds the application of one batch. A batch runs detached
// from its request: once validated it is applied whole (up to its first
// failure) even if the client hangs up, because the client cannot know
// how far a cut-short batch got.
const applyTimeout = 30 * time.Second

// Page sizes of GET .../events (docs/api.md).
const (
	defaultEventLimit = 100
	maxEventLimit     = 1000
)

// ------------------------------------------------------------- operations

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.svc.Ready(ctx); err != nil {
		if rein.CodeOf(err) != rein.CodeUnavailable {
			err = &rein.Error{Code: rein.CodeUnavailable, Message: "not ready: the store did not answer; retry later", Err: err}
		}
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// ------------------------------------------------------------- JSON shapes

// sessionJSON is a session as created and read (docs/api.md).
type sessionJSON struct {
	ID string `json:"id"`
	// Title is null until the session has one.
	Title           *string         `json:"title"`
	CreatedAt       string          `json:"created_at"`
	Metadata        json.RawMessage `json:"metadata"`
	ParentSessionID *string         `json:"parent_session_id"`
	Agent           string          `json:"agent"`
}

// sessionItemJSON is a session in GET /api/sessions: with its state, so a
// list shows which sessions work or wait for a person without one request
// per session.
type sessionItemJSON struct {
	sessionJSON
	State                string  `json:"state"`
	PendingConfirmations int     `json:"pending_confirmations"`
	LastEventAt          *string `json:"last_event_at"`
}

// sessionDetailJSON is GET /api/sessions/{id}.
type sessionDetailJSON struct {
	sessionJSON
	State        string   `json:"state"`
	CurrentRunID *string  `json:"current_run_id"`
	QueuedRunIDs []string `json:"queued_run_ids"`
	LastSeq      int64    `json:"last_seq"`
	// PendingConfirmations are the calls waiting for an answer, oldest
	// first; they survive restarts.
	PendingConfirmations []pendingJSON `json:"pending_confirmations"`
	// Budget is the session's budget (null: none), Usage its runs' total.
	Budget *rein.Budget `json:"budget"`
	Usage  rein.Usage   `json:"usage"`
}

// pendingJSON is one entry of pending_confirmations.
type pendingJSON struct {
	ToolUseID string          `json:"tool_use_id"`
	RunID     string          `json:"run_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	CreatedAt string          `json:"created_at"`
}

func toSessionJSON(s *store.Session) sessionJSON {
	md := s.Metadata
	if len(md) == 0 {
		md = json.RawMessage("{}")
	}
	agentName := s.Agent
	if agentName == "" {
		agentName = sessions.DefaultAgent
	}
	return sessionJSON{ID: s.ID, Title: s.Title, CreatedAt: rein.FormatTime(s.CreatedAt), Metadata: md, ParentSessionID: optional(s.ParentID), Agent: agentName}
}

// runJSON is a run (docs/api.md); reason and times are null until they apply.
type runJSON struct {
	RunID     string         `json:"run_id"`
	Status    rein.RunStatus `json:"status"`
	Reason    *rein.Reason   `json:"reason"`
	CreatedAt string         `json:"created_at"`
	StartedAt *string        `json:"started_at"`
	EndedAt   *string        `json:"ended_at"`
	// Input is the text that started the run, as last edited.
	Input string `json:"input"`
	// ClientID is the user.message's client_id, null when none was given.
	ClientID *string `json:"client_id"`
	// Position is a queued run's place in the queue (1 = next), else null.
	Position *int `json:"position"`
	// Usage is summed over the run's model requests so far.
	Usage rein.Usage `json:"usage"`
	// Error is a FAILED run's error message (an addition to the SPEC's
	// keys, present only then).
	Error string `json:"error,omitempty"`
}

// toRunJSON is r as the runs item shows it; pos is its place in the queue
// (0: not queued).
func toRunJSON(r *store.RunRecord, pos int) runJSON {
	out := runJSON{RunID: r.ID, Status: r.Status, CreatedAt: rein.FormatTime(r.CreatedAt), Usage: r.Usage, Error: r.Error,
		Input: r.Input, ClientID: optional(r.ClientID)}
	if pos > 0 && r.Status == rein.StatusQueued {
		out.Position = &pos
	}
	if r.Reason != "" {
		reason := r.Reason
		out.Reason = &reason
	}
	if !r.StartedAt.IsZero() {
		out.StartedAt = optional(rein.FormatTime(r.StartedAt))
	}
	if !r.EndedAt.IsZero() {
		out.EndedAt = optional(rein.FormatTime(r.EndedAt))
	}
	return out
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ---------------------------------------------------------------- sessions

// sessionKey is the session the request's path names, for its owner.
func sessionKey(r *http.Request) rein.SessionKey {
	info := infoOf(r.Context())
	info.session = r.PathValue("id")
	return rein.SessionKey{Owner: info.owner, ID: info.session}
}

// readBody reads a request body of at most MaxBodyBytes (413 beyond).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, rein.Errorf(rein.CodeTooLarge, "the request body exceeds %d bytes", MaxBodyBytes)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, rein.Errorf(rein.CodeTooLarge, "the request body exceeds %d bytes", MaxBodyBytes)
	case err != nil:
		// The cause names the connection's addresses: it is for the log.
		return nil, &rein.Error{Code: rein.CodeInvalidArgument, Message: "could not read the whole request body (the connection failed or was too slow); send the request again", Err: err}
	}
	return b, nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	req, err := decodeCreateSession(body)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	sess, created, err := s.svc.CreateOrGetSession(r.Context(), ownerOf(r), req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	infoOf(r.Context()).session = sess.ID
	status := http.StatusCreated
	if !created {
		// The caller's id, which it already has: the session unchanged.
		status = http.StatusOK
	}
	writeJSON(w, status, toSessionJSON(sess))
}

// decodeCreateSession reads {} or {"id": "...", "title": "...",
// "metadata": {...}, "system": "...", "agent": "..."}; an empty body counts
// as {}.
func decodeCreateSession(body []byte) (sessions.CreateSessionRequest, error) {
	var req sessions.CreateSessionRequest
	p, err := bodyObject(body)
	if err != nil || p.fields == nil {
		return req, err
	}
	sid, err := p.str("id", false, false)
	if err != nil {
		return req, err
	}
	if sid != nil {
		if !sessions.ValidSessionID(*sid) {
			return req, rein.InvalidArgument("id", "id must be 1 to %d characters of A-Z a-z 0-9 . _ : -", sessions.MaxSessionIDLen)
		}
		req.ID = *sid
	}
	if req.Title, err = p.str("title", false, false); err != nil {
		return req, err
	}
	if req.Metadata, err = metadataField(p); err != nil {
		return req, err
	}
	sys, err := p.str("system", false, false)
	if err != nil {
		return req, err
	}
	req.System = sys
	agentName, err := p.str("agent", false, true)
	if err != nil {
		return req, err
	}
	if agentName != nil {
		req.Agent = *agentName
	}
	if req.Budget, _, err = p.budget("budget"); err != nil {
		return req, err
	}
	return req, nil
}

// agentJSON is one configured agent in GET /api/agents.
type agentJSON struct {
	Name    string `json:"name"`
	Default bool   `json:"default"`
}

// listAgents is GET /api/agents: the agents a session can be created with
// (the configuration's; the same for every owner).
func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) {
	names := s.svc.AgentNames() // sorted
	out := make([]agentJSON, 0, len(names))
	for _, n := range names {
		if n == sessions.DefaultAgent {
			out = append(out, agentJSON{Name: n, Default: true})
		}
	}
	for _, n := range names {
		if n != sessions.DefaultAgent {
			out = append(out, agentJSON{Name: n})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": out})
}

// bodyObject reads a request body that must be a JSON object; an empty
// body is {} (a payload without fields). Params of its fields are bare
// keys.
func bodyObject(body []byte) (payload, error) {
	if kind(body) == 0 {
		return payload{}, nil
	}
	if !jsonx.Valid(body) {
		return payload{}, malformed(body)
	}
	var fields map[string]json.RawMessage
	if kind(body) != '{' || json.Unmarshal(body, &fields) != nil {
		return payload{}, rein.InvalidArgument("", "the request body must be a JSON object")
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	return payload{fields: fields}, nil
}

// metadataField reads an optional "metadata" object (nil when absent).
func metadataField(p payload) (json.RawMessage, error) {
	raw, ok := p.present("metadata")
	if !ok {
		return nil, nil
	}
	if kind(raw) != '{' {
		return nil, rein.InvalidArgument("metadata", "metadata must be a JSON object")
	}
	return raw, nil
}

// updateSession is PATCH /api/sessions/{id}: {"title"?, "metadata"?,
// "budget"? (null clears it)}, answered with the session as GET reads it.
func (s *Server) updateSession(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	var req sessions.UpdateSessionRequest
	p, err := bodyObject(body)
	if err == nil {
		if req.Title, err = p.str("title", false, false); err == nil {
			req.Metadata, err = metadataField(p)
		}
		if err == nil {
			req.Budget, req.SetBudget, err = p.budget("budget")
		}
	}
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	info, err := s.svc.UpdateSession(r.Context(), sessionKey(r), req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toSessionDetailJSON(info))
}

// listSessions is GET /api/sessions?limit=N&after=CURSOR: a page of the
// owner's sessions, newest first, with their state.
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req sessions.SessionPageRequest
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.writeError(w, r, rein.InvalidArgument("limit", "limit must be a positive number"), nil)
			return
		}
		req.Limit = n
	}
	req.After = q.Get("after")
	page, err := s.svc.ListSessionPage(r.Context(), ownerOf(r), req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out := make([]sessionItemJSON, 0, len(page.Sessions))
	for _, sum := range page.Sessions {
		item := sessionItemJSON{sessionJSON: toSessionJSON(sum.Session), State: "idle", PendingConfirmations: sum.PendingConfirmations}
		if sum.Busy {
			item.State = "busy"
		}
		if !sum.LastEventAt.IsZero() {
			item.LastEventAt = optional(rein.FormatTime(sum.LastEventAt))
		}
		out = append(out, item)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out, "next": optional(page.Next)})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.GetSession(r.Context(), sessionKey(r))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toSessionDetailJSON(info))
}

func toSessionDetailJSON(info *sessions.SessionInfo) sessionDetailJSON {
	out := sessionDetailJSON{
		sessionJSON:  toSessionJSON(info.Session),
		State:        "idle",
		CurrentRunID: optional(info.CurrentRunID),
		QueuedRunIDs: info.QueuedRunIDs,
		LastSeq:      info.LastSeq,
		Budget:       info.Budget,
		Usage:        info.Usage,
	}
	if info.Busy {
		out.State = "busy"
	}
	if out.QueuedRunIDs == nil {
		out.QueuedRunIDs = []string{}
	}
	out.PendingConfirmations = make([]pendingJSON, 0, len(info.PendingConfirmations))
	for _, c := range info.PendingConfirmations {
		in := c.Input
		if !jsonx.Valid(in) {
			// A model may produce invalid JSON as a tool input; it is shown
			// as the string it was.
			in, _ = json.Marshal(string(c.Input))
		}
		out.PendingConfirmations = append(out.PendingConfirmations, pendingJSON{
			ToolUseID: c.ToolUseID, RunID: c.RunID, Name: c.Name, Input: in, CreatedAt: rein.FormatTime(c.CreatedAt)})
	}
	return out
}

// subagentJSON is a direct child in GET /api/sessions/{id}/subagents
// (docs/api.md).
type subagentJSON struct {
	ID              string  `json:"id"`
	Label           string  `json:"label"`
	State           string  `json:"state"`
	ParentSessionID string  `json:"parent_session_id"`
	CurrentRunID    *string `json:"current_run_id"`
}

// listSubagents lists a session's direct children, in creation order.
// A child is "running" while an activation of it is running or queued.
func (s *Server) listSubagents(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	if _, err := s.svc.GetSession(r.Context(), key); err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	all, err := s.svc.ListSessions(r.Context(), key.Owner)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out := []subagentJSON{}
	// ListSessions is newest first; children are listed oldest first.
	for i := len(all) - 1; i >= 0; i-- {
		child := all[i]
		if child.ParentID != key.ID {
			continue
		}
		info, err := s.svc.GetSession(r.Context(), child.Key())
		if err != nil {
			s.writeError(w, r, err, nil)
			return
		}
		sa := subagentJSON{ID: child.ID, State: "idle", ParentSessionID: key.ID, CurrentRunID: optional(info.CurrentRunID)}
		if child.Subagent != nil {
			sa.Label = child.Subagent.Label
		}
		if info.Busy {
			sa.State = "running"
		}
		out = append(out, sa)
	}
	writeJSON(w, http.StatusOK, map[string]any{"subagents": out})
}

// -------------------------------------------------------------------- runs

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.svc.ListRuns(r.Context(), sessionKey(r))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	pos := sessions.QueuePositions(runs)
	out := make([]runJSON, 0, len(runs))
	for _, run := range runs {
		out = append(out, toRunJSON(run, pos[run.ID]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	runID := r.PathValue("run_id")
	infoOf(r.Context()).run = runID
	run, err := s.svc.GetRun(r.Context(), key, runID)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	pos := 0
	if run.Status == rein.StatusQueued {
		// Its place is among the session's queued runs: one more read,
		// only for a queued run.
		runs, err := s.svc.ListRuns(r.Context(), key)
		if err != nil {
			s.writeError(w, r, err, nil)
			return
		}
		pos = sessions.QueuePositions(runs)[run.ID]
	}
	writeJSON(w, http.StatusOK, toRunJSON(run, pos))
}

// editRun is PATCH /api/sessions/{id}/runs/{run_id} {"text"?, "position"?}:
// an edit of a queued run (docs/api.md, the editable queue).
func (s *Server) editRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("run_id")
	infoOf(r.Context()).run = runID
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	var req sessions.EditRunRequest
	p, err := bodyObject(body)
	if err == nil {
		req.Text, err = p.str("text", false, true)
	}
	if err == nil {
		req.Position, err = positionField(p)
	}
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out, err := s.svc.EditRun(r.Context(), sessionKey(r), runID, req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toRunJSON(out.Run, out.Position))
}

// positionField reads an optional "position": an integer ≥ 1.
func positionField(p payload) (*int, error) {
	raw, ok := p.present("position")
	if !ok {
		return nil, nil
	}
	var n int
	if c := kind(raw); !(c == '-' || c >= '0' && c <= '9') || json.Unmarshal(raw, &n) != nil || n < 1 {
		return nil, rein.InvalidArgument("position", "position must be an integer ≥ 1 (1 = next)")
	}
	return &n, nil
}

// promoteRun is POST /api/sessions/{id}/runs/{run_id}/promote {"mode"?}:
// "send now" — the current run stopped as when_busy of that mode would
// stop it, and this queued run next.
func (s *Server) promoteRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("run_id")
	infoOf(r.Context()).run = runID
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	var mode string
	p, err := bodyObject(body)
	if err == nil {
		mode, err = p.enum("mode", string(rein.WhenBusyInterrupt), string(rein.WhenBusyRollback))
	}
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out, err := s.svc.PromoteRun(r.Context(), sessionKey(r), runID, rein.WhenBusy(mode))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toRunJSON(out.Run, out.Position))
}

// ------------------------------------------------------------------ events

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	q := r.URL.Query()
	after, err := intParam(q, "after", 0)
	if err == nil && after < 0 {
		err = rein.InvalidArgument("after", "after must be a sequence number ≥ 0")
	}
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	limit, err := intParam(q, "limit", defaultEventLimit)
	if err == nil && limit <= 0 {
		err = rein.InvalidArgument("limit", "limit must be a number > 0")
	}
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	limit = min(limit, maxEventLimit)
	evs, last, err := s.svc.ReadEvents(r.Context(), key, after, int(limit))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	writeEventPage(w, evs, last)
}

// writeEventPage answers a page of the log: what writeJSON writes for
// {"events": evs, "last_seq": last}, with each event written by
// rein.Event.AppendJSON rather than through encoding/json (a reader
// catching up reads thousands). One difference: a payload nested to
// encoding/json's depth limit (10,000 levels) made writeJSON's check of
// the event it encoded, one level deeper, fail (a 500); it is served here,
// as the event stream serves it.
func writeEventPage(w http.ResponseWriter, evs []rein.Event, last int64) {
	buf := make([]byte, 0, 64+256*len(evs))
	buf = append(buf, `{"events":[`...)
	for i, e := range evs {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = e.AppendJSON(buf); err != nil {
			if evs == nil {
				evs = []rein.Event{}
			}
			writeJSON(w, http.StatusOK, map[string]any{"events": evs, "last_seq": last})
			return
		}
	}
	buf = append(buf, `],"last_seq":`...)
	buf = strconv.AppendInt(buf, last, 10)
	buf = append(buf, "}\n"...)
	writeJSONBytes(w, http.StatusOK, buf)
}

// intParam reads an integer query parameter; present means it must parse,
// even when empty.
func intParam(q map[string][]string, name string, def int64) (int64, error) {
	vs, ok := q[name]
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil {
		return 0, rein.InvalidArgument(name, "%s must be an integer, got %q", name, vs[0])
	}
	return v, nil
}

func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	cmds, err := decodeBatch(body)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), applyTimeout)
	defer cancel()
	results := make([]any, 0, len(cmds))
	for i, c := range cmds {
		res, err := s.apply(ctx, key, c)
		if err != nil {
			s.writeError(w, r, inBatch(err, i), map[string]any{"results": results})
			return
		}
		results = append(results, res)
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

// Results of the events of a batch (docs/api.md).
type (
	messageResult struct {
		RunID  string         `json:"run_id"`
		Status rein.RunStatus `json:"status"`
	}
	interruptResult struct {
		Accepted bool    `json:"accepted"`
		RunID    *string `json:"run_id"`
	}
	supplementResult struct {
		SupplementID string                 `json:"supplement_id"`
		Status       store.SupplementStatus `json:"status"`
	}
	confirmationResult struct {
		ToolUseID string `json:"tool_use_id"`
		Allow     bool   `json:"allow"`
	}
)

// apply performs one validated event through the sessions service.
func (s *Server) apply(ctx context.Context, key rein.SessionKey, c command) (any, error) {
	info := infoOf(ctx)
	switch c.typ {
	case rein.EventUserMessage:
		res, err := s.svc.SendMessage(ctx, key, c.message)
		if err != nil {
			return nil, err
		}
		info.run = res.RunID
		return messageResult{RunID: res.RunID, Status: res.Status}, nil
	case rein.EventUserInterrupt:
		res, err := s.svc.Interrupt(ctx, key, c.interrupt)
		if err != nil {
			return nil, err
		}
		info.run = res.RunID
		return interruptResult{Accepted: res.Accepted, RunID: optional(res.RunID)}, nil
	case rein.EventUserSupplement:
		res, err := s.svc.Supplement(ctx, key, c.supplement)
		if err != nil {
			return nil, err
		}
		return supplementResult{SupplementID: res.ID, Status: res.Status}, nil
	case rein.EventUserToolConfirmation:
		conf, err := s.svc.ConfirmTool(ctx, key, c.confirm)
		if err != nil {
			return nil, err
		}
		info.run = conf.RunID
		return confirmationResult{ToolUseID: c.confirm.ToolUseID, Allow: c.confirm.Allow}, nil
	case rein.EventSystemMessage:
		if err := s.svc.SetSystem(ctx, key, c.system); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}
	// decodeBatch admits only the types above.
	return nil, rein.Errorf(rein.CodeInternal, "unhandled event type %q", c.typ)
}

// inBatch makes an invalid_argument error from the service name its field
// inside the batch (text → events[2].payload.text).
func inBatch(err error, i int) error {
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument {
		return err
	}
	out := *re
	if out.Param == "" {
		out.Param = fmt.Sprintf("events[%d]", i)
	} else {
		out.Param = fmt.Sprintf("events[%d].payload.%s", i, re.Param)
	}
	return &out
}
