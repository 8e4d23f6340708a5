package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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

// liveRun is a run this instance holds a handle for: one it admitted and
// waits to claim, or one it claimed (or resumed) and executes. The handle
// stays CREATED until the store says the run is this instance's to run
// (lifecycle.claimNext); only then is it started.
type liveRun struct {
	// s, id and k never change: read them without the lock.
	s  *Service
	id string
	k  rein.SessionKey

	rec *store.RunRecord // guarded by mu
	h   *run.Run
	w   *writer
	// nextLocal is the next run of the session held here (Service.local),
	// guarded by the service's mu.
	nextLocal *liveRun

	mu      sync.Mutex
	lease   *store.Lease
	started bool // claimed here: RUNNING in the store, lease held
	lost    bool // the lease was lost: this instance writes nothing more for it
	// settled: the store already recorded the run's end (a queued run
	// ended by claimNext or by a stop's own write).
	settled bool
	// stopApplied: a stop recorded on the run's record was applied here.
	stopApplied bool
	// executed: its loop began here (a claimed run stopped before it does
	// ends as a stop of a run that did nothing yet).
	executed bool
	// parent is the session's parent, known (parentKnown) once the run's
	// execution read the session: the end hook is told it.
	parent      string
	parentKnown bool
	// depth is the session's depth in its subagent tree (0: a root), known
	// with the parent: a drain stops the deepest runs first.
	depth   int
	attempt int
	// inTools: a resumed run's lost attempt was cut in its tool phase
	// (agent.Turn.InTools).
	inTools bool
	// closing is what the loop's Journal.Finish handed over, written with
	// the run's end.
	closingMsgs []rein.Message
	closingEvs  []rein.Event
	expiry      *time.Timer
	stopAt      time.Time
	stopMode    string
	// unparked: claimed to be taken up again after it parked.
	unparked bool
	// idle: the run's end found its session with no queued or running run
	// left, so its schedule need not look again when the handle goes.
	idle bool
	// stops are the accepted stops whose user.interrupt is still owed to
	// the log (stoplog.go). stopWrite is held by whoever writes them: the
	// requester's append or the run's end; stopsClosed (guarded by mu) is
	// set once the run's Finish is over, and stopsOver (made with the first
	// note) closed then.
	stops       []*stopNote
	stopsClosed bool
	stopsOver   chan struct{}
	stopWrite   sync.Mutex
	// link is the span of the request that admitted the run (invalid when
	// it was not admitted here); span is the run's own while it executes
	// here (nil: tracing off), traceID its trace id for log lines.
	link    trace.SpanContext
	span    trace.Span
	traceID string

	// The run's agent.Turn and what it binds, made with the run rather
	// than each on its own.
	turn agent.Turn
	jr   journal
	conf confirmer
}

func (lr *liveRun) key() rein.SessionKey { return lr.k }

// fence is the run's lease token for its writes; ErrLeaseLost once the
// lease is gone, so nothing more is written.
func (lr *liveRun) fence() (store.Fence, error) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.lost {
		return store.Fence{}, rein.ErrLeaseLost
	}
	if lr.lease == nil {
		return store.Fence{}, errors.New("sessions: run has no lease")
	}
	return lr.lease.Fence(), nil
}

// track creates, registers and indexes the handle of a stored run. The
// handle is not started.
func (s *Service) track(rec *store.RunRecord) (*liveRun, error) {
	return s.hold(rec, trace.SpanContext{})
}

// trackAdmitted is track for the run of an admission SendMessage just
// made: it logs the admission, and the run's span will be linked to the
// span in ctx (the request that sent the message).
func (s *Service) trackAdmitted(ctx context.Context, a admission, req MessageRequest) (*liveRun, error) {
	s.logAdmitted(ctx, a, req)
	return s.hold(a.rec, trace.SpanContextFromContext(ctx))
}

func (s *Service) hold(rec *store.RunRecord, link trace.SpanContext) (*liveRun, error) {
	lr := &liveRun{s: s, id: rec.ID, k: rec.Key(), rec: rec, w: newWriter(s.st, rec.Key(), s.cfg.Observer.EventsAppended), link: link}
	lr.jr = journal{s: s, lr: lr}
	lr.conf = confirmer{s: s, lr: lr}
	h, err := s.engine.Prepare(executeLive, run.Options{
		ID:       rec.ID,
		Session:  rec.Key(),
		Deadline: rec.Deadline,
		Finish:   finishLive,
		Terminal: terminalLive,
		Value:    lr,
	})
	if err != nil {
		return nil, err
	}
	lr.h = h
	s.mu.Lock()
	if _, dup := s.live[rec.ID]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("sessions: run %s is already held", rec.ID)
	}
	s.live[rec.ID] = lr
	lr.nextLocal = s.local[rec.Key()]
	s.local[rec.Key()] = lr
	s.mu.Unlock()
	if !rec.Deadline.IsZero() {
		// While it waits for its turn the handle is CREATED, and the run
		// package arms deadlines only at Start. Armed once the run is in
		// s.live: a deadline already past fires at once, and the handle's
		// end must find it there to let go of it (else it stays held for
		// ever, and Close waits for it). Under lr.mu, as lr.expiry is read;
		// one who saw no timer yet needs none: Expire does nothing to a
		// handle that has started.
		lr.mu.Lock()
		lr.expiry = time.AfterFunc(time.Until(rec.Deadline), func() { h.Expire() })
		lr.mu.Unlock()
	}
	if err := s.registry.Register(h); err != nil {
		s.untrack(lr)
		return nil, err
	}
	return lr, nil
}

// executeLive, finishLive and terminalLive are the Func and the hooks of
// every handle held here — one of each for all runs, not closures per run:
// the handle's Value is its liveRun.
func executeLive(ctx context.Context, c *run.Control) run.Outcome {
	lr := c.Run().Value().(*liveRun)
	return lr.s.execute(ctx, c, lr)
}

func finishLive(h *run.Run, res run.Result) {
	lr := h.Value().(*liveRun)
	lr.s.finish(lr, res)
}

// terminalLive lets go of a handle that turned terminal and wakes its
// session's schedule — unless the run's end saw nothing left to schedule
// and nothing of the session is held here: then a look would find the
// session idle (whatever is admitted later is claimed, or kicked, by its
// own admission).
func terminalLive(h *run.Run) {
	lr := h.Value().(*liveRun)
	s := lr.s
	s.untrack(lr)
	lr.mu.Lock()
	idle := lr.idle
	lr.mu.Unlock()
	if idle && !s.holdsWork(lr.key()) {
		return
	}
	s.kick(lr.key())
}

func (s *Service) untrack(lr *liveRun) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[lr.id] == lr {
		delete(s.live, lr.id)
	}
	key := lr.key()
	var prev *liveRun
	for cur := s.local[key]; cur != nil; prev, cur = cur, cur.nextLocal {
		if cur != lr {
			continue
		}
		switch {
		case prev != nil:
			prev.nextLocal = cur.nextLocal
		case cur.nextLocal != nil:
			s.local[key] = cur.nextLocal
		default:
			delete(s.local, key)
		}
		cur.nextLocal = nil
		return
	}
}

func (s *Service) liveRun(runID string) *liveRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[runID]
}

// localState says whether this instance holds a handle for the run and
// whether it executes it.
func (s *Service) localState(runID string) (held, executing bool) {
	lr := s.liveRun(runID)
	if lr == nil {
		return false, false
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return true, lr.started
}

// stopping implements executor: Drain or Close has begun.
func (s *Service) stopping() bool { return s.draining.Load() }

// executesHere reports whether this instance executes the run (claimNext's
// executor).
func (s *Service) executesHere(runID string) bool {
	_, executing := s.localState(runID)
	return executing
}

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
	es := endState{reason: res.Reason, usage: res.Usage, msgs: lr.closingMsgs, evs: lr.closingEvs}
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

// noteStop remembers when a stop was requested, for the latency metric.
func (lr *liveRun) noteStop(mode string) {
	lr.mu.Lock()
	if lr.stopAt.IsZero() {
		lr.stopAt, lr.stopMode = time.Now(), mode
	}
	lr.mu.Unlock()
}

// ------------------------------------------------------------- pumps

// pump drives one session's schedule on this instance: it asks the store
// (lifecycle.claimNext) what runs next and starts what this instance
// claimed. It runs while the session has runs held here, or work the
// store says is left by a lost instance, and is woken by local admissions
// and ends.
type pump struct {
	wake chan struct{}
}

// kick wakes the session's pump, starting one if none runs.
func (s *Service) kick(key rein.SessionKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	if p := s.pumps[key]; p != nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return
	}
	p := &pump{wake: make(chan struct{}, 1)}
	s.pumps[key] = p
	s.wg.Add(1)
	go s.runPump(key, p)
}

// pumpRetry is how often a pump looks again while the turn is held by
// another instance or the store fails.
func (s *Service) pumpRetry() time.Duration { return s.cfg.LeaseTTL / 3 }

func (s *Service) runPump(key rein.SessionKey, p *pump) {
	defer s.wg.Done()
	failures := 0 // consecutive failed schedule reads
	for {
		if s.draining.Load() || s.ctx.Err() != nil {
			s.dropPump(key, p, true)
			return
		}
		c, err := s.life.claimNext(s.ctx, key, s.waiting(key), s, s.isAdmitting(key))
		wait := c.wait
		if err != nil {
			// Said once per outage of the session's schedule, not at every
			// retry: a store that is down for a minute would otherwise
			// flood the log with one line per session every retry.
			if s.ctx.Err() == nil {
				if failures == 0 {
					s.log.Warn("schedule session: the store failed; retrying", "session", key.String(), "retry_every", s.pumpRetry(), "err", err)
				} else {
					s.log.Debug("schedule session: the store failed again", "session", key.String(), "failures", failures+1, "err", err)
				}
			}
			failures++
			wait = s.pumpRetry()
		} else {
			if failures > 0 {
				s.log.Info("schedule session: the store answers again", "session", key.String(), "failures", failures)
				failures = 0
			}
			s.observeClaim(key, c)
		}
		for _, id := range c.ended {
			s.runEndedInStore(key, id)
		}
		for _, id := range append(c.ended, c.gone...) {
			if lr := s.liveRun(id); lr != nil {
				lr.mu.Lock()
				lr.settled = true
				lr.mu.Unlock()
				lr.h.Expire()
			}
		}
		if c.rec != nil {
			s.startClaimed(c)
			continue
		}
		if len(c.ended) > 0 || len(c.gone) > 0 {
			continue
		}
		if !s.holdsWork(key) {
			if s.dropPump(key, p, false) {
				return
			}
			continue
		}
		// Otherwise wait: runs held here end (OnTerminal kicks), admissions
		// kick, and a turn held elsewhere is looked at again at its expiry.
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-p.wake:
		case <-fire:
		case <-s.ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// admitting marks an admission in flight on key until admitted(key).
func (s *Service) admitting(key rein.SessionKey) {
	s.mu.Lock()
	s.admits[key]++
	s.mu.Unlock()
}

// admitDone ends what admitting(key) began.
func (s *Service) admitDone(key rein.SessionKey) {
	s.mu.Lock()
	if s.admits[key]--; s.admits[key] == 0 {
		delete(s.admits, key)
	}
	s.mu.Unlock()
}

func (s *Service) isAdmitting(key rein.SessionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admits[key] > 0
}

// runEndedInStore reports a run that a schedule write ended (lost beyond
// its resumes, expired, stopped while no one ran it).
func (s *Service) runEndedInStore(key rein.SessionKey, runID string) {
	rec, err := s.st.GetRun(s.ctx, key, runID)
	if err != nil || !rec.Status.Terminal() {
		return
	}
	s.logEnd(rec, "")
	if s.cfg.OnRunEnd == nil {
		return
	}
	var reply *string
	if rec.Reason.HasReply() {
		empty := ""
		reply = &empty
	}
	s.runEnded(key, runID, rec.Status, rec.Reason, reply)
}

// waiting returns the runs of the session held here and not started.
func (s *Service) waiting(key rein.SessionKey) []string {
	s.mu.Lock()
	var lrs []*liveRun
	for lr := s.local[key]; lr != nil; lr = lr.nextLocal {
		lrs = append(lrs, lr)
	}
	s.mu.Unlock()
	var out []string
	for _, lr := range lrs {
		lr.mu.Lock()
		// A handle held for a run claimed at once (admitted RUNNING, or
		// claimed by a pump) is about to be started by its claimer: it
		// waits for nothing, and must not be taken for one gone.
		if !lr.started && !lr.settled && lr.rec.Status == rein.StatusQueued {
			out = append(out, lr.id)
		}
		lr.mu.Unlock()
	}
	return out
}

// holdsWork reports whether this instance holds any run of the session.
func (s *Service) holdsWork(key rein.SessionKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local[key] != nil
}

// dropPump removes p unless a wake is pending (force: regardless); it
// reports whether it did.
func (s *Service) dropPump(key rein.SessionKey, p *pump, force bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && len(p.wake) > 0 {
		<-p.wake
		return false
	}
	if s.pumps[key] == p {
		delete(s.pumps, key)
	}
	return true
}

// ------------------------------------------------------------ renewal

// renewLoop keeps the leases of the runs this instance executes alive: one
// loop for the instance, not one per run. A lease found lost fences the
// run at once: it writes nothing more and its execution here is cancelled.
func (s *Service) renewLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.heartbeat()
		s.mu.Lock()
		runs := make([]*liveRun, 0, len(s.live))
		for _, lr := range s.live {
			runs = append(runs, lr)
		}
		s.mu.Unlock()
		for _, lr := range runs {
			lr.mu.Lock()
			l, ok := lr.lease, lr.started && !lr.lost
			lr.mu.Unlock()
			if !ok || l == nil {
				continue
			}
			nl, err := s.st.RenewLease(s.ctx, l, s.cfg.LeaseTTL)
			switch {
			case err == nil:
				lr.mu.Lock()
				if lr.lease == l {
					lr.lease = nl
				}
				lr.mu.Unlock()
				// A stop recorded on the run while its instance message was
				// lost is applied here, at the latest one renewal later.
				s.applyRecordedStop(lr.id)
			case errors.Is(err, rein.ErrLeaseLost) && lr.h.Decided():
				// The run's outcome is fixed and its end (or its parking)
				// releases the lease in the same write: that write, fenced,
				// is what finds out whether the lease was really lost.
				continue
			case errors.Is(err, rein.ErrLeaseLost):
				lr.mu.Lock()
				current := lr.lease == l
				if current {
					lr.lost = true
				}
				lr.mu.Unlock()
				if current {
					s.log.Error("turn lease lost; the run is fenced and stopped here", "session", lr.key().String(), "run", lr.id)
					lr.w.fail(rein.ErrLeaseLost)
					lr.h.Cancel()
				}
			case s.ctx.Err() != nil:
				return
			default:
				s.log.Warn("renew turn lease", "session", lr.key().String(), "run", lr.id, "err", err)
			}
		}
	}
}

// ------------------------------------------------------------ journal

// journal is a run's agent.Journal: every method one lifecycle write,
// fenced by the run's lease, after the run's streamed events.
type journal struct {
	s  *Service
	lr *liveRun
}

func (j *journal) Load(ctx context.Context) ([]rein.Message, error) {
	return j.s.loadTranscript(ctx, j.lr.key(), j.lr.id)
}

func (j *journal) SaveInput(ctx context.Context, m rein.Message) error {
	fence, err := j.lr.fence()
	if err != nil {
		return err
	}
	return j.s.life.saveInput(ctx, j.lr.key(), fence, m)
}

func (j *journal) Consume(ctx context.Context, step int) ([]rein.Message, error) {
	n, err := j.s.st.PendingSupplements(ctx, j.lr.key())
	if err != nil || n == 0 {
		return nil, err
	}
	fence, err := j.before(ctx)
	if err != nil {
		return nil, err
	}
	return j.s.life.consume(ctx, j.lr.key(), fence, j.lr.id, step)
}

func (j *journal) Pending(ctx context.Context) (int, error) {
	return j.s.st.PendingSupplements(ctx, j.lr.key())
}

func (j *journal) SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall) error {
	fence, err := j.before(ctx)
	if err != nil {
		return err
	}
	return j.s.life.saveStep(ctx, j.lr.key(), fence, j.lr.id, step, asst, confirm)
}

func (j *journal) SaveResult(ctx context.Context, res rein.Message) error {
	fence, err := j.before(ctx)
	if err != nil {
		return err
	}
	return j.s.life.saveResult(ctx, j.lr.key(), fence, res)
}

func (j *journal) Finish(_ context.Context, msgs []rein.Message, evs []rein.Event) error {
	j.lr.mu.Lock()
	if j.lr.closingMsgs == nil {
		// Finish is the loop's last call: what it hands over is not
		// touched again, and is kept as it is.
		j.lr.closingMsgs = msgs
	} else {
		j.lr.closingMsgs = append(j.lr.closingMsgs, msgs...)
	}
	switch {
	case j.lr.closingEvs == nil && cap(evs) > len(evs):
		// Room already for the session.run_completed the end appends.
		j.lr.closingEvs = evs
	default:
		j.lr.closingEvs = append(slices.Grow(j.lr.closingEvs, len(evs)+1), evs...)
	}
	j.lr.mu.Unlock()
	return nil
}

// before flushes the run's streamed events, so that what a journal write
// records comes after them in the log, and returns the run's fence.
func (j *journal) before(ctx context.Context) (store.Fence, error) {
	if err := j.lr.w.Flush(ctx); err != nil {
		return store.Fence{}, err
	}
	return j.lr.fence()
}

// loadTranscript is the session's history as the next model request of
// run self sees it: the turns of rolled-back runs are left out.
func (s *Service) loadTranscript(ctx context.Context, key rein.SessionKey, self string) ([]rein.Message, error) {
	hist, err := s.st.LoadHistory(ctx, key)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(hist, func(m rein.Message) bool { return m.RunID != "" && m.RunID != self }) {
		// No other run's turn to leave out (a session's first run): the
		// runs need not be read.
		return hist, nil
	}
	runs, err := s.st.ListRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	var rolled map[string]bool
	for _, r := range runs {
		if r.RolledBack {
			if rolled == nil {
				rolled = map[string]bool{}
			}
			rolled[r.ID] = true
		}
	}
	if rolled == nil {
		return hist, nil
	}
	out := hist[:0:0]
	for _, m := range hist {
		if m.RunID == "" || !rolled[m.RunID] {
			out = append(out, m)
		}
	}
	return out, nil
}

// ---------------------------------------------------------- confirmer

// confirmer waits for answers with the in-process gate, which ConfirmTool
// opens the moment the durable answer is stored; an answer stored while
// no one waited (before a restart) is read from the store. An allowed call
// is marked started in the store before it runs, so a lost instance's
// allowed call runs exactly once: never again once started (in doubt),
// once if it never started.
type confirmer struct {
	s  *Service
	lr *liveRun
}

func (c *confirmer) Open(req agent.ConfirmRequest) (agent.Pending, error) {
	p, err := c.s.gate.Open(req.Session, req.ToolUseID)
	if err != nil {
		return nil, err
	}
	return &pendingConfirmation{c: c, key: req.Session, id: req.ToolUseID, p: p}, nil
}

type pendingConfirmation struct {
	c   *confirmer
	key rein.SessionKey
	id  string
	p   *tool.Pending
}

func (pc *pendingConfirmation) Wait(ctx context.Context) (tool.Decision, error) {
	d, err := pc.decision(ctx)
	if err != nil || !d.Allow {
		return d, err
	}
	fence, err := pc.c.lr.fence()
	if err != nil {
		return tool.Decision{}, err
	}
	if err := pc.c.s.life.startCall(ctx, pc.key, fence, pc.id); err != nil {
		return tool.Decision{}, err
	}
	return d, nil
}

func (pc *pendingConfirmation) decision(ctx context.Context) (tool.Decision, error) {
	if c, err := pc.c.s.st.GetConfirmation(ctx, pc.key, pc.id); err == nil {
		switch c.State {
		case store.ConfirmationAllowed:
			return tool.Decision{Allow: true}, nil
		case store.ConfirmationDenied:
			return tool.Decision{Allow: false, DenyMessage: c.DenyMessage}, nil
		case store.ConfirmationClosed, store.ConfirmationStarted:
			return tool.Decision{}, rein.Errorf(rein.CodeConflict, "the confirmation is %s", c.State)
		}
	} else if !errors.Is(err, rein.ErrNotFound) {
		return tool.Decision{}, err
	}
	return pc.p.Wait(ctx)
}

// Close releases the in-process waiter; the durable confirmation is
// untouched (the run may park and open it again later).
func (pc *pendingConfirmation) Close() { pc.p.Release() }

// Answered implements agent.Answerable: whether the durable answer is there.
func (pc *pendingConfirmation) Answered(ctx context.Context) (bool, error) {
	c, err := pc.c.s.st.GetConfirmation(ctx, pc.key, pc.id)
	if err != nil {
		return false, err
	}
	return c.State != store.ConfirmationPending, nil
}
