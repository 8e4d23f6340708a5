package aisdk

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
)

// streamPage is how many events one read of a stream takes.
const streamPage = 1000

// source is what a stream renders: one run's chunks (runSource) or the
// chat's, run after run (chatSource).
type source interface {
	// render renders a page of the log.
	render(ctx context.Context, evs []rein.Event) ([]chunk, error)
	// caughtUp is called each time the stream has read to the log's end,
	// before it waits; it returns what to write then (nil: nothing).
	caughtUp(ctx context.Context) []byte
	// done reports that the stream has ended.
	done() bool
}

// serve answers with src's UI message stream: the log after cursor, read
// page by page and then live (one loop, so the seam between replay and
// live can neither skip nor repeat). Each frame is `data: CHUNK` with an
// `id:` line holding the seq of the event it renders; a stream that ends
// ends with `data: [DONE]`, as the SDK's own server helpers end it.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, key rein.SessionKey, cursor int64, src source) {
	closing, release, err := protocol.OpenStream(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer release()
	hdr := w.Header()
	protocol.StreamHeaders(hdr)
	hdr.Set("X-Vercel-Ai-Ui-Message-Stream", "v1")
	w.WriteHeader(http.StatusOK)
	out := protocol.NewSSE(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(closing, cancel)
	defer stop()
	for {
		evs, last, err := h.svc.ReadEvents(ctx, key, cursor, streamPage)
		if err != nil {
			break
		}
		cs, err := src.render(ctx, evs)
		if err != nil {
			break
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
		}
		if err := writeChunks(out, cs); err != nil {
			return
		}
		if cursor < last {
			continue
		}
		if b := src.caughtUp(ctx); b != nil {
			if err := out.Write(b); err != nil {
				return
			}
		}
		if src.done() {
			_ = out.Write([]byte("data: [DONE]\n\n"))
			return
		}
		if err := out.WaitOrBeat(ctx, h.heartbeat, func(ctx context.Context) error { return h.svc.WaitEvents(ctx, key, cursor) }); err != nil {
			break
		}
	}
	// The server is closing its streams, or the log could not be read:
	// the stream ends without [DONE], which the client takes for a lost
	// connection (resumeStream picks it up).
}

// serveRun answers with the run's UI message stream from the log position
// from: it opens with start (the run id as messageId) and ends when the
// run ends or waits for approvals.
func (h *Handler) serveRun(w http.ResponseWriter, r *http.Request, key rein.SessionKey, runID string, from int64) {
	rd := newRunRenderer(key.ID, runID)
	rd.seq = from
	rd.add(startChunk{Type: "start", MessageID: runID, MessageMetadata: metadata{Rein: runMeta{ChatID: key.ID, RunID: runID}}})
	h.serve(w, r, key, from, &runSource{h: h, key: key, rd: rd})
}

// runSource is one run's stream.
type runSource struct {
	h   *Handler
	key rein.SessionKey
	rd  *runRenderer
}

func (s *runSource) render(_ context.Context, evs []rein.Event) ([]chunk, error) {
	for _, e := range evs {
		s.rd.event(e)
	}
	cs := s.rd.out
	s.rd.out = nil
	return cs, nil
}

// caughtUp ends the stream of a run that waits for the approvals it asked.
func (s *runSource) caughtUp(ctx context.Context) []byte {
	if s.rd.done || len(s.rd.awaiting) == 0 || !s.h.parked(ctx, s.key, s.rd) {
		return nil
	}
	s.rd.park()
	var b bytes.Buffer
	appendChunks(&b, s.rd.out)
	s.rd.out = nil
	return b.Bytes()
}

func (s *runSource) done() bool { return s.rd.done }

// parked reports whether the run waits for the approvals the stream asked:
// they are still pending in the store.
func (h *Handler) parked(ctx context.Context, key rein.SessionKey, rd *runRenderer) bool {
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return false
	}
	for _, c := range info.PendingConfirmations {
		if c.RunID == rd.run && rd.awaiting[c.ToolUseID] {
			return true
		}
	}
	return false
}

// resumeStream is GET /ai-sdk/chat/{id}/stream, the transport's
// reconnectToStream: 204 when the chat has no queued or running run;
// otherwise that run's stream replayed from its first event, then live
// (the transport's resumeStreamIsReplay: the replay's start resets the
// client's message, which the replay then rebuilds whole). With a cursor
// it is the chat's stream after it instead (chatstream.go).
func (h *Handler) resumeStream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := rein.SessionKey{Owner: protocol.Owner(r), ID: r.PathValue("id")}
	cursor, byCursor, err := streamCursor(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if byCursor {
		h.serve(w, r, key, cursor, newChatSource(h, key, cursor))
		return
	}
	runID := info.CurrentRunID
	if runID == "" && len(info.QueuedRunIDs) > 0 {
		runID = info.QueuedRunIDs[0]
	}
	if runID == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	from, err := h.runStart(ctx, key, runID)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveRun(w, r, key, runID, from)
}

// runStart is the cursor just before the run's first event (its
// user.message), read back from the log's end.
func (h *Handler) runStart(ctx context.Context, key rein.SessionKey, runID string) (int64, error) {
	return protocol.RunStart(ctx, func(ctx context.Context, after int64, limit int) ([]rein.Event, int64, error) {
		return h.svc.ReadEvents(ctx, key, after, limit)
	}, runID)
}

// writeChunks sends chunks as frames, all in one write.
func writeChunks(out *protocol.SSE, cs []chunk) error {
	if len(cs) == 0 {
		return nil
	}
	out.Buf.Reset()
	appendChunks(&out.Buf, cs)
	return out.Write(out.Buf.Bytes())
}

// appendChunks writes chunks as frames to b.
func appendChunks(b *bytes.Buffer, cs []chunk) {
	for _, c := range cs {
		data, err := json.Marshal(c.data)
		if err != nil {
			continue // the chunk shapes always marshal
		}
		b.WriteString("id: ")
		b.WriteString(strconv.FormatInt(c.seq, 10))
		b.WriteString("\ndata: ")
		b.Write(data)
		b.WriteString("\n\n")
	}
}
