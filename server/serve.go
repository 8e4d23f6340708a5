package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// drainSlack is how long Serve's drain may run past DrainTimeout: after
// the timeout the remaining runs are cancelled, which ends them in
// microseconds, but their final writes (run_completed, the transcript)
// still need the store.
const drainSlack = 30 * time.Second

// Serve starts the service (resuming queued runs and recovering lost
// ones), serves HTTP on ln — HTTPS only when Config has a TLS certificate —
// until ctx is done, then shuts down gracefully (docs/api.md Shutdown):
//
//  1. stop admitting: new sessions, messages and supplements get 503
//     unavailable and /readyz fails (reads and stops keep working);
//  2. interrupt running runs cooperatively, and cancel those still running
//     after DrainTimeout; queued runs stay queued in the store for the
//     next start;
//  3. wait until every ended run's session.run_completed is in the log,
//     and flush the store;
//  4. end event streams after a last read of the log, so their clients
//     see those completions;
//  5. stop the HTTP server, waiting up to ShutdownTimeout for requests
//     in flight.
//
// Serve owns the service's lifecycle from Start to the end of its drain;
// the caller closes the store afterwards. It returns nil after a clean
// shutdown, the drain's error if the drain could not finish cleanly, or
// the error that stopped the listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// A signal during startup still gets the graceful sequence below, so
	// starting does not hang on ctx.
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	err := s.svc.Start(startCtx)
	cancel()
	if err != nil {
		ln.Close()
		return fmt.Errorf("server: start the sessions service: %w", err)
	}
	ln = guardAccept(ln, s.log)
	hs := &http.Server{
		Handler: s,
		// ReadTimeout bounds reading a request, its body included, and
		// no more: net/http lifts the connection's read deadline once the
		// body is read (HTTP/1.1) or bounds only the body (HTTP/2), so an
		// event stream outlives it (TestStreamOutlivesReadTimeout). There
		// is no WriteTimeout: it would cut streams; each stream write has
		// a deadline of its own instead.
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       s.readTimeout,
		IdleTimeout:       s.idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	if s.certs != nil {
		// HTTPS only: a plain-HTTP request on this listener is answered
		// 400 by net/http and goes no further.
		hs.TLSConfig = s.certs.tlsConfig(s.log)
		go func() { served <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- hs.Serve(ln) }()
	}

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining runs", "drain_timeout", s.drain)
	case serveErr = <-served:
		s.log.Error("listener failed; shutting down", "err", serveErr)
	}

	dctx, cancel := context.WithTimeout(context.Background(), s.drain+drainSlack)
	drainErr := s.svc.Drain(dctx, s.drain)
	cancel()
	if drainErr != nil {
		s.log.Error("drain did not finish cleanly", "err", drainErr)
	}
	_ = s.Close()

	sctx, cancel := context.WithTimeout(context.Background(), s.shutdown)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("requests still in flight at shutdown; closing their connections", "err", err)
		_ = hs.Close()
	}
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	s.log.Info("shut down")
	return errors.Join(serveErr, drainErr)
}
