package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// Overload answers: every 503 carries Retry-After, and a request that ran
// out of time because the store was slow is a 503 too — the client can do
// something about it (retry later), which a 500 does not tell it.

// defaultRetryAfter is the Retry-After of a 503 that does not come with its
// own (a store that did not answer in time, a drain): long enough that a
// crowd of clients does not hammer a struggling server, short enough that a
// brief stall costs little.
const defaultRetryAfter = time.Second

// msgStoreSlow is the answer to a request whose store work did not finish
// before the request's deadline.
const msgStoreSlow = "the server is overloaded: its store did not answer in time; retry in 1 s"

// unavailableOnDeadline is what a client is told of a request that ran out
// of time in the store: unavailable (503), not internal. It carries no
// cause: writeError logs the original error. Errors that already carry a
// code other than internal are left alone.
func unavailableOnDeadline(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) || rein.CodeOf(err) != rein.CodeInternal {
		return err
	}
	return &rein.Error{Code: rein.CodeUnavailable, Message: msgStoreSlow}
}

// isOverload reports whether err is an admission refusal.
func isOverload(err error) bool {
	var oe *sessions.OverloadError
	return errors.As(err, &oe)
}

// retryAfter is the Retry-After, in whole seconds (≥ 1), of a 503 for err.
func retryAfter(err error) int {
	d := defaultRetryAfter
	var oe *sessions.OverloadError
	if errors.As(err, &oe) && oe.RetryAfter > 0 {
		d = oe.RetryAfter
	}
	return max(1, int(math.Ceil(d.Seconds())))
}

// fdListener reports, at most once per fdLogEvery, that accept failed
// because descriptors ran out, naming the fix. The error is still returned:
// net/http's accept loop treats EMFILE and ENFILE as temporary, backs off
// (up to 1 s) and keeps serving the connections it has.
type fdListener struct {
	net.Listener
	log  *slog.Logger
	last atomic.Int64 // unix nanos of the last report
}

// fdLogEvery spaces the reports of descriptor exhaustion: the accept loop
// retries every few milliseconds, and one line per retry would flood the
// log at the worst moment.
const fdLogEvery = 10 * time.Second

// guardAccept wraps ln so that running out of descriptors is logged as such.
func guardAccept(ln net.Listener, log *slog.Logger) net.Listener {
	return &fdListener{Listener: ln, log: log}
}

func (l *fdListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) {
		now := time.Now().UnixNano()
		last := l.last.Load()
		if now-last >= int64(fdLogEvery) && l.last.CompareAndSwap(last, now) {
			l.log.Error("cannot accept connections: too many open files: raise the limit (ulimit -n); the connections already open are still served", "err", err)
		}
	}
	return c, err
}
