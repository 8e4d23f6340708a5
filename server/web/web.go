// Package web is Rein's web console (docs/console.md): a single page, served by
// `rein serve` at `/`, that lists sessions and shows and controls every
// run of one — streamed replies, stops by run id, queueing, notes,
// approvals, tool calls, subagents and run history.
//
// The console is plain HTML, CSS and JavaScript with no build step and no
// dependency, embedded in the binary (it works offline: no CDN, no
// external font). It talks to the server only through the public HTTP API
// of docs/api.md, exactly as any other client would; nothing here is a
// private endpoint. See docs/console.md.
package web

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is the path under which the console's assets are served.
const Prefix = "/console/"

// csp allows the page its own scripts, styles and API calls and nothing
// else: no inline script or handler runs, so model output that slipped
// into the DOM as HTML still could not execute (the console never does
// that: it renders data with textContent).
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Assets is the console's files: index.html and what it loads.
func Assets() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// Handler serves the console: GET / is index.html and GET /console/NAME
// is an asset. It needs no token (the API calls the page makes do, when
// the server has tokens). Anything else answers 404.
func Handler() http.Handler {
	assets := Assets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := ""
		switch {
		case r.URL.Path == "/":
			name = "index.html"
		case strings.HasPrefix(r.URL.Path, Prefix):
			name = path.Clean(strings.TrimPrefix(r.URL.Path, Prefix))
		}
		var body []byte
		err := fs.ErrNotExist
		if name != "" && name != "." && fs.ValidPath(name) {
			body, err = fs.ReadFile(assets, name)
		}
		if err != nil {
			notFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType(name))
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// Revalidate every load, so a new binary's console is used at once.
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
	})
}

// notFound answers like the API's unknown routes: the JSON error body.
func notFound(w http.ResponseWriter, r *http.Request) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{
		"code": "not_found", "message": "no console file at " + r.URL.Path}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(append(body, '\n'))
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}
