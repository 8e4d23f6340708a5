package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certFiles serves a TLS certificate and key from PEM files, and reads
// them again when either file changes, so a renewed certificate (certbot,
// cert-manager) is served from the next handshake on without a restart.
// A pair that fails to load — say the certificate was replaced and the
// key not yet — is logged once and the previous pair stays in service.
type certFiles struct {
	certFile, keyFile string

	mu    sync.Mutex
	pair  *tls.Certificate
	stamp [2]fileStamp // of the files as last read
}

// fileStamp tells one version of a file from another.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}
}

// loadCertFiles checks the configured pair: both files or neither, and a
// pair that loads. It returns nil when TLS is off.
func loadCertFiles(certFile, keyFile string) (*certFiles, error) {
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate file and a key file (Config.TLSCertFile, Config.TLSKeyFile), or neither")
	}
	c := &certFiles{certFile: certFile, keyFile: keyFile}
	c.stamp = [2]fileStamp{stampOf(certFile), stampOf(keyFile)}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server: TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	c.pair = &pair
	return c, nil
}

// certificate is tls.Config.GetCertificate's work. Two stat calls per
// handshake are cheap beside the handshake's own cryptography.
func (c *certFiles) certificate(log *slog.Logger) (*tls.Certificate, error) {
	now := [2]fileStamp{stampOf(c.certFile), stampOf(c.keyFile)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != c.stamp {
		c.stamp = now
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			log.Warn("TLS certificate files changed but do not load; still serving the previous certificate",
				"cert_file", c.certFile, "key_file", c.keyFile, "err", err)
		} else {
			c.pair = &pair
			log.Info("TLS certificate reloaded", "cert_file", c.certFile)
		}
	}
	return c.pair, nil
}

// tlsConfig is the server side of TLS: TLS 1.2 at least, Go's default
// cipher suites and curves; reloads are logged to log.
func (c *certFiles) tlsConfig(log *slog.Logger) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.certificate(log) },
	}
}
