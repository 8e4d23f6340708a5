// The runs this instance holds (liveRun) and their one in-memory state:
// made when a run is admitted or claimed here, found by id for stops, let
// go at the end. Each state change is the in-memory side of one durable
// transition of lifecycle.go, made under the run's lock through move.

package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/store"
)

// runState is where a run held here stands on this instance. The store
// says where it stands for everyone (QUEUED, RUNNING, terminal, the turn's
// lease); a runState says what this instance still does for it, and each
// change pairs with one write of lifecycle.go (or with the store's word that
// someone else wrote it):
//
//	                admit (queued) / track
//	                       │
//	                       ▼            claimNext: ended / gone
//	    ┌───────────── held ──────────────────────────▶ ended / handedOff
//	    │ stop or       │ admit (claimed at once) / claimNext
//	    │ deadline      ▼
//	    ▼            claimed ──── lease lost ─────────▶ fenced
//	heldEnding          │ its loop begins                  ▲
//	 │ end(queued)      ▼                                  │
//	 │ written ──▶ ended executing ──── lease lost ────────┤
//	 │ not queued       │ the loop returns (or a stop      │
//	 ▼ any more         │ reached it before it began)      │ end write
//	heldStopped ─claim─▶ ending ───────────────────────────┘ failed
//	 │ gone             │ end written      │ park written
//	 ▼                  ▼                  ▼
//	handedOff         ended              parked
//
// held, heldEnding and heldStopped are QUEUED in the store (or were, until
// a write this instance has not seen yet); claimed, executing and ending
// hold the turn's lease here; parked, ended, fenced and handedOff are final:
// the run is let go (untracked, done closed) right after reaching one.
type runState uint8

const (
	// held: admitted here (or tracked for a claim), waiting for the store
	// to claim it: its handle has not begun.
	stHeld runState = iota
	// heldEnding: a stop or its deadline reached it while held; its end as
	// a queued run (lifecycle.end, unstarted) is being written.
	stHeldEnding
	// heldStopped: that write found it no longer queued. The claim that
	// beat it ends it here as a claimed run stopped before it began (the
	// stop's mode kept); or the store says it is gone (handedOff).
	stHeldStopped
	// claimed: the store gave it the turn here (lease held, RUNNING); its
	// loop has not begun.
	stClaimed
	// executing: its loop runs here.
	stExecuting
	// ending: its outcome is being decided and written (lifecycle.end or
	// lifecycle.park).
	stEnding
	// parked: its step waits only for confirmation answers; the lease is
	// let go, the run stays RUNNING in the store for whoever takes it up.
	stParked
	// ended: its end is in the store (written here, or by the write that
	// told this instance so).
	stEnded
	// fenced: this instance writes nothing more for it: its lease was
	// lost, or its end could not be written. The store's recovery decides.
	stFenced
	// handedOff: let go without an end: the store gave it to another
	// instance, or ended it elsewhere.
	stHandedOff
	nStates
)

var stateNames = [nStates]string{"held", "heldEnding", "heldStopped", "claimed", "executing", "ending", "parked", "ended", "fenced", "handedOff"}

func (st runState) String() string {
	if st < nStates {
		return stateNames[st]
	}
	return fmt.Sprintf("runState(%d)", st)
}

// edges are the legal transitions: edges[from] has bit to set.
var edges = [nStates]uint16{
	stHeld:        bits(stHeldEnding, stClaimed, stEnded, stHandedOff),
	stHeldEnding:  bits(stEnded, stHeldStopped, stEnding),
	stHeldStopped: bits(stEnding, stEnded, stHandedOff),
	stClaimed:     bits(stExecuting, stEnding, stFenced),
	stExecuting:   bits(stEnding, stFenced),
	stEnding:      bits(stParked, stEnded, stFenced),
}

func bits(sts ...runState) uint16 {
	var b uint16
	for _, s := range sts {
		b |= 1 << s
	}
	return b
}

// final reports whether the run is let go from st.
func (st runState) final() bool { return st >= stParked }

// held reports whether the run waits for its claim here (its handle has
// not begun).
func (st runState) held() bool { return st <= stHeldStopped }

// claimedHere reports whether the store gave the run the turn here (it may
// have ended, parked or lost it since: a run is let go right after).
func (st runState) claimedHere() bool { return st >= stClaimed && st != stHandedOff }

// liveRun is a run this instance holds a handle for: one it admitted and
// waits to claim, or one it claimed (or resumed) and executes.
type liveRun struct {
	// s, id, k, h, w and done never change: read them without the lock.
	s  *Service
	id string
	k  rein.SessionKey
	// h is the run's stop wire; it begins once the store says the run is
	// this instance's to run (claimed).
	h *run.Run
	w *writer
	// done is closed once the run is let go: it reached a final state and
	// its end's bookkeeping (logs, hooks, metrics) is over.
	done chan struct{}
	// nextLocal is the next run of the session held here (Service.local),
	// guarded by the service's mu.
	nextLocal *liveRun

	mu sync.Mutex
	// st is the run's state here: read with state, changed with move.
	st    runState
	rec   *store.RunRecord
	lease *store.Lease
	// claim is the claim that came while a stop's end of the held run
	// was being written (heldEnding): that write finds it claimed and ends
	// it as such.
	claim *claim
	// after are the runs of the session still finishing here when this one
	// was claimed: its loop begins once they are let go (see runClaimed).
	after []chan struct{}
	// stopApplied: the stop recorded on the run's record was applied here
	// (it is read from the store at most once).
	stopApplied bool
	// drain is how a shutdown stopped it, for the drain's summary.
	drain drainStop
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
	// left, so its schedule need not look again when it is let go.
	idle bool
	// stops are the accepted stops whose user.interrupt is still owed to
	// the log (stoplog.go). stopWrite is held by whoever writes them: the
	// requester's append or the run's end; once the run is final, a note
	// whose append failed is given up, and stopsOver (made with the first
	// note) is closed.
	stops     []*stopNote
	stopsOver chan struct{}
	stopWrite sync.Mutex
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

// drainStop is how a shutdown stopped a run.
type drainStop uint8

const (
	drainNone drainStop = iota
	drainInterrupted
	drainCancelled
)

func (lr *liveRun) key() rein.SessionKey { return lr.k }

// state is the run's state here.
func (lr *liveRun) state() runState {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.st
}

// move changes the state to `to` if it is one of from (a bit set), and
// reports whether it did. lr.mu is held. A legal precondition with an
// illegal edge is a defect: tests panic on it.
func (lr *liveRun) move(from uint16, to runState) bool {
	if from&(1<<lr.st) == 0 {
		return false
	}
	if edges[lr.st]&(1<<to) == 0 {
		if testing.Testing() {
			panic(fmt.Sprintf("sessions: run %s: illegal transition %s → %s", lr.id, lr.st, to))
		}
		lr.s.log.Error("illegal run state transition", "run", lr.id, "from", lr.st.String(), "to", to.String())
	}
	lr.st = to
	return true
}

// moveLocked is move taking the lock.
func (lr *liveRun) moveTo(from uint16, to runState) bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.move(from, to)
}

// fence is the run's lease token for its writes; ErrLeaseLost once it is
// fenced, so nothing more is written.
func (lr *liveRun) fence() (store.Fence, error) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.st == stFenced {
		return store.Fence{}, rein.ErrLeaseLost
	}
	if lr.lease == nil {
		return store.Fence{}, errors.New("sessions: run has no lease")
	}
	return lr.lease.Fence(), nil
}

// track creates and indexes the handle of a stored run, held.
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
	lr := &liveRun{s: s, id: rec.ID, k: rec.Key(), rec: rec, w: newWriter(s.st, rec.Key(), s.cfg.Observer.EventsAppended),
		link: link, done: make(chan struct{}), h: run.New(run.Options{ID: rec.ID, Deadline: rec.Deadline})}
	lr.jr = journal{s: s, lr: lr}
	lr.conf = confirmer{s: s, lr: lr}
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
		// While it waits for its turn the handle has not begun, and its
		// deadline is armed only when it begins. Armed once the run is in
		// s.live: a deadline already past fires at once, and the run's end
		// must find it there to let go of it. Under lr.mu, as lr.expiry is
		// read; one who saw no timer yet needs none: Expire does nothing to
		// a handle that has begun.
		lr.mu.Lock()
		lr.expiry = time.AfterFunc(time.Until(rec.Deadline), func() {
			if lr.h.Expire() {
				s.endHeld(lr)
			}
		})
		lr.mu.Unlock()
	}
	return lr, nil
}

// letGo is the last thing that happens to a run held here, once it reached
// a final state: it is untracked, done is closed (a run of its session
// claimed meanwhile may begin), and its session's schedule is woken —
// unless the run's end saw nothing left to schedule and nothing of the
// session is held here: then a look would find the session idle (whatever
// is admitted later is claimed, or kicked, by its own admission).
func (s *Service) letGo(lr *liveRun) {
	lr.mu.Lock()
	idle, drain, st := lr.idle, lr.drain, lr.st
	if lr.expiry != nil {
		lr.expiry.Stop()
	}
	lr.mu.Unlock()
	if !st.final() {
		if testing.Testing() {
			panic(fmt.Sprintf("sessions: run %s let go in state %s", lr.id, st))
		}
		s.log.Error("run let go before its end", "run", lr.id, "state", st.String())
	}
	lr.closeStops()
	s.untrack(lr)
	if drain != drainNone && st != stParked {
		s.mu.Lock()
		s.drained[drain]++
		s.mu.Unlock()
	}
	close(lr.done)
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

// stopping implements executor: Drain or Close has begun.
func (s *Service) stopping() bool { return s.draining.Load() }

// executesHere reports whether this instance holds the run's turn
// (claimNext's executor): claimed here and not yet let go.
func (s *Service) executesHere(runID string) bool {
	lr := s.liveRun(runID)
	return lr != nil && lr.state().claimedHere()
}

// noteStop remembers when a stop was requested, for the latency metric.
func (lr *liveRun) noteStop(mode string) {
	lr.mu.Lock()
	if lr.stopAt.IsZero() {
		lr.stopAt, lr.stopMode = time.Now(), mode
	}
	lr.mu.Unlock()
}

// stopped follows a stop the run's handle accepted: a run still held (its
// handle never began) ends here and now, as a queued run; any other is
// ended by its own execution.
func (s *Service) stopped(lr *liveRun) {
	if lr.state() == stHeld {
		s.endHeld(lr)
	}
}

// endHeld ends a held run that a stop or its deadline reached before any
// claim: one write ends it as a queued run (lifecycle.end, unstarted). If
// the store no longer has it queued, the claim that beat the stop ends it
// here as a claimed run stopped before it began; or the store says it is
// gone.
func (s *Service) endHeld(lr *liveRun) {
	if !lr.moveTo(bits(stHeld), stHeldEnding) {
		return // claimed meanwhile: its execution ends it
	}
	res := lr.h.Decide(run.Outcome{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ended, err := s.endRun(ctx, lr, store.Fence{}, false, endState{reason: res.Reason})
	if err != nil {
		s.log.Error("record end of queued run", "session", lr.key().String(), "run", lr.id, "err", err)
	}
	lr.mu.Lock()
	switch {
	case ended != nil:
		lr.move(bits(stHeldEnding), stEnded)
	case lr.claim != nil:
		lr.move(bits(stHeldEnding), stEnding)
	default:
		// Claimed a moment ago by a claim not seen here yet, or ended
		// elsewhere: the claim, or the schedule's next look, says which.
		lr.move(bits(stHeldEnding), stHeldStopped)
	}
	c := lr.claim
	lr.mu.Unlock()
	switch {
	case ended != nil:
		s.logEnd(ended, "")
		s.runEnded(lr.key(), lr.id, res.Reason.Status(), res.Reason, nil)
		s.observeEnd(lr, res)
		s.letGo(lr)
	case c != nil:
		s.endClaimedUnstarted(lr, *c)
	default:
		s.kick(lr.key())
	}
}

// settled lets go of a held run the store says this instance no longer
// waits for: ended by a schedule write (ended), or claimed or ended
// elsewhere (handedOff). Its handle refuses stops from now on.
func (s *Service) settled(lr *liveRun, final runState) {
	if !lr.moveTo(bits(stHeld, stHeldStopped), final) {
		return // a stop's write in flight, or claimed here: they end it
	}
	lr.h.Decide(run.Outcome{})
	s.letGo(lr)
}
