package tool

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/reinhq/rein"
)

// Decision is a human's answer to a confirmation request.
type Decision struct {
	Allow bool
	// DenyMessage is what the model reads as the denied call's error result
	// ("" when allowed, or when the human gave no reason).
	DenyMessage string
}

// DefaultGateMemory is how many answered or closed confirmations a Gate
// remembers (to answer a repeat with conflict rather than not-found) when
// no GateMemory option is given.
const DefaultGateMemory = 10000

// Gate holds tool calls until a human allows or denies them (docs/tools.md),
// within one process: the run opens a Pending before it announces the
// request, waits on it, and whoever answers resolves it by (session,
// tool_use_id).
//
// The Gate is not durable. The sessions service keeps the durable truth
// (which ids were requested and answered) in the store and uses Deliver
// only to wake the waiting run; an in-process library user can rely on
// Resolve's not-found/conflict answers directly.
//
// Memory is bounded: open confirmations are kept until they are resolved
// or closed; after that the id is remembered, so a second answer gets
// rein.ErrConflict, until the Gate has remembered more than its capacity
// (GateMemory, default DefaultGateMemory) of them, oldest forgotten first,
// or until Forget drops the session's ids. A forgotten id answers
// rein.ErrNotFound, as if it had never been opened.
type Gate struct {
	mu       sync.Mutex
	open     map[gateKey]*Pending
	done     map[gateKey]*list.Element // remembered answered/closed ids
	order    *list.List                // of gateKey, oldest first
	bySess   map[rein.SessionKey]map[string]struct{}
	capacity int
}

type gateKey struct {
	session rein.SessionKey
	id      string
}

// GateOption configures a Gate.
type GateOption func(*Gate)

// GateMemory sets how many answered or closed ids the Gate remembers
// (at least 1).
func GateMemory(n int) GateOption {
	return func(g *Gate) { g.capacity = max(n, 1) }
}

// NewGate returns an empty Gate.
func NewGate(opts ...GateOption) *Gate {
	g := &Gate{
		open:     map[gateKey]*Pending{},
		done:     map[gateKey]*list.Element{},
		order:    list.New(),
		bySess:   map[rein.SessionKey]map[string]struct{}{},
		capacity: DefaultGateMemory,
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Pending is one open confirmation.
type Pending struct {
	g   *Gate
	key gateKey

	// Guarded by g.mu.
	state    pendingState
	decision Decision
	released bool
	settled  chan struct{} // closed when state leaves pendingOpen
}

type pendingState int

const (
	pendingOpen pendingState = iota
	pendingResolved
	pendingClosed
)

// errClosedPending is what Wait returns after Close ended the confirmation.
var errClosedPending = errors.New("tool: confirmation closed without a decision")

// Open registers a pending confirmation for (session, toolUseID). Call it
// BEFORE announcing the request (the session.tool_confirmation_requested
// event), so that an answer arriving right after the announcement finds
// it. rein.ErrConflict if that id is open or was answered or closed.
func (g *Gate) Open(key rein.SessionKey, toolUseID string) (*Pending, error) {
	k := gateKey{key, toolUseID}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.open[k]; ok {
		return nil, rein.Errorf(rein.CodeConflict, "tool call %s is already awaiting confirmation", toolUseID)
	}
	if _, ok := g.done[k]; ok {
		return nil, rein.Errorf(rein.CodeConflict, "tool call %s was already confirmed or closed", toolUseID)
	}
	p := &Pending{g: g, key: k, settled: make(chan struct{})}
	g.open[k] = p
	return p, nil
}

// ToolUseID is the id of the call this confirmation holds.
func (p *Pending) ToolUseID() string { return p.key.id }

// Wait blocks until a decision is delivered or ctx is done. When ctx ends
// first the confirmation is closed (a later answer gets rein.ErrConflict)
// and the error wraps ctx.Err() (and its cause, if any). A decision that
// raced the end of ctx wins: it was accepted, so it is reported. Wait may
// be called again; it then reports the same outcome.
func (p *Pending) Wait(ctx context.Context) (Decision, error) {
	select {
	case <-p.settled:
	case <-ctx.Done():
		p.g.mu.Lock()
		if p.state == pendingOpen {
			p.g.settleLocked(p, pendingClosed, Decision{})
			p.g.mu.Unlock()
			if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
				return Decision{}, fmt.Errorf("waiting for confirmation of %s: %w (%w)", p.key.id, ctx.Err(), cause)
			}
			return Decision{}, fmt.Errorf("waiting for confirmation of %s: %w", p.key.id, ctx.Err())
		}
		p.g.mu.Unlock()
	}
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if p.state == pendingResolved {
		return p.decision, nil
	}
	return Decision{}, errClosedPending
}

// Close ends the confirmation without a decision (its run ended); a later
// Resolve gets rein.ErrConflict and a Wait returns an error. Idempotent,
// and harmless after a decision.
func (p *Pending) Close() {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if p.state == pendingOpen {
		p.g.settleLocked(p, pendingClosed, Decision{})
	}
}

// Release lets go of the confirmation without remembering its id, so that
// it can be opened again: the call still waits, but no longer here (its run
// parked, to be taken up later or elsewhere). An open one ends without a
// decision (a Wait in progress returns an error). A decision already
// delivered is forgotten too: a caller that releases keeps its decisions
// elsewhere (a store) and reads them there when it opens the id again — a
// run that parked just as its answer was delivered here is taken up again
// and must be able to open it. Idempotent.
func (p *Pending) Release() {
	p.g.mu.Lock()
	defer p.g.mu.Unlock()
	if p.state != pendingOpen {
		if !p.released {
			// Once: a later Release must not forget a newer Pending's answer.
			p.released = true
			p.g.forgetLocked(p.key)
		}
		return
	}
	p.released = true
	p.state = pendingClosed
	close(p.settled)
	delete(p.g.open, p.key)
}

// forgetLocked drops what the Gate remembers of k's answer or close.
func (g *Gate) forgetLocked(k gateKey) {
	el, ok := g.done[k]
	if !ok {
		return
	}
	g.order.Remove(el)
	delete(g.done, k)
	if s := g.bySess[k.session]; s != nil {
		delete(s, k.id)
		if len(s) == 0 {
			delete(g.bySess, k.session)
		}
	}
}

// Resolve delivers a human's decision. rein.ErrNotFound if the id was never
// opened for that session (or has been forgotten), rein.ErrConflict if it
// was already answered or closed. Of concurrent resolvers exactly one
// succeeds.
func (g *Gate) Resolve(key rein.SessionKey, toolUseID string, d Decision) error {
	k := gateKey{key, toolUseID}
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.open[k]; ok {
		g.settleLocked(p, pendingResolved, d)
		return nil
	}
	if _, ok := g.done[k]; ok {
		return rein.Errorf(rein.CodeConflict, "tool call %s is no longer awaiting confirmation", toolUseID)
	}
	return rein.Errorf(rein.CodeNotFound, "no confirmation requested for tool call %s", toolUseID)
}

// Deliver wakes the waiter of (session, toolUseID) in this process, if one
// is open, with d, and reports whether it did. It does no not-found or
// conflict bookkeeping beyond that: it is for callers whose store already
// decided the answer was valid (the sessions service, or another instance
// that received the answer).
func (g *Gate) Deliver(key rein.SessionKey, toolUseID string, d Decision) bool {
	k := gateKey{key, toolUseID}
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.open[k]
	if ok {
		g.settleLocked(p, pendingResolved, d)
	}
	return ok
}

// Forget drops what the Gate remembers of the session's answered and
// closed ids (call it when a session is deleted or its runs are done with).
// Open confirmations are not touched.
func (g *Gate) Forget(key rein.SessionKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.bySess[key] {
		k := gateKey{key, id}
		g.order.Remove(g.done[k])
		delete(g.done, k)
	}
	delete(g.bySess, key)
}

// Waiting reports how many confirmations are open.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.open)
}

// settleLocked moves p out of the open set and into the remembered ids,
// forgetting the oldest ones beyond capacity. g.mu must be held.
func (g *Gate) settleLocked(p *Pending, state pendingState, d Decision) {
	p.state, p.decision = state, d
	close(p.settled)
	delete(g.open, p.key)
	g.done[p.key] = g.order.PushBack(p.key)
	ids := g.bySess[p.key.session]
	if ids == nil {
		ids = map[string]struct{}{}
		g.bySess[p.key.session] = ids
	}
	ids[p.key.id] = struct{}{}
	for g.order.Len() > g.capacity {
		g.forgetLocked(g.order.Front().Value.(gateKey))
	}
}
