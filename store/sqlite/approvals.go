package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// The approvals inbox and confirmation expiry (schema version 8): both
// read one range of an index, so their cost follows what they return.

// inboxStatusSQL is the inbox status of a confirmation's state, the very
// expression confirmations_inbox indexes: SQLite uses an index on an
// expression only for a query that writes the same expression.
const inboxStatusSQL = `(CASE WHEN state IN ('allowed', 'denied', 'started') THEN 'answered' ELSE state END)`

// qInbox and qInboxAfter are ListInbox's queries, the first page and a
// page after a position: a range of confirmations_inbox read backwards
// (TestInboxUsesIndex checks the plans). Two queries, not one with an
// "is this the first page" switch, because SQLite bounds an index range
// only by a condition that always applies.
const (
	qInboxSelect = `SELECT c.owner, c.session_id, ` + confirmationColumns + `,
		(SELECT s.title FROM sessions s WHERE s.pk = c.session_pk)
	FROM confirmations c INDEXED BY confirmations_inbox
	WHERE c.owner = ? AND ` + inboxStatusSQL + ` = ?`
	qInboxOrder = `
	ORDER BY c.created_at DESC, c.session_id DESC, c.tool_use_id DESC LIMIT ?`
	qInbox      = qInboxSelect + qInboxOrder
	qInboxAfter = qInboxSelect + ` AND (c.created_at, c.session_id, c.tool_use_id) < (?, ?, ?)` + qInboxOrder
)

// qDue is DueConfirmations' query: a range of confirmations_due.
const qDue = `SELECT c.owner, c.session_id, ` + confirmationColumns + `
	FROM confirmations c INDEXED BY confirmations_due
	WHERE c.state = 'pending' AND c.expires_at IS NOT NULL AND c.expires_at <= ?
	ORDER BY c.expires_at, c.owner, c.session_id, c.tool_use_id LIMIT ?`

// ListInbox implements store.Confirmations.
func (s *Store) ListInbox(ctx context.Context, owner string, page store.InboxPage) ([]*store.InboxItem, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	a := page.After
	q, args := qInbox, []any{owner, string(page.Status), limit}
	if !a.IsZero() {
		q, args = qInboxAfter, []any{owner, string(page.Status), a.CreatedAt.UnixMicro(), a.SessionID, a.ToolUseID, limit}
	}
	rows, err := s.rq.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail("listing the approvals inbox", err)
	}
	defer rows.Close()
	out := []*store.InboxItem{}
	for rows.Next() {
		var it store.InboxItem
		var title sql.NullString
		if it.Confirmation, err = scanKeyedConfirmation(rows, &title); err != nil {
			return nil, s.fail("listing the approvals inbox", err)
		}
		if title.Valid {
			it.SessionTitle = &title.String
		}
		out = append(out, &it)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing the approvals inbox", err)
	}
	return out, nil
}

// DueConfirmations implements store.Confirmations.
func (s *Store) DueConfirmations(ctx context.Context, before time.Time, limit int) ([]*store.Confirmation, error) {
	if limit <= 0 {
		limit = -1
	}
	bound := int64(1<<63 - 1)
	if !before.IsZero() {
		bound = before.UnixMicro()
	}
	rows, err := s.rq.QueryContext(ctx, qDue, bound, limit)
	if err != nil {
		return nil, s.fail("listing due confirmations", err)
	}
	defer rows.Close()
	out := []*store.Confirmation{}
	for rows.Next() {
		c, err := scanKeyedConfirmation(rows)
		if err != nil {
			return nil, s.fail("listing due confirmations", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing due confirmations", err)
	}
	return out, nil
}

// scanKeyedConfirmation reads a row of owner, session_id, the
// confirmation's columns and then extra.
func scanKeyedConfirmation(rows *sql.Rows, extra ...any) (*store.Confirmation, error) {
	var key rein.SessionKey
	c, err := scanConfirmation(key, rowScanner(func(dest ...any) error {
		return rows.Scan(append(append([]any{&key.Owner, &key.ID}, dest...), extra...)...)
	}))
	if err != nil {
		return nil, err
	}
	c.Owner, c.SessionID = key.Owner, key.ID
	return c, nil
}

type rowScanner func(dest ...any) error

func (f rowScanner) Scan(dest ...any) error { return f(dest...) }

// expireConfirmation is Tx.ExpireConfirmation.
func (tx *wtx) expireConfirmation(key rein.SessionKey, si *sessInfo, toolUseID string) (*store.Confirmation, error) {
	c, err := scanConfirmation(key, tx.queryRow(`SELECT `+confirmationColumns+` FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, toolUseID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("confirmation")
	}
	if err != nil {
		return nil, err
	}
	if err := store.CheckExpiry(c, tx.now); err != nil {
		return nil, err
	}
	c.State, c.DenyMessage, c.ResolvedAt = store.ConfirmationExpired, rein.ConfirmationExpiredMessage, tx.now
	if _, err := tx.exec(`UPDATE confirmations SET state = ?, deny_message = ?, resolved_at = ? WHERE session_pk = ? AND tool_use_id = ?`,
		string(c.State), c.DenyMessage, c.ResolvedAt.UnixMicro(), si.pk, toolUseID); err != nil {
		return nil, err
	}
	return c, nil
}
