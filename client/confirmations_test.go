package client_test

import (
	"errors"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// TestListConfirmations: the approvals inbox through the client — the
// caller's pending calls across sessions, newest first, a page at a time;
// answered ones under their status; a bad status is invalid_argument.
func TestListConfirmations(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"tok": "alice"})
	c := s.client("tok")
	ctx := t.Context()
	var sids, calls []string
	for range 3 {
		sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		w := watch(t, c, sess.ID)
		r := send(t, c, sess.ID, client.Message{Text: "note it"})
		req := payload[rein.ToolConfirmationRequestedPayload](t, w.until(is(rein.EventToolConfirmationRequested, r.RunID)))
		sids, calls = append(sids, sess.ID), append(calls, req.ToolUseID)
	}
	page, err := c.ListConfirmations(ctx, client.ConfirmationListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Confirmations) != 2 || page.Next == "" || page.Confirmations[0].ToolUseID != calls[2] ||
		page.Confirmations[0].SessionID != sids[2] || page.Confirmations[0].Status != "pending" ||
		page.Confirmations[0].Allow != nil || page.Confirmations[0].Name != "write_note" {
		t.Fatalf("first page %+v", page)
	}
	rest, err := c.ListConfirmations(ctx, client.ConfirmationListOptions{Limit: 2, After: page.Next})
	if err != nil || len(rest.Confirmations) != 1 || rest.Confirmations[0].ToolUseID != calls[0] || rest.Next != "" {
		t.Fatalf("second page %+v %v", rest, err)
	}
	if _, err := c.ConfirmTool(ctx, sids[1], client.ToolConfirmation{ToolUseID: calls[1], DenyMessage: "no"}); err != nil {
		t.Fatal(err)
	}
	answered, err := c.ListConfirmations(ctx, client.ConfirmationListOptions{Status: "answered"})
	if err != nil || len(answered.Confirmations) != 1 || answered.Confirmations[0].Allow == nil || *answered.Confirmations[0].Allow ||
		answered.Confirmations[0].AnsweredAt == nil {
		t.Fatalf("answered %+v %v", answered, err)
	}
	if _, err := c.ListConfirmations(ctx, client.ConfirmationListOptions{Status: "later"}); !errors.Is(err, rein.ErrInvalidArgument) {
		t.Fatalf("a bad status: %v", err)
	}
}
