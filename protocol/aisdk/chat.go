package aisdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// chatRequest is the body DefaultChatTransport posts: the chat's id, the
// client's whole history (only its last message is read: the history is
// Rein's), what triggered the request, and Rein's when_busy extension.
type chatRequest struct {
	ID       *string     `json:"id"`
	Messages []uiMessage `json:"messages"`
	Trigger  *string     `json:"trigger"`
	WhenBusy *string     `json:"when_busy"`
}

type uiMessage struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Parts []uiPart `json:"parts"`
}

// uiPart is a message part: text parts carry the input, tool parts in
// state approval-responded carry an approval's answer.
type uiPart struct {
	Type     string      `json:"type"`
	Text     *string     `json:"text"`
	State    string      `json:"state"`
	Approval *uiApproval `json:"approval"`
}

type uiApproval struct {
	ID       string  `json:"id"`
	Approved *bool   `json:"approved"`
	Reason   *string `json:"reason"`
}

// chatOp is a checked chat request, ready to apply.
type chatOp struct {
	chat  string
	agent string
	// message is the user message's run (submit of a user message, or a
	// regenerate, whose text is read from the last run when applied).
	message    sessions.MessageRequest
	regenerate bool
	// answers are the approval responses (submit of an assistant
	// message).
	answers []sessions.ConfirmRequest
}

// decodeChat checks the whole body before anything is applied: a problem
// is a 400 naming the field.
func decodeChat(r *http.Request) (chatOp, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, protocol.MaxBody(r, defaultMaxBody)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return chatOp{}, rein.Errorf(rein.CodeTooLarge, "the body is larger than %d bytes", tooBig.Limit)
		}
		return chatOp{}, rein.InvalidArgument("body", "the body could not be read")
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return chatOp{}, rein.InvalidArgument(te.Field, "%s has the wrong type (%s)", te.Field, te.Value)
		}
		return chatOp{}, rein.InvalidArgument("body", "the body must be a JSON object: %v", err)
	}
	op := chatOp{agent: r.URL.Query().Get("agent")}
	if req.ID == nil || *req.ID == "" {
		return chatOp{}, rein.InvalidArgument("id", "id (the chat's id) is required")
	}
	op.chat = *req.ID
	if err := validChatID(op.chat); err != nil {
		return chatOp{}, err
	}
	trigger := "submit-message"
	if req.Trigger != nil {
		trigger = *req.Trigger
	}
	whenBusy := rein.WhenBusyEnqueue
	if req.WhenBusy != nil {
		whenBusy = rein.WhenBusy(*req.WhenBusy)
		switch whenBusy {
		case rein.WhenBusyReject, rein.WhenBusyEnqueue, rein.WhenBusyInterrupt, rein.WhenBusyRollback:
		default:
			return chatOp{}, rein.InvalidArgument("when_busy", "when_busy must be reject, enqueue, interrupt or rollback, got %q", *req.WhenBusy)
		}
	}
	switch trigger {
	case "regenerate-message":
		if req.WhenBusy != nil {
			return chatOp{}, rein.InvalidArgument("when_busy", "a regenerate always rolls back the last run; when_busy does not apply")
		}
		op.regenerate = true
		op.message.WhenBusy = rein.WhenBusyRollback
		return op, nil
	case "submit-message":
	default:
		return chatOp{}, rein.InvalidArgument("trigger", "trigger must be submit-message or regenerate-message, got %q", trigger)
	}
	if len(req.Messages) == 0 {
		return chatOp{}, rein.InvalidArgument("messages", "messages must hold at least the message sent")
	}
	i := len(req.Messages) - 1
	last := req.Messages[i]
	path := fmt.Sprintf("messages[%d]", i)
	switch last.Role {
	case "user":
		var parts []string
		for _, p := range last.Parts {
			if p.Type == "text" && p.Text != nil {
				parts = append(parts, *p.Text)
			}
		}
		text := strings.Join(parts, "\n")
		if strings.TrimSpace(text) == "" {
			return chatOp{}, rein.InvalidArgument(path+".parts", "the user message has no text part with text (only text is Rein's input)")
		}
		if last.ID == "" {
			return chatOp{}, rein.InvalidArgument(path+".id", "the user message needs its id (the run's client id)")
		}
		op.message = sessions.MessageRequest{Text: text, ClientID: last.ID, WhenBusy: whenBusy}
	case "assistant":
		for j, p := range last.Parts {
			if p.State != "approval-responded" {
				continue
			}
			pp := fmt.Sprintf("%s.parts[%d].approval", path, j)
			if p.Approval == nil || p.Approval.ID == "" {
				return chatOp{}, rein.InvalidArgument(pp+".id", "an approval-responded part needs approval.id")
			}
			if p.Approval.Approved == nil {
				return chatOp{}, rein.InvalidArgument(pp+".approved", "an approval-responded part needs approval.approved")
			}
			c := sessions.ConfirmRequest{ToolUseID: p.Approval.ID, Allow: *p.Approval.Approved}
			if !c.Allow && p.Approval.Reason != nil {
				c.DenyMessage = p.Approval.Reason
			}
			op.answers = append(op.answers, c)
		}
		if len(op.answers) == 0 {
			return chatOp{}, rein.InvalidArgument(path, "the last message is the assistant's with no approval response: send a user message, or answer an approval (addToolApprovalResponse)")
		}
	default:
		return chatOp{}, rein.InvalidArgument(path+".role", "the last message must be the user's (or the assistant's, answering approvals), got role %q", last.Role)
	}
	return op, nil
}

// validChatID checks a chat id as a caller-chosen session id.
func validChatID(id string) error {
	if !sessions.ValidSessionID(id) {
		return rein.InvalidArgument("id", "the chat id must be 1 to %d characters of A-Z a-z 0-9 . _ : - (got %q)", sessions.MaxSessionIDLen, id)
	}
	return nil
}

// postChat is POST /ai-sdk/chat: the chat's message (or regenerate, or
// approval answers) applied as the native API applies it, answered with
// the UI message stream of the run it concerns.
func (h *Handler) postChat(w http.ResponseWriter, r *http.Request) {
	op, err := decodeChat(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	key := rein.SessionKey{Owner: protocol.Owner(r), ID: op.chat}
	// A chat's first message creates its session; answers and
	// regenerates need one.
	if op.message.Text != "" {
		err = h.ensureChat(ctx, key, op.agent)
	} else {
		_, err = h.svc.GetSession(ctx, key)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var runID string
	var from int64
	switch {
	case len(op.answers) > 0:
		// Everything the run writes from here on is after this cursor.
		if _, from, err = h.svc.ReadEvents(ctx, key, 0, 1); err != nil {
			h.writeError(w, r, err)
			return
		}
		runID, err = h.answer(ctx, key, op.answers)
	default:
		if op.regenerate {
			runs, lerr := h.svc.ListRuns(ctx, key)
			if lerr != nil {
				h.writeError(w, r, lerr)
				return
			}
			if len(runs) == 0 {
				h.writeError(w, r, rein.InvalidArgument("trigger", "the chat has no reply to regenerate"))
				return
			}
			op.message.Text = runs[0].Input
		}
		var res sessions.MessageResult
		res, err = h.svc.SendMessage(ctx, key, op.message)
		runID, from = res.RunID, res.After()
		if err == nil && res.Repeat {
			// A client id already used (a retried request): its run's
			// stream, from its first event.
			from, err = h.runStart(ctx, key, runID)
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.serveRun(w, r, key, runID, from)
}

// ensureChat creates the chat's session on first use. Another owner's
// chat id is answered as a missing chat: not found.
func (h *Handler) ensureChat(ctx context.Context, key rein.SessionKey, agent string) error {
	_, err := h.svc.Session(ctx, key)
	if !errors.Is(err, rein.ErrNotFound) {
		return err
	}
	_, err = h.svc.CreateSession(ctx, key.Owner, sessions.CreateSessionRequest{ID: key.ID, Agent: agent})
	var re *rein.Error
	if errors.As(err, &re) && re.Code == rein.CodeConflict {
		return rein.Errorf(rein.CodeNotFound, "chat %s not found", key.ID)
	}
	return err
}

// answer applies approval responses: each still pending is the
// user.tool_confirmation it answers; one already answered (a retried
// request) is left alone. It returns the run they concern.
func (h *Handler) answer(ctx context.Context, key rein.SessionKey, answers []sessions.ConfirmRequest) (string, error) {
	info, err := h.svc.GetSession(ctx, key)
	if err != nil {
		return "", err
	}
	pending := map[string]string{}
	for _, c := range info.PendingConfirmations {
		pending[c.ToolUseID] = c.RunID
	}
	runID := ""
	for i, a := range answers {
		run, ok := pending[a.ToolUseID]
		if !ok {
			continue
		}
		if runID != "" && run != runID {
			return "", rein.InvalidArgument("messages", "the approvals answered (answer %d) belong to different runs", i)
		}
		runID = run
	}
	if runID == "" {
		return "", rein.Errorf(rein.CodeConflict, "no approval answered is pending (already answered, or its run has ended)")
	}
	for _, a := range answers {
		if pending[a.ToolUseID] == "" {
			continue
		}
		if _, err := h.svc.ConfirmTool(ctx, key, a); err != nil {
			var re *rein.Error
			if errors.As(err, &re) && re.Code == rein.CodeConflict {
				continue // answered meanwhile, by another tab
			}
			return "", err
		}
	}
	return runID, nil
}
