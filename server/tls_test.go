package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store/memory"
)

// selfSigned makes a certificate for 127.0.0.1 with the serial number,
// written as PEM files in dir; it returns the certificate.
func selfSigned(t *testing.T, dir string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "rein test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The key first: a reload that sees a new certificate beside an old
	// key fails, and the server keeps the old pair until both are new.
	writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", keyDER)
	writePEM(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", der)
	return cert
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	// Written beside and renamed, as certificate tools do, so a reader
	// never sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// httpsClient trusts the certificates and opens a new connection per
// request, so every request makes a handshake.
func httpsClient(certs ...*x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return &http.Client{Timeout: testTimeout, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
	}}
}

// TestTLS: with a certificate configured, Serve answers HTTPS to a client
// that trusts it, refuses plain HTTP, and serves a renewed certificate
// from the next handshake on.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := selfSigned(t, dir, 1)
	sv := serveConfigured(t, options{}, "https", func(c *server.Config) {
		c.TLSCertFile, c.TLSKeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	})

	get := func(c *http.Client, url string) *http.Response {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		resp.Body.Close()
		return resp
	}
	resp := get(httpsClient(first), sv.url+"/healthz")
	if resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 1 {
		t.Fatalf("https: %d %+v", resp.StatusCode, resp.TLS)
	}

	// Plain HTTP to the same port gets no answer of the API: the TLS
	// layer answers 400 (or the connection just ends).
	plain := "http://" + strings.TrimPrefix(sv.url, "https://") + "/healthz"
	if resp, err := (&http.Client{Timeout: testTimeout}).Get(plain); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Request-Id") != "" {
			t.Fatalf("plain HTTP to the TLS port: %d %v", resp.StatusCode, resp.Header)
		}
	}
	// A client that does not trust the certificate fails its handshake.
	if _, err := httpsClient().Get(sv.url + "/healthz"); err == nil {
		t.Fatal("a client without the certificate in its roots connected")
	}

	second := selfSigned(t, dir, 2)
	resp = get(httpsClient(first, second), sv.url+"/healthz")
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 2 {
		t.Fatalf("after renewal the server presents serial %d, want 2", got)
	}

	// Broken files: the server keeps serving the last good pair.
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	resp = get(httpsClient(first, second), sv.url+"/healthz")
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); resp.StatusCode != 200 || got != 2 {
		t.Fatalf("with a broken certificate file: %d, serial %d", resp.StatusCode, got)
	}
}

// TestTLSConfig: a certificate without its key (or the reverse) and a pair
// that does not load are refused by New.
func TestTLSConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	selfSigned(t, dir, 1)
	st := memory.New()
	defer st.Close()
	svc, _, err := assemble(options{store: st}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, c := range []struct{ cert, key, want string }{
		{cert, "", "both"},
		{"", key, "both"},
		{cert, filepath.Join(dir, "missing.pem"), "missing.pem"},
		{key, cert, "TLS certificate"},
	} {
		if _, err := server.New(server.Config{Service: svc, TLSCertFile: c.cert, TLSKeyFile: c.key}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("cert %q key %q: %v, want an error about %q", c.cert, c.key, err, c.want)
		}
	}
	if _, err := server.New(server.Config{Service: svc, TLSCertFile: cert, TLSKeyFile: key}); err != nil {
		t.Fatal(err)
	}
}
