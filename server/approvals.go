package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// confirmationJSON is an item of GET /api/confirmations, the approvals
// inbox (docs/api.md).
type confirmationJSON struct {
	SessionID    string          `json:"session_id"`
	SessionTitle *string         `json:"session_title"`
	RunID        string          `json:"run_id"`
	ToolUseID    string          `json:"tool_use_id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	CreatedAt    string          `json:"created_at"`
	ExpiresAt    *string         `json:"expires_at"`
	Status       string          `json:"status"`
	Allow        *bool           `json:"allow"`
	AnsweredAt   *string         `json:"answered_at"`
}

func toConfirmationJSON(it *store.InboxItem) confirmationJSON {
	c := it.Confirmation
	in := c.Input
	if !jsonx.Valid(in) {
		// A model may produce invalid JSON as a tool input; it is shown
		// as the string it was.
		in, _ = json.Marshal(string(c.Input))
	}
	out := confirmationJSON{
		SessionID: c.SessionID, SessionTitle: it.SessionTitle, RunID: c.RunID, ToolUseID: c.ToolUseID,
		Name: c.Name, Input: in, CreatedAt: rein.FormatTime(c.CreatedAt),
	}
	if !c.ExpiresAt.IsZero() {
		out.ExpiresAt = optional(rein.FormatTime(c.ExpiresAt))
	}
	switch {
	case store.InboxPending.Has(c.State):
		out.Status = string(store.InboxPending)
	case store.InboxExpired.Has(c.State):
		out.Status = string(store.InboxExpired)
		no := false
		out.Allow = &no
		out.AnsweredAt = optional(rein.FormatTime(c.ResolvedAt))
	default:
		out.Status = string(store.InboxAnswered)
		allow := c.State != store.ConfirmationDenied
		out.Allow = &allow
		out.AnsweredAt = optional(rein.FormatTime(c.ResolvedAt))
	}
	return out
}

// listConfirmations is GET /api/confirmations: the caller's confirmations
// across all their sessions, by status, newest first, a page at a time.
func (s *Server) listConfirmations(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var req sessions.ConfirmationPageRequest
	if q.Has("status") {
		req.Status = store.InboxStatus(q.Get("status"))
		if !req.Status.Valid() {
			s.writeError(w, r, rein.InvalidArgument("status", "status must be pending, answered or expired"), nil)
			return
		}
	}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.writeError(w, r, rein.InvalidArgument("limit", "limit must be a positive number"), nil)
			return
		}
		req.Limit = n
	}
	req.After = q.Get("after")
	page, err := s.svc.ListConfirmations(r.Context(), ownerOf(r), req)
	if err != nil {
		s.writeError(w, r, err, nil)
		return
	}
	out := make([]confirmationJSON, 0, len(page.Confirmations))
	for _, it := range page.Confirmations {
		out = append(out, toConfirmationJSON(it))
	}
	writeJSON(w, http.StatusOK, map[string]any{"confirmations": out, "next": optional(page.Next)})
}
