package protocol

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// A route answers its method and path; another method on a served path is
// a miss told otherMethod, a path no route serves a plain miss; List
// names every route with the prefix.
func TestRoutes(t *testing.T) {
	rt := NewRoutes("/p")
	rt.Handle("GET /things/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte(r.PathValue("id")))
	})
	rt.Handle("POST /things", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	if got := rt.List(); !slices.Equal(got, []string{"GET /p/things/{id}", "POST /p/things"}) {
		t.Fatalf("List = %q", got)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/p/things/7", 200, "7"},
		{"POST", "/p/things", 201, ""},
		{"DELETE", "/p/things/7", 405, "other"},
		{"GET", "/p/things", 405, "other"},
		{"GET", "/p/nothing", 404, "none"},
		{"GET", "/things/7", 404, "none"},
	} {
		w := httptest.NewRecorder()
		rt.Serve(w, httptest.NewRequest(tc.method, tc.path, nil), func(w http.ResponseWriter, _ *http.Request, other bool) {
			if other {
				w.WriteHeader(405)
				_, _ = w.Write([]byte("other"))
				return
			}
			w.WriteHeader(404)
			_, _ = w.Write([]byte("none"))
		})
		if w.Code != tc.status || w.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, w.Code, w.Body.String(), tc.status, tc.body)
		}
	}
}
