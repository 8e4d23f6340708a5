package sessions_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// queues is every session.queue_changed payload of the log, in order.
func (f *fixture) queues() [][]string {
	f.t.Helper()
	var out [][]string
	for _, e := range f.all() {
		if e.Type != rein.EventQueueChanged {
			continue
		}
		if e.RunID != "" {
			f.t.Fatalf("session.queue_changed with run_id %q, want none", e.RunID)
		}
		var p rein.QueueChangedPayload
		if err := e.DecodePayload(&p); err != nil || p.Queued == nil {
			f.t.Fatalf("session.queue_changed payload %s: %v", e.Payload, err)
		}
		out = append(out, p.Queued)
	}
	return out
}

// lastQueue is the latest session.queue_changed's queue.
func (f *fixture) lastQueue() []string {
	f.t.Helper()
	q := f.queues()
	if len(q) == 0 {
		f.t.Fatal("no session.queue_changed in the log")
	}
	return q[len(q)-1]
}

// queuedNow is the session's queue as GetSession reads it from the store.
func (f *fixture) queuedNow() []string {
	f.t.Helper()
	info, err := f.svc.GetSession(context.Background(), f.key)
	if err != nil {
		f.t.Fatal(err)
	}
	return info.QueuedRunIDs
}

// reply is run's final agent.message text (waiting for it).
func (f *fixture) reply(runID string) string {
	f.t.Helper()
	e := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventMessage && e.RunID == runID })
	var p rein.MessagePayload
	if err := e.DecodePayload(&p); err != nil {
		f.t.Fatal(err)
	}
	return p.Text
}

// startSeq is the seq of run's session.run_started (0: none yet).
func (f *fixture) startSeq(runID string) int64 {
	for _, e := range f.all() {
		if e.Type == rein.EventRunStarted && e.RunID == runID {
			return e.Seq
		}
	}
	return 0
}

func (f *fixture) edit(runID string, text *string, pos *int) (sessions.QueuedRun, error) {
	return f.svc.EditRun(context.Background(), f.key, runID, sessions.EditRunRequest{Text: text, Position: pos})
}

func intp(n int) *int { return &n }

// wantNotQueued checks the race-honest answer to an edit or promote of a
// run that left the queue: a conflict naming it, with its status.
func wantNotQueued(t *testing.T, err error, runID string, statuses ...rein.RunStatus) {
	t.Helper()
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeConflict || re.RunID != runID || !slices.Contains(statuses, re.RunStatus) {
		t.Fatalf("edit of %s that left the queue: %v (%+v), want conflict with its status in %v", runID, err, re, statuses)
	}
}

func wantInvalid(t *testing.T, err error, param string) {
	t.Helper()
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Param != param {
		t.Fatalf("error = %v, want invalid_argument with param %q", err, param)
	}
}

func TestEditRun(t *testing.T) {
	t.Parallel()
	onBackends(t, testEditRun)
}

func testEditRun(t *testing.T, open opener) {
	f := newFixture(t, open(t))
	f.newSession()
	a := f.send("block A", "")
	f.blocking(a.RunID)
	b, c, d := f.send("B first", "enqueue"), f.send("C", "enqueue"), f.send("D", "enqueue")
	// Each admission into the queue logged the queue it made.
	if got, want := f.queues(), [][]string{{b.RunID}, {b.RunID, c.RunID}, {b.RunID, c.RunID, d.RunID}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("queue_changed after three enqueues = %v, want %v", got, want)
	}

	// A new text: the record, the answer, session.run_edited; no new order.
	out, err := f.edit(b.RunID, ptr("B second ✓"), nil)
	if err != nil || out.Run.Input != "B second ✓" || out.Position != 1 || out.Run.Status != rein.StatusQueued {
		t.Fatalf("edit text = %+v, %v", out, err)
	}
	edited := f.waitEvent(func(e rein.Event) bool { return e.Type == rein.EventRunEdited })
	var ep rein.RunEditedPayload
	if err := edited.DecodePayload(&ep); err != nil || edited.RunID != b.RunID || ep.RunID != b.RunID || ep.Text != "B second ✓" {
		t.Fatalf("session.run_edited = %+v %s, %v", edited, edited.Payload, err)
	}
	if n := len(f.queues()); n != 3 {
		t.Fatalf("a text edit logged a queue change (%d)", n)
	}
	// The same text again changes nothing and logs nothing.
	last := f.all()[len(f.all())-1].Seq
	if out, err := f.edit(b.RunID, ptr("B second ✓"), intp(1)); err != nil || out.Position != 1 {
		t.Fatalf("no-op edit = %+v, %v", out, err)
	}
	if now := f.all()[len(f.all())-1].Seq; now != last {
		t.Fatalf("a no-op edit logged %d events", now-last)
	}

	// Moves: to the front, beyond the end (last), into the middle.
	moves := []struct {
		run  string
		pos  int
		want []string
	}{
		{d.RunID, 1, []string{d.RunID, b.RunID, c.RunID}},
		{d.RunID, 99, []string{b.RunID, c.RunID, d.RunID}},
		{b.RunID, 2, []string{c.RunID, b.RunID, d.RunID}},
		{d.RunID, 1, []string{d.RunID, c.RunID, b.RunID}},
	}
	for _, m := range moves {
		out, err := f.edit(m.run, nil, intp(m.pos))
		if err != nil || out.Position != slices.Index(m.want, m.run)+1 {
			t.Fatalf("move %s to %d = %+v, %v", m.run, m.pos, out, err)
		}
		if got := f.lastQueue(); !slices.Equal(got, m.want) {
			t.Fatalf("queue_changed after moving %s to %d = %v, want %v", m.run, m.pos, got, m.want)
		}
		if got := f.queuedNow(); !slices.Equal(got, m.want) {
			t.Fatalf("queue in the store after moving %s to %d = %v, want %v", m.run, m.pos, got, m.want)
		}
		runs, err := f.svc.ListRuns(context.Background(), f.key)
		if err != nil {
			t.Fatal(err)
		}
		pos := sessions.QueuePositions(runs)
		for i, id := range m.want {
			if pos[id] != i+1 {
				t.Fatalf("QueuePositions = %v, want %v in order", pos, m.want)
			}
		}
		if _, ok := pos[a.RunID]; ok {
			t.Fatalf("the running run has a queue position: %v", pos)
		}
	}

	// Bad input, other sessions, other owners.
	ctx := context.Background()
	if _, err := f.edit(b.RunID, ptr(""), nil); err == nil {
		t.Fatal("an empty text was accepted")
	} else {
		wantInvalid(t, err, "text")
	}
	for _, p := range []int{0, -3} {
		_, err := f.edit(b.RunID, nil, intp(p))
		wantInvalid(t, err, "position")
	}
	if _, err := f.svc.EditRun(ctx, rein.SessionKey{Owner: "bob", ID: f.key.ID}, b.RunID, sessions.EditRunRequest{Text: ptr("bob's")}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("another owner's edit: %v, want not found", err)
	}
	other := newFixture(t, f.st)
	other.newSession()
	if _, err := other.edit(b.RunID, ptr("elsewhere"), nil); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("an edit naming the run in another session: %v, want not found", err)
	}
	if _, err := f.edit("run_nope", ptr("x"), nil); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("an unknown run: %v, want not found", err)
	}
	// The running run is not queued: a conflict with its status.
	_, err = f.edit(a.RunID, ptr("too late"), nil)
	wantNotQueued(t, err, a.RunID, rein.StatusRunning)

	// The queue runs in its new order, with the edited text.
	f.stop(ptr(a.RunID), "")
	want := []string{d.RunID, c.RunID, b.RunID}
	if got := f.reply(b.RunID); !strings.HasPrefix(got, "echo B second ✓ ") {
		t.Fatalf("B ran with %q, want its edited text", got)
	}
	for i := 1; i < len(want); i++ {
		if f.startSeq(want[i-1]) > f.startSeq(want[i]) {
			t.Fatalf("runs started out of the queue's order %v: %v", want, f.all())
		}
	}
	// Each start left the queue shorter by one, logged in its write.
	q := f.queues()
	if got := q[len(q)-3:]; !slices.EqualFunc(got, [][]string{{c.RunID, b.RunID}, {b.RunID}, {}}, slices.Equal) {
		t.Fatalf("queue_changed after the starts = %v", got)
	}
	for _, e := range f.all() {
		if e.Type == rein.EventUserMessage && e.RunID == b.RunID && !strings.Contains(string(e.Payload), "B first") {
			t.Fatalf("the user.message was rewritten: %s", e.Payload)
		}
	}
	// Ended: a conflict with its status.
	_, err = f.edit(b.RunID, ptr("after the end"), nil)
	wantNotQueued(t, err, b.RunID, rein.StatusCompleted)
	_, err = f.svc.PromoteRun(ctx, f.key, b.RunID, "")
	wantNotQueued(t, err, b.RunID, rein.StatusCompleted)
}

// TestQueueChangedWhenRunsLeaveTheQueue: a queued run stopped, and one
// whose deadline passed in the queue, each log the queue without it in
// the write that ends it.
func TestQueueChangedWhenRunsLeaveTheQueue(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		f := newFixture(t, open(t))
		f.newSession()
		a := f.send("block A", "")
		f.blocking(a.RunID)
		b, c := f.send("B", "enqueue"), f.send("C", "enqueue")
		f.stop(ptr(b.RunID), "")
		f.completed(b.RunID)
		res, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "D", WhenBusy: rein.WhenBusyEnqueue, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// D's deadline passes in the queue, behind the running A.
		if p := f.completed(res.RunID); p.Reason != rein.ReasonTimeout {
			t.Fatalf("D ended %+v, want timeout", p)
		}
		f.stop(ptr(a.RunID), "")
		f.completed(c.RunID)
		for _, run := range []string{b.RunID, res.RunID} {
			f.leftInItsEnd(run)
		}
		if got := f.lastQueue(); len(got) != 0 {
			t.Fatalf("final queue = %v, want empty", got)
		}
	})
}

// leftInItsEnd checks that the event right after run's
// session.run_completed — the same write — is a session.queue_changed
// without it.
func (f *fixture) leftInItsEnd(runID string) {
	f.t.Helper()
	evs := f.all()
	for i, e := range evs {
		if e.Type != rein.EventRunCompleted || e.RunID != runID {
			continue
		}
		if i+1 == len(evs) || evs[i+1].Type != rein.EventQueueChanged {
			f.t.Fatalf("no session.queue_changed right after %s ended: %v", runID, evs[i:])
		}
		var p rein.QueueChangedPayload
		if err := evs[i+1].DecodePayload(&p); err != nil || slices.Contains(p.Queued, runID) {
			f.t.Fatalf("the queue after %s ended: %s, %v", runID, evs[i+1].Payload, err)
		}
		return
	}
	f.t.Fatalf("%s has no session.run_completed", runID)
}

func TestPromoteRun(t *testing.T) {
	t.Parallel()
	onBackends(t, testPromoteRun)
}

func testPromoteRun(t *testing.T, open opener) {
	ctx := context.Background()
	for _, mode := range []rein.WhenBusy{"", rein.WhenBusyInterrupt, rein.WhenBusyRollback} {
		t.Run("mode="+string(mode), func(t *testing.T) {
			f := newFixture(t, open(t))
			f.newSession()
			a := f.send("block A", "")
			f.blocking(a.RunID)
			b, c := f.send("block B", "enqueue"), f.send("C", "enqueue")
			out, err := f.svc.PromoteRun(ctx, f.key, c.RunID, mode)
			if err != nil || out.Position != 1 || out.Run.ID != c.RunID {
				t.Fatalf("promote = %+v, %v", out, err)
			}
			// The third queue change (after the two enqueues) is the
			// promote's; the runs may already have moved on since.
			if got := f.queues()[2]; !slices.Equal(got, []string{c.RunID, b.RunID}) {
				t.Fatalf("queue_changed of the promote = %v", got)
			}
			p := f.completed(a.RunID)
			switch mode {
			case rein.WhenBusyRollback:
				if p.Status != rein.StatusCancelled || !p.RolledBack {
					t.Fatalf("A after a rollback promote: %+v", p)
				}
			default:
				if p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
					t.Fatalf("A after an interrupt promote: %+v", p)
				}
			}
			f.completed(c.RunID)
			f.blocking(b.RunID)
			if sc, sb := f.startSeq(c.RunID), f.startSeq(b.RunID); sc == 0 || sc > sb {
				t.Fatalf("C (promoted) started at %d, B at %d", sc, sb)
			}
			// B is running now: promoting it is a conflict with RUNNING.
			_, err = f.svc.PromoteRun(ctx, f.key, b.RunID, mode)
			wantNotQueued(t, err, b.RunID, rein.StatusRunning)
			f.stop(ptr(b.RunID), "")
			f.completed(b.RunID)
		})
	}
	t.Run("first", func(t *testing.T) {
		// Bad input; the first queued run promoted keeps the order.
		f := newFixture(t, open(t))
		f.newSession()
		a := f.send("block A", "")
		f.blocking(a.RunID)
		b, c := f.send("B", "enqueue"), f.send("C", "enqueue")
		if _, err := f.svc.PromoteRun(ctx, f.key, c.RunID, "sideways"); err == nil {
			t.Fatal("an unknown mode was accepted")
		} else {
			wantInvalid(t, err, "mode")
		}
		if _, err := f.svc.PromoteRun(ctx, rein.SessionKey{Owner: "bob", ID: f.key.ID}, c.RunID, ""); !errors.Is(err, rein.ErrNotFound) {
			t.Fatalf("another owner's promote: %v", err)
		}
		// The first queued run promoted: the order stays, A is stopped.
		if out, err := f.svc.PromoteRun(ctx, f.key, b.RunID, ""); err != nil || out.Position != 1 {
			t.Fatalf("promote of the first = %+v, %v", out, err)
		}
		if got := f.queues()[2]; !slices.Equal(got, []string{b.RunID, c.RunID}) {
			t.Fatalf("queue_changed of the promote = %v", got)
		}
		f.completed(c.RunID)
		if f.startSeq(b.RunID) > f.startSeq(c.RunID) {
			t.Fatal("B did not run first")
		}
	})
}

// TestEditRacesStart races an edit of a queued run with its start (the
// run ahead of it stopped at the same moment): either the edit is answered
// 200 and the run runs with the new text, or it is answered conflict with
// the run's status and the run runs with the old — never the old text
// after a successful edit.
func TestEditRacesStart(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		f := newFixture(t, open(t))
		f.newSession()
		const rounds = 8
		won := map[bool]int{}
		for i := range rounds {
			a := f.send("block A", "")
			f.blocking(a.RunID)
			old, neu := fmt.Sprintf("old %d", i), fmt.Sprintf("new %d", i)
			b := f.send(old, "enqueue")
			start := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				<-start
				_, err := f.edit(b.RunID, &neu, nil)
				done <- err
			}()
			close(start)
			f.stop(ptr(a.RunID), "")
			err := <-done
			got := f.reply(b.RunID)
			switch {
			case err == nil:
				won[true]++
				if !strings.HasPrefix(got, "echo "+neu+" ") {
					t.Fatalf("round %d: the edit was answered 200 but the run replied %q", i, got)
				}
			default:
				won[false]++
				wantNotQueued(t, err, b.RunID, rein.StatusRunning, rein.StatusCompleted)
				if !strings.HasPrefix(got, "echo "+old+" ") {
					t.Fatalf("round %d: the edit was refused but the run replied %q", i, got)
				}
			}
			f.completed(b.RunID)
		}
		t.Logf("edits first: %d, starts first: %d", won[true], won[false])
	})
}

// TestPromoteOnAnotherInstance: two instances on one PostgreSQL store.
// Instance a runs a run and holds two queued behind it; b promotes the
// last one: a's run is interrupted and the promoted run is the next to
// start (claimed by a, which holds it).
func TestPromoteOnAnotherInstance(t *testing.T) {
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
	cur := a.send("block current", "")
	a.blocking(cur.RunID)
	first, second := a.send("block first", "enqueue"), a.send("promoted", "enqueue")
	out, err := b.svc.PromoteRun(context.Background(), b.key, second.RunID, rein.WhenBusyInterrupt)
	if err != nil || out.Position != 1 {
		t.Fatalf("promote on b = %+v, %v", out, err)
	}
	if p := b.completed(cur.RunID); p.Reason != rein.ReasonInterrupted {
		t.Fatalf("a's run after the promote on b: %+v", p)
	}
	if got := b.reply(second.RunID); !strings.HasPrefix(got, "echo promoted ") {
		t.Fatalf("promoted run replied %q", got)
	}
	b.blocking(first.RunID)
	if sp, sf := b.startSeq(second.RunID), b.startSeq(first.RunID); sp == 0 || sp > sf {
		t.Fatalf("promoted started at %d, the other at %d", sp, sf)
	}
	rec, err := st.GetRun(context.Background(), a.key, second.RunID)
	if err != nil || rec.Instance != "a" {
		t.Fatalf("the promoted run ran on %q (%v), want a, which held it", rec.Instance, err)
	}
	b.stop(ptr(first.RunID), "")
	b.completed(first.RunID)
}
