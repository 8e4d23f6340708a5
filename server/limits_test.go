package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/server"
)

// waitStreams waits until the server counts n open event streams
// (rein_sse_subscribers on /metrics): a closed stream's slot is free once
// the server has let go of it, which is not when the client hung up.
func waitStreams(t *testing.T, s *stack, n int) {
	t.Helper()
	want := fmt.Sprintf("rein_sse_subscribers %d\n", n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.do("GET", "/metrics", "", nil)
		if strings.Contains(string(r.body), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not count %d open streams after 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStreamCapPerOwner: an owner's stream beyond MaxStreamsPerOwner is
// answered 429 too_many_requests with Retry-After (as openapi.yaml
// documents); closing one of the owner's streams admits the next; another
// owner is unaffected; a missing session is still 404, not 429.
func TestStreamCapPerOwner(t *testing.T) {
	t.Parallel()
	s := configured(t, options{tokens: map[string]string{"ta": "alice", "tb": "bob"}}, func(c *server.Config) {
		c.MaxStreamsPerOwner = 2
	}, nil)
	api := loadOpenAPI(t)
	a1, a2 := s.createSession("ta"), s.createSession("ta")
	b1 := s.createSession("tb")

	first := s.stream("ta", a1, "", "")
	s.stream("ta", a2, "", "")
	refused := func() {
		t.Helper()
		resp, cancel := s.openStream("ta", a1, "", "")
		defer cancel()
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r := reply{status: resp.StatusCode, header: resp.Header, body: b}
		if r.status != 429 || r.errorCode(t) != string(rein.CodeTooManyRequests) || r.header.Get("Retry-After") == "" {
			t.Fatalf("third stream of alice: %d Retry-After=%q %s", r.status, r.header.Get("Retry-After"), r.body)
		}
		if msg := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "2 open event streams") || !strings.Contains(msg, "close") {
			t.Fatalf("the message does not say the limit and what to do: %q", msg)
		}
		api.check(t, "GET", "/api/sessions/{id}/events/stream", r)
	}
	refused()
	if r := s.do("GET", "/api/sessions/ses_missing/events/stream", "ta", nil); r.status != 404 {
		t.Fatalf("a missing session at the cap: %d %s", r.status, r.body)
	}
	// Bob's count is his own.
	bob := s.stream("tb", b1, "", "")
	waitStreams(t, s, 3)
	bob.close()
	waitStreams(t, s, 2)

	first.close()
	waitStreams(t, s, 1)
	third := s.stream("ta", a1, "", "")
	refused()

	// The streams work: a supplement reaches the newest one.
	s.results("ta", a1, ev("user.supplement", map[string]any{"text": "hello"}))
	third.until(is(rein.EventUserSupplement, ""))
}

// TestStreamOutlivesReadTimeout: ReadTimeout bounds reading a request, not
// answering it. A stream served by Serve with a short ReadTimeout stays up
// several times longer (its heartbeats count the time) and still delivers
// a new event, over HTTP/1.1 and over HTTP/2 (TLS).
func TestStreamOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	const readTimeout = 200 * time.Millisecond
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			scheme, client := "http", &http.Client{}
			var adjustTLS func(*server.Config)
			if proto == "HTTP/2.0" {
				dir := t.TempDir()
				cert := selfSigned(t, dir, 1)
				pool := x509.NewCertPool()
				pool.AddCert(cert)
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
				defer tr.CloseIdleConnections()
				scheme, client = "https", &http.Client{Transport: tr}
				adjustTLS = func(c *server.Config) {
					c.TLSCertFile, c.TLSKeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
				}
			}
			sv := serveConfigured(t, options{heartbeat: 40 * time.Millisecond}, scheme, func(c *server.Config) {
				c.ReadTimeout = readTimeout
				if adjustTLS != nil {
					adjustTLS(c)
				}
			})
			post := func(path, body string) {
				t.Helper()
				resp, err := client.Post(sv.url+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					b, _ := io.ReadAll(resp.Body)
					t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
				}
			}
			var created struct{ ID string }
			resp, err := client.Post(sv.url+"/api/sessions", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			err = json.NewDecoder(resp.Body).Decode(&created)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", sv.url+"/api/sessions/"+created.ID+"/events/stream", nil)
			resp, err = client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.Proto != proto {
				t.Fatalf("stream: %d over %s, want 200 over %s", resp.StatusCode, resp.Proto, proto)
			}
			st := &sse{t: t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
			opened := time.Now()
			beats := 0
			for time.Since(opened) < 4*readTimeout {
				f, err := st.next()
				if err != nil {
					t.Fatalf("the stream ended %v after it opened (ReadTimeout %v), after %d heartbeats: %v", time.Since(opened), readTimeout, beats, err)
				}
				if f.comment != "" {
					beats++
				}
			}
			post("/api/sessions/"+created.ID+"/events", `{"events":[{"type":"user.supplement","payload":{"text":"still there?"}}]}`)
			st.until(is(rein.EventUserSupplement, ""))
			if beats < 4 {
				t.Fatalf("only %d heartbeats in %v", beats, 4*readTimeout)
			}
		})
	}
}

// TestReadTimeoutBoundsTheBody: a client that starts a request body and
// never finishes it is cut off after ReadTimeout with a 400 whose message
// names no address.
func TestReadTimeoutBoundsTheBody(t *testing.T) {
	t.Parallel()
	logs, logger := newLog()
	sv := serveConfigured(t, options{logger: logger}, "http", func(c *server.Config) {
		c.ReadTimeout = 200 * time.Millisecond
	})
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"metadata": {"slow": "`)) }()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", sv.url+"/api/sessions", pr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the stalled request got no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	if r.status != 400 || r.errorCode(t) != "invalid_argument" || strings.Contains(string(b), "127.0.0.1") {
		t.Fatalf("stalled body after %v: %d %s", time.Since(start), r.status, b)
	}
	if !strings.Contains(logs.String(), "i/o timeout") {
		t.Fatalf("the log lacks the read's cause:\n%s", logs.String())
	}
}
