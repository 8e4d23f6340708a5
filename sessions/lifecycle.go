package sessions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// lifecycle is a run's whole life as store transitions. Each method is one
// atomic store.Update (DESIGN.md rule 5): admission, execution and recovery
// all go through these few methods, so a crash between any two leaves the
// session at a boundary that claimNext completes, and a reader finds every
// write a run makes in this file (claimNext, the claim, in claim.go).
//
//	admit     run record + user.message (+ session.run_queued +
//	          session.queue_changed), or, when the
//	          turn is free, the run claimed at once (+ lease, RUNNING, input
//	          in the transcript, session.run_started), or, when a stop by
//	          its client id came first, the run created ended (+
//	          session.run_completed, the remembered stop used up); an
//	          untitled session titled by it
//	claimNext the session's next run: a lost run resumed (lease taken over,
//	          in-doubt results) or failed "instance lost", a queued run
//	          claimed (lease, RUNNING, input, session.run_started,
//	          session.queue_changed), an
//	          expired one ended timeout
//	consume   supplements consumed + their hints + agent.supplement_consumed
//	saveStep  a step's assistant message + agent.tool_use + confirmations
//	saveResult one tool result + agent.tool_result
//	saveInput a resumed run's input message, when its transcript lacks it
//	startCall an allowed confirmation marked started, just before its tool
//	expire    a due confirmation denied "expired" +
//	          session.confirmation_expired (expiry.go)
//	park      the turn let go of a run that waits only for answers (lease
//	          released; the run stays RUNNING, its step saved)
//	stop      user.interrupt + the durable stop request (a queued run not
//	          held here is ended in the same write); of a run held here,
//	          the user.interrupt alone (logStops), or within its end; by a
//	          client id no message has brought yet, the remembered stop +
//	          user.interrupt (Service.interruptByClientID)
//	end       the user.interrupt of its stops still owed to the log + the
//	          closing messages and events + terminal record + closed
//	          confirmations + session.run_completed (+ session.queue_changed
//	          for a run that was queued) + lease release
//	edit      a queued run's new input (session.run_edited) and/or its new
//	          place (queue orders + session.queue_changed) (queue.go)
//	promote   a queued run first in the queue + the current run's durable
//	          stop + session.queue_changed (queue.go)
type lifecycle struct {
	st             store.Store
	instance       string
	ttl            time.Duration
	resumeAttempts int
	// exclusive: no other process shares the store, so a run that this
	// process does not hold was left by one that is gone.
	exclusive bool
	observe   func(time.Duration, int)
	// refuseNew, when set, says why no new run may be admitted now (the
	// service is draining). It is asked inside the admission, after a
	// client_id repeat was looked for: a repeat is still answered, a new
	// run with a client_id refused like one without.
	refuseNew func() error
}

// activeStatuses are the statuses of a run that holds or waits for its
// session's turn (one slice for every query, not one per call).
var activeStatuses = []rein.RunStatus{rein.StatusRunning, rein.StatusQueued}

// errNothing ends an Update that found nothing to write.
var errNothing = errors.New("sessions: nothing to write")

func (lc *lifecycle) update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	t0 := time.Now()
	err := lc.st.Update(ctx, key, fence, fn)
	if lc.observe != nil && err == nil {
		lc.observe(time.Since(t0), 1)
	}
	return err
}

// ------------------------------------------------------------ system

// setSystem replaces the session's system-prompt override and logs its
// system.message, in one write: a crash cannot change the prompt without
// the event that tells the session's readers so. An empty text is an
// explicit empty override, not "back to the default".
func (lc *lifecycle) setSystem(ctx context.Context, key rein.SessionKey, text string) error {
	return lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.SetSystem(&text); err != nil {
			return err
		}
		_, err := tx.AppendEvents(rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: text}))
		return err
	})
}

// ------------------------------------------------------------ admission

// admission is what admit decided.
type admission struct {
	rec *store.RunRecord
	// lease is set when the run was claimed at once (status RUNNING).
	lease *store.Lease
	// repeat: a client_id repeat; nothing was written.
	repeat bool
	// stopped: a stop by its client id came first; the run was created
	// already ended (admitStopped).
	stopped bool
	// target is the run this message stops (when_busy interrupt or
	// rollback), "" for none. It held the turn before this message.
	target string
	// messageID is the id of the user.message event.
	messageID string
	// messageSeq is its seq: the run's events all come after it.
	messageSeq int64
}

// admit is the admission of a user.message: the busy decision, the run
// record and its events, and the run to stop, in one write.
func (lc *lifecycle) admit(ctx context.Context, key rein.SessionKey, req MessageRequest) (admission, error) {
	var a admission
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		a = admission{}
		if req.ClientID != "" {
			prev, err := tx.GetRunByClientID(req.ClientID)
			if err == nil {
				a.rec, a.repeat = prev, true
				return errNothing
			} else if !errors.Is(err, rein.ErrNotFound) {
				return err
			}
			// A stop by this client id may have come first (decision
			// 0090): read in this write, which the stop's write excludes.
			stop, err := tx.RememberedStop(req.ClientID)
			if err != nil {
				return err
			}
			if stop != nil {
				if stop.CreatedAt.Add(StopMemory).After(tx.Now()) {
					return lc.admitStopped(tx, key, req, &a)
				}
				if err := tx.ForgetStops(req.ClientID, time.Time{}); err != nil {
					return err
				}
			}
		}
		if lc.refuseNew != nil {
			if err := lc.refuseNew(); err != nil {
				return err
			}
		}
		if err := refuseOverBudget(tx); err != nil {
			return err
		}
		active, err := tx.Runs(activeStatuses...)
		if err != nil {
			return err
		}
		now := tx.Now()
		lease, err := tx.Lease()
		if err != nil {
			return err
		}
		leaseLive := lease != nil && lease.ExpiresAt.After(now)
		var running *store.RunRecord
		queued := 0
		for _, r := range active {
			if r.Status == rein.StatusRunning {
				running = r
			} else {
				queued++
			}
		}
		busy := len(active) > 0 || leaseLive
		if busy && req.WhenBusy == rein.WhenBusyReject {
			holder := ""
			switch {
			case running != nil:
				holder = running.ID
			case leaseLive:
				holder = lease.RunID
			default:
				holder = active[0].ID
			}
			return &rein.Error{Code: rein.CodeSessionBusy, Message: "the session is busy with another run", RunID: holder}
		}
		front := busy && (req.WhenBusy == rein.WhenBusyInterrupt || req.WhenBusy == rein.WhenBusyRollback)
		rec := &store.RunRecord{
			Owner: key.Owner, SessionID: key.ID, ID: id.New(id.Run), Status: rein.StatusQueued,
			Input: req.Text, ClientID: req.ClientID, QueueOrder: now.UnixNano(), Instance: lc.instance, CreatedAt: now,
			Budget: req.Budget,
		}
		if front {
			// Of several such messages the newest runs first.
			rec.QueueOrder = -now.UnixNano()
		}
		if req.Timeout > 0 {
			rec.Deadline = now.Add(req.Timeout)
		}
		// The message and the run's start or its place in the queue.
		evs := make([]rein.Event, 1, 3)
		evs[0] = rein.NewEvent(rein.EventUserMessage, rec.ID, rein.UserMessagePayload{Text: req.Text, RunID: rec.ID})
		if !busy {
			l, err := tx.AcquireLease(lc.instance, rec.ID, lc.ttl)
			if err != nil {
				return err
			}
			rec.Status, rec.StartedAt = rein.StatusRunning, now
			if err := tx.CreateRun(rec); err != nil {
				return err
			}
			if err := tx.AppendHistory(inputMessage(rec)); err != nil {
				return err
			}
			evs = append(evs, rein.NewEvent(rein.EventRunStarted, rec.ID, rein.RunStartedPayload{RunID: rec.ID}))
			a.lease = l
		} else {
			if err := tx.CreateRun(rec); err != nil {
				return err
			}
			pos := queued + 1
			if front {
				pos = 1
			}
			evs = append(evs, rein.NewEvent(rein.EventRunQueued, rec.ID, rein.RunQueuedPayload{RunID: rec.ID, Position: pos}),
				queueChanged(queueWith(active, rec)))
		}
		// An untitled session is named by its first message, in the
		// message's own write.
		if err := tx.SetDefaultTitle(defaultTitle(req.Text)); err != nil {
			return err
		}
		stored, err := tx.AppendEvents(evs...)
		if err != nil {
			return err
		}
		a.messageID, a.messageSeq = stored[0].ID, stored[0].Seq
		if front && running != nil {
			// The stop is durable: whoever runs or resumes the run applies
			// it, here or on another instance.
			mode := store.StopInterrupt
			if req.WhenBusy == rein.WhenBusyRollback {
				mode = store.StopRollback
			}
			if mode.Outranks(running.Stop) {
				if _, err := tx.UpdateRun(running.ID, store.RunUpdate{Stop: mode}); err != nil {
					return err
				}
			}
			a.target = running.ID
		}
		a.rec = rec
		return nil
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	if err != nil && req.ClientID != "" && errors.Is(err, rein.ErrConflict) {
		// Two first calls with one client_id raced: the other one won.
		if prev, gerr := lc.st.GetRunByClientID(ctx, key, req.ClientID); gerr == nil {
			return admission{rec: prev, repeat: true}, nil
		}
	}
	return a, err
}

// admitStopped admits a message whose stop came first: its run is
// created already ended (CANCELLED/cancelled, never started), logged as
// its user.message and its session.run_completed, and the remembered stop
// is used up. The session's turn is not asked about: the run takes no
// turn, so a busy session does not refuse it, and its when_busy stops
// nothing and queues nothing. A draining instance still records it: it
// starts nothing.
func (lc *lifecycle) admitStopped(tx store.Tx, key rein.SessionKey, req MessageRequest, a *admission) error {
	now := tx.Now()
	rec := &store.RunRecord{
		Owner: key.Owner, SessionID: key.ID, ID: id.New(id.Run), Status: rein.StatusCancelled, Reason: rein.ReasonCancelled,
		Input: req.Text, ClientID: req.ClientID, QueueOrder: now.UnixNano(), Instance: lc.instance, CreatedAt: now, EndedAt: now,
	}
	if err := tx.CreateRun(rec); err != nil {
		return err
	}
	if err := tx.ForgetStops(req.ClientID, time.Time{}); err != nil {
		return err
	}
	if err := tx.SetDefaultTitle(defaultTitle(req.Text)); err != nil {
		return err
	}
	stored, err := tx.AppendEvents(
		rein.NewEvent(rein.EventUserMessage, rec.ID, rein.UserMessagePayload{Text: req.Text, RunID: rec.ID}),
		rein.NewEvent(rein.EventRunCompleted, rec.ID, rein.RunCompletedPayload{RunID: rec.ID, Status: rein.StatusCancelled, Reason: rein.ReasonCancelled}),
	)
	if err != nil {
		return err
	}
	a.rec, a.stopped = rec, true
	a.messageID, a.messageSeq = stored[0].ID, stored[0].Seq
	return nil
}

func inputMessage(rec *store.RunRecord) rein.Message {
	return rein.Message{Role: rein.RoleUser, Text: rec.Input, RunID: rec.ID}
}

// --------------------------------------------------------- a run's steps

// saveInput records a run's input message (a resumed run whose admission
// predates the transcript entry): one fenced write.
func (lc *lifecycle) saveInput(ctx context.Context, key rein.SessionKey, fence store.Fence, m rein.Message) error {
	return lc.update(ctx, key, fence, func(tx store.Tx) error { return tx.AppendHistory(m) })
}

// startCall marks an allowed confirmation started just before its tool
// runs, fenced: a run that lost its turn cannot start it, and a crash
// after this write answers the call in doubt instead of running it again.
func (lc *lifecycle) startCall(ctx context.Context, key rein.SessionKey, fence store.Fence, toolUseID string) error {
	return lc.update(ctx, key, fence, func(tx store.Tx) error { return tx.StartConfirmation(toolUseID) })
}

// park lets go of the turn of a run whose step waits only for
// confirmation answers: it stays RUNNING in the store, its open step and
// pending confirmations saved, holding no lease; an answer or its deadline
// takes it up again (claimNext). One fenced write.
func (lc *lifecycle) park(ctx context.Context, key rein.SessionKey, fence store.Fence) error {
	return lc.update(ctx, key, fence, func(tx store.Tx) error { return tx.ReleaseLease(fence.Token) })
}

// consume moves the session's queued supplements into (runID, step).
func (lc *lifecycle) consume(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, step int) ([]rein.Message, error) {
	var hints []rein.Message
	err := lc.update(ctx, key, fence, func(tx store.Tx) error {
		hints = nil
		sups, err := tx.QueuedSupplements()
		if err != nil {
			return err
		}
		if len(sups) == 0 {
			return errNothing
		}
		ids := make([]string, len(sups))
		evs := make([]rein.Event, len(sups))
		hints = make([]rein.Message, len(sups))
		for i, s := range sups {
			ids[i] = s.ID
			hints[i] = rein.Message{Role: rein.RoleUser, Text: s.Text, Hint: &rein.Hint{ID: s.ID, Source: s.Source}, RunID: runID, Step: step}
			evs[i] = rein.NewEvent(rein.EventSupplementConsumed, runID, rein.SupplementConsumedPayload{SupplementID: s.ID, RunID: runID, Step: step})
		}
		if err := tx.ConsumeSupplements(ids, runID, step); err != nil {
			return err
		}
		if err := tx.AppendHistory(hints...); err != nil {
			return err
		}
		_, err = tx.AppendEvents(evs...)
		return err
	})
	if errors.Is(err, errNothing) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return hints, nil
}

// saveStep records a step's assistant message, the agent.model_request of
// the request that produced it (req; its usage added to the run's), its
// agent.tool_use events and the confirmation requests of confirm, in the
// model's order.
//
// With ttl > 0 each confirmation expires ttl after it is requested (by the
// store's clock).
func (lc *lifecycle) saveStep(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, step int, asst rein.Message, confirm []rein.ToolCall, ttl time.Duration, req *rein.ModelRequestPayload) error {
	return lc.update(ctx, key, fence, func(tx store.Tx) error {
		if err := tx.AppendHistory(asst); err != nil {
			return err
		}
		if req != nil {
			u := req.Usage
			if _, err := tx.UpdateRun(runID, store.RunUpdate{AddUsage: &u}); err != nil {
				return err
			}
			if _, err := tx.AppendEvents(agent.ModelRequestEvent(*req)); err != nil {
				return err
			}
		}
		now := tx.Now()
		var expires time.Time
		if ttl > 0 {
			expires = now.Add(ttl)
		}
		for _, c := range confirm {
			if err := tx.CreateConfirmation(&store.Confirmation{
				Owner: key.Owner, SessionID: key.ID, RunID: runID, ToolUseID: c.ID, Name: c.Name,
				Input: c.Input, State: store.ConfirmationPending, CreatedAt: now, ExpiresAt: expires,
			}); err != nil {
				return err
			}
		}
		evs := agent.StepEvents(runID, step, asst.ToolCalls, confirm)
		if len(evs) == 0 {
			return nil
		}
		_, err := tx.AppendEvents(evs...)
		return err
	})
}

// saveResult records one tool result and its agent.tool_result.
func (lc *lifecycle) saveResult(ctx context.Context, key rein.SessionKey, fence store.Fence, res rein.Message) error {
	return lc.update(ctx, key, fence, func(tx store.Tx) error {
		if err := tx.AppendHistory(res); err != nil {
			return err
		}
		_, err := tx.AppendEvents(agent.ResultEvent(res))
		return err
	})
}

// ----------------------------------------------------------------- stops

// stopOutcome is what stop decided for a run not held by this instance.
type stopOutcome struct {
	accepted bool
	// ended: the run was queued and ended by the stop's own write.
	ended bool
}

// stopRemote is a stop of a run this instance does not hold: logged with
// the truth of the store, recorded on the run so that its holder (or
// whoever resumes it) applies it, and a queued run ended at once.
func (lc *lifecycle) stopRemote(ctx context.Context, key rein.SessionKey, runID, clientID string, mode rein.StopMode, msg *string) (stopOutcome, error) {
	var o stopOutcome
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		o = stopOutcome{}
		now := tx.Now()
		rec, err := tx.GetRun(runID)
		if err != nil && !errors.Is(err, rein.ErrNotFound) {
			return err
		}
		if rec != nil && !rec.Status.Terminal() {
			o.accepted = true
		}
		if _, err := tx.AppendEvents(interruptEvent(runID, clientID, mode, msg, o.accepted)); err != nil {
			return err
		}
		if !o.accepted {
			return nil
		}
		if rec.Status == rein.StatusQueued {
			o.ended = true
			return lc.endUnstarted(tx, rec, rein.ReasonCancelled, now)
		}
		stop := store.StopOf(mode)
		if !stop.Outranks(rec.Stop) {
			return nil
		}
		_, err = tx.UpdateRun(runID, store.RunUpdate{Stop: stop})
		return err
	})
	return o, err
}

// logStop records a stop of a run held here that its handle refused.
func (lc *lifecycle) logStop(ctx context.Context, key rein.SessionKey, runID, clientID string, mode rein.StopMode, msg *string, accepted bool) error {
	return lc.logStops(ctx, key, []rein.Event{interruptEvent(runID, clientID, mode, msg, accepted)})
}

// logStops appends the user.interrupt events of stops of a run held here
// (accepted ones owed to the log: stoplog.go), in one write.
func (lc *lifecycle) logStops(ctx context.Context, key rein.SessionKey, evs []rein.Event) error {
	return lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.AppendEvents(evs...)
		return err
	})
}

// interruptEvent is a stop's user.interrupt: the run it named or stopped
// (runID, "" for none) and the client id it named ("" for none).
func interruptEvent(runID, clientID string, mode rein.StopMode, msg *string, accepted bool) rein.Event {
	p := rein.UserInterruptPayload{Mode: string(mode), Accepted: accepted, Message: msg}
	if runID != "" {
		p.RunID = &runID
	}
	if clientID != "" {
		p.ClientID = &clientID
	}
	return rein.NewEvent(rein.EventUserInterrupt, runID, p)
}

// ------------------------------------------------------------------- end

// endState is how a run ends and what its closing write carries.
type endState struct {
	reason  rein.Reason
	errText string
	// msgs and evs are the loop's closing writes (Journal.Finish).
	msgs []rein.Message
	evs  []rein.Event
	// stops are the user.interrupt events of the run's accepted stops
	// still owed to the log, written first (stoplog.go).
	stops []rein.Event
}

// end records a run's end in one write. fence and leaseToken are zero for
// a run that never started here. It returns the terminal record it wrote,
// or nil, writing nothing, when the run had already ended, or (unstarted)
// was claimed elsewhere. idle reports that the write left the session with
// no queued or running run: its schedule has nothing to look at.
func (lc *lifecycle) end(ctx context.Context, key rein.SessionKey, fence store.Fence, runID string, started bool, es endState) (*store.RunRecord, bool, error) {
	// One variable for the write's state and results, not one each.
	var out struct {
		es    endState
		ended *store.RunRecord
		idle  bool
	}
	out.es = es
	err := lc.update(ctx, key, fence, func(tx store.Tx) error {
		out.ended, out.idle = nil, false
		rec, err := tx.GetRun(runID)
		if err != nil {
			return err
		}
		if rec.Status.Terminal() || (!started && rec.Status != rein.StatusQueued) {
			if len(out.es.stops) == 0 {
				return errNothing
			}
			// The run's end is (or was) written by someone else: the
			// stops owed are still logged, ahead of an end to come.
			_, err := tx.AppendEvents(out.es.stops...)
			return err
		}
		if out.ended, err = lc.writeEnd(tx, rec, &out.es, tx.Now(), fence.Token); err != nil {
			return err
		}
		// Read here, in the write that frees the turn, rather than by a
		// write of the schedule's own after it.
		active, err := tx.Runs(activeStatuses...)
		out.idle = len(active) == 0
		return err
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	if err != nil {
		return nil, false, err
	}
	return out.ended, out.idle, nil
}

// endUnstarted ends a queued run that never ran.
func (lc *lifecycle) endUnstarted(tx store.Tx, r *store.RunRecord, reason rein.Reason, now time.Time) error {
	_, err := lc.writeEnd(tx, r, &endState{reason: reason}, now, 0)
	return err
}

// writeEnd is the end of a run inside a transaction: closing messages and
// events, closed confirmations, the terminal record, session.run_completed
// as the run's last event, and the lease released (leaseToken 0: none). It
// returns the terminal record.
func (lc *lifecycle) writeEnd(tx store.Tx, r *store.RunRecord, es *endState, now time.Time, leaseToken int64) (*store.RunRecord, error) {
	if len(es.msgs) > 0 {
		if err := tx.AppendHistory(es.msgs...); err != nil {
			return nil, err
		}
	}
	if err := tx.CloseConfirmations(r.ID); err != nil {
		return nil, err
	}
	rolled := r.Stop == store.StopRollback
	if rolled {
		// A rolled-back run is cancelled, whatever it had come to: a
		// reply it committed before the stop reached it is not its end
		// (its turn is left out of every later request anyway).
		es.reason, es.errText, es.evs = rein.ReasonCancelled, "", withoutReply(es.evs)
	}
	status := es.reason.Status()
	// The run's usage is what its steps' writes added, and the requests
	// this write records.
	ended, err := tx.UpdateRun(r.ID, store.RunUpdate{Status: status, Reason: es.reason, Error: es.errText,
		EndedAt: now, AddUsage: requestUsage(es.evs), RolledBack: rolled})
	if err != nil {
		return nil, err
	}
	evs := es.evs
	if len(es.stops) > 0 {
		evs = append(append(make([]rein.Event, 0, len(es.stops)+len(es.evs)+1), es.stops...), es.evs...)
	}
	evs = append(evs, rein.NewEvent(rein.EventRunCompleted, r.ID, rein.RunCompletedPayload{
		RunID: r.ID, Status: status, Reason: es.reason, Error: es.errText, RolledBack: rolled}))
	if r.Status == rein.StatusQueued {
		// It leaves the queue (cancelled, expired): the queue as it is now.
		queue, err := tx.Runs(rein.StatusQueued)
		if err != nil {
			return nil, err
		}
		evs = append(evs, queueChanged(ids(queue)))
	}
	if _, err := tx.AppendEvents(evs...); err != nil {
		return nil, err
	}
	if leaseToken != 0 {
		return ended, tx.ReleaseLease(leaseToken)
	}
	// A lost run's lease (expired, not ours) goes too, so the turn is free.
	if l, err := tx.Lease(); err != nil {
		return nil, err
	} else if l != nil && l.RunID == r.ID && !l.ExpiresAt.After(now) {
		return ended, tx.ReleaseLease(l.Token)
	}
	return ended, nil
}

// errorText is the error recorded on a failed run.
func errorText(res error) string {
	if res == nil {
		return ""
	}
	return fmt.Sprint(res)
}
