package sessions

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// writer is a run's ordered event writer: agent.Sink over the session log.
//
// Emit queues and returns; one drain goroutine at a time appends whatever
// has queued since its last append, so a burst of streamed deltas costs one
// durable append per batch rather than one per chunk, and consecutive
// deltas of the same step are coalesced into one event (docs/api.md allows
// it). Order is kept: events are appended in Emit order. A failed append is
// remembered and returned by the next Emit and by Flush.
type writer struct {
	st      store.EventLog
	key     rein.SessionKey
	observe func(time.Duration, int)

	mu    sync.Mutex
	fence store.Fence
	queue []rein.Event
	busy  bool
	err   error
	idle  chan struct{} // closed when the queue drains; nil while idle
}

func newWriter(st store.EventLog, key rein.SessionKey, observe func(time.Duration, int)) *writer {
	return &writer{st: st, key: key, observe: observe}
}

// setFence makes later appends carry the run's lease token.
func (w *writer) setFence(f store.Fence) {
	w.mu.Lock()
	w.fence = f
	w.mu.Unlock()
}

// Emit implements agent.Sink.
func (w *writer) Emit(_ context.Context, evs ...rein.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	for _, e := range evs {
		if n := len(w.queue); n > 0 && e.Type == rein.EventMessageDelta && w.queue[n-1].Type == rein.EventMessageDelta {
			if merged, ok := mergeDelta(w.queue[n-1], e); ok {
				w.queue[n-1] = merged
				continue
			}
		}
		w.queue = append(w.queue, e)
	}
	if !w.busy && len(w.queue) > 0 {
		w.busy = true
		w.idle = make(chan struct{})
		go w.drain()
	}
	return nil
}

func mergeDelta(a, b rein.Event) (rein.Event, bool) {
	var pa, pb rein.MessageDeltaPayload
	if a.RunID != b.RunID || json.Unmarshal(a.Payload, &pa) != nil || json.Unmarshal(b.Payload, &pb) != nil || pa.Step != pb.Step {
		return a, false
	}
	pa.Text += pb.Text
	return rein.NewEvent(rein.EventMessageDelta, a.RunID, pa), true
}

func (w *writer) drain() {
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		fence := w.fence
		if len(batch) == 0 || w.err != nil {
			w.busy = false
			close(w.idle)
			w.idle = nil
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		// Events the run produced must be written even if the run is being
		// cancelled: the append has its own bounded context.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t0 := time.Now()
		_, err := w.st.AppendEvents(ctx, w.key, fence, batch)
		cancel()
		if w.observe != nil {
			w.observe(time.Since(t0), len(batch))
		}
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
	}
}

// Flush waits until every emitted event is appended and returns the first
// append error.
func (w *writer) Flush(ctx context.Context) error {
	for {
		w.mu.Lock()
		idle, err := w.idle, w.err
		w.mu.Unlock()
		if idle == nil {
			return err
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fail makes every later Emit and Flush return err: the run may write
// nothing more (its lease was lost).
func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.queue = nil
	w.mu.Unlock()
}
