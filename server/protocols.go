package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/reinhq/rein/protocol"
)

// reservedPrefixes are the server's own paths, which no protocol may take.
var reservedPrefixes = []string{"/api", "/console", "/healthz", "/readyz", "/metrics"}

// checkMounts refuses a protocol mount whose prefix is malformed, taken
// twice, or one of the server's own.
func checkMounts(mounts []protocol.Mount) error {
	seen := map[string]bool{}
	for _, m := range mounts {
		p := m.Prefix
		if m.Adapter == nil {
			return fmt.Errorf("server: protocol %q has no adapter", m.Name)
		}
		if !strings.HasPrefix(p, "/") || len(p) < 2 || strings.HasSuffix(p, "/") || strings.Count(p, "/") != 1 {
			return fmt.Errorf("server: protocol %q: prefix %q must be one path segment such as /v1", m.Name, p)
		}
		for _, r := range reservedPrefixes {
			if p == r {
				return fmt.Errorf("server: protocol %q: prefix %s is the server's own", m.Name, p)
			}
		}
		if seen[p] {
			return fmt.Errorf("server: two protocols share the prefix %s", p)
		}
		seen[p] = true
	}
	return nil
}

// mountOf returns the protocol that owns path, or nil.
func (s *Server) mountOf(path string) *protocol.Mount {
	for i := range s.protocols {
		p := s.protocols[i].Prefix
		if path == p || strings.HasPrefix(path, p) && path[len(p)] == '/' {
			return &s.protocols[i]
		}
	}
	return nil
}

// serveProtocol authenticates a request under a protocol's prefix (the
// token from Authorization: Bearer, or from x-api-key, where SDKs of some
// protocols put it) and hands it to the adapter with what the adapter may
// not decide itself. It returns the route the request is counted under:
// the adapter's pattern when its mux matched one (low cardinality: the
// path with its ids as wildcards), else the prefix.
func (s *Server) serveProtocol(w *statusWriter, r *http.Request, m *protocol.Mount) string {
	info := infoOf(r.Context())
	owner, ok := s.auth.owner(r.Header.Get("Authorization"))
	if !ok && r.Header.Get("Authorization") == "" {
		if key := r.Header.Get("X-Api-Key"); key != "" {
			owner, ok = s.auth.owner("Bearer " + key)
		}
	}
	if !ok {
		info.errCode = "unauthenticated"
		m.Adapter.Unauthenticated(w, r)
		return m.Prefix + " (unauthenticated)"
	}
	info.owner = owner
	req := &protocol.Request{
		Owner:        owner,
		MaxBodyBytes: MaxBodyBytes,
		OpenStream: func() (context.Context, func(), error) {
			info.stream = true
			if err := s.admitStream(owner); err != nil {
				return nil, nil, err
			}
			s.metrics.sseSubscribers.Inc()
			released := false
			return s.streams, func() {
				if !released {
					released = true
					s.metrics.sseSubscribers.Dec()
					s.releaseStream(owner)
				}
			}, nil
		},
	}
	r = r.WithContext(protocol.WithRequest(r.Context(), req))
	m.Adapter.ServeHTTP(w, r)
	if p := r.Pattern; p != "" {
		return p[strings.IndexByte(p, ' ')+1:]
	}
	return m.Prefix
}
