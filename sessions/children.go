package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/store"
)

// RunEnd is what the service tells Config.OnRunEnd about a run that ended
// (its end is durable when the hook runs).
type RunEnd struct {
	Session rein.SessionKey
	RunID   string
	Status  rein.RunStatus
	Reason  rein.Reason
	// Reply is the run's final reply (an interrupted one included); nil
	// when it has none.
	Reply *string
	// Parent is the session's parent session ("" for a root session)
	// when ParentKnown; the service knows it when the run executed here
	// (it read the session to run it), and saves the hook a read then.
	Parent      string
	ParentKnown bool
}

// Children is the service's plumbing for subagents (package subagent):
// child sessions, the subagent.* events and notices that report a child's
// work to its parent, and the catch-up after a restart. It is kept apart
// from Service's own methods, which are what a client of a session calls;
// Service.Children returns it. The zero value is not usable.
type Children struct{ s *Service }

// Children returns the service's subagent plumbing.
func (s *Service) Children() Children { return Children{s: s} }

// ChildRequest creates a subagent child session (docs/api.md: a child is a
// session of the same owner with a parent and a persisted descriptor).
type ChildRequest struct {
	// ID is the caller-chosen child id ("" → a fresh session id). A taken
	// id is rein.ErrConflict.
	ID string
	// Descriptor is what the child needs to be resumed from storage.
	Descriptor store.SubagentDescriptor
}

// Create creates a child session of parent: it runs with the agent the
// descriptor names (default: the parent's), and with the descriptor's
// system prompt when it has one.
func (c Children) Create(ctx context.Context, parent rein.SessionKey, req ChildRequest) (*store.Session, error) {
	s := c.s
	if err := s.unavailableIfDraining(); err != nil {
		return nil, err
	}
	p, err := s.st.GetSession(ctx, parent)
	if err != nil {
		return nil, err
	}
	d := req.Descriptor
	if d.Agent == "" {
		d.Agent = p.Agent
	}
	if d.Agent == "" {
		d.Agent = DefaultAgent
	}
	ag := s.cfg.Agents[d.Agent]
	if ag == nil {
		return nil, rein.InvalidArgument("agent", "unknown agent %q", d.Agent)
	}
	if d.Model == "" {
		d.Model = ag.Model
	} else if d.Model != ag.Model {
		// Opened now, so a bad name fails the start, not every activation.
		if _, err := s.childModel(d.Model); err != nil {
			return nil, err
		}
	}
	childID := req.ID
	if childID == "" {
		childID = id.New(id.Session)
	}
	sess := &store.Session{Owner: parent.Owner, ID: childID, ParentID: parent.ID, Metadata: json.RawMessage("{}"),
		Agent: d.Agent, Subagent: &d, CreatedAt: s.now()}
	if d.System != "" {
		sys := d.System
		sess.System = &sys
	}
	if err := s.st.CreateSession(ctx, sess); err != nil {
		return nil, err
	}
	// The store left in sess what it stored: no read back.
	return sess, nil
}

// childModel opens (once) the model a child's descriptor names.
func (s *Service) childModel(name string) (model.Model, error) {
	if s.cfg.Models == nil {
		return nil, rein.InvalidArgument("model", "model %q: this service runs children with their agent's model only", name)
	}
	s.modelsMu.Lock()
	defer s.modelsMu.Unlock()
	if m, ok := s.models[name]; ok {
		return m, nil
	}
	m, err := s.cfg.Models(name)
	if err != nil {
		return nil, rein.InvalidArgument("model", "model %q: %v", name, err)
	}
	if s.models == nil {
		s.models = map[string]model.Model{}
	}
	s.models[name] = m
	return m, nil
}

// SessionIDInUse reports whether a session of any owner has id: the one
// owner-blind read, so that a subagent operation from another owner's
// session is refused as unauthorized (and learns nothing else).
func (c Children) SessionIDInUse(ctx context.Context, id string) (bool, error) {
	return c.s.st.SessionIDInUse(ctx, id)
}

// List returns the direct children of key, oldest first.
func (c Children) List(ctx context.Context, key rein.SessionKey) ([]*store.Session, error) {
	if _, err := c.s.st.GetSession(ctx, key); err != nil {
		return nil, err
	}
	return c.s.st.ListChildren(ctx, key)
}

// subagentEvents are the events Children may log: the service writes
// every other type itself, as the transition it reports happens.
var subagentEvents = []rein.EventType{rein.EventSubagentStarted, rein.EventSubagentCompleted}

// checkSubagentEvent refuses an event that is not a subagent.* event, so
// that no caller can log a run's start, end or anything else the service
// did not do.
func checkSubagentEvent(ev rein.Event) error {
	if slices.Contains(subagentEvents, ev.Type) {
		return nil
	}
	return rein.InvalidArgument("type", "event type %q cannot be logged here: only %s can", ev.Type, joinTypes(subagentEvents))
}

func joinTypes(ts []rein.EventType) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return strings.Join(out, " and ")
}

// LogEvent appends a subagent.* event (subagent.started,
// subagent.completed) to the session's log; any other type is refused as
// an invalid argument naming the allowed ones, and nothing is written.
func (c Children) LogEvent(ctx context.Context, key rein.SessionKey, ev rein.Event) error {
	if err := checkSubagentEvent(ev); err != nil {
		return err
	}
	return c.s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.AppendEvents(ev)
		return err
	})
}

// Notice delivers a subagent notice to a session like a supplement (SPEC
// §7): it reaches the session's next step, its consumption is logged as
// agent.supplement_consumed with the notice's id, and it is logged only as
// ev (subagent.completed), in the same write. A notice id already
// delivered writes nothing. waiting reports whether the notice is in the
// session's inbox, not yet consumed, after the call: just delivered, or
// delivered by an earlier call (a settlement repeated after a crash)
// that no step has taken yet; queued is when it was first delivered. ev
// must be a subagent.* event, as for LogEvent.
func (c Children) Notice(ctx context.Context, key rein.SessionKey, noticeID, text string, ev rein.Event) (waiting bool, queued time.Time, err error) {
	if err := checkSubagentEvent(ev); err != nil {
		return false, time.Time{}, err
	}
	err = c.s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		sup, created, err := tx.PushSupplement(&store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: noticeID, Text: text,
			Source: inbox.SourceSubagent, Status: store.SupplementQueued, CreatedAt: tx.Now()})
		if err != nil {
			return err
		}
		waiting, queued = sup.Status == store.SupplementQueued, sup.CreatedAt
		if !created {
			return errNothing
		}
		_, err = tx.AppendEvents(ev)
		return err
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	if err != nil {
		waiting = false
	}
	return waiting, queued, err
}

// QueuedNotices returns the subagent notices in key's inbox that no step
// has taken yet, oldest first: what a parent's run left unread when it
// ended. One read when the inbox is empty, which is nearly always.
func (c Children) QueuedNotices(ctx context.Context, key rein.SessionKey) ([]*store.Supplement, error) {
	s := c.s
	n, err := s.st.PendingSupplements(ctx, key)
	if err != nil || n == 0 {
		return nil, err
	}
	var out []*store.Supplement
	err = s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		out = out[:0]
		sups, err := tx.QueuedSupplements()
		if err != nil {
			return err
		}
		for _, sup := range sups {
			if sup.Source == inbox.SourceSubagent {
				out = append(out, sup)
			}
		}
		return errNothing // a read: nothing to write
	})
	if errors.Is(err, errNothing) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runEnded tells Config.OnRunEnd about a run whose end is recorded.
func (s *Service) runEnded(key rein.SessionKey, runID string, status rein.RunStatus, reason rein.Reason, reply *string) {
	s.runEndedFrom(RunEnd{Session: key, RunID: runID, Status: status, Reason: reason, Reply: reply})
}

// runEndedFrom is runEnded with everything the hook is told.
func (s *Service) runEndedFrom(end RunEnd) {
	if s.cfg.OnRunEnd == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.cfg.OnRunEnd(ctx, end)
	}()
}

// Flush is the store's flush barrier for a session (docs/api.md).
func (c Children) Flush(ctx context.Context, key rein.SessionKey) (bool, error) {
	return c.s.st.Flush(ctx, key)
}

// RecentlyEnded returns the runs (all owners) that ended at or after since,
// oldest end first, for catching up on work a crash interrupted (subagent
// settlement). It reads those runs only, by the store's end-time index.
func (c Children) RecentlyEnded(ctx context.Context, since time.Time) ([]*store.RunRecord, error) {
	return c.s.st.ListEndedSince(ctx, since)
}
