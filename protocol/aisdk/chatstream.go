package aisdk

import (
	"context"
	"net/http"
	"strconv"

	"github.com/reinhq/rein"
)

// The chat's stream after a cursor (Rein's extension of GET
// /ai-sdk/chat/{id}/stream, with Last-Event-ID or ?after=SEQ): every run's
// chunks after that log position, run after run, live — each run opening
// with its start and closing with its finish, as its own stream does, and
// the frames' id: lines the positions a reconnect names. A client that
// keeps its last id: reconnects to exactly what it missed, mid-run or
// between runs, with no replay: the SPEC's rule that every stream is the
// log after a cursor. The SDK's own transport never sends a cursor; this
// is for clients of Rein's (a Go or server-side reader, a test driver).

// caughtUpComment is written each time a cursor stream has sent all the
// log held when it got there: a reader that wants the history so far, not
// the live tail, stops there. SSE clients ignore comment lines.
const caughtUpComment = ": caught-up\n\n"

// streamCursor reads a cursor stream's position: Last-Event-ID, else
// ?after= (ok false: neither, the SDK's replay of the current run).
func streamCursor(r *http.Request) (cursor int64, ok bool, err error) {
	v, param := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		vs, has := r.URL.Query()["after"]
		if !has {
			return 0, false, nil
		}
		v, param = vs[0], "after"
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, rein.InvalidArgument(param, "%s must be a log position ≥ 0 (an id: of this stream), got %q", param, v)
	}
	return n, true, nil
}

// chatSource renders every run of the chat after a cursor.
type chatSource struct {
	h      *Handler
	key    rein.SessionKey
	cursor int64 // where the stream started
	runs   map[string]*runRenderer
	ended  map[string]bool
}

func newChatSource(h *Handler, key rein.SessionKey, cursor int64) *chatSource {
	return &chatSource{h: h, key: key, cursor: cursor, runs: map[string]*runRenderer{}, ended: map[string]bool{}}
}

func (s *chatSource) render(ctx context.Context, evs []rein.Event) ([]chunk, error) {
	var out []chunk
	for _, e := range evs {
		if e.RunID == "" || s.ended[e.RunID] {
			continue
		}
		rd := s.runs[e.RunID]
		if rd == nil {
			rd = newRunRenderer(s.key.ID, e.RunID)
			if e.Type != rein.EventUserMessage {
				// A run that began before the cursor: its state (the open
				// step and text part, the approvals asked) from its start.
				if err := s.prime(ctx, rd); err != nil {
					return nil, err
				}
				if rd.done {
					s.ended[e.RunID] = true
					continue
				}
			}
			s.runs[e.RunID] = rd
		}
		if e.Type == rein.EventUserMessage {
			rd.seq = e.Seq
			rd.add(startChunk{Type: "start", MessageID: e.RunID, MessageMetadata: metadata{Rein: runMeta{ChatID: s.key.ID, RunID: e.RunID}}})
		}
		rd.event(e)
		out = append(out, rd.out...)
		rd.out = nil
		if rd.done {
			delete(s.runs, e.RunID)
			s.ended[e.RunID] = true
		}
	}
	return out, nil
}

// prime renders the run's events up to the stream's cursor, keeping
// nothing but the state they leave.
func (s *chatSource) prime(ctx context.Context, rd *runRenderer) error {
	from, err := s.h.runStart(ctx, s.key, rd.run)
	if err != nil {
		return err
	}
	for from < s.cursor {
		evs, _, err := s.h.svc.ReadEvents(ctx, s.key, from, int(min(s.cursor-from, streamPage)))
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			rd.event(e)
		}
		from = evs[len(evs)-1].Seq
	}
	rd.out = nil
	return nil
}

func (s *chatSource) caughtUp(context.Context) []byte { return []byte(caughtUpComment) }

func (s *chatSource) done() bool { return false }
