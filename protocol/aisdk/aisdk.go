// Package aisdk serves the AI SDK's UI message stream (the `ai` package's
// DefaultChatTransport and AbstractChat, and @ai-sdk/react's useChat) at
// /ai-sdk, so a useChat front end pointed at Rein's URL drives Rein
// sessions unchanged (docs/protocols.md).
//
// It is a translation and nothing more (docs/architecture.md): a chat is a
// session whose id is the chat's id, created on first use; a POST of the
// chat becomes the call the native API makes on sessions.Service (a
// user.message, a user.tool_confirmation), and the answer is the UI message
// stream of the run it concerns, rendered from the session's log read by
// cursor (stream.go). The adapter keeps no buffer or registry of its own, so
// the POST's stream, a resumed stream and a stream replayed after a restart
// are the same chunks. What the protocol has no verb for — a server-side
// stop, notes — are two routes of Rein's beside the chat.
package aisdk

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
const Prefix = "/ai-sdk"

// defaultMaxBody bounds a request body when the adapter is served without
// the server (tests); mounted, the server's bound applies.
const defaultMaxBody = 1 << 20

// defaultHeartbeat is the longest a stream stays silent by default.
const defaultHeartbeat = 15 * time.Second

// Handler is the /ai-sdk adapter: an http.Handler over a sessions.Service.
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
	// sent after this long without chunks (default 15 s).
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
	h.routes.Handle("POST /chat", h.postChat)
	h.routes.Handle("GET /chat/{id}/stream", h.resumeStream)
	h.routes.Handle("POST /chat/{id}/stop", h.stop)
	h.routes.Handle("POST /chat/{id}/notes", h.note)
	return h
}

// Mount is the adapter as the server mounts it.
func Mount(svc *sessions.Service, o Options) protocol.Mount {
	return protocol.Mount{Name: "ai-sdk", Prefix: Prefix, Adapter: New(svc, o)}
}

// Routes lists what the adapter answers, as "METHOD /ai-sdk/path" patterns
// (for docs and the tests that must cover every route).
func (h *Handler) Routes() []string { return h.routes.List() }

// ServeHTTP answers a request under /ai-sdk.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.routes.Serve(w, r, func(w http.ResponseWriter, r *http.Request, otherMethod bool) {
		if otherMethod {
			writeErr(w, http.StatusMethodNotAllowed, "invalid_argument", "method "+r.Method+" is not allowed on "+r.URL.Path, "")
			return
		}
		writeErr(w, http.StatusNotFound, "not_found", "no route for "+r.Method+" "+r.URL.Path, "")
	})
}

// Unauthenticated answers a request without a valid credential. The
// transport surfaces the body as its error's message.
func (h *Handler) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	writeErr(w, http.StatusUnauthorized, "unauthenticated", "a valid token is required (Authorization: Bearer TOKEN, set in the transport's headers)", "")
}

// ----------------------------------------------------------------- errors

// The error body is the native API's ({"error": {"code", "message",
// "param"?}}): DefaultChatTransport throws an Error whose message is the
// body's text, so a client sees the code, the message and the field.
type errorEnvelope struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	RunID   string `json:"run_id,omitempty"`
}

// writeError answers err: a *rein.Error with its code's status, anything
// else as internal, with no cause that is not Rein's own in the message.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var re *rein.Error
	if !errors.As(err, &re) {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusInternalServerError, "internal", "the server failed on this request", "")
		return
	}
	status := re.Code.HTTPStatus()
	body := errorBody{Code: string(re.Code), Message: protocol.PublicMessage(re), Param: re.Param, RunID: re.RunID}
	if status >= 500 || protocol.HasForeignCause(re) {
		h.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusInternalServerError {
		body = errorBody{Code: "internal", Message: "the server failed on this request"}
	}
	if re.Code == rein.CodeUnavailable && protocol.HasForeignCause(re) {
		body.Message = "the server cannot use its store right now; retry later"
	}
	writeJSON(w, status, errorEnvelope{Error: body})
}

func writeErr(w http.ResponseWriter, status int, code, msg, param string) {
	writeJSON(w, status, errorEnvelope{Error: errorBody{Code: code, Message: msg, Param: param}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"the server failed to encode its answer"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
