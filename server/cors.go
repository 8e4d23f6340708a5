package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// corsMaxAge is how long a browser may cache a preflight's answer, in
// seconds: long enough to spare a round trip per request, short enough
// that a changed origin list takes effect within minutes.
const corsMaxAge = 600

// The headers a cross-origin page may send (the API's own: a bearer token,
// a JSON body, a stream's resume cursor, the caller's request id) and the
// ones it may read beyond the always-readable few.
const (
	corsAllowHeaders  = "Authorization, Content-Type, Last-Event-ID, X-Request-Id"
	corsExposeHeaders = "X-Request-Id, Retry-After, WWW-Authenticate"
)

// corsPolicy lets web pages served from other origins call the API
// (docs/api.md Cross-origin requests). Rein authenticates with bearer
// tokens, never cookies, so a page can only act with a token its user gave
// it; the policy decides which pages' browsers may read the answers.
type corsPolicy struct {
	anyOrigin bool
	origins   map[string]bool
}

// newCORS checks the configured origins. None is nil: CORS is off and no
// answer carries a CORS header. "*" allows every origin, but only when
// tokens are configured: in single-user mode a request needs no token, so
// "*" would let every web page the user opens read and drive the server.
func newCORS(origins []string, singleUser bool) (*corsPolicy, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	p := &corsPolicy{origins: map[string]bool{}}
	for _, o := range origins {
		if o == "*" {
			if singleUser {
				return nil, fmt.Errorf(`server: CORS origin "*" needs tokens: without them any web page the user opens could read and drive the server; list the origins that may (e.g. https://app.example.com)`)
			}
			p.anyOrigin = true
			continue
		}
		norm, err := normalizeOrigin(o)
		if err != nil {
			return nil, err
		}
		p.origins[norm] = true
	}
	return p, nil
}

// normalizeOrigin checks that o is an origin as browsers send it —
// scheme://host[:port], nothing after — and returns it lower-cased without
// a default port, the form the Origin header has.
func normalizeOrigin(o string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("server: CORS origin %q: %s; an origin is scheme://host[:port], e.g. https://app.example.com or http://localhost:5173", o, why)
	}
	u, err := url.Parse(o)
	if err != nil {
		return bad("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("the scheme must be http or https")
	case u.Host == "" || u.Opaque != "":
		return bad("it has no host")
	case u.User != nil:
		return bad("it must not carry user information")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(o, "#"):
		return bad("it must not have a path (not even a trailing /), query or fragment")
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad("the port must be a number from 1 to 65535")
		}
		if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
			host = strings.TrimSuffix(host, ":"+port)
		}
	}
	return u.Scheme + "://" + host, nil
}

func (p *corsPolicy) allows(origin string) bool {
	if origin == "" {
		return false
	}
	return p.anyOrigin || p.origins[origin]
}

// cors sets the CORS headers of the answer to r and answers a preflight
// itself, reporting whether it did. It runs before authentication: a
// browser's preflight never carries the token, and its answer says only
// what the API accepts, the same for every path, so it reveals nothing
// about routes or sessions. An origin that is not allowed gets no CORS
// header at all, which the browser reads as a refusal.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	p := s.corsPolicy
	if p == nil {
		return false
	}
	h := w.Header()
	// The answer depends on Origin whether or not this request has one:
	// a cache must not serve it to a request with another.
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
	allowed := p.allows(origin)
	if allowed {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	if !preflight {
		if allowed {
			h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		}
		return false
	}
	if allowed {
		h.Set("Access-Control-Allow-Methods", s.corsMethods())
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		h.Set("Access-Control-Max-Age", strconv.Itoa(corsMaxAge))
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// corsMethods lists the methods of the API's routes, in a fixed order.
func (s *Server) corsMethods() string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == http.MethodHead || slices.ContainsFunc(s.routes, func(r Route) bool { return r.Method == m }) {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}
