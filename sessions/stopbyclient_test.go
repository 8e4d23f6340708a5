package sessions_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

func (f *fixture) stopClient(clientID, mode string) sessions.InterruptResult {
	f.t.Helper()
	res, err := f.svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{ClientID: clientID, Mode: rein.StopMode(mode)})
	if err != nil {
		f.t.Fatalf("stop by client id %s: %v", clientID, err)
	}
	return res
}

// interruptFor is the user.interrupt that named clientID (it must be the
// only one).
func (f *fixture) interruptFor(clientID string) rein.UserInterruptPayload {
	f.t.Helper()
	var found []rein.UserInterruptPayload
	for _, e := range f.all() {
		if e.Type != rein.EventUserInterrupt {
			continue
		}
		var p rein.UserInterruptPayload
		if err := e.DecodePayload(&p); err != nil {
			f.t.Fatal(err)
		}
		if p.ClientID != nil && *p.ClientID == clientID {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		f.t.Fatalf("%d user.interrupt events name client id %s, want 1", len(found), clientID)
	}
	return found[0]
}

// endedAtAdmission checks that run was created already ended: its
// session.run_completed (CANCELLED/cancelled) right after its user.message,
// no session.run_started.
func (f *fixture) endedAtAdmission(runID string) {
	f.t.Helper()
	evs := f.all()
	for i, e := range evs {
		if e.Type != rein.EventUserMessage || e.RunID != runID {
			continue
		}
		if i+1 >= len(evs) || evs[i+1].Type != rein.EventRunCompleted || evs[i+1].RunID != runID {
			f.t.Fatalf("the event after %s's user.message is not its session.run_completed: %v", runID, evs[i:])
		}
		var p rein.RunCompletedPayload
		if err := evs[i+1].DecodePayload(&p); err != nil || p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
			f.t.Fatalf("%s ended %+v, %v; want CANCELLED/cancelled", runID, p, err)
		}
		if n := countType(f.runEvents(runID), rein.EventRunStarted); n != 0 {
			f.t.Fatalf("%s has %d session.run_started, want none", runID, n)
		}
		rec, err := f.st.GetRun(context.Background(), f.key, runID)
		if err != nil || rec.Status != rein.StatusCancelled || !rec.StartedAt.IsZero() {
			f.t.Fatalf("%s's record: %+v, %v", runID, rec, err)
		}
		return
	}
	f.t.Fatalf("no user.message of %s", runID)
}

func TestStopByClientID(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testStopByClientID)
}

func testStopByClientID(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	f := newFixture(t, open(t, clk.now))
	f.newSession()
	ctx := context.Background()

	// Before its message: remembered, accepted, no run named.
	if res := f.stopClient("early", "interrupt"); !res.Accepted || res.RunID != "" {
		t.Fatalf("stop before the message = %+v, want accepted, no run", res)
	}
	if p := f.interruptFor("early"); p.RunID != nil || !p.Accepted || p.Mode != "interrupt" {
		t.Fatalf("its user.interrupt = %+v", p)
	}
	// The session is busy; the message would be refused (reject) — the
	// remembered stop wins: its run is created already ended, and the
	// busy run is untouched.
	busy := f.send("block busy", "")
	f.blocking(busy.RunID)
	early, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block early\nmore", ClientID: "early"})
	if err != nil || early.Status != rein.StatusCancelled || early.Repeat {
		t.Fatalf("the message of a remembered stop = %+v, %v; want a new run, CANCELLED", early, err)
	}
	f.endedAtAdmission(early.RunID)
	if out, err := early.Wait(waitCtx(t)); err != nil || out.Status != rein.StatusCancelled {
		t.Fatalf("Wait = %+v, %v", out, err)
	}
	// Its repeat answers the same run; a stop by its client id now finds
	// it ended.
	if again, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block early", ClientID: "early", WhenBusy: rein.WhenBusyInterrupt}); err != nil || !again.Repeat || again.RunID != early.RunID || again.Status != rein.StatusCancelled {
		t.Fatalf("repeat = %+v, %v", again, err)
	}
	if res := f.stopClient("early", ""); res.Accepted || res.RunID != early.RunID {
		t.Fatalf("stop of an ended run by client id = %+v, want not accepted, naming %s", res, early.RunID)
	}
	// when_busy interrupt or rollback of a message stopped in advance
	// stops nothing.
	f.stopClient("rb", "")
	rb, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block rb", ClientID: "rb", WhenBusy: rein.WhenBusyRollback})
	if err != nil || rb.Status != rein.StatusCancelled {
		t.Fatalf("rollback message stopped in advance = %+v, %v", rb, err)
	}
	f.endedAtAdmission(rb.RunID)
	if rec, _ := f.st.GetRun(ctx, f.key, busy.RunID); rec.Status != rein.StatusRunning || rec.Stop != "" {
		t.Fatalf("the busy run after messages stopped in advance: %s stop %q", rec.Status, rec.Stop)
	}

	// A queued run, by client id: it leaves the queue; the running one
	// stays.
	q, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block queued", ClientID: "q", WhenBusy: rein.WhenBusyEnqueue})
	if err != nil || q.Status != rein.StatusQueued {
		t.Fatalf("queued = %+v, %v", q, err)
	}
	if res := f.stopClient("q", ""); !res.Accepted || res.RunID != q.RunID {
		t.Fatalf("stop of a queued run by client id = %+v", res)
	}
	if p := f.completed(q.RunID); p.Status != rein.StatusCancelled {
		t.Fatalf("queued run ended %+v", p)
	}
	if p := f.interruptFor("q"); p.RunID == nil || *p.RunID != q.RunID || !p.Accepted {
		t.Fatalf("its user.interrupt = %+v", p)
	}
	// The running one, by client id, with the mode asked.
	f.stop(ptr(busy.RunID), "")
	f.completed(busy.RunID)
	r, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block running", ClientID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	f.blocking(r.RunID)
	if res := f.stopClient("r", "interrupt"); !res.Accepted || res.RunID != r.RunID {
		t.Fatalf("stop of a running run by client id = %+v", res)
	}
	if p := f.completed(r.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("interrupted by client id: %+v", p)
	}
	if p := f.interruptFor("r"); p.RunID == nil || *p.RunID != r.RunID || p.Mode != "interrupt" {
		t.Fatalf("its user.interrupt = %+v", p)
	}

	// Remembered for 24 hours by the store's clock, not longer.
	f.stopClient("late", "")
	clk.advance(sessions.StopMemory + time.Second)
	late, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "late", ClientID: "late"})
	if err != nil || late.Status != rein.StatusRunning {
		t.Fatalf("a message a day after its stop = %+v, %v; want it to run", late, err)
	}
	if p := f.completed(late.RunID); p.Status != rein.StatusCompleted {
		t.Fatalf("%+v", p)
	}
	f.stopClient("fresh", "")
	clk.advance(sessions.StopMemory - time.Minute)
	if fresh, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "fresh", ClientID: "fresh"}); err != nil || fresh.Status != rein.StatusCancelled {
		t.Fatalf("a message just within a day of its stop = %+v, %v; want CANCELLED", fresh, err)
	}

	// Bad input: both ids; a missing session.
	if _, err := f.svc.Interrupt(ctx, f.key, sessions.InterruptRequest{ClientID: "x", RunID: ptr(late.RunID)}); rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("client_id with run_id: %v, want invalid_argument", err)
	} else if re := new(rein.Error); !errors.As(err, &re) || re.Param != "client_id" {
		t.Fatalf("client_id with run_id: param %v", err)
	}
	if _, err := f.svc.Interrupt(ctx, rein.SessionKey{Owner: "bob", ID: f.key.ID}, sessions.InterruptRequest{ClientID: "x"}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("another owner's session: %v, want not found", err)
	}
}

// TestStopByClientIDOnAnotherInstance: two instances on one PostgreSQL
// store. A stop taken by B before the message reaches A ends the message's
// run at its admission on A; a stop by client id on B of a run A executes
// is pushed to A, which decides and logs it once, with the client id.
func TestStopByClientIDOnAnotherInstance(t *testing.T) {
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

	if res := b.stopClient("c1", ""); !res.Accepted || res.RunID != "" {
		t.Fatalf("stop on b before the message = %+v", res)
	}
	m, err := a.svc.SendMessage(context.Background(), a.key, sessions.MessageRequest{Text: "block one", ClientID: "c1"})
	if err != nil || m.Status != rein.StatusCancelled {
		t.Fatalf("the message on a = %+v, %v; want CANCELLED", m, err)
	}
	a.endedAtAdmission(m.RunID)

	r, err := a.svc.SendMessage(context.Background(), a.key, sessions.MessageRequest{Text: "block two", ClientID: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	a.blocking(r.RunID)
	if res := b.stopClient("c2", "interrupt"); !res.Accepted || res.RunID != r.RunID {
		t.Fatalf("stop on b of a's run = %+v", res)
	}
	if p := b.completed(r.RunID); p.Reason != rein.ReasonInterrupted {
		t.Fatalf("%+v", p)
	}
	if p := b.interruptFor("c2"); p.RunID == nil || *p.RunID != r.RunID {
		t.Fatalf("user.interrupt = %+v", p)
	}
}
