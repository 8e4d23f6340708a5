package anthropic

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
)

// eventCursor is events.list's opaque page token: a position in the log.
// Asc pages continue after A; desc pages continue before B.
type eventCursor struct {
	A int64 `json:"a,omitempty"`
	B int64 `json:"b,omitempty"`
}

// groups splits rendered events by the Rein event they came from (the
// unit a page never cuts).
func groups(rs []rendered) [][]rendered {
	var out [][]rendered
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && rs[j].seq == rs[i].seq {
			j++
		}
		out = append(out, rs[i:j])
		i = j
	}
	return out
}

// typesFilter reads ?types[]= (or ?types=): the rendered types to keep.
func typesFilter(r *http.Request) map[string]bool {
	q := r.URL.Query()
	vs := append(q["types[]"], q["types"]...)
	if len(vs) == 0 {
		return nil
	}
	keep := map[string]bool{}
	for _, v := range vs {
		keep[v] = true
	}
	return keep
}

func filter(rs []rendered, keep map[string]bool) []rendered {
	if keep == nil {
		return rs
	}
	return slices.DeleteFunc(rs, func(x rendered) bool { return !keep[x.typ] })
}

// listEvents is events.list: the log rendered, a page at a time, oldest
// first (order=asc, the default) or newest first.
func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, err := h.logKey(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	limit, err := pageLimit(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ord, err := order(r, "asc")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var cur eventCursor
	if page := r.URL.Query().Get("page"); page != "" {
		if !decodeCursor(page, &cur) || (ord == "asc") != (cur.B == 0) || cur.A < 0 || cur.B < 0 {
			h.writeError(w, r, badRequest("page", "page is not a cursor this server gave for order=%s", ord))
			return
		}
	}
	keep := typesFilter(r)
	// The first read is also the existence check: another owner's
	// session is not found.
	_, last, err := h.svc.ReadEvents(ctx, key, 0, 1)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rd := newRenderer(h.svc, key, false)
	var lo, hi int64 // the Rein events (lo, hi] rendered
	if ord == "asc" {
		lo, hi = cur.A, min(last, cur.A+int64(limit))
	} else {
		hi = last
		if cur.B > 0 {
			hi = cur.B - 1
		}
		lo = max(0, hi-int64(limit))
	}
	if err := rd.prime(ctx, lo); err != nil {
		h.writeError(w, r, err)
		return
	}
	var evs []rein.Event
	if hi > lo {
		if evs, _, err = h.svc.ReadEvents(ctx, key, lo, int(hi-lo)); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	out, err := rd.page(ctx, evs, true)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	gs := groups(filter(out, keep))
	data := []json_{}
	var next *string
	if ord == "asc" {
		reached := lo
		for _, g := range gs {
			if len(data) > 0 && len(data)+len(g) > limit {
				break
			}
			for _, x := range g {
				data = append(data, json_(x.data))
			}
			reached = g[0].seq
		}
		if len(data) == 0 || reached >= hi {
			reached = hi // nothing of (lo, hi] was left out
		}
		if reached < last {
			c := encodeCursor(eventCursor{A: reached})
			next = &c
		}
	} else {
		reached := hi + 1
		for i := len(gs) - 1; i >= 0; i-- {
			g := gs[i]
			if len(data) > 0 && len(data)+len(g) > limit {
				break
			}
			for j := len(g) - 1; j >= 0; j-- {
				data = append(data, json_(g[j].data))
			}
			reached = g[0].seq
		}
		if len(data) == 0 || (len(gs) > 0 && reached <= gs[0][0].seq) {
			reached = lo + 1 // nothing of (lo, hi] was left out
		}
		if reached > 1 {
			c := encodeCursor(eventCursor{B: reached})
			next = &c
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "next_page": next})
}

// json_ is a rendered event's JSON, written as it is.
type json_ []byte

func (j json_) MarshalJSON() ([]byte, error) { return j, nil }

// Stream pacing.
const (
	streamPage       = 1000
	defaultHeartbeat = 15 * time.Second
)

// streamEvents is events.stream: the log rendered as Server-Sent Events,
// every frame with its event: line (the SDKs drop frames without one) and
// an id: line holding the seq of the Rein event it renders. By default the
// stream starts at the log's end, as the protocol's does (a client lists
// the history it needs); Rein's extension ?after=SEQ, or Last-Event-ID,
// starts it after that seq instead: replay, then live, with no gap and no
// duplicate at the seam, since both are one loop reading the log.
// Previews (event_start / event_delta of agent.message) are sent only when
// asked for with event_deltas[]=agent.message.
func (h *Handler) streamEvents(w http.ResponseWriter, r *http.Request) {
	key, err := h.logKey(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	deltas := slices.Contains(append(q["event_deltas[]"], q["event_deltas"]...), "agent.message")
	cursor, fromEnd, err := streamCursor(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	_, last, err := h.svc.ReadEvents(r.Context(), key, 0, 1)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if fromEnd {
		cursor = last
	}
	closing, release, err := protocol.OpenStream(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer release()
	rd := newRenderer(h.svc, key, deltas)
	if err := rd.prime(r.Context(), cursor); err != nil {
		h.writeError(w, r, err)
		return
	}
	hdr := w.Header()
	protocol.StreamHeaders(hdr)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// Headers go out at once: the SDKs' stream call returns only then.
	if err := rc.Flush(); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(closing, cancel)
	defer stop()
	s := &sseOut{protocol.NewSSE(w)}
	for {
		evs, last, err := h.svc.ReadEvents(ctx, key, cursor, streamPage)
		if err != nil {
			break
		}
		out, err := rd.page(ctx, evs, true)
		if err != nil {
			break
		}
		if err := s.write(out); err != nil {
			return
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
		}
		if cursor < last {
			continue
		}
		if err := h.wait(ctx, key, cursor, s); err != nil {
			break
		}
	}
	if closing.Err() != nil && r.Context().Err() == nil {
		// The server is closing its streams after draining runs: the
		// client still gets what the log gained (each ended run's end).
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
		defer fcancel()
		for {
			evs, last, err := h.svc.ReadEvents(fctx, key, cursor, streamPage)
			if err != nil || len(evs) == 0 {
				return
			}
			out, err := rd.page(fctx, evs, true)
			if err != nil || s.write(out) != nil {
				return
			}
			if cursor = evs[len(evs)-1].Seq; cursor >= last {
				return
			}
		}
	}
}

// wait blocks until the log has an event after cursor, writing a comment
// line each heartbeat interval of silence.
func (h *Handler) wait(ctx context.Context, key rein.SessionKey, cursor int64, s *sseOut) error {
	return s.WaitOrBeat(ctx, h.heartbeat, func(ctx context.Context) error { return h.svc.WaitEvents(ctx, key, cursor) })
}

// streamCursor is where a stream starts: Last-Event-ID, else ?after=,
// else the log's end (fromEnd).
func streamCursor(r *http.Request) (cursor int64, fromEnd bool, err error) {
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, false, badRequest("Last-Event-ID", "Last-Event-ID must be a sequence number ≥ 0 (an id: of this stream), got %q", v)
		}
		return n, false, nil
	}
	vs, ok := r.URL.Query()["after"]
	if !ok {
		return 0, true, nil
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || n < 0 {
		return 0, false, badRequest("after", "after must be a sequence number ≥ 0, got %q", vs[0])
	}
	return n, false, nil
}

// sseOut writes frames, flushing each write.
type sseOut struct{ *protocol.SSE }

// write sends rendered events as frames, all in one write.
func (s *sseOut) write(rs []rendered) error {
	if len(rs) == 0 {
		return nil
	}
	s.Buf.Reset()
	for _, x := range rs {
		s.Buf.WriteString("event: ")
		s.Buf.WriteString(x.typ)
		s.Buf.WriteString("\nid: ")
		s.Buf.WriteString(strconv.FormatInt(x.seq, 10))
		s.Buf.WriteString("\ndata: ")
		s.Buf.Write(x.data)
		s.Buf.WriteString("\n\n")
	}
	return s.Write(s.Buf.Bytes())
}

func (s *sseOut) raw(b []byte) error { return s.Write(b) }
