package store_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testKey = rein.SessionKey{Owner: "alice", ID: "ses_1"}

func ok(context.Context, rein.SessionKey) error { return nil }

func failWith(err error) store.FlushListener {
	return func(context.Context, rein.SessionKey) error { return err }
}

func TestFlushNoListeners(t *testing.T) {
	var r store.FlushRegistry
	done, err := r.Flush(t.Context(), testKey)
	if done || err != nil {
		t.Fatalf("Flush with no listeners = (%v, %v), want (false, nil)", done, err)
	}
}

func TestFlushAllSucceed(t *testing.T) {
	var r store.FlushRegistry
	var calls atomic.Int32
	for range 3 {
		r.AddFlushListener(func(_ context.Context, key rein.SessionKey) error {
			if key != testKey {
				t.Errorf("listener got key %v, want %v", key, testKey)
			}
			calls.Add(1)
			return nil
		})
	}
	done, err := r.Flush(t.Context(), testKey)
	if !done || err != nil {
		t.Fatalf("Flush = (%v, %v), want (true, nil)", done, err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d listeners called, want 3", n)
	}
}

func TestFlushPassesContext(t *testing.T) {
	var r store.FlushRegistry
	type ctxKey struct{}
	ctx := context.WithValue(t.Context(), ctxKey{}, "marker")
	r.AddFlushListener(func(got context.Context, _ rein.SessionKey) error {
		if got.Value(ctxKey{}) != "marker" {
			return errors.New("listener did not receive the caller's context")
		}
		return nil
	})
	if _, err := r.Flush(ctx, testKey); err != nil {
		t.Fatal(err)
	}
}

func TestFlushAllFail(t *testing.T) {
	var r store.FlushRegistry
	first, second := errors.New("first"), errors.New("second")
	r.AddFlushListener(failWith(first))
	r.AddFlushListener(failWith(second))
	done, err := r.Flush(t.Context(), testKey)
	if done {
		t.Error("Flush reported success although every listener failed")
	}
	if err != first {
		t.Fatalf("Flush error = %v, want %v", err, first)
	}
}

func TestFlushMixedReportsSuccessAndError(t *testing.T) {
	var r store.FlushRegistry
	boom := errors.New("boom")
	r.AddFlushListener(ok)
	r.AddFlushListener(failWith(boom))
	done, err := r.Flush(t.Context(), testKey)
	if !done || err != boom {
		t.Fatalf("Flush = (%v, %v), want (true, %v)", done, err, boom)
	}
}

// The earliest-registered failing listener's error wins even when a later
// listener fails first in time.
func TestFlushErrorIsEarliestRegisteredNotEarliestInTime(t *testing.T) {
	var r store.FlushRegistry
	early, late := errors.New("registered first, fails last"), errors.New("registered last, fails first")
	lateFailed := make(chan struct{})
	r.AddFlushListener(func(ctx context.Context, _ rein.SessionKey) error {
		<-lateFailed
		return early
	})
	r.AddFlushListener(ok)
	r.AddFlushListener(func(ctx context.Context, _ rein.SessionKey) error {
		defer close(lateFailed)
		return late
	})
	done, err := r.Flush(t.Context(), testKey)
	if !done || err != early {
		t.Fatalf("Flush = (%v, %v), want (true, %v)", done, err, early)
	}
}

// Listeners run concurrently: each one waits until all have started, which
// deadlocks (and synctest reports it) if Flush called them one by one.
func TestFlushCallsListenersConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r store.FlushRegistry
		const n = 4
		started := make(chan struct{}, n)
		all := make(chan struct{})
		for range n {
			r.AddFlushListener(func(context.Context, rein.SessionKey) error {
				started <- struct{}{}
				<-all
				return nil
			})
		}
		go func() {
			for range n {
				<-started
			}
			close(all)
		}()
		if done, err := r.Flush(t.Context(), testKey); !done || err != nil {
			t.Fatalf("Flush = (%v, %v), want (true, nil)", done, err)
		}
	})
}

// A failure is reported only once every listener has settled: while a slow
// listener is still working, Flush must not have returned.
func TestFlushWaitsForSlowListenerBeforeReportingError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r store.FlushRegistry
		boom := errors.New("boom")
		release := make(chan struct{})
		var slowSettled atomic.Bool
		r.AddFlushListener(failWith(boom))
		r.AddFlushListener(func(context.Context, rein.SessionKey) error {
			<-release
			slowSettled.Store(true)
			return nil
		})

		returned := make(chan error, 1)
		go func() {
			_, err := r.Flush(context.Background(), testKey)
			returned <- err
		}()
		// Every goroutine is now durably blocked: the fast listener has
		// failed, the slow one waits for release.
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Flush returned %v while a listener was still running", err)
		default:
		}
		close(release)
		if err := <-returned; err != boom {
			t.Fatalf("Flush error = %v, want %v", err, boom)
		}
		if !slowSettled.Load() {
			t.Fatal("Flush returned before the slow listener settled")
		}
	})
}

func TestFlushRemove(t *testing.T) {
	var r store.FlushRegistry
	var aCalls, bCalls atomic.Int32
	removeA := r.AddFlushListener(func(context.Context, rein.SessionKey) error { aCalls.Add(1); return errors.New("a") })
	r.AddFlushListener(func(context.Context, rein.SessionKey) error { bCalls.Add(1); return nil })
	removeA()
	removeA() // idempotent: must not remove b
	done, err := r.Flush(t.Context(), testKey)
	if !done || err != nil {
		t.Fatalf("Flush = (%v, %v), want (true, nil)", done, err)
	}
	if aCalls.Load() != 0 || bCalls.Load() != 1 {
		t.Fatalf("calls a=%d b=%d, want a=0 b=1", aCalls.Load(), bCalls.Load())
	}
}

func TestFlushRemoveLastListener(t *testing.T) {
	var r store.FlushRegistry
	remove := r.AddFlushListener(ok)
	remove()
	if done, err := r.Flush(t.Context(), testKey); done || err != nil {
		t.Fatalf("Flush after removing the only listener = (%v, %v), want (false, nil)", done, err)
	}
}

// A listener registered while a flush runs is not part of that flush.
func TestFlushSnapshotsListeners(t *testing.T) {
	var r store.FlushRegistry
	var lateCalls atomic.Int32
	r.AddFlushListener(func(context.Context, rein.SessionKey) error {
		r.AddFlushListener(func(context.Context, rein.SessionKey) error { lateCalls.Add(1); return nil })
		return nil
	})
	if _, err := r.Flush(t.Context(), testKey); err != nil {
		t.Fatal(err)
	}
	if n := lateCalls.Load(); n != 0 {
		t.Fatalf("listener added during Flush was called %d times by it", n)
	}
}

func TestFlushListenerPanicBecomesError(t *testing.T) {
	var r store.FlushRegistry
	r.AddFlushListener(func(context.Context, rein.SessionKey) error { panic("replica exploded") })
	r.AddFlushListener(ok)
	done, err := r.Flush(t.Context(), testKey)
	if !done || !errors.Is(err, rein.ErrInternal) {
		t.Fatalf("Flush = (%v, %v), want (true, internal error)", done, err)
	}
}

// FlushRegistry satisfies the Flusher contract.
var _ store.Flusher = (*store.FlushRegistry)(nil)
