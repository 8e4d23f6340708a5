// Package langgraph serves LangGraph's Agent Server API at /langgraph, so
// `@langchain/langgraph-sdk`'s Client (and the useStream hook and
// agent-chat-ui built on it) pointed at {rein}/langgraph drives Rein
// sessions unchanged (docs/protocols.md).
//
// It is a translation (docs/architecture.md): assistants are the
// configured agents, a thread is a session, a LangGraph run is a Rein run.
// A run request becomes a user.message (multitask_strategy is when_busy),
// a command's resume becomes user.tool_confirmation answers, a cancel
// becomes a stop of exactly that run, a note a user.supplement. What the
// client reads — a thread's state and history, a run's stream, its wait —
// is the session's log folded into LangGraph's state (state.go) and read
// by cursor, so a stream can be rejoined at any event, at any age. The
// adapter keeps nothing of its own between requests.
package langgraph

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// Prefix is where the adapter is mounted.
const Prefix = "/langgraph"

const (
	defaultMaxBody   = 1 << 20
	defaultHeartbeat = 15 * time.Second
)

// Handler is the /langgraph adapter: an http.Handler over a
// sessions.Service.
type Handler struct {
	svc       *sessions.Service
	log       *slog.Logger
	mux       *http.ServeMux
	routes    []string
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
	h := &Handler{svc: svc, log: o.Logger, mux: http.NewServeMux(), heartbeat: o.Heartbeat}
	h.route("GET /info", h.info)
	h.route("POST /assistants/search", h.searchAssistants)
	h.route("GET /assistants/{assistant}", h.getAssistant)
	h.route("GET /assistants/{assistant}/schemas", h.assistantSchemas)
	h.route("POST /threads", h.createThread)
	h.route("POST /threads/search", h.searchThreads)
	h.route("GET /threads/{thread}", h.getThread)
	h.route("PATCH /threads/{thread}", h.updateThread)
	h.route("DELETE /threads/{thread}", h.deleteThread)
	h.route("GET /threads/{thread}/state", h.getState)
	h.route("GET /threads/{thread}/state/{checkpoint}", h.getStateAt)
	h.route("POST /threads/{thread}/history", h.history)
	h.route("POST /threads/{thread}/runs", h.createRun)
	h.route("POST /threads/{thread}/runs/stream", h.streamRun)
	h.route("POST /threads/{thread}/runs/wait", h.waitRun)
	h.route("GET /threads/{thread}/runs", h.listRuns)
	h.route("GET /threads/{thread}/runs/{run}", h.getRun)
	h.route("GET /threads/{thread}/runs/{run}/join", h.joinRun)
	h.route("GET /threads/{thread}/runs/{run}/stream", h.joinStream)
	h.route("POST /threads/{thread}/runs/{run}/cancel", h.cancelRun)
	h.route("GET /threads/{thread}/stream", h.threadStream)
	h.route("POST /threads/{thread}/notes", h.note)
	h.route("POST /threads/{thread}/commands", h.command)
	return h
}

// Mount is the adapter as the server mounts it.
func Mount(svc *sessions.Service, o Options) protocol.Mount {
	return protocol.Mount{Name: "langgraph", Prefix: Prefix, Adapter: New(svc, o)}
}

func (h *Handler) route(pattern string, f http.HandlerFunc) {
	method, path, _ := strings.Cut(pattern, " ")
	h.routes = append(h.routes, method+" "+Prefix+path)
	h.mux.HandleFunc(method+" "+Prefix+path, f)
}

// Routes lists what the adapter answers, as "METHOD /langgraph/path"
// patterns.
func (h *Handler) Routes() []string { return append([]string(nil), h.routes...) }

// ServeHTTP answers a request under /langgraph.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		writeJSON(w, http.StatusNotFound, errorBody{Detail: "Not Found: " + r.Method + " " + r.URL.Path + " is not served by Rein's LangGraph adapter", Code: string(rein.CodeNotFound)})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Unauthenticated answers a request without a valid credential.
func (h *Handler) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	writeJSON(w, http.StatusUnauthorized, errorBody{Detail: "a valid API key is required (x-api-key or Authorization: Bearer)", Code: string(rein.CodeUnauthenticated)})
}

// errorBody is LangGraph's error shape, {"detail": ...}, with Rein's code
// and the field a bad request is about.
type errorBody struct {
	Detail string `json:"detail"`
	Code   string `json:"code,omitempty"`
	Param  string `json:"param,omitempty"`
}

// statusOf is the HTTP status LangGraph answers for a Rein error: a body
// that does not validate is its 422.
func statusOf(re *rein.Error) int {
	if re.Code == rein.CodeInvalidArgument {
		return http.StatusUnprocessableEntity
	}
	return re.Code.HTTPStatus()
}

func (h *Handler) errorOf(r *http.Request, err error) (int, errorBody) {
	var re *rein.Error
	if !errors.As(err, &re) || re.Code.HTTPStatus() >= 500 && re.Code != rein.CodeUnavailable {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return http.StatusInternalServerError, errorBody{Detail: "the server failed on this request; retry later", Code: string(rein.CodeInternal)}
	}
	if protocol.HasForeignCause(re) {
		h.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	return statusOf(re), errorBody{Detail: protocol.PublicMessage(re), Code: string(re.Code), Param: re.Param}
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := h.errorOf(r, err)
	if status == http.StatusConflict || status == http.StatusUnprocessableEntity {
		// Retrying cannot change the answer.
		w.Header().Set("x-should-retry", "false")
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"detail":"the server failed to encode its answer","code":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decode reads a JSON body into v, bounded as the native API's; an empty
// body is an empty object.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, protocol.MaxBody(r, defaultMaxBody))
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return rein.Errorf(rein.CodeTooLarge, "the body is larger than %d bytes", tooBig.Limit)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return rein.InvalidArgument("body", "the body is not the JSON object expected: %v", err)
	}
	return nil
}

// thread is the session the path names, for the caller.
func thread(r *http.Request) rein.SessionKey {
	return rein.SessionKey{Owner: protocol.Owner(r), ID: r.PathValue("thread")}
}

func threadNotFound(id string) error {
	return rein.Errorf(rein.CodeNotFound, "Thread %s not found", id)
}

func runNotFound(id string) error {
	return rein.Errorf(rein.CodeNotFound, "Run %s not found", id)
}

func assistantNotFound(id string) error {
	return rein.Errorf(rein.CodeNotFound, "Assistant %s not found", id)
}

// session reads the thread's session; another owner's is not found, as a
// missing one.
func (h *Handler) session(r *http.Request, key rein.SessionKey) (*sessions.SessionInfo, error) {
	info, err := h.svc.GetSession(r.Context(), key)
	if errors.Is(err, rein.ErrNotFound) {
		return nil, threadNotFound(key.ID)
	}
	return info, err
}

// agentOf is the agent (assistant) a session's runs use.
func agentOf(agent string) string {
	if agent == "" {
		return sessions.DefaultAgent
	}
	return agent
}

// knownAssistant resolves an assistant id (an agent's name; LangGraph
// also takes a graph id, which is the same name here).
func (h *Handler) knownAssistant(id string) bool {
	return slices.Contains(h.svc.AgentNames(), id)
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// newUUID is a thread id the server makes: a random UUID, as LangGraph's.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
