package run

import (
	"fmt"
	"sync"

	"github.com/reinhq/rein"
)

// Registry is the live registry: it finds a started (or about to be
// started) run by id, but only for the run's own owner and session. A
// lookup with the wrong owner or session behaves exactly like a lookup of an
// unknown id, so a stop request can never reach another owner's run, and a
// stale stop naming an old run id can never reach the session's new run.
//
// Entries leave when their run becomes terminal, by compare-and-delete on
// the exact entry: an old run's cleanup can never remove a newer entry.
type Registry struct {
	mu sync.Mutex
	m  map[string]*Run
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]*Run{}} }

// ErrDuplicate is returned when a run id is registered twice.
var ErrDuplicate = fmt.Errorf("run: duplicate run id: %w", rein.ErrConflict)

// Register makes r findable. Register before Start, so that a stop racing a
// very short run still finds it. A duplicate id is an error. A run that is
// already terminal is not kept.
func (g *Registry) Register(r *Run) error {
	g.mu.Lock()
	if _, dup := g.m[r.id]; dup {
		g.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrDuplicate, r.id)
	}
	g.m[r.id] = r
	g.mu.Unlock()
	// The run leaves the registry it was registered in first when
	// terminal without a hook of its own (a closure and a hook list per
	// run); a second registry takes a hook.
	r.mu.Lock()
	if r.st != stTerminal && r.reg == nil {
		r.reg = g
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	r.OnTerminal(g.remove)
	return nil
}

func (g *Registry) remove(r *Run) {
	g.mu.Lock()
	if g.m[r.id] == r {
		delete(g.m, r.id)
	}
	g.mu.Unlock()
}

// Find returns the live run with that id if it belongs to key.
func (g *Registry) Find(key rein.SessionKey, runID string) (*Run, bool) {
	g.mu.Lock()
	r, ok := g.m[runID]
	g.mu.Unlock()
	if !ok || r.key != key {
		return nil, false
	}
	return r, true
}

// Cancel cancels the run if it is live and belongs to key; it reports
// whether this call caused the cancellation.
func (g *Registry) Cancel(key rein.SessionKey, runID string) bool {
	r, ok := g.Find(key, runID)
	return ok && r.Cancel()
}

// Interrupt interrupts the run if it is live and belongs to key; it reports
// whether this call took effect.
func (g *Registry) Interrupt(key rein.SessionKey, runID, msg string) bool {
	r, ok := g.Find(key, runID)
	return ok && r.Interrupt(msg)
}

// Runs returns a snapshot of every live run.
func (g *Registry) Runs() []*Run {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*Run, 0, len(g.m))
	for _, r := range g.m {
		out = append(out, r)
	}
	return out
}

// Len returns the number of live runs.
func (g *Registry) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}
