package anthropic

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// metaKey is the key of a session's metadata under which the adapter keeps
// what the protocol has and Rein's session record has not: the
// environment_id a client sent, and when the session was archived
// (decision 0100). It is left out of the metadata the protocol shows.
const metaKey = "_anthropic"

// protoMeta is what the adapter keeps under metaKey.
type protoMeta struct {
	EnvironmentID string `json:"environment_id,omitempty"`
	ArchivedAt    string `json:"archived_at,omitempty"`
}

// Page sizes of sessions.list and events.list.
const (
	defaultPageLimit = 20
	maxPageLimit     = 1000
)

// ------------------------------------------------------------ JSON shapes

// sessionJSON is a Managed Agents session. Keys the SDK requires are all
// written; those Rein has no counterpart for are empty.
type sessionJSON struct {
	ID                 string            `json:"id"`
	Type               string            `json:"type"`
	Agent              agentJSON         `json:"agent"`
	ArchivedAt         *string           `json:"archived_at"`
	Budget             *struct{}         `json:"budget"`
	CreatedAt          string            `json:"created_at"`
	UpdatedAt          string            `json:"updated_at"`
	EnvironmentID      string            `json:"environment_id"`
	Metadata           map[string]string `json:"metadata"`
	OutcomeEvaluations []struct{}        `json:"outcome_evaluations"`
	Resources          []struct{}        `json:"resources"`
	Stats              struct{}          `json:"stats"`
	Status             string            `json:"status"`
	Title              string            `json:"title"`
	Usage              struct{}          `json:"usage"`
	VaultIDs           []string          `json:"vault_ids"`
}

// agentJSON is the session's agent: a configured agent of Rein, by name.
type agentJSON struct {
	ID                string     `json:"id"`
	Type              string     `json:"type"`
	Name              string     `json:"name"`
	Version           int64      `json:"version"`
	Description       string     `json:"description"`
	System            string     `json:"system"`
	Model             modelJSON  `json:"model"`
	Tools             []struct{} `json:"tools"`
	MCPServers        []struct{} `json:"mcp_servers"`
	Skills            []struct{} `json:"skills"`
	Multiagent        *struct{}  `json:"multiagent"`
	ExecutionIdentity struct {
		Type string `json:"type"`
	} `json:"execution_identity"`
}

type modelJSON struct {
	ID string `json:"id"`
}

// splitMeta separates the client's metadata from the adapter's own.
// Metadata values that are not strings (the native API allows any JSON)
// are shown as their JSON text.
func splitMeta(raw json.RawMessage) (map[string]string, protoMeta) {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields)
	out := map[string]string{}
	var pm protoMeta
	for k, v := range fields {
		if k == metaKey {
			_ = json.Unmarshal(v, &pm)
			continue
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out, pm
}

func toSessionJSON(s *store.Session, busy bool) sessionJSON {
	md, pm := splitMeta(s.Metadata)
	name := s.Agent
	if name == "" {
		name = sessions.DefaultAgent
	}
	out := sessionJSON{
		ID: s.ID, Type: "session", CreatedAt: rein.FormatTime(s.CreatedAt), UpdatedAt: rein.FormatTime(s.CreatedAt),
		EnvironmentID: pm.EnvironmentID, Metadata: md, OutcomeEvaluations: []struct{}{}, Resources: []struct{}{},
		Status: "idle", Title: sessionTitle(s), VaultIDs: []string{},
		Agent: agentJSON{ID: name, Type: "agent", Name: name, Version: 1, Tools: []struct{}{}, MCPServers: []struct{}{}, Skills: []struct{}{}},
	}
	out.Agent.ExecutionIdentity.Type = "service_account"
	if s.System != nil {
		out.Agent.System = *s.System
	}
	if busy {
		out.Status = "running"
	}
	if pm.ArchivedAt != "" {
		at := pm.ArchivedAt
		out.ArchivedAt, out.UpdatedAt = &at, at
	}
	return out
}

// ---------------------------------------------------------------- handlers

// readJSONObject reads a request body that must be a JSON object (an empty
// body counts as {}), bounded as the native API's bodies are.
func readJSONObject(w http.ResponseWriter, r *http.Request) (map[string]json.RawMessage, error) {
	limit := maxBody(r)
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, rein.Errorf(rein.CodeTooLarge, "the request body exceeds %d bytes", limit)
	case err != nil:
		return nil, badRequest("", "could not read the whole request body; send the request again")
	}
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(b)) == 0 {
		return fields, nil
	}
	if !json.Valid(b) {
		return nil, badRequest("", "the request body is not valid JSON")
	}
	if kind(b) != '{' || json.Unmarshal(b, &fields) != nil {
		return nil, badRequest("", "the request body must be a JSON object")
	}
	return fields, nil
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request) {
	fields, err := readJSONObject(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	req, initial, err := h.decodeCreate(fields)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	sess, err := h.svc.CreateSession(r.Context(), owner(r), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	busy := false
	if len(initial) > 0 {
		if _, err := h.apply(r.Context(), sess.Key(), initial); err != nil {
			// The session exists: the client learns what failed, and can
			// read the session and its log.
			h.writeError(w, r, err)
			return
		}
		if info, err := h.svc.GetSession(r.Context(), sess.Key()); err == nil {
			busy = info.Busy
		}
	}
	writeJSON(w, http.StatusOK, toSessionJSON(sess, busy))
}

// decodeCreate checks a sessions.create body whole: nothing is created
// when any of it is wrong.
func (h *Handler) decodeCreate(f map[string]json.RawMessage) (sessions.CreateSessionRequest, []command, error) {
	var req sessions.CreateSessionRequest
	p := fieldsOf("", f)
	name, err := p.agentName()
	if err != nil {
		return req, nil, err
	}
	if !slices.Contains(h.svc.AgentNames(), name) {
		return req, nil, &rein.Error{Code: rein.CodeNotFound, Param: "agent",
			Message: "no agent " + strconv.Quote(name) + " is configured (configured: " + strings.Join(h.svc.AgentNames(), ", ") + ")"}
	}
	req.Agent = name
	var pm protoMeta
	if env, err := p.str("environment_id", false); err != nil {
		return req, nil, err
	} else if env != nil {
		pm.EnvironmentID = *env
	}
	md, err := p.metadata()
	if err != nil {
		return req, nil, err
	}
	if title, err := p.str("title", false); err != nil {
		return req, nil, err
	} else if title != nil {
		req.Title = title
	}
	for _, unsupported := range []string{"budget", "resources", "vault_ids"} {
		if raw, ok := p.present(unsupported); ok && !emptyJSON(raw) {
			return req, nil, badRequest(unsupported, "%s is not supported by this server (see docs/protocols.md)", unsupported)
		}
	}
	var initial []command
	if raw, ok := p.present("initial_events"); ok {
		if initial, err = decodeEvents("initial_events", raw, true); err != nil {
			return req, nil, err
		}
	}
	if req.Metadata, err = joinMeta(md, pm); err != nil {
		return req, nil, err
	}
	return req, initial, nil
}

// joinMeta is the Rein metadata of a session: the client's keys, and the
// adapter's own under metaKey when it has any.
func joinMeta(md map[string]string, pm protoMeta) (json.RawMessage, error) {
	out := map[string]any{}
	for k, v := range md {
		out[k] = v
	}
	if pm != (protoMeta{}) {
		out[metaKey] = pm
	}
	return json.Marshal(out)
}

func emptyJSON(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "[]" || s == "{}" || s == "null"
}

func (h *Handler) getSession(w http.ResponseWriter, r *http.Request) {
	info, err := h.svc.GetSession(r.Context(), sessionKey(r))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSessionJSON(info.Session, info.Busy))
}

func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	if err := h.svc.DeleteSession(r.Context(), key); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": key.ID, "type": "session_deleted"})
}

// sessionCursor is a position in the owner's sessions, newest first: a
// session created after a page was read never shifts the pages after it.
type sessionCursor struct {
	At int64  `json:"t"`
	ID string `json:"i"`
}

func encodeCursor(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, v any) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && json.Unmarshal(b, v) == nil
}

// pageLimit reads ?limit= (default defaultPageLimit, at most maxPageLimit).
func pageLimit(r *http.Request) (int, error) {
	v, ok := r.URL.Query()["limit"]
	if !ok {
		return defaultPageLimit, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n <= 0 {
		return 0, badRequest("limit", "limit must be a whole number > 0, got %q", v[0])
	}
	return min(n, maxPageLimit), nil
}

// order reads ?order=asc|desc.
func order(r *http.Request, def string) (string, error) {
	v := r.URL.Query().Get("order")
	switch v {
	case "":
		return def, nil
	case "asc", "desc":
		return v, nil
	}
	return "", badRequest("order", "order must be asc or desc, got %q", v)
}

// listSessions pages the caller's root sessions (subagent children are not
// sessions of this protocol), newest first unless order=asc; archived ones
// only with include_archived=true.
func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ord, err := order(r, "desc")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	withArchived := q.Get("include_archived") == "true"
	if ord == "desc" {
		h.listSessionsNewest(w, r, limit, withArchived, q.Get("page"))
		return
	}
	var after *sessionCursor
	if page := q.Get("page"); page != "" {
		after = &sessionCursor{}
		if !decodeCursor(page, after) {
			h.writeError(w, r, badRequest("page", "page is not a cursor this server gave"))
			return
		}
	}
	all, err := h.svc.ListSessions(r.Context(), owner(r))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	less := func(a, b *store.Session) bool { // a comes before b in desc order
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.After(b.CreatedAt)
		}
		return a.ID > b.ID
	}
	if ord == "asc" {
		desc := less
		less = func(a, b *store.Session) bool { return desc(b, a) }
	}
	sort.SliceStable(all, func(i, j int) bool { return less(all[i], all[j]) })
	out := []sessionJSON{}
	next := ""
	for _, s := range all {
		if s.ParentID != "" {
			continue
		}
		if after != nil && !less(&store.Session{CreatedAt: time.Unix(0, after.At), ID: after.ID}, s) {
			continue
		}
		if _, pm := splitMeta(s.Metadata); pm.ArchivedAt != "" && !withArchived {
			continue
		}
		if len(out) == limit {
			last := out[len(out)-1]
			next = last.ID
			break
		}
		info, err := h.svc.GetSession(r.Context(), s.Key())
		if errors.Is(err, rein.ErrNotFound) {
			continue // deleted since the list was read
		}
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		out = append(out, toSessionJSON(info.Session, info.Busy))
	}
	var nextPage *string
	if next != "" {
		for _, s := range all {
			if s.ID == next && s.ParentID == "" {
				c := encodeCursor(sessionCursor{At: s.CreatedAt.UnixNano(), ID: s.ID})
				nextPage = &c
				break
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out, "next_page": nextPage, "prev_page": nil})
}

// listSessionsNewest is sessions.list newest first: the service's own pages
// (one store query each, the state of every session included), asked for
// as many sessions as the page still lacks, so the service's cursor after
// the last one read is the next page's.
func (h *Handler) listSessionsNewest(w http.ResponseWriter, r *http.Request, limit int, withArchived bool, page string) {
	out := []sessionJSON{}
	after := page
	for len(out) < limit {
		p, err := h.svc.ListSessionPage(r.Context(), owner(r), sessions.SessionPageRequest{Limit: limit - len(out), After: after})
		if err != nil {
			if rein.CodeOf(err) == rein.CodeInvalidArgument {
				err = badRequest("page", "page is not a cursor this server gave")
			}
			h.writeError(w, r, err)
			return
		}
		for _, sum := range p.Sessions {
			if sum.Session.ParentID != "" || (archived(sum.Session) && !withArchived) {
				continue
			}
			out = append(out, toSessionJSON(sum.Session, sum.Busy))
		}
		if after = p.Next; after == "" {
			break
		}
	}
	var next *string
	if after != "" {
		next = &after
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out, "next_page": next, "prev_page": nil})
}

// archived reports whether the session was archived through this API.
func archived(s *store.Session) bool {
	_, pm := splitMeta(s.Metadata)
	return pm.ArchivedAt != ""
}

// refuseArchived answers an archived session's refusal of new input.
func refuseArchived(id string) error {
	return rein.Errorf(rein.CodeConflict, "session %s is archived: it takes no new messages", id)
}

// sessionTitle is the session's title ("" until it has one).
func sessionTitle(s *store.Session) string {
	if s.Title == nil {
		return ""
	}
	return *s.Title
}

// ctxOK is a context for work that must not be cut short by the client
// leaving mid-request (a batch once validated is applied whole).
func ctxOK(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
}

// updateSession is sessions.update: a new title, and a metadata patch (a
// string value sets its key, null deletes it, an absent key stays). The
// patch is applied to the metadata as read, and written in one update.
func (h *Handler) updateSession(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	fields, err := readJSONObject(w, r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	p := fieldsOf("", fields)
	var req sessions.UpdateSessionRequest
	if req.Title, err = p.str("title", false); err != nil {
		h.writeError(w, r, err)
		return
	}
	var patch map[string]*string
	if raw, ok := p.present("metadata"); ok {
		if kind(raw) != '{' || json.Unmarshal(raw, &patch) != nil {
			h.writeError(w, r, badRequest("metadata", "metadata must be an object of string (set) or null (delete) values"))
			return
		}
		if _, ok := patch[metaKey]; ok {
			h.writeError(w, r, badRequest("metadata."+metaKey, "the metadata key %s is the server's own", metaKey))
			return
		}
	}
	for _, unsupported := range []string{"agent", "budget"} {
		if _, ok := p.present(unsupported); ok {
			h.writeError(w, r, badRequest(unsupported, "%s cannot be updated on this server (see docs/protocols.md)", unsupported))
			return
		}
	}
	ctx, cancel := ctxOK(r)
	defer cancel()
	if patch != nil {
		sess, err := h.svc.Session(ctx, key)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		md, pm := splitMeta(sess.Metadata)
		for k, v := range patch {
			if v == nil {
				delete(md, k)
			} else {
				md[k] = *v
			}
		}
		if req.Metadata, err = joinMeta(md, pm); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	info, err := h.svc.UpdateSession(ctx, key, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSessionJSON(info.Session, info.Busy))
}

// archiveSession is sessions.archive: the session is marked archived (in
// its metadata, decision 0100) and takes no new messages or notes from
// then on; its runs, log and answers to pending questions are untouched.
// Archiving an archived session changes nothing.
func (h *Handler) archiveSession(w http.ResponseWriter, r *http.Request) {
	key := sessionKey(r)
	ctx, cancel := ctxOK(r)
	defer cancel()
	if err := h.markArchived(ctx, key); err != nil {
		h.writeError(w, r, err)
		return
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toSessionJSON(info.Session, info.Busy))
}
