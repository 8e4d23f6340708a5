package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Confirmation is a tool call in the approvals inbox (GET
// /api/confirmations): waiting for an answer, answered, or expired.
type Confirmation struct {
	SessionID string `json:"session_id"`
	// SessionTitle is its session's title ("" when it has none).
	SessionTitle string `json:"session_title"`
	RunID        string `json:"run_id"`
	ToolUseID    string `json:"tool_use_id"`
	// Name is the tool's name.
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// CreatedAt is when the call asked for its answer.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when an unanswered call is denied as expired (nil:
	// never).
	ExpiresAt *time.Time `json:"expires_at"`
	// Status is "pending", "answered" or "expired".
	Status string `json:"status"`
	// Allow is the answer (nil while pending; false for an expired call).
	Allow *bool `json:"allow"`
	// AnsweredAt is when it was answered or expired (nil while pending).
	AnsweredAt *time.Time `json:"answered_at"`
}

// ConfirmationList is one page of ListConfirmations.
type ConfirmationList struct {
	Confirmations []Confirmation `json:"confirmations"`
	// Next is the cursor of the following page ("": this is the last).
	Next string `json:"next"`
}

// ConfirmationListOptions pages and filters the approvals inbox.
type ConfirmationListOptions struct {
	// Status is "pending" (""), "answered" or "expired".
	Status string
	// Limit is the page's size (0: the server's default, 100; at most
	// 1000).
	Limit int
	// After is the previous page's Next ("": the first page).
	After string
}

// ListConfirmations returns one page of the caller's tool confirmations
// across all their sessions, newest first: the one place to find every
// call waiting for a person. Answer one with ConfirmTool in its
// SessionID. The cursor is a position: confirmations made meanwhile never
// shift the pages that follow.
func (c *Client) ListConfirmations(ctx context.Context, opts ConfirmationListOptions) (*ConfirmationList, error) {
	q := url.Values{}
	if opts.Status != "" {
		q.Set("status", opts.Status)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	var out ConfirmationList
	if err := c.do(ctx, http.MethodGet, "/api/confirmations", q, nil, &out, nil); err != nil {
		return nil, err
	}
	if out.Confirmations == nil {
		out.Confirmations = []Confirmation{}
	}
	return &out, nil
}
