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
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/telemetry/spans"
	"github.com/reinhq/rein/tool"
)

// startClaimed starts the handle of a run this instance just claimed.
func (s *Service) startClaimed(c claim) {
	lr := s.liveRun(c.rec.ID)
	if lr == nil && c.local {
		// Its handle here was stopped (and let go) between the claim and
		// now: the run ends as the stop said, never runs.
		s.endClaimedUnstarted(c)
		return
	}
	if lr == nil {
		var err error
		if lr, err = s.track(c.rec); err != nil {
			s.log.Error("hold claimed run", "session", c.rec.Key().String(), "run", c.rec.ID, "err", err)
			return
		}
	}
	lr.mu.Lock()
	lr.rec, lr.lease, lr.started, lr.unparked = c.rec, c.lease, true, c.unparked
	if c.resumed {
		lr.attempt, lr.inTools = c.rec.Resumes+1, c.inTools
	}
	if lr.expiry != nil {
		lr.expiry.Stop()
	}
	lr.mu.Unlock()
	lr.w.setFence(c.lease.Fence())
	if _, err := lr.h.Start(); err != nil {
		// The handle was stopped between the claim and now, before it
		// could run: record the end it would have recorded.
		// Its Finish may still be running (and may have seen it unclaimed,
		// writing nothing): wait for the handle's end, then write the run's
		// end as claimed (a no-op if Finish already did).
		s.log.Debug("claimed run stopped before it started", "run", c.rec.ID, "err", err)
		<-lr.h.Done()
		if res, ok := lr.h.Result(); ok {
			s.finishClaimed(lr, res)
		}
		return
	}
	if s.draining.Load() {
		// Claimed as the service began to stop, after it looked at what
		// runs here: it is stopped like the others.
		if s.closing.Load() {
			lr.h.Cancel()
		} else {
			lr.h.Interrupt("server shutting down")
		}
		s.mu.Lock()
		s.drainLate = append(s.drainLate, lr) // for the drain's summary
		s.mu.Unlock()
	}
}

// endClaimedUnstarted records the end of a run claimed for a handle that a
// stop let go before it could start: cancelled, or timed out.
func (s *Service) endClaimedUnstarted(c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reason := rein.ReasonCancelled
	if !c.rec.Deadline.IsZero() && !c.rec.Deadline.After(s.now()) {
		reason = rein.ReasonTimeout
	}
	s.mu.Lock()
	mode := s.claimStops[c.rec.ID]
	delete(s.claimStops, c.rec.ID)
	s.mu.Unlock()
	es := stoppedBeforeStart(c.rec.ID, mode, reason)
	reason = es.reason
	ended, _, err := s.life.end(ctx, c.rec.Key(), c.lease.Fence(), c.rec.ID, true, es)
	if err != nil {
		s.log.Error("record end of a run stopped as it was claimed", "session", c.rec.Key().String(), "run", c.rec.ID, "err", err)
		return
	}
	if ended != nil {
		s.logEnd(ended, "")
		s.releasedTurn(c.rec.Key())
		s.runEnded(c.rec.Key(), c.rec.ID, reason.Status(), reason, nil)
	}
	s.kick(c.rec.Key())
}

// execute is the body of every run this instance executes: the agent loop
// bound to the run's journal.
func (s *Service) execute(ctx context.Context, c *run.Control, lr *liveRun) run.Outcome {
	key := lr.key()
	lr.mu.Lock()
	rec, attempt, inTools := lr.rec, lr.attempt, lr.inTools
	lr.executed = true
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

// finish is the handle's Finish: it records the run's end in the store (one
// write: see lifecycle.end) before the handle turns terminal.
func (s *Service) finish(lr *liveRun, res run.Result) {
	lr.mu.Lock()
	started, lost, settled, traceID := lr.started, lr.lost, lr.settled, lr.traceID
	if lr.expiry != nil {
		lr.expiry.Stop()
	}
	lr.mu.Unlock()
	// Stops whose own append failed are logged by the end below, if any.
	defer lr.closeStops()
	// Whatever path below ends the run's span, none is left open.
	defer lr.endSpan(func(span trace.Span) { spans.EndRun(span, res.Status, res.Reason, errorText(res.Err)) })
	switch {
	case lost:
		lr.endSpan(spans.EndAbandoned)
		s.runLog(slog.LevelWarn, "run abandoned: its turn lease was lost", lr.key(), lr.id, traceID)
		return
	case settled:
		return
	case !started && s.draining.Load() && res.Reason != rein.ReasonCancelled && res.Reason != rein.ReasonTimeout:
		return
	}
	if started && errors.Is(res.Err, agent.ErrParked) {
		s.park(lr)
		return
	}
	if started {
		s.finishClaimed(lr, res)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ended, err := s.endRun(ctx, lr, store.Fence{}, false, endState{reason: res.Reason}); err != nil {
		s.log.Error("record end of queued run", "session", lr.key().String(), "run", lr.id, "err", err)
	} else if ended != nil {
		s.logEnd(ended, "")
		s.runEnded(lr.key(), lr.id, res.Reason.Status(), res.Reason, nil)
	} else {
		// Claimed a moment ago: the claim's own path writes the end; it
		// needs to know how the stop asked the run to end.
		lr.mu.Lock()
		mode := lr.stopMode
		lr.mu.Unlock()
		if mode != "" {
			s.mu.Lock()
			s.claimStops[lr.id] = mode
			s.mu.Unlock()
		}
	}
	s.observeEnd(lr, res)
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
func (s *Service) finishClaimed(lr *liveRun, res run.Result) {
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
		return
	}
	lr.mu.Lock()
	es := endState{reason: res.Reason, msgs: lr.closingMsgs, evs: lr.closingEvs}
	if !lr.executed {
		es = stoppedBeforeStart(lr.id, lr.stopMode, res.Reason)
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
	if ended, err := s.endRun(ctx, lr, fence, true, es); err != nil {
		// The run stays RUNNING in the store; once its lease expires it is
		// recovered (resumed from its last saved step).
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
		return
	}
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
