package postgres

import (
	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
)

// StartConfirmation moves an allowed confirmation to started, just before
// its call runs (store.Tx).
func (u *updateTx) StartConfirmation(toolUseID string) error {
	var (
		started, exists bool
		moved, cur      string
	)
	b := &pgx.Batch{}
	queryRow(b, scanString, &moved, &started, `UPDATE confirmations SET state = 'started'
		WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3 AND state = 'allowed'
		RETURNING state`, u.key.Owner, u.key.ID, toolUseID)
	queryRow(b, scanString, &cur, &exists, `SELECT state FROM confirmations WHERE owner = $1 AND session_id = $2 AND tool_use_id = $3`,
		u.key.Owner, u.key.ID, toolUseID)
	if err := u.send("start confirmed call", b); err != nil {
		return err
	}
	switch {
	case started:
		return nil
	case !exists:
		return rein.Errorf(rein.CodeNotFound, "confirmation not found")
	default:
		return rein.Errorf(rein.CodeConflict, "confirmation %q is not allowed and waiting to start (%s)", toolUseID, cur)
	}
}
