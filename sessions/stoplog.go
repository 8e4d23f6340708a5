package sessions

import (
	"context"
	"slices"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// A stop of a run held here takes effect the moment its handle accepts it:
// the handle's cancel or interrupt is not held back by the durable append of
// the stop's user.interrupt (an fsync on SQLite). The event is owed to the
// log instead, and logged while the run stops: by the run's end, in its own
// write, when the end comes within stopLogGrace — a stopped run usually ends
// within a millisecond, and one durable write is then all the stop costs —
// else by the requester's own append. The log order — an accepted stop's
// user.interrupt before the stopped run's session.run_completed — is kept
// because both take one lock: the end either follows an append that is done
// or writes every event still owed itself, ahead of session.run_completed.
// An append that fails leaves its event owed, so the end logs it; exactly
// once, because a failed store write stores nothing.

// stopLogGrace is how long the requester of a stop leaves its event to the
// run's end before appending it itself.
const stopLogGrace = 10 * time.Millisecond

// stopNote is an accepted stop of a run held here whose user.interrupt is
// owed to the log. The event is encoded by whoever writes it, after the
// stop took effect.
type stopNote struct {
	runID    string
	clientID string // the client id the stop named, "" for none
	mode     rein.StopMode
	msg      *string
	// tried: the requester's own append failed; the run's end logs it, or,
	// once no end will, it is given up.
	tried bool
	err   error         // the note's fate, written before done closes
	done  chan struct{} // closed once the event is logged, or can no longer be
}

func (n *stopNote) settle(err error) {
	n.err = err
	close(n.done)
}

// oweStop records that an accepted stop's event is owed to the log. It is
// the handle's announcement, run under the handle's lock: no I/O, nothing
// encoded.
func (lr *liveRun) oweStop(mode rein.StopMode, msg *string, clientID string) *stopNote {
	n := &stopNote{runID: lr.id, clientID: clientID, mode: mode, msg: msg, done: make(chan struct{})}
	lr.mu.Lock()
	lr.stops = append(lr.stops, n)
	if lr.stopsOver == nil {
		lr.stopsOver = make(chan struct{})
	}
	lr.mu.Unlock()
	return n
}

// owedStops is a snapshot of the notes still owed, oldest first. The caller
// holds lr.stopWrite: only its holder removes notes, so the snapshot is the
// head of lr.stops until it settles them.
func (lr *liveRun) owedStops() []*stopNote {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if len(lr.stops) == 0 {
		return nil
	}
	return slices.Clone(lr.stops)
}

// settleStops settles the first len(notes) owed notes after a write that
// tried to log them: logged when err is nil; when it failed, they stay owed
// for the run's end unless final, or unless the end is over already.
func (lr *liveRun) settleStops(notes []*stopNote, err error, final bool) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if err != nil && !final && !lr.st.final() {
		for _, n := range notes {
			n.tried, n.err = true, err
		}
		return
	}
	for _, n := range notes {
		n.settle(err)
	}
	lr.stops = slices.Delete(lr.stops, 0, len(notes))
}

func stopEvents(notes []*stopNote) []rein.Event {
	evs := make([]rein.Event, len(notes))
	for i, n := range notes {
		evs[i] = interruptEvent(n.runID, n.clientID, n.mode, n.msg, true)
	}
	return evs
}

// logOwedStops logs n's event, owed since its stop took effect: it leaves
// it to the run's end for stopLogGrace (or until the end is over), then
// appends the events still owed for lr itself (its own, and any other). It
// returns once n's event is logged — by either write — or can no longer be.
func (s *Service) logOwedStops(ctx context.Context, lr *liveRun, n *stopNote) error {
	lr.mu.Lock()
	over := lr.stopsOver
	lr.mu.Unlock()
	t := time.NewTimer(stopLogGrace)
	select {
	case <-n.done:
		t.Stop()
		return n.err
	case <-over:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	lr.stopWrite.Lock()
	if notes := lr.owedStops(); len(notes) > 0 {
		err := s.life.logStops(ctx, lr.key(), stopEvents(notes))
		lr.settleStops(notes, err, false)
	}
	lr.stopWrite.Unlock()
	select {
	case <-n.done:
		return n.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// endRun is lifecycle.end for a run held here: the events of its accepted
// stops still owed are written first in the same write, and an append of
// them in flight is waited for, so the log order holds whatever the stops'
// own appends did.
func (s *Service) endRun(ctx context.Context, lr *liveRun, fence store.Fence, started bool, es endState) (*store.RunRecord, error) {
	lr.stopWrite.Lock()
	defer lr.stopWrite.Unlock()
	notes := lr.owedStops()
	if len(notes) > 0 {
		es.stops = stopEvents(notes)
	}
	ended, idle, err := s.life.end(ctx, lr.key(), fence, lr.id, started, es)
	if idle {
		lr.mu.Lock()
		lr.idle = true
		lr.mu.Unlock()
	}
	if len(notes) > 0 {
		serr := err
		if err != nil {
			// The end is not written: the stops are logged on their own,
			// still ahead of whichever write ends the run later.
			serr = s.life.logStops(ctx, lr.key(), es.stops)
		}
		lr.settleStops(notes, serr, true)
	}
	return ended, err
}

// closeStops is called once, when the run is let go (its state final, no
// end write of this instance to come): a note whose own append failed is
// given up now, as nothing here will log it. A note not tried yet stays
// for its requester's append.
func (lr *liveRun) closeStops() {
	lr.stopWrite.Lock()
	defer lr.stopWrite.Unlock()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.stopsOver != nil {
		close(lr.stopsOver)
	}
	lr.stops = slices.DeleteFunc(lr.stops, func(n *stopNote) bool {
		if n.tried {
			n.settle(n.err)
		}
		return n.tried
	})
}
