package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/memory"
)

// echoAdapter answers with what the server told it: the owner, and
// whether a stream could open.
type echoAdapter struct{ mux *http.ServeMux }

func newEchoAdapter() *echoAdapter {
	a := &echoAdapter{mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /x/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		req := protocol.RequestOf(r.Context())
		_, release, err := req.OpenStream()
		if err != nil {
			http.Error(w, "no stream: "+err.Error(), http.StatusTooManyRequests)
			return
		}
		defer release()
		io.WriteString(w, "owner="+req.Owner)
	})
	return a
}

func (a *echoAdapter) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func (a *echoAdapter) Unauthenticated(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "protocol says: who are you", http.StatusUnauthorized)
}

// TestProtocolMount: a mounted adapter gets the requests under its prefix
// with their owner (from a bearer token or x-api-key), answers a request
// without a valid token in its own format, and is counted in the metrics
// under its route pattern.
func TestProtocolMount(t *testing.T) {
	ts := reintest.NewServer(t, reintest.ServerOptions{
		Script: "testdata/script.yaml",
		Tokens: map[string]string{alice: "alice"},
		Protocols: func(*sessions.Service) []protocol.Mount {
			return []protocol.Mount{{Name: "x", Prefix: "/x", Adapter: newEchoAdapter()}}
		},
	})
	get := func(path string, h map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := ts.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, h := range []map[string]string{{"Authorization": "Bearer " + alice}, {"X-Api-Key": alice}} {
		if code, body := get("/x/things/1", h); code != 200 || body != "owner=alice" {
			t.Fatalf("%v: %d %s", h, code, body)
		}
	}
	for _, h := range []map[string]string{nil, {"X-Api-Key": "nope"}, {"Authorization": "Bearer nope", "X-Api-Key": alice}} {
		if code, body := get("/x/things/1", h); code != 401 || !strings.Contains(body, "protocol says") {
			t.Fatalf("%v: %d %s", h, code, body)
		}
	}
	// /xy is not under /x.
	if code, body := get("/xy", map[string]string{"Authorization": "Bearer " + alice}); code != 404 || strings.Contains(body, "owner=") {
		t.Fatalf("/xy: %d %s", code, body)
	}
	_, metrics := get("/metrics", nil)
	if !strings.Contains(metrics, `rein_http_requests_total{code="200",method="GET",route="/x/things/{id}"} 2`) {
		t.Fatalf("the adapter's requests are not counted under its route:\n%s", metrics)
	}
	// Once the server closes its streams, an adapter's stream is refused.
	if err := ts.Handler.Close(); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/x/things/1", map[string]string{"Authorization": "Bearer " + alice}); code != 429 || !strings.Contains(body, "shutting down") {
		t.Fatalf("after Close: %d %s", code, body)
	}
}

// TestProtocolMountChecked: a mount must take one path segment of its
// own, not the server's.
func TestProtocolMountChecked(t *testing.T) {
	svc, err := reintest.Service("testdata/script.yaml", memory.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	a := newEchoAdapter()
	for _, mounts := range [][]protocol.Mount{
		{{Name: "api", Prefix: "/api", Adapter: a}},
		{{Name: "deep", Prefix: "/v1/x", Adapter: a}},
		{{Name: "slash", Prefix: "/v1/", Adapter: a}},
		{{Name: "none", Prefix: "/v1"}},
		{{Name: "a", Prefix: "/v1", Adapter: a}, {Name: "b", Prefix: "/v1", Adapter: a}},
	} {
		if _, err := server.New(server.Config{Service: svc, Protocols: mounts}); err == nil {
			t.Errorf("mounts %+v accepted", mounts)
		}
	}
}
