package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store/memory"
)

const appOrigin = "https://app.example.com"

// corsDo sends a request with an Origin (and, for a preflight, the
// Access-Control-Request-* headers a browser sends), without a token
// unless given.
func (s *stack) corsDo(method, path, origin, token string, preflightFor string) reply {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if preflightFor != "" {
		req.Header.Set("Access-Control-Request-Method", preflightFor)
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// corsHeaders returns the answer's Access-Control-* headers.
func corsHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = strings.Join(v, ", ")
		}
	}
	return out
}

// pathOf makes a concrete path of a route pattern.
func pathOf(pattern string) string {
	return strings.NewReplacer("{id}", "ses_x", "{run_id}", "run_x").Replace(pattern)
}

// TestCORSPreflight: with an allowed origin, a preflight of every route —
// without a token, on a server with tokens — answers 204 with what the
// browser needs; a disallowed origin gets no CORS header at all.
func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	s := configured(t, options{tokens: map[string]string{"tok": "alice"}}, func(c *server.Config) {
		c.CORSOrigins = []string{appOrigin, "http://localhost:5173"}
	}, nil)
	for _, rt := range s.srv.Routes() {
		r := s.corsDo("OPTIONS", pathOf(rt.Path), appOrigin, "", rt.Method)
		h := r.header
		if r.status != 204 {
			t.Fatalf("preflight of %s %s: %d %s", rt.Method, rt.Path, r.status, r.body)
		}
		if h.Get("Access-Control-Allow-Origin") != appOrigin {
			t.Fatalf("preflight of %s: Allow-Origin %q", rt.Path, h.Get("Access-Control-Allow-Origin"))
		}
		if !strings.Contains(h.Get("Access-Control-Allow-Methods"), rt.Method) {
			t.Fatalf("preflight of %s %s: Allow-Methods %q", rt.Method, rt.Path, h.Get("Access-Control-Allow-Methods"))
		}
		for _, want := range []string{"Authorization", "Content-Type", "Last-Event-ID"} {
			if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
				t.Fatalf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
			}
		}
		if h.Get("Access-Control-Max-Age") == "" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Fatalf("preflight headers: %v", h)
		}
	}
	// The other allowed origin gets its own origin back.
	if r := s.corsDo("OPTIONS", "/api/sessions", "http://localhost:5173", "", "POST"); r.header.Get("Access-Control-Allow-Origin") != "http://localhost:5173" {
		t.Fatalf("second origin: %v", r.header)
	}
	for _, origin := range []string{"https://evil.example.com", "https://app.example.com.evil.example", "http://app.example.com", "null"} {
		r := s.corsDo("OPTIONS", "/api/sessions", origin, "", "POST")
		if got := corsHeaders(r.header); len(got) != 0 {
			t.Fatalf("disallowed origin %s got CORS headers %v", origin, got)
		}
	}
}

// TestCORSActualRequests: answers to an allowed origin — successes and
// errors alike, so a page can read a 401 — carry Allow-Origin and expose
// X-Request-Id; a disallowed origin's answers carry no CORS header.
func TestCORSActualRequests(t *testing.T) {
	t.Parallel()
	s := configured(t, options{tokens: map[string]string{"tok": "alice"}}, func(c *server.Config) {
		c.CORSOrigins = []string{appOrigin}
	}, nil)
	for _, c := range []struct {
		token  string
		status int
	}{{"tok", 200}, {"", 401}} {
		r := s.corsDo("GET", "/api/sessions", appOrigin, c.token, "")
		if r.status != c.status || r.header.Get("Access-Control-Allow-Origin") != appOrigin ||
			!strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "X-Request-Id") {
			t.Fatalf("allowed origin, token %q: %d %v", c.token, r.status, r.header)
		}
	}
	r := s.corsDo("GET", "/api/sessions", "https://evil.example.com", "tok", "")
	if got := corsHeaders(r.header); r.status != 200 || len(got) != 0 {
		t.Fatalf("disallowed origin: %d, CORS headers %v", r.status, got)
	}
}

// TestCORSOff: without CORSOrigins no answer has a CORS header, and an
// OPTIONS request is no preflight: it is authenticated and routed like
// any other request.
func TestCORSOff(t *testing.T) {
	t.Parallel()
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})
	r := s.corsDo("OPTIONS", "/api/sessions", appOrigin, "", "POST")
	if got := corsHeaders(r.header); r.status != 401 || len(got) != 0 {
		t.Fatalf("preflight with CORS off: %d %v", r.status, got)
	}
	r = s.corsDo("GET", "/api/sessions", appOrigin, "tok", "")
	if got := corsHeaders(r.header); r.status != 200 || len(got) != 0 || r.header.Get("Vary") != "" {
		t.Fatalf("GET with CORS off: %d %v", r.status, r.header)
	}
}

// TestCORSOrigins: the configured origins are checked when the server is
// built — "*" needs tokens — and compared in the form browsers send.
func TestCORSOrigins(t *testing.T) {
	t.Parallel()
	st := memory.New()
	defer st.Close()
	svc, _, err := assemble(options{store: st}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for _, c := range []struct {
		origins []string
		tokens  map[string]string
		wantErr string
	}{
		{[]string{"*"}, nil, "needs tokens"},
		{[]string{"https://app.example.com/"}, nil, "path"},
		{[]string{"app.example.com"}, nil, "scheme"},
		{[]string{"ftp://app.example.com"}, nil, "scheme"},
		{[]string{"https://user@app.example.com"}, nil, "user"},
		{[]string{"https://app.example.com?x=1"}, nil, "query"},
		{[]string{"https://app.example.com:99999"}, nil, "port"},
		{[]string{"https://"}, nil, "host"},
	} {
		_, err := server.New(server.Config{Service: svc, Tokens: c.tokens, CORSOrigins: c.origins})
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Fatalf("origins %q: err %v, want one about %q", c.origins, err, c.wantErr)
		}
	}

	// "*" with tokens allows any origin; a configured origin in another
	// case or with its default port matches what browsers send.
	s := configured(t, options{tokens: map[string]string{"tok": "alice"}}, func(c *server.Config) {
		c.CORSOrigins = []string{"*"}
	}, nil)
	if r := s.corsDo("OPTIONS", "/api/sessions", "https://anything.example", "", "GET"); r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://anything.example" {
		t.Fatalf("*: %d %v", r.status, r.header)
	}
	s = configured(t, options{}, func(c *server.Config) {
		c.CORSOrigins = []string{"HTTPS://App.Example.com:443"}
	}, nil)
	if r := s.corsDo("GET", "/api/sessions", appOrigin, "", ""); r.header.Get("Access-Control-Allow-Origin") != appOrigin {
		t.Fatalf("normalized origin: %v", r.header)
	}
}
