package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/reinhq/rein"
)

// FlushRegistry implements Flusher (the flush barrier of docs/api.md) for any
// backend: backends embed it so that every Store offers the same barrier
// semantics without re-deriving the error rules. The zero value is ready
// to use; a FlushRegistry must not be copied after first use.
type FlushRegistry struct {
	mu        sync.Mutex
	nextID    uint64
	listeners []flushEntry // registration order: the order errors are ranked by
}

type flushEntry struct {
	id uint64
	l  FlushListener
}

// AddFlushListener registers l and returns a function that removes it.
// Calling the returned function more than once is harmless. A Flush already
// in progress still waits for l if l was registered when it started.
func (r *FlushRegistry) AddFlushListener(l FlushListener) (remove func()) {
	if l == nil {
		// A nil listener would panic inside Flush's goroutine, far from
		// the caller that made the mistake; fail here instead.
		panic("store: AddFlushListener called with a nil listener")
	}
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.listeners = append(r.listeners, flushEntry{id: id, l: l})
	r.mu.Unlock()

	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			for i, e := range r.listeners {
				if e.id == id {
					// Build a new slice: a concurrent Flush may still be
					// ranging over the snapshot it took of the old one.
					next := make([]flushEntry, 0, len(r.listeners)-1)
					next = append(next, r.listeners[:i]...)
					r.listeners = append(next, r.listeners[i+1:]...)
					return
				}
			}
		})
	}
}

// Flush calls every listener registered at the time of the call, all at
// once, and waits until each has returned. It reports true when at least
// one listener succeeded, false when none is registered. If any listener
// failed, the error is that of the earliest-registered failing listener —
// not the first to fail in time — and it is returned only after every
// listener has settled, so a caller never proceeds while a replica is
// still being written.
//
// ctx is passed to the listeners; Flush itself does not abandon them when
// ctx ends, because the barrier's promise is that everything has settled
// when it returns. Listeners are expected to honour ctx.
func (r *FlushRegistry) Flush(ctx context.Context, key rein.SessionKey) (bool, error) {
	r.mu.Lock()
	snapshot := r.listeners
	r.mu.Unlock()
	if len(snapshot) == 0 {
		return false, nil
	}

	errs := make([]error, len(snapshot))
	var wg sync.WaitGroup
	for i, e := range snapshot {
		wg.Go(func() { errs[i] = callFlushListener(ctx, e.l, key) })
	}
	wg.Wait()

	succeeded := false
	var first error
	for _, err := range errs {
		if err == nil {
			succeeded = true
		} else if first == nil {
			first = err
		}
	}
	return succeeded, first
}

// callFlushListener runs one listener, turning a panic into an error: a
// listener is plugged-in code running on a goroutine Flush started, and a
// panic there would otherwise take the whole process down with no chance
// for the caller to recover.
func callFlushListener(ctx context.Context, l FlushListener, key rein.SessionKey) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = rein.Errorf(rein.CodeInternal, "flush listener panicked: %v", fmt.Sprint(p))
		}
	}()
	return l(ctx, key)
}
