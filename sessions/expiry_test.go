package sessions_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// expiryService starts a service over st with the expiry tests' model and
// mod applied; its cleanup closes it (a second Close is harmless).
func expiryService(t *testing.T, st store.Store, mod func(*sessions.Config)) *sessions.Service {
	t.Helper()
	ws := t.TempDir()
	svc, err := reintest.Service("testdata/expiry.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.LeaseTTL = ws, liveLease
		if mod != nil {
			mod(c)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// expiredRun checks the end of a run whose only confirmation expired: one
// session.confirmation_expired naming the call, the call denied "expired"
// (its tool result), and the run gone on to its final reply.
func expiredRun(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	if c := f.completed(runID); c.Status != rein.StatusCompleted || c.Reason != rein.ReasonStop {
		t.Fatalf("run ended %s/%s, want COMPLETED/stop", c.Status, c.Reason)
	}
	var toolUseID, reply string
	expired := 0
	for _, e := range f.all() {
		switch e.Type {
		case rein.EventToolConfirmationRequested:
			var p rein.ToolConfirmationRequestedPayload
			_ = e.DecodePayload(&p)
			toolUseID = p.ToolUseID
		case rein.EventConfirmationExpired:
			expired++
			var p rein.ConfirmationExpiredPayload
			_ = e.DecodePayload(&p)
			if p.RunID != runID || p.ToolUseID != toolUseID || e.RunID != runID {
				t.Fatalf("session.confirmation_expired = %+v (envelope run %q), want run %s call %s", p, e.RunID, runID, toolUseID)
			}
		case rein.EventToolResult:
			var p rein.ToolResultPayload
			_ = e.DecodePayload(&p)
			if p.ToolUseID == toolUseID && (!p.IsError || !strings.Contains(p.Output, "denied") || !strings.HasSuffix(p.Output, rein.ConfirmationExpiredMessage)) {
				t.Fatalf("the expired call's result = %+v, want an error denying it as %q", p, rein.ConfirmationExpiredMessage)
			}
		case rein.EventMessage:
			var p rein.MessagePayload
			_ = e.DecodePayload(&p)
			reply = p.Text
		}
	}
	if expired != 1 {
		t.Fatalf("%d session.confirmation_expired events, want exactly 1", expired)
	}
	if !strings.Contains(reply, "expired") {
		t.Fatalf("final reply %q does not show the denial", reply)
	}
	c, err := f.st.GetConfirmation(context.Background(), f.key, toolUseID)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != store.ConfirmationExpired {
		t.Fatalf("confirmation state %s, want expired", c.State)
	}
	// A late answer is refused: it can no longer change anything.
	_, err = f.svc.ConfirmTool(context.Background(), f.key, sessions.ConfirmRequest{ToolUseID: toolUseID, Allow: true})
	if !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("an answer after the expiry: %v, want conflict", err)
	}
	return toolUseID
}

// TestConfirmationExpiresParkedRun: a run parked waiting for an answer
// that never comes is denied "expired" at its time, by the instance's own
// timer, and goes on; a late answer is a conflict. With resume attempts 0:
// taking a parked run up after its expiry is no resume.
func TestConfirmationExpiresParkedRun(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		st := open(t)
		pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
		svc := expiryService(t, st, func(c *sessions.Config) {
			c.ConfirmTTL, c.Observer, c.ResumeAttempts = 1500*time.Millisecond, pc, -1
			c.LeaseTTL = time.Hour // no scan: the timer does it
		})
		f := &fixture{t: t, st: st, svc: svc}
		f.newSession()
		r := f.send("note milk", "")
		e := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolConfirmationRequested })
		c, err := st.GetConfirmation(context.Background(), f.key, mustPayload[rein.ToolConfirmationRequestedPayload](t, e).ToolUseID)
		if err != nil {
			t.Fatal(err)
		}
		if d := c.ExpiresAt.Sub(c.CreatedAt); d != 1500*time.Millisecond {
			t.Fatalf("ExpiresAt - CreatedAt = %v, want the TTL 1.5s", d)
		}
		expiredRun(t, f, r.RunID)
		if pc.parked.Load() != 1 {
			t.Fatalf("%d parks, want 1 (the run waited parked)", pc.parked.Load())
		}
		rec, err := st.GetRun(context.Background(), f.key, r.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Resumes != 0 {
			t.Fatalf("Resumes = %d, want 0: taking up a parked run is no resume", rec.Resumes)
		}
		page, err := svc.ListConfirmations(context.Background(), "alice", sessions.ConfirmationPageRequest{Status: store.InboxExpired})
		if err != nil || len(page.Confirmations) != 1 || page.Confirmations[0].Confirmation.RunID != r.RunID {
			t.Fatalf("expired inbox = %+v, %v", page, err)
		}
	})
}

// TestConfirmationExpiresRunningRun: the confirmation of a run that is
// still running (another call of its step sleeps) expires while it runs;
// the run denies the call as expired once the sleep ends, without parking.
func TestConfirmationExpiresRunningRun(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		st := open(t)
		pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
		svc := expiryService(t, st, func(c *sessions.Config) {
			c.ConfirmTTL, c.Observer = 100*time.Millisecond, pc
		})
		f := &fixture{t: t, st: st, svc: svc}
		f.newSession()
		r := f.send("busy milk", "")
		expiredRun(t, f, r.RunID)
		// The expiry came while the sleep ran: before its result.
		var expiredAt, sleptAt int64
		for _, e := range f.all() {
			switch {
			case e.Type == rein.EventConfirmationExpired:
				expiredAt = e.Seq
			case e.Type == rein.EventToolResult && strings.Contains(string(e.Payload), "slept"):
				sleptAt = e.Seq
			}
		}
		if expiredAt == 0 || sleptAt == 0 || expiredAt > sleptAt {
			t.Fatalf("expired at seq %d, sleep's result at %d: want the expiry while the run ran", expiredAt, sleptAt)
		}
		if pc.parked.Load() != 0 {
			t.Fatalf("%d parks, want 0", pc.parked.Load())
		}
	})
}

// TestConfirmationExpiresAfterEveryInstanceWasDown: the due time passes
// while no service runs; the next one to start expires the confirmation
// and the parked run goes on.
func TestConfirmationExpiresAfterEveryInstanceWasDown(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, func(t *testing.T, open clockedOpener) {
		clock := &shiftClock{}
		st := open(t, clock.now)
		first := expiryService(t, st, func(c *sessions.Config) { c.ConfirmTTL, c.Clock = time.Hour, clock.now })
		f := &fixture{t: t, st: st, svc: first}
		f.newSession()
		r := f.send("note milk", "")
		f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventToolConfirmationRequested })
		if err := first.Drain(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		first.Close()
		clock.advance(2 * time.Hour) // every instance was down at the due time
		for _, e := range f.all() {
			if e.Type == rein.EventConfirmationExpired {
				t.Fatal("expired while no service ran")
			}
		}
		f.svc = expiryService(t, st, func(c *sessions.Config) {
			c.ConfirmTTL, c.Clock, c.LeaseTTL = time.Hour, clock.now, time.Hour // no scan but the start's
		})
		expiredRun(t, f, r.RunID)
	})
}

// TestConfirmationExpiryOnceAcrossInstances: two services share a
// PostgreSQL store. A run parks on A; with A gone before the due time, B
// (which never ran the run) expires the confirmation and takes the run up;
// with both up, exactly one of them expires it.
func TestConfirmationExpiryOnceAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	for _, aGone := range []bool{true, false} {
		name := "both-up"
		if aGone {
			name = "a-gone"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := openPostgres(t, dsn)
			// The TTL leaves the run ample time to park first, even on a
			// loaded machine: A must hold nothing of it when it goes.
			short := func(c *sessions.Config) { c.ConfirmTTL, c.LeaseTTL = 3*time.Second, 300*time.Millisecond }
			pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
			a := expiryService(t, st, func(c *sessions.Config) { short(c); c.Instance, c.Observer = "ins_a", pc })
			f := &fixture{t: t, st: st, svc: a}
			f.newSession()
			r := f.send("note milk", "")
			if aGone {
				select {
				case <-pc.ch: // parked: A holds nothing of it
				case <-time.After(20 * time.Second):
					t.Fatal("the run did not park")
				}
				a.Close() // its timer goes with it; its lease is gone (the run is parked)
			}
			b := expiryService(t, st, func(c *sessions.Config) { short(c); c.Instance = "ins_b" })
			f.svc = b
			expiredRun(t, f, r.RunID)
			rec, err := st.GetRun(context.Background(), f.key, r.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if aGone && rec.Instance != "ins_b" {
				t.Fatalf("the run was taken up by %q, want ins_b (A is gone)", rec.Instance)
			}
		})
	}
}

// postgresDSN is REIN_TEST_POSTGRES_DSN; the test is skipped without it.
func postgresDSN(t *testing.T) string {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	return dsn
}

// mustPayload decodes e's payload as a T.
func mustPayload[T any](t *testing.T, e rein.Event) T {
	t.Helper()
	var p T
	if err := e.DecodePayload(&p); err != nil {
		t.Fatal(err)
	}
	return p
}
