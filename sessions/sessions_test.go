package sessions_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every scenario runs on every backend: the service's guarantees must not
// depend on which store is under it.
func TestMessageRunLifecycle(t *testing.T) {
	t.Parallel()
	onBackends(t, testMessageRunLifecycle)
}

func TestBusyRejectEnqueueAndCancelQueued(t *testing.T) {
	t.Parallel()
	onBackends(t, testBusyRejectEnqueueAndCancelQueued)
}

func TestStaleStopIgnored(t *testing.T) {
	t.Parallel()
	onBackends(t, testStaleStopIgnored)
}

func TestSessionLevelInterrupt(t *testing.T) {
	t.Parallel()
	onBackends(t, testSessionLevelInterrupt)
}

func TestWhenBusyInterrupt(t *testing.T) {
	t.Parallel()
	onBackends(t, testWhenBusyInterrupt)
}

func TestClientIDRepeat(t *testing.T) {
	t.Parallel()
	onBackends(t, testClientIDRepeat)
}

func TestSupplementsAndSystem(t *testing.T) {
	t.Parallel()
	onBackends(t, testSupplementsAndSystem)
}

func TestToolConfirmationOverService(t *testing.T) {
	t.Parallel()
	onBackends(t, testToolConfirmationOverService)
}

func TestTimeoutCountsQueueTime(t *testing.T) {
	t.Parallel()
	onBackends(t, testTimeoutCountsQueueTime)
}

func TestRestartResumesQueuedAndReapsOrphans(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testRestartResumesQueuedAndReapsOrphans)
}

func TestOrphanWithoutQueuedRunsIsReaped(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testOrphanWithoutQueuedRunsIsReaped)
}

func TestDrainKeepsQueuedRuns(t *testing.T) {
	t.Parallel()
	onBackends(t, testDrainKeepsQueuedRuns)
}

// While draining, a message with a client_id is refused like one without
// when it would start a new run, writing nothing; a repeat of an earlier
// one is still answered with its run.
func TestDrainRefusesNewRunsWithClientID(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		st := open(t)
		f := newFixture(t, st)
		f.newSession()
		ctx := context.Background()
		first, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "x", ClientID: "k-1"})
		if err != nil {
			t.Fatal(err)
		}
		f.completed(first.RunID)
		if err := f.svc.Drain(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		again, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "x", ClientID: "k-1"})
		if err != nil || !again.Repeat || again.RunID != first.RunID {
			t.Fatalf("a repeat while draining = %+v, %v; want the first run %s", again, err, first.RunID)
		}
		if _, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "y", ClientID: "k-2"}); !errors.Is(err, rein.ErrUnavailable) {
			t.Fatalf("a new message with a client_id while draining: %v, want unavailable", err)
		}
		if runs, err := st.ListRuns(ctx, f.key); err != nil || len(runs) != 1 {
			t.Fatalf("runs after the refusal: %d, %v; want the first only", len(runs), err)
		}
	})
}

func TestOwnerIsolation(t *testing.T) {
	t.Parallel()
	onBackends(t, testOwnerIsolation)
}

// liveLease is the turn lease of the tests' services: long enough that no
// renewal (every TTL/3) is missed while its instance lives, however loaded
// the machine (-race, tests in parallel on two cores) — a lapse fences the
// run, and the test would fail for the machine's sake. A test that loses
// an instance moves the store's clock past its leases (lapse) rather than
// waiting for them; what a live instance waits a TTL for (adopting a run
// another instance accepted) still takes up to this long.
const liveLease = 2 * time.Second

// lapse is how far a test moves the store's clock when it loses an
// instance: past every lease and heartbeat that instance wrote.
const lapse = 2 * liveLease

type fixture struct {
	t   *testing.T
	st  store.Store
	svc *sessions.Service
	key rein.SessionKey
}

// newFixture starts a service over st with the scripted model of
// testdata/service.yaml; mod adjusts its configuration.
func newFixture(t *testing.T, st store.Store, mod ...func(*sessions.Config)) *fixture {
	t.Helper()
	workspace := t.TempDir()
	svc, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.LeaseTTL = workspace, liveLease
		for _, f := range mod {
			f(c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &fixture{t: t, st: st, svc: svc}
}

func (f *fixture) newSession() rein.SessionKey {
	f.t.Helper()
	s, err := f.svc.CreateSession(context.Background(), "alice", sessions.CreateSessionRequest{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.key = s.Key()
	return f.key
}

func (f *fixture) send(text, whenBusy string) sessions.MessageResult {
	f.t.Helper()
	res, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: text, WhenBusy: rein.WhenBusy(whenBusy)})
	if err != nil {
		f.t.Fatalf("send %q: %v", text, err)
	}
	return res
}

// waitEvent waits (on the log, not on time) for an event matching pred
// and returns it.
func (f *fixture) waitEvent(pred func(rein.Event) bool) rein.Event {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	after := int64(0)
	for {
		evs, _, err := f.svc.ReadEvents(ctx, f.key, after, 1000)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, e := range evs {
			if pred(e) {
				return e
			}
			after = e.Seq
		}
		if err := f.svc.WaitEvents(ctx, f.key, after); err != nil {
			f.t.Fatalf("waiting for an event: %v", err)
		}
	}
}

func (f *fixture) completed(runID string) rein.RunCompletedPayload {
	f.t.Helper()
	e := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventRunCompleted && e.RunID == runID })
	var p rein.RunCompletedPayload
	if err := e.DecodePayload(&p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// blocking waits until a "block" run is inside its hour-long tool call.
func (f *fixture) blocking(runID string) {
	f.t.Helper()
	f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolUse && e.RunID == runID })
}

func (f *fixture) all() []rein.Event {
	f.t.Helper()
	evs, _, err := f.svc.ReadEvents(context.Background(), f.key, 0, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

func (f *fixture) runEvents(runID string) []rein.EventType {
	var out []rein.EventType
	for _, e := range f.all() {
		if e.RunID == runID {
			out = append(out, e.Type)
		}
	}
	return out
}

func (f *fixture) stop(runID *string, mode string) sessions.InterruptResult {
	f.t.Helper()
	res, err := f.svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{RunID: runID, Mode: rein.StopMode(mode)})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func ptr(s string) *string { return &s }

func testMessageRunLifecycle(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	res := f.send("stream it", "")
	if res.Status != rein.StatusRunning || !strings.HasPrefix(res.RunID, "run_") {
		t.Fatalf("%+v", res)
	}
	p := f.completed(res.RunID)
	if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	evs := f.all()
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("seq %d at %d", e.Seq, i)
		}
	}
	types := f.runEvents(res.RunID)
	if types[0] != rein.EventUserMessage || types[1] != rein.EventRunStarted || types[len(types)-1] != rein.EventRunCompleted || types[len(types)-2] != rein.EventMessage {
		t.Fatalf("event order %v", types)
	}
	var text string
	for _, e := range evs {
		if e.Type == rein.EventMessageDelta {
			var d rein.MessageDeltaPayload
			_ = e.DecodePayload(&d)
			text += d.Text
		}
	}
	if text != "one two three four" {
		t.Fatalf("deltas %q", text)
	}
	rec, err := f.svc.GetRun(context.Background(), f.key, res.RunID)
	if err != nil || rec.Status != rein.StatusCompleted || rec.StartedAt.IsZero() || rec.EndedAt.IsZero() || rec.Usage.OutputTokens == 0 {
		t.Fatalf("%+v %v", rec, err)
	}
	info, err := f.svc.GetSession(context.Background(), f.key)
	if err != nil || info.Busy || info.LastSeq != int64(len(evs)) {
		t.Fatalf("%+v %v", info, err)
	}
}

func testBusyRejectEnqueueAndCancelQueued(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	_, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "hi"})
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeSessionBusy || re.RunID != a.RunID {
		t.Fatalf("reject: %v", err)
	}
	b := f.send("B", "enqueue")
	c := f.send("C", "enqueue")
	if b.Status != rein.StatusQueued || c.Status != rein.StatusQueued {
		t.Fatalf("%+v %+v", b, c)
	}
	q := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventRunQueued && e.RunID == c.RunID })
	var qp rein.RunQueuedPayload
	_ = q.DecodePayload(&qp)
	if qp.Position != 2 {
		t.Fatalf("C position %d", qp.Position)
	}
	info, _ := f.svc.GetSession(context.Background(), f.key)
	if info.CurrentRunID != a.RunID || len(info.QueuedRunIDs) != 2 || info.QueuedRunIDs[0] != b.RunID {
		t.Fatalf("%+v", info)
	}

	if r := f.stop(ptr(b.RunID), ""); !r.Accepted || r.RunID != b.RunID {
		t.Fatalf("stop B %+v", r)
	}
	if r := f.stop(ptr(b.RunID), ""); r.Accepted {
		t.Fatal("second stop of B accepted")
	}
	if p := f.completed(b.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("B %+v", p)
	}
	// B never started; the stop that cancelled it is logged before its
	// run_completed, which is its last event.
	if got := f.runEvents(b.RunID); contains(got, rein.EventRunStarted) ||
		strings.Join(eventNames(got), ",") != "user.message,session.run_queued,user.interrupt,session.run_completed,user.interrupt" {
		t.Fatalf("B's events: %v", got)
	}
	if rec, _ := f.svc.GetRun(context.Background(), f.key, a.RunID); rec.Status != rein.StatusRunning {
		t.Fatal("A disturbed")
	}
	if rec, _ := f.svc.GetRun(context.Background(), f.key, c.RunID); rec.Status != rein.StatusQueued {
		t.Fatal("C jumped the queue")
	}
	f.stop(ptr(a.RunID), "")
	f.completed(a.RunID)
	if p := f.completed(c.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("C %+v", p)
	}
	// C started only after A completed.
	var aEnd, cStart int64
	for _, e := range f.all() {
		if e.Type == rein.EventRunCompleted && e.RunID == a.RunID {
			aEnd = e.Seq
		}
		if e.Type == rein.EventRunStarted && e.RunID == c.RunID {
			cStart = e.Seq
		}
	}
	if cStart < aEnd {
		t.Fatalf("C started at %d before A ended at %d", cStart, aEnd)
	}
}

func eventNames(ts []rein.EventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

func contains(ts []rein.EventType, t rein.EventType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func testStaleStopIgnored(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("first", "")
	f.completed(a.RunID)
	b := f.send("block B", "")
	f.blocking(b.RunID)
	if r := f.stop(ptr(a.RunID), ""); r.Accepted {
		t.Fatal("stale stop accepted")
	}
	if r := f.stop(ptr("run_unknown"), "interrupt"); r.Accepted {
		t.Fatal("unknown stop accepted")
	}
	if rec, _ := f.svc.GetRun(context.Background(), f.key, b.RunID); rec.Status != rein.StatusRunning {
		t.Fatal("B disturbed by a stale stop")
	}
	// The user.interrupt events record the requests.
	var n int
	for _, e := range f.all() {
		if e.Type == rein.EventUserInterrupt {
			var p rein.UserInterruptPayload
			_ = e.DecodePayload(&p)
			if p.Accepted || p.Mode == "" || p.RunID == nil {
				t.Fatalf("%+v", p)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d user.interrupt events", n)
	}
	f.stop(nil, "cancel")
	f.completed(b.RunID)
}

func testSessionLevelInterrupt(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	r := f.stop(nil, "interrupt")
	if !r.Accepted || r.RunID != a.RunID {
		t.Fatalf("%+v", r)
	}
	p := f.completed(a.RunID)
	if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
	if p := f.completed(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("queued B was touched: %+v", p)
	}
	// The interrupted run's cut-short tool call has an error result before
	// its run_completed.
	types := f.runEvents(a.RunID)
	if types[len(types)-1] != rein.EventRunCompleted || !contains(types, rein.EventToolResult) || !contains(types, rein.EventMessage) {
		t.Fatalf("%v", types)
	}
	// Session-level stop when idle: not accepted, run_id null.
	if r := f.stop(nil, ""); r.Accepted || r.RunID != "" {
		t.Fatalf("%+v", r)
	}
}

func testWhenBusyInterrupt(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	x := f.send("X", "interrupt")
	if x.Status != rein.StatusQueued {
		t.Fatalf("%+v", x)
	}
	if p := f.completed(a.RunID); p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
	f.completed(x.RunID)
	f.completed(b.RunID)
	var order []string
	for _, e := range f.all() {
		if e.Type == rein.EventRunStarted {
			order = append(order, e.RunID)
		}
	}
	if len(order) != 3 || order[1] != x.RunID || order[2] != b.RunID {
		t.Fatalf("start order %v (want A, X, B)", order)
	}
}

func testClientIDRepeat(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	req := sessions.MessageRequest{Text: "block once", ClientID: "c-1"}
	first, err := f.svc.SendMessage(context.Background(), f.key, req)
	if err != nil {
		t.Fatal(err)
	}
	f.blocking(first.RunID)
	again, err := f.svc.SendMessage(context.Background(), f.key, req)
	if err != nil || !again.Repeat || again.RunID != first.RunID || again.Status != rein.StatusRunning {
		t.Fatalf("%+v %v", again, err)
	}
	f.stop(nil, "")
	f.completed(first.RunID)
	again, _ = f.svc.SendMessage(context.Background(), f.key, req)
	if again.RunID != first.RunID || again.Status != rein.StatusCancelled {
		t.Fatalf("%+v", again)
	}
	runs, _ := f.svc.ListRuns(context.Background(), f.key)
	if len(runs) != 1 {
		t.Fatalf("%d runs", len(runs))
	}
}

func testSupplementsAndSystem(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	ctx := context.Background()
	s1, err := f.svc.Supplement(ctx, f.key, sessions.SupplementRequest{Text: "be brief", ID: "n1"})
	if err != nil || s1.ID != "n1" || s1.Status != store.SupplementQueued || !s1.Created {
		t.Fatalf("%+v %v", s1, err)
	}
	again, _ := f.svc.Supplement(ctx, f.key, sessions.SupplementRequest{Text: "be brief", ID: "n1"})
	if again.Created || again.Status != store.SupplementQueued {
		t.Fatalf("%+v", again)
	}
	if err := f.svc.SetSystem(ctx, f.key, "You are terse."); err != nil {
		t.Fatal(err)
	}
	r := f.send("hello", "")
	f.completed(r.RunID)
	e := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventMessage })
	var m rein.MessagePayload
	_ = e.DecodePayload(&m)
	if m.Text != "echo hello sys=[You are terse.] hints=[be brief]" {
		t.Fatalf("%q", m.Text)
	}
	again, _ = f.svc.Supplement(ctx, f.key, sessions.SupplementRequest{Text: "be brief", ID: "n1"})
	if again.Status != store.SupplementConsumed {
		t.Fatalf("%+v", again)
	}
	n := 0
	for _, e := range f.all() {
		if e.Type == rein.EventUserSupplement {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d user.supplement events for one idempotent supplement", n)
	}
}

func testToolConfirmationOverService(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	ctx := context.Background()
	r := f.send("note milk", "")
	e := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolConfirmationRequested })
	var p rein.ToolConfirmationRequestedPayload
	_ = e.DecodePayload(&p)
	if e.RunID != r.RunID || p.Name != "write_note" {
		t.Fatalf("%+v", p)
	}
	if _, err := f.svc.ConfirmTool(ctx, f.key, sessions.ConfirmRequest{ToolUseID: "nope", Allow: true}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := f.svc.ConfirmTool(ctx, f.key, sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: false, DenyMessage: ptr("not now")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.ConfirmTool(ctx, f.key, sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: true}); !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("second answer: %v", err)
	}
	if c := f.completed(r.RunID); c.Reason != rein.ReasonStop {
		t.Fatalf("%+v", c)
	}
	e = f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventMessage })
	var m rein.MessagePayload
	_ = e.DecodePayload(&m)
	if !strings.Contains(m.Text, "not now") {
		t.Fatalf("%q", m.Text)
	}
	// A confirmation whose run ended is no longer pending.
	r2 := f.send("note eggs", "")
	e = f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolConfirmationRequested && e.RunID == r2.RunID })
	_ = e.DecodePayload(&p)
	f.stop(ptr(r2.RunID), "")
	f.completed(r2.RunID)
	if _, err := f.svc.ConfirmTool(ctx, f.key, sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: true}); !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("answer after run ended: %v", err)
	}
}

func testTimeoutCountsQueueTime(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "B", WhenBusy: "enqueue", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p := f.completed(b.RunID)
	if p.Status != rein.StatusCancelled || p.Reason != rein.ReasonTimeout {
		t.Fatalf("%+v", p)
	}
	f.stop(nil, "")
}

func testRestartResumesQueuedAndReapsOrphans(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	st := open(t, clk.now)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k, func(c *sessions.Config) { c.Instance = "first" })
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	c := f.send("C", "enqueue")
	// The first instance "dies": from now on none of its writes reach the
	// store, as if the process had been killed. Its run A stays RUNNING
	// with an unrenewed lease; B and C stay QUEUED.
	k.Kill()
	f.svc.Close()
	clk.advance(lapse)
	if rec, _ := st.GetRun(context.Background(), f.key, a.RunID); rec.Status != rein.StatusRunning {
		t.Fatalf("A after crash: %s", rec.Status)
	}

	g := newFixture(t, st, func(c *sessions.Config) { c.Instance = "second" })
	g.key = f.key
	// A is resumed from its last saved step: its tool call was executing
	// when its instance died, so it is never run again and gets an
	// in-doubt result; the model's next step answers.
	pa := g.completed(a.RunID)
	if pa.Status != rein.StatusCompleted || pa.Reason != rein.ReasonStop {
		t.Fatalf("resumed A %+v", pa)
	}
	if p := g.completed(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("B %+v", p)
	}
	if p := g.completed(c.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("C %+v", p)
	}
	// A ended before B started, B before C; A started once.
	var seq []string
	for _, e := range g.all() {
		switch e.Type {
		case rein.EventRunStarted:
			seq = append(seq, "start "+e.RunID)
		case rein.EventRunCompleted:
			seq = append(seq, "end "+e.RunID)
		}
	}
	want := []string{"start " + a.RunID, "end " + a.RunID, "start " + b.RunID, "end " + b.RunID, "start " + c.RunID, "end " + c.RunID}
	if strings.Join(seq, ",") != strings.Join(want, ",") {
		t.Fatalf("got  %v\nwant %v", seq, want)
	}
	var results []rein.ToolResultPayload
	for _, e := range g.all() {
		if e.Type == rein.EventToolResult && e.RunID == a.RunID {
			var p rein.ToolResultPayload
			_ = e.DecodePayload(&p)
			results = append(results, p)
		}
	}
	if len(results) != 1 || !results[0].InDoubt || !results[0].IsError || !strings.HasPrefix(results[0].Output, "in doubt:") {
		t.Fatalf("A's cut tool call: %+v", results)
	}
	if uses := countType(g.runEvents(a.RunID), rein.EventToolUse); uses != 1 {
		t.Fatalf("A's tool call was made %d times", uses)
	}
	// The transcript is valid as saved and the session usable.
	h, _ := st.LoadHistory(context.Background(), f.key)
	if err := rein.ValidateTranscript(h); err != nil {
		t.Fatal(err)
	}
	r := g.send("after", "")
	if p := g.completed(r.RunID); p.Reason != rein.ReasonStop {
		t.Fatal(p)
	}
}

func countType(ts []rein.EventType, t rein.EventType) int {
	n := 0
	for _, x := range ts {
		if x == t {
			n++
		}
	}
	return n
}

func testOrphanWithoutQueuedRunsIsReaped(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	st := open(t, clk.now)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k)
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	k.Kill()
	f.svc.Close()
	clk.advance(lapse)
	// With no resumes allowed, a lost run ends FAILED "instance lost" and
	// the session is usable again.
	g := newFixture(t, st, func(c *sessions.Config) { c.ResumeAttempts = -1 })
	g.key = f.key
	if p := g.completed(a.RunID); p.Status != rein.StatusFailed || p.Reason != rein.ReasonError || p.Error != "instance lost" {
		t.Fatalf("%+v", p)
	}
	info, err := g.svc.GetSession(context.Background(), g.key)
	if err != nil || info.Busy {
		t.Fatalf("%+v %v", info, err)
	}
	h, _ := st.LoadHistory(context.Background(), f.key)
	if err := rein.ValidateTranscript(h); err != nil {
		t.Fatal(err)
	}
}

func testDrainKeepsQueuedRuns(t *testing.T, open opener) {
	st := open(t)
	f := newFixture(t, st)
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	if err := f.svc.Drain(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p := f.completed(a.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
	rec, _ := st.GetRun(context.Background(), f.key, b.RunID)
	if rec.Status != rein.StatusQueued {
		t.Fatalf("B %s", rec.Status)
	}
	if _, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "x"}); !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("admitted while draining: %v", err)
	}
	if err := f.svc.Ready(context.Background()); !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("ready while draining: %v", err)
	}
	// The next instance runs B.
	g := newFixture(t, st)
	g.key = f.key
	if p := g.completed(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("B %+v", p)
	}
}

func testOwnerIsolation(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	ctx := context.Background()
	other := rein.SessionKey{Owner: "mallory", ID: f.key.ID}
	checks := map[string]error{}
	_, checks["get"] = f.svc.GetSession(ctx, other)
	_, checks["runs"] = f.svc.ListRuns(ctx, other)
	_, checks["run"] = f.svc.GetRun(ctx, other, a.RunID)
	_, checks["send"] = f.svc.SendMessage(ctx, other, sessions.MessageRequest{Text: "x"})
	_, checks["stop"] = f.svc.Interrupt(ctx, other, sessions.InterruptRequest{RunID: &a.RunID})
	_, checks["supplement"] = f.svc.Supplement(ctx, other, sessions.SupplementRequest{Text: "x"})
	_, checks["confirm"] = f.svc.ConfirmTool(ctx, other, sessions.ConfirmRequest{ToolUseID: "x"})
	checks["system"] = f.svc.SetSystem(ctx, other, "x")
	_, _, checks["events"] = f.svc.ReadEvents(ctx, other, 0, 10)
	for name, err := range checks {
		if !errors.Is(err, rein.ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if rec, _ := f.svc.GetRun(ctx, f.key, a.RunID); rec.Status != rein.StatusRunning {
		t.Fatal("run disturbed")
	}
	f.stop(nil, "")
}
