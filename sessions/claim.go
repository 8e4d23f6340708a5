// The claim: the store's choice, in one write, of what a session runs next —
// a run of a lost instance resumed or ended, else the first queued run —
// and the answers recovery gives the calls a lost attempt left open.

package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/store"
)

// claim is what claimNext decided.
type claim struct {
	// rec and lease: the run this instance now executes (RUNNING, lease
	// held); nil when nothing is to be started now.
	rec   *store.RunRecord
	lease *store.Lease
	// resumed: rec was lost by its instance and is resumed (Attempt =
	// rec.Resumes+1).
	resumed bool
	// inTools: the lost attempt of a resumed run was cut in the tool phase
	// of its last saved step (calls without results): it never began the
	// next model request, which is then no restart.
	inTools bool
	// ended lists runs claimNext ended (lost beyond the resume budget,
	// expired in the queue, stopped while their instance was gone), for
	// the caller's bookkeeping.
	ended []string
	// wait, when rec is nil and the session still has work, is when to
	// look again (zero: only when woken).
	wait time.Duration
	// idle: the session has no queued or running run left.
	idle bool
	// local: rec was held here, waiting (not adopted or resumed).
	local bool
	// gone lists runs this instance holds waiting that are no longer
	// queued in the store (claimed by another instance, or ended there):
	// the handles here must go, writing nothing.
	gone []string
	// unparked: the run taken up (rec) or ended (ended) was parked waiting
	// for confirmations; from is the instance that ran it last.
	unparked bool
	from     string
	// inDoubt lists the calls of inDoubtRun answered in doubt by this
	// write (they may or may not have taken effect; never run again).
	inDoubt    []rein.ToolCall
	inDoubtRun string
}

// executor says whether this instance executes a run (its Service).
type executor interface {
	executesHere(runID string) bool
	// stopping reports whether the instance is shutting down: it then
	// takes up nothing new. Asked inside the claim's write, which a
	// shutdown's stops precede: a run that ends because the instance stops
	// frees its turn only after the instance said so, so the write that
	// would have claimed the next run sees it and leaves that run queued.
	stopping() bool
}

// claimNext looks at the session's turn in the store and takes the next
// step of its schedule, in one write:
//   - the turn is held by a live lease: nothing; look again at its expiry;
//   - a RUNNING run without a live lease was lost by its instance: it is
//     resumed here (unless its resumes are spent, its deadline passed or a
//     stop was requested for it: then it is ended);
//   - else the first queued run: ended if its deadline passed; claimed if
//     this instance holds it (local) or its instance is gone.
//
// waiting lists the runs of the session this instance holds and waits to
// claim; here says whether it executes a run; admitting is true
// while an admission on this instance may have stored a run it does not
// hold yet (such a run must not be taken for one left by a lost instance).
func (lc *lifecycle) claimNext(ctx context.Context, key rein.SessionKey, waiting []string, here executor, admitting bool) (claim, error) {
	var c claim
	err := lc.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		c = claim{}
		now := tx.Now()
		local := map[string]bool{}
		for _, id := range waiting {
			r, err := tx.GetRun(id)
			if err != nil && !errors.Is(err, rein.ErrNotFound) {
				return err
			}
			if r == nil || r.Status != rein.StatusQueued {
				c.gone = append(c.gone, id)
				continue
			}
			local[id] = true
		}
		lease, err := tx.Lease()
		if err != nil {
			return err
		}
		if lease != nil && lease.ExpiresAt.After(now) {
			if len(c.gone) > 0 {
				return nil // nothing written, but the handles must go
			}
			if !here.executesHere(lease.RunID) {
				// Held elsewhere: look again when it would expire (its
				// holder's end wakes nothing here).
				c.wait = lease.ExpiresAt.Sub(now) + time.Millisecond
			}
			return errNothing
		}
		active, err := tx.Runs(activeStatuses...)
		if err != nil {
			return err
		}
		if len(active) == 0 {
			c.idle = true
			if len(c.gone) > 0 {
				return nil
			}
			return errNothing
		}
		for _, r := range active {
			if r.Status == rein.StatusRunning {
				if here.executesHere(r.ID) {
					// Still ending here after its lease lapsed: its end
					// (which writes nothing) wakes the pump.
					return errNothing
				}
				return lc.recoverLost(tx, r, now, &c, here.stopping())
			}
		}
		q := active[0]
		if !q.Deadline.IsZero() && !q.Deadline.After(now) {
			c.ended = append(c.ended, q.ID)
			return lc.endUnstarted(tx, q, rein.ReasonTimeout, now)
		}
		if !local[q.ID] && admitting {
			return errNothing // the admission kicks once it holds the run
		}
		if !local[q.ID] && !lc.exclusive {
			// Another instance accepted it and claims it once the turn is
			// free; it is adopted only once that instance looks gone: the
			// turn has been free for a whole lease TTL.
			free := q.CreatedAt
			if lease != nil && lease.ExpiresAt.After(free) {
				free = lease.ExpiresAt
			}
			if ended, err := lastEnd(tx); err != nil {
				return err
			} else if ended.After(free) {
				free = ended
			}
			if d := free.Add(lc.ttl).Sub(now); d > 0 {
				c.wait = d + time.Millisecond
				return errNothing
			}
		}
		if here.stopping() {
			// Left queued in the store, for the next instance to run.
			return errNothing
		}
		l, err := tx.AcquireLease(lc.instance, q.ID, lc.ttl)
		if err != nil {
			return err
		}
		rec, err := tx.UpdateRun(q.ID, store.RunUpdate{Status: rein.StatusRunning, StartedAt: now, Instance: lc.instance})
		if err != nil {
			return err
		}
		if err := tx.AppendHistory(inputMessage(rec)); err != nil {
			return err
		}
		if _, err := tx.AppendEvents(rein.NewEvent(rein.EventRunStarted, rec.ID, rein.RunStartedPayload{RunID: rec.ID}),
			queueChanged(ids(active[1:]))); err != nil {
			return err
		}
		c.rec, c.lease, c.local = rec, l, local[q.ID]
		return nil
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	return c, err
}

// lastEnd is when the session's most recent run ended (zero if none).
func lastEnd(tx store.Tx) (time.Time, error) {
	runs, err := tx.Runs(rein.StatusCompleted, rein.StatusFailed, rein.StatusCancelled)
	if err != nil {
		return time.Time{}, err
	}
	var t time.Time
	for _, r := range runs {
		if r.EndedAt.After(t) {
			t = r.EndedAt
		}
	}
	return t, nil
}

// recoverLost handles a RUNNING run whose lease is gone (its instance died
// or lost the lease): resume it here, or end it.
func (lc *lifecycle) recoverLost(tx store.Tx, r *store.RunRecord, now time.Time, c *claim, stopping bool) error {
	hist, err := tx.History()
	if err != nil {
		return err
	}
	asst, unanswered := openStep(hist, r.ID)
	confs, err := tx.Confirmations("")
	if err != nil {
		return err
	}
	byID := map[string]*store.Confirmation{}
	for _, cf := range confs {
		if cf.RunID == r.ID {
			byID[cf.ToolUseID] = cf
		}
	}
	// waiting is decided below, before end is called.
	waiting := false
	end := func(reason rein.Reason, errText string) error {
		c.ended = append(c.ended, r.ID)
		msgs, evs := closeCalls(r.ID, asst, unanswered, byID, true)
		c.noteInDoubt(r.ID, msgs)
		c.unparked, c.from = waiting, r.Instance
		if reason.HasReply() {
			evs = append(evs, rein.NewEvent(rein.EventMessage, r.ID, rein.MessagePayload{RunID: r.ID, Text: "", Reason: reason, Usage: &r.Usage}))
		}
		_, err := lc.writeEnd(tx, r, &endState{reason: reason, errText: errText, msgs: msgs, evs: evs}, now, 0)
		return err
	}
	// A run waiting for confirmations is not resumed or failed: it goes on
	// waiting (docs/tools.md); taking it up again is no resume and spends none.
	// answeredNo: an open call was denied or expired while no one ran the
	// run (it was parked): taking it up to go on is no resume either.
	answeredNo := false
	for _, c := range unanswered {
		if cf := byID[c.ID]; cf != nil {
			switch cf.State {
			case store.ConfirmationPending, store.ConfirmationAllowed:
				waiting = true
			case store.ConfirmationDenied, store.ConfirmationExpired:
				answeredNo = true
			}
		}
	}
	switch {
	case !r.Deadline.IsZero() && !r.Deadline.After(now):
		return end(rein.ReasonTimeout, "")
	case r.Stop == store.StopCancel || r.Stop == store.StopRollback:
		return end(rein.ReasonCancelled, "")
	case r.Stop == store.StopInterrupt:
		return end(rein.ReasonInterrupted, "")
	case r.Resumes >= lc.resumeAttempts && !waiting && !answeredNo:
		return end(rein.ReasonError, lostInstance)
	}
	// Resume: every call of the cut step without a result is answered now,
	// never run again — in doubt if it may have started, with its denial
	// if it was denied; a call still waiting for its confirmation keeps
	// waiting.
	msgs, evs := closeCalls(r.ID, asst, unanswered, byID, false)
	c.noteInDoubt(r.ID, msgs)
	if waiting && !anyAllowed(unanswered, byID) {
		// Parked: nothing can run until an answer comes. It stays so,
		// holding no lease; ConfirmTool wakes the session again.
		if len(msgs) > 0 {
			if err := tx.AppendHistory(msgs...); err != nil {
				return err
			}
			if _, err := tx.AppendEvents(evs...); err != nil {
				return err
			}
			return nil
		}
		return errNothing
	}
	if stopping {
		// Not taken up by an instance that is shutting down: the next
		// one resumes it.
		return errNothing
	}
	l, err := tx.AcquireLease(lc.instance, r.ID, lc.ttl)
	if err != nil {
		return err
	}
	n := r.Resumes
	takenUp := waiting || answeredNo
	if !takenUp {
		n++
	}
	rec, err := tx.UpdateRun(r.ID, store.RunUpdate{Resumes: &n, Instance: lc.instance})
	if err != nil {
		return err
	}
	if len(msgs) > 0 {
		if err := tx.AppendHistory(msgs...); err != nil {
			return err
		}
	}
	if len(evs) > 0 {
		if _, err := tx.AppendEvents(evs...); err != nil {
			return err
		}
	}
	c.rec, c.lease, c.resumed, c.inTools = rec, l, !takenUp, len(unanswered) > 0
	c.unparked, c.from = takenUp, r.Instance
	return nil
}

// noteInDoubt records, for the log, the calls of msgs answered in doubt.
func (c *claim) noteInDoubt(runID string, msgs []rein.Message) {
	for _, m := range msgs {
		if m.Role == rein.RoleTool && m.Text == rein.InDoubtToolOutput {
			c.inDoubt = append(c.inDoubt, rein.ToolCall{ID: m.ToolCallID, Name: m.ToolName})
			c.inDoubtRun = runID
		}
	}
}

// anyAllowed reports whether one of the open calls was allowed and not yet
// started: the run has something to do.
func anyAllowed(open []rein.ToolCall, confs map[string]*store.Confirmation) bool {
	for _, c := range open {
		if cf := confs[c.ID]; cf != nil && cf.State == store.ConfirmationAllowed {
			return true
		}
	}
	return false
}

// lostInstance is the error recorded on a run whose instance was lost once
// too often.
const lostInstance = "instance lost"

// openStep finds run's last saved step with tool calls and the calls that
// have no result in hist (nil when the run has no open step).
func openStep(hist []rein.Message, runID string) (*rein.Message, []rein.ToolCall) {
	var asst *rein.Message
	answered := map[string]bool{}
	for i := range hist {
		m := &hist[i]
		if m.RunID != runID {
			continue
		}
		switch m.Role {
		case rein.RoleAssistant:
			if !m.Partial {
				asst = m
				answered = map[string]bool{}
			}
		case rein.RoleTool:
			answered[m.ToolCallID] = true
		}
	}
	if asst == nil {
		return nil, nil
	}
	var open []rein.ToolCall
	for _, c := range asst.ToolCalls {
		if !answered[c.ID] {
			open = append(open, c)
		}
	}
	return asst, open
}

// closeCalls answers the open calls of a lost run's cut step: denied →
// the denial; pending or allowed but not started → left waiting unless
// ending (then the stop's synthetic result); otherwise (it may have run)
// in doubt.
func closeCalls(runID string, asst *rein.Message, open []rein.ToolCall, confs map[string]*store.Confirmation, ending bool) ([]rein.Message, []rein.Event) {
	var msgs []rein.Message
	var evs []rein.Event
	for _, c := range open {
		out, inDoubt := rein.InDoubtToolOutput, true
		if cf := confs[c.ID]; cf != nil {
			switch cf.State {
			case store.ConfirmationDenied, store.ConfirmationExpired:
				out, inDoubt = agent.DeniedOutput(cf.DenyMessage), false
			case store.ConfirmationPending, store.ConfirmationAllowed:
				// Never started: it goes on waiting for its answer, or (an
				// allowed one) runs once the run is taken up again.
				if !ending {
					continue
				}
				out, inDoubt = rein.InterruptedToolOutput, false
			case store.ConfirmationClosed:
				out, inDoubt = rein.InterruptedToolOutput, false
			}
		}
		m := rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: out, IsError: true, RunID: runID, Step: asst.Step}
		msgs = append(msgs, m)
		evs = append(evs, rein.NewEvent(rein.EventToolResult, runID, rein.ToolResultPayload{
			RunID: runID, ToolUseID: c.ID, Output: out, IsError: true, InDoubt: inDoubt}))
	}
	return msgs, evs
}
