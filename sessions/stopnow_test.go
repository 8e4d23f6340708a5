package sessions_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// An accepted stop takes effect at once, while its user.interrupt is being
// logged; the log order (that event before the run's session.run_completed)
// is kept by the run's end, whatever the stop's own append does.

// recStore wraps a store to see its writes: the event types each committed
// Update appended, and a one-shot hook on the next Update that appends a
// user.interrupt without a session.run_completed (a stop's own append).
type recStore struct {
	store.Store

	mu     sync.Mutex
	writes [][]rein.EventType // per Update, the types it appended
	hook   func() error
	// ends, when set, receives the run id and commit time of every
	// committed Update that appended a session.run_completed.
	ends chan runEnd
}

type runEnd struct {
	run string
	at  time.Time
	// withStop: the write also logged a user.interrupt.
	withStop bool
}

func newRecStore(st store.Store) *recStore { return &recStore{Store: st} }

// onStopAppend arms hook for the next stop append.
func (r *recStore) onStopAppend(hook func() error) {
	r.mu.Lock()
	r.hook = hook
	r.mu.Unlock()
}

func (r *recStore) takeHook() func() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hook
	r.hook = nil
	return h
}

// writesWith returns the committed writes that appended an event of typ.
func (r *recStore) writesWith(typ rein.EventType) [][]rein.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]rein.EventType
	for _, w := range r.writes {
		if slices.Contains(w, typ) {
			out = append(out, w)
		}
	}
	return out
}

func (r *recStore) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(tx store.Tx) error) error {
	rt := &recTx{r: r}
	err := r.Store.Update(ctx, key, fence, func(tx store.Tx) error {
		rt.Tx, rt.types, rt.ended = tx, nil, ""
		err := fn(rt)
		if err == nil && len(rt.types) > 0 {
			// Noted before the commit, so that whoever reads the write
			// finds it noted; these tests inject no commit failures.
			r.mu.Lock()
			r.writes = append(r.writes, rt.types)
			r.mu.Unlock()
		}
		return err
	})
	if err != nil || rt.ended == "" {
		return err
	}
	at := time.Now()
	r.mu.Lock()
	ends := r.ends
	r.mu.Unlock()
	if ends != nil {
		ends <- runEnd{run: rt.ended, at: at, withStop: slices.Contains(rt.types, rein.EventUserInterrupt)}
	}
	return nil
}

type recTx struct {
	store.Tx
	r     *recStore
	types []rein.EventType
	ended string // the run whose session.run_completed was appended
}

func (t *recTx) AppendEvents(evs ...rein.Event) ([]rein.Event, error) {
	stop, end := false, false
	for _, e := range evs {
		stop = stop || e.Type == rein.EventUserInterrupt
		if e.Type == rein.EventRunCompleted {
			end, t.ended = true, e.RunID
		}
	}
	if stop && !end {
		if h := t.r.takeHook(); h != nil {
			if err := h(); err != nil {
				return nil, err
			}
		}
	}
	out, err := t.Tx.AppendEvents(evs...)
	if err == nil {
		for _, e := range evs {
			t.types = append(t.types, e.Type)
		}
	}
	return out, err
}

// stopHoldTool stays in its call until the call's context ends, then, once
// the test lets it (release closed, or nil), returns.
type stopHoldTool struct {
	entered chan string // the run of a call that began
	cut     chan string // the run of a call whose context ended
	release chan struct{}
}

func newStopHoldTool() *stopHoldTool {
	return &stopHoldTool{entered: make(chan string, 8), cut: make(chan string, 8)}
}

func (h *stopHoldTool) Spec() tool.Spec {
	return tool.Spec{Name: "hold", Description: "holds until stopped", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (h *stopHoldTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	h.entered <- call.RunID
	<-ctx.Done()
	h.cut <- call.RunID
	if h.release != nil {
		<-h.release
	}
	return tool.Result{Output: "held"}, nil
}

// stopFixture is a started service over a recording store with the hold
// tool.
type stopFixture struct {
	t    *testing.T
	rs   *recStore
	svc  *sessions.Service
	hold *stopHoldTool
	key  rein.SessionKey
}

func newStopFixture(t *testing.T, st store.Store, hold *stopHoldTool) *stopFixture {
	rs := newRecStore(st)
	svc, err := reintest.ServiceWithTools("testdata/stopnow.yaml", rs, nil, hold)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	sess, err := svc.CreateSession(context.Background(), "alice", sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return &stopFixture{t: t, rs: rs, svc: svc, hold: hold, key: sess.Key()}
}

func (f *stopFixture) send(text string, wb rein.WhenBusy) sessions.MessageResult {
	f.t.Helper()
	res, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: text, WhenBusy: wb})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// recv waits for a value on ch, failing the test after a while.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// stopAnswer is what Interrupt answered, run on a goroutine of its own.
type stopAnswer struct {
	res sessions.InterruptResult
	err error
}

func (f *stopFixture) stopAsync(runID string, mode rein.StopMode) <-chan stopAnswer {
	ch := make(chan stopAnswer, 1)
	go func() {
		res, err := f.svc.Interrupt(context.Background(), f.key, sessions.InterruptRequest{RunID: &runID, Mode: mode})
		ch <- stopAnswer{res, err}
	}()
	return ch
}

// checkStopLogged checks the run's log: exactly one user.interrupt for it,
// accepted, and before its session.run_completed, which says status.
func (f *stopFixture) checkStopLogged(runID string, mode rein.StopMode, status rein.RunStatus) {
	f.t.Helper()
	out, err := f.svc.WaitRun(waitCtxFor(f.t), f.key, runID)
	if err != nil || out.Status != status {
		f.t.Fatalf("run %s: %+v %v, want %s", runID, out, err, status)
	}
	evs, _, err := f.svc.ReadEvents(context.Background(), f.key, 0, 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	stops, stopSeq, endSeq := 0, int64(0), int64(0)
	for _, e := range evs {
		switch {
		case e.Type == rein.EventUserInterrupt && e.RunID == runID:
			var p rein.UserInterruptPayload
			if err := e.DecodePayload(&p); err != nil || !p.Accepted || p.Mode != string(mode) || p.RunID == nil || *p.RunID != runID {
				f.t.Fatalf("user.interrupt: %s", e.Payload)
			}
			stops++
			stopSeq = e.Seq
		case e.Type == rein.EventRunCompleted && e.RunID == runID:
			endSeq = e.Seq
		}
	}
	if stops != 1 || endSeq == 0 || stopSeq > endSeq {
		f.t.Fatalf("run %s: %d user.interrupt (seq %d), session.run_completed at seq %d", runID, stops, stopSeq, endSeq)
	}
}

func waitCtxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestStopTakesEffectWhileItsEventIsLogged: the run cannot end (its tool
// holds on) and the stop's own append is held up in the store; the stop has
// already reached the run's tool, nothing of the run's end is written, and
// the requester is answered once the event is in the log — before the run's
// end, which then follows it.
func TestStopTakesEffectWhileItsEventIsLogged(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		for _, c := range []struct {
			mode   rein.StopMode
			status rein.RunStatus
		}{{rein.StopCancel, rein.StatusCancelled}, {rein.StopInterrupt, rein.StatusCompleted}} {
			t.Run(string(c.mode), func(t *testing.T) {
				hold := newStopHoldTool()
				hold.release = make(chan struct{})
				f := newStopFixture(t, open(t), hold)
				res := f.send("hold", "")
				recv(t, hold.entered, "the hold tool's call")
				held, release := make(chan struct{}), make(chan struct{})
				f.rs.onStopAppend(func() error {
					close(held)
					<-release
					return nil
				})
				answer := f.stopAsync(res.RunID, c.mode)
				if got := recv(t, hold.cut, "the stop to reach the tool"); got != res.RunID {
					t.Fatalf("cut %s, want %s", got, res.RunID)
				}
				recv(t, held, "the stop's own append")
				// The stop took effect with its event not yet written: the
				// run's end, and the answer, wait for it.
				if n := len(f.rs.writesWith(rein.EventRunCompleted)); n != 0 {
					t.Fatalf("the run's end was written before its stop's event (%d writes)", n)
				}
				select {
				case a := <-answer:
					t.Fatalf("answered before the stop was logged: %+v", a)
				default:
				}
				close(hold.release)
				close(release)
				a := recv(t, answer, "the stop's answer")
				if a.err != nil || !a.res.Accepted || a.res.RunID != res.RunID {
					t.Fatalf("answer: %+v %v", a.res, a.err)
				}
				f.checkStopLogged(res.RunID, c.mode, c.status)
				ends := f.rs.writesWith(rein.EventRunCompleted)
				if len(ends) != 1 || slices.Contains(ends[0], rein.EventUserInterrupt) {
					t.Fatalf("the end's write: %v, want it without the user.interrupt logged before", ends)
				}
			})
		}
	})
}

// TestStopLoggedByTheEndWhenItsAppendFails: the stop's own append fails;
// the run's end writes the event, in its own write ahead of
// session.run_completed, and only then is the requester answered: accepted.
func TestStopLoggedByTheEndWhenItsAppendFails(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		hold := newStopHoldTool()
		hold.release = make(chan struct{})
		f := newStopFixture(t, open(t), hold)
		res := f.send("hold", "")
		recv(t, hold.entered, "the hold tool's call")
		failed := make(chan struct{})
		f.rs.onStopAppend(func() error {
			close(failed)
			return rein.Errorf(rein.CodeUnavailable, "injected: the stop's append fails")
		})
		answer := f.stopAsync(res.RunID, rein.StopCancel)
		recv(t, failed, "the stop's failed append")
		recv(t, hold.cut, "the stop to reach the tool")
		// The run cannot end while its tool holds on, so the event is
		// still owed, and the requester still waits.
		select {
		case a := <-answer:
			t.Fatalf("answered before the stop was logged: %+v", a)
		default:
		}
		close(hold.release)
		a := recv(t, answer, "the stop's answer")
		if a.err != nil || !a.res.Accepted {
			t.Fatalf("answer: %+v %v", a.res, a.err)
		}
		f.checkStopLogged(res.RunID, rein.StopCancel, rein.StatusCancelled)
		ends := f.rs.writesWith(rein.EventRunCompleted)
		if len(ends) != 1 || !slices.Contains(ends[0], rein.EventUserInterrupt) {
			t.Fatalf("the end's write: %v, want the user.interrupt in it", ends)
		}
	})
}

// TestQueuedStopLoggedWithItsEnd: a queued run held here ends as its stop
// is accepted; the stop's event is written by that end, in the same write,
// ahead of its session.run_completed.
func TestQueuedStopLoggedWithItsEnd(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, open opener) {
		f := newStopFixture(t, open(t), newStopHoldTool())
		a := f.send("hold", "")
		recv(t, f.hold.entered, "the hold tool's call")
		b := f.send("after", rein.WhenBusyEnqueue)
		if b.Status != rein.StatusQueued {
			t.Fatalf("b: %+v", b)
		}
		ans := recv(t, f.stopAsync(b.RunID, rein.StopCancel), "the stop's answer")
		if ans.err != nil || !ans.res.Accepted {
			t.Fatalf("stop of the queued run: %+v %v", ans.res, ans.err)
		}
		f.checkStopLogged(b.RunID, rein.StopCancel, rein.StatusCancelled)
		var together bool
		for _, w := range f.rs.writesWith(rein.EventUserInterrupt) {
			together = together || slices.Contains(w, rein.EventRunCompleted)
		}
		if !together {
			t.Fatalf("writes with the stop: %v, want it with the run's end", f.rs.writesWith(rein.EventUserInterrupt))
		}
		ans = recv(t, f.stopAsync(a.RunID, rein.StopCancel), "the stop's answer")
		if ans.err != nil || !ans.res.Accepted {
			t.Fatalf("stop of the running run: %+v %v", ans.res, ans.err)
		}
		f.checkStopLogged(a.RunID, rein.StopCancel, rein.StatusCancelled)
	})
}
