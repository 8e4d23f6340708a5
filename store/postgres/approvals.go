package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The approvals inbox and confirmation expiry (migration 0009): both read
// one range of an index, so their cost follows what they return.

// inboxStatusSQL is the inbox status of a confirmation's state, the very
// expression confirmations_inbox indexes (the planner matches an
// expression index only against the same expression).
const inboxStatusSQL = `(CASE WHEN c.state IN ('allowed', 'denied', 'started') THEN 'answered' ELSE c.state END)`

// inboxSQL and inboxAfterSQL are ListInbox's queries, the first page and
// a page after a position: a range of confirmations_inbox read backwards
// (TestInboxUsesIndex checks the plans). Two queries, not one with an "is
// this the first page" switch, so the position always bounds the index
// range.
const (
	inboxSelectSQL = `SELECT c.owner, c.session_id, c.run_id, c.tool_use_id, c.name, c.input, c.state, c.deny_message,
		c.created_at, c.resolved_at, c.expires_at,
		(SELECT s.title FROM sessions s WHERE s.owner = c.owner AND s.id = c.session_id)
	FROM confirmations c
	WHERE c.owner = $1 AND ` + inboxStatusSQL + ` = $2`
	inboxOrderSQL = `
	ORDER BY c.created_at DESC, c.session_id DESC, c.tool_use_id DESC LIMIT $3`
	inboxSQL      = inboxSelectSQL + inboxOrderSQL
	inboxAfterSQL = inboxSelectSQL + ` AND (c.created_at, c.session_id, c.tool_use_id) < ($4, $5, $6)` + inboxOrderSQL
)

// dueSQL is DueConfirmations' query: a range of confirmations_due.
const dueSQL = `SELECT ` + confirmationColumns + ` FROM confirmations
	WHERE state = 'pending' AND expires_at IS NOT NULL AND expires_at <= $1
	ORDER BY expires_at, owner, session_id, tool_use_id LIMIT $2`

// ListInbox implements store.Confirmations.
func (s *Store) ListInbox(ctx context.Context, owner string, page store.InboxPage) ([]*store.InboxItem, error) {
	var limit *int
	if page.Limit > 0 {
		limit = &page.Limit
	}
	a := page.After
	if a.IsZero() {
		return queryAll(ctx, s, "list the approvals inbox", scanInboxItem, inboxSQL, owner, string(page.Status), limit)
	}
	return queryAll(ctx, s, "list the approvals inbox", scanInboxItem, inboxAfterSQL,
		owner, string(page.Status), limit, dbTime(a.CreatedAt), a.SessionID, a.ToolUseID)
}

func scanInboxItem(row pgx.Row) (*store.InboxItem, error) {
	var title *string
	c, err := scanConfirmation(rowWith{row, []any{&title}})
	if err != nil {
		return nil, err
	}
	return &store.InboxItem{Confirmation: c, SessionTitle: title}, nil
}

// rowWith scans a row's leading columns as its Row does and the rest into
// extra.
type rowWith struct {
	pgx.Row
	extra []any
}

func (r rowWith) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// endOfTime bounds DueConfirmations when any expiry will do.
var endOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// DueConfirmations implements store.Confirmations.
func (s *Store) DueConfirmations(ctx context.Context, before time.Time, limit int) ([]*store.Confirmation, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	if before.IsZero() {
		before = endOfTime
	}
	return queryAll(ctx, s, "list due confirmations", scanConfirmation, dueSQL, dbTime(before), lim)
}

// ExpireConfirmation implements store.Tx. The UPDATE's conditions,
// re-checked after waiting on a concurrent writer's row lock, let exactly
// one of an expiry and an answer (or of several instances expiring it)
// win; the read after it, in the same round trip, explains a refusal.
func (u *updateTx) ExpireConfirmation(toolUseID string) (*store.Confirmation, error) {
	var (
		c               *store.Confirmation
		expired, exists bool
		cur             *store.Confirmation
	)
	b := &pgx.Batch{}
	queryRow(b, scanConfirmation, &c, &expired, `UPDATE confirmations SET state = 'expired', deny_message = $4, resolved_at = $5
		WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3 AND state = 'pending'
		  AND expires_at IS NOT NULL AND expires_at <= $5
		RETURNING `+confirmationColumns, u.key.Owner, u.key.ID, toolUseID, rein.ConfirmationExpiredMessage, u.now)
	queryRow(b, scanConfirmation, &cur, &exists, `SELECT `+confirmationColumns+` FROM confirmations WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3`,
		u.key.Owner, u.key.ID, toolUseID)
	if err := u.send("expire confirmation", b); err != nil {
		return nil, err
	}
	switch {
	case expired:
		return c, nil
	case !exists:
		return nil, rein.Errorf(rein.CodeNotFound, "confirmation not found")
	}
	if err := store.CheckExpiry(cur, u.now); err != nil {
		return nil, err
	}
	return nil, rein.Errorf(rein.CodeConflict, "confirmation %s could not expire", toolUseID)
}
