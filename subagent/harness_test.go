package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const script = "testdata/subagent.yaml"

// opener makes a fresh, empty store that the test's cleanup closes.
type opener func(t *testing.T) store.Store

func openMemory(t *testing.T) store.Store {
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	return st
}

func openSQLite(t *testing.T) store.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rein.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// onBackends runs a scenario on the memory store and on SQLite.
func onBackends(t *testing.T, scenario func(t *testing.T, open opener)) {
	t.Run("memory", func(t *testing.T) { scenario(t, openMemory) })
	t.Run("sqlite", func(t *testing.T) { scenario(t, openSQLite) })
}

// ------------------------------------------------------------ the tool

// holdTool blocks each call until the test releases the call's run, or
// the call's context ends: a run (a parent's or a child's activation) is
// inside its first step for exactly as long as the test wants.
type holdTool struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	calls map[string]int // per run
	// in is closed when a run's first call is inside the tool (logged
	// agent.tool_use comes before that).
	in map[string]chan struct{}
	// onStop, when set, is called as a held call sees its run stop.
	onStop func(tool.Call)
}

func newHold() *holdTool {
	return &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}, in: map[string]chan struct{}{}}
}

func (h *holdTool) Spec() tool.Spec {
	return tool.Spec{Name: "hold", Description: "blocks until the test releases the run", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (h *holdTool) gate(runID string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.gates[runID]
	if g == nil {
		g = make(chan struct{})
		h.gates[runID] = g
	}
	return g
}

// inside returns a channel closed once a call of the run is inside the
// tool. Called with h.mu held.
func (h *holdTool) inside(runID string) chan struct{} {
	ch := h.in[runID]
	if ch == nil {
		ch = make(chan struct{})
		h.in[runID] = ch
	}
	return ch
}

// entered waits until a call of the run is inside the tool: a stop of the
// run now reaches the call (onStop), not a step that has yet to begin it.
func (h *holdTool) entered(t *testing.T, runID string) {
	t.Helper()
	h.mu.Lock()
	ch := h.inside(runID)
	h.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s never entered the hold tool", runID)
	}
}

func (h *holdTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	h.mu.Lock()
	h.calls[c.RunID]++
	if h.calls[c.RunID] == 1 {
		close(h.inside(c.RunID))
	}
	h.mu.Unlock()
	select {
	case <-h.gate(c.RunID):
		return tool.Result{Output: "released"}, nil
	case <-ctx.Done():
		h.mu.Lock()
		onStop := h.onStop
		h.mu.Unlock()
		if onStop != nil {
			onStop(c)
		}
		return tool.Result{}, context.Cause(ctx)
	}
}

func (h *holdTool) release(runID string) {
	g := h.gate(runID)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

// ------------------------------------------------------------ the world

// world is one service with the subagent tools and settlement over a
// store, as rein serve wires them.
type world struct {
	t    *testing.T
	st   store.Store
	svc  *sessions.Service
	m    *subagent.Manager
	hold *holdTool
}

// newWorld starts a service over st. The hold tool is shared by every
// world made with the same hold (nil: a fresh one).
func newWorld(t *testing.T, st store.Store, opts subagent.Options, hold *holdTool, mod ...func(*sessions.Config)) *world {
	t.Helper()
	if hold == nil {
		hold = newHold()
	}
	svc, m, err := reintest.ServiceWithSubagents(script, st, func(c *sessions.Config) {
		c.LeaseTTL = 300 * time.Millisecond
		for _, f := range mod {
			f(c)
		}
	}, opts, hold)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// As rein serve does: settlements a crash skipped are caught up.
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &world{t: t, st: st, svc: svc, m: m, hold: hold}
}

func (w *world) root(owner string) rein.SessionKey {
	w.t.Helper()
	s, err := w.svc.CreateSession(context.Background(), owner, sessions.CreateSessionRequest{})
	if err != nil {
		w.t.Fatal(err)
	}
	return s.Key()
}

func (w *world) send(key rein.SessionKey, text string) sessions.MessageResult {
	w.t.Helper()
	res, err := w.svc.SendMessage(context.Background(), key, sessions.MessageRequest{Text: text})
	if err != nil {
		w.t.Fatalf("send %q to %s: %v", text, key, err)
	}
	return res
}

func (w *world) startChild(parent rein.SessionKey, spec subagent.ContinuableSpec) subagent.Started {
	w.t.Helper()
	s, err := w.m.StartContinuable(context.Background(), parent, spec)
	if err != nil {
		w.t.Fatalf("StartContinuable %q: %v", spec.Prompt, err)
	}
	return s
}

func (w *world) followup(parent rein.SessionKey, child, content string) subagent.FollowupResult {
	w.t.Helper()
	r, err := w.m.Followup(context.Background(), parent, child, content, subagent.FollowupOptions{})
	if err != nil {
		w.t.Fatalf("Followup %q to %s: %v", content, child, err)
	}
	return r
}

// resumesWithTranscript follows up the idle child of parent after a
// restart: the followup starts a new activation, which completes with a
// reply that saw the child's one earlier turn, and the parent is notified.
func (w *world) resumesWithTranscript(parent rein.SessionKey, childID, content string) {
	w.t.Helper()
	r := w.followup(parent, childID, content)
	if r.Route != subagent.RouteStarted {
		w.t.Fatalf("Followup after the restart = %+v", r)
	}
	child := key(parent.Owner, childID)
	if p := w.completed(child, r.TaskID); p.Reason != rein.ReasonStop {
		w.t.Fatalf("%+v", p)
	}
	if got, want := w.reply(child, r.TaskID), "echo "+content+" hints=[] turns=2"; got != want {
		w.t.Fatalf("reply %q, want %q", got, want)
	}
	w.settled(parent, r.TaskID)
}

// waitEvent waits (on the log, never on time) for an event of key's log
// matching pred, and returns it.
func (w *world) waitEvent(key rein.SessionKey, what string, pred func(rein.Event) bool) rein.Event {
	w.t.Helper()
	e, err := waitEventIn(w.svc, key, 10*time.Second, pred)
	if err != nil {
		w.t.Fatalf("%s: waiting for %s: %v", key, what, err)
	}
	return e
}

func waitEventIn(svc *sessions.Service, key rein.SessionKey, d time.Duration, pred func(rein.Event) bool) (rein.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return waitEventCtx(ctx, svc, key, pred)
}

// waitEventCtx waits for an event of key's log matching pred until ctx
// ends.
func waitEventCtx(ctx context.Context, svc *sessions.Service, key rein.SessionKey, pred func(rein.Event) bool) (rein.Event, error) {
	after := int64(0)
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return rein.Event{}, err
		}
		for _, e := range evs {
			if pred(e) {
				return e, nil
			}
			after = e.Seq
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			return rein.Event{}, err
		}
	}
}

func isType(typ rein.EventType, runID string) func(rein.Event) bool {
	return func(e rein.Event) bool { return e.Type == typ && (runID == "" || e.RunID == runID) }
}

// completed waits for the run's session.run_completed.
func (w *world) completed(key rein.SessionKey, runID string) rein.RunCompletedPayload {
	w.t.Helper()
	e := w.waitEvent(key, "the end of "+runID, isType(rein.EventRunCompleted, runID))
	var p rein.RunCompletedPayload
	if err := e.DecodePayload(&p); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// blocked waits until the run has called the hold tool (so its first
// model request is made: what arrives now reaches its next step).
func (w *world) blocked(key rein.SessionKey, runID string) {
	w.t.Helper()
	w.waitEvent(key, runID+" calling hold", func(e rein.Event) bool {
		if e.Type != rein.EventToolUse || e.RunID != runID {
			return false
		}
		var p rein.ToolUsePayload
		return e.DecodePayload(&p) == nil && p.Name == "hold"
	})
}

// settled waits for the subagent.completed of the task in the parent's
// log.
func (w *world) settled(parent rein.SessionKey, taskID string) rein.SubagentCompletedPayload {
	w.t.Helper()
	var p rein.SubagentCompletedPayload
	w.waitEvent(parent, "subagent.completed of "+taskID, func(e rein.Event) bool {
		if e.Type != rein.EventSubagentCompleted {
			return false
		}
		p = rein.SubagentCompletedPayload{}
		return e.DecodePayload(&p) == nil && p.TaskID == taskID
	})
	return p
}

// started waits for the subagent.started of a child in the parent's log
// (the first one when child is "").
func (w *world) started(parent rein.SessionKey, child string) rein.SubagentStartedPayload {
	w.t.Helper()
	var p rein.SubagentStartedPayload
	w.waitEvent(parent, "subagent.started", func(e rein.Event) bool {
		if e.Type != rein.EventSubagentStarted {
			return false
		}
		p = rein.SubagentStartedPayload{}
		return e.DecodePayload(&p) == nil && (child == "" || p.ChildID == child)
	})
	return p
}

func (w *world) all(key rein.SessionKey) []rein.Event {
	w.t.Helper()
	evs, _, err := w.svc.ReadEvents(context.Background(), key, 0, 1000)
	if err != nil {
		w.t.Fatal(err)
	}
	return evs
}

func (w *world) lastSeq(key rein.SessionKey) int64 {
	w.t.Helper()
	n, err := w.st.LastSeq(context.Background(), key)
	if err != nil {
		w.t.Fatal(err)
	}
	return n
}

// reply is the run's final reply (its agent.message), "" when none.
func (w *world) reply(key rein.SessionKey, runID string) string {
	w.t.Helper()
	out := ""
	for _, e := range w.all(key) {
		if e.Type == rein.EventMessage && e.RunID == runID {
			var p rein.MessagePayload
			_ = e.DecodePayload(&p)
			out = p.Text
		}
	}
	return out
}

func (w *world) runs(key rein.SessionKey) []*store.RunRecord {
	w.t.Helper()
	rs, err := w.st.ListRuns(context.Background(), key)
	if err != nil {
		w.t.Fatal(err)
	}
	return rs
}

// ofType returns the payloads of the log's events of typ, decoded into T.
func ofType[T any](t *testing.T, evs []rein.Event, typ rein.EventType) []T {
	t.Helper()
	var out []T
	for _, e := range evs {
		if e.Type != typ {
			continue
		}
		var p T
		if err := e.DecodePayload(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// code is the subagent error code of err ("" when err is not one).
func code(err error) string {
	var se *subagent.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}

func key(owner, id string) rein.SessionKey { return rein.SessionKey{Owner: owner, ID: id} }

func dump(t *testing.T, w *world, keys ...rein.SessionKey) {
	t.Helper()
	if !t.Failed() {
		return
	}
	for _, k := range keys {
		for _, e := range w.all(k) {
			t.Logf("%s %3d %-28s run=%s %s", k.ID, e.Seq, e.Type, e.RunID, e.Payload)
		}
	}
}
