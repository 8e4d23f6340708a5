// Package subagent lets an agent delegate, and lets that delegated
// conversation be continued later — minutes or days — from any instance
// (docs/api.md).
//
// The design that keeps it small: a child is a session (a parent and a
// persisted descriptor) and an activation is a run of it. So children get
// everything sessions have — the event log, leases and fencing, resume
// after instance loss, cancel, interrupt, inbox and SSE — and this package
// only adds the three intent-named operations (Start, StartContinuable,
// Followup), the authority check (only the direct parent session of the
// same owner, checked against the store), the settlement of a finished
// activation into its parent (subagent.completed and a notice delivered
// like a supplement), and the model-facing tools.
package subagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// Error codes of failed subagent operations (docs/api.md), as the model reads
// them in an error tool result.
const (
	CodeNotResumable   = "not_resumable"
	CodeUnauthorized   = "unauthorized"
	CodeDuplicateChild = "duplicate_child"
	CodeDepthExceeded  = "depth_exceeded"
	CodeDraining       = "draining"
	// CodeNotRunning: Steer found no running activation.
	CodeNotRunning = "not_running"
)

// Error is a failed subagent operation.
type Error struct {
	Code    string
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// DefaultMaxDepth caps delegation: a root session is depth 0, its children
// depth 1, and so on.
const DefaultMaxDepth = 3

// Options configure a Manager.
type Options struct {
	// MaxDepth caps delegation depth (0: DefaultMaxDepth).
	MaxDepth int
	// Logger (nil: discard).
	Logger *slog.Logger
	// WakeParents: a background child's settlement starts a run of its
	// parent when the parent is idle, so the parent reacts to the notice
	// at once instead of at its next message (docs/api.md); a parent busy
	// at the time is woken when its run ends if the notice is still
	// unread then (wakeForUnread). Off, an idle parent is never started by
	// a notice.
	WakeParents bool
	// Agents are the configured agents a model may name as a child's
	// (spawn_agent's "agent"), first the default; empty: a child runs its
	// parent's agent.
	Agents []string
}

// Manager runs subagents over a sessions service. Create it before the
// service (its tools go into the service's agents), pass its OnRunEnd as
// sessions.Config.OnRunEnd, then Bind the service.
type Manager struct {
	maxDepth int
	log      *slog.Logger
	wake     bool

	mu  sync.RWMutex
	svc *sessions.Service
	// spawnSpec is spawn_agent's spec for the configured agents (New,
	// SetAgents).
	spawnSpec atomic.Pointer[tool.Spec]
}

// SetAgents sets the configured agents a model may name as a child's
// (Options.Agents), for when they are known only after the Manager's tools
// were made: call it before the tools are offered.
func (m *Manager) SetAgents(names []string) {
	sp := spawnSpec(names)
	m.spawnSpec.Store(&sp)
}

// New returns a Manager.
func New(opts Options) *Manager {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{maxDepth: opts.MaxDepth, log: opts.Logger, wake: opts.WakeParents}
	m.SetAgents(opts.Agents)
	return m
}

// Bind gives the Manager the service it works over.
func (m *Manager) Bind(svc *sessions.Service) {
	m.mu.Lock()
	m.svc = svc
	m.mu.Unlock()
}

func (m *Manager) service() (*sessions.Service, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.svc == nil {
		return nil, errors.New("subagent: the manager is not bound to a service")
	}
	if m.svc.Draining() {
		return nil, errorf(CodeDraining, "the server is shutting down: no new subagent activations")
	}
	return m.svc, nil
}

// StartRequest is what a caller gives to start a child. It carries no
// service-resolved continuation state: resuming is not a caller's
// operation.
type StartRequest struct {
	// Prompt is the child's first input (required).
	Prompt string
	// Label names the child for people and for list_agents.
	Label string
	// Agent is the configured agent the child runs ("": the parent's).
	Agent string
	// Model is the model the child runs, as the service's Config.Models
	// opens it ("": its agent's).
	Model string
	// System is the child's system prompt or persona ("": its agent's).
	System string
	// ToolFilter narrows the tools the child is offered (nil: its agent's).
	ToolFilter []string
}

// Result is a one-shot child's outcome.
type Result struct {
	ChildID string
	TaskID  string
	Status  rein.RunStatus
	Reason  rein.Reason
	// Output is the child's final reply ("" when it has none).
	Output string
}

// descriptor builds the child's descriptor under parent, checking depth.
func (m *Manager) descriptor(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, req StartRequest, continuable bool) (store.SubagentDescriptor, error) {
	info, err := svc.GetSession(ctx, parent)
	if err != nil {
		return store.SubagentDescriptor{}, err
	}
	depth := 1
	if info.Subagent != nil {
		depth = info.Subagent.Depth + 1
	}
	if depth > m.maxDepth {
		return store.SubagentDescriptor{}, errorf(CodeDepthExceeded, "delegation is capped at depth %d", m.maxDepth)
	}
	return store.SubagentDescriptor{Agent: req.Agent, Label: req.Label, Model: req.Model, System: req.System,
		ToolFilter: req.ToolFilter, Depth: depth, Continuable: continuable}, nil
}

// Start runs a one-shot child owned by its caller and waits for its
// result. Cancelling ctx cancels the child (and, through its own tool
// calls, its children).
func (m *Manager) Start(ctx context.Context, parent rein.SessionKey, req StartRequest) (Result, error) {
	svc, err := m.service()
	if err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return Result{}, rein.InvalidArgument("prompt", "prompt must be a non-empty string")
	}
	d, err := m.descriptor(ctx, svc, parent, req, false)
	if err != nil {
		return Result{}, err
	}
	child, err := svc.Children().Create(ctx, parent, sessions.ChildRequest{Descriptor: d})
	if err != nil {
		return Result{}, err
	}
	res, err := svc.SendMessage(ctx, child.Key(), sessions.MessageRequest{Text: req.Prompt})
	if err != nil {
		return Result{}, err
	}
	m.logStarted(ctx, svc, parent, child.ID, res.RunID)
	out := Result{ChildID: child.ID, TaskID: res.RunID}
	end, err := waitEnd(ctx, svc, child.Key(), res.RunID)
	if err != nil && svc.Draining() {
		// A shutdown interrupts every running run, the child's included:
		// it ends by that interrupt, not by a cancel from here.
		return out, err
	}
	if err != nil {
		// The caller went away: the child goes too.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		runID := res.RunID
		if _, serr := svc.Interrupt(sctx, child.Key(), sessions.InterruptRequest{RunID: &runID, Mode: rein.StopCancel}); serr != nil {
			m.log.Warn("cancel a one-shot child", "child", child.ID, "err", serr)
		}
		return out, err
	}
	out.Status, out.Reason, out.Output = end.Status, end.Reason, end.reply
	return out, nil
}

// Started is what StartContinuable and a started Followup return.
type Started struct {
	ChildID string
	// TaskID is the activation's run id.
	TaskID string
	// MessageID is the id of what carries the content in the child's log:
	// its user.message event.
	MessageID string
}

// ContinuableSpec describes a continuable child.
type ContinuableSpec struct {
	StartRequest
	// ChildID is a caller-chosen child id ("": fresh); a taken one is
	// duplicate_child.
	ChildID string
}

// StartContinuable persists the child and its descriptor, starts its first
// activation in the background and returns at once.
func (m *Manager) StartContinuable(ctx context.Context, parent rein.SessionKey, spec ContinuableSpec) (Started, error) {
	svc, err := m.service()
	if err != nil {
		return Started{}, err
	}
	if strings.TrimSpace(spec.Prompt) == "" {
		return Started{}, rein.InvalidArgument("prompt", "prompt must be a non-empty string")
	}
	d, err := m.descriptor(ctx, svc, parent, spec.StartRequest, true)
	if err != nil {
		return Started{}, err
	}
	child, err := svc.Children().Create(ctx, parent, sessions.ChildRequest{ID: spec.ChildID, Descriptor: d})
	if errors.Is(err, rein.ErrConflict) {
		// The child and its first activation are two writes: a call cut
		// between them (a crash, a lost answer) left a child of this
		// parent that never ran, and a retry finishes the start instead of
		// finding the id taken.
		if prev := m.unstartedChild(ctx, svc, parent, spec.ChildID); prev != nil {
			child, err = prev, nil
		} else {
			return Started{}, errorf(CodeDuplicateChild, "a session with id %q already exists", spec.ChildID)
		}
	}
	if err != nil {
		return Started{}, err
	}
	res, err := svc.SendMessage(ctx, child.Key(), sessions.MessageRequest{Text: spec.Prompt})
	if err != nil {
		return Started{}, err
	}
	m.logStarted(ctx, svc, parent, child.ID, res.RunID)
	return Started{ChildID: child.ID, TaskID: res.RunID, MessageID: res.MessageID}, nil
}

// unstartedChild returns parent's continuable child id if it has never run,
// else nil.
func (m *Manager) unstartedChild(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, id string) *store.Session {
	key := rein.SessionKey{Owner: parent.Owner, ID: id}
	info, err := svc.GetSession(ctx, key)
	if err != nil || info.ParentID != parent.ID || info.Subagent == nil || !info.Subagent.Continuable {
		return nil
	}
	runs, err := svc.ListRuns(ctx, key)
	if err != nil || len(runs) > 0 {
		return nil
	}
	return info.Session
}

// Route says how a followup was delivered.
type Route string

// The routes of docs/api.md.
const (
	// RouteSteered: an activation was running (or queued); the content
	// reaches its next step as a supplement (source "parent").
	RouteSteered Route = "steered"
	// RouteStarted: a new activation resumes the child from its persisted
	// transcript with the content as its input.
	RouteStarted Route = "started"
)

// FollowupOptions govern a Followup.
type FollowupOptions struct {
	// Source labels the content ("": parent); a label, never authority.
	Source string
	// Signal governs the call until the content is accepted (durably
	// stored); cancelling it afterwards changes nothing. Nil: the call's
	// context.
	Signal context.Context
}

// FollowupResult is what Followup returns once the content is durable.
type FollowupResult struct {
	MessageID string
	Route     Route
	TaskID    string
}

// lookup loads the child and checks that parent is its direct parent
// session of the same owner — against the store, so it holds after a
// restart and from any instance. An id no session has is not_resumable;
// one that names another owner's session, or a session that is not
// parent's child, is unauthorized (and nothing else is said about it).
func (m *Manager) lookup(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, childID string) (*sessions.SessionInfo, error) {
	info, err := svc.GetSession(ctx, rein.SessionKey{Owner: parent.Owner, ID: childID})
	if errors.Is(err, rein.ErrNotFound) {
		inUse, uerr := svc.Children().SessionIDInUse(ctx, childID)
		if uerr != nil {
			return nil, uerr
		}
		if inUse {
			return nil, notParent(childID)
		}
		return nil, errorf(CodeNotResumable, "no subagent %q", childID)
	}
	if err != nil {
		return nil, err
	}
	if info.ParentID != parent.ID {
		return nil, notParent(childID)
	}
	return info, nil
}

// notParent is the unauthorized error of a caller that is not childID's
// direct parent; it says nothing about childID itself.
func notParent(childID string) *Error {
	return errorf(CodeUnauthorized, "only the direct parent session of %q may do that", childID)
}

// authorize is lookup for an operation that continues the child: it must
// have a continuable descriptor.
func (m *Manager) authorize(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, childID string) (*sessions.SessionInfo, error) {
	info, err := m.lookup(ctx, svc, parent, childID)
	if err != nil {
		return nil, err
	}
	if info.Subagent == nil || !info.Subagent.Continuable {
		return nil, errorf(CodeNotResumable, "subagent %q cannot be continued", childID)
	}
	return info, nil
}

// Followup delivers content to a continuable child: into its running
// activation's next step (steered), or as the input of a new activation
// that resumes it from its persisted transcript (started). It returns once
// the content is durably stored.
func (m *Manager) Followup(ctx context.Context, parent rein.SessionKey, childID, content string, opts FollowupOptions) (FollowupResult, error) {
	svc, err := m.service()
	if err != nil {
		return FollowupResult{}, err
	}
	if strings.TrimSpace(content) == "" {
		return FollowupResult{}, rein.InvalidArgument("message", "message must be a non-empty string")
	}
	if opts.Signal != nil && opts.Signal.Err() != nil {
		// Cancelled before it could be accepted: nothing is delivered.
		return FollowupResult{}, context.Cause(opts.Signal)
	}
	if opts.Signal != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(opts.Signal, cancel)
		defer stop()
	}
	source := opts.Source
	if source == "" {
		source = "parent"
	}
	ckey := rein.SessionKey{Owner: parent.Owner, ID: childID}
	for attempt := 0; ; attempt++ {
		info, err := m.authorize(ctx, svc, parent, childID)
		if err != nil {
			return FollowupResult{}, err
		}
		if task := activeTask(info); task != "" {
			sup, err := svc.Supplement(ctx, ckey, sessions.SupplementRequest{Text: content, Source: source})
			if err != nil {
				return FollowupResult{}, err
			}
			return FollowupResult{MessageID: sup.ID, Route: RouteSteered, TaskID: task}, nil
		}
		res, err := svc.SendMessage(ctx, ckey, sessions.MessageRequest{Text: content})
		if errors.Is(err, rein.ErrSessionBusy) && attempt < 3 {
			// Another followup started an activation just now: steer it.
			continue
		}
		if err != nil {
			return FollowupResult{}, err
		}
		m.logStarted(ctx, svc, parent, childID, res.RunID)
		return FollowupResult{MessageID: res.MessageID, Route: RouteStarted, TaskID: res.RunID}, nil
	}
}

// Steer delivers content into the running activation of a child; it fails
// with not_running when none runs.
func (m *Manager) Steer(ctx context.Context, parent rein.SessionKey, childID, content string) (FollowupResult, error) {
	svc, err := m.service()
	if err != nil {
		return FollowupResult{}, err
	}
	info, err := m.authorize(ctx, svc, parent, childID)
	if err != nil {
		return FollowupResult{}, err
	}
	task := activeTask(info)
	if task == "" {
		return FollowupResult{}, errorf(CodeNotRunning, "subagent %q has no running activation", childID)
	}
	sup, err := svc.Supplement(ctx, rein.SessionKey{Owner: parent.Owner, ID: childID}, sessions.SupplementRequest{Text: content, Source: "parent"})
	if err != nil {
		return FollowupResult{}, err
	}
	return FollowupResult{MessageID: sup.ID, Route: RouteSteered, TaskID: task}, nil
}

// activeTask is the child's running activation, else its first queued one.
func activeTask(info *sessions.SessionInfo) string {
	if info.CurrentRunID != "" {
		return info.CurrentRunID
	}
	if len(info.QueuedRunIDs) > 0 {
		return info.QueuedRunIDs[0]
	}
	return ""
}

// Interrupt stops a child's running activation (cancel); only its direct
// parent may.
func (m *Manager) Interrupt(ctx context.Context, parent rein.SessionKey, childID string) (bool, error) {
	m.mu.RLock()
	svc := m.svc
	m.mu.RUnlock()
	if svc == nil {
		return false, errors.New("subagent: the manager is not bound to a service")
	}
	info, err := m.lookup(ctx, svc, parent, childID)
	if err != nil {
		return false, err
	}
	res, err := svc.Interrupt(ctx, info.Key(), sessions.InterruptRequest{Mode: rein.StopCancel})
	if err != nil {
		return false, err
	}
	return res.Accepted, nil
}

// Child is one entry of List.
type Child struct {
	ID              string
	Label           string
	State           string // running or idle
	ParentSessionID string
	CurrentRunID    string
}

// List returns parent's direct children, oldest first.
func (m *Manager) List(ctx context.Context, parent rein.SessionKey) ([]Child, error) {
	m.mu.RLock()
	svc := m.svc
	m.mu.RUnlock()
	if svc == nil {
		return nil, errors.New("subagent: the manager is not bound to a service")
	}
	kids, err := svc.Children().List(ctx, parent)
	if err != nil {
		return nil, err
	}
	out := make([]Child, 0, len(kids))
	for _, k := range kids {
		info, err := svc.GetSession(ctx, k.Key())
		if err != nil {
			return nil, err
		}
		c := Child{ID: k.ID, State: "idle", ParentSessionID: parent.ID, CurrentRunID: info.CurrentRunID}
		if k.Subagent != nil {
			c.Label = k.Subagent.Label
		}
		if info.Busy {
			c.State = "running"
		}
		out = append(out, c)
	}
	return out, nil
}

func (m *Manager) logStarted(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, childID, taskID string) {
	ev := rein.NewEvent(rein.EventSubagentStarted, "", rein.SubagentStartedPayload{ChildID: childID, TaskID: taskID})
	if err := svc.Children().LogEvent(context.WithoutCancel(ctx), parent, ev); err != nil {
		m.log.Warn("log subagent.started", "parent", parent.String(), "child", childID, "err", err)
	}
}

// OnRunEnd settles a finished activation (pass it as
// sessions.Config.OnRunEnd): its parent's log gets subagent.completed and,
// for a continuable child, a notice delivered like a supplement (durable,
// delivered once: its id is derived from the run). A cancelled run also
// cancels the running activations of its own children, so a stop at the
// root reaches every descendant. The child's final flush is awaited as a
// best-effort barrier: its result is logged, never acted on.
func (m *Manager) OnRunEnd(ctx context.Context, end sessions.RunEnd) {
	m.mu.RLock()
	svc := m.svc
	m.mu.RUnlock()
	if svc == nil {
		return
	}
	if end.Status == rein.StatusCancelled {
		m.cascade(ctx, svc, end.Session)
	}
	if end.ParentKnown && end.Parent == "" {
		// A root session's run, as the service knew without a read (most
		// runs): nothing to settle.
		m.wakeForUnread(ctx, svc, end)
		return
	}
	info, err := svc.GetSession(ctx, end.Session)
	if err != nil {
		return
	}
	if info.ParentID == "" {
		m.wakeForUnread(ctx, svc, end)
		return
	}
	if _, err := svc.Children().Flush(ctx, end.Session); err != nil {
		m.log.Warn("final flush of a subagent activation", "child", end.Session.String(), "run", end.RunID, "err", err)
	}
	parent := rein.SessionKey{Owner: end.Session.Owner, ID: info.ParentID}
	ev := rein.NewEvent(rein.EventSubagentCompleted, "", rein.SubagentCompletedPayload{
		ChildID: end.Session.ID, TaskID: end.RunID, Status: end.Status, Reason: end.Reason, Output: end.Reply})
	if info.Subagent == nil || !info.Subagent.Continuable {
		// A one-shot child's result went to its caller; the parent's log
		// still shows it.
		if err := svc.Children().LogEvent(ctx, parent, ev); err != nil {
			m.log.Warn("log subagent.completed", "parent", parent.String(), "err", err)
		}
		return
	}
	label := info.Subagent.Label
	if label == "" {
		label = end.Session.ID
	}
	text := fmt.Sprintf("Subagent %q (%s) finished its task %s: %s/%s.", label, end.Session.ID, end.RunID, end.Status, end.Reason)
	if end.Reply != nil && *end.Reply != "" {
		text += " Its reply: " + *end.Reply
	}
	waiting, queued, err := svc.Children().Notice(ctx, parent, noticeID(end.RunID), text, ev)
	if err != nil {
		m.log.Error("deliver subagent notice", "parent", parent.String(), "child", end.Session.ID, "err", err)
		return
	}
	// Also when an earlier settlement delivered the notice: a crash
	// between that write and the wake is finished here (Reconcile). Not
	// for an activation that was cancelled — a stop of the parent's own
	// run cancels its children, and waking the parent for them would undo
	// that stop — and only for a root parent: waking a child would start
	// an activation its own parent never asked for. Nor when the parent's
	// run that was going as the notice came has been stopped since: the
	// notice's wake then belonged to that run's end, which started
	// nothing (wakeForUnread), and a repeat here must not either.
	if waiting && m.wake && end.Reason != rein.ReasonCancelled && info.Subagent.Depth <= 1 &&
		!m.stoppedSince(ctx, svc, parent, queued) {
		m.wakeParent(ctx, svc, parent, label, end)
	}
}

// stopped reports whether a run's end was a stop: a cancel, an interrupt,
// or its deadline (CANCELLED). A parent is not started again after one.
func stopped(status rein.RunStatus, reason rein.Reason) bool {
	return status == rein.StatusCancelled || reason == rein.ReasonCancelled || reason == rein.ReasonInterrupted
}

// stoppedSince reports whether a run of parent that was running at at
// (a notice's arrival) has ended since by a stop.
func (m *Manager) stoppedSince(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, at time.Time) bool {
	runs, err := svc.ListRuns(ctx, parent)
	if err != nil {
		m.log.Warn("list a parent's runs for a notice's wake", "parent", parent.String(), "err", err)
		return true // no wake rather than one that undoes a stop
	}
	for _, r := range runs {
		if r.Status.Terminal() && !r.StartedAt.IsZero() && !r.StartedAt.After(at) && !r.EndedAt.Before(at) && stopped(r.Status, r.Reason) {
			return true
		}
	}
	return false
}

// wakeParent starts a run of an idle parent for a notice waiting in its
// inbox (Options.WakeParents): its input says which child finished, and
// the notice reaches that run's first step like any. A busy parent is left
// alone — the notice reaches its next step anyway. The run's client id is
// derived from the activation, so a settlement repeated after a crash
// starts nothing twice, even when the first wake's run is still there.
func (m *Manager) wakeParent(ctx context.Context, svc *sessions.Service, parent rein.SessionKey, label string, end sessions.RunEnd) {
	text := fmt.Sprintf("Subagent %q (%s) finished its task %s; its note follows.", label, end.Session.ID, end.RunID)
	res, err := svc.SendMessage(ctx, parent, sessions.MessageRequest{Text: text, ClientID: "wake_" + strings.TrimPrefix(end.RunID, "run_")})
	switch {
	case errors.Is(err, rein.ErrSessionBusy):
		// The running step reads the notice, or the run's end finds it
		// unread and wakes the parent then (wakeForUnread).
		m.log.Debug("a parent busy at a subagent notice", "parent", parent.String(), "child", end.Session.ID, "task", end.RunID)
		return
	case rein.CodeOf(err) == rein.CodeUnavailable:
		// Shutting down or overloaded: the notice waits for the parent's
		// next run.
		m.log.Debug("wake a parent for a subagent notice", "parent", parent.String(), "err", err)
	case err != nil:
		m.log.Warn("wake a parent for a subagent notice", "parent", parent.String(), "child", end.Session.ID, "err", err)
	case !res.Repeat:
		m.log.Debug("woke a parent for a subagent notice", "parent", parent.String(), "child", end.Session.ID, "run", res.RunID)
	}
}

// wakeForUnread wakes a root session whose run has just ended with a
// subagent notice still unread (Options.WakeParents). Such a notice came
// while the parent was busy, so its own wake was refused, and the run then
// ended without another step to read it: the step limit, an error, or a
// notice that landed after the last step had read the inbox. The parent is
// idle now, so it is woken as it would have been had the notice come now:
// the same input and client id as the notice's own wake (one run, however
// many times either is tried), and the notice reaches its first step. It
// is read from the store, so the end of a run on one instance finds a
// notice delivered by another. Not after a stop of the run (a cancel, an
// interrupt, or its deadline, which ends it CANCELLED: starting the parent
// again would undo it), and not for the notice of a cancelled activation,
// as at settlement.
func (m *Manager) wakeForUnread(ctx context.Context, svc *sessions.Service, end sessions.RunEnd) {
	if !m.wake || stopped(end.Status, end.Reason) {
		return
	}
	notices, err := svc.Children().QueuedNotices(ctx, end.Session)
	if err != nil {
		m.log.Warn("read a parent's unread subagent notices", "parent", end.Session.String(), "err", err)
		return
	}
	if len(notices) == 0 {
		return
	}
	kids, err := svc.Children().List(ctx, end.Session)
	if err != nil {
		m.log.Warn("list a parent's children for an unread notice", "parent", end.Session.String(), "err", err)
		return
	}
	for _, n := range notices {
		task := noticeTask(n.ID)
		for _, k := range kids {
			r, err := svc.GetRun(ctx, k.Key(), task)
			if err != nil {
				continue
			}
			if r.Reason == rein.ReasonCancelled {
				break // its note waits for the parent's next message
			}
			label := k.ID
			if k.Subagent != nil && k.Subagent.Label != "" {
				label = k.Subagent.Label
			}
			// The woken run's first step reads every queued notice: one
			// wake is enough.
			m.wakeParent(ctx, svc, end.Session, label, sessions.RunEnd{Session: k.Key(), RunID: task})
			return
		}
	}
}

// Reconcile settles the activations that ended within the last day but
// whose settlement a crash may have skipped (their end was recorded, their
// parent's notice not yet): settlement is keyed by the activation, so an
// activation already settled gets nothing twice. Call it after the
// service's Start.
func (m *Manager) Reconcile(ctx context.Context) error {
	m.mu.RLock()
	svc := m.svc
	m.mu.RUnlock()
	if svc == nil {
		return errors.New("subagent: the manager is not bound to a service")
	}
	runs, err := svc.Children().RecentlyEnded(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		return err
	}
	for _, r := range runs {
		info, err := svc.GetSession(ctx, r.Key())
		if err != nil || info.ParentID == "" || info.Subagent == nil || !info.Subagent.Continuable {
			continue
		}
		var reply *string
		if r.Reason.HasReply() {
			end, err := waitEnd(ctx, svc, r.Key(), r.ID)
			if err == nil {
				reply = &end.reply
			}
		}
		m.OnRunEnd(ctx, sessions.RunEnd{Session: r.Key(), RunID: r.ID, Status: r.Status, Reason: r.Reason, Reply: reply})
	}
	return nil
}

// noticeID derives the notice's id from the activation, so a settlement
// repeated after a crash delivers nothing twice.
func noticeID(runID string) string { return "ntc_" + strings.TrimPrefix(runID, "run_") }

// noticeTask is the activation (run id) a notice id was derived from.
func noticeTask(noticeID string) string { return "run_" + strings.TrimPrefix(noticeID, "ntc_") }

// cascade cancels the running activations of key's children.
func (m *Manager) cascade(ctx context.Context, svc *sessions.Service, key rein.SessionKey) {
	kids, err := svc.Children().List(ctx, key)
	if err != nil {
		return
	}
	for _, k := range kids {
		if _, err := svc.Interrupt(ctx, k.Key(), sessions.InterruptRequest{Mode: rein.StopCancel}); err != nil {
			m.log.Warn("cancel a child with its parent", "child", k.ID, "err", err)
		}
	}
}

// ended is a run's end as its log shows it.
type ended struct {
	Status rein.RunStatus
	Reason rein.Reason
	reply  string
}

// waitEnd waits on the child's log for the run's session.run_completed and
// returns it with the run's final reply.
func waitEnd(ctx context.Context, svc *sessions.Service, key rein.SessionKey, runID string) (ended, error) {
	var out ended
	after := int64(0)
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return out, err
		}
		for _, e := range evs {
			after = e.Seq
			if e.RunID != runID {
				continue
			}
			switch e.Type {
			case rein.EventMessage:
				var p rein.MessagePayload
				if e.DecodePayload(&p) == nil {
					out.reply = p.Text
				}
			case rein.EventRunCompleted:
				var p rein.RunCompletedPayload
				if err := e.DecodePayload(&p); err != nil {
					return out, err
				}
				out.Status, out.Reason = p.Status, p.Reason
				return out, nil
			}
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			return out, err
		}
	}
}
