package load

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/reinhq/rein"
)

// verifyWorkers bounds the sessions whose logs are read at once after
// the load.
const verifyWorkers = 8

// verified sums what the verification read.
type verified struct {
	sessions, runs                          int
	events, deltas, uses, results, restarts int64
	problems                                int
	outcomes                                map[string]int
}

// verify reads every driven session's whole log after the load and checks
// what the load's figures rely on: seq is 1, 2, 3, … without a gap or a
// duplicate; the stream delivered exactly the log; every run the load
// started has one session.run_started and one session.run_completed, its
// last event; its outcome is the one its stop (or no stop) calls for;
// every tool call has its result; and a run that finished normally
// streamed deltas that add up to its reply.
func (r *runner) verify(ctx context.Context) verified {
	var (
		mu  sync.Mutex
		sum = verified{outcomes: map[string]int{}}
		wg  sync.WaitGroup
	)
	next := make(chan *sessionResult)
	for range verifyWorkers {
		wg.Go(func() {
			for sr := range next {
				v := r.verifySession(ctx, sr)
				mu.Lock()
				sum.sessions++
				sum.runs += v.runs
				sum.events += v.events
				sum.deltas += v.deltas
				sum.uses += v.uses
				sum.results += v.results
				sum.restarts += v.restarts
				sum.problems += v.problems
				for k, n := range v.outcomes {
					sum.outcomes[k] += n
				}
				mu.Unlock()
			}
		})
	}
	for _, sr := range r.sessions {
		if sr == nil || sr.id == "" {
			continue
		}
		next <- sr
	}
	close(next)
	wg.Wait()
	return sum
}

// problem records a failed check.
func (r *runner) problem(v *verified, kind, format string, args ...any) {
	v.problems++
	r.errs.add("verify: "+kind, fmt.Errorf(format, args...))
}

// readLog reads a session's whole log page by page.
func (r *runner) readLog(ctx context.Context, sessionID string) ([]rein.Event, error) {
	var all []rein.Event
	after := int64(0)
	for {
		evs, last, err := r.c.ListEvents(ctx, sessionID, after, 1000)
		if err != nil {
			return all, err
		}
		all = append(all, evs...)
		if len(evs) == 0 || evs[len(evs)-1].Seq >= last {
			return all, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

func (r *runner) verifySession(ctx context.Context, sr *sessionResult) verified {
	v := verified{outcomes: map[string]int{}}
	log, err := r.readLog(ctx, sr.id)
	if err != nil {
		r.problem(&v, "read log", "session %s: %v", sr.id, err)
		return v
	}
	v.events = int64(len(log))

	ids := make(map[string]bool, len(log))
	for i, e := range log {
		if e.Seq != int64(i+1) {
			r.problem(&v, "seq gap", "session %s: event %d of the log has seq %d", sr.id, i+1, e.Seq)
			break
		}
		if ids[e.ID] {
			r.problem(&v, "duplicate event", "session %s: event %s appears twice", sr.id, e.ID)
		}
		ids[e.ID] = true
	}

	// The stream must have delivered the log exactly: all of it when the
	// session finished, a prefix of it when it was cut short.
	if len(sr.streamed) > len(log) || (sr.finished && len(sr.streamed) != len(log)) {
		r.problem(&v, "stream", "session %s: the stream delivered %d events, the log has %d", sr.id, len(sr.streamed), len(log))
	}
	for i := range min(len(sr.streamed), len(log)) {
		if s, l := sr.streamed[i], log[i]; s.seq != l.Seq || s.id != l.ID {
			r.problem(&v, "stream", "session %s: the stream's event %d is seq %d (%s), the log's is seq %d (%s)", sr.id, i+1, s.seq, s.id, l.Seq, l.ID)
			break
		}
	}

	byRun := map[string][]rein.Event{}
	for _, e := range log {
		if e.RunID != "" {
			byRun[e.RunID] = append(byRun[e.RunID], e)
		}
	}
	for _, rr := range sr.runs {
		if rr.id == "" {
			continue
		}
		v.runs++
		r.verifyRun(&v, sr, rr, byRun[rr.id])
	}
	return v
}

// lateStops counts the user.interrupt events among evs (those after a
// run's session.run_completed) that were not accepted: a stop that came
// after the run's end is logged after it, naming the run, and is the
// request's record rather than the run's. Anything else there is a fault.
func lateStops(evs []rein.Event) int {
	n := 0
	for _, e := range evs {
		var p rein.UserInterruptPayload
		if e.Type == rein.EventUserInterrupt && json.Unmarshal(e.Payload, &p) == nil && !p.Accepted {
			n++
		}
	}
	return n
}

func (r *runner) verifyRun(v *verified, sr *sessionResult, rr *runResult, evs []rein.Event) {
	where := fmt.Sprintf("session %s run %s", sr.id, rr.id)
	var (
		started, completed int
		end                rein.RunCompletedPayload
		reply              *rein.MessagePayload
		deltas             = map[int]*strings.Builder{}
		lastStep           int
		uses               = map[string]bool{}
		results            = map[string]bool{}
	)
	for i, e := range evs {
		switch e.Type {
		case rein.EventRunStarted:
			started++
		case rein.EventRunCompleted:
			completed++
			if after := len(evs) - 1 - i - lateStops(evs[i+1:]); after != 0 {
				r.problem(v, "run_completed not last", "%s: %d events follow its session.run_completed", where, after)
			}
			if err := json.Unmarshal(e.Payload, &end); err != nil {
				r.problem(v, "malformed event", "%s: session.run_completed: %v", where, err)
			}
		case rein.EventMessageDelta:
			v.deltas++
			var p rein.MessageDeltaPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				r.problem(v, "malformed event", "%s: agent.message.delta: %v", where, err)
				continue
			}
			if deltas[p.Step] == nil {
				deltas[p.Step] = &strings.Builder{}
			}
			deltas[p.Step].WriteString(p.Text)
			lastStep = max(lastStep, p.Step)
		case rein.EventStepRestarted:
			v.restarts++
			var p rein.StepRestartedPayload
			if json.Unmarshal(e.Payload, &p) == nil {
				delete(deltas, p.Step)
			}
		case rein.EventToolUse:
			v.uses++
			var p rein.ToolUsePayload
			if err := json.Unmarshal(e.Payload, &p); err == nil {
				uses[p.ToolUseID] = true
			}
		case rein.EventToolResult:
			v.results++
			var p rein.ToolResultPayload
			if err := json.Unmarshal(e.Payload, &p); err == nil {
				results[p.ToolUseID] = true
			}
		case rein.EventMessage:
			var p rein.MessagePayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				r.problem(v, "malformed event", "%s: agent.message: %v", where, err)
				continue
			}
			reply = &p
		}
	}
	if started != 1 {
		r.problem(v, "run_started", "%s: %d session.run_started events, want 1", where, started)
	}
	if completed != 1 {
		r.problem(v, "run_completed", "%s: %d session.run_completed events, want 1", where, completed)
		return
	}
	v.outcomes[string(end.Status)+"/"+string(end.Reason)]++
	if !rr.completed.IsZero() && (end.Status != rr.status || end.Reason != rr.reason) {
		r.problem(v, "stream", "%s: the stream said %s/%s, the log says %s/%s", where, rr.status, rr.reason, end.Status, end.Reason)
	}
	want := rein.ReasonStop
	if rr.stopAccepted {
		want = rein.ReasonCancelled
		if r.o.StopMode == rein.StopInterrupt {
			want = rein.ReasonInterrupted
		}
	}
	if end.Reason != want || end.Status != want.Status() {
		r.problem(v, "outcome", "%s: ended %s/%s, want %s/%s", where, end.Status, end.Reason, want.Status(), want)
	}
	for id := range uses {
		if !results[id] {
			r.problem(v, "tool result missing", "%s: tool call %s has no agent.tool_result", where, id)
		}
	}
	if end.Reason.HasReply() && reply == nil {
		r.problem(v, "reply missing", "%s: ended %s without an agent.message", where, end.Reason)
	}
	if end.Reason != rein.ReasonStop || reply == nil {
		return
	}
	// A normal finish: the final step's deltas add up to the reply.
	if got := deltas[lastStep]; got == nil || got.String() != reply.Text {
		r.problem(v, "deltas", "%s: the deltas of step %d do not add up to the reply", where, lastStep)
	}
	if r.t.inProcess {
		if reply.Text != r.o.expectedReply() {
			r.problem(v, "script", "%s: reply %q, the script says %q", where, reply.Text, r.o.expectedReply())
		}
		if len(uses) != r.o.ToolCalls {
			r.problem(v, "script", "%s: %d tool calls, the script makes %d", where, len(uses), r.o.ToolCalls)
		}
	}
}
