// The runs this instance holds a handle for (liveRun): made when a run is
// admitted or claimed here, found by id for stops, let go at the end.

package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/store"
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

// noteStop remembers when a stop was requested, for the latency metric.
func (lr *liveRun) noteStop(mode string) {
	lr.mu.Lock()
	if lr.stopAt.IsZero() {
		lr.stopAt, lr.stopMode = time.Now(), mode
	}
	lr.mu.Unlock()
}
