package run

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/reinhq/rein"
)

// Engine owns the per-session lanes. Runs of one (owner, session) execute
// one at a time in the order they were started; runs of different sessions
// run concurrently. An Engine is a value: a process may have many.
type Engine struct {
	base context.Context
	now  func() time.Time

	mu    sync.Mutex
	lanes map[rein.SessionKey]*lane
	// spare are emptied lanes kept for reuse: a session's lane lives only
	// while it has runs, often one run's time.
	spare []*lane
}

// maxSpareLanes bounds the lanes kept for reuse.
const maxSpareLanes = 64

// lane is one session's FIFO. Invariant (under Engine.mu): running == nil
// implies queue is empty, and an empty lane is removed from the map.
type lane struct {
	key     rein.SessionKey
	running *Run
	queue   []*Run
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Context is the parent of every run's context (nil: Background).
	// Values flow to runs; cancelling it cancels every run.
	Context context.Context
	// Clock tells the time for deadlines (nil: wall clock).
	Clock rein.Clock
}

// NewEngine returns an Engine.
func NewEngine(opts EngineOptions) *Engine {
	base := opts.Context
	if base == nil {
		base = context.Background()
	}
	return &Engine{base: base, now: opts.Clock.Now, lanes: map[rein.SessionKey]*lane{}}
}

// ErrNoID is returned by Prepare for a run without an id.
var ErrNoID = errors.New("run: options need an ID")

// Prepare creates a run handle in CREATED. Nothing executes until Start.
func (e *Engine) Prepare(fn Func, opts Options) (*Run, error) {
	if opts.ID == "" {
		return nil, ErrNoID
	}
	if fn == nil {
		return nil, errors.New("run: nil Func")
	}
	r := &Run{id: opts.ID, key: opts.Session, eng: e, fn: fn, opts: opts, done: make(chan struct{})}
	r.ctl.r = r
	return r, nil
}

// enqueue puts r in its lane and reports whether it was admitted at once.
func (e *Engine) enqueue(r *Run) bool {
	e.mu.Lock()
	l := e.lanes[r.key]
	if l == nil {
		if n := len(e.spare); n > 0 {
			l = e.spare[n-1]
			e.spare[n-1] = nil
			e.spare = e.spare[:n-1]
			l.key = r.key
		} else {
			l = &lane{key: r.key}
		}
		e.lanes[r.key] = l
	}
	r.lane = l
	if l.running == nil {
		l.running = r
		e.mu.Unlock()
		e.admit(l, r)
		return true
	}
	if r.opts.Front {
		l.queue = append(l.queue, nil)
		copy(l.queue[1:], l.queue)
		l.queue[0] = r
	} else {
		l.queue = append(l.queue, r)
	}
	// A deadline that passes while queued ends the run without executing
	// (a run admitted at once needs no such watch). Set under the lock
	// that admits r later, so tryAdmit finds it; the callback checks the
	// state, so it may fire at any time.
	r.stopTimer = context.AfterFunc(r.runCtx, r.expireQueued)
	e.mu.Unlock()
	return false
}

// admit runs r, which the lane just made its head; if r was cancelled
// meanwhile it is finished and the next run is admitted instead.
func (e *Engine) admit(l *lane, r *Run) {
	for {
		if r.tryAdmit() {
			return
		}
		r.finishUnstarted()
		if r = e.next(l, r); r == nil {
			return
		}
	}
}

// next makes the run after prev the lane's head and returns it (nil when
// the lane is empty and removed).
func (e *Engine) next(l *lane, prev *Run) *Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.running != prev {
		return nil
	}
	if len(l.queue) == 0 {
		l.running = nil
		if e.lanes[l.key] == l {
			delete(e.lanes, l.key)
			if len(e.spare) < maxSpareLanes {
				// A run that still points at l (one dequeued before)
				// finds itself neither running nor queued in it, in
				// whatever session it serves next.
				l.queue = l.queue[:0]
				e.spare = append(e.spare, l)
			}
		}
		return nil
	}
	n := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	l.running = n
	return n
}

// release is called when the lane's running run r is terminal.
func (e *Engine) release(r *Run) {
	if n := e.next(r.lane, r); n != nil {
		e.admit(r.lane, n)
	}
}

// dequeue removes a queued run from its lane; false if it is not queued
// there (it was just admitted).
func (e *Engine) dequeue(r *Run) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := r.lane
	if l == nil {
		return false
	}
	for i, q := range l.queue {
		if q == r {
			copy(l.queue[i:], l.queue[i+1:])
			l.queue[len(l.queue)-1] = nil
			l.queue = l.queue[:len(l.queue)-1]
			return true
		}
	}
	return false
}

// Lane returns the session's running run (nil if none) and its queued runs
// in the order they will run.
func (e *Engine) Lane(key rein.SessionKey) (running *Run, queued []*Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.lanes[key]
	if l == nil {
		return nil, nil
	}
	return l.running, append([]*Run(nil), l.queue...)
}

// Position returns r's place in its lane's queue (1 = next to run), or 0
// if r is not queued.
func (e *Engine) Position(r *Run) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.lane == nil {
		return 0
	}
	for i, q := range r.lane.queue {
		if q == r {
			return i + 1
		}
	}
	return 0
}
