package sessions_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/storetest"
)

// Regression tests for the lifecycle's crash and multi-instance windows.
func TestInterruptWhenIdleRunsAtOnce(t *testing.T) {
	t.Parallel()
	onBackends(t, testInterruptWhenIdleRunsAtOnce)
}

func TestInterruptNeverStopsTheNewRun(t *testing.T) {
	t.Parallel()
	onBackends(t, testInterruptNeverStopsTheNewRun)
}

func TestRollback(t *testing.T) {
	t.Parallel()
	onBackends(t, testRollback)
}

func TestQueuedRunClaimedOnce(t *testing.T) {
	t.Parallel()
	onBackends(t, testQueuedRunClaimedOnce)
}

func TestStopWhileWaitingForTurn(t *testing.T) {
	t.Parallel()
	onBackends(t, testStopWhileWaitingForTurn)
}

func TestSupplementRetryLogsOnce(t *testing.T) {
	t.Parallel()
	onBackends(t, testSupplementRetryLogsOnce)
}

func TestStepRestartedAfterCrash(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testStepRestartedAfterCrash)
}

func TestBadWhenBusyIsInvalidArgument(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		f := newFixture(t, open(t))
		f.newSession()
		_, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "x", WhenBusy: "later"})
		var re *rein.Error
		if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Param != "when_busy" {
			t.Fatalf("%v", err)
		}
	})
}

// shared hides a store's Exclusive capability: two services over it behave
// as two processes sharing a database.
type shared struct{ store.Store }

func testInterruptWhenIdleRunsAtOnce(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	for _, wb := range []string{"interrupt", "rollback"} {
		r := f.send("hello "+wb, wb)
		if r.Status != rein.StatusRunning {
			t.Fatalf("%s on an idle session: status %s, want RUNNING", wb, r.Status)
		}
		if p := f.completed(r.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
			t.Fatalf("%s: the new run was stopped: %+v", wb, p)
		}
	}
}

func testInterruptNeverStopsTheNewRun(t *testing.T, open opener) {
	st := open(t)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k)
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	k.Kill()
	f.svc.Close()
	// The turn is held only by the lost instance's lease (so the store's
	// clock stays put until it lapses): the message that interrupts must
	// stop A, never itself.
	g := newFixture(t, st)
	g.key = f.key
	m := g.send("M", "interrupt")
	if p := g.completed(m.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("M %+v", p)
	}
	if p := g.completed(a.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
}

func testRollback(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	first := f.send("turns first", "")
	f.completed(first.RunID)
	a := f.send("block A", "")
	f.blocking(a.RunID)
	q := f.send("queued Q", "enqueue")
	m := f.send("turns after rollback", "rollback")
	if m.Status != rein.StatusQueued {
		t.Fatalf("M %s", m.Status)
	}
	pa := f.completed(a.RunID)
	if pa.Status != rein.StatusCancelled || pa.Reason != rein.ReasonCancelled || !pa.RolledBack {
		t.Fatalf("A %+v", pa)
	}
	// M runs next, ahead of Q, and A's turn is left out of its request:
	// the first run's turn and M's own count.
	pm := f.completed(m.RunID)
	if pm.Reason != rein.ReasonStop {
		t.Fatalf("M %+v", pm)
	}
	var reply string
	for _, e := range f.all() {
		if e.Type == rein.EventMessage && e.RunID == m.RunID {
			var p rein.MessagePayload
			_ = e.DecodePayload(&p)
			reply = p.Text
		}
	}
	if reply != "turns=2" {
		t.Fatalf("M's reply %q: the rolled-back turn reached the model", reply)
	}
	f.completed(q.RunID)
	var order []string
	for _, e := range f.all() {
		if e.Type == rein.EventRunStarted {
			order = append(order, e.RunID)
		}
	}
	if strings.Join(order, ",") != strings.Join([]string{first.RunID, a.RunID, m.RunID, q.RunID}, ",") {
		t.Fatalf("start order %v", order)
	}
	// The events of A stay in the log.
	if types := f.runEvents(a.RunID); !contains(types, rein.EventToolUse) {
		t.Fatalf("A's events %v", types)
	}
}

func testQueuedRunClaimedOnce(t *testing.T, open opener) {
	st := shared{open(t)}
	f := newFixture(t, st, func(c *sessions.Config) { c.Instance = "first" })
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b := f.send("B", "enqueue")
	// A second instance starting on the same store must not run B: it is
	// queued in the first instance, which is alive.
	g := newFixture(t, st, func(c *sessions.Config) { c.Instance = "second" })
	g.key = f.key
	f.stop(ptr(a.RunID), "")
	if p := f.completed(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("B %+v", p)
	}
	if n := countType(f.runEvents(b.RunID), rein.EventRunStarted); n != 1 {
		t.Fatalf("B started %d times", n)
	}
	h, _ := st.LoadHistory(context.Background(), f.key)
	inputs := 0
	for _, m := range h {
		if m.RunID == b.RunID && m.Role == rein.RoleUser {
			inputs++
		}
	}
	if inputs != 1 {
		t.Fatalf("B's input is %d times in the transcript", inputs)
	}
	if rec, _ := st.GetRun(context.Background(), f.key, b.RunID); rec.Instance != "first" {
		t.Fatalf("B ran on %q", rec.Instance)
	}
}

func testStopWhileWaitingForTurn(t *testing.T, open opener) {
	st := open(t)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k, func(c *sessions.Config) { c.LeaseTTL = time.Minute })
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	k.Kill()
	f.svc.Close()
	// A's lease outlives this test: the new instance's runs wait for it.
	g := newFixture(t, st, func(c *sessions.Config) { c.LeaseTTL = time.Minute })
	g.key = f.key
	b := g.send("B", "enqueue")
	if b.Status != rein.StatusQueued {
		t.Fatalf("B %s", b.Status)
	}
	if r := g.stop(ptr(b.RunID), "interrupt"); !r.Accepted {
		t.Fatal("stop of a waiting run not accepted")
	}
	if p := g.completed(b.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("B %+v", p)
	}
	c := g.send("C", "enqueue")
	if err := g.svc.Drain(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.GetRun(context.Background(), f.key, c.RunID); rec.Status != rein.StatusQueued {
		t.Fatalf("C after drain: %s", rec.Status)
	}
}

func testSupplementRetryLogsOnce(t *testing.T, open opener) {
	st := open(t)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k)
	f.newSession()
	k.FailAt(1)
	if _, err := f.svc.Supplement(context.Background(), f.key, sessions.SupplementRequest{Text: "n", ID: "note-1"}); !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("first push: %v", err)
	}
	for range 2 {
		res, err := f.svc.Supplement(context.Background(), f.key, sessions.SupplementRequest{Text: "n", ID: "note-1"})
		if err != nil || res.ID != "note-1" || res.Status != store.SupplementQueued {
			t.Fatalf("%+v %v", res, err)
		}
	}
	n := 0
	for _, e := range f.all() {
		if e.Type == rein.EventUserSupplement {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d user.supplement events", n)
	}
}

func testStepRestartedAfterCrash(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	st := open(t, clk.now)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k)
	f.newSession()
	a := f.send("slow", "")
	f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventMessageDelta && e.RunID == a.RunID })
	k.Kill()
	f.svc.Close()
	clk.advance(lapse)
	g := newFixture(t, st)
	g.key = f.key
	if p := g.completed(a.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	var restarted []rein.StepRestartedPayload
	var reply string
	var afterRestart strings.Builder
	seen := false
	for _, e := range g.all() {
		if e.RunID != a.RunID {
			continue
		}
		switch e.Type {
		case rein.EventStepRestarted:
			var p rein.StepRestartedPayload
			_ = e.DecodePayload(&p)
			restarted = append(restarted, p)
			seen = true
		case rein.EventMessageDelta:
			if seen {
				var p rein.MessageDeltaPayload
				_ = e.DecodePayload(&p)
				afterRestart.WriteString(p.Text)
			}
		case rein.EventMessage:
			var p rein.MessagePayload
			_ = e.DecodePayload(&p)
			reply = p.Text
		}
	}
	if len(restarted) != 1 || restarted[0].Step != 1 || restarted[0].Attempt != 2 {
		t.Fatalf("step_restarted %+v", restarted)
	}
	// A reader that drops the step's deltas at the restart sees the reply.
	if reply != "one two three four five six seven eight" || afterRestart.String() != reply {
		t.Fatalf("reply %q, deltas after the restart %q", reply, afterRestart.String())
	}
	if rec, _ := st.GetRun(context.Background(), f.key, a.RunID); rec.Resumes != 1 {
		t.Fatalf("resumes %d", rec.Resumes)
	}
}

func TestConfirmationWaitSurvivesRestart(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testConfirmationWaitSurvivesRestart)
}

// A run waiting for a confirmation is neither resumed nor failed by the
// loss of its instance: it goes on waiting, and spends no resume attempt.
func testConfirmationWaitSurvivesRestart(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	st := open(t, clk.now)
	k := storetest.NewFaulty(st)
	f := newFixture(t, k)
	f.newSession()
	r := f.send("note milk", "")
	req := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolConfirmationRequested })
	k.Kill()
	f.svc.Close()
	clk.advance(lapse)
	for i := range 2 {
		g := newFixture(t, st, func(c *sessions.Config) { c.ResumeAttempts = -1 })
		g.key = f.key
		if i == 1 {
			var p rein.ToolConfirmationRequestedPayload
			_ = req.DecodePayload(&p)
			if _, err := g.svc.ConfirmTool(context.Background(), g.key, sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: true}); err != nil {
				t.Fatal(err)
			}
			pr := g.completed(r.RunID)
			if pr.Status != rein.StatusCompleted || pr.Reason != rein.ReasonStop {
				t.Fatalf("%+v", pr)
			}
			break
		}
		// The first restart takes the waiting run up again; it is still
		// waiting when this instance goes away too.
		info, err := g.svc.GetSession(context.Background(), g.key)
		if err != nil || info.CurrentRunID != r.RunID {
			t.Fatalf("%+v %v", info, err)
		}
		g.svc.Close()
		if rec, _ := st.GetRun(context.Background(), f.key, r.RunID); rec.Status != rein.StatusRunning || rec.Resumes != 0 {
			t.Fatalf("after restart %d: %s, resumes %d", i+1, rec.Status, rec.Resumes)
		}
	}
	if n := countType(f.runEvents(r.RunID), rein.EventToolConfirmationRequested); n != 1 {
		t.Fatalf("confirmation requested %d times", n)
	}
}

func TestSessionAgents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, memoryStore(t), func(c *sessions.Config) {
		c.Agents = map[string]*sessions.Agent{
			sessions.DefaultAgent: {},
			"terse":               {System: "be terse"},
		}
	})
	ctx := context.Background()
	_, err := f.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Agent: "nobody"})
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Param != "agent" {
		t.Fatalf("unknown agent: %v", err)
	}
	for _, c := range []struct{ agent, want string }{{"", "sys=[]"}, {"terse", "sys=[be terse]"}} {
		sess, err := f.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Agent: c.agent})
		if err != nil {
			t.Fatal(err)
		}
		wantAgent := c.agent
		if wantAgent == "" {
			wantAgent = sessions.DefaultAgent
		}
		if sess.Agent != wantAgent {
			t.Fatalf("session agent %q, want %q", sess.Agent, wantAgent)
		}
		f.key = sess.Key()
		r := f.send("hello", "")
		f.completed(r.RunID)
		var reply string
		for _, e := range f.all() {
			if e.Type == rein.EventMessage {
				var p rein.MessagePayload
				_ = e.DecodePayload(&p)
				reply = p.Text
			}
		}
		if !strings.Contains(reply, c.want) {
			t.Fatalf("agent %q: reply %q, want it to contain %q", c.agent, reply, c.want)
		}
	}
}

func memoryStore(t *testing.T) store.Store {
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	return st
}

// TestStopRoutedToTheInstanceThatRunsIt: on a store shared by several
// processes (PostgreSQL), a stop sent to another instance reaches the one
// executing the run, which decides it (its answer is the truth) and logs it
// once.
func TestStopRoutedToTheInstanceThatRunsIt(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	st := openPostgres(t, dsn)
	a := newFixture(t, st, func(c *sessions.Config) { c.Instance, c.LeaseTTL = "a", time.Minute })
	b := newFixture(t, st, func(c *sessions.Config) { c.Instance, c.LeaseTTL = "b", time.Minute })
	a.newSession()
	b.key = a.key
	for _, mode := range []string{"cancel", "interrupt"} {
		r := a.send("block "+mode, "")
		a.blocking(r.RunID)
		t0 := time.Now()
		res := b.stop(ptr(r.RunID), mode)
		if !res.Accepted {
			t.Fatalf("%s on b: not accepted", mode)
		}
		p := b.completed(r.RunID)
		took := time.Since(t0)
		want := rein.ReasonCancelled
		if mode == "interrupt" {
			want = rein.ReasonInterrupted
		}
		if p.Reason != want {
			t.Fatalf("%s: %+v", mode, p)
		}
		if took > 10*time.Second {
			t.Fatalf("%s took %v: it waited for the lease, not for a pushed stop", mode, took)
		}
		t.Logf("%s on another instance → run_completed in %v", mode, took)
		if n := countType(b.runEvents(r.RunID), rein.EventUserInterrupt); n != 1 {
			t.Fatalf("user.interrupt logged %d times", n)
		}
	}
	// A stale stop on b changes nothing.
	r := a.send("block again", "")
	a.blocking(r.RunID)
	first := b.all()[0].RunID
	if res := b.stop(ptr(first), ""); res.Accepted {
		t.Fatal("stale stop accepted")
	}
	if rec, _ := st.GetRun(context.Background(), a.key, r.RunID); rec.Status != rein.StatusRunning {
		t.Fatalf("the current run was touched: %s", rec.Status)
	}
	// when_busy=interrupt on b for a's run: a's run is interrupted, the
	// new one runs.
	m := b.send("M", "interrupt")
	if p := b.completed(r.RunID); p.Reason != rein.ReasonInterrupted {
		t.Fatalf("%+v", p)
	}
	if p := b.completed(m.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
}
