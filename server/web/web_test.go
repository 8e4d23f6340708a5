package web_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/reinhq/rein/server/web"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

// TestServesConsole: / is the page, its assets are under /console/ with
// their types and the page's security headers; anything else is the API's
// JSON 404.
func TestServesConsole(t *testing.T) {
	h := web.Handler()
	for path, ct := range map[string]string{
		"/":                    "text/html; charset=utf-8",
		"/console/console.js":  "text/javascript; charset=utf-8",
		"/console/console.css": "text/css; charset=utf-8",
	} {
		res := get(t, h, "GET", path)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != ct || len(body) == 0 {
			t.Errorf("GET %s: %d %q, %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
		if head := get(t, h, "HEAD", path); head.StatusCode != 200 || head.Header.Get("Content-Length") == "" {
			t.Errorf("HEAD %s: %d, Content-Length %q", path, head.StatusCode, head.Header.Get("Content-Length"))
		}
	}
	for _, path := range []string{"/console/", "/console/missing.js", "/console/../web.go", "/index.html", "/console/index.html/x"} {
		res := get(t, h, "GET", path)
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); res.StatusCode != 404 || err != nil || body.Error.Code != "not_found" {
			t.Errorf("GET %s: %d %v %+v, want the JSON 404", path, res.StatusCode, err, body)
		}
	}
}

// TestAssetsAreSelfContained: the console loads nothing from elsewhere (no
// CDN, no external font) and its script never turns data into HTML.
func TestAssetsAreSelfContained(t *testing.T) {
	assets := web.Assets()
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?(https?:|//)`)
	htmlSinks := regexp.MustCompile(`\.(innerHTML|outerHTML)\s*[+]?=|insertAdjacentHTML|document\.write|\beval\(|new Function\(|setTimeout\(\s*['"]`)
	n := 0
	err := fs.WalkDir(assets, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s refers to something outside the binary: %q", path, m)
		}
		if strings.HasSuffix(path, ".js") {
			if m := htmlSinks.Find(b); m != nil {
				t.Errorf("%s uses an HTML sink: %q (render data with textContent)", path, m)
			}
		}
		if strings.HasSuffix(path, ".html") && regexp.MustCompile(`(?i)<script>|\son[a-z]+=|style=`).Match(b) {
			t.Errorf("%s has inline script, handler or style (the CSP forbids them)", path)
		}
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("walked %d assets: %v", n, err)
	}
}
