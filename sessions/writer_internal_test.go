package sessions

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// gatedLog is an event log whose appends wait for a gate, so that what a
// writer coalesces while its first append is held is known.
type gatedLog struct {
	store.EventLog
	entered chan struct{} // an append began (buffered)
	gate    chan struct{}
	mu      sync.Mutex
	batches [][]rein.Event
}

func (g *gatedLog) AppendEvents(ctx context.Context, key rein.SessionKey, f store.Fence, evs []rein.Event) ([]rein.Event, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	g.mu.Lock()
	g.batches = append(g.batches, append([]rein.Event(nil), evs...))
	g.mu.Unlock()
	return g.EventLog.AppendEvents(ctx, key, f, evs)
}

// While an append is in flight, the deltas of one step queue as text and
// leave as one event with the text joined and correctly encoded; a delta
// of another step or run, or any other event in between, starts a new
// one, and the order of everything is kept. Deltas given to Emit as
// encoded events merge exactly as those given to EmitDelta.
func TestWriterCoalescesDeltasWithoutReencoding(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	sess := &store.Session{Owner: "o", ID: "ses_w"}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	g := &gatedLog{EventLog: st, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	w := newWriter(g, sess.Key(), nil)
	delta := func(run string, step int, text string) rein.Event {
		return rein.NewEvent(rein.EventMessageDelta, run, rein.MessageDeltaPayload{RunID: run, Step: step, Text: text})
	}
	// The first delta starts an append, which the gate holds.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.EmitDelta(ctx, "run_a", 1, "first"))
	<-g.entered
	must(w.EmitDelta(ctx, "run_a", 1, `He said "<hi>" `))
	must(w.Emit(ctx, delta("run_a", 1, "& left\n")))
	must(w.EmitDelta(ctx, "run_a", 1, "…ok"))
	must(w.EmitDelta(ctx, "run_a", 2, "step two"))
	restart := rein.NewEvent(rein.EventStepRestarted, "run_a", rein.StepRestartedPayload{RunID: "run_a", Step: 2, Attempt: 2})
	must(w.Emit(ctx, restart))
	must(w.EmitDelta(ctx, "run_a", 2, " again"))
	must(w.EmitDelta(ctx, "run_b", 2, "other run"))
	close(g.gate)
	must(w.Flush(ctx))

	evs, _, err := st.ReadEvents(ctx, sess.Key(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		typ  rein.EventType
		run  string
		step int
		text string
	}
	wants := []want{
		{rein.EventMessageDelta, "run_a", 1, "first"},
		{rein.EventMessageDelta, "run_a", 1, "He said \"<hi>\" & left\n…ok"},
		{rein.EventMessageDelta, "run_a", 2, "step two"},
		{rein.EventStepRestarted, "run_a", 0, ""},
		{rein.EventMessageDelta, "run_a", 2, " again"},
		{rein.EventMessageDelta, "run_b", 2, "other run"},
	}
	if len(evs) != len(wants) {
		t.Fatalf("log has %d events, want %d: %+v", len(evs), len(wants), evs)
	}
	for i, w := range wants {
		e := evs[i]
		if e.Type != w.typ || e.RunID != w.run {
			t.Fatalf("event %d is %s of %s, want %s of %s", i, e.Type, e.RunID, w.typ, w.run)
		}
		if w.typ != rein.EventMessageDelta {
			if string(e.Payload) != string(restart.Payload) {
				t.Fatalf("event %d payload %s, want %s", i, e.Payload, restart.Payload)
			}
			continue
		}
		var p rein.MessageDeltaPayload
		if err := e.DecodePayload(&p); err != nil {
			t.Fatal(err)
		}
		if p.RunID != w.run || p.Step != w.step || p.Text != w.text {
			t.Fatalf("event %d payload %+v, want %+v", i, p, w)
		}
		// The encoding is the one every event gets.
		if again := delta(p.RunID, p.Step, p.Text); string(again.Payload) != string(e.Payload) {
			t.Fatalf("event %d encoded as %s, want %s", i, e.Payload, again.Payload)
		}
	}
	if len(g.batches) != 2 || len(g.batches[0]) != 1 {
		t.Fatalf("appends: %d, first of %d events; want the first delta alone, then the rest in one", len(g.batches), len(g.batches[0]))
	}
}

// A failed append is returned by the next Emit, EmitDelta and Flush.
func TestWriterReportsAFailedAppend(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	w := newWriter(st, rein.SessionKey{Owner: "o", ID: "ses_missing"}, nil)
	if err := w.EmitDelta(ctx, "run_a", 1, "x"); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err == nil {
		t.Fatal("Flush after an append to a missing session: no error")
	}
	if err := w.EmitDelta(ctx, "run_a", 1, "y"); err == nil {
		t.Fatal("EmitDelta after a failed append: no error")
	}
	if err := w.Emit(ctx, rein.NewEvent(rein.EventStepRestarted, "run_a", rein.StepRestartedPayload{RunID: "run_a"})); err == nil {
		t.Fatal("Emit after a failed append: no error")
	}
}

// immediateLog is an event log that says its appends are immediate.
type immediateLog struct{ store.EventLog }

func (immediateLog) Immediate() bool { return true }

// On an immediate store (the memory store) an event that is not a delta is
// appended before Emit returns, on the caller's goroutine; deltas still go
// through a drain goroutine so that a stream's chunks coalesce, and Flush
// returns once they are appended. A failed inline append is reported by
// the next Emit and by Flush, as a drain goroutine's.
func TestWriterAppendsInlineOnImmediateStore(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	sess := &store.Session{Owner: "o", ID: "ses_w"}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	if w := newWriter(st, sess.Key(), nil); !w.inline {
		t.Fatal("a writer over the memory store does not append inline")
	}
	log := immediateLog{st}
	w := newWriter(log, sess.Key(), nil)
	ev := rein.NewEvent(rein.EventStepRestarted, "run_a", rein.StepRestartedPayload{RunID: "run_a", Step: 1, Attempt: 2})
	if err := w.Emit(ctx, ev); err != nil {
		t.Fatal(err)
	}
	// No Flush: the append was made by Emit itself.
	if n, err := st.LastSeq(ctx, sess.Key()); err != nil || n != 1 {
		t.Fatalf("after an inline Emit the log holds %d events (%v), want 1", n, err)
	}
	// The run's first delta is appended at once too; the ones right
	// behind it come in a burst and may coalesce on a drain goroutine.
	if err := w.EmitDelta(ctx, "run_a", 1, "a"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.LastSeq(ctx, sess.Key()); err != nil || n != 2 {
		t.Fatalf("after the first delta the log holds %d events (%v), want 2", n, err)
	}
	for _, text := range []string{"b", "c"} {
		if err := w.EmitDelta(ctx, "run_a", 1, text); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _, err := st.ReadEvents(ctx, sess.Key(), 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, e := range evs {
		var p rein.MessageDeltaPayload
		if e.Type != rein.EventMessageDelta || e.DecodePayload(&p) != nil {
			t.Fatalf("unexpected event %s %s", e.Type, e.Payload)
		}
		text += p.Text
	}
	if text != "abc" || len(evs) > 3 {
		t.Fatalf("deltas appended as %d events joining %q, want at most 3 joining \"abc\"", len(evs), text)
	}
	// A delta long after the last one (a model that pauses between
	// chunks, as real ones do) is appended at once as well.
	w.mu.Lock()
	w.deltaAt = w.deltaAt.Add(-time.Second)
	w.mu.Unlock()
	before, _ := st.LastSeq(ctx, sess.Key())
	if err := w.EmitDelta(ctx, "run_a", 1, "d"); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.LastSeq(ctx, sess.Key()); n != before+1 {
		t.Fatalf("a delta after a pause: the log holds %d events, want %d", n, before+1)
	}

	bad := newWriter(immediateLog{st}, rein.SessionKey{Owner: "o", ID: "ses_missing"}, nil)
	if err := bad.Emit(ctx, ev); err != nil {
		t.Fatalf("the failing Emit itself: %v (its error is for the next call)", err)
	}
	if err := bad.Emit(ctx, ev); err == nil {
		t.Fatal("Emit after a failed inline append: no error")
	}
	if err := bad.Flush(ctx); err == nil {
		t.Fatal("Flush after a failed inline append: no error")
	}
}

// gatedImmediateLog is a gatedLog that says its appends are immediate.
type gatedImmediateLog struct{ *gatedLog }

func (gatedImmediateLog) Immediate() bool { return true }

// On an immediate store, a delta that comes in a burst (less than
// deltaBurst after the one before) is not appended by EmitDelta: it goes to
// a drain goroutine, so EmitDelta returns while that append is held, and
// the deltas queued meanwhile leave as one event. Flush waits for both.
func TestWriterBurstGoesToADrain(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	sess := &store.Session{Owner: "o", ID: "ses_b"}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	g := &gatedLog{EventLog: st, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	w := newWriter(gatedImmediateLog{g}, sess.Key(), nil)
	if !w.inline {
		t.Fatal("the writer does not see an immediate store")
	}
	// Every delta is queued at the instant the one before was: however
	// late the goroutine below runs, each is a burst.
	at := time.Now()
	w.clock = func() time.Time { return at }
	burst := func(text string) {
		t.Helper()
		w.mu.Lock()
		w.deltaAt = at // the delta before came just now
		w.mu.Unlock()
		done := make(chan error, 1)
		go func() { done <- w.EmitDelta(ctx, "run_a", 1, text) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("EmitDelta(%q) of a burst waited for the held append: it was appended inline", text)
		}
	}
	burst("a")
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no drain began appending the burst")
	}
	burst("b")
	burst("c")
	close(g.gate)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, b := range g.batches {
		for _, e := range b {
			var p rein.MessageDeltaPayload
			if err := e.DecodePayload(&p); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, p.Text)
		}
	}
	if !slices.Equal(texts, []string{"a", "bc"}) {
		t.Fatalf("deltas appended %q, want [a bc]: the ones queued behind the held append coalesce", texts)
	}
}

// asyncLog is an event log that takes appends without a waiter
// (store.AsyncAppender) and answers each only when the test says so, from
// a goroutine of its own as a store's writer would.
type asyncLog struct {
	store.EventLog
	sent    chan asyncAppend // every append handed over (buffered)
	syncs   chan struct{}    // an AppendEvents call, which must not happen (buffered)
	answers sync.WaitGroup
}

type asyncAppend struct {
	evs    []rein.Event
	answer func(err error) // appends to the log unless err, then calls then
}

func (a *asyncLog) AppendEvents(ctx context.Context, key rein.SessionKey, f store.Fence, evs []rein.Event) ([]rein.Event, error) {
	a.syncs <- struct{}{}
	return a.EventLog.AppendEvents(ctx, key, f, evs)
}

func (a *asyncLog) AppendEventsAsync(key rein.SessionKey, f store.Fence, evs []rein.Event, then func([]rein.Event, error)) {
	own := slices.Clone(evs) // the caller may reuse evs once this returns
	a.sent <- asyncAppend{evs: own, answer: func(err error) {
		a.answers.Add(1)
		go func() {
			defer a.answers.Done()
			if err != nil {
				then(nil, err)
				return
			}
			then(a.EventLog.AppendEvents(context.Background(), key, f, own))
		}()
	}}
}

// On a store that takes appends without a waiter, the writer hands it one
// batch at a time, with no goroutine of its own waiting: what is emitted
// while a batch is in flight queues (deltas of a step coalescing), goes
// as the next batch once the store answers, and Flush returns only when
// everything is answered.
func TestWriterHandsBatchesToAnAsyncStore(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	sess := &store.Session{Owner: "o", ID: "ses_async"}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	a := &asyncLog{EventLog: st, sent: make(chan asyncAppend, 8), syncs: make(chan struct{}, 8)}
	w := newWriter(a, sess.Key(), nil)
	if w.async == nil {
		t.Fatal("the writer did not take the store as asynchronous")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.EmitDelta(ctx, "run_a", 1, "one"))
	// Handed over before EmitDelta returned: no goroutine in between.
	first := <-a.sent
	must(w.EmitDelta(ctx, "run_a", 1, " two"))
	must(w.EmitDelta(ctx, "run_a", 1, " three"))
	must(w.Emit(ctx, rein.NewEvent(rein.EventStepRestarted, "run_a", rein.StepRestartedPayload{RunID: "run_a", Step: 1, Attempt: 2})))
	select {
	case b := <-a.sent:
		t.Fatalf("a second batch (%d events) was sent while the first was in flight", len(b.evs))
	default:
	}
	// Flush waits for the batch in flight: bounded, it runs out.
	mustWait := func(what string) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := w.Flush(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Flush with %s: %v, want it to wait until its deadline", what, err)
		}
	}
	mustWait("the first batch in flight")
	flushed := make(chan error, 1)
	go func() { flushed <- w.Flush(ctx) }()
	first.answer(nil)
	second := <-a.sent
	if len(second.evs) != 2 {
		t.Fatalf("second batch has %d events, want the coalesced delta and the restart", len(second.evs))
	}
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) with a batch in flight", err)
	default:
	}
	mustWait("the second batch in flight")
	second.answer(nil)
	must(<-flushed)
	a.answers.Wait()

	evs, _, err := st.ReadEvents(ctx, sess.Key(), 0, 100)
	must(err)
	var texts []string
	for _, e := range evs {
		if e.Type == rein.EventMessageDelta {
			var p rein.MessageDeltaPayload
			must(e.DecodePayload(&p))
			texts = append(texts, p.Text)
		} else {
			texts = append(texts, string(e.Type))
		}
	}
	if want := []string{"one", " two three", string(rein.EventStepRestarted)}; !slices.Equal(texts, want) {
		t.Fatalf("log %q, want %q", texts, want)
	}
	if len(a.syncs) != 0 {
		t.Fatalf("%d appends went through AppendEvents", len(a.syncs))
	}

	// A failed batch is reported by the next Flush and Emit, and what
	// queued behind it is not sent.
	must(w.EmitDelta(ctx, "run_a", 2, "x"))
	failing := <-a.sent
	must(w.EmitDelta(ctx, "run_a", 2, "y"))
	failing.answer(rein.ErrNotFound)
	if err := w.Flush(ctx); err == nil {
		t.Fatal("Flush after a failed asynchronous append: no error")
	}
	a.answers.Wait()
	if err := w.EmitDelta(ctx, "run_a", 2, "z"); err == nil {
		t.Fatal("EmitDelta after a failed asynchronous append: no error")
	}
	select {
	case b := <-a.sent:
		t.Fatalf("a batch of %d events was sent after a failed one", len(b.evs))
	default:
	}
}
