package sessions_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

func TestEventsReplayAndLiveSeam(t *testing.T) {
	t.Parallel()
	onBackends(t, testEventsReplayAndLiveSeam)
}

func TestEventsBreakAndCancel(t *testing.T) {
	// Not parallel: its leak check snapshots the whole process's goroutines.
	onBackendsSerially(t, testEventsBreakAndCancel)
}

func TestEventsEndWithTheService(t *testing.T) {
	t.Parallel()
	onBackends(t, testEventsEndWithTheService)
}

// collect ranges over Events from after until the run's
// session.run_completed and returns what it saw.
func collect(ctx context.Context, svc *sessions.Service, key rein.SessionKey, after int64, runID string) ([]rein.Event, error) {
	var out []rein.Event
	for e, err := range svc.Events(ctx, key, after) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
		if e.Type == rein.EventRunCompleted && e.RunID == runID {
			return out, nil
		}
	}
	return out, fmt.Errorf("the sequence ended before run %s completed (ctx: %v)", runID, ctx.Err())
}

// sameAsLog checks that got is exactly the log after the cursor, up to
// its last event: no gap, no repeat, same events.
func sameAsLog(t *testing.T, log []rein.Event, after int64, got []rein.Event) {
	t.Helper()
	if len(got) == 0 {
		t.Fatalf("from %d: nothing", after)
	}
	want := log[after:got[len(got)-1].Seq]
	if len(got) != len(want) {
		t.Fatalf("from %d: %d events, the log has %d up to seq %d", after, len(got), len(want), got[len(got)-1].Seq)
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || got[i].ID != want[i].ID || got[i].Type != want[i].Type {
			t.Fatalf("from %d: event %d is %d/%s, the log has %d/%s", after, i, got[i].Seq, got[i].Type, want[i].Seq, want[i].Type)
		}
	}
}

// testEventsReplayAndLiveSeam: a subscriber replays the log and goes on
// live; subscribers started while a run streams — each at the cursor of an
// event just appended — see exactly the log after their cursor.
func testEventsReplayAndLiveSeam(t *testing.T, open opener) {
	f := newOutcomeFixture(t, open(t), "")
	f.newSession()
	wait(t, f.message(sessions.MessageRequest{Text: "before"}))
	ctx := waitCtx(t)

	type late struct {
		after int64
		evs   []rein.Event
		err   error
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		lates []late
	)
	slow := f.message(sessions.MessageRequest{Text: "slow stream"})
	var seen []rein.Event
	for e, err := range f.svc.Events(ctx, f.key, 0) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, e)
		if e.RunID == slow.RunID {
			// Join at the seam: from just before this event, while the run
			// goes on appending.
			wg.Add(1)
			go func(after int64) {
				defer wg.Done()
				evs, err := collect(ctx, f.svc, f.key, after, slow.RunID)
				mu.Lock()
				lates = append(lates, late{after, evs, err})
				mu.Unlock()
			}(e.Seq - 1)
		}
		if e.Type == rein.EventRunCompleted && e.RunID == slow.RunID {
			break
		}
	}
	wg.Wait()
	log := f.all()
	sameAsLog(t, log, 0, seen)
	deltas := 0
	for _, e := range seen {
		if e.Type == rein.EventMessageDelta && e.RunID == slow.RunID {
			deltas++
		}
	}
	if deltas < 2 {
		t.Fatalf("the slow run streamed %d deltas: the live part was not exercised", deltas)
	}
	if len(lates) < 4 {
		t.Fatalf("%d subscribers joined during the run", len(lates))
	}
	for _, l := range lates {
		if l.err != nil {
			t.Fatalf("from %d: %v", l.after, l.err)
		}
		sameAsLog(t, log, l.after, l.evs)
	}
	// A cursor in the middle starts right after it.
	mid := log[len(log)/2].Seq
	evs, err := collect(ctx, f.svc, f.key, mid, slow.RunID)
	if err != nil {
		t.Fatal(err)
	}
	sameAsLog(t, log, mid, evs)
}

// testEventsBreakAndCancel: leaving the loop, during replay or while
// waiting live, and cancelling its context end it with nothing left
// running; errors are yielded once.
func testEventsBreakAndCancel(t *testing.T, open opener) {
	f := newOutcomeFixture(t, open(t), "")
	f.newSession()
	wait(t, f.message(sessions.MessageRequest{Text: "one"}))
	last := f.all()[len(f.all())-1].Seq

	// Whatever the store starts once for waiting (a listener) is started
	// before the snapshot: one live wait, cancelled.
	warm, cancel := context.WithCancel(context.Background())
	for e := range f.svc.Events(warm, f.key, 0) {
		if e.Seq == last {
			cancel()
		}
	}
	cancel()
	snapshot := goleak.IgnoreCurrent()

	// Break during replay.
	n := 0
	for _, err := range f.svc.Events(context.Background(), f.key, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}

	// Break while live: the first event of a run sent after the loop
	// caught up.
	caught := make(chan struct{})
	var once sync.Once
	got := make(chan rein.Event, 1)
	go func() {
		defer close(got)
		defer once.Do(func() { close(caught) })
		for e, err := range f.svc.Events(context.Background(), f.key, 0) {
			if err != nil {
				t.Error(err)
				return
			}
			if e.Seq == last {
				once.Do(func() { close(caught) })
			}
			if e.Seq > last {
				got <- e
				break
			}
		}
	}()
	<-caught
	r := f.message(sessions.MessageRequest{Text: "two"})
	if e := <-got; e.Seq != last+1 || e.RunID != r.RunID || e.Type != rein.EventUserMessage {
		t.Fatalf("first live event %d %s %s", e.Seq, e.Type, e.RunID)
	}
	<-got
	wait(t, r)

	// Cancel while waiting live: the loop ends, and yields no error.
	ctx, cancelLive := context.WithCancel(context.Background())
	last = f.all()[len(f.all())-1].Seq
	ended := make(chan error, 1)
	go func() {
		var yielded error
		for e, err := range f.svc.Events(ctx, f.key, 0) {
			if err != nil {
				yielded = err
			}
			if e.Seq == last {
				cancelLive()
			}
		}
		ended <- yielded
	}()
	if err := <-ended; err != nil {
		t.Fatalf("a cancelled subscription yielded %v", err)
	}
	// A context done before the first read: nothing at all.
	for e, err := range f.svc.Events(ctx, f.key, 0) {
		t.Fatalf("a done context yielded %d %v", e.Seq, err)
	}
	goleak.VerifyNone(t, snapshot)

	// Errors, yielded once.
	for _, c := range []struct {
		key   rein.SessionKey
		after int64
		code  rein.Code
	}{
		{rein.SessionKey{Owner: "alice", ID: "ses_missing"}, 0, rein.CodeNotFound},
		{rein.SessionKey{Owner: "mallory", ID: f.key.ID}, 0, rein.CodeNotFound},
		{f.key, -1, rein.CodeInvalidArgument},
	} {
		var errs []error
		for _, err := range f.svc.Events(context.Background(), c.key, c.after) {
			errs = append(errs, err)
		}
		if len(errs) != 1 || rein.CodeOf(errs[0]) != c.code {
			t.Fatalf("%v after %d: %v, want one %s", c.key, c.after, errs, c.code)
		}
	}
}

// testEventsEndWithTheService: a subscription waiting live ends when the
// service closes, after the end of the run the close cancelled.
func testEventsEndWithTheService(t *testing.T, open opener) {
	f := newOutcomeFixture(t, open(t), "")
	f.newSession()
	r := f.message(sessions.MessageRequest{Text: "block until closed"})
	f.blocking(r.RunID)
	type result struct {
		evs []rein.Event
		err error
	}
	blocked := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var res result
		for e, err := range f.svc.Events(context.Background(), f.key, 0) {
			if err != nil {
				res.err = err
				break
			}
			res.evs = append(res.evs, e)
			if e.Type == rein.EventToolUse {
				close(blocked)
			}
		}
		done <- res
	}()
	<-blocked
	f.svc.Close()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	end := res.evs[len(res.evs)-1]
	var p rein.RunCompletedPayload
	if end.Type != rein.EventRunCompleted || end.DecodePayload(&p) != nil || p.Status != rein.StatusCancelled {
		t.Fatalf("the subscription ended on %d %s, want the run's session.run_completed", end.Seq, end.Type)
	}
	sameAsLog(t, f.all(), 0, res.evs)
}
