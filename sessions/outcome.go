package sessions

import (
	"context"
	"errors"
	"fmt"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// RunOutcome is how a run ended, as the store records it.
type RunOutcome struct {
	// RunID is the run.
	RunID string
	// Status is COMPLETED, FAILED or CANCELLED.
	Status rein.RunStatus
	// Reason is stop, interrupted or max_steps for a COMPLETED run, error
	// for a FAILED one, cancelled or timeout for a CANCELLED one.
	Reason rein.Reason
	// Reply is the final reply of a COMPLETED run: the model's answer, or
	// for an interrupted run the reply it had streamed so far (possibly
	// ""). A FAILED or CANCELLED run has none.
	Reply string
	// Usage is the run's token usage.
	Usage rein.Usage
	// Error is the failure message of a FAILED run ("" otherwise).
	Error string
	// RolledBack is true for a run stopped by when_busy=rollback: its turn
	// is left out of every later model request.
	RolledBack bool
}

// After is a cursor no later than the run's first event: the seq just
// before its user.message, so that a reader of the log from After on sees
// the whole run without searching for where it starts; 0 (the log's
// start) for a repeat, whose run may be anywhere before.
func (r MessageResult) After() int64 { return r.after }

// Wait blocks until the run ends and returns its outcome: see
// Service.WaitRun. Any number of callers may wait on one result, and
// waiting again after the run ended answers at once with the same
// outcome. Waiting never starts or stops the run; a caller that gives up
// (ctx) leaves it running.
func (r MessageResult) Wait(ctx context.Context) (RunOutcome, error) {
	if r.svc == nil {
		return RunOutcome{}, errors.New("sessions: MessageResult.Wait on a result that did not come from Service.SendMessage")
	}
	return r.svc.waitRun(ctx, r.key, r.RunID, max(r.after, 0))
}

// WaitRun blocks until the session's run ends and returns its outcome. It
// reads it from the store — the run's record and the events its end wrote —
// so it answers alike for a run executing on this instance, one still
// queued, one that another instance sharing the store executes (or resumes
// after its instance was lost), and one that ended long ago. A run parked
// waiting for a confirmation ends once it is answered and the run finishes.
//
// The error is about waiting, never the run's own failure, which is the
// outcome's Status and Error: ctx's error when it is done first,
// rein.ErrNotFound for a run the session does not have, unavailable when
// this service shuts down first (a queued run then stays queued in the
// store), or a store failure.
func (s *Service) WaitRun(ctx context.Context, key rein.SessionKey, runID string) (RunOutcome, error) {
	return s.waitRun(ctx, key, runID, 0)
}

// waitRun is WaitRun reading the log from the cursor from on, which must
// come no later than the run's end.
//
// A run's end is one write: its terminal record, its agent.message (for a
// reason with a reply) and its session.run_completed. So a record read
// after the log's last seq and found not terminal means every event of the
// end comes after that seq, and only those few events are read; a record
// already terminal needs the log only for the reply.
func (s *Service) waitRun(ctx context.Context, key rein.SessionKey, runID string, from int64) (RunOutcome, error) {
	last, err := s.st.LastSeq(ctx, key)
	if err != nil {
		return RunOutcome{}, err
	}
	rec, err := s.st.GetRun(ctx, key, runID)
	if err != nil {
		return RunOutcome{}, err
	}
	if rec.Status.Terminal() {
		if !rec.Reason.HasReply() {
			return outcomeOf(rec, ""), nil
		}
	} else {
		from = max(from, last)
	}
	reply := ""
	for e, err := range s.Events(ctx, key, from) {
		if err != nil {
			return RunOutcome{}, err
		}
		if e.RunID != runID {
			continue
		}
		switch e.Type {
		case rein.EventMessage:
			var p rein.MessagePayload
			if err := e.DecodePayload(&p); err != nil {
				return RunOutcome{}, fmt.Errorf("sessions: run %s: decode its agent.message (seq %d): %w", runID, e.Seq, err)
			}
			reply = p.Text
		case rein.EventRunCompleted:
			if !rec.Status.Terminal() {
				// Written with the event: the record is terminal now.
				if rec, err = s.st.GetRun(ctx, key, runID); err != nil {
					return RunOutcome{}, err
				}
			}
			if !rec.Reason.HasReply() {
				reply = ""
			}
			return outcomeOf(rec, reply), nil
		}
	}
	if err := ctx.Err(); err != nil {
		return RunOutcome{}, err
	}
	return RunOutcome{}, rein.Errorf(rein.CodeUnavailable, "the service shut down before run %s ended", runID)
}

func outcomeOf(rec *store.RunRecord, reply string) RunOutcome {
	return RunOutcome{RunID: rec.ID, Status: rec.Status, Reason: rec.Reason, Reply: reply, Usage: rec.Usage,
		Error: rec.Error, RolledBack: rec.RolledBack}
}
