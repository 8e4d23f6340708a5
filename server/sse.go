package server

import (
	"bytes"
	"context"
	"errors"
	"net"
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
	if st.conn != nil {
		// Taken over: the stream goes on in a goroutine of its own and
		// this handler returns, so net/http lets go of the connection's
		// buffers and of its serving goroutine (see stream).
		go st.runDetached()
		return
	}
	defer st.close()
	st.run()
}

// stream is one open event stream.
//
// An idle stream is what a server holds most of: one per open browser
// tab, for hours. So an HTTP/1.x stream takes its connection over from
// net/http (Hijack) once its headers are decided and goes on in a fresh
// goroutine with a shallow stack: net/http would otherwise keep, per
// stream, its serving goroutine's deep stack, 10 KiB of read and write
// buffers, and a second goroutine reading ahead to notice the client
// leaving. The taken-over stream writes the chunked body itself and has
// one small goroutine of its own that notices the client leaving. HTTP/2
// (and any writer that cannot be taken over) streams through net/http as
// before.
//
// Its state lives here, not in locals, and the loop that waits is a small
// function of its own: the runtime shrinks a parked goroutine's stack only
// to a size its frames fit in a quarter of, so every byte of frame on that
// path is paid per open stream.
type stream struct {
	s    *Server
	info *reqInfo
	key  rein.SessionKey
	out  sink
	// conn is the taken-over connection (nil: net/http's).
	conn net.Conn
	// base is the request's context without its cancellation (net/http
	// cancels it when a taken-over stream's handler returns).
	base   context.Context
	ctx    context.Context
	cancel context.CancelFunc
	// closing is closed when the server closes its streams.
	closing chan struct{}
	stop    func() bool
	// readDone is closed when a taken-over stream's reader returns.
	readDone chan struct{}
	cursor   int64
	last     int64
	evs      []rein.Event
	buf      bytes.Buffer
	// beat is the heartbeat's clock, one context and timer for all the
	// stream's waits (see waitOrBeat); nil before the first wait.
	beat      context.Context
	beatTimer *time.Timer
}

// sink is where a stream's bytes go.
type sink interface {
	write(b []byte) error
}

// respSink writes through net/http's ResponseWriter, flushing each write.
type respSink struct {
	rc *http.ResponseController
	w  http.ResponseWriter
}

func (o respSink) write(b []byte) error { return writeOut(o.rc, o.w, b) }

// connSink writes to a taken-over connection: each write one chunk of a
// chunked body (HTTP/1.1), or the bytes as they are (HTTP/1.0, whose body
// ends when the connection closes).
type connSink struct {
	c       net.Conn
	chunked bool
	// wire is the last chunk written, kept for the next: a chunk per
	// write was a twelfth of what a loaded server allocated.
	wire []byte
}

func (o *connSink) write(b []byte) error {
	_ = o.c.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if !o.chunked {
		_, err := o.c.Write(b)
		return err
	}
	out := strconv.AppendInt(o.wire[:0], int64(len(b)), 16)
	out = append(out, "\r\n"...)
	out = append(out, b...)
	out = append(out, "\r\n"...)
	_, err := o.c.Write(out)
	// Only a live stream's few events are kept: a replay's chunk is
	// not, so an idle stream holds at most this much.
	if cap(out) <= 4<<10 {
		o.wire = out
	} else {
		o.wire = nil
	}
	return err
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
	st := &stream{s: s, info: info, key: key, cursor: cursor, last: last, evs: evs, closing: make(chan struct{})}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies (nginx) must not buffer a stream
	rc := http.NewResponseController(w)
	if r.ProtoMajor == 1 {
		// Nothing more is read from the client: what net/http read ahead
		// (nothing, for a GET) goes with its buffers.
		if conn, _, err := rc.Hijack(); err == nil {
			return st.detach(r, h, conn)
		}
	}
	st.base = r.Context()
	st.out = respSink{rc: rc, w: w}
	st.begin()
	w.WriteHeader(http.StatusOK)
	// Headers go out at once: a client knows the stream is up before the
	// first event, and everything after its cursor is in what follows.
	if err := flush(rc); err != nil {
		st.close()
		return nil
	}
	return st
}

// begin ties the stream's lifetime to its base context and to the server's
// streams: it never lives longer than either.
func (st *stream) begin() {
	st.ctx, st.cancel = context.WithCancel(st.base)
	st.stop = context.AfterFunc(st.s.streams, func() { close(st.closing); st.cancel() })
}

// detach finishes opening a stream whose connection was taken over: it
// writes the response head itself and lets go of net/http's buffers.
func (st *stream) detach(r *http.Request, h http.Header, conn net.Conn) *stream {
	st.conn = conn
	chunked := r.ProtoAtLeast(1, 1)
	st.out = &connSink{c: conn, chunked: chunked}
	st.base = context.WithoutCancel(r.Context())
	st.begin()
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	if chunked {
		h.Set("Transfer-Encoding", "chunked")
	}
	// The connection ends with the stream: it is no longer net/http's to
	// keep alive.
	h.Set("Connection", "close")
	h.Del("Content-Length")
	_ = h.Write(&head)
	head.WriteString("\r\n")
	_ = conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := conn.Write(head.Bytes()); err != nil {
		st.close()
		return nil
	}
	st.readDone = make(chan struct{})
	go st.watchClient()
	return st
}

// watchClient ends a taken-over stream when its client goes: the client
// sends nothing after its request, so a read returns only when the
// connection closes (or is closed by the stream's end).
func (st *stream) watchClient() {
	defer close(st.readDone)
	var b [1]byte
	for {
		if _, err := st.conn.Read(b[:]); err != nil {
			st.cancel()
			return
		}
	}
}

// runDetached is a taken-over stream's goroutine.
func (st *stream) runDetached() {
	defer st.close()
	st.run()
}

func (st *stream) close() {
	st.stop()
	st.cancel()
	if st.beatTimer != nil {
		st.beatTimer.Stop()
	}
	if st.conn != nil {
		if cs, ok := st.out.(*connSink); ok && cs.chunked {
			// The body's end, for a client still there (a gone one makes
			// the write fail at once).
			_ = cs.c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = cs.c.Write([]byte("0\r\n\r\n"))
		}
		st.conn.Close()
		if st.readDone != nil { // nil: the head could not be written, no reader started
			<-st.readDone
		}
	}
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
		} else if err := st.waitOrBeat(); err != nil {
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
	err := st.out.write(st.buf.Bytes())
	if st.buf.Cap() > 16<<10 {
		// A long replay's buffer is not kept for an idle stream.
		st.buf = bytes.Buffer{}
	}
	return err == nil
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
		st.s.finalCatchUp(st.base, st.out, st.key, st.cursor)
	default:
		if st.ctx.Err() == nil {
			st.s.log.Warn("event stream ended", "request_id", st.info.id, "session", st.key.ID, "err", err)
		}
	}
}

// waitOrBeat waits for an event after the cursor, sending a comment line
// each time the heartbeat interval passes in silence. It returns nil when
// there is something to read. Every wait re-arms one timer that cancels
// the stream's heartbeat context, rather than making a context with a
// deadline per wait: under load a stream waits once per event, and the
// timer with its three allocations each time was a fiftieth of the CPU. A
// fired heartbeat leaves its context cancelled; the next wait makes
// another.
func (st *stream) waitOrBeat() error {
	for {
		if st.beat == nil || st.beat.Err() != nil {
			ctx, cancel := context.WithCancel(st.ctx)
			st.beat = ctx
			if st.beatTimer != nil {
				st.beatTimer.Stop()
			}
			st.beatTimer = time.AfterFunc(st.s.heartbeat, cancel)
		} else {
			st.beatTimer.Reset(st.s.heartbeat)
		}
		beat := st.beat
		err := st.s.svc.WaitEvents(beat, st.key, st.cursor)
		if !st.beatTimer.Stop() {
			// The timer fired, though its cancel may not have run yet:
			// never re-armed, or that late cancel would cut the next wait.
			st.beat = nil
		}
		switch {
		case err == nil:
			return nil
		case st.ctx.Err() != nil:
			return st.ctx.Err()
		case beat.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
			if err := st.out.write([]byte(": keepalive\n\n")); err != nil {
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
func (s *Server) finalCatchUp(base context.Context, out sink, key rein.SessionKey, cursor int64) {
	ctx, cancel := context.WithTimeout(base, 2*time.Second)
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
		if out.write(buf.Bytes()) != nil || cursor >= last {
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

// writeFrame appends one SSE frame: id, event, data (the event JSON, which
// is compact: one line), blank line.
// The JSON is appended in place (rein.Event.AppendJSON): a stream writes a
// frame per event, and encoding/json's copy and reflection were most of a
// frame's cost.
func writeFrame(buf *bytes.Buffer, e rein.Event) error {
	b := strconv.AppendInt(append(buf.AvailableBuffer(), "id: "...), e.Seq, 10)
	b = append(append(append(b, "\nevent: "...), e.Type...), "\ndata: "...)
	head := len(b)
	b, err := e.AppendJSON(b)
	if err != nil {
		return err // nothing written: b is beyond buf's length
	}
	if bytes.IndexByte(b[head:], '\n') >= 0 {
		// Compact JSON has no raw newline; one would split the data line.
		return errors.New("event JSON with a newline")
	}
	buf.Write(append(b, "\n\n"...))
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
