package agui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// runInput is the part of AG-UI's RunAgentInput Rein reads. tools,
// context, state and forwardedProps are accepted and not used
// (docs/protocols.md says why).
type runInput struct {
	ThreadID *string         `json:"threadId"`
	RunID    *string         `json:"runId"`
	Messages []inputMessage  `json:"messages"`
	Resume   []resumeEntry   `json:"resume"`
	Tools    json.RawMessage `json:"tools"`
}

type inputMessage struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type resumeEntry struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload"`
}

// decision is what a resume entry answers for its call.
type decision struct {
	Approved *bool   `json:"approved"`
	Allow    *bool   `json:"allow"`
	Message  *string `json:"message"`
	Reason   *string `json:"reason"`
}

// runAgent is POST /ag-ui/{agent}: the run of a RunAgentInput, streamed.
func (h *Handler) runAgent(w http.ResponseWriter, r *http.Request) {
	var in runInput
	if err := decode(w, r, &in); err != nil {
		h.writeError(w, r, err)
		return
	}
	if in.ThreadID == nil || *in.ThreadID == "" {
		h.writeError(w, r, rein.InvalidArgument("threadId", "threadId must be a non-empty string"))
		return
	}
	if in.RunID == nil || *in.RunID == "" {
		h.writeError(w, r, rein.InvalidArgument("runId", "runId must be a non-empty string"))
		return
	}
	key := rein.SessionKey{Owner: protocol.Owner(r), ID: *in.ThreadID}
	agent := r.PathValue("agent")
	if len(in.Resume) > 0 {
		h.resume(w, r, key, agent, *in.RunID, in.Resume)
		return
	}
	text, err := lastUserText(in.Messages)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := h.openThread(r, key, agent, true); err != nil {
		h.writeError(w, r, err)
		return
	}
	res, err := h.svc.SendMessage(r.Context(), key, sessions.MessageRequest{Text: text, WhenBusy: rein.WhenBusyEnqueue, ClientID: *in.RunID})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	from := res.After()
	if res.Repeat {
		// A retried POST: its run's stream, from its first event.
		if from, err = h.runStart(r.Context(), key, res.RunID); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	h.serve(w, r, key, newRenderer(key.ID, res.RunID, *in.RunID), from, true)
}

// lastUserText is the input of a run: the last message, which must be the
// user's, as text.
func lastUserText(msgs []inputMessage) (string, error) {
	if len(msgs) == 0 {
		return "", rein.InvalidArgument("messages", "messages must end with the user's message (or resume must answer the thread's interrupts)")
	}
	i := len(msgs) - 1
	m := msgs[i]
	param := fmt.Sprintf("messages[%d]", i)
	if m.Role != "user" {
		return "", rein.InvalidArgument(param+".role", "the last message must be the user's (role user), not %q", m.Role)
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return "", rein.InvalidArgument(param+".content", "the user's message must have text")
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) != nil {
		return "", rein.InvalidArgument(param+".content", "content must be a string or an array of text parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", rein.InvalidArgument(fmt.Sprintf("%s.content[%d]", param, j), "only text parts are supported, not %q", p.Type)
		}
		b.WriteString(*p.Text)
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", rein.InvalidArgument(param+".content", "the user's message must have text")
	}
	return b.String(), nil
}

// resume answers the thread's interrupts (each entry's interruptId is a
// waiting call's toolCallId) and streams the waiting run onward, as a new
// AG-UI run named by this request's runId. Every entry is checked before
// any is applied.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, key rein.SessionKey, agent, name string, entries []resumeEntry) {
	ctx := r.Context()
	if err := h.openThread(r, key, agent, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	answers := make([]sessions.ConfirmRequest, len(entries))
	run := ""
	for i, e := range entries {
		param := fmt.Sprintf("resume[%d]", i)
		idx := -1
		for j, c := range info.PendingConfirmations {
			if c.ToolUseID == e.InterruptID {
				idx = j
			}
		}
		if e.InterruptID == "" || idx < 0 {
			h.writeError(w, r, rein.InvalidArgument(param+".interruptId", "interruptId %q names no interrupt the thread waits for", e.InterruptID))
			return
		}
		c := info.PendingConfirmations[idx]
		if run != "" && c.RunID != run {
			h.writeError(w, r, rein.InvalidArgument(param+".interruptId", "the entries answer interrupts of different runs"))
			return
		}
		run = c.RunID
		var d decision
		if len(e.Payload) > 0 && json.Unmarshal(e.Payload, &d) != nil {
			h.writeError(w, r, rein.InvalidArgument(param+".payload", "payload must be an object such as {\"approved\": false, \"message\": \"...\"}"))
			return
		}
		a := sessions.ConfirmRequest{ToolUseID: c.ToolUseID, Allow: true}
		switch e.Status {
		case "resolved":
			if d.Approved != nil {
				a.Allow = *d.Approved
			} else if d.Allow != nil {
				a.Allow = *d.Allow
			}
		case "cancelled":
			a.Allow = false
		default:
			h.writeError(w, r, rein.InvalidArgument(param+".status", "status must be resolved or cancelled"))
			return
		}
		if !a.Allow {
			msg := "denied"
			if d.Message != nil {
				msg = *d.Message
			} else if d.Reason != nil {
				msg = *d.Reason
			}
			a.DenyMessage = &msg
		}
		answers[i] = a
	}
	from := info.LastSeq
	for _, a := range answers {
		if _, err := h.svc.ConfirmTool(ctx, key, a); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	start, err := h.runStart(ctx, key, run)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	rd := newRenderer(key.ID, run, name)
	if err := h.prime(ctx, key, rd, start, from); err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serve(w, r, key, rd, from, true)
}

// prime renders the log's events in (start, to] silently: what a stream
// that starts at to must know (the run's steps and the text shown), then
// reopens the run as of to.
func (h *Handler) prime(ctx context.Context, key rein.SessionKey, rd *renderer, start, to int64) error {
	for cursor := start; cursor < to; {
		evs, _, err := h.svc.ReadEvents(ctx, key, cursor, int(min(to-cursor, streamPage)))
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			rd.event(e)
		}
		cursor = evs[len(evs)-1].Seq
	}
	rd.out, rd.seq = rd.out[:0], to
	if st := rd.run; st != nil && st.open {
		reopen := true
		if rd.only != "" {
			// A run going on after its approvals: a new AG-UI run, and
			// what was open was closed where it waited.
			st.forget()
			reopen = false
		}
		rd.begin(st, reopen)
	}
	rd.done = false
	return nil
}

// Read sizes: a stream's page, and one backward read of a thread
// stream's resume looking for its run's start.
const (
	streamPage = 1000
	backPage   = 500
)

// runStart is the cursor just before the run's user.message.
func (h *Handler) runStart(ctx context.Context, key rein.SessionKey, runID string) (int64, error) {
	return protocol.RunStart(ctx, func(ctx context.Context, after int64, limit int) ([]rein.Event, int64, error) {
		return h.svc.ReadEvents(ctx, key, after, limit)
	}, runID)
}

// serve writes rd's rendering of the log after from: replayed page by page,
// then live (one loop, so the seam can neither skip nor repeat), each frame
// `id: SEQ` and `data: EVENT`. A run stream ends with its run's
// RUN_FINISHED or RUN_ERROR, or where the run waits for confirmations; the
// thread stream goes on (follow) or ends at the log's end.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, key rein.SessionKey, rd *renderer, from int64, follow bool) {
	closing, release, err := protocol.OpenStream(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer release()
	hdr := w.Header()
	protocol.StreamHeaders(hdr)
	w.WriteHeader(http.StatusOK)
	out := protocol.NewSSE(w)
	// The headers go at once: a client's request returns on them, and a
	// thread with nothing new to show would otherwise hold it until the
	// first heartbeat.
	if err := out.Write(nil); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(closing, cancel)
	defer stop()

	cursor := from
	for {
		evs, last, err := h.svc.ReadEvents(ctx, key, cursor, streamPage)
		if err != nil {
			if ctx.Err() == nil {
				_, body := h.errorOf(r, err)
				rd.closeAll()
				rd.emit(map[string]any{"type": "RUN_ERROR", "message": body.Message, "code": body.Code})
				_ = writeFrames(out, rd.out)
			}
			return
		}
		for _, e := range evs {
			rd.event(e)
		}
		if len(evs) > 0 {
			cursor = evs[len(evs)-1].Seq
		}
		if !rd.done && cursor >= last && len(rd.waiting()) > 0 && h.parked(ctx, key, rd) {
			rd.park()
		}
		if err := writeFrames(out, rd.out); err != nil {
			return
		}
		rd.out = rd.out[:0]
		if rd.done || (!follow && cursor >= last) {
			return
		}
		if cursor < last {
			continue
		}
		if err := out.WaitOrBeat(ctx, h.heartbeat, func(ctx context.Context) error { return h.svc.WaitEvents(ctx, key, cursor) }); err != nil {
			return
		}
	}
}

// closeAll closes what the open run has open, before a RUN_ERROR.
func (rd *renderer) closeAll() {
	if rd.run != nil && rd.run.open {
		rd.closeOpen(rd.run)
	}
}

// parked reports whether the open run waits for the calls the stream
// showed asking: they are still pending in the store.
func (h *Handler) parked(ctx context.Context, key rein.SessionKey, rd *renderer) bool {
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return false
	}
	for _, c := range info.PendingConfirmations {
		for _, p := range rd.waiting() {
			if c.RunID == rd.run.id && c.ToolUseID == p.id {
				return true
			}
		}
	}
	return false
}

// writeFrames sends frames in one write.
func writeFrames(out *protocol.SSE, fs []frame) error {
	if len(fs) == 0 {
		return nil
	}
	out.Buf.Reset()
	for _, f := range fs {
		b, err := json.Marshal(f.data)
		if err != nil {
			return err
		}
		out.Buf.WriteString("id: ")
		out.Buf.WriteString(strconv.FormatInt(f.seq, 10))
		out.Buf.WriteString("\ndata: ")
		out.Buf.Write(b)
		out.Buf.WriteString("\n\n")
	}
	return out.Write(out.Buf.Bytes())
}

// threadStream is GET /ag-ui/{agent}/threads/{thread}/stream: the thread's
// runs after a cursor (Last-Event-ID, else ?after=, else the start), live;
// ?follow=false ends it at the log's end. A cursor in the middle of a run
// reopens that run (RUN_STARTED, its open step and message) before going on.
func (h *Handler) threadStream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := thread(r)
	after := r.URL.Query().Get("after")
	param := "after"
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		after, param = v, "Last-Event-ID"
	}
	var from int64
	if after != "" {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < 0 {
			h.writeError(w, r, rein.InvalidArgument(param, "%s must be a non-negative integer (an event's id)", param))
			return
		}
		from = n
	}
	follow := true
	if v := r.URL.Query().Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			h.writeError(w, r, rein.InvalidArgument("follow", "follow must be true or false"))
			return
		}
		follow = b
	}
	if err := h.openThread(r, key, r.PathValue("agent"), false); err != nil {
		h.writeError(w, r, err)
		return
	}
	rd := newRenderer(key.ID, "", "")
	if from > 0 {
		start, err := h.threadRunStart(ctx, key, from)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if err := h.prime(ctx, key, rd, start, from); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	h.serve(w, r, key, rd, from, follow)
}

// threadRunStart is where rendering must start for a thread stream resumed
// at cursor: before the session.run_started of the run open there (the
// last run started at or before the cursor), or the cursor itself.
func (h *Handler) threadRunStart(ctx context.Context, key rein.SessionKey, cursor int64) (int64, error) {
	for hi := cursor; hi > 0; {
		lo := max(0, hi-backPage)
		evs, _, err := h.svc.ReadEvents(ctx, key, lo, int(hi-lo))
		if err != nil {
			return 0, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			switch evs[i].Type {
			case rein.EventRunStarted:
				return evs[i].Seq - 1, nil
			case rein.EventRunCompleted:
				if i == len(evs)-1 && hi == cursor {
					continue // the cursor's own event ended a run
				}
				return evs[i].Seq, nil
			}
		}
		hi = lo
	}
	return 0, nil
}

// cancel is POST /ag-ui/{agent}/threads/{thread}/runs/{run}/cancel: a stop
// of exactly the run the client named by its runId (the client id of its
// message) — also before that message arrives: the stop is remembered and
// the run is created already cancelled. A thread not seen yet is created,
// so a stop pressed before the first run's POST still lands.
func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) {
	key := thread(r)
	if err := h.openThread(r, key, r.PathValue("agent"), true); err != nil {
		h.writeError(w, r, err)
		return
	}
	res, err := h.svc.Interrupt(r.Context(), key, sessions.InterruptRequest{ClientID: r.PathValue("run"), Mode: rein.StopCancel})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var run any
	if res.RunID != "" {
		run = res.RunID
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": res.Accepted, "runId": r.PathValue("run"), "reinRunId": run})
}
