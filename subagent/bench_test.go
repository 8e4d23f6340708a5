package subagent_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, to count rows

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/subagent"
)

// The subagent benchmarks measure latencies by hand (time.Now around the
// span, the end observed on the log as a client sees it) and report them
// as percentiles with b.ReportMetric; run them with -benchtime Nx so that
// every figure is over N spans. Setup between spans (a fresh parent, a
// child to steer, waiting for the activation's end and its settlement) is
// outside the timer, so ns/op is roughly the measured span too.

// ------------------------------------------------------------ the bench world

// benchWorld is newWorld for benchmarks: one service with the subagent
// tools and the hold tool, over a store, with the default lease TTL (as
// rein serve runs).
type benchWorld struct {
	b    *testing.B
	st   store.Store
	svc  *sessions.Service
	m    *subagent.Manager
	hold *holdTool
	once sync.Once
}

func benchMemory(b *testing.B) store.Store { return memory.New() }

func benchSQLite(b *testing.B) store.Store {
	return benchSQLiteAt(b, filepath.Join(b.TempDir(), "rein.db"))
}

func benchSQLiteAt(b *testing.B, file string) store.Store {
	st, err := sqlite.Open(context.Background(), file, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// newBenchWorld starts a service over st. close (also registered as a
// cleanup; running it twice is harmless) stops the service, then closes
// the store.
func newBenchWorld(b *testing.B, st store.Store) *benchWorld {
	b.Helper()
	hold := newHold()
	svc, m, err := reintest.ServiceWithSubagents(script, st, nil, subagent.Options{}, hold)
	if err != nil {
		st.Close()
		b.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		st.Close()
		b.Fatal(err)
	}
	w := &benchWorld{b: b, st: st, svc: svc, m: m, hold: hold}
	b.Cleanup(w.close)
	return w
}

func (w *benchWorld) close() {
	w.once.Do(func() {
		w.svc.Close()
		w.st.Close()
	})
}

func (w *benchWorld) root() rein.SessionKey {
	w.b.Helper()
	s, err := w.svc.CreateSession(context.Background(), "alice", sessions.CreateSessionRequest{})
	if err != nil {
		w.b.Fatal(err)
	}
	return s.Key()
}

func (w *benchWorld) start(parent rein.SessionKey, prompt string) subagent.Started {
	w.b.Helper()
	s, err := w.m.StartContinuable(context.Background(), parent, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: prompt}})
	if err != nil {
		w.b.Fatalf("StartContinuable %q: %v", prompt, err)
	}
	return s
}

func (w *benchWorld) wait(key rein.SessionKey, what string, pred func(rein.Event) bool) rein.Event {
	w.b.Helper()
	e, err := waitEventIn(w.svc, key, 30*time.Second, pred)
	if err != nil {
		w.b.Fatalf("%s: waiting for %s: %v", key, what, err)
	}
	return e
}

// finished waits for the end of the child's activation and for its
// settlement in the parent (the subagent.completed carrying the notice),
// so that nothing of it is still running when the next span starts.
func (w *benchWorld) finished(parent, child rein.SessionKey, taskID string) {
	w.b.Helper()
	w.wait(child, "the end of "+taskID, isType(rein.EventRunCompleted, taskID))
	w.wait(parent, "subagent.completed of "+taskID, func(e rein.Event) bool {
		var p rein.SubagentCompletedPayload
		return e.Type == rein.EventSubagentCompleted && e.DecodePayload(&p) == nil && p.TaskID == taskID
	})
}

// blocked waits until the activation is inside its hold tool call.
func (w *benchWorld) blocked(key rein.SessionKey, runID string) {
	w.b.Helper()
	w.wait(key, runID+" calling hold", func(e rein.Event) bool {
		var p rein.ToolUsePayload
		return e.Type == rein.EventToolUse && e.RunID == runID && e.DecodePayload(&p) == nil && p.Name == "hold"
	})
}

// ------------------------------------------------------------ percentiles

// reportPercentiles reports the nearest-rank percentiles of ds in ms as
// "<prefix>p50-ms" and so on.
func reportPercentiles(b *testing.B, prefix string, ds []time.Duration, ps ...int) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	for _, p := range ps {
		i := int(math.Ceil(float64(p)/100*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		b.ReportMetric(float64(s[i])/float64(time.Millisecond), fmt.Sprintf("%sp%d-ms", prefix, p))
	}
}

// ------------------------------------------------------------ the benchmarks

// BenchmarkSpawnToRunStarted: on SQLite, from the call of
// Manager.StartContinuable to the child's session.run_started as a reader
// of the child's log sees it — the child persisted with its descriptor,
// its first user.message admitted, subagent.started in the parent, the
// activation claimed (turn lease) and started. Each span starts a child
// under a fresh parent; the child's one-step activation ends and is
// settled outside the timer. Also reported: call-p50-ms, how long
// StartContinuable itself takes to answer.
func BenchmarkSpawnToRunStarted(b *testing.B) {
	w := newBenchWorld(b, benchSQLite(b))
	spans := make([]time.Duration, 0, b.N)
	calls := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		parent := w.root()
		b.StartTimer()
		t0 := time.Now()
		s := w.start(parent, fmt.Sprintf("echo spawn %d", i))
		calls = append(calls, time.Since(t0))
		child := rein.SessionKey{Owner: parent.Owner, ID: s.ChildID}
		w.wait(child, "session.run_started of "+s.TaskID, isType(rein.EventRunStarted, s.TaskID))
		spans = append(spans, time.Since(t0))
		b.StopTimer()
		w.finished(parent, child, s.TaskID)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, "", spans, 50, 99)
	reportPercentiles(b, "call-", calls, 50)
}

// BenchmarkFollowupSteeredConsumed: a child's activation is blocked in
// the hold tool, with a step after it. From the call of Followup (route
// steered: a durable user.supplement, source "parent") to the child's
// agent.supplement_consumed of that supplement, as a reader of the
// child's log sees it. A supplement is read at the start of a step
// (docs/api.md), so the hold is released as soon as Followup has answered:
// the span is the followup's acceptance, plus the tool's return (a
// channel close) and its result's write, plus the next step's inbox
// read — everything but the tool's own run time. Also reported:
// call-p50-ms, how long Followup itself takes to answer.
func BenchmarkFollowupSteeredConsumed(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchFollowupSteeredConsumed(b, benchMemory(b)) })
	b.Run("sqlite", func(b *testing.B) { benchFollowupSteeredConsumed(b, benchSQLite(b)) })
}

func benchFollowupSteeredConsumed(b *testing.B, st store.Store) {
	w := newBenchWorld(b, st)
	ctx := context.Background()
	spans := make([]time.Duration, 0, b.N)
	calls := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		parent := w.root()
		s := w.start(parent, fmt.Sprintf("hold steer %d", i))
		child := rein.SessionKey{Owner: parent.Owner, ID: s.ChildID}
		w.blocked(child, s.TaskID)
		b.StartTimer()
		t0 := time.Now()
		r, err := w.m.Followup(ctx, parent, s.ChildID, "also check the tests", subagent.FollowupOptions{})
		if err != nil {
			b.Fatal(err)
		}
		calls = append(calls, time.Since(t0))
		if r.Route != subagent.RouteSteered || r.TaskID != s.TaskID {
			b.Fatalf("Followup = %+v, want steered into %s", r, s.TaskID)
		}
		w.hold.release(s.TaskID)
		w.wait(child, "agent.supplement_consumed of "+r.MessageID, func(e rein.Event) bool {
			var p rein.SupplementConsumedPayload
			return e.Type == rein.EventSupplementConsumed && e.DecodePayload(&p) == nil && p.SupplementID == r.MessageID
		})
		spans = append(spans, time.Since(t0))
		b.StopTimer()
		w.finished(parent, child, s.TaskID)
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, "", spans, 50, 99)
	reportPercentiles(b, "call-", calls, 50)
}

// idleChildren is how many idle children BenchmarkIdleChildrenCost keeps.
const idleChildren = 100

// BenchmarkIdleChildrenCost: what a parent's idle continuable children
// cost once each one's first activation has finished and been settled
// into the parent (each child ran one one-step activation). Every
// iteration builds a fresh service, store and parent, measures, and
// closes them; the figures are means over the iterations.
//
//   - memory: goroutines/child is the runtime.NumGoroutine delta over the
//     100 children (after GC, once the count is steady) — 0 means an idle
//     child holds no goroutine. heap-B/child is the live-heap delta
//     (HeapAlloc after GC) over the 100 children. On the memory store that
//     figure includes the stored rows: each child's session record,
//     transcript, event log and run record, and the parent's own records
//     about it (its subagent.started/subagent.completed events and its
//     queued notice) — everything that an idle child keeps alive.
//   - sqlite: goroutines/child as above; then, with the service and the
//     store closed, the file is opened read-only with database/sql and
//     the children's rows are counted, by table (sessions, runs, events,
//     history, supplements, confirmations, leases) and in all
//     (rows/child), and the rows the parent's tables hold about its
//     children (parent-rows/child: its events and supplements beyond
//     those of the parent alone, which has none before its children).
func BenchmarkIdleChildrenCost(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		var gor, heap float64
		for range b.N {
			g, h := idleCost(b, benchMemory(b), nil)
			gor += g
			heap += h
		}
		b.ReportMetric(gor/float64(b.N), "goroutines/child")
		b.ReportMetric(heap/float64(b.N), "heap-B/child")
	})
	b.Run("sqlite", func(b *testing.B) {
		var gor float64
		var rows map[string]float64
		for range b.N {
			file := filepath.Join(b.TempDir(), "rein.db")
			var parent rein.SessionKey
			g, _ := idleCost(b, benchSQLiteAt(b, file), &parent)
			gor += g
			counts := countChildRows(b, file, parent.ID)
			if rows == nil {
				rows = map[string]float64{}
			}
			for k, v := range counts {
				rows[k] += float64(v)
			}
		}
		b.ReportMetric(gor/float64(b.N), "goroutines/child")
		for k, v := range rows {
			b.ReportMetric(v/float64(b.N)/idleChildren, k+"/child")
		}
	})
}

// idleCost builds a world over st and a parent, measures the baseline,
// starts the idle children, waits until each activation has ended and
// been settled, measures again and closes the world (the store too). It
// returns the goroutine and heap deltas per child, and the parent's key in
// *parent when parent is not nil.
func idleCost(b *testing.B, st store.Store, parent *rein.SessionKey) (goroutines, heapBytes float64) {
	b.Helper()
	w := newBenchWorld(b, st)
	defer w.close()
	p := w.root()
	if parent != nil {
		*parent = p
	}
	g0, h0 := steadyGoroutines(), liveHeap()
	tasks := make([]subagent.Started, idleChildren)
	for i := range tasks {
		tasks[i] = w.start(p, fmt.Sprintf("echo idle %d", i))
	}
	for _, s := range tasks {
		w.finished(p, rein.SessionKey{Owner: p.Owner, ID: s.ChildID}, s.TaskID)
	}
	// Idle indeed: no child has a running or queued activation.
	for _, s := range tasks {
		info, err := w.svc.GetSession(context.Background(), rein.SessionKey{Owner: p.Owner, ID: s.ChildID})
		if err != nil {
			b.Fatal(err)
		}
		if info.Busy || info.CurrentRunID != "" || len(info.QueuedRunIDs) > 0 {
			b.Fatalf("child %s not idle: %+v", s.ChildID, info)
		}
	}
	g1, h1 := steadyGoroutines(), liveHeap()
	runtime.KeepAlive(tasks)
	return float64(g1-g0) / idleChildren, (float64(h1) - float64(h0)) / idleChildren
}

// steadyGoroutines is runtime.NumGoroutine once it has not changed for
// 50 ms (goroutines that finished an activation may still be returning),
// or after 2 s.
func steadyGoroutines() int {
	runtime.GC()
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(2 * time.Second); same < 5 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

// liveHeap is HeapAlloc after two collections (the second frees what the
// first's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// countChildRows opens the closed store's file read-only and counts the
// rows of parentID's children, per table and in all ("rows"), and the
// parent's own rows about them ("parent-rows").
func countChildRows(b *testing.B, file, parentID string) map[string]int {
	b.Helper()
	u := url.URL{Scheme: "file", Path: file, RawQuery: "mode=ro"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	count := func(q string, args ...any) int {
		var n int
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const kids = `SELECT pk FROM sessions WHERE owner = 'alice' AND parent_id = ?`
	out := map[string]int{}
	if n := count(`SELECT count(*) FROM sessions WHERE owner = 'alice' AND parent_id = ?`, parentID); n != idleChildren {
		b.Fatalf("%d children in the file, want %d", n, idleChildren)
	}
	out["sessions"] = idleChildren
	for _, table := range []string{"runs", "events", "history", "supplements", "confirmations", "leases"} {
		out[table] = count(`SELECT count(*) FROM `+table+` WHERE session_pk IN (`+kids+`)`, parentID)
	}
	rows := 0
	for _, n := range out {
		rows += n
	}
	out["rows"] = rows
	const self = `SELECT pk FROM sessions WHERE owner = 'alice' AND id = ?`
	for _, table := range []string{"runs", "events", "history", "supplements", "confirmations", "leases"} {
		out["parent-rows"] += count(`SELECT count(*) FROM `+table+` WHERE session_pk IN (`+self+`)`, parentID)
	}
	return out
}
