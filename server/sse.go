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
	key := sessionKey(r)
	info := infoOf(r.Context())
	info.stream = true
	cursor, err := streamCursor(r)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	// The first page doubles as the existence check, so a missing (or
	// another owner's) session is a plain 404 before any stream starts.
	evs, last, err := s.svc.ReadEvents(r.Context(), key, cursor, ssePage)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	// After the existence check, so a 429 never tells a missing session
	// from one that exists.
	if err := s.admitStream(key.Owner); err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	defer s.releaseStream(key.Owner)
	s.metrics.sseSubscribers.Inc()
	defer s.metrics.sseSubscribers.Dec()

	// The stream lives until the client goes or the server closes
	// streams; it never lives longer than either.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	closing := make(chan struct{})
	stop := context.AfterFunc(s.streams, func() { close(closing); cancel() })
	defer stop()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies (nginx) must not buffer a stream
	w.WriteHeader(http.StatusOK)
	// Headers go out at once: a client knows the stream is up before the
	// first event, and everything after its cursor is in what follows.
	if err := flush(rc); err != nil {
		return
	}
	var buf bytes.Buffer
	for {
		if len(evs) > 0 {
			buf.Reset()
			for _, e := range evs {
				if err := writeFrame(&buf, e); err != nil {
					s.log.Error("encode event for stream", "request_id", info.id, "session", key.ID, "seq", e.Seq, "err", err)
					return
				}
				cursor = e.Seq
			}
			if err := writeOut(rc, w, buf.Bytes()); err != nil {
				return
			}
		}
		if cursor < last {
			// More than a page behind: read on without waiting.
		} else if err := s.waitOrBeat(ctx, rc, w, key, cursor); err != nil {
			select {
			case <-closing:
				s.finalCatchUp(r.Context(), rc, w, key, cursor)
			default:
				if ctx.Err() == nil {
					s.log.Warn("event stream ended", "request_id", info.id, "session", key.ID, "err", err)
				}
			}
			return
		}
		if evs, last, err = s.svc.ReadEvents(ctx, key, cursor, ssePage); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("event stream read failed", "request_id", info.id, "session", key.ID, "err", err)
			}
			return
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
