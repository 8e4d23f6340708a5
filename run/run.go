// Package run is the stop wire of one execution of the agent: the run's two
// contexts and the stops that reach it through them. It exists so that
// "stop this run" has one meaning everywhere — the sessions service, the
// agent loop's tests, a Go program that runs the loop on its own — and so
// that the three things that race at a run's end (a cancel, an interrupt and
// the run committing its reply) are decided under one lock, once.
//
// A Run has a run context and, below it, a work context. Cancel cancels the
// run context (cause rein.ErrCancelled); a deadline does too (cause
// rein.ErrTimeout); Interrupt cancels only the work context (cause
// rein.ErrInterrupted), so the body can take its interrupt path on the run
// context that is still live (decision 0001). Commit is the body saying it
// is about to record its final reply: from then on stops no longer take
// effect. Decide turns the body's Outcome into the run's Result, once; after
// it, stops are refused.
//
// The package decides nothing about order, queues or ownership: which run of
// a session executes next is decided by the store (the claim), and where a
// run executes, by the runtime that holds its handle. It knows nothing about
// models, HTTP or storage.
package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/reinhq/rein"
)

// Func is the body of a run. ctx is the work context: it is cancelled when
// the run is cancelled, times out, or is interrupted, and context.Cause(ctx)
// says which (rein.ErrCancelled, rein.ErrTimeout, rein.ErrInterrupted).
// After an interrupt, c.RunContext() is still live (until a cancel or the
// deadline) for the interrupt path.
type Func func(ctx context.Context, c *Control) Outcome

// Outcome is what a Func reports: how the work ended, before the run
// decides its Result (a cancel or a deadline overrides it). It is also what
// the agent loop returns, so the loop is a Func's body without a
// conversion.
type Outcome struct {
	// Reason is stop, interrupted or max_steps for a completed run, or
	// error. cancelled and timeout are decided by the run itself.
	Reason rein.Reason
	// Reply is the final reply text (for the completed reasons).
	Reply string
	// Err is the failure of an error outcome.
	Err error
	// Usage is the run's token usage.
	Usage rein.Usage
}

// Result is how a run ended.
type Result struct {
	Status rein.RunStatus
	Reason rein.Reason
	Reply  string
	// Err is nil for COMPLETED; wraps rein.ErrCancelled or rein.ErrTimeout
	// for CANCELLED; the failure for FAILED.
	Err   error
	Usage rein.Usage
}

// Options prepare a run.
type Options struct {
	// ID is the run id (for errors and for the runtime's own lookups).
	ID string
	// Deadline, when non-zero, is the run's absolute deadline: its run
	// context ends with cause rein.ErrTimeout then. A run that has not
	// begun by then never begins (see Expire).
	Deadline time.Time
}

// Run is the stop wire of one execution. All methods are safe for
// concurrent use. The zero value is not usable: make one with New.
type Run struct {
	id       string
	deadline time.Time

	mu        sync.Mutex
	begun     bool // Begin made the contexts; the body may run
	cancelled bool // a Cancel took effect
	interrupt bool // an Interrupt took effect
	expired   bool // Expire ended it before it began
	intMsg    string
	committed bool
	decided   bool // the result is fixed: no stop takes effect any more
	ctl       Control

	runCtx     context.Context
	runCancel  context.CancelCauseFunc
	workCtx    context.Context
	workCancel context.CancelCauseFunc
}

// New returns the handle of a run that has not begun. Stops are accepted
// at once: a run stopped before Begin never begins.
func New(opts Options) *Run {
	r := &Run{id: opts.ID, deadline: opts.Deadline}
	r.ctl.r = r
	return r
}

// ID returns the run id.
func (r *Run) ID() string { return r.id }

// Begin makes the run's contexts, children of parent (the deadline
// armed), and reports whether the body may run: false if a stop or Expire
// reached the run first, or it was already decided or begun. It is the
// moment a stop turns from "never run" into "stop the work".
func (r *Run) Begin(parent context.Context) (ctx context.Context, c *Control, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begun || r.cancelled || r.expired || r.decided {
		return nil, nil, false
	}
	r.begun = true
	var base context.Context = parent
	var cancelDeadline context.CancelFunc
	if !r.deadline.IsZero() {
		base, cancelDeadline = context.WithDeadlineCause(parent, r.deadline, rein.ErrTimeout)
	}
	runCtx, runCancel := context.WithCancelCause(base)
	if cancelDeadline != nil {
		r.runCancel = func(cause error) { runCancel(cause); cancelDeadline() }
	} else {
		r.runCancel = runCancel
	}
	r.runCtx = runCtx
	r.workCtx, r.workCancel = context.WithCancelCause(runCtx)
	return r.workCtx, &r.ctl, true
}

// Execute begins the run and, if it may run, calls fn on the calling
// goroutine (a panic is its failure), then decides the result. begun is
// false when the run never began (stopped or expired first): the result is
// then its cancel or its timeout. The run's contexts are released before it
// returns.
func (r *Run) Execute(parent context.Context, fn Func) (res Result, begun bool) {
	ctx, c, ok := r.Begin(parent)
	var out Outcome
	if ok {
		out = call(fn, ctx, c)
	}
	res = r.Decide(out)
	r.Release()
	return res, ok
}

// call calls fn with the run's work context and control (from Begin): a
// panic is the run's failure rather than the process's.
func call(fn Func, ctx context.Context, c *Control) (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("run panicked: %v", p)}
		}
	}()
	return fn(ctx, c)
}

// Release frees the resources of the run's contexts (cancelling them); call
// it once the body has returned.
func (r *Run) Release() {
	r.mu.Lock()
	cancel := r.runCancel
	r.mu.Unlock()
	if cancel != nil {
		cancel(context.Canceled)
	}
}

// Decided reports whether the run's result is fixed (Decide was called, or
// it ended before it began): stops no longer take effect.
func (r *Run) Decided() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided
}

// InterruptMessage returns the message given to the Interrupt (or, before
// the run began, the interrupt that cancelled it) that took effect ("" if
// none). It is recorded, never treated as user input.
func (r *Run) InterruptMessage() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.intMsg
}

// Interrupted reports whether an interrupt took effect on the run.
func (r *Run) Interrupted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interrupt
}

// StopSettled reports whether a stop of the given kind can no longer take
// effect for a reason that is final while the run is live: a cancel already
// took effect, the run committed its outcome, or (for an interrupt) an
// interrupt already took effect. A runtime answers such a repeated stop
// "not accepted" itself instead of asking anyone else.
func (r *Run) StopSettled(interrupt bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cancelled || r.committed || (interrupt && r.interrupt)
}

// Cancel stops the run immediately (docs/api.md): a run that has not begun
// never begins; a running run's context is cancelled at once. It returns
// whether this call caused the cancellation: false if the run is decided,
// already cancelled, or committed its reply.
func (r *Run) Cancel() bool { return r.stop(false, "", nil) }

// CancelAnnounced is Cancel that, when it takes effect, first calls
// announce — after the cancellation is decided and before it takes effect,
// and before the run can decide its result. A runtime uses it to note that
// the stop request is owed to its log, so that the stopped run's end can
// log it first. announce runs with the handle locked: it must not call the
// handle's methods, and must be quick — no I/O, which would hold the stop
// back (log the request after Cancel returns).
func (r *Run) CancelAnnounced(announce func()) bool { return r.stop(false, "", announce) }

// Interrupt asks a running run to stop cooperatively (docs/api.md): its
// work context is cancelled at once and its Func takes the interrupt path;
// the run ends COMPLETED with reason interrupted. On a run that has not
// begun it is a Cancel. msg is recorded, never treated as user input. It
// returns whether this call took effect (false if decided, already
// cancelled or interrupted, or committed).
func (r *Run) Interrupt(msg string) bool { return r.stop(true, msg, nil) }

// InterruptAnnounced is Interrupt with an announce callback, as for
// CancelAnnounced.
func (r *Run) InterruptAnnounced(msg string, announce func()) bool {
	return r.stop(true, msg, announce)
}

// stop is Cancel and Interrupt: one lock decides it against Begin, Commit
// and Decide.
func (r *Run) stop(interrupt bool, msg string, announce func()) bool {
	r.mu.Lock()
	switch {
	case r.decided || r.cancelled || r.committed:
		r.mu.Unlock()
		return false
	case !r.begun:
		// Never run: an interrupt is a cancel.
		r.cancelled, r.intMsg = true, msg
	case interrupt:
		if r.interrupt {
			r.mu.Unlock()
			return false
		}
		r.interrupt, r.intMsg = true, msg
	default:
		r.cancelled = true
	}
	if announce != nil {
		announce()
	}
	begun := r.begun
	r.mu.Unlock()
	switch {
	case !begun:
	case interrupt:
		r.workCancel(rein.ErrInterrupted)
	default:
		r.runCancel(rein.ErrCancelled)
	}
	return true
}

// Expire ends a run whose deadline passed before it began: it never begins,
// and its result is CANCELLED with reason timeout. A runtime that keeps
// handles unbegun until it may run them (the sessions service, while the
// store says the run waits its turn) calls it when the deadline fires. It
// reports whether this call ended the run.
func (r *Run) Expire() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begun || r.cancelled || r.decided || r.expired {
		return false
	}
	r.expired = true
	return true
}

// Decide fixes the run's result from the body's outcome (the zero Outcome
// for a run that never began) and returns it; from then on stops are
// refused. A cancel or the deadline overrides the outcome unless the body
// committed. Deciding again returns the same result.
func (r *Run) Decide(out Outcome) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decided = true
	return r.decide(out)
}

// decide is Decide with r.mu held.
func (r *Run) decide(out Outcome) Result {
	if !r.begun {
		if r.cancelled {
			return r.cancelledResult(rein.ReasonCancelled, out.Usage)
		}
		return r.cancelledResult(rein.ReasonTimeout, out.Usage)
	}
	if !r.committed {
		switch {
		case r.cancelled:
			return r.cancelledResult(rein.ReasonCancelled, out.Usage)
		case errors.Is(context.Cause(r.runCtx), rein.ErrTimeout):
			return r.cancelledResult(rein.ReasonTimeout, out.Usage)
		}
	}
	reason := out.Reason
	if reason == "" {
		reason = rein.ReasonStop
	}
	switch reason {
	case rein.ReasonStop, rein.ReasonInterrupted, rein.ReasonMaxSteps, rein.ReasonBudget:
		return Result{Status: rein.StatusCompleted, Reason: reason, Reply: out.Reply, Usage: out.Usage}
	case rein.ReasonCancelled, rein.ReasonTimeout:
		return r.cancelledResult(reason, out.Usage)
	default:
		err := out.Err
		if err == nil {
			err = errors.New("run failed")
		}
		return Result{Status: rein.StatusFailed, Reason: rein.ReasonError, Err: err, Usage: out.Usage}
	}
}

func (r *Run) cancelledResult(reason rein.Reason, u rein.Usage) Result {
	cause := rein.ErrCancelled
	if reason == rein.ReasonTimeout {
		cause = rein.ErrTimeout
	}
	return Result{Status: rein.StatusCancelled, Reason: reason, Err: fmt.Errorf("run %s: %w", r.id, cause), Usage: u}
}

// Control is a Func's view of its run.
type Control struct{ r *Run }

// Run returns the handle.
func (c *Control) Run() *Run { return c.r }

// RunContext is the run's context: cancelled by Cancel and the deadline but
// not by Interrupt, so the interrupt path can still do bounded work with it.
func (c *Control) RunContext() context.Context { return c.r.runCtx }

// Interrupted reports whether an interrupt took effect, and its message.
func (c *Control) Interrupted() (bool, string) {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return c.r.interrupt, c.r.intMsg
}

// Commit declares that the run is about to record a final reply. After a
// successful Commit, Cancel and Interrupt return false and the run's result
// is the Func's outcome. It fails (returns false) if the run was already
// cancelled or timed out: the Func must then not record a reply.
func (c *Control) Commit() bool {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.committed {
		return true
	}
	if r.cancelled || r.decided || r.runCtx.Err() != nil {
		return false
	}
	r.committed = true
	return true
}
