// Package anthropic serves the Claude Managed Agents sessions API (the
// beta `client.Beta.Sessions` of Anthropic's SDKs) at /v1, so those SDKs,
// pointed at Rein's URL, drive Rein sessions unchanged (docs/protocols.md).
//
// It is a translation and nothing more (docs/architecture.md): a request
// becomes the call the native API makes on sessions.Service (a session
// created, a user.message, a user.interrupt, a user.tool_confirmation, a
// system.message, a user.supplement), with the same validation, admission
// and idempotency; what a client reads — events.list and events.stream — is
// the session's log read by cursor and rendered into the protocol's event
// shapes by one renderer (render.go). The adapter keeps no buffer, queue or
// registry of its own: whatever a rendering needs beyond the event at hand
// (the step's text so far, the id of the agent.tool_use event a result
// answers) is read back from the log, so a list, a stream, and a stream
// resumed at any cursor render the same events with the same ids.
package anthropic

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// Prefix is where the adapter is mounted.
const Prefix = "/v1"

// defaultMaxBody bounds a request body when the adapter is served without
// the server (tests); mounted, the server's bound applies.
const defaultMaxBody = 1 << 20

// Handler is the /v1 adapter: an http.Handler over a sessions.Service.
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
	// Heartbeat is the longest an event stream stays silent: a comment
	// line is sent after this long without events (default 15 s).
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
	h.routes.Handle("POST /sessions", h.createSession)
	h.routes.Handle("GET /sessions", h.listSessions)
	h.routes.Handle("GET /sessions/{id}", h.getSession)
	h.routes.Handle("POST /sessions/{id}", h.updateSession)
	h.routes.Handle("DELETE /sessions/{id}", h.deleteSession)
	h.routes.Handle("POST /sessions/{id}/archive", h.archiveSession)
	h.routes.Handle("POST /sessions/{id}/events", h.sendEvents)
	h.routes.Handle("GET /sessions/{id}/events", h.listEvents)
	h.routes.Handle("GET /sessions/{id}/events/stream", h.streamEvents)
	h.routes.Handle("GET /sessions/{id}/threads", h.listThreads)
	h.routes.Handle("GET /sessions/{id}/threads/{thread}", h.getThread)
	h.routes.Handle("POST /sessions/{id}/threads/{thread}/archive", h.archiveThread)
	h.routes.Handle("GET /sessions/{id}/threads/{thread}/events", h.listEvents)
	h.routes.Handle("GET /sessions/{id}/threads/{thread}/stream", h.streamEvents)
	return h
}

// Mount is the adapter as the server mounts it.
func Mount(svc *sessions.Service, o Options) protocol.Mount {
	return protocol.Mount{Name: "anthropic", Prefix: Prefix, Adapter: New(svc, o)}
}

// Routes lists what the adapter answers, as "METHOD /v1/path" patterns
// (for docs and the tests that must cover every route).
func (h *Handler) Routes() []string { return h.routes.List() }

// ServeHTTP answers a request under /v1; anything no route matches is the
// protocol's not_found_error (or a 405 for a known path).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.routes.Serve(w, r, func(w http.ResponseWriter, r *http.Request, otherMethod bool) {
		if otherMethod {
			writeErr(w, http.StatusMethodNotAllowed, "invalid_request_error", "method "+r.Method+" is not allowed on "+r.URL.Path, false)
			return
		}
		writeErr(w, http.StatusNotFound, "not_found_error", "no route for "+r.Method+" "+r.URL.Path, false)
	})
}

// Unauthenticated answers a request without a valid credential.
func (h *Handler) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	writeErr(w, http.StatusUnauthorized, "authentication_error", "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)", false)
}

// owner is the request's authenticated owner (protocol.Owner).
func owner(r *http.Request) string { return protocol.Owner(r) }

func maxBody(r *http.Request) int64 { return protocol.MaxBody(r, defaultMaxBody) }

// sessionKey is the session the path names, for the caller.
func sessionKey(r *http.Request) rein.SessionKey {
	return rein.SessionKey{Owner: owner(r), ID: r.PathValue("id")}
}

// ----------------------------------------------------------------- errors

// errorEnvelope is the Anthropic error body; the SDKs parse error.type and
// error.message. Param is Rein's addition: the field a 400 is about.
type errorEnvelope struct {
	Type  string    `json:"type"`
	Error errorBody `json:"error"`
}

type errorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	// RunID is the run holding the turn, for a session_busy refusal.
	RunID string `json:"run_id,omitempty"`
}

// badRequest is a malformed request: the field it names, nothing applied.
func badRequest(param, format string, args ...any) error {
	return rein.InvalidArgument(param, format, args...)
}

// writeError answers err in the Anthropic envelope: Rein's codes map onto
// the protocol's error types and statuses. A 409 carries
// x-should-retry: false, since the SDKs retry a 409 by default and a
// repeated message would be refused again (or, with when_busy, queued
// twice).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var re *rein.Error
	if !errors.As(err, &re) {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusInternalServerError, "api_error", "the server failed on this request; retry, and if it keeps failing, give the server's operator the time of the request", false)
		return
	}
	body := errorBody{Message: publicMessage(re), Param: re.Param}
	status := re.Code.HTTPStatus()
	switch re.Code {
	case rein.CodeInvalidArgument:
		body.Type = "invalid_request_error"
	case rein.CodeUnauthenticated:
		body.Type = "authentication_error"
	case rein.CodeNotFound:
		body.Type = "not_found_error"
	case rein.CodeSessionBusy:
		body.Type, body.RunID = "invalid_request_error", re.RunID
	case rein.CodeConflict:
		body.Type = "invalid_request_error"
	case rein.CodeTooLarge:
		body.Type = "request_too_large"
	case rein.CodeTooManyRequests:
		body.Type = "rate_limit_error"
	case rein.CodeUnavailable:
		body.Type = "overloaded_error"
		if hasForeignCause(re) {
			body.Message = "the server cannot use its store right now; retry later"
		}
	default:
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		body = errorBody{Type: "api_error", Message: "the server failed on this request; retry later"}
		status = http.StatusInternalServerError
	}
	if status >= 500 || hasForeignCause(re) {
		h.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusConflict {
		w.Header().Set("x-should-retry", "false")
	}
	writeJSON(w, status, errorEnvelope{Type: "error", Error: body})
}

// publicMessage and hasForeignCause keep a foreign cause out of answers
// (package protocol's, shared by the adapters).
var (
	publicMessage   = protocol.PublicMessage
	hasForeignCause = protocol.HasForeignCause
)

func writeErr(w http.ResponseWriter, status int, typ, msg string, noRetry bool) {
	if noRetry || status == http.StatusConflict {
		w.Header().Set("x-should-retry", "false")
	}
	writeJSON(w, status, errorEnvelope{Type: "error", Error: errorBody{Type: typ, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"type":"error","error":{"type":"api_error","message":"the server failed to encode its answer"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
