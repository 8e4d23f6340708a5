package sqlite

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/jsonx"
)

// Times are stored as microseconds since the epoch: exact for what Rein
// keeps (UTC, microsecond precision), cheap to compare and index. The zero
// time is NULL.

func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func micros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

// History messages are encoded by store/internal/histcodec, shared with
// the PostgreSQL backend.

// jsonOrEmpty validates client JSON and defaults empty to {}.
func jsonOrEmpty(param string, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !jsonx.Valid(b) {
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return b, nil
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
