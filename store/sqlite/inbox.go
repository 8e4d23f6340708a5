package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// -------------------------------------------------------------------- inbox

const supplementColumns = `id, text, source, status, run_id, step, created_at, consumed_at`

func scanSupplement(key rein.SessionKey, sc interface{ Scan(...any) error }) (*store.Supplement, error) {
	out := store.Supplement{Owner: key.Owner, SessionID: key.ID}
	var status string
	var created, consumed sql.NullInt64
	if err := sc.Scan(&out.ID, &out.Text, &out.Source, &status, &out.RunID, &out.Step, &created, &consumed); err != nil {
		return nil, err
	}
	out.Status = store.SupplementStatus(status)
	out.CreatedAt, out.ConsumedAt = fromMicros(created), fromMicros(consumed)
	return &out, nil
}

// PushSupplement implements store.Inbox. Durable on return, like every
// write.
func (s *Store) PushSupplement(ctx context.Context, in *store.Supplement) (*store.Supplement, bool, error) {
	key := rein.SessionKey{Owner: in.Owner, ID: in.SessionID}
	var out *store.Supplement
	created := false
	err := s.write(ctx, "pushing supplement", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		if in.ID != "" {
			prev, err := scanSupplement(key, tx.queryRow(`SELECT `+supplementColumns+` FROM supplements WHERE session_pk = ? AND id = ?`, si.pk, in.ID))
			if err == nil {
				out, created = prev, false
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		rec := store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: in.ID, Text: in.Text, Source: in.Source,
			Status: store.SupplementQueued, CreatedAt: norm(in.CreatedAt)}
		if rec.ID == "" {
			rec.ID = id.New(id.Supplement)
		}
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = tx.now
		}
		_, err = tx.exec(`INSERT INTO supplements (session_pk, id, text, source, status, run_id, step, created_at)
			VALUES (?, ?, ?, ?, ?, '', 0, ?)`, si.pk, rec.ID, rec.Text, rec.Source, string(rec.Status), rec.CreatedAt.UnixMicro())
		if err != nil {
			return err
		}
		out, created = &rec, true
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, created, nil
}

// ConsumeSupplements implements store.Inbox. Every write goes through the
// one writer, so two consumers can never both see a supplement queued.
func (s *Store) ConsumeSupplements(ctx context.Context, key rein.SessionKey, runID string, step int) ([]*store.Supplement, error) {
	var out []*store.Supplement
	err := s.write(ctx, "consuming supplements", func(tx *wtx) error {
		out = []*store.Supplement{}
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		rows, err := tx.query(`SELECT `+supplementColumns+` FROM supplements WHERE session_pk = ? AND status = 'queued' ORDER BY pk`, si.pk)
		if err != nil {
			return err
		}
		for rows.Next() {
			sup, err := scanSupplement(key, rows)
			if err != nil {
				rows.Close()
				return err
			}
			sup.Status, sup.RunID, sup.Step, sup.ConsumedAt = store.SupplementConsumed, runID, step, tx.now
			out = append(out, sup)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(out) == 0 {
			return nil
		}
		_, err = tx.exec(`UPDATE supplements SET status = 'consumed', run_id = ?, step = ?, consumed_at = ?
			WHERE session_pk = ? AND status = 'queued'`, runID, step, tx.now.UnixMicro(), si.pk)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PendingSupplements implements store.Inbox.
func (s *Store) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return 0, s.fail("counting supplements", err)
	}
	defer tx.Rollback()
	pk, _, err := readPK(ctx, tx, key)
	if err != nil {
		return 0, s.fail("counting supplements", err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM supplements WHERE session_pk = ? AND status = 'queued'`, pk).Scan(&n); err != nil {
		return 0, s.fail("counting supplements", err)
	}
	return n, nil
}

// GetSupplement implements store.Inbox.
func (s *Store) GetSupplement(ctx context.Context, key rein.SessionKey, supID string) (*store.Supplement, error) {
	row := s.rdb.QueryRowContext(ctx, `SELECT `+supplementColumns+` FROM supplements
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND id = ?`, key.Owner, key.ID, supID)
	out, err := scanSupplement(key, row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("supplement")
	}
	if err != nil {
		return nil, s.fail("reading supplement", err)
	}
	return out, nil
}

// ------------------------------------------------------------ confirmations

const confirmationColumns = `run_id, tool_use_id, name, input, state, deny_message, created_at, resolved_at`

func scanConfirmation(key rein.SessionKey, sc interface{ Scan(...any) error }) (*store.Confirmation, error) {
	out := store.Confirmation{Owner: key.Owner, SessionID: key.ID}
	var state string
	var input []byte
	var created, resolved sql.NullInt64
	if err := sc.Scan(&out.RunID, &out.ToolUseID, &out.Name, &input, &state, &out.DenyMessage, &created, &resolved); err != nil {
		return nil, err
	}
	if input != nil {
		out.Input = append([]byte{}, input...)
	}
	out.State = store.ConfirmationState(state)
	out.CreatedAt, out.ResolvedAt = fromMicros(created), fromMicros(resolved)
	return &out, nil
}

// CreateConfirmation implements store.Confirmations.
func (s *Store) CreateConfirmation(ctx context.Context, c *store.Confirmation) error {
	if c.ToolUseID == "" {
		return rein.InvalidArgument("tool_use_id", "tool use id is empty")
	}
	key := rein.SessionKey{Owner: c.Owner, ID: c.SessionID}
	rec := *c
	rec.Input = append([]byte(nil), c.Input...)
	if c.Input != nil && rec.Input == nil {
		rec.Input = []byte{}
	}
	rec.State, rec.DenyMessage, rec.ResolvedAt, rec.CreatedAt = store.ConfirmationPending, "", time.Time{}, norm(c.CreatedAt)
	err := s.write(ctx, "creating confirmation", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		var n int
		if err := tx.queryRow(`SELECT count(*) FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, rec.ToolUseID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return rein.Errorf(rein.CodeConflict, "confirmation for tool call %q already exists", rec.ToolUseID)
		}
		if rec.CreatedAt.IsZero() {
			rec.CreatedAt = tx.now
		}
		_, err = tx.exec(`INSERT INTO confirmations (session_pk, run_id, tool_use_id, name, input, state, deny_message, created_at)
			VALUES (?, ?, ?, ?, ?, ?, '', ?)`, si.pk, rec.RunID, rec.ToolUseID, rec.Name, rec.Input, string(rec.State), rec.CreatedAt.UnixMicro())
		return err
	})
	if err != nil {
		return err
	}
	*c = rec
	return nil
}

// ResolveConfirmation implements store.Confirmations. The writer runs one
// operation at a time, so of concurrent resolvers the first finds it
// pending and every other finds it resolved.
func (s *Store) ResolveConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*store.Confirmation, error) {
	var out *store.Confirmation
	err := s.write(ctx, "resolving confirmation", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		c, err := scanConfirmation(key, tx.queryRow(`SELECT `+confirmationColumns+` FROM confirmations WHERE session_pk = ? AND tool_use_id = ?`, si.pk, toolUseID))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("confirmation")
		}
		if err != nil {
			return err
		}
		if c.State != store.ConfirmationPending {
			return rein.Errorf(rein.CodeConflict, "confirmation %q is no longer pending (%s)", toolUseID, c.State)
		}
		c.State, c.ResolvedAt = store.ConfirmationAllowed, tx.now
		if !allow {
			c.State, c.DenyMessage = store.ConfirmationDenied, denyMessage
		}
		_, err = tx.exec(`UPDATE confirmations SET state = ?, deny_message = ?, resolved_at = ? WHERE session_pk = ? AND tool_use_id = ?`,
			string(c.State), c.DenyMessage, c.ResolvedAt.UnixMicro(), si.pk, toolUseID)
		out = c
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CloseConfirmations implements store.Confirmations.
func (s *Store) CloseConfirmations(ctx context.Context, key rein.SessionKey, runID string) error {
	return s.write(ctx, "closing confirmations", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		_, err = tx.exec(`UPDATE confirmations SET state = 'closed', resolved_at = ? WHERE session_pk = ? AND run_id = ? AND state = 'pending'`,
			tx.now.UnixMicro(), si.pk, runID)
		return err
	})
}

// GetConfirmation implements store.Confirmations.
func (s *Store) GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*store.Confirmation, error) {
	row := s.rdb.QueryRowContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND tool_use_id = ?`, key.Owner, key.ID, toolUseID)
	out, err := scanConfirmation(key, row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("confirmation")
	}
	if err != nil {
		return nil, s.fail("reading confirmation", err)
	}
	return out, nil
}

// ListConfirmations implements store.Confirmations.
func (s *Store) ListConfirmations(ctx context.Context, key rein.SessionKey, state store.ConfirmationState) ([]*store.Confirmation, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+confirmationColumns+` FROM confirmations
		WHERE session_pk = (SELECT pk FROM sessions WHERE owner = ? AND id = ?) AND (? = '' OR state = ?)
		ORDER BY created_at, pk`, key.Owner, key.ID, string(state), string(state))
	if err != nil {
		return nil, s.fail("listing confirmations", err)
	}
	defer rows.Close()
	out := []*store.Confirmation{}
	for rows.Next() {
		c, err := scanConfirmation(key, rows)
		if err != nil {
			return nil, s.fail("listing confirmations", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing confirmations", err)
	}
	return out, nil
}
