package sessions_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/tool"
)

// TestPropertyRunLifecycle drives random interleavings of user actions over
// two or three sessions of one owner — messages with every when_busy, stops
// by run id (current, queued, ended, unknown, another session's) and
// without, supplements, runs let finish, bursts of these without waiting in
// between, and crashes of the instance followed by a restart on the same
// store — and checks the run lifecycle's promises (docs/api.md–§4) against the
// store's run records and the event log after every action:
//
//  1. at most one RUNNING run per session, and at most one run between its
//     session.run_started and session.run_completed at any point of the log;
//  2. runs start in admission order, except that a run admitted with
//     when_busy interrupt/rollback while the session was busy starts ahead
//     of the runs already queued (of several, the newest first); a run
//     starts at once only when the session is free;
//  3. a stop with run id X changes no run but X (a stale, unknown or other
//     session's id: accepted false, nothing changes), and a stop without
//     run id touches only the running run;
//  4. the run an interrupt/rollback message starts is never the one it
//     stops: every run ends only for a reason the test gave it (released,
//     stopped, targeted by a later message, or lost in a crash), with that
//     reason's status;
//  5. each run ends exactly once: one session.run_completed, its last event
//     (user.interrupt requests naming it aside), with no tool call left
//     without a result; a run stopped by rollback ends CANCELLED with
//     rolled_back true, and no other run is rolled back.
//
// After each action the test waits, on the event logs (never on time),
// until every run given a reason to end has ended and each session is
// either free or held by one run parked in its tool call; a burst's races
// are resolved from the log (the run a message stopped is the one running
// at its user.message).
//
// By default the memory store gets 200 generated sequences and SQLite 50,
// each of at most -property.actions actions (16): about 15 s with -race on
// two cores. A longer exploration:
//
//	go test -race -run Property ./sessions/ -rapid.checks=2000 -property.actions=40
//
// A failure prints the seed (-rapid.seed=N) and the shrunk action sequence,
// and rapid saves it under testdata/rapid/ (replayed first by later runs;
// -rapid.nofailfile keeps it from being written). Races decided by timing
// may need a few runs of the seed to show again.
func TestPropertyRunLifecycle(t *testing.T) {
	t.Parallel()
	// The backends in turn: defaultRapidChecks sets rapid's process-wide
	// -rapid.checks flag for each.
	t.Run("memory", func(t *testing.T) {
		defaultRapidChecks(t, 200)
		rapid.Check(t, func(rt *rapid.T) {
			clk := &jumpClock{}
			st := memory.New(memory.WithClock(clk.now))
			rt.Cleanup(func() { st.Close() })
			checkLifecycle(rt, st, clk)
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		defaultRapidChecks(t, 50)
		rapid.Check(t, func(rt *rapid.T) {
			clk := &jumpClock{}
			dir, err := os.MkdirTemp("", "rein-property-")
			if err != nil {
				rt.Fatal(err)
			}
			rt.Cleanup(func() { os.RemoveAll(dir) })
			st, err := sqlite.Open(context.Background(), filepath.Join(dir, "rein.db"), sqlite.Options{Clock: clk.now})
			if err != nil {
				rt.Fatal(err)
			}
			rt.Cleanup(func() { st.Close() })
			checkLifecycle(rt, st, clk)
		})
	})
}

var propertyActions = flag.Int("property.actions", 16, "sessions property test: most actions in one generated sequence")

const (
	// propertyTTL is the turn lease of the services under test: long
	// enough that a loaded machine (-race, 2 cores) never misses a renewal
	// (a lost lease would resume a run that nothing ended). A restart does
	// not wait for it: the stores' clock jumps past it (jumpClock).
	propertyTTL = 2 * time.Second
	// settleTimeout bounds each wait for quiescence; it is only reached
	// when the system never gets there (a failure).
	settleTimeout = 20 * time.Second
)

var rapidChecksFlag struct {
	once sync.Once
	set  bool // given on the command line or in the environment
	// held is held by a test from its defaultRapidChecks to its end:
	// rapid reads its -rapid.checks flag, a process-wide value, in every
	// Check, so two property tests running in parallel take turns rather
	// than set it under each other's reads.
	held sync.Mutex
}

// defaultRapidChecks makes rapid run n checks per Check for the rest of t,
// unless the command line or RAPID_CHECKS chose a number. The tests that
// call it run one at a time (rapidChecksFlag.held) until t ends.
func defaultRapidChecks(t *testing.T, n int) {
	rapidChecksFlag.held.Lock()
	t.Cleanup(rapidChecksFlag.held.Unlock)
	rapidChecksFlag.once.Do(func() {
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "rapid.checks" {
				rapidChecksFlag.set = true
			}
		})
		if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
			rapidChecksFlag.set = true
		}
	})
	if rapidChecksFlag.set {
		return
	}
	f := flag.Lookup("rapid.checks")
	if f == nil {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// jumpClock is the stores' clock: the wall clock plus an offset that a
// restart moves forward, so that the lost instance's leases have expired
// when the new instance starts, without the test waiting a whole TTL.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *jumpClock) jump(d time.Duration) { c.offset.Add(int64(d)) }

// ------------------------------------------------------------ the tool

// holdTool blocks each call until the test releases the call's run, or the
// call's context ends: a run holds its session's turn for exactly as long as
// the test wants.
type holdTool struct {
	mu     sync.Mutex
	gates  map[string]chan struct{}
	calls  map[string]int // per tool_use_id: a call is never made twice
	closed bool           // every call, now and later, returns at once
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
		if h.closed {
			close(g)
		}
		h.gates[runID] = g
	}
	return g
}

// releaseAll lets every call, held or to come, return.
func (h *holdTool) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, g := range h.gates {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

func (h *holdTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	h.mu.Lock()
	h.calls[c.ID]++
	h.mu.Unlock()
	select {
	case <-h.gate(c.RunID):
		return tool.Result{Output: "released"}, nil
	case <-ctx.Done():
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

// ------------------------------------------------------------ the model

// cause is a reason the test gave a run to end.
type cause string

const (
	causeRelease   cause = "released"
	causeLost      cause = "lost in a crash"
	causeCancel    cause = "stop cancel"
	causeInterrupt cause = "stop interrupt"
	causeMsgIntr   cause = "when_busy=interrupt"
	causeRollback  cause = "when_busy=rollback"
)

// outcome is the status and reason a run ended for c has.
func (c cause) outcome() (rein.RunStatus, rein.Reason) {
	switch c {
	case causeRelease, causeLost:
		// A resumed run's held call is answered in doubt; the next step
		// ends it.
		return rein.StatusCompleted, rein.ReasonStop
	case causeCancel, causeRollback:
		return rein.StatusCancelled, rein.ReasonCancelled
	default:
		return rein.StatusCompleted, rein.ReasonInterrupted
	}
}

func stopCause(mode rein.StopMode) cause {
	if mode == rein.StopInterrupt {
		return causeInterrupt
	}
	return causeCancel
}

// mrun is the test's knowledge of one run a client was answered for.
type mrun struct {
	id   string
	name string // m1, m2, … in admission order, for the trace
	sess int
	wb   rein.WhenBusy

	// From the log.
	admitSeq int64
	queued   bool   // admitted busy: session.run_queued
	front    bool   // queued by interrupt/rollback: ahead of the queue
	target   string // the run its admission stopped
	startSeq int64
	end      *rein.RunCompletedPayload
	inDoubt  int

	// causes are the reasons the test (or the log, for when_busy targets)
	// gave it to end; a run with none must not end.
	causes []cause
	// rollback: a when_busy=rollback message stopped it.
	rollback bool
}

// msess is one session as its log tells it, read incrementally.
type msess struct {
	i          int
	key        rein.SessionKey
	events     []rein.Event
	open       string          // the run between run_started and run_completed
	queue      map[string]bool // admitted, queued, not started, not ended
	unanswered map[string]string
	supLogged  map[string]int
	supUsed    map[string]int
}

type world struct {
	t    *rapid.T
	ctx  context.Context
	base store.Store
	clk  *jumpClock
	hold *holdTool

	faulty   *storetest.Faulty
	svc      *sessions.Service
	instance int

	sess []*msess
	runs map[string]*mrun
	nmsg int
	nsup int
	nunk int
}

func checkLifecycle(t *rapid.T, base store.Store, clk *jumpClock) {
	w := &world{t: t, ctx: context.Background(), base: base, clk: clk, hold: &holdTool{gates: map[string]chan struct{}{}, calls: map[string]int{}}, runs: map[string]*mrun{}}
	w.start()
	t.Cleanup(func() {
		// After a failure runs may be mid-transition; Service.Close can
		// then miss a run the pump starts while it closes, and wait for it
		// forever. Letting every held call return ends such a run by
		// itself, so that the failure is reported rather than hung.
		w.hold.releaseAll()
		w.svc.Close()
	})
	n := rapid.IntRange(2, 3).Draw(t, "sessions")
	for i := range n {
		s := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_p%d", i), Metadata: json.RawMessage("{}"), CreatedAt: time.Now()}
		if err := base.CreateSession(w.ctx, s); err != nil {
			t.Fatal(err)
		}
		w.sess = append(w.sess, &msess{i: i, key: s.Key(), queue: map[string]bool{}, unanswered: map[string]string{},
			supLogged: map[string]int{}, supUsed: map[string]int{}})
	}
	steps := rapid.IntRange(1, max(1, *propertyActions)).Draw(t, "actions")
	for range steps {
		w.step()
	}
	// Every run still held or queued runs to its end, in order.
	for range 4 * len(w.runs) {
		snap := w.snapshot()
		busy := false
		for i, cur := range snap.current {
			if cur != "" {
				busy = true
				w.logf("finally: release %s", w.name(cur))
				w.runs[cur].causes = append(w.runs[cur].causes, causeRelease)
				w.hold.release(cur)
			} else if len(snap.queued[i]) > 0 {
				t.Fatalf("session %d has queued runs and none running", i)
			}
		}
		if !busy {
			break
		}
		w.settle()
	}
	for _, r := range w.runs {
		if r.end == nil {
			t.Fatalf("run %s never ended", r.name)
		}
	}
	w.hold.mu.Lock()
	for id, n := range w.hold.calls {
		if n > 1 {
			t.Fatalf("tool call %s made %d times", id, n)
		}
	}
	w.hold.mu.Unlock()
	for _, s := range w.sess {
		h, err := base.LoadHistory(w.ctx, s.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := rein.ValidateTranscript(h); err != nil {
			w.dump()
			t.Fatalf("session %d transcript: %v", s.i, err)
		}
	}
}

func (w *world) logf(format string, args ...any) {
	w.t.Helper()
	w.t.Logf(format, args...)
}

func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.dump()
	w.t.Fatalf(format, args...)
}

func (w *world) name(id string) string {
	if id == "" {
		return "-"
	}
	if r := w.runs[id]; r != nil {
		return r.name
	}
	return id
}

// start starts a service instance over the base store, behind a Faulty
// wrapper so that a crash can cut it off.
func (w *world) start() {
	w.instance++
	w.faulty = storetest.NewFaulty(w.base)
	svc, err := reintest.ServiceWithTools("testdata/property.yaml", w.faulty, func(c *sessions.Config) {
		c.LeaseTTL, c.Instance = propertyTTL, fmt.Sprintf("instance-%d", w.instance)
	}, w.hold)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := svc.Start(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.svc = svc
}

// snapshot is the store's runs, read at a quiescent point.
type snapshot struct {
	status  map[string]rein.RunStatus
	current []string   // per session: the RUNNING run, or ""
	queued  [][]string // per session
	ended   [][]string // per session
}

func (w *world) snapshot() snapshot {
	sn := snapshot{status: map[string]rein.RunStatus{}}
	for _, s := range w.sess {
		recs, err := w.base.ListRuns(w.ctx, s.key)
		if err != nil {
			w.t.Fatal(err)
		}
		cur := ""
		var q, e []string
		for _, r := range recs {
			sn.status[r.ID] = r.Status
			switch {
			case r.Status == rein.StatusRunning:
				cur = r.ID
			case r.Status == rein.StatusQueued:
				q = append(q, r.ID)
			default:
				e = append(e, r.ID)
			}
		}
		sort.Strings(q)
		sort.Strings(e)
		sn.current = append(sn.current, cur)
		sn.queued = append(sn.queued, q)
		sn.ended = append(sn.ended, e)
	}
	return sn
}

// cursors is how many events each session's log had.
func (w *world) cursors() []int {
	out := make([]int, len(w.sess))
	for i, s := range w.sess {
		out[i] = len(s.events)
	}
	return out
}

// ------------------------------------------------------------ actions

var whenBusies = []rein.WhenBusy{rein.WhenBusyEnqueue, rein.WhenBusyReject, rein.WhenBusyInterrupt, rein.WhenBusyRollback}
var stopModes = []rein.StopMode{rein.StopCancel, rein.StopInterrupt}

func (w *world) step() {
	t := w.t
	s := w.sess[rapid.IntRange(0, len(w.sess)-1).Draw(t, "session")]
	snap := w.snapshot()
	cur := snap.current[s.i]
	// Weighted by repetition: messages build the queues that stops,
	// releases and crashes then act on.
	kinds := []string{"submit", "submit", "submit", "submit", "stop", "stop", "stop", "burst", "burst", "supplement", "restart"}
	if cur != "" {
		kinds = append(kinds, "release", "release")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "action") {
	case "submit":
		w.submit(s, snap, rapid.SampledFrom(whenBusies).Draw(t, "when_busy"))
	case "stop":
		w.stop(s, snap)
	case "release":
		w.logf("s%d: release %s", s.i, w.name(cur))
		w.runs[cur].causes = append(w.runs[cur].causes, causeRelease)
		w.hold.release(cur)
		w.settle()
	case "supplement":
		w.nsup++
		text := fmt.Sprintf("note %d", w.nsup)
		w.logf("s%d: supplement %q", s.i, text)
		res, err := w.svc.Supplement(w.ctx, s.key, sessions.SupplementRequest{Text: text})
		if err != nil || !res.Created || res.Status != store.SupplementQueued {
			w.fatalf("supplement: %+v %v", res, err)
		}
		w.settle()
	case "burst":
		w.burst(s, snap)
	case "restart":
		w.restart(snap)
	}
}

// admitted records a run a client was answered for.
func (w *world) admitted(s *msess, runID string, wb rein.WhenBusy, n int) *mrun {
	if w.runs[runID] != nil {
		w.fatalf("run id %s answered twice", runID)
	}
	r := &mrun{id: runID, name: fmt.Sprintf("m%d", n), sess: s.i, wb: wb}
	w.runs[runID] = r
	return r
}

func (w *world) send(s *msess, wb rein.WhenBusy) (sessions.MessageResult, int, error) {
	w.nmsg++
	res, err := w.svc.SendMessage(w.ctx, s.key, sessions.MessageRequest{Text: fmt.Sprintf("hold m%d", w.nmsg), WhenBusy: wb})
	return res, w.nmsg, err
}

// submit sends one message at a quiescent point, where its effect is
// exactly predictable.
func (w *world) submit(s *msess, snap snapshot, wb rein.WhenBusy) {
	cur := snap.current[s.i]
	busy := cur != "" || len(snap.queued[s.i]) > 0
	if busy && cur == "" {
		w.fatalf("session %d quiescent with queued runs and none running", s.i)
	}
	res, n, err := w.send(s, wb)
	w.logf("s%d: message m%d when_busy=%s (busy with %s) → %s %s %v", s.i, n, wb, w.name(cur), w.name(res.RunID), res.Status, err)
	switch {
	case !busy:
		if err != nil || res.Status != rein.StatusRunning {
			w.fatalf("message on a free session: %+v %v (want RUNNING)", res, err)
		}
	case wb == rein.WhenBusyReject:
		var re *rein.Error
		if !errors.As(err, &re) || re.Code != rein.CodeSessionBusy || re.RunID != cur {
			w.fatalf("reject on a busy session: %+v %v (want session_busy with run %s)", res, err, cur)
		}
		w.settle()
		return
	default:
		if err != nil || res.Status != rein.StatusQueued {
			w.fatalf("%s on a busy session: %+v %v (want QUEUED)", wb, res, err)
		}
	}
	r := w.admitted(s, res.RunID, wb, n)
	w.settle()
	if r.front && r.target != cur {
		w.fatalf("%s: %s stopped %q, not the run holding the turn %s", r.name, wb, w.name(r.target), w.name(cur))
	}
	if r.end != nil {
		w.fatalf("%s (when_busy=%s) ended at once: %+v", r.name, wb, *r.end)
	}
}

// stop sends one user.interrupt at a quiescent point and checks that it
// changed only its run (invariant 3).
func (w *world) stop(s *msess, snap snapshot) {
	t := w.t
	cur := snap.current[s.i]
	kinds := []string{"none", "unknown"}
	if cur != "" {
		kinds = append(kinds, "current", "current")
	}
	if len(snap.queued[s.i]) > 0 {
		kinds = append(kinds, "queued", "queued")
	}
	if len(snap.ended[s.i]) > 0 {
		kinds = append(kinds, "ended")
	}
	var others []string
	for id, r := range w.runs {
		if r.sess != s.i {
			others = append(others, id)
		}
	}
	sort.Strings(others)
	if len(others) > 0 {
		kinds = append(kinds, "other-session")
	}
	kind := rapid.SampledFrom(kinds).Draw(t, "stop")
	mode := rapid.SampledFrom(stopModes).Draw(t, "mode")
	var runID *string
	target, accepted := "", false
	var c cause
	switch kind {
	case "none":
		if cur != "" {
			target, accepted, c = cur, true, stopCause(mode)
		}
	case "unknown":
		w.nunk++
		target = fmt.Sprintf("run_unknown%d", w.nunk)
	case "current":
		target, accepted, c = cur, true, stopCause(mode)
	case "queued":
		// Interrupt on a queued run is a cancel.
		target, accepted, c = rapid.SampledFrom(snap.queued[s.i]).Draw(t, "queued run"), true, causeCancel
	case "ended":
		target = rapid.SampledFrom(snap.ended[s.i]).Draw(t, "ended run")
	case "other-session":
		target = rapid.SampledFrom(others).Draw(t, "other session's run")
	}
	if kind != "none" {
		runID = &target
	}
	if accepted {
		w.runs[target].causes = append(w.runs[target].causes, c)
	}
	before := w.cursors()
	res, err := w.svc.Interrupt(w.ctx, s.key, sessions.InterruptRequest{RunID: runID, Mode: mode})
	w.logf("s%d: stop %s %s mode=%s → accepted=%v run=%s %v", s.i, kind, w.name(target), mode, res.Accepted, w.name(res.RunID), err)
	if err != nil || res.Accepted != accepted || res.RunID != target {
		w.fatalf("stop %s: %+v %v (want accepted=%v run %q)", kind, res, err, accepted, target)
	}
	w.settle()

	// The log since the request: one user.interrupt telling the truth, the
	// end of the target only, and at most the start of the next run when
	// the target was running.
	successor := ""
	interrupts := 0
	for _, q := range w.sess {
		for _, e := range q.events[before[q.i]:] {
			switch e.Type {
			case rein.EventUserInterrupt:
				var p rein.UserInterruptPayload
				_ = e.DecodePayload(&p)
				got := ""
				if p.RunID != nil {
					got = *p.RunID
				}
				if q != s || got != target || e.RunID != target || p.Accepted != accepted || p.Mode != string(mode) {
					w.fatalf("stop %s %s: logged %s in session %d: %s", kind, target, e.Type, q.i, e.Payload)
				}
				interrupts++
			case rein.EventRunCompleted:
				if !accepted || e.RunID != target {
					w.fatalf("stop of %q ended %s", w.name(target), w.name(e.RunID))
				}
			case rein.EventRunStarted:
				if q != s || !accepted || target != cur || successor != "" {
					w.fatalf("stop of %q started %s", w.name(target), w.name(e.RunID))
				}
				successor = e.RunID
			}
		}
	}
	if interrupts != 1 {
		w.fatalf("stop %s: %d user.interrupt events", kind, interrupts)
	}
	after := w.snapshot()
	for id, st := range snap.status {
		if id == target || id == successor {
			continue
		}
		if after.status[id] != st {
			w.fatalf("stop of %q changed %s from %s to %s", w.name(target), w.name(id), st, after.status[id])
		}
	}
	if successor != "" && snap.status[successor] != rein.StatusQueued {
		w.fatalf("after the stop of %s, %s started from %s", w.name(target), w.name(successor), snap.status[successor])
	}
}

// burst does two or three things to one session back to back, without
// waiting in between: messages race the stops they cause, and stops race
// the runs' ends. What happens in between is decided by timing, so only
// what holds whatever the timing is checked: the log-derived invariants,
// and that every run ends for one of the reasons it was given.
func (w *world) burst(s *msess, snap snapshot) {
	t := w.t
	cur := snap.current[s.i]
	k := rapid.IntRange(2, 3).Draw(t, "burst size")
	for range k {
		what := rapid.SampledFrom([]string{"message", "stop current", "stop session", "release"}).Draw(t, "burst action")
		switch what {
		case "message":
			wb := rapid.SampledFrom(whenBusies).Draw(t, "when_busy")
			res, n, err := w.send(s, wb)
			w.logf("s%d: burst: message m%d when_busy=%s → %s %s %v", s.i, n, wb, w.name(res.RunID), res.Status, err)
			if err != nil {
				var re *rein.Error
				if wb != rein.WhenBusyReject || !errors.As(err, &re) || re.Code != rein.CodeSessionBusy {
					w.fatalf("message: %v", err)
				}
				continue
			}
			if res.Status != rein.StatusRunning && (res.Status != rein.StatusQueued || wb == rein.WhenBusyReject) {
				w.fatalf("message when_busy=%s: status %s", wb, res.Status)
			}
			w.admitted(s, res.RunID, wb, n)
		case "stop current", "stop session":
			mode := rapid.SampledFrom(stopModes).Draw(t, "mode")
			var runID *string
			free := false // the run is certainly not ending: the stop must take
			if what == "stop current" {
				if cur == "" {
					continue
				}
				runID = &cur
				w.drain()
				r := w.runs[cur]
				free = len(r.causes) == 0 && r.end == nil
			}
			res, err := w.svc.Interrupt(w.ctx, s.key, sessions.InterruptRequest{RunID: runID, Mode: mode})
			w.logf("s%d: burst: %s mode=%s → accepted=%v run=%s %v", s.i, what, mode, res.Accepted, w.name(res.RunID), err)
			if err != nil || (free && !res.Accepted) {
				w.fatalf("%s: %+v %v", what, res, err)
			}
			if res.Accepted {
				r := w.runs[res.RunID]
				if r == nil || r.sess != s.i {
					w.fatalf("%s stopped %q", what, res.RunID)
				}
				r.causes = append(r.causes, stopCause(mode))
			}
		case "release":
			if cur == "" {
				continue
			}
			w.logf("s%d: burst: release %s", s.i, w.name(cur))
			w.runs[cur].causes = append(w.runs[cur].causes, causeRelease)
			w.hold.release(cur)
		}
		w.drain()
	}
	w.settle()
}

// restart crashes the instance (no write of it reaches the store from the
// kill on) and starts a new one on the same store: the lost runs are
// resumed, their held calls answered in doubt, and they end with the next
// step; queued runs start in order.
func (w *world) restart(snap snapshot) {
	var lost []*mrun
	for _, id := range snap.current {
		if id != "" {
			r := w.runs[id]
			r.causes = append(r.causes, causeLost)
			lost = append(lost, r)
		}
	}
	w.logf("restart (running: %v)", names(lost))
	w.faulty.Kill()
	w.svc.Close()
	// The crashed instance's leases expire: time passes by the stores'
	// clock, which is the one leases are judged by (docs/api.md).
	w.clk.jump(propertyTTL + time.Millisecond)
	w.start()
	w.settle()
	for _, r := range lost {
		if r.inDoubt != 1 {
			w.fatalf("resumed %s has %d in-doubt results, want 1", r.name, r.inDoubt)
		}
	}
}

func names(rs []*mrun) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

// ------------------------------------------------------------ the log

// drain reads and checks every session's new events.
func (w *world) drain() {
	for _, s := range w.sess {
		for {
			evs, _, err := w.base.ReadEvents(w.ctx, s.key, int64(len(s.events)), 1000)
			if err != nil {
				w.t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				w.process(s, e)
			}
		}
	}
}

// next is the run the session's order says starts next: the newest of the
// runs that jumped the queue, else the oldest queued.
func (w *world) next(s *msess) *mrun {
	var best *mrun
	for id := range s.queue {
		r := w.runs[id]
		switch {
		case best == nil:
			best = r
		case r.front != best.front:
			if r.front {
				best = r
			}
		case r.front && r.admitSeq > best.admitSeq, !r.front && r.admitSeq < best.admitSeq:
			best = r
		}
	}
	return best
}

// process checks one event against the log so far (invariants 1, 2, 5).
func (w *world) process(s *msess, e rein.Event) {
	w.t.Helper()
	var prev rein.Event
	if n := len(s.events); n > 0 {
		prev = s.events[n-1]
	}
	if e.Seq != int64(len(s.events)+1) {
		w.fatalf("session %d: event seq %d after %d", s.i, e.Seq, len(s.events))
	}
	s.events = append(s.events, e)
	var r *mrun
	if e.RunID != "" && e.Type != rein.EventUserInterrupt {
		r = w.runs[e.RunID]
		if r == nil || r.sess != s.i {
			w.fatalf("session %d: %s of run %s, which no client of this session was answered for", s.i, e.Type, e.RunID)
		}
		if r.end != nil {
			w.fatalf("%s: %s (seq %d) after its session.run_completed", r.name, e.Type, e.Seq)
		}
	}
	switch e.Type {
	case rein.EventUserMessage:
		if r.admitSeq != 0 {
			w.fatalf("%s admitted twice", r.name)
		}
		r.admitSeq = e.Seq
	case rein.EventRunQueued:
		if prev.Type != rein.EventUserMessage || prev.RunID != r.id {
			w.fatalf("%s: session.run_queued not with its user.message", r.name)
		}
		if s.open == "" && len(s.queue) == 0 {
			w.fatalf("%s queued although session %d was free", r.name, s.i)
		}
		r.queued = true
		r.front = r.wb == rein.WhenBusyInterrupt || r.wb == rein.WhenBusyRollback
		var p rein.RunQueuedPayload
		_ = e.DecodePayload(&p)
		if want := len(s.queue) + 1; (r.front && p.Position != 1) || (!r.front && p.Position != want) {
			w.fatalf("%s (when_busy=%s) queued at position %d with %d queued", r.name, r.wb, p.Position, len(s.queue))
		}
		if r.front && s.open != "" {
			tr := w.runs[s.open]
			r.target = tr.id
			if r.wb == rein.WhenBusyRollback {
				tr.causes = append(tr.causes, causeRollback)
				tr.rollback = true
			} else {
				tr.causes = append(tr.causes, causeMsgIntr)
			}
		}
		s.queue[r.id] = true
	case rein.EventRunStarted:
		if r.startSeq != 0 {
			w.fatalf("%s started twice", r.name)
		}
		if s.open != "" {
			w.fatalf("%s started while %s runs (invariant 1)", r.name, w.name(s.open))
		}
		if r.queued {
			if !s.queue[r.id] {
				w.fatalf("%s started but is not queued", r.name)
			}
			if nx := w.next(s); nx != r {
				w.fatalf("%s started before %s (invariant 2: FIFO, queue jumps newest first)", r.name, nx.name)
			}
			delete(s.queue, r.id)
		} else {
			if prev.Type != rein.EventUserMessage || prev.RunID != r.id {
				w.fatalf("%s started neither queued nor at its admission", r.name)
			}
			if len(s.queue) > 0 {
				w.fatalf("%s started at once while runs were queued", r.name)
			}
		}
		r.startSeq = e.Seq
		s.open = r.id
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		_ = e.DecodePayload(&p)
		s.unanswered[p.ToolUseID] = r.id
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		_ = e.DecodePayload(&p)
		if s.unanswered[p.ToolUseID] != r.id {
			w.fatalf("%s: result for tool call %s, which is not open", r.name, p.ToolUseID)
		}
		delete(s.unanswered, p.ToolUseID)
		if p.InDoubt {
			if !slices.Contains(r.causes, causeLost) {
				w.fatalf("%s: in-doubt result, but no crash lost it (its lease was lost: a missed renewal?)", r.name)
			}
			r.inDoubt++
		}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		_ = e.DecodePayload(&p)
		switch {
		case s.open == r.id:
			s.open = ""
		case s.queue[r.id]:
			delete(s.queue, r.id)
		default:
			w.fatalf("%s completed while neither running nor queued", r.name)
		}
		for id, owner := range s.unanswered {
			if owner == r.id {
				w.fatalf("%s ended with tool call %s without a result", r.name, id)
			}
		}
		r.end = &p
		w.checkEnd(r)
	case rein.EventUserInterrupt:
		var p rein.UserInterruptPayload
		_ = e.DecodePayload(&p)
		if p.Accepted {
			tr := w.runs[e.RunID]
			if tr == nil || tr.sess != s.i || tr.end != nil || p.RunID == nil || *p.RunID != e.RunID {
				w.fatalf("session %d: accepted stop of %q, which is not a live run of the session", s.i, e.RunID)
			}
		}
	case rein.EventUserSupplement:
		var p rein.SupplementPayload
		_ = e.DecodePayload(&p)
		s.supLogged[p.SupplementID]++
		if s.supLogged[p.SupplementID] > 1 {
			w.fatalf("supplement %s logged twice", p.SupplementID)
		}
	case rein.EventSupplementConsumed:
		var p rein.SupplementConsumedPayload
		_ = e.DecodePayload(&p)
		s.supUsed[p.SupplementID]++
		if s.supLogged[p.SupplementID] != 1 || s.supUsed[p.SupplementID] > 1 {
			w.fatalf("supplement %s consumed %d times, logged %d times", p.SupplementID, s.supUsed[p.SupplementID], s.supLogged[p.SupplementID])
		}
	}
}

// checkEnd checks a run's session.run_completed against the reasons it was
// given to end (invariants 4 and 5).
func (w *world) checkEnd(r *mrun) {
	p := r.end
	if len(r.causes) == 0 {
		w.fatalf("%s ended %s/%s, but nothing ended it (when_busy=%s, target of its admission: %q)", r.name, p.Status, p.Reason, r.wb, w.name(r.target))
	}
	ok := false
	for _, c := range r.causes {
		if st, rs := c.outcome(); st == p.Status && rs == p.Reason {
			ok = true
		}
	}
	if !ok {
		w.fatalf("%s ended %s/%s; ended by %v", r.name, p.Status, p.Reason, r.causes)
	}
	if p.RolledBack != r.rollback {
		w.fatalf("%s ended %s/%s with rolled_back=%v; ended by %v", r.name, p.Status, p.Reason, p.RolledBack, r.causes)
	}
	if p.RolledBack && (p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled) {
		w.fatalf("%s rolled back but ended %s/%s; ended by %v", r.name, p.Status, p.Reason, r.causes)
	}
}

// quiet reports whether session s is at rest: every run given a reason to
// end has ended, and the session is either free or its one RUNNING run
// (as the store and the log agree) is held in its tool call, with the
// runs the store has queued queued in the log too.
func (w *world) quiet(s *msess) (bool, string) {
	for _, r := range w.runs {
		if r.sess == s.i && len(r.causes) > 0 && r.end == nil {
			return false, fmt.Sprintf("%s has not ended (%v)", r.name, r.causes)
		}
	}
	recs, err := w.base.ListRuns(w.ctx, s.key)
	if err != nil {
		w.t.Fatal(err)
	}
	var running []string
	known := 0
	for _, rec := range recs {
		r := w.runs[rec.ID]
		if r == nil {
			w.fatalf("session %d: stored run %s, which no client was answered for", s.i, rec.ID)
		}
		known++
		switch rec.Status {
		case rein.StatusRunning:
			running = append(running, rec.ID)
			if s.open != rec.ID {
				return false, fmt.Sprintf("%s RUNNING, not yet in the log", r.name)
			}
		case rein.StatusQueued:
			if !s.queue[rec.ID] {
				return false, fmt.Sprintf("%s QUEUED, not in the log's queue", r.name)
			}
		default:
			if r.end == nil {
				return false, fmt.Sprintf("%s %s, not yet in the log", r.name, rec.Status)
			}
			if rec.Status != r.end.Status || rec.Reason != r.end.Reason || rec.RolledBack != r.end.RolledBack {
				w.fatalf("%s: stored %s/%s rolled_back=%v, logged %+v", r.name, rec.Status, rec.Reason, rec.RolledBack, *r.end)
			}
		}
	}
	if len(running) > 1 {
		w.fatalf("session %d: %d RUNNING runs %v (invariant 1)", s.i, len(running), running)
	}
	if len(running) == 0 {
		if len(s.queue) > 0 {
			return false, fmt.Sprintf("session %d free with queued runs", s.i)
		}
	} else {
		held := false
		for _, owner := range s.unanswered {
			held = held || owner == running[0]
		}
		if !held {
			return false, fmt.Sprintf("%s not yet in its tool call", w.name(running[0]))
		}
	}
	for _, r := range w.runs {
		if r.sess == s.i {
			known--
		}
	}
	if known != 0 {
		return false, fmt.Sprintf("session %d: a run answered for is not stored yet", s.i)
	}
	return true, ""
}

// settle waits, on the event logs, until every session is at rest, checking
// each event as it comes.
func (w *world) settle() {
	w.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		w.drain()
		var wait *msess
		why := ""
		for _, s := range w.sess {
			if ok, reason := w.quiet(s); !ok {
				wait, why = s, reason
				break
			}
		}
		if wait == nil {
			return
		}
		ctx, cancel := context.WithDeadline(w.ctx, deadline)
		err := w.base.WaitEvents(ctx, wait.key, int64(len(wait.events)))
		cancel()
		if err != nil {
			w.fatalf("not at rest after %v: %s", settleTimeout, why)
		}
	}
}

// dump logs every session's log and runs, for a failure's report.
func (w *world) dump() {
	for _, s := range w.sess {
		w.t.Logf("--- session %d (%s)", s.i, s.key.ID)
		for _, e := range s.events {
			w.t.Logf("%4d %-32s %-4s %s", e.Seq, e.Type, w.name(e.RunID), e.Payload)
		}
		recs, _ := w.base.ListRuns(w.ctx, s.key)
		slices.SortFunc(recs, func(a, b *store.RunRecord) int { return strings.Compare(w.name(a.ID), w.name(b.ID)) })
		for _, r := range recs {
			w.t.Logf("     %s %s %s %s stop=%q rolled_back=%v resumes=%d", w.name(r.ID), r.ID, r.Status, r.Reason, r.Stop, r.RolledBack, r.Resumes)
		}
	}
}
