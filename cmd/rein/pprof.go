package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveProfiles serves Go's runtime profiles on addr (--pprof-addr) with a
// mux of its own, apart from the API: profiling a loaded server is how its
// CPU per event is found, and a profile is only trustworthy when taken of
// the server alone, not of a process that also runs the load. The caller has
// checked that addr is a loopback address. It returns once the listener is
// bound; the returned function closes it.
func serveProfiles(addr string, logger *slog.Logger) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, usagef("refusing --pprof-addr %s (bound to %s): profiles are only served on a loopback address", addr, ln.Addr())
	}
	// A CPU profile or trace runs for its ?seconds=, so no write timeout.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && err != http.ErrServerClosed {
			logger.Warn("profiles listener", "err", err)
		}
	}()
	logger.Info("serving profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() { hs.Close() }, nil
}
