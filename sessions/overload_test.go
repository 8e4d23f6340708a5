package sessions_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// slowInbox answers PendingSupplements after delay once armed: a store
// that is slow for a moment under load, on the read every step makes.
type slowInbox struct {
	store.Store
	delay time.Duration

	mu    sync.Mutex
	armed bool
	slow  int // slow reads answered
	cut   int // slow reads whose caller gave up first
}

func (s *slowInbox) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

func (s *slowInbox) PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error) {
	s.mu.Lock()
	armed := s.armed
	s.mu.Unlock()
	if armed {
		t := time.NewTimer(s.delay) // the store's slowness, not a synchronization
		defer t.Stop()
		select {
		case <-t.C:
			s.mu.Lock()
			s.slow++
			s.mu.Unlock()
		case <-ctx.Done():
			s.mu.Lock()
			s.cut++
			s.mu.Unlock()
			return 0, ctx.Err()
		}
	}
	return s.Store.PendingSupplements(ctx, key)
}

// newSlowService is a service whose agent bounds its post-stop writes by
// stopTimeout, far below the store's delay.
func newSlowService(t *testing.T, st store.Store, stopTimeout time.Duration) *sessions.Service {
	t.Helper()
	m, err := scripted.Open("testdata/service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	loop, err := agent.New(agent.Config{Model: m, StopTimeout: stopTimeout})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessions.New(sessions.Config{Store: st, Agent: loop, LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// TestSlowInboxReadDoesNotFailRun: a run whose inbox read takes far longer
// than the agent's StopTimeout (the per-call bound the run's store calls
// used to have) waits for the store and completes, instead of ending
// FAILED "read inbox: context deadline exceeded"; its own deadline still
// ends it (CANCELLED/timeout, not FAILED).
func TestSlowInboxReadDoesNotFailRun(t *testing.T) {
	t.Parallel()
	const stopTimeout = 20 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		status  rein.RunStatus
		reason  rein.Reason
	}{
		{"completes", 0, rein.StatusCompleted, rein.ReasonStop},
		{"own deadline", 150 * time.Millisecond, rein.StatusCancelled, rein.ReasonTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &slowInbox{Store: memory.New(), delay: 25 * stopTimeout}
			if tc.timeout > 0 {
				st.delay = 10 * tc.timeout
			}
			t.Cleanup(func() { st.Close() })
			svc := newSlowService(t, st, stopTimeout)
			s, err := svc.CreateSession(context.Background(), "alice", sessions.CreateSessionRequest{})
			if err != nil {
				t.Fatal(err)
			}
			st.arm()
			res, err := svc.SendMessage(context.Background(), s.Key(), sessions.MessageRequest{Text: "hello", Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := svc.WaitRun(ctx, s.Key(), res.RunID)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != tc.status || out.Reason != tc.reason {
				t.Fatalf("run ended %s/%s (error %q), want %s/%s", out.Status, out.Reason, out.Error, tc.status, tc.reason)
			}
			st.mu.Lock()
			slow, cut := st.slow, st.cut
			st.mu.Unlock()
			if tc.timeout == 0 && (slow == 0 || cut != 0) {
				t.Errorf("slow reads answered %d, cut short %d: the run did not wait for the store", slow, cut)
			}
		})
	}
}

// failFirstUpdate fails the first transaction (a message's admission) with
// err, after applying it when commit is set: the answer lost on its way.
type failFirstUpdate struct {
	store.Store
	mu     sync.Mutex
	err    error
	commit bool
}

func (f *failFirstUpdate) Update(ctx context.Context, key rein.SessionKey, fe store.Fence, fn func(tx store.Tx) error) error {
	f.mu.Lock()
	err, commit := f.err, f.commit
	f.err = nil
	f.mu.Unlock()
	if err == nil {
		return f.Store.Update(ctx, key, fe, fn)
	}
	if commit {
		if uerr := f.Store.Update(ctx, key, fe, fn); uerr != nil {
			return uerr
		}
	}
	return err
}

// TestAdmissionIsAllOrNothing: whatever becomes of the admission write, a
// run record exists exactly when its user.message does — never a run
// listed without events — and a run whose admission committed runs to its
// end even though its caller was told the write failed.
func TestAdmissionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{false, true} {
		name := map[bool]string{false: "not applied", true: "applied, answer lost"}[commit]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := &failFirstUpdate{Store: memory.New()}
			t.Cleanup(func() { st.Close() })
			f := newFixture(t, st)
			key := f.newSession()
			st.mu.Lock()
			st.err, st.commit = rein.Errorf(rein.CodeUnavailable, "test: the store did not answer"), commit
			st.mu.Unlock()
			_, err := f.svc.SendMessage(context.Background(), key, sessions.MessageRequest{Text: "hello"})
			if rein.CodeOf(err) != rein.CodeUnavailable {
				t.Fatalf("SendMessage = %v, want the store's unavailable error", err)
			}
			runs, err := f.svc.ListRuns(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if !commit {
				if len(runs) != 0 || len(f.all()) != 0 {
					t.Fatalf("after a failed admission: %d runs, events %v", len(runs), f.all())
				}
				return
			}
			if len(runs) != 1 {
				t.Fatalf("%d runs after a committed admission, want 1", len(runs))
			}
			// Its instance takes it up like a run it does not hold.
			p := f.completed(runs[0].ID)
			if p.Status != rein.StatusCompleted {
				t.Errorf("run ended %s/%s", p.Status, p.Reason)
			}
			types := f.runEvents(runs[0].ID)
			if len(types) < 3 || types[0] != rein.EventUserMessage || types[len(types)-1] != rein.EventRunCompleted {
				t.Errorf("run events %v", eventNames(types))
			}
		})
	}
}

// TestMaxRunsInFlight: the bound counts the runs the instance holds,
// queued ones included; beyond it SendMessage returns an *OverloadError
// (unavailable, with a Retry-After) and writes nothing; a slot frees when
// a run ends.
func TestMaxRunsInFlight(t *testing.T) {
	t.Parallel()
	f := newFixture(t, memory.New(), func(c *sessions.Config) { c.MaxRunsInFlight = 2 })
	f.newSession()
	first := f.send("block 1", "")
	f.blocking(first.RunID)
	second := f.send("block 2", "enqueue")
	before := len(f.all())
	_, err := f.svc.SendMessage(context.Background(), f.key, sessions.MessageRequest{Text: "block 3", WhenBusy: rein.WhenBusyEnqueue})
	var oe *sessions.OverloadError
	if !errors.As(err, &oe) || rein.CodeOf(err) != rein.CodeUnavailable || oe.RetryAfter <= 0 {
		t.Fatalf("third run: %v, want an OverloadError (unavailable, Retry-After)", err)
	}
	if n, limit := f.svc.RunsInFlight(); n != 2 || limit != 2 {
		t.Errorf("RunsInFlight = %d, %d; want 2, 2", n, limit)
	}
	if after := len(f.all()); after != before {
		t.Errorf("the refusal wrote %d events", after-before)
	}
	f.stop(&first.RunID, "cancel")
	f.completed(first.RunID)
	f.blocking(second.RunID)
	third := f.send("block 3", "enqueue")
	f.stop(&second.RunID, "cancel")
	f.stop(&third.RunID, "cancel")
	f.completed(third.RunID)
}
