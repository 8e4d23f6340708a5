package sessions

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Admission control: beyond a bound on the runs an instance holds and on
// the writes its store has queued, new work is refused at once with an
// unavailable error that says when to retry, instead of being accepted into
// queues that then make every request wait until its deadline (and answer
// an internal error 30 s later). A refusal writes nothing, so no run ever
// exists without its events.

// DefaultMaxRunsInFlight is the bound on the runs one instance holds
// (running, or queued waiting for their session's turn) when
// Config.MaxRunsInFlight is 0. Runs mostly wait for their model, so the
// number of cores says little about how many fit; what bounds them is the
// store's single writer, whose queue holds 4096 writes: with at most this
// many runs, each can have a write waiting without any caller blocking on
// the queue.
const DefaultMaxRunsInFlight = 4096

// The Retry-After of a refusal. A run slot frees when a run ends (seconds,
// with a model); a full writer queue drains in milliseconds once the store
// catches up.
const (
	runsRetryAfter   = 2 * time.Second
	writesRetryAfter = 1 * time.Second
)

// OverloadError is the refusal of new work beyond the admission bounds
// (Config.MaxRunsInFlight, Config.MaxPendingWrites). It unwraps to a
// *rein.Error with code unavailable; RetryAfter is when to try again (the
// HTTP server sends it as Retry-After).
type OverloadError struct {
	// RetryAfter is how long the client should wait before retrying.
	RetryAfter time.Duration
	err        *rein.Error
}

func (e *OverloadError) Error() string { return e.err.Error() }

// Unwrap returns the unavailable error.
func (e *OverloadError) Unwrap() error { return e.err }

func overloaded(retry time.Duration, format string, args ...any) *OverloadError {
	secs := int(math.Ceil(retry.Seconds()))
	return &OverloadError{RetryAfter: retry, err: &rein.Error{Code: rein.CodeUnavailable,
		Message: fmt.Sprintf("the server is overloaded: "+format+"; retry in %d s", append(args, secs)...)}}
}

// admissionGate counts the runs being admitted: they hold a slot before
// they are in Service.live, so a burst of concurrent messages cannot all
// pass the bound at once.
type admissionGate struct {
	reserved atomic.Int64
	// refusing is true from the first refusal to the next admission: the
	// log says when overload begins and ends, not once per request.
	refusing atomic.Bool
}

// maxRunsInFlight is the bound in force (0: none).
func (s *Service) maxRunsInFlight() int {
	switch n := s.cfg.MaxRunsInFlight; {
	case n == 0:
		return DefaultMaxRunsInFlight
	case n < 0:
		return 0
	default:
		return n
	}
}

// reserveRun takes a slot for a run SendMessage may admit, or refuses with
// an *OverloadError. release gives the slot back; call it once the run is
// held (in Service.live) or was not admitted. A run counted both as
// reserved and as held for a moment only makes the bound stricter.
func (s *Service) reserveRun() (release func(), err error) {
	if err := s.admitWrites(); err != nil {
		return nil, err
	}
	limit := s.maxRunsInFlight()
	if limit == 0 {
		return func() {}, nil
	}
	g := &s.overload
	r := g.reserved.Add(1)
	s.mu.Lock()
	held := len(s.live)
	s.mu.Unlock()
	if held+int(r) > limit {
		g.reserved.Add(-1)
		s.refuse("too many runs in flight", "runs_in_flight", held, "max_runs_in_flight", limit)
		return nil, overloaded(runsRetryAfter, "too many runs in flight")
	}
	s.admitAgain()
	var once sync.Once
	return func() { once.Do(func() { g.reserved.Add(-1) }) }, nil
}

// admitWrites refuses new work (a run, a session) while the store's writer
// queue holds Config.MaxPendingWrites writes or more: every write accepted
// now would wait behind them.
func (s *Service) admitWrites() error {
	b, ok := s.st.(store.Backlog)
	if !ok || s.cfg.MaxPendingWrites < 0 {
		return nil
	}
	pending, capacity := b.Backlog()
	limit := s.cfg.MaxPendingWrites
	if limit == 0 {
		limit = capacity
	}
	if pending < limit {
		return nil
	}
	s.refuse("the store has too many writes pending", "pending_writes", pending, "max_pending_writes", limit)
	return overloaded(writesRetryAfter, "its store has too many writes pending")
}

// refuse logs the start of an overload (once until the next admission).
func (s *Service) refuse(why string, args ...any) {
	if s.overload.refusing.CompareAndSwap(false, true) {
		s.log.Warn("overloaded: refusing new work with 503 until load drops ("+why+")", args...)
	}
}

// admitAgain logs the end of an overload.
func (s *Service) admitAgain() {
	if s.overload.refusing.Load() && s.overload.refusing.CompareAndSwap(true, false) {
		s.log.Info("admitting new work again")
	}
}

// RunsInFlight reports the runs this instance holds (running, or queued
// for their session's turn) and the bound on them (0: none).
func (s *Service) RunsInFlight() (n, limit int) {
	s.mu.Lock()
	n = len(s.live)
	s.mu.Unlock()
	return n, s.maxRunsInFlight()
}
