package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
)

// ErrClosed is what EventStream.Next returns after Close.
var ErrClosed = errors.New("rein client: event stream closed")

// EventStream follows a session's event log live over Server-Sent Events
// (GET /api/sessions/{id}/events/stream). Create it with Client.Stream and
// read it with Next (or range over All) from one goroutine; Close may be
// called from any goroutine.
//
// The stream survives dropped connections: when a connection ends, fails,
// or stays silent longer than the idle timeout, it reconnects with
// "Last-Event-ID: <last seq>", waiting with a bounded, jittered backoff
// between failed attempts. Events come out in seq order exactly once:
// anything at or below the last seq seen is dropped, and a hole in the
// sequence (which a correct server never produces) is filled from
// GET /events before the event after it is returned.
//
// Errors that retrying cannot fix end the stream: a 4xx answer such as
// 401 (bad token) or 404 (no such session, or another owner's), or a 2xx
// answer that is not an event stream. Next then returns that error, as it
// does ErrClosed after Close and the context's error after its
// cancellation; every later call returns the same error.
//
// Closing a stream never affects any run (docs/api.md).
type EventStream struct {
	c         *Client
	sessionID string
	ctx       context.Context
	cancel    context.CancelCauseFunc

	// last is the seq of the last event accepted (yielded or pending);
	// the cursor every (re)connection resumes from.
	last int64
	// yielded is the seq of the last event Next returned (LastSeq).
	yielded atomic.Int64
	// pending are accepted events not yet returned, in seq order.
	pending []rein.Event
	// err ends the stream.
	err error

	// parser reads the current connection (nil: none); owned by Next.
	parser *sseParser

	mu         sync.Mutex // guards the connection's resources against Close
	body       io.ReadCloser
	connCancel context.CancelFunc
	idleTimer  *time.Timer

	// failures counts consecutive attempts that ended without delivering
	// a new event; it drives the backoff and resets on progress.
	failures int
	// reconnect is true when the next connection is a reconnection.
	reconnect bool
	// progressed is true once the current connection delivered an event.
	progressed bool
	// retryHint is the server's last "retry:" field.
	retryHint time.Duration
}

// Stream returns a stream of the session's events with seq > after, first
// the stored ones, then live ones as they are appended. It connects lazily,
// on the first Next. Cancelling ctx ends the stream.
func (c *Client) Stream(ctx context.Context, sessionID string, after int64) *EventStream {
	sctx, cancel := context.WithCancelCause(ctx)
	s := &EventStream{c: c, sessionID: sessionID, ctx: sctx, cancel: cancel, last: after}
	s.yielded.Store(after)
	return s
}

// LastSeq returns the seq of the last event Next returned (or the stream's
// starting cursor before the first). It is safe to call from any goroutine.
func (s *EventStream) LastSeq() int64 { return s.yielded.Load() }

// Close ends the stream and releases its connection. Next then returns
// ErrClosed. Close is idempotent and never affects any run.
func (s *EventStream) Close() error {
	s.cancel(ErrClosed)
	s.closeConn()
	return nil
}

// All returns an iterator over the stream's events. The iteration ends
// after yielding the error that ended the stream (ErrClosed, the context's
// error, or a terminal *Error), or when the loop body stops it.
func (s *EventStream) All() iter.Seq2[rein.Event, error] {
	return func(yield func(rein.Event, error) bool) {
		for {
			ev, err := s.Next()
			if err != nil {
				yield(rein.Event{}, err)
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// terminalError marks an error that reconnecting cannot fix.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// Next returns the next event, blocking until one is appended to the
// session's log, the stream is closed, its context is cancelled, or a
// terminal error occurs.
func (s *EventStream) Next() (rein.Event, error) {
	for {
		if len(s.pending) > 0 {
			ev := s.pending[0]
			s.pending = s.pending[1:]
			s.yielded.Store(ev.Seq)
			return ev, nil
		}
		if s.err != nil {
			return rein.Event{}, s.err
		}
		if s.ctx.Err() != nil {
			s.fail(context.Cause(s.ctx))
			continue
		}
		if s.parser == nil {
			if err := s.connect(); err != nil {
				var t *terminalError
				if errors.As(err, &t) {
					s.fail(t.err)
				} else if s.ctx.Err() != nil {
					s.fail(context.Cause(s.ctx))
				}
				continue
			}
		}
		f, err := s.parser.next()
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				s.fail(err)
				continue
			}
			// The connection ended or broke (or the idle timer cut it):
			// reconnect from the last accepted seq.
			s.dropConnection()
			continue
		}
		ev, ok := decodeFrame(f)
		if !ok || ev.Seq <= s.last {
			// Not an event (a frame type this client does not know), or
			// one already seen: a duplicate across a reconnection seam.
			continue
		}
		if ev.Seq > s.last+1 {
			if err := s.fill(ev.Seq); err != nil {
				var t *terminalError
				if errors.As(err, &t) {
					s.fail(t.err)
				} else {
					// The replay of a new connection covers the hole.
					s.dropConnection()
				}
				continue
			}
		}
		s.last = ev.Seq
		s.progressed = true
		s.pending = append(s.pending, ev)
	}
}

// decodeFrame reads the event JSON of a frame. Frames that do not carry an
// event with a seq are not events of the log.
func decodeFrame(f frame) (rein.Event, bool) {
	var ev rein.Event
	if err := json.Unmarshal([]byte(f.Data), &ev); err != nil || ev.Seq <= 0 {
		return rein.Event{}, false
	}
	return ev, true
}

// fill reads the events between s.last and upTo (exclusive) from the
// log's pages into pending.
func (s *EventStream) fill(upTo int64) error {
	for s.last < upTo-1 {
		evs, _, err := s.c.ListEvents(s.ctx, s.sessionID, s.last, int(min(upTo-1-s.last, 1000)))
		if err != nil {
			if isTerminalStatus(err) {
				return &terminalError{err}
			}
			return err
		}
		advanced := false
		for _, e := range evs {
			if e.Seq != s.last+1 || e.Seq >= upTo {
				break
			}
			s.last = e.Seq
			s.pending = append(s.pending, e)
			advanced = true
		}
		if !advanced {
			return fmt.Errorf("rein client: events %d..%d missing from the log", s.last+1, upTo-1)
		}
	}
	return nil
}

// fail ends the stream with err.
func (s *EventStream) fail(err error) {
	s.err = err
	s.disconnect()
	s.cancel(err)
}

// dropConnection closes the current connection and schedules a reconnection.
func (s *EventStream) dropConnection() {
	if !s.progressed {
		s.failures++
	} else {
		s.failures = 0
	}
	s.reconnect = true
	s.disconnect()
}

// disconnect forgets the current connection and closes it. Only Next's
// goroutine calls it: it owns the parser.
func (s *EventStream) disconnect() {
	if s.parser != nil && s.parser.retry > 0 {
		s.retryHint = s.parser.retry
	}
	s.parser = nil
	s.closeConn()
}

// closeConn closes the current connection's body, which unblocks a read in
// progress; Close calls it from any goroutine.
func (s *EventStream) closeConn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idleTimer != nil {
		s.idleTimer.Stop()
		s.idleTimer = nil
	}
	if s.connCancel != nil {
		s.connCancel()
		s.connCancel = nil
	}
	if s.body != nil {
		_ = s.body.Close()
		s.body = nil
	}
}

// isTerminalStatus reports whether err is an answer that retrying cannot
// change: any 4xx except 408 (request timeout) and 429 (too many requests).
func isTerminalStatus(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// delay is how long to wait before the next connection attempt: nothing
// for the first connection or right after a connection that delivered
// events, else Initial (or the server's retry hint) doubling per failure
// up to Max, jittered into [d/2, d].
func (s *EventStream) delay() time.Duration {
	if !s.reconnect || s.failures == 0 {
		return 0
	}
	b := s.c.backoff
	d, limit := b.Initial, b.Max
	if s.retryHint > 0 {
		d = s.retryHint
		limit = max(limit, d)
	}
	for i := 1; i < s.failures && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

// connect waits out the backoff, then opens a connection. It returns a
// *terminalError for answers that end the stream, and another error for a
// failed attempt (after counting it).
func (s *EventStream) connect() error {
	if d := s.delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return context.Cause(s.ctx)
		}
	}
	q := url.Values{"after": {strconv.FormatInt(s.last, 10)}}
	cctx, ccancel := context.WithCancel(s.ctx)
	req, err := s.c.newRequest(cctx, http.MethodGet, sessionPath(s.sessionID, "events", "stream"), q, nil)
	if err != nil {
		ccancel()
		return &terminalError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if s.reconnect && s.last > 0 {
		// The standard's resume header; the server lets it override
		// "after", and both say the same here.
		req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
	}
	s.reconnect = true
	resp, err := s.c.hc.Do(req)
	if err != nil {
		ccancel()
		s.failures++
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e, _ := readError(resp)
		_ = resp.Body.Close()
		ccancel()
		if isTerminalStatus(e) {
			return &terminalError{e}
		}
		s.failures++
		return e
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		_ = resp.Body.Close()
		ccancel()
		return &terminalError{fmt.Errorf("rein client: the server answered %q, not an event stream", resp.Header.Get("Content-Type"))}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		// Closed while connecting.
		_ = resp.Body.Close()
		ccancel()
		return context.Cause(s.ctx)
	}
	s.progressed = false
	s.body = resp.Body
	s.connCancel = ccancel
	activity := func() {}
	if idle := s.c.idle; idle > 0 {
		timer := time.AfterFunc(idle, ccancel)
		s.idleTimer = timer
		activity = func() { timer.Reset(idle) }
	}
	s.parser = newSSEParser(resp.Body, activity)
	return nil
}
