package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
)

// TestPropertyStopByClientID races a stop by client id against the
// user.message with that client id — the stop first, the message first, or
// both at once from two goroutines — with the session idle or busy, every
// when_busy and both stop modes, on memory, SQLite and PostgreSQL (decision
// 0090). Whatever the order, the race ends with the message's run stopped:
//
//  1. the stop is accepted; it names the message's run, or none when it
//     was remembered;
//  2. remembered: the message's run was created already ended
//     (CANCELLED/cancelled, session.run_completed right after its
//     user.message, no session.run_started), its answer said CANCELLED, and
//     a busy session's run was not touched by the message's when_busy;
//  3. found: the message's run ends stopped (CANCELLED, or interrupted
//     for an interrupt) and never by finishing;
//  4. a message refused (session_busy) leaves the stop remembered: sent
//     again, it is admitted already ended;
//  5. exactly one user.interrupt names the client id, with the run it
//     stopped or null.
func TestPropertyStopByClientID(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		defaultRapidChecks(t, 100)
		st := memory.New()
		t.Cleanup(func() { st.Close() })
		checkStopRaces(t, st)
	})
	t.Run("sqlite", func(t *testing.T) {
		defaultRapidChecks(t, 30)
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rein.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		checkStopRaces(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("REIN_TEST_POSTGRES_DSN not set")
		}
		defaultRapidChecks(t, 30)
		checkStopRaces(t, openPostgres(t, dsn))
	})
}

func checkStopRaces(t *testing.T, st store.Store) {
	f := newFixture(t, st)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		busy := rapid.Bool().Draw(rt, "busy")
		whenBusy := rapid.SampledFrom([]rein.WhenBusy{rein.WhenBusyReject, rein.WhenBusyEnqueue, rein.WhenBusyInterrupt, rein.WhenBusyRollback}).Draw(rt, "when_busy")
		mode := rapid.SampledFrom([]rein.StopMode{rein.StopCancel, rein.StopInterrupt}).Draw(rt, "mode")
		order := rapid.SampledFrom([]string{"stop first", "message first", "together"}).Draw(rt, "order")
		f.newSession()
		cid := fmt.Sprintf("cid-%d", n)
		ctx := context.Background()

		var blocker sessions.MessageResult
		if busy {
			blocker = f.send("block busy", "")
			f.blocking(blocker.RunID)
		}
		var (
			msg    sessions.MessageResult
			msgErr error
			stop   sessions.InterruptResult
			stErr  error
		)
		sendMsg := func() {
			msg, msgErr = f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block " + cid, ClientID: cid, WhenBusy: whenBusy})
		}
		sendStop := func() {
			stop, stErr = f.svc.Interrupt(ctx, f.key, sessions.InterruptRequest{ClientID: cid, Mode: mode})
		}
		switch order {
		case "stop first":
			sendStop()
			sendMsg()
		case "message first":
			sendMsg()
			sendStop()
		default:
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Go(func() { <-start; sendMsg() })
			wg.Go(func() { <-start; sendStop() })
			close(start)
			wg.Wait()
		}
		if stErr != nil {
			rt.Fatalf("stop: %v", stErr)
		}
		if !stop.Accepted {
			rt.Fatalf("stop not accepted: %+v", stop)
		}
		if msgErr != nil {
			// Refused before the stop came: only a busy session with reject
			// refuses, and then nothing ran, so the stop was remembered.
			if !errors.Is(msgErr, rein.ErrSessionBusy) || !busy || whenBusy != rein.WhenBusyReject || stop.RunID != "" {
				rt.Fatalf("message: %v (busy %v, when_busy %s, stop %+v)", msgErr, busy, whenBusy, stop)
			}
			again, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "block " + cid, ClientID: cid})
			if err != nil || again.Status != rein.StatusCancelled {
				rt.Fatalf("the refused message sent again = %+v, %v; want it admitted already ended", again, err)
			}
			msg = again
			stop.RunID = ""
		}
		p := f.interruptFor(cid)
		if stop.RunID == "" {
			if msg.Status != rein.StatusCancelled || p.RunID != nil {
				rt.Fatalf("remembered stop: message answered %s, user.interrupt %+v", msg.Status, p)
			}
			f.endedAtAdmission(msg.RunID)
		} else {
			if stop.RunID != msg.RunID || p.RunID == nil || *p.RunID != msg.RunID {
				rt.Fatalf("stop %+v named another run than the message's %s (user.interrupt %+v)", stop, msg.RunID, p)
			}
			end := f.completed(msg.RunID)
			stopped := end.Status == rein.StatusCancelled && end.Reason == rein.ReasonCancelled ||
				mode == rein.StopInterrupt && end.Status == rein.StatusCompleted && end.Reason == rein.ReasonInterrupted
			if !stopped {
				rt.Fatalf("the message's run ended %+v, not stopped (mode %s)", end, mode)
			}
		}
		if n := countType(f.runEvents(msg.RunID), rein.EventRunCompleted); n != 1 {
			rt.Fatalf("%d session.run_completed for the message's run", n)
		}
		if busy {
			rec, err := f.st.GetRun(ctx, f.key, blocker.RunID)
			if err != nil {
				rt.Fatal(err)
			}
			stoppedByMessage := stop.RunID != "" && (whenBusy == rein.WhenBusyInterrupt || whenBusy == rein.WhenBusyRollback)
			if !stoppedByMessage && (rec.Status != rein.StatusRunning || rec.Stop != "") {
				rt.Fatalf("the busy run was touched: %s, stop %q (when_busy %s, stop %+v)", rec.Status, rec.Stop, whenBusy, stop)
			}
			if rec.Status == rein.StatusRunning {
				f.stop(ptr(blocker.RunID), "")
			}
			f.completed(blocker.RunID)
		}
	})
}
