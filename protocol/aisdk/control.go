package aisdk

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// readObject reads a small JSON object body ({} when empty).
func readObject(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, protocol.MaxBody(r, defaultMaxBody)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return rein.Errorf(rein.CodeTooLarge, "the body is larger than %d bytes", tooBig.Limit)
		}
		return rein.InvalidArgument("body", "the body could not be read")
	}
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return rein.InvalidArgument(te.Field, "%s has the wrong type (%s)", te.Field, te.Value)
		}
		return rein.InvalidArgument("body", "the body must be a JSON object")
	}
	return nil
}

// stop is POST /ai-sdk/chat/{id}/stop {"message_id"?, "mode"?}: Rein's
// server-side stop, which useChat lacks (its stop() only aborts the
// fetch). message_id names the user message whose run to stop (the run's
// client id), also before that message has arrived; without it, the
// chat's current run. Mode is interrupt (the
// default: the run ends cooperatively, with its reply so far) or cancel.
func (h *Handler) stop(w http.ResponseWriter, r *http.Request) {
	var body struct {
		MessageID *string `json:"message_id"`
		Mode      *string `json:"mode"`
	}
	if err := readObject(r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	req := sessions.InterruptRequest{Mode: rein.StopInterrupt}
	if body.Mode != nil {
		req.Mode = rein.StopMode(*body.Mode)
		if !req.Mode.Valid() || *body.Mode == "" {
			h.writeError(w, r, rein.InvalidArgument("mode", "mode must be interrupt or cancel, got %q", *body.Mode))
			return
		}
	}
	if body.MessageID != nil && *body.MessageID == "" {
		h.writeError(w, r, rein.InvalidArgument("message_id", "message_id must be a user message's id when present"))
		return
	}
	ctx := r.Context()
	key := rein.SessionKey{Owner: protocol.Owner(r), ID: r.PathValue("id")}
	if body.MessageID != nil {
		// The run's client id: a stop that overtakes its message (another
		// connection, another instance) is remembered, and the message's
		// run is created already ended.
		// A chat's first message may be the one overtaken: the chat is
		// created as its message would create it.
		req.ClientID = *body.MessageID
		if err := h.ensureChat(ctx, key, r.URL.Query().Get("agent")); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	res, err := h.svc.Interrupt(ctx, key, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ans := stopAnswer{Accepted: res.Accepted}
	if res.RunID != "" {
		ans.RunID = &res.RunID
	}
	writeJSON(w, http.StatusOK, ans)
}

type stopAnswer struct {
	Accepted bool    `json:"accepted"`
	RunID    *string `json:"run_id"`
}

// note is POST /ai-sdk/chat/{id}/notes {"text", "id"?}: a note the chat's
// running run reads at its next step (or the next run reads first); id
// makes it idempotent.
func (h *Handler) note(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Text *string `json:"text"`
		ID   *string `json:"id"`
	}
	if err := readObject(r, &body); err != nil {
		h.writeError(w, r, err)
		return
	}
	if body.Text == nil || *body.Text == "" {
		h.writeError(w, r, rein.InvalidArgument("text", "text is required: the note, a non-empty string"))
		return
	}
	req := sessions.SupplementRequest{Text: *body.Text}
	if body.ID != nil {
		if *body.ID == "" {
			h.writeError(w, r, rein.InvalidArgument("id", "id must be a non-empty string when present"))
			return
		}
		req.ID = *body.ID
	}
	res, err := h.svc.Supplement(r.Context(), rein.SessionKey{Owner: protocol.Owner(r), ID: r.PathValue("id")}, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": res.ID, "status": res.Status})
}
