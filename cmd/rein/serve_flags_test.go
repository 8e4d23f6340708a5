package main

// Tests of rein serve's log and of the flags that wire server and
// sessions options: each flag must reach the server that runs.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// tokensFile writes a tokens file and returns its path.
func tokensFile(t *testing.T, lines string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeLogFormats: --log-format json writes one JSON object a line,
// --log-level warn leaves info records out; short tokens are warned about
// by owner and length, never by their text.
func TestServeLogFormats(t *testing.T) {
	tokens := tokensFile(t, "short-tok alice\nthis-one-is-long-enough-0123 bob\ntiny carol\n")
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--tokens", tokens, "--log-format", "json", "--log-level", "debug")
	c := client.New(s.url, client.WithToken("this-one-is-long-enough-0123"))
	if _, err := c.ListSessions(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Health(ctxT(t)); err != nil { // logged at debug
		t.Fatal(err)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	var warned []string
	levels := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(s.stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not a JSON record: %q", l)
		}
		levels[rec["level"].(string)] = true
		if strings.HasPrefix(rec["msg"].(string), "short token") {
			warned = append(warned, rec["owner"].(string)+"/"+jsonNumber(rec["length"]))
		}
	}
	if strings.Join(warned, ",") != "alice/9,carol/4" {
		t.Errorf("short-token warnings: %v", warned)
	}
	if !levels["DEBUG"] || !levels["INFO"] || !levels["WARN"] {
		t.Errorf("levels seen: %v", levels)
	}
	for _, secret := range []string{"short-tok", "tiny", "this-one-is-long-enough-0123"} {
		if strings.Contains(s.stderr.String(), secret) {
			t.Errorf("the log shows the token %q:\n%s", secret, s.stderr)
		}
	}

	// Each level keeps the records at least as important as itself, in
	// either format; the variables set them too.
	for _, c := range []struct {
		env   map[string]string
		args  []string
		count int
	}{
		{nil, nil, 3},
		{nil, []string{"--log-level", "debug"}, 4},
		{map[string]string{"REIN_LOG_LEVEL": "warn"}, nil, 2},
		{nil, []string{"--log-level", "error", "--log-format", "json"}, 1},
	} {
		f := newServeFlags(stdio{out: io.Discard, lookupEnv: fakeEnv(c.env)})
		if err := f.parse(c.args, stdio{lookupEnv: fakeEnv(c.env)}); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		l := f.logger(&b)
		l.Debug("d")
		l.Info("i")
		l.Warn("w")
		l.Error("e")
		out := strings.TrimSpace(b.String())
		if n := len(strings.Split(out, "\n")); n != c.count || (f.logFormat.val == "json") != strings.HasPrefix(out, "{") {
			t.Errorf("%v %v: %d records:\n%s", c.env, c.args, n, out)
		}
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// selfSignedPair writes a certificate for 127.0.0.1 and its key.
func selfSignedPair(t *testing.T) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rein test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

func TestServeTLS(t *testing.T) {
	certFile, keyFile, cert := selfSignedPair(t)
	s := startServe(t, map[string]string{"REIN_TLS_KEY": keyFile}, "--addr", "127.0.0.1:0", "--store", "memory:", "--tls-cert", certFile)
	if !strings.HasPrefix(s.url, "https://127.0.0.1:") {
		t.Fatalf("start-up url %s", s.url)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	if _, err := client.New(s.url, client.WithHTTPClient(hc)).ListSessions(ctxT(t)); err != nil {
		t.Fatalf("over HTTPS: %v", err)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"--tls-cert", certFile}, "rein: --tls-cert and --tls-key go together: give both (a PEM certificate and its key) to serve HTTPS, or neither"},
		{map[string]string{"REIN_TLS_KEY": keyFile}, nil, "rein: --tls-cert and REIN_TLS_KEY (--tls-key) go together"},
		{nil, []string{"--tls-cert", keyFile, "--tls-key", keyFile}, "rein: --tls-cert, --tls-key: TLS certificate " + keyFile + " and key " + keyFile + ": "},
		{nil, []string{"--cors-origin", "*"}, `rein: --cors-origin: CORS origin "*" needs tokens`},
		{nil, []string{"--cors-origin", "https://app.example.com/path"}, `rein: --cors-origin: CORS origin "https://app.example.com/path": `},
		{nil, []string{"--max-streams-per-owner", "0"}, `rein: --max-streams-per-owner "0": must be at least 1, e.g. 1000 (or negative for no cap)`},
		{nil, []string{"--retention", "-1h"}, `rein: --retention "-1h0m0s": must be a duration ≥ 0, e.g. 720h`},
		{map[string]string{"REIN_RETENTION": "a month"}, nil, `rein: REIN_RETENTION="a month" (--retention): not a duration`},
	} {
		code, _, stderr := run(t, "", c.env, append([]string{"serve", "--addr", "127.0.0.1:0", "--store", "memory:"}, c.args...)...)
		if code != exitUsage || !strings.HasPrefix(stderr, c.want) {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant %s", c.env, c.args, code, stderr, c.want)
		}
	}
}

func TestServeCORSAndStreamCap(t *testing.T) {
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--cors-origin", " https://app.example.com, http://localhost:5173", "--max-streams-per-owner", "1")
	ctx := ctxT(t)
	for origin, allowed := range map[string]bool{"https://app.example.com": true, "http://localhost:5173": true, "https://evil.example": false} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/api/sessions", nil)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Access-Control-Allow-Origin"); (got == origin) != allowed {
			t.Errorf("Origin %s: Access-Control-Allow-Origin %q", origin, got)
		}
	}
	c := client.New(s.url)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first := c.Stream(ctx, sess.ID, 0)
	defer first.Close()
	if _, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Next(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.url + "/api/sessions/" + sess.ID + "/events/stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second stream with --max-streams-per-owner 1: %s", resp.Status)
	}
	first.Close()
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
}

// TestServeRetention: with --retention an idle session is deleted by the
// server's sweeper, which logs each deletion.
func TestServeRetention(t *testing.T) {
	s := startServe(t, map[string]string{"REIN_RETENTION": "1s"}, "--addr", "127.0.0.1:0", "--store", "memory:")
	c := client.New(s.url)
	sess, err := c.CreateSession(ctxT(t), client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := s.stderr.waitFor(t, "session="+sess.ID+" age=")
	if !strings.Contains(out, `msg="deleted an idle session (retention)"`) {
		t.Fatalf("log:\n%s", out)
	}
	if _, err := c.GetSession(ctxT(t), sess.ID); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("after the sweep: %v", err)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
}

// TestServeTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, rein serve sends
// the spans of a request and of the run it admitted to that endpoint over
// OTLP/HTTP, at the latest when it shuts down.
func TestServeTracing(t *testing.T) {
	var mu sync.Mutex
	posts, bytes := 0, 0
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			posts++
			bytes += len(body)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	s := startServe(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}, "--addr", "127.0.0.1:0", "--store", "memory:")
	ctx := ctxT(t)
	c := client.New(s.url)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Stream(ctx, sess.ID, 0)
	defer st.Close()
	if _, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.Type == rein.EventRunCompleted {
			break
		}
	}
	st.Close()
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts == 0 || bytes == 0 {
		t.Fatalf("no spans reached the collector (%d posts, %d bytes)\n%s", posts, bytes, s.stderr)
	}
	if strings.Contains(s.stderr.String(), "flush traces") {
		t.Errorf("flushing the traces failed:\n%s", s.stderr)
	}
}

// TestServeAdmissionFlags: --max-runs-in-flight bounds the runs an
// instance holds: one more message is answered 503 with Retry-After.
func TestServeAdmissionFlags(t *testing.T) {
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--max-runs-in-flight", "1")
	ctx := ctxT(t)
	c := client.New(s.url)
	a, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, a.ID, client.Message{Text: "please sleep for 30 seconds"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SendMessage(ctx, b.ID, client.Message{Text: "hi"})
	if !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("a second run with --max-runs-in-flight 1: %v", err)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	code, _, errs := run(t, "", nil, "serve", "--max-runs-in-flight", "0")
	if code != exitUsage || !strings.Contains(errs, "--max-runs-in-flight") {
		t.Errorf("--max-runs-in-flight 0: exit %d, %q", code, errs)
	}
}

// TestServeConfigErrorsStartTheLine: a configuration file's problems are
// printed as FILE:LINE: reason at the start of a line, exit 2.
func TestServeConfigErrorsStartTheLine(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "rein.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  default:\n    tools: [\"sleep\", \"nosuch\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, "", nil, "serve", "--addr", "127.0.0.1:0", "--store", "memory:", "--config", cfg)
	if code != exitUsage || !strings.HasPrefix(errs, cfg+":3: ") || !strings.Contains(errs, "nosuch") {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
}

// TestServeProfiles: --pprof-addr serves Go's profiles on a listener of its
// own, not on the API's.
func TestServeProfiles(t *testing.T) {
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--pprof-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`msg="serving profiles".*url=(http://\S+)`).FindStringSubmatch(s.stderr.waitFor(t, "serving profiles"))
	if m == nil {
		t.Fatalf("no profiles url in:\n%s", s.stderr)
	}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(m[1] + "goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("goroutine profile: %d %.200s", code, body)
	}
	if code, _ := get(s.url + "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("the API's listener answers /debug/pprof/ with %d, want 404", code)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
}
