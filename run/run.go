// Package run is Rein's execution control: the Run handle (one execution of
// the agent, with its lifecycle CREATED → QUEUED → RUNNING → terminal),
// per-session FIFO lanes that admit a session's runs one at a time in start
// order, deadlines that count queue time, and the live registry that finds a
// run by id for its owner and session only.
//
// The package knows nothing about models, HTTP or storage: a run executes a
// Func, and stops reach it through its context (DESIGN.md rule 2). Cancel
// cancels the run's context; Interrupt cancels only the work context the Func
// was given, so the Func can take its interrupt path on the run context that
// is still live.
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
	// ID is the run id; required and unique.
	ID string
	// Session is the (owner, session) whose lane the run waits in.
	Session rein.SessionKey
	// Timeout, when positive, is the run's deadline measured from Start:
	// queue time plus execution (docs/api.md).
	Timeout time.Duration
	// Deadline, when non-zero, is an absolute deadline (the earlier of the
	// two applies). A run whose deadline passed before Start ends
	// CANCELLED with reason timeout without executing.
	Deadline time.Time
	// Front admits the run ahead of runs already queued in its lane
	// (when_busy=interrupt); of several, the newest goes first.
	Front bool
	// Finish, when set, is called exactly once with the run's result
	// before the run becomes terminal and before its lane admits the next
	// run — the place to persist the outcome. It runs in the run's
	// goroutine, or in the goroutine that cancelled a run that never ran.
	Finish func(r *Run, res Result)
	// Admitted, when set, is called when the lane admits the run, before
	// its Func runs and before Start's caller can observe RUNNING.
	Admitted func(r *Run)
	// Terminal, when set, is called when the run becomes terminal, before
	// the hooks of OnTerminal: one set here costs the run no hook list.
	Terminal func(r *Run)
	// Value is the runtime's own value for the run, returned by
	// Run.Value: with it one Func, Finish and Terminal can serve every
	// run, rather than a closure per run binding each to its own.
	Value any
}

type state uint8

const (
	stCreated state = iota
	stQueued
	stRunning
	stFinishing // result decided, Finish in progress
	stTerminal
)

// Run is the handle of one execution. All methods are safe for concurrent
// use.
type Run struct {
	id   string
	key  rein.SessionKey
	eng  *Engine
	fn   Func
	opts Options

	mu         sync.Mutex
	st         state
	cancelled  bool // a Cancel took effect
	interrupt  bool // an Interrupt took effect
	intMsg     string
	committed  bool
	decided    bool // the result is fixed; Finish is running or done
	result     Result
	onTerminal []func(*Run)
	reg        *Registry // the registry the run leaves when terminal
	ctl        Control

	runCtx     context.Context
	runCancel  context.CancelCauseFunc
	workCtx    context.Context
	workCancel context.CancelCauseFunc
	stopTimer  func() bool

	done chan struct{}

	// lane bookkeeping, guarded by the engine's mutex
	lane *lane
}

// Value returns Options.Value.
func (r *Run) Value() any { return r.opts.Value }

// ID returns the run id.
func (r *Run) ID() string { return r.id }

// Session returns the run's session key.
func (r *Run) Session() rein.SessionKey { return r.key }

// Status returns a snapshot of the run's status. A run that is stopping
// reports RUNNING until its Func has returned and its outcome is recorded.
func (r *Run) Status() rein.RunStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.st {
	case stCreated:
		return rein.StatusCreated
	case stQueued:
		return rein.StatusQueued
	case stRunning, stFinishing:
		return rein.StatusRunning
	default:
		return r.result.Status
	}
}

// Decided reports whether the run's outcome is fixed: its Func has returned
// (or it never ran) and its Finish is running or done. From then on stops
// no longer take effect and the run no longer holds its lane in any sense
// but the last bookkeeping; Done follows shortly.
func (r *Run) Decided() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.decided
}

// Done is closed when the run is terminal. Observing it never starts or
// cancels the run.
func (r *Run) Done() <-chan struct{} { return r.done }

// Result returns the run's result; ok is false until the run is terminal.
func (r *Run) Result() (res Result, ok bool) {
	select {
	case <-r.done:
		return r.result, true
	default:
		return Result{}, false
	}
}

// Wait blocks until the run is terminal or ctx is done, and returns the
// result and its error (nil for COMPLETED). Any number of observers may
// wait; waiting never starts or cancels the run.
func (r *Run) Wait(ctx context.Context) (Result, error) {
	select {
	case <-r.done:
		return r.result, r.result.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// InterruptMessage returns the message given to the Interrupt that took
// effect ("" if none). It is recorded, never treated as user input.
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

// OnTerminal registers f to run when the run becomes terminal, after
// Finish and before the lane admits the next run. If the run is already
// terminal, f runs at once.
func (r *Run) OnTerminal(f func(*Run)) {
	r.mu.Lock()
	if r.st != stTerminal {
		r.onTerminal = append(r.onTerminal, f)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	f(r)
}

// Start queues the run in its session's lane (or admits it at once if the
// lane is free). It is allowed exactly once: a second Start returns
// rein.ErrAlreadyStarted and never executes anything; Start after the run
// was cancelled returns rein.ErrCancelled. It returns RUNNING if the run was
// admitted at once (it may already have ended by the time Start returns),
// QUEUED if it waits behind another run, or CANCELLED if its deadline had
// already passed.
func (r *Run) Start() (rein.RunStatus, error) {
	r.mu.Lock()
	if r.st != stCreated {
		st := r.st
		cancelled := r.cancelled
		r.mu.Unlock()
		if st == stTerminal && cancelled {
			return rein.StatusCancelled, fmt.Errorf("run %s: %w", r.id, rein.ErrCancelled)
		}
		return "", fmt.Errorf("run %s: %w", r.id, rein.ErrAlreadyStarted)
	}
	r.st = stQueued
	r.setupContexts()
	r.mu.Unlock()

	if r.runCtx.Err() != nil { // deadline already passed
		r.finishUnstarted()
		return rein.StatusCancelled, nil
	}
	if r.eng.enqueue(r) {
		return rein.StatusRunning, nil
	}
	return rein.StatusQueued, nil
}

func (r *Run) setupContexts() {
	base := r.eng.base
	var ctx context.Context = base
	var cancelDeadline context.CancelFunc
	d := r.opts.Deadline
	if r.opts.Timeout > 0 {
		if t := r.eng.now().Add(r.opts.Timeout); d.IsZero() || t.Before(d) {
			d = t
		}
	}
	if !d.IsZero() {
		ctx, cancelDeadline = context.WithDeadlineCause(base, d, rein.ErrTimeout)
	}
	runCtx, runCancel := context.WithCancelCause(ctx)
	if cancelDeadline != nil {
		r.runCancel = func(cause error) { runCancel(cause); cancelDeadline() }
	} else {
		r.runCancel = runCancel
	}
	r.runCtx = runCtx
	r.workCtx, r.workCancel = context.WithCancelCause(runCtx)
}

// expireQueued runs when the run context ends. For a run still queued (a
// deadline passing in the queue) it removes the run from its lane.
func (r *Run) expireQueued() {
	r.mu.Lock()
	queued := r.st == stQueued
	r.mu.Unlock()
	if !queued || !r.eng.dequeue(r) {
		return
	}
	r.finishUnstarted()
}

// Cancel stops the run immediately (docs/api.md): a CREATED run never starts, a
// QUEUED run leaves its lane without disturbing the runs around it, a
// RUNNING run's context is cancelled at once. It returns whether this call
// caused the cancellation: false if the run is terminal, already cancelled,
// or already recording its outcome.
func (r *Run) Cancel() bool { return r.cancel("", nil) }

// CancelAnnounced is Cancel that, when it takes effect, first calls
// announce — after the cancellation is decided and before it takes effect,
// and before the run can record its end. A runtime uses it to note that the
// stop request is owed to its log, so that the stopped run's end can log it
// first. announce runs with the handle locked: it must not call the
// handle's methods, and must be quick — no I/O, which would hold the stop
// back (log the request after Cancel returns).
func (r *Run) CancelAnnounced(announce func()) bool { return r.cancel("", announce) }

func (r *Run) cancel(msg string, announce func()) bool {
	r.mu.Lock()
	return r.cancelLocked(msg, announce)
}

// cancelLocked is cancel with r.mu held; it releases it.
func (r *Run) cancelLocked(msg string, announce func()) bool {
	switch r.st {
	case stCreated:
		if r.cancelled {
			r.mu.Unlock()
			return false
		}
		r.cancelled, r.intMsg = true, msg
		if announce != nil {
			announce()
		}
		r.mu.Unlock()
		r.finishUnstarted()
		return true
	case stQueued:
		if r.cancelled {
			r.mu.Unlock()
			return false
		}
		r.cancelled, r.intMsg = true, msg
		if announce != nil {
			announce()
		}
		r.mu.Unlock()
		if r.eng.dequeue(r) {
			r.finishUnstarted()
		}
		// Otherwise the lane popped r just now: its tryAdmit sees the
		// cancellation and finishes it without executing.
		return true
	case stRunning:
		if r.cancelled || r.committed {
			r.mu.Unlock()
			return false
		}
		r.cancelled = true
		if announce != nil {
			announce()
		}
		r.mu.Unlock()
		r.runCancel(rein.ErrCancelled)
		return true
	default:
		r.mu.Unlock()
		return false
	}
}

// Expire ends a CREATED run whose deadline passed before it was started:
// it never starts, and ends CANCELLED with reason timeout. A runtime that
// keeps handles CREATED until it may start them (the sessions service, while
// the store says the run waits its turn) calls it when the deadline fires.
// It reports whether this call ended the run.
func (r *Run) Expire() bool {
	r.mu.Lock()
	if r.st != stCreated || r.cancelled || r.decided {
		r.mu.Unlock()
		return false
	}
	// Decided under the lock, so a concurrent Start finds it no longer
	// CREATED and starts nothing.
	r.decided = true
	r.st = stFinishing
	r.mu.Unlock()
	r.complete(Result{Status: rein.StatusCancelled, Reason: rein.ReasonTimeout, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrTimeout)}, false)
	return true
}

// Interrupt asks a RUNNING run to stop cooperatively (docs/api.md): its work
// context is cancelled at once and its Func takes the interrupt path; the
// run ends COMPLETED with reason interrupted. On a CREATED or QUEUED run it
// is a Cancel. msg is recorded, never treated as user input. It returns
// whether this call took effect (false if terminal, already cancelled or
// interrupted, or already recording its outcome).
func (r *Run) Interrupt(msg string) bool { return r.interruptRun(msg, nil) }

// InterruptAnnounced is Interrupt with an announce callback, as for
// CancelAnnounced.
func (r *Run) InterruptAnnounced(msg string, announce func()) bool {
	return r.interruptRun(msg, announce)
}

func (r *Run) interruptRun(msg string, announce func()) bool {
	r.mu.Lock()
	switch r.st {
	case stCreated, stQueued:
		// Still under the lock: the lane cannot admit the run in between
		// and turn this interrupt into a cancel of a running run.
		return r.cancelLocked(msg, announce)
	case stRunning:
		if r.cancelled || r.interrupt || r.committed {
			r.mu.Unlock()
			return false
		}
		r.interrupt = true
		r.intMsg = msg
		if announce != nil {
			announce()
		}
		r.mu.Unlock()
		r.workCancel(rein.ErrInterrupted)
		return true
	default:
		r.mu.Unlock()
		return false
	}
}

// tryAdmit is called by the lane (engine mutex not held) when r reaches the
// head. It reports false if r was cancelled meanwhile; the lane then
// finishes it and admits the next run.
func (r *Run) tryAdmit() bool {
	r.mu.Lock()
	if r.st != stQueued || r.cancelled {
		r.mu.Unlock()
		return false
	}
	r.st = stRunning
	r.mu.Unlock()
	if r.stopTimer != nil {
		r.stopTimer()
	}
	if r.opts.Admitted != nil {
		r.opts.Admitted(r)
	}
	go r.execute()
	return true
}

func (r *Run) execute() {
	out := r.call()
	r.mu.Lock()
	res := r.decide(out)
	r.decided = true
	r.st = stFinishing
	r.mu.Unlock()
	r.complete(res, true)
}

func (r *Run) call() (out Outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("run panicked: %v", p)}
		}
	}()
	return r.fn(r.workCtx, &r.ctl)
}

// decide turns the Func's outcome into the run's result. r.mu is held.
func (r *Run) decide(out Outcome) Result {
	if !r.committed {
		switch {
		case r.cancelled:
			return Result{Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrCancelled), Usage: out.Usage}
		case errors.Is(context.Cause(r.runCtx), rein.ErrTimeout):
			return Result{Status: rein.StatusCancelled, Reason: rein.ReasonTimeout, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrTimeout), Usage: out.Usage}
		}
	}
	reason := out.Reason
	if reason == "" {
		reason = rein.ReasonStop
	}
	switch reason {
	case rein.ReasonStop, rein.ReasonInterrupted, rein.ReasonMaxSteps, rein.ReasonBudget:
		return Result{Status: rein.StatusCompleted, Reason: reason, Reply: out.Reply, Usage: out.Usage}
	case rein.ReasonCancelled:
		return Result{Status: rein.StatusCancelled, Reason: reason, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrCancelled), Usage: out.Usage}
	case rein.ReasonTimeout:
		return Result{Status: rein.StatusCancelled, Reason: reason, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrTimeout), Usage: out.Usage}
	default:
		err := out.Err
		if err == nil {
			err = errors.New("run failed")
		}
		return Result{Status: rein.StatusFailed, Reason: rein.ReasonError, Err: err, Usage: out.Usage}
	}
}

// finishUnstarted ends a run that never executed (cancelled or expired
// before admission). Exactly one caller decides the result.
func (r *Run) finishUnstarted() {
	r.mu.Lock()
	if r.decided {
		r.mu.Unlock()
		return
	}
	r.decided = true
	var res Result
	if r.cancelled {
		res = Result{Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrCancelled)}
	} else {
		res = Result{Status: rein.StatusCancelled, Reason: rein.ReasonTimeout, Err: fmt.Errorf("run %s: %w", r.id, rein.ErrTimeout)}
	}
	r.st = stFinishing
	r.mu.Unlock()
	if r.runCancel != nil {
		r.runCancel(res.Err)
	}
	r.complete(res, false)
}

// complete records res, calls Finish, publishes the terminal state, runs
// the terminal hooks, lets the lane admit the next run (when r held it) and
// finally closes Done — so an observer woken by Done already finds the lane
// moved on.
func (r *Run) complete(res Result, heldLane bool) {
	if r.opts.Finish != nil {
		r.opts.Finish(r, res)
	}
	r.mu.Lock()
	r.result = res
	r.st = stTerminal
	hooks := r.onTerminal
	r.onTerminal = nil
	r.fn = nil
	reg := r.reg
	r.mu.Unlock()
	if r.runCancel != nil {
		r.runCancel(context.Canceled) // release the context's resources
	}
	if reg != nil {
		reg.remove(r)
	}
	if r.opts.Terminal != nil {
		r.opts.Terminal(r)
	}
	for _, h := range hooks {
		h(r)
	}
	if heldLane {
		r.eng.release(r)
	}
	close(r.done)
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
	if r.cancelled || r.runCtx.Err() != nil {
		return false
	}
	r.committed = true
	return true
}
