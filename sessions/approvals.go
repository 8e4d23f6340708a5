package sessions

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Page sizes of ListConfirmations (docs/api.md, the approvals inbox).
const (
	DefaultConfirmationPage = 100
	MaxConfirmationPage     = 1000
)

// ConfirmationPageRequest asks for a page of the owner's approvals inbox.
type ConfirmationPageRequest struct {
	// Status is pending ("": pending), answered or expired.
	Status store.InboxStatus
	// Limit is the page's size (0: DefaultConfirmationPage; above
	// MaxConfirmationPage: MaxConfirmationPage; negative: invalid).
	Limit int
	// After is the previous page's Next ("": the first page).
	After string
}

// ConfirmationPage is a page of the approvals inbox, newest first.
type ConfirmationPage struct {
	Confirmations []*store.InboxItem
	// Next is the cursor of the following page, "" when this is the last.
	Next string
}

// ListConfirmations returns a page of the owner's tool confirmations
// across all their sessions (the approvals inbox), read in one indexed
// store query whatever the number of sessions. Its cursor is a position
// (the last confirmation's creation time, session and tool use id), not an
// offset: confirmations made since never shift the pages that follow.
func (s *Service) ListConfirmations(ctx context.Context, owner string, req ConfirmationPageRequest) (ConfirmationPage, error) {
	status := req.Status
	if status == "" {
		status = store.InboxPending
	}
	if !status.Valid() {
		return ConfirmationPage{}, rein.InvalidArgument("status", "status must be pending, answered or expired")
	}
	limit := req.Limit
	switch {
	case limit < 0:
		return ConfirmationPage{}, rein.InvalidArgument("limit", "limit must be a positive number")
	case limit == 0:
		limit = DefaultConfirmationPage
	case limit > MaxConfirmationPage:
		limit = MaxConfirmationPage
	}
	after, err := decodeInboxCursor(req.After)
	if err != nil {
		return ConfirmationPage{}, err
	}
	list, err := s.st.ListInbox(ctx, owner, store.InboxPage{Status: status, After: after, Limit: limit + 1})
	if err != nil {
		return ConfirmationPage{}, err
	}
	page := ConfirmationPage{Confirmations: list}
	if len(list) > limit {
		page.Confirmations = list[:limit]
		page.Next = encodeInboxCursor(store.InboxCursorOf(list[limit-1].Confirmation))
	}
	return page, nil
}

// An inbox cursor is the base64url of "<created_at µs>\n<session id>\n<tool
// use id>": opaque to clients, a position to the store. Neither id can
// hold a newline (session ids are checked; tool use ids come from models,
// so the last field takes the rest).
func encodeInboxCursor(c store.InboxCursor) string {
	raw := strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "\n" + c.SessionID + "\n" + c.ToolUseID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeInboxCursor(s string) (store.InboxCursor, error) {
	if s == "" {
		return store.InboxCursor{}, nil
	}
	bad := rein.InvalidArgument("after", "after must be a cursor from a previous page's next")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.InboxCursor{}, bad
	}
	parts := strings.SplitN(string(raw), "\n", 3)
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return store.InboxCursor{}, bad
	}
	micros, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return store.InboxCursor{}, bad
	}
	return store.InboxCursor{CreatedAt: time.UnixMicro(micros).UTC(), SessionID: parts[1], ToolUseID: parts[2]}, nil
}
