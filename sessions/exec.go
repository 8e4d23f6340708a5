package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/telemetry/spans"
	"github.com/reinhq/rein/tool"
)

// startClaimed starts the execution of a run this instance just claimed
// (admit or claimNext): its handle begins at once, so a stop from now on
// reaches a run that holds the turn, and its loop runs on a goroutine of
// its own.
func (s *Service) startClaimed(c claim) {
	lr := s.liveRun(c.rec.ID)
	if lr == nil {
		var err error
		if lr, err = s.track(c.rec); err != nil {
			s.log.Error("hold claimed run", "session", c.rec.Key().String(), "run", c.rec.ID, "err", err)
			return
		}
	}
	after := s.finishingHere(lr)
	lr.mu.Lock()
	switch lr.st {
	case stHeld:
	case stHeldEnding:
		// A stop's end of the held run is being written: that write finds
		// the run claimed, and ends it as such.
		lr.claim = &c
		lr.mu.Unlock()
		return
	case stHeldStopped:
		// A stop's end found it claimed: this is that claim.
		lr.move(bits(stHeldStopped), stEnding)
		lr.mu.Unlock()
		s.endClaimedUnstarted(lr, c)
		return
	default:
		lr.mu.Unlock()
		s.log.Error("run claimed twice here", "session", c.rec.Key().String(), "run", c.rec.ID, "state", lr.state().String())
		return
	}
	lr.move(bits(stHeld), stClaimed)
	lr.rec, lr.lease, lr.unparked, lr.after = c.rec, c.lease, c.unparked, after
	if c.resumed {
		lr.attempt, lr.inTools = c.rec.Resumes+1, c.inTools
	}
	if lr.expiry != nil {
		lr.expiry.Stop()
	}
	lr.mu.Unlock()
	lr.w.setFence(c.lease.Fence())
	ctx, ctl, begun := lr.h.Begin(s.ctx)
	go s.runClaimed(lr, ctx, ctl, begun)
	if s.draining.Load() {
		// Claimed as the service began to stop, after it looked at what
		// runs here: it is stopped like the others.
		if s.closing.Load() {
			lr.drainStop(drainCancelled)
		} else {
			lr.drainStop(drainInterrupted)
		}
	}
}

// drainStop stops a run for a shutdown, noting how for the drain's summary.
func (lr *liveRun) drainStop(how drainStop) {
	lr.mu.Lock()
	if how > lr.drain {
		lr.drain = how
	}
	lr.mu.Unlock()
	if how == drainCancelled {
		lr.h.Cancel()
	} else {
		lr.h.Interrupt("server shutting down")
	}
}

// finishingHere lists the runs of lr's session that hold, or held until a
// moment ago, the turn here and are not let go yet: their end is written
// (the store claimed lr), but their end's bookkeeping may still run.
func (s *Service) finishingHere(lr *liveRun) []chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []chan struct{}
	for cur := s.local[lr.key()]; cur != nil; cur = cur.nextLocal {
		if cur != lr && cur.state().claimedHere() {
			out = append(out, cur.done)
		}
	}
	return out
}

// waitPrevious, when set (tests), is called when a claimed run waits for
// the runs of its session still finishing here.
var waitPrevious func(runID string)

// runClaimed is the execution of a claimed run, on a goroutine of its own.
// A session's runs execute one after another on an instance: a run claimed
// while the previous one still finishes here (its end written, its end's
// bookkeeping not over) begins its loop only once that run is let go — so
// the previous run's end hooks, metrics and span come before anything of
// this one, and two executions of one session never overlap here.
func (s *Service) runClaimed(lr *liveRun, ctx context.Context, ctl *run.Control, begun bool) {
	lr.mu.Lock()
	after := lr.after
	lr.after = nil
	lr.mu.Unlock()
	if len(after) > 0 && waitPrevious != nil {
		waitPrevious(lr.id)
	}
	for _, done := range after {
		<-done
	}
	var out run.Outcome
	if begun && ctx.Err() == nil {
		out = s.executeSafely(ctx, ctl, lr)
	} else if begun {
		// A stop reached it before its loop began: it ends as a stop of a
		// run that did nothing yet.
		out = run.Outcome{Reason: rein.ReasonCancelled}
	}
	lr.mu.Lock()
	executed := lr.st == stExecuting
	lr.move(bits(stClaimed, stExecuting), stEnding) // not when fenced
	lr.mu.Unlock()
	res := lr.h.Decide(out)
	lr.h.Release()
	s.finish(lr, res, executed)
}

// executeSafely is execute with a panic turned into the run's failure
// rather than the process's.
func (s *Service) executeSafely(ctx context.Context, c *run.Control, lr *liveRun) (out run.Outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("run panicked: %v", p)}
		}
	}()
	return s.execute(ctx, c, lr)
}

// endClaimedUnstarted records the end of a run claimed here whose held
// handle a stop or its deadline ended before the claim was seen: cancelled
// (or, as its stop asked, interrupted), or timed out.
func (s *Service) endClaimedUnstarted(lr *liveRun, c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := lr.h.Decide(run.Outcome{})
	lr.mu.Lock()
	lr.rec, lr.lease = c.rec, c.lease
	es := stoppedBeforeStart(c.rec.ID, lr.stopMode, res.Reason)
	lr.mu.Unlock()
	ended, err := s.endRun(ctx, lr, c.lease.Fence(), true, es)
	if err != nil {
		lr.moveTo(bits(stEnding), stFenced)
	} else {
		lr.moveTo(bits(stEnding), stEnded)
	}
	if err != nil {
		s.log.Error("record end of a run stopped as it was claimed", "session", c.rec.Key().String(), "run", c.rec.ID, "err", err)
	}
	if ended != nil {
		s.logEnd(ended, "")
		s.releasedTurn(c.rec.Key())
		s.runEnded(c.rec.Key(), c.rec.ID, es.reason.Status(), es.reason, nil)
	}
	s.observeEnd(lr, res)
	s.letGo(lr)
}

// execute is the body of every run this instance executes: the agent loop
// bound to the run's journal.
func (s *Service) execute(ctx context.Context, c *run.Control, lr *liveRun) run.Outcome {
	key := lr.key()
	lr.mu.Lock()
	rec, attempt, inTools := lr.rec, lr.attempt, lr.inTools
	if !lr.move(bits(stClaimed), stExecuting) {
		// Fenced before its loop began: it must write nothing.
		lr.mu.Unlock()
		return run.Outcome{Reason: rein.ReasonError, Err: rein.ErrLeaseLost}
	}
	lr.mu.Unlock()
	s.cfg.Observer.RunStarted()
	ctx = s.runStarted(ctx, lr, rec, attempt)
	// A stop that lands now must reach the loop, which answers it (an
	// interrupted reply, a valid transcript), not this read. No timer: a
	// read is bounded by the store, and one per run was measurable.
	sess, err := s.st.GetSession(context.WithoutCancel(ctx), key)
	if err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("load session: %w", err)}
	}
	lr.mu.Lock()
	lr.parent, lr.parentKnown = sess.ParentID, true
	if sess.Subagent != nil {
		lr.depth = sess.Subagent.Depth
	} else if sess.ParentID != "" {
		lr.depth = 1
	}
	lr.mu.Unlock()
	name := sess.Agent
	if name == "" {
		name = DefaultAgent
	}
	if s.tracing {
		spans.SetAgent(trace.SpanFromContext(ctx), name)
	}
	ag := s.cfg.Agents[name]
	if ag == nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("the session's agent %q is not configured", name)}
	}
	system := s.cfg.System
	if ag.System != "" {
		system = ag.System
	}
	if sess.System != nil {
		system = *sess.System
	}
	lr.jr.confirmTTL = s.cfg.ConfirmTTL
	if ag.ConfirmTTL > 0 {
		lr.jr.confirmTTL = ag.ConfirmTTL
	}
	var tools *tool.Registry
	if ag.Tools != nil {
		tools = ag.Tools()
	}
	if sess.Subagent != nil && len(sess.Subagent.ToolFilter) > 0 {
		// A child is offered no more than its descriptor allows.
		if tools == nil {
			tools = ag.Loop.Tools()
		}
		if tools != nil {
			tools = tools.Filter(sess.Subagent.ToolFilter)
		}
	}
	var mdl model.Model
	if sess.Subagent != nil && sess.Subagent.Model != "" && sess.Subagent.Model != ag.Model {
		// A child runs with the model its descriptor names.
		if mdl, err = s.childModel(sess.Subagent.Model); err != nil {
			return run.Outcome{Reason: rein.ReasonError, Err: err}
		}
	}
	// The handle executes once, so its liveRun holds the one Turn.
	lr.turn = agent.Turn{
		Model:      mdl,
		Tools:      tools,
		Session:    key,
		RunID:      rec.ID,
		Input:      rec.Input,
		System:     system,
		Workspace:  s.workspace(key),
		Journal:    &lr.jr,
		Events:     lr.w,
		Confirm:    &lr.conf,
		Park:       true,
		ParkOnStop: s.parkOnStop,
		Attempt:    attempt,
		InTools:    inTools,
		Observer:   s.probe,
	}
	if err := s.bindBudget(context.WithoutCancel(ctx), &lr.turn, sess, rec); err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("load session usage: %w", err)}
	}
	return ag.Loop.Run(ctx, c, &lr.turn)
}

// finish records the end of a run claimed here — its end (lifecycle.end),
// or its parking (lifecycle.park) — and lets it go. executed says whether
// its loop began here.
func (s *Service) finish(lr *liveRun, res run.Result, executed bool) {
	lr.mu.Lock()
	st, traceID := lr.st, lr.traceID
	lr.mu.Unlock()
	defer s.letGo(lr)
	// Whatever path below ends the run's span, none is left open.
	defer lr.endSpan(func(span trace.Span) { spans.EndRun(span, res.Status, res.Reason, errorText(res.Err)) })
	if st == stFenced {
		lr.endSpan(spans.EndAbandoned)
		s.runLog(slog.LevelWarn, "run abandoned: its turn lease was lost", lr.key(), lr.id, traceID)
		return
	}
	if executed && errors.Is(res.Err, agent.ErrParked) {
		s.park(lr)
		return
	}
	s.finishClaimed(lr, res, executed)
}

// stoppedBeforeStart is the end of a claimed run a stop reached before its
// loop began: an interrupt ends it COMPLETED/interrupted with an empty
// reply (it was RUNNING in the log), a cancel CANCELLED.
func stoppedBeforeStart(runID, mode string, reason rein.Reason) endState {
	if reason == rein.ReasonCancelled && mode == string(rein.StopInterrupt) {
		return endState{reason: rein.ReasonInterrupted, evs: []rein.Event{rein.NewEvent(rein.EventMessage, runID,
			rein.MessagePayload{RunID: runID, Text: "", Reason: rein.ReasonInterrupted})}}
	}
	return endState{reason: reason}
}

// finishClaimed records the end of a run this instance claimed: its streamed
// events flushed, then one write with its closing messages and events, the
// terminal record, closed confirmations, session.run_completed and the
// lease released.
func (s *Service) finishClaimed(lr *liveRun, res run.Result, executed bool) {
	key := lr.key()
	// The end is written whatever it takes: a deadline here would leave
	// the run RUNNING until its lease expired and it was recovered, and
	// the store bounds its own waits (and fails them when it closes). No
	// timer per run either.
	ctx := context.Background()
	if err := lr.w.Flush(ctx); err != nil {
		s.log.Error("run events not all recorded", "session", key.String(), "run", lr.id, "err", err)
	}
	fence, err := lr.fence()
	if err != nil {
		lr.moveTo(bits(stEnding), stFenced)
		return
	}
	lr.mu.Lock()
	es := endState{reason: res.Reason, msgs: lr.closingMsgs, evs: lr.closingEvs}
	if !executed {
		mode := lr.stopMode
		if mode == "" && lr.h.Interrupted() {
			mode = string(rein.StopInterrupt)
		}
		es = stoppedBeforeStart(lr.id, mode, res.Reason)
		if es.reason != res.Reason {
			res.Status, res.Reason, res.Err = rein.StatusCompleted, es.reason, nil
		}
	}
	lr.mu.Unlock()
	if res.Status == rein.StatusFailed {
		es.errText = errorText(res.Err)
	}
	if !res.Reason.HasReply() {
		// Only a completed run has a final reply.
		es.evs = withoutReply(es.evs)
	}
	ended, err := s.endRun(ctx, lr, fence, true, es)
	if err != nil {
		// The run stays RUNNING in the store; once its lease expires it is
		// recovered (resumed from its last saved step).
		lr.moveTo(bits(stEnding), stFenced)
	} else {
		lr.moveTo(bits(stEnding), stEnded)
	}
	if err != nil {
		s.log.Error("record run end", "session", key.String(), "run", lr.id, "err", err)
		lr.endSpan(func(span trace.Span) { spans.EndUnrecorded(span, err) })
	} else if ended != nil {
		lr.mu.Lock()
		traceID := lr.traceID
		lr.mu.Unlock()
		lr.endSpan(func(span trace.Span) { spans.EndRun(span, ended.Status, ended.Reason, ended.Error) })
		s.logEnd(ended, traceID)
		s.releasedTurn(key)
		var reply *string
		if res.Reason.HasReply() && s.cfg.OnRunEnd != nil {
			r := res.Reply
			reply = &r
		}
		lr.mu.Lock()
		parent, known := lr.parent, lr.parentKnown
		lr.mu.Unlock()
		s.runEndedFrom(RunEnd{Session: key, RunID: lr.id, Status: res.Status, Reason: res.Reason, Reply: reply, Parent: parent, ParentKnown: known})
	}
	s.observeEnd(lr, res)
}

// park lets go of a run whose step waits only for confirmation answers: it
// stays RUNNING in the store, holding no lease, no goroutine and no model
// connection; an answer (on any instance) or its deadline takes it up again
// (lifecycle.claimNext).
func (s *Service) park(lr *liveRun) {
	// This execution is over, whatever the writes below do; the run is not.
	lr.endSpan(spans.EndParked)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lr.w.Flush(ctx); err != nil {
		s.log.Error("run events not all recorded", "session", lr.key().String(), "run", lr.id, "err", err)
	}
	fence, err := lr.fence()
	if err != nil {
		lr.moveTo(bits(stEnding), stFenced)
		return
	}
	lr.moveTo(bits(stEnding), stParked)
	if err := s.life.park(ctx, lr.key(), fence); err != nil {
		// The lease expires by itself; the run stays parked either way.
		s.log.Warn("release the lease of a parked run", "session", lr.key().String(), "run", lr.id, "err", err)
	} else {
		s.releasedTurn(lr.key())
	}
	s.cfg.Observer.RunParked()
	s.parked.Add(1)
	lr.mu.Lock()
	traceID := lr.traceID
	lr.mu.Unlock()
	s.runLog(slog.LevelInfo, "run parked", lr.key(), lr.id, traceID)
}

func withoutReply(evs []rein.Event) []rein.Event {
	out := evs[:0:0]
	for _, e := range evs {
		if e.Type != rein.EventMessage {
			out = append(out, e)
		}
	}
	return out
}

func (s *Service) observeEnd(lr *liveRun, res run.Result) {
	s.cfg.Observer.RunEnded(res.Status, res.Reason)
	lr.mu.Lock()
	stopAt, mode := lr.stopAt, lr.stopMode
	lr.mu.Unlock()
	if !stopAt.IsZero() {
		s.cfg.Observer.StopLatency(mode, time.Since(stopAt))
	}
}
