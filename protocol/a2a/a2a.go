// Package a2a serves the A2A 1.0 protocol (agent-to-agent) at /a2a, so
// that an A2A client — a2a-go's a2aclient, @a2a-js/sdk, or any agent
// framework that speaks A2A — drives Rein's agents unchanged: each
// configured agent is an A2A agent with a public agent card, a JSON-RPC
// and an HTTP+JSON binding.
//
// It exists as a translation and nothing more (docs/protocols.md): an A2A
// context is a Rein session (its contextId the session's caller-chosen
// id), an A2A task is a run (its taskId the run id), and every request
// becomes the call the native API makes on sessions.Service — a
// user.message queued behind a busy session, an exact stop of one run, a
// note to a working run, the answers to its tool confirmations. What a
// client reads — a task, a stream, a resubscription — is the session's
// log read by cursor and folded into A2A's shapes by one renderer, so a
// stream, a later GetTask and a SubscribeToTask after the run ended
// always agree, and nothing is held in memory that a restart or another
// instance could not rebuild.
//
// The wire bindings are a2asrv's (github.com/a2aproject/a2a-go/v2), which
// decode requests and encode answers, errors and SSE exactly as the
// official clients expect; the behaviour behind them is this package's,
// not a2asrv's default handler, whose resubscription and cancel contradict
// Rein's guarantees (docs/decisions/0105-a2a-on-a2asrv-bindings.md).
package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// Prefix is where the protocol is mounted.
const Prefix = "/a2a"

// RootCardPath is where the default agent's card is also served, outside
// the prefix: the well-known location of a host's agent.
const RootCardPath = "/.well-known/agent-card.json"

// cardPath is an agent's card under its base URL.
const cardPath = "/.well-known/agent-card.json"

// restSuffix is the HTTP+JSON binding's URL under an agent's base URL
// (the JSON-RPC binding is the base URL itself).
const restSuffix = "/rest"

// DefaultMaxBodyBytes bounds a request body, as the native API does.
const DefaultMaxBodyBytes = 1 << 20

// Options configure the handler.
type Options struct {
	// Service is the sessions service requests are translated onto
	// (required).
	Service *sessions.Service
	// Owner authenticates a request: the owner of its credential
	// (Authorization: Bearer), or false. Agent cards are public and never
	// ask. Nil: every request is the single user's, owner "local".
	Owner func(r *http.Request) (owner string, ok bool)
	// Agents describe the configured agents on their cards (name →
	// description); an agent without an entry gets a generic one. Every
	// agent of Service is served, described here or not.
	Agents map[string]string
	// Logger receives what the handler logs (nil: discard).
	Logger *slog.Logger
	// Heartbeat is the longest a stream stays silent: a comment line is
	// sent after this long without an update (0: 15 s).
	Heartbeat time.Duration
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes).
	MaxBodyBytes int64
}

// Handler serves the A2A protocol: the agent cards (public) and, for an
// authenticated owner, both bindings of each agent.
type Handler struct {
	o       Options
	svc     *sessions.Service
	log     *slog.Logger
	jsonrpc http.Handler
	rest    http.Handler
}

// New returns the A2A handler. Mount it at Prefix and at RootCardPath.
func New(o Options) *Handler {
	if o.Service == nil {
		panic("a2a: Options.Service is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	h := &Handler{o: o, svc: o.Service, log: o.Logger}
	rh := &requests{svc: o.Service, log: o.Logger}
	topts := []a2asrv.TransportOption{
		a2asrv.WithTransportKeepAlive(o.Heartbeat),
		a2asrv.WithTransportPanicHandler(func(v any) error {
			o.Logger.Error("a2a handler panic", "panic", v)
			return a2a.NewError(a2a.ErrInternalError, "internal error")
		}),
	}
	h.jsonrpc = a2asrv.NewJSONRPCHandler(rh, topts...)
	h.rest = a2asrv.NewRESTHandler(rh, topts...)
	return h
}

// caller is who a request is from and which agent it addresses.
type caller struct {
	owner, agent string
	// mode is the HTTP+JSON query's rein_mode (nil: none given).
	mode *string
}

type callerKey struct{}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == RootCardPath {
		h.card(w, r, sessions.DefaultAgent)
		return
	}
	agentName, tail, ok := h.split(r.URL.Path)
	if !ok {
		writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no A2A agent at %s (the agents are at %s/{agent}: %s)", r.URL.Path, Prefix, strings.Join(h.svc.AgentNames(), ", ")))
		return
	}
	if tail == cardPath {
		h.card(w, r, agentName)
		return
	}
	owner := "local"
	if h.o.Owner != nil {
		if owner, ok = h.o.Owner(r); !ok {
			h.Unauthenticated(w, r)
			return
		}
	}
	if r.ContentLength > h.o.MaxBodyBytes {
		writeHTTPError(w, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", fmt.Sprintf("the request body exceeds %d bytes", h.o.MaxBodyBytes))
		return
	}
	who := caller{owner: owner, agent: agentName}
	if v, ok := r.URL.Query()[metaMode]; ok && len(v) > 0 {
		who.mode = &v[0]
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
	// A body that grows past the bound while read (no Content-Length)
	// fails to decode: a parse error, nothing applied.
	r.Body = http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes)
	switch {
	case tail == "" || tail == "/":
		h.jsonrpc.ServeHTTP(w, r)
	case tail == restSuffix || strings.HasPrefix(tail, restSuffix+"/"):
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = strings.TrimPrefix(tail, restSuffix), ""
		r2.URL = &u
		h.rest.ServeHTTP(w, &r2)
	default:
		writeHTTPError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("no A2A route %s %s (JSON-RPC is POST %s/%s; HTTP+JSON is under %s/%s%s)", r.Method, r.URL.Path, Prefix, agentName, Prefix, agentName, restSuffix))
	}
}

// split reads /a2a/{agent}{tail}; false when the path is not under the
// prefix or names no configured agent.
func (h *Handler) split(path string) (agentName, tail string, ok bool) {
	rest, found := strings.CutPrefix(path, Prefix+"/")
	if !found {
		return "", "", false
	}
	agentName, tail = rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		agentName, tail = rest[:i], rest[i:]
	}
	for _, n := range h.svc.AgentNames() {
		if n == agentName {
			return agentName, tail, true
		}
	}
	return "", "", false
}

// Unauthenticated answers a request without a valid credential: 401 with
// a WWW-Authenticate challenge and the protocol's error body. An agent
// card is public, so a request for one is answered with the card.
func (h *Handler) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == RootCardPath {
		h.card(w, r, sessions.DefaultAgent)
		return
	}
	if agentName, tail, ok := h.split(r.URL.Path); ok && tail == cardPath {
		h.card(w, r, agentName)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="rein"`)
	writeHTTPError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "a valid bearer token is required (Authorization: Bearer TOKEN)")
}

// card answers an agent's card. Its URLs are absolute, built from the
// request's host, so a card fetched through any address points back at
// that address.
func (h *Handler) card(w http.ResponseWriter, r *http.Request, agentName string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeHTTPError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "an agent card is read with GET")
		return
	}
	base := origin(r) + Prefix + "/" + agentName
	desc := h.o.Agents[agentName]
	if desc == "" {
		desc = fmt.Sprintf("The Rein agent %q: send it a message to start a task; tasks stream, can be cancelled exactly, and ask for tool confirmations with INPUT_REQUIRED.", agentName)
	}
	card := &a2a.AgentCard{
		Name:        agentName,
		Description: desc,
		Version:     "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{
			{URL: base, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version},
			{URL: base + restSuffix, ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: a2a.Version},
		},
		Capabilities: a2a.AgentCapabilities{
			Streaming: true,
			// Push notifications need a durable webhook outbox, which
			// Rein does not have yet: none rather than ones that a restart
			// loses.
			PushNotifications: false,
			Extensions: []a2a.AgentExtension{{
				URI:         ExtensionURI,
				Description: "Rein's additions: a message to a WORKING task is a note the run reads at its next step; a data part {\"confirmations\": [...]} answers an INPUT_REQUIRED task; updates carry rein_seq (their place in the session's log) and rein_step_restarted (drop that step's streamed text).",
			}},
		},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills: []a2a.AgentSkill{{
			ID: agentName, Name: agentName, Description: desc, Tags: []string{"rein", "agent"},
		}},
		SecuritySchemes: a2a.NamedSecuritySchemes{
			bearerScheme: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", Description: "a Rein token (rein serve --tokens)"},
		},
		SecurityRequirements: a2a.SecurityRequirementsOptions{{bearerScheme: a2a.SecuritySchemeScopes{}}},
	}
	b, err := json.Marshal(card)
	if err != nil {
		h.log.Error("encode agent card", "agent", agentName, "err", err)
		writeHTTPError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

// bearerScheme names the card's security scheme.
const bearerScheme a2a.SecuritySchemeName = "bearer"

// ExtensionURI names Rein's A2A extension on agent cards.
const ExtensionURI = "https://github.com/reinhq/rein/blob/main/docs/protocols.md#a2a"

// origin is scheme://host of the request as its client addressed it.
func origin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	// A TLS-terminating proxy says what its client used.
	if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
		scheme = p
	}
	return scheme + "://" + r.Host
}

// writeHTTPError answers outside a binding (no route, no credential) in
// the shape of the HTTP+JSON binding's errors (google.rpc.Status with an
// ErrorInfo), which a JSON-RPC client reports as the HTTP status.
func writeHTTPError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": status, "status": reason, "message": msg,
		"details": []any{map[string]any{
			"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org",
		}},
	}})
}

// Mounts are the adapter's places on a server (protocol.Mount): Prefix,
// and /.well-known for the default agent's card at RootCardPath. The
// server authenticates a request before the handler sees it; a request
// without a credential reaches Unauthenticated, which serves the cards
// (they are public) and refuses the rest. o.Owner and o.MaxBodyBytes are
// taken from what the server decided (protocol.RequestOf) unless set.
func Mounts(o Options) []protocol.Mount {
	if o.Owner == nil {
		o.Owner = func(r *http.Request) (string, bool) {
			req := protocol.RequestOf(r.Context())
			if req == nil {
				return "", false
			}
			return req.Owner, true
		}
	}
	h := New(o)
	return []protocol.Mount{
		{Name: "a2a", Prefix: Prefix, Adapter: h},
		{Name: "a2a", Prefix: path.Dir(RootCardPath), Adapter: h},
	}
}
