package protocol

import (
	"strings"

	"github.com/reinhq/rein"
)

// PublicMessage is re's message as a client may read it: without a cause
// that is not Rein's own formatted into it (a driver's text names hosts
// and files; it is for the server's log). Every adapter's error answers
// go through it, so none carries an internal cause.
func PublicMessage(re *rein.Error) string {
	msg := strings.TrimPrefix(re.Message, string(re.Code)+": ")
	if re.Err == nil || !HasForeignCause(re) {
		return msg
	}
	if rest, ok := strings.CutSuffix(msg, ": "+re.Err.Error()); ok && rest != "" {
		return rest
	}
	if strings.Contains(msg, re.Err.Error()) {
		return string(re.Code)
	}
	return msg
}

// HasForeignCause reports whether re wraps an error that is not Rein's
// (the answer then says less, and the server logs the rest).
func HasForeignCause(re *rein.Error) bool {
	for cause := re.Err; cause != nil; {
		inner, ok := cause.(*rein.Error)
		if !ok {
			return true
		}
		cause = inner.Err
	}
	return false
}
