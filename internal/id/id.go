// Package id makes the identifiers Rein hands out: ULIDs (time-sortable,
// globally unique) with a short prefix that says what they name, so a run id
// pasted into a bug report is recognisable as one.
package id

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Prefixes used across Rein.
const (
	Session    = "ses_"
	Run        = "run_"
	Event      = "evt_"
	Supplement = "sup_"
	Notice     = "ntc_"
	ToolUse    = "call_"
	Delivery   = "dlv_"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// New returns prefix + a ULID for the current time.
func New(prefix string) string { return NewAt(prefix, time.Now()) }

// NewAt returns prefix + a ULID for time t: 48 bits of milliseconds then 80
// random bits, in Crockford base32 (26 characters). Ids made in the same
// millisecond sort randomly among themselves; callers that need a strict
// order keep their own sequence (the event log's seq, the lane's FIFO).
func NewAt(prefix string, t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	var out [26]byte
	// 128 bits → 26 base32 digits, the first carrying 3 bits.
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + string(out[:])
}
