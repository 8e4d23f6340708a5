// Package agui serves AG-UI 1.0 at /ag-ui, so an AG-UI front end
// (`@ag-ui/client`'s HttpAgent, CopilotKit) pointed at
// {rein}/ag-ui/{agent} drives Rein sessions unchanged (docs/protocols.md).
//
// It is a translation (docs/architecture.md): a RunAgentInput becomes a
// session created on first use (threadId), a user.message whose client id
// is the client's runId, or the user.tool_confirmation answers of its
// resume[] entries; the SSE answer is the run's events read from the log by
// cursor and rendered into AG-UI events by one renderer (render.go). What
// AG-UI lacks is added as routes beside it: a cancel by the client's runId,
// the thread's events across its runs from any cursor, and notes. The
// adapter keeps nothing of its own: a stream that starts in the middle of
// a run is primed by rendering the run's earlier events silently.
package agui

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// Prefix is where the adapter is mounted.
const Prefix = "/ag-ui"

const (
	defaultMaxBody   = 1 << 20
	defaultHeartbeat = 15 * time.Second
)

// Handler is the /ag-ui adapter: an http.Handler over a sessions.Service.
type Handler struct {
	svc       *sessions.Service
	log       *slog.Logger
	routes    *protocol.Routes
	heartbeat time.Duration
}

// Options configure a Handler.
type Options struct {
	// Logger receives what an answer leaves out (nil: discard).
	Logger *slog.Logger
	// Heartbeat is the longest a stream stays silent: a comment line is
	// sent after this long without events (default 15 s).
	Heartbeat time.Duration
}

// New returns the adapter for svc.
func New(svc *sessions.Service, o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = defaultHeartbeat
	}
	h := &Handler{svc: svc, log: o.Logger, routes: protocol.NewRoutes(Prefix), heartbeat: o.Heartbeat}
	h.routes.Handle("POST /{agent}", h.withAgent(h.runAgent))
	h.routes.Handle("POST /{agent}/threads/{thread}/runs/{run}/cancel", h.withAgent(h.cancel))
	h.routes.Handle("GET /{agent}/threads/{thread}/stream", h.withAgent(h.threadStream))
	h.routes.Handle("POST /{agent}/threads/{thread}/notes", h.withAgent(h.note))
	return h
}

// Mount is the adapter as the server mounts it.
func Mount(svc *sessions.Service, o Options) protocol.Mount {
	return protocol.Mount{Name: "ag-ui", Prefix: Prefix, Adapter: New(svc, o)}
}

// withAgent answers a route only for a configured agent: {agent} names
// one, and any other name is not found.
func (h *Handler) withAgent(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(h.svc.AgentNames(), r.PathValue("agent")) {
			h.writeError(w, r, rein.Errorf(rein.CodeNotFound, "no agent named %q", r.PathValue("agent")))
			return
		}
		f(w, r)
	}
}

// Routes lists what the adapter answers, as "METHOD /ag-ui/path" patterns.
func (h *Handler) Routes() []string { return h.routes.List() }

// ServeHTTP answers a request under /ag-ui.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.routes.Serve(w, r, func(w http.ResponseWriter, r *http.Request, _ bool) {
		writeJSON(w, http.StatusNotFound, errorBody{Type: "RUN_ERROR", Code: string(rein.CodeNotFound), Message: "no route for " + r.Method + " " + r.URL.Path})
	})
}

// Unauthenticated answers a request without a valid credential.
func (h *Handler) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	writeJSON(w, http.StatusUnauthorized, errorBody{Type: "RUN_ERROR", Code: string(rein.CodeUnauthenticated), Message: "a valid token is required (Authorization: Bearer TOKEN)"})
}

// thread is the session the path names, for the caller.
func thread(r *http.Request) rein.SessionKey {
	return rein.SessionKey{Owner: protocol.Owner(r), ID: r.PathValue("thread")}
}

// errorBody is an error answered before a stream started: the shape of
// AG-UI's RUN_ERROR (what HttpAgent puts in its error's payload), with the
// field a bad request is about.
type errorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code"`
	Param   string `json:"param,omitempty"`
}

// errorOf is err as a client may read it, with its HTTP status; an
// internal failure is logged and answered without its cause.
func (h *Handler) errorOf(r *http.Request, err error) (int, errorBody) {
	var re *rein.Error
	if !errors.As(err, &re) || re.Code.HTTPStatus() >= 500 && re.Code != rein.CodeUnavailable {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return http.StatusInternalServerError, errorBody{Type: "RUN_ERROR", Code: string(rein.CodeInternal), Message: "the server failed on this request; retry later"}
	}
	if protocol.HasForeignCause(re) {
		h.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return re.Code.HTTPStatus(), errorBody{Type: "RUN_ERROR", Code: string(re.Code), Message: protocol.PublicMessage(re), Param: re.Param}
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := h.errorOf(r, err)
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"type":"RUN_ERROR","code":"internal","message":"the server failed to encode its answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decode reads a JSON body into v, bounded as the native API's.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, protocol.MaxBody(r, defaultMaxBody))
	if err := json.NewDecoder(body).Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return rein.Errorf(rein.CodeTooLarge, "the body is larger than %d bytes", tooBig.Limit)
		}
		return rein.InvalidArgument("body", "the body is not the JSON object expected: %v", err)
	}
	return nil
}

// openThread is the thread the request names as a session of agent,
// created on first use. Another owner's id, and a thread of another
// agent, are not found.
func (h *Handler) openThread(r *http.Request, key rein.SessionKey, agent string, create bool) error {
	if !sessions.ValidSessionID(key.ID) {
		return rein.InvalidArgument("threadId", "threadId must be 1 to %d characters of A-Z a-z 0-9 . _ : -", sessions.MaxSessionIDLen)
	}
	if !create {
		s, err := h.svc.Session(r.Context(), key)
		if err != nil {
			return err
		}
		if s.Agent != agent {
			return notFound(key.ID)
		}
		return nil
	}
	s, _, err := h.svc.CreateOrGetSession(r.Context(), key.Owner, sessions.CreateSessionRequest{ID: key.ID, Agent: agent})
	if errors.Is(err, rein.ErrConflict) {
		return notFound(key.ID)
	}
	if err != nil {
		return err
	}
	if s.Agent != agent {
		return notFound(key.ID)
	}
	return nil
}

func notFound(thread string) error {
	return rein.Errorf(rein.CodeNotFound, "thread %q not found", thread)
}

// note is POST /ag-ui/{agent}/threads/{thread}/notes {"text", "id"?}: a
// note the thread's next step reads (AG-UI has no input of its own for
// steering a run).
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
	if err := h.openThread(r, key, r.PathValue("agent"), false); err != nil {
		h.writeError(w, r, err)
		return
	}
	res, err := h.svc.Supplement(r.Context(), key, sessions.SupplementRequest{Text: *body.Text, ID: body.ID})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"noteId": res.ID, "status": res.Status})
}
