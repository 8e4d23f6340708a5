package protocol

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"time"
)

// Owner is the request's authenticated owner; served without the server
// (a test of an adapter alone), single-user mode's owner "local".
func Owner(r *http.Request) string {
	if req := RequestOf(r.Context()); req != nil {
		return req.Owner
	}
	return "local"
}

// MaxBody is the request's body bound: the server's when mounted, else
// def.
func MaxBody(r *http.Request, def int64) int64 {
	if req := RequestOf(r.Context()); req != nil && req.MaxBodyBytes > 0 {
		return req.MaxBodyBytes
	}
	return def
}

// StreamWriteTimeout bounds one write to a stream's client: a client that
// stops reading is dropped rather than holding a goroutine forever.
const StreamWriteTimeout = 30 * time.Second

// SSE writes an event stream's bytes, each write flushed at once and
// bounded by StreamWriteTimeout. Buf is scratch space for building a write.
type SSE struct {
	rc  *http.ResponseController
	w   http.ResponseWriter
	Buf bytes.Buffer
}

// NewSSE returns the writer of w's stream.
func NewSSE(w http.ResponseWriter) *SSE {
	return &SSE{rc: http.NewResponseController(w), w: w}
}

// Write sends b and flushes it.
func (s *SSE) Write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// WaitOrBeat blocks in wait (a wait for the log to grow past a stream's
// cursor) and writes a comment line each heartbeat of silence, so
// proxies and clients see a live connection.
func (s *SSE) WaitOrBeat(ctx context.Context, heartbeat time.Duration, wait func(context.Context) error) error {
	for {
		beat, cancel := context.WithTimeout(ctx, heartbeat)
		err := wait(beat)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if err := s.Write([]byte(": keepalive\n\n")); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// OpenStream admits one more event stream of the request's owner, as the
// server counts the native API's streams (Request.OpenStream). closing
// ends when the server closes its streams; release must be called once
// the stream ends. Outside a mounted adapter (a test serving one
// directly) nothing is counted: closing never ends, release does nothing.
func OpenStream(r *http.Request) (closing context.Context, release func(), err error) {
	if req := RequestOf(r.Context()); req != nil && req.OpenStream != nil {
		return req.OpenStream()
	}
	return context.Background(), func() {}, nil
}

// StreamHeaders are the headers every adapter's event stream answers
// with: an event stream that no cache keeps and no proxy buffers.
func StreamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}
