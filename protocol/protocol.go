// Package protocol is the contract between Rein's HTTP server and the
// adapters of foreign wire protocols (protocol/anthropic for the Claude
// Managed Agents sessions API, and those that follow).
//
// It exists so that an adapter is mounted on the server's own listener,
// behind the server's own authentication, metrics, limits and shutdown,
// without importing the server: the server authenticates a request, finds
// its owner, and hands the adapter a Request that carries what the adapter
// may not decide for itself (who the caller is, whether one more event
// stream may open, when streams must end). The adapter answers in its
// protocol's format, including the answer to a request without a valid
// credential. Everything else an adapter does is a translation onto
// sessions.Service: the same calls the native API makes, and the same log
// read by cursor (docs/architecture.md).
package protocol

import (
	"context"
	"net/http"
)

// Adapter is a protocol's handler. The server calls ServeHTTP only for an
// authenticated request under the adapter's prefix, with a Request in its
// context (RequestOf).
type Adapter interface {
	http.Handler
	// Unauthenticated answers a request under the prefix that carries no
	// valid credential, in the protocol's own error format (status 401).
	Unauthenticated(w http.ResponseWriter, r *http.Request)
}

// Mount is an adapter and the path prefix it answers.
type Mount struct {
	// Name is how `rein serve --protocols` names it ("anthropic").
	Name string
	// Prefix is the path it owns, e.g. "/v1": the prefix itself and
	// everything under prefix + "/".
	Prefix string
	// Adapter answers the requests.
	Adapter Adapter
}

// Request is what the server decided about a request before handing it to
// an adapter.
type Request struct {
	// Owner is the authenticated owner.
	Owner string
	// MaxBodyBytes bounds a request body, as for the native API.
	MaxBodyBytes int64
	// OpenStream counts one more event stream of the owner in, as the
	// native API's streams are counted (a cap per owner; none once the
	// server is closing). It returns a context that ends when the server
	// closes its streams (the stream then writes what the log gained and
	// returns), and release, which the stream calls exactly once when it
	// ends. A refusal is a *rein.Error (too_many_requests, unavailable).
	OpenStream func() (closing context.Context, release func(), err error)
}

type requestKey struct{}

// WithRequest returns ctx carrying req (the server's side).
func WithRequest(ctx context.Context, req *Request) context.Context {
	return context.WithValue(ctx, requestKey{}, req)
}

// RequestOf returns the Request the server put in ctx, or nil outside a
// mounted adapter (a test serving an adapter directly).
func RequestOf(ctx context.Context) *Request {
	req, _ := ctx.Value(requestKey{}).(*Request)
	return req
}
