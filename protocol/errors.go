package protocol

import (
	"strings"

	"github.com/reinhq/rein"
)

// PublicMessage is re's message as a client may read it, without its
// leading "<code>: ": rein.Errorf keeps a cause's text out of messages
// (decision 0081), so what is left was written for the client; for an
// empty one the code stands in. Every adapter's error answers go through
// it.
func PublicMessage(re *rein.Error) string {
	if msg := strings.TrimPrefix(re.Message, string(re.Code)+": "); msg != "" {
		return msg
	}
	return strings.ReplaceAll(string(re.Code), "_", " ")
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
