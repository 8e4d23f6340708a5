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

// sessionJSON is a session in lists (docs/api.md).
type sessionJSON struct {
	ID              string          `json:"id"`
	CreatedAt       string          `json:"created_at"`
	Metadata        json.RawMessage `json:"metadata"`
	ParentSessionID *string         `json:"parent_session_id"`
	Agent           string          `json:"agent"`
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
	return sessionJSON{ID: s.ID, CreatedAt: rein.FormatTime(s.CreatedAt), Metadata: md, ParentSessionID: optional(s.ParentID), Agent: agentName}
}

// runJSON is a run (docs/api.md); reason and times are null until they apply.
type runJSON struct {
	RunID     string         `json:"run_id"`
	Status    rein.RunStatus `json:"status"`
	Reason    *rein.Reason   `json:"reason"`
	CreatedAt string         `json:"created_at"`
	StartedAt *string        `json:"started_at"`
	EndedAt   *string        `json:"ended_at"`
	// Error is a FAILED run's error message (an addition to the SPEC's
	// keys, present only then).
	Error string `json:"error,omitempty"`
}

func toRunJSON(r *store.RunRecord) runJSON {
	out := runJSON{RunID: r.ID, Status: r.Status, CreatedAt: rein.FormatTime(r.CreatedAt), Error: r.Error}
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
	sess, err := s.svc.CreateSession(r.Context(), ownerOf(r), req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	infoOf(r.Context()).session = sess.ID
	writeJSON(w, http.StatusCreated, toSessionJSON(sess))
}

// decodeCreateSession reads {} or {"metadata": {...}, "system": "...",
// "agent": "..."}; an
// empty body counts as {}.
func decodeCreateSession(body []byte) (sessions.CreateSessionRequest, error) {
	var req sessions.CreateSessionRequest
	if kind(body) == 0 {
		return req, nil
	}
	if !jsonx.Valid(body) {
		return req, malformed(body)
	}
	var fields map[string]json.RawMessage
	if kind(body) != '{' || json.Unmarshal(body, &fields) != nil {
		return req, rein.InvalidArgument("", "the request body must be a JSON object")
	}
	p := payload{fields: fields} // fields of the body itself: params are bare keys
	if raw, ok := p.present("metadata"); ok {
		if kind(raw) != '{' {
			return req, rein.InvalidArgument("metadata", "metadata must be a JSON object")
		}
		req.Metadata = raw
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

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	list, err := s.svc.ListSessions(r.Context(), ownerOf(r))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out := make([]sessionJSON, 0, len(list))
	for _, sess := range list {
		out = append(out, toSessionJSON(sess))
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	info, err := s.svc.GetSession(r.Context(), sessionKey(r))
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out := sessionDetailJSON{
		sessionJSON:  toSessionJSON(info.Session),
		State:        "idle",
		CurrentRunID: optional(info.CurrentRunID),
		QueuedRunIDs: info.QueuedRunIDs,
		LastSeq:      info.LastSeq,
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
	writeJSON(w, http.StatusOK, out)
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
	out := make([]runJSON, 0, len(runs))
	for _, run := range runs {
		out = append(out, toRunJSON(run))
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
	writeJSON(w, http.StatusOK, toRunJSON(run))
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
