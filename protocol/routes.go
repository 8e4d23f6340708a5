package protocol

import (
	"net/http"
	"strings"
)

// Routes is an adapter's table of routes under its prefix: the patterns it
// answers (which the isolation tests must cover, all of them) and the
// dispatch, with the one decision every adapter makes alike for a request
// no route matches — whether another method is served at that path (a
// 405) or nothing is (a 404) — left to the adapter's own error format.
type Routes struct {
	prefix string
	mux    *http.ServeMux
	list   []string
}

// NewRoutes returns an empty table for routes under prefix.
func NewRoutes(prefix string) *Routes {
	return &Routes{prefix: prefix, mux: http.NewServeMux()}
}

// Handle adds a route: pattern is "METHOD /path", the path relative to the
// prefix, with http.ServeMux's wildcards.
func (t *Routes) Handle(pattern string, f http.HandlerFunc) {
	method, path, _ := strings.Cut(pattern, " ")
	full := method + " " + t.prefix + path
	t.list = append(t.list, full)
	t.mux.HandleFunc(full, f)
}

// List is every route, as "METHOD /prefix/path" patterns, in the order
// they were added.
func (t *Routes) List() []string { return append([]string(nil), t.list...) }

// methods are those an adapter's routes use.
var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Serve answers r by its route; a request no route matches goes to miss,
// told whether the path is served for another method.
func (t *Routes) Serve(w http.ResponseWriter, r *http.Request, miss func(w http.ResponseWriter, r *http.Request, otherMethod bool)) {
	if _, pattern := t.mux.Handler(r); pattern != "" {
		t.mux.ServeHTTP(w, r)
		return
	}
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		alt := *r
		alt.Method = m
		if _, p := t.mux.Handler(&alt); p != "" {
			miss(w, r, true)
			return
		}
	}
	miss(w, r, false)
}
