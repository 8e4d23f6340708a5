package sessions

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// writer is a run's ordered event writer: agent.Sink (and agent.DeltaSink)
// over the session log.
//
// Emit queues and returns; one drain goroutine at a time appends whatever
// has queued since its last append, so a burst of streamed deltas costs one
// durable append per batch rather than one per chunk, and consecutive
// deltas of the same step are coalesced into one event (docs/api.md allows
// it). Order is kept: events are appended in Emit order. A failed append is
// remembered and returned by the next Emit and by Flush. On a store whose
// appends are immediate (the memory store) an event that is not a delta is
// appended by Emit itself, unless a drain is already in flight (then it
// queues behind it, and a Flush waits for both): there a hand-off to a
// goroutine cost more than the append.
//
// A delta is queued as its text, not as an encoded event: the deltas a
// batch coalesces are joined as strings and encoded once, when the batch
// is appended. Encoding each chunk and decoding it again to merge it cost
// more than the rest of a streamed step, and grew with the square of the
// text when a slow store let a long stream pile up.
type writer struct {
	st      store.EventLog
	key     rein.SessionKey
	observe func(time.Duration, int)

	mu    sync.Mutex
	fence store.Fence
	queue []item
	busy  bool
	// running: a drain is appending (busy and not only started).
	running bool
	err     error
	idle    chan struct{} // closed when the queue drains; made by a Flush that waits
	// spare is the last batch's backing array, reused by the next.
	spare []item
	// inline: the store's appends complete without I/O (store.Immediate),
	// so events other than deltas are appended by whoever queues them, and
	// a Flush makes a drain that was started but has not run (see start).
	inline bool
	// deltaAt is when the last delta was queued; burst: the one before it
	// came less than deltaBurst earlier (a model streaming faster than
	// appends are made: its deltas coalesce on a drain goroutine).
	deltaAt time.Time
	burst   bool
	// clock, when set, stands for time.Now in noteDelta: a test that
	// makes a burst must not depend on how soon its goroutine runs.
	clock func() time.Time
	// async: the store takes appends without a waiter
	// (store.AsyncAppender), so a batch is handed to it rather than to a
	// drain goroutine that would wait for its commit; appended is its
	// answer (a method value made once), and the batch in flight is
	// inflight, its events evs, handed over at sent.
	async    store.AsyncAppender
	appended func([]rein.Event, error)
	inflight []item
	evs      []rein.Event
	sent     time.Time
}

// deltaBurst is the gap between two deltas under which, on an immediate
// store, they are left to a drain goroutine to coalesce rather than each
// appended inline: a model that streams its chunks back to back would
// otherwise make one event (and wake every reader) per chunk, while one
// that pauses between chunks — any real model — gains nothing from the
// wait.
const deltaBurst = 200 * time.Microsecond

// item is one queued event: ev, or (delta) the text of an
// agent.message.delta of run and step, encoded when it is appended: text,
// or once a second chunk is merged into it, more.
type item struct {
	ev    rein.Event
	delta bool
	run   string
	step  int
	text  string
	more  []byte
}

func newWriter(st store.EventLog, key rein.SessionKey, observe func(time.Duration, int)) *writer {
	w := &writer{st: st, key: key, observe: observe}
	if im, ok := st.(store.Immediate); ok && im.Immediate() {
		w.inline = true
	} else if as, ok := st.(store.AsyncAppender); ok {
		w.async = as
		w.appended = w.onAppended
	}
	return w
}

// setFence makes later appends carry the run's lease token.
func (w *writer) setFence(f store.Fence) {
	w.mu.Lock()
	w.fence = f
	w.mu.Unlock()
}

// Emit implements agent.Sink. An agent.message.delta that follows one of
// the same run and step is merged into it.
func (w *writer) Emit(_ context.Context, evs ...rein.Event) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	delta := false
	for _, e := range evs {
		if e.Type == rein.EventMessageDelta {
			var p rein.MessageDeltaPayload
			if json.Unmarshal(e.Payload, &p) == nil && p.RunID == e.RunID {
				w.addDelta(e.RunID, p.Step, p.Text)
				delta = true
				continue
			}
		}
		w.queue = append(w.queue, item{ev: e})
	}
	w.start(delta && w.burst)
	return nil
}

// EmitDelta implements agent.DeltaSink: Emit of an agent.message.delta,
// without the encoding.
func (w *writer) EmitDelta(_ context.Context, runID string, step int, text string) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.addDelta(runID, step, text)
	w.start(w.burst)
	return nil
}

// addDelta queues a delta's text, merged into the last queued item when
// that is a delta of the same run and step. Called with mu held.
func (w *writer) addDelta(runID string, step int, text string) {
	if w.inline {
		w.noteDelta()
	}
	if n := len(w.queue); n > 0 {
		if last := &w.queue[n-1]; last.delta && last.run == runID && last.step == step {
			if last.more == nil {
				last.more = append(make([]byte, 0, 2*(len(last.text)+len(text))), last.text...)
			}
			last.more = append(last.more, text...)
			return
		}
	}
	w.queue = append(w.queue, item{delta: true, run: runID, step: step, text: text})
}

// noteDelta records that a delta was queued now (deltaAt, burst). Called
// with mu held, on an immediate store only.
func (w *writer) noteDelta() {
	var now time.Time
	if w.clock != nil {
		now = w.clock()
	} else {
		now = time.Now()
	}
	// A run's first delta is never a burst: it is appended at once, so
	// the first text reaches readers without a hand-off.
	w.burst = !w.deltaAt.IsZero() && now.Sub(w.deltaAt) < deltaBurst
	w.deltaAt = now
}

// start starts a drain unless one runs, and unlocks mu (held by the
// caller). A drain goroutine appends while the caller goes on — except on
// a store whose appends are immediate (inline): there the caller drains
// before it returns, unless deltas are coming in a burst (deltaBurst),
// which go to a goroutine so that the chunks a model streams meanwhile
// coalesce into one event; appended one by one they cost more (and woke
// every reader once per chunk). burst: what the caller queued holds a
// delta that came in a burst. An inline drain's append errors are
// remembered like a goroutine's (the next Emit or Flush reports them).
func (w *writer) start(burst bool) {
	if w.busy || len(w.queue) == 0 {
		w.mu.Unlock()
		return
	}
	w.busy = true
	if w.inline && !burst {
		w.running = true
		w.mu.Unlock()
		w.drain()
		return
	}
	if w.async != nil {
		w.running = true
		w.sendLocked()
		return
	}
	w.mu.Unlock()
	go w.drainAsync()
}

// sendLocked hands the queue to the store as one append (async), or ends
// the drain when nothing is left. Called with mu held and the drain
// running; unlocks mu. Handing over waits only while the store's queue is
// full (thousands of operations behind; admission control refuses new
// runs and sessions meanwhile): the caller — the run — then waits for the
// store, as a drain goroutine would have.
func (w *writer) sendLocked() {
	batch := w.takeLocked()
	fence := w.fence
	w.mu.Unlock()
	if batch == nil {
		return
	}
	w.inflight = batch
	w.evs = encodeBatch(w.evs[:0], batch)
	// Events the run produced must be written even if the run is being
	// cancelled: the append takes no context of the run's (see drain).
	w.sent = time.Now()
	w.async.AppendEventsAsync(w.key, fence, w.evs, w.appended)
}

// onAppended is the store's answer to the batch in flight, on the
// store's writer goroutine: it must not wait, nor call the store, so
// what queued meanwhile goes to the store from a goroutine of its own.
func (w *writer) onAppended(_ []rein.Event, err error) {
	if w.observe != nil {
		w.observe(time.Since(w.sent), len(w.evs))
	}
	batch := w.inflight
	w.inflight = nil
	clear(batch)
	clear(w.evs)
	w.mu.Lock()
	w.appendedLocked(batch, err)
	if len(w.queue) == 0 || w.err != nil {
		w.idleLocked()
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	go w.sendNext()
}

// sendNext sends what queued while the last batch was in flight.
func (w *writer) sendNext() {
	w.mu.Lock()
	w.sendLocked()
}

// takeLocked takes the queue as the next batch to append, or ends the
// drain (idleLocked) and returns nil when nothing is left or an append
// failed. Called with mu held.
func (w *writer) takeLocked() []item {
	batch := w.queue
	w.queue, w.spare = w.spare[:0], nil
	if len(batch) == 0 || w.err != nil {
		w.idleLocked()
		return nil
	}
	return batch
}

// appendedLocked records a batch's append: the first error, and the
// batch's array (cleared) for the next batch. Called with mu held.
func (w *writer) appendedLocked(batch []item, err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
	if w.spare == nil {
		w.spare = batch[:0]
	}
}

// idleLocked ends a drain: nothing is in flight, and a Flush waiting for
// that returns. Called with mu held.
func (w *writer) idleLocked() {
	w.busy, w.running = false, false
	if w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// encodeBatch appends to evs the events of batch, encoding its deltas.
func encodeBatch(evs []rein.Event, batch []item) []rein.Event {
	for i := range batch {
		it := &batch[i]
		if it.delta {
			text := it.text
			if it.more != nil {
				text = string(it.more)
			}
			it.ev = rein.NewEvent(rein.EventMessageDelta, it.run, rein.MessageDeltaPayload{RunID: it.run, Step: it.step, Text: text})
		}
		evs = append(evs, it.ev)
	}
	return evs
}

// drainAsync is a drain goroutine: it drains unless the drain was taken
// meanwhile (a Flush on an immediate store drains what it waits for
// itself rather than wait for this goroutine to be scheduled) or is over.
func (w *writer) drainAsync() {
	w.mu.Lock()
	if !w.busy || w.running {
		w.mu.Unlock()
		return
	}
	w.running = true
	w.mu.Unlock()
	w.drain()
}

func (w *writer) drain() {
	var evs []rein.Event
	for {
		w.mu.Lock()
		batch := w.takeLocked()
		fence := w.fence
		w.mu.Unlock()
		if batch == nil {
			return
		}
		evs = encodeBatch(evs[:0], batch)
		// Events the run produced must be written even if the run is being
		// cancelled, so the append does not take the run's context. It has
		// no deadline of its own either: a timer per batch was a tenth of
		// a short run's cost, and the store bounds its own waits (and
		// fails them when it closes); whoever waits for the append (Flush)
		// waits with its own deadline.
		t0 := time.Now()
		_, err := w.st.AppendEvents(context.Background(), w.key, fence, evs)
		if w.observe != nil {
			w.observe(time.Since(t0), len(evs))
		}
		clear(batch)
		clear(evs)
		w.mu.Lock()
		w.appendedLocked(batch, err)
		w.mu.Unlock()
	}
}

// Flush waits until every emitted event is appended and returns the first
// append error.
func (w *writer) Flush(ctx context.Context) error {
	for {
		w.mu.Lock()
		if !w.busy {
			err := w.err
			w.mu.Unlock()
			return err
		}
		if w.inline && !w.running {
			// A drain goroutine was started but has not run yet: the
			// append is immediate, so make it here.
			w.running = true
			w.mu.Unlock()
			w.drain()
			continue
		}
		// Made by the first to wait: a drain nobody waits for makes none.
		if w.idle == nil {
			w.idle = make(chan struct{})
		}
		idle := w.idle
		w.mu.Unlock()
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
