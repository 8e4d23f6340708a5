package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/reinhq/rein"
)

// ssePage is how many events one read of the log takes while streaming.
const ssePage = 1000

// sseWriteTimeout bounds one write to a stream client: a client that stops
// reading is dropped rather than holding a goroutine forever.
const sseWriteTimeout = 30 * time.Second

// streamEvents is GET /api/sessions/{id}/events/stream: the session's log
// as Server-Sent Events, from the cursor on, then live.
//
// There is one event path (DESIGN.md rule 1): the stream reads the log
// after its cursor, writes what it found, and waits on the store for more.
// Replay and live are the same loop, so the seam between them can neither
// skip nor repeat an event, and a reconnect with Last-Event-ID continues
// exactly where the client's last frame ended. Closing the stream only ends
// this loop; no run is touched (rule 3).
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) {
	st := s.openStream(w, r)
	if st == nil {
		return
	}
	defer st.close()
	st.run()
}

// stream is one open event stream. Its state lives here, not in locals,
// and the loop that waits is a small function of its own: an idle stream
// parks its goroutine in that loop for minutes or hours, and the runtime
// shrinks a parked goroutine's stack only to a size its frames fit in a
// quarter of, so every byte of frame on that path is paid per open stream.
type stream struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	info   *reqInfo
	key    rein.SessionKey
	ctx    context.Context
	cancel context.CancelFunc
	// closing is closed when the server closes its streams.
	closing chan struct{}
	stop    func() bool
	cursor  int64
	last    int64
	evs     []rein.Event
	buf     bytes.Buffer
}

// openStream checks the request, reads the first page and sends the
// headers; nil means the request was answered (an error) or the client
// is gone.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) *stream {
	key := sessionKey(r)
	info := infoOf(r.Context())
	info.stream = true
	cursor, err := streamCursor(r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return nil
	}
	// The first page doubles as the existence check, so a missing (or
	// another owner's) session is a plain 404 before any stream starts.
	evs, last, err := s.svc.ReadEvents(r.Context(), key, cursor, ssePage)
	if err != nil {
		s.writeError(w, r, err, nil)
		return nil
	}
	// After the existence check, so a 429 never tells a missing session
	// from one that exists.
	if err := s.admitStream(key.Owner); err != nil {
		s.writeError(w, r, err, nil)
		return nil
	}
	s.metrics.sseSubscribers.Inc()
	st := &stream{s: s, w: w, r: r, rc: http.NewResponseController(w), info: info, key: key,
		cursor: cursor, last: last, evs: evs, closing: make(chan struct{})}
	// The stream lives until the client goes or the server closes
	// streams; it never lives longer than either.
	st.ctx, st.cancel = context.WithCancel(r.Context())
	st.stop = context.AfterFunc(s.streams, func() { close(st.closing); st.cancel() })

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies (nginx) must not buffer a stream
	w.WriteHeader(http.StatusOK)
	// Headers go out at once: a client knows the stream is up before the
	// first event, and everything after its cursor is in what follows.
	if err := flush(st.rc); err != nil {
		st.close()
		return nil
	}
	return st
}

func (st *stream) close() {
	st.stop()
	st.cancel()
	st.s.metrics.sseSubscribers.Dec()
	st.s.releaseStream(st.key.Owner)
}

// run writes what the log holds after the cursor, waits for more, and
// again, until the client goes or the server closes streams.
func (st *stream) run() {
	for {
		if len(st.evs) > 0 && !st.send() {
			return
		}
		if st.cursor < st.last {
			// More than a page behind: read on without waiting.
		} else if err := st.s.waitOrBeat(st.ctx, st.rc, st.w, st.key, st.cursor); err != nil {
			st.ended(err)
			return
		}
		if !st.read() {
			return
		}
	}
}

// send writes st.evs as frames and moves the cursor past them.
func (st *stream) send() bool {
	st.buf.Reset()
	for _, e := range st.evs {
		if err := writeFrame(&st.buf, e); err != nil {
			st.s.log.Error("encode event for stream", "request_id", st.info.id, "session", st.key.ID, "seq", e.Seq, "err", err)
			return false
		}
		st.cursor = e.Seq
	}
	st.evs = nil
	if st.buf.Cap() > 64<<10 {
		// A long replay's buffer is not kept for an idle stream.
		st.buf = bytes.Buffer{}
	}
	return writeOut(st.rc, st.w, st.buf.Bytes()) == nil
}

// read takes the next page after the cursor.
func (st *stream) read() bool {
	var err error
	if st.evs, st.last, err = st.s.svc.ReadEvents(st.ctx, st.key, st.cursor, ssePage); err != nil {
		if st.ctx.Err() == nil {
			st.s.log.Warn("event stream read failed", "request_id", st.info.id, "session", st.key.ID, "err", err)
		}
		return false
	}
	return true
}

// ended handles the end of a wait: the server closing streams gets the
// client what the log gained since the last frame; anything but the client
// leaving is logged.
func (st *stream) ended(err error) {
	select {
	case <-st.closing:
		st.s.finalCatchUp(st.r.Context(), st.rc, st.w, st.key, st.cursor)
	default:
		if st.ctx.Err() == nil {
			st.s.log.Warn("event stream ended", "request_id", st.info.id, "session", st.key.ID, "err", err)
		}
	}
}

// waitOrBeat waits for an event after cursor, sending a comment line each
// time the heartbeat interval passes in silence. It returns nil when there
// is something to read.
func (s *Server) waitOrBeat(ctx context.Context, rc *http.ResponseController, w http.ResponseWriter, key rein.SessionKey, cursor int64) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, s.heartbeat)
		err := s.svc.WaitEvents(wctx, key, cursor)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if err := writeOut(rc, w, []byte(": keepalive\n\n")); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// finalCatchUp sends what the log gained since the last frame when the
// server closes streams: Serve closes them after draining runs, so the
// clients still see every run's session.run_completed.
func (s *Server) finalCatchUp(reqCtx context.Context, rc *http.ResponseController, w http.ResponseWriter, key rein.SessionKey, cursor int64) {
	ctx, cancel := context.WithTimeout(reqCtx, 2*time.Second)
	defer cancel()
	var buf bytes.Buffer
	for {
		evs, last, err := s.svc.ReadEvents(ctx, key, cursor, ssePage)
		if err != nil || len(evs) == 0 {
			return
		}
		buf.Reset()
		for _, e := range evs {
			if writeFrame(&buf, e) != nil {
				return
			}
			cursor = e.Seq
		}
		if writeOut(rc, w, buf.Bytes()) != nil || cursor >= last {
			return
		}
	}
}

// streamCursor is the seq the stream starts after: Last-Event-ID when the
// client sends one (a reconnect), else ?after=, else 0.
func streamCursor(r *http.Request) (int64, error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, rein.InvalidArgument("Last-Event-ID", "Last-Event-ID must be a sequence number ≥ 0, got %q", v)
		}
		return n, nil
	}
	n, err := intParam(r.URL.Query(), "after", 0)
	if err == nil && n < 0 {
		err = rein.InvalidArgument("after", "after must be a sequence number ≥ 0")
	}
	return n, err
}

// writeFrame appends one SSE frame: id, event, data (one data line per
// line of JSON, though the event JSON is compact and has none), blank line.
func writeFrame(buf *bytes.Buffer, e rein.Event) error {
	data, err := e.MarshalJSON()
	if err != nil {
		return err
	}
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatInt(e.Seq, 10))
	buf.WriteString("\nevent: ")
	buf.WriteString(string(e.Type))
	buf.WriteByte('\n')
	for _, line := range bytes.Split(data, []byte("\n")) {
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
	return nil
}

// writeOut writes and flushes within the write timeout.
func writeOut(rc *http.ResponseController, w http.ResponseWriter, b []byte) error {
	// Not every ResponseWriter supports deadlines (httptest's recorder
	// does not); a stream without one still works.
	_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := w.Write(b); err != nil {
		return err
	}
	return flush(rc)
}

func flush(rc *http.ResponseController) error {
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
