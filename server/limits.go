package server

import (
	"sync"
	"time"

	"github.com/reinhq/rein"
)

// DefaultMaxStreamsPerOwner is Config.MaxStreamsPerOwner's default: far
// above what a person's tabs and tools open, low enough that one token
// cannot hold every goroutine and store wake-up of the server.
const DefaultMaxStreamsPerOwner = 1000

// Defaults of the HTTP server's timeouts (Config.ReadTimeout, IdleTimeout).
const (
	DefaultReadTimeout = 30 * time.Second
	DefaultIdleTimeout = 2 * time.Minute
)

// readHeaderTimeout bounds reading a request's headers: a client that
// trickles them is cut off long before ReadTimeout.
const readHeaderTimeout = 10 * time.Second

// streamLimit counts each owner's open event streams against a cap.
type streamLimit struct {
	max int // ≤ 0: no cap
	mu  sync.Mutex
	n   map[string]int
}

func newStreamLimit(max int) *streamLimit {
	switch {
	case max == 0:
		max = DefaultMaxStreamsPerOwner
	case max < 0:
		max = 0
	}
	return &streamLimit{max: max, n: map[string]int{}}
}

// acquire counts a stream of owner in, unless the owner is at the cap.
func (l *streamLimit) acquire(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.n[owner] >= l.max {
		return false
	}
	l.n[owner]++
	return true
}

func (l *streamLimit) release(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[owner] <= 1 {
		delete(l.n, owner) // owners come and go; the map keeps only the live ones
		return
	}
	l.n[owner]--
}

// admitStream counts a new event stream of owner in, or says why not: the
// server is closing its streams (unavailable), or the owner has as many
// open as the cap allows (too_many_requests). A nil answer must be paired
// with releaseStream.
func (s *Server) admitStream(owner string) error {
	if !s.joinStreams() {
		return rein.Errorf(rein.CodeUnavailable, "the server is shutting down")
	}
	if !s.streamLimit.acquire(owner) {
		s.streamWG.Done()
		return rein.Errorf(rein.CodeTooManyRequests,
			"this owner already has %d open event streams, the most the server allows; close streams that are no longer read, then retry", s.streamLimit.max)
	}
	return nil
}

// releaseStream counts an admitted stream out.
func (s *Server) releaseStream(owner string) {
	s.streamLimit.release(owner)
	s.streamWG.Done()
}
