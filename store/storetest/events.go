package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"Events/AppendFillsAndRoundTrips", testEventsRoundTrip},
	test{"Events/SeqsArePerSession", testEventsPerSession},
	test{"Events/InvalidPayloadFailsWholeBatch", testEventsBatchAtomic},
	test{"Events/ReadAfterCursorWithLimit", testEventsRead},
	test{"Events/OtherOwnerIsNotFound", testEventsOtherOwner},
	test{"Events/ConcurrentAppendsGapFree", testEventsConcurrent},
	test{"Events/ValuesAreCopied", testEventsCopies},
	test{"Events/WaitReturnsAtOnceWhenPast", testWaitImmediate},
	test{"Events/WaitWakesOnAppend", testWaitWakes},
	test{"Events/WaitHonoursContext", testWaitContext},
	test{"Events/WaitReturnsOnClose", testWaitClose},
)

func ev(typ rein.EventType, runID string, payload string) rein.Event {
	return rein.Event{Type: typ, RunID: runID, Payload: json.RawMessage(payload)}
}

func testEventsRoundTrip(t *T) {
	key := t.newSession("alice")
	given := time.Date(2030, 1, 1, 0, 0, 0, 999, time.FixedZone("X", 3600))
	in := []rein.Event{
		ev(rein.EventUserMessage, "run_1", `{"text": "hi ✓", "run_id": "run_1"}`),
		{ID: "evt_caller_chosen", Type: rein.EventRunStarted, RunID: "run_1", Payload: json.RawMessage(`{"run_id":"run_1"}`), CreatedAt: given},
		ev(rein.EventSystemMessage, "", `{"text": null, "list": [1, {"a": []}]}`),
		{Type: rein.EventUserSupplement}, // no payload: stored as {}
	}
	out, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, in)
	must(t, err, "AppendEvents")
	if len(out) != len(in) {
		t.Fatalf("AppendEvents returned %d events, want %d", len(out), len(in))
	}
	now := t.now()
	ids := map[string]bool{}
	for i, e := range out {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d seq = %d, want %d", i, e.Seq, i+1)
		}
		if e.SessionID != key.ID {
			t.Fatalf("event %d session id = %q, want %q", i, e.SessionID, key.ID)
		}
		if e.Type != in[i].Type || e.RunID != in[i].RunID {
			t.Fatalf("event %d = %s/%q, want %s/%q", i, e.Type, e.RunID, in[i].Type, in[i].RunID)
		}
		if ids[e.ID] {
			t.Fatalf("event id %q repeated", e.ID)
		}
		ids[e.ID] = true
	}
	if !strings.HasPrefix(out[0].ID, "evt_") || len(out[0].ID) != len("evt_")+26 {
		t.Fatalf("generated event id %q is not evt_ + ULID", out[0].ID)
	}
	if out[1].ID != "evt_caller_chosen" {
		t.Fatalf("caller-chosen id became %q", out[1].ID)
	}
	wantTime(t, out[0].CreatedAt, now, "defaulted CreatedAt")
	wantTime(t, out[1].CreatedAt, given.UTC().Truncate(time.Microsecond), "given CreatedAt")
	if !jsonEqual(out[3].Payload, []byte(`{}`)) {
		t.Fatalf("empty payload returned as %q, want {}", out[3].Payload)
	}

	read, last, err := t.S.ReadEvents(t.Ctx, key, 0, 100)
	must(t, err, "ReadEvents")
	if last != 4 || len(read) != 4 {
		t.Fatalf("ReadEvents = %d events, last %d; want 4, 4", len(read), last)
	}
	for i, e := range read {
		o := out[i]
		if e.Seq != o.Seq || e.ID != o.ID || e.SessionID != o.SessionID || e.RunID != o.RunID || e.Type != o.Type || !sameTime(e.CreatedAt, o.CreatedAt) {
			t.Fatalf("read event %d = %+v, appended %+v", i, e, o)
		}
		want := in[i].Payload
		if len(want) == 0 {
			want = json.RawMessage(`{}`)
		}
		if !jsonEqual(e.Payload, want) {
			t.Fatalf("read event %d payload = %s, want %s", i, e.Payload, want)
		}
	}
	// The wire form (docs/api.md) must survive too.
	b, err := json.Marshal(read[2])
	must(t, err, "marshal event")
	var back rein.Event
	must(t, json.Unmarshal(b, &back), "unmarshal event")
	if back.RunID != "" || back.Seq != 3 {
		t.Fatalf("event JSON round trip = %+v", back)
	}
	lastSeq, err := t.S.LastSeq(t.Ctx, key)
	must(t, err, "LastSeq")
	if lastSeq != 4 {
		t.Fatalf("LastSeq = %d, want 4", lastSeq)
	}
}

func testEventsPerSession(t *T) {
	a, b := t.newSession("alice"), t.newSession("alice")
	lastSeq, err := t.S.LastSeq(t.Ctx, a)
	must(t, err, "LastSeq of an empty log")
	if lastSeq != 0 {
		t.Fatalf("LastSeq of an empty log = %d, want 0", lastSeq)
	}
	for range 3 {
		_, err := t.S.AppendEvents(t.Ctx, a, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{"text":"a"}`)})
		must(t, err, "AppendEvents a")
	}
	out, err := t.S.AppendEvents(t.Ctx, b, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{"text":"b"}`), ev(rein.EventSystemMessage, "", `{"text":"b2"}`)})
	must(t, err, "AppendEvents b")
	if out[0].Seq != 1 || out[1].Seq != 2 {
		t.Fatalf("second session's seqs = %d, %d; want 1, 2", out[0].Seq, out[1].Seq)
	}
	out, err = t.S.AppendEvents(t.Ctx, a, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents a")
	if out[0].Seq != 4 {
		t.Fatalf("first session's next seq = %d, want 4", out[0].Seq)
	}
	out, err = t.S.AppendEvents(t.Ctx, a, store.Fence{}, nil)
	must(t, err, "AppendEvents(nothing)")
	if len(out) != 0 {
		t.Fatalf("appending nothing returned %d events", len(out))
	}
	lastSeq, err = t.S.LastSeq(t.Ctx, a)
	must(t, err, "LastSeq")
	if lastSeq != 4 {
		t.Fatalf("LastSeq after appending nothing = %d, want 4", lastSeq)
	}
}

func testEventsBatchAtomic(t *T) {
	key := t.newSession("alice")
	_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{"text":"first"}`)})
	must(t, err, "AppendEvents")
	_, err = t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{
		ev(rein.EventSystemMessage, "", `{"text":"fine"}`),
		ev(rein.EventSystemMessage, "", `{"text": not json`),
	})
	if err == nil {
		t.Fatal("AppendEvents accepted a payload that is not JSON")
	}
	evs, last, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if last != 1 || len(evs) != 1 {
		t.Fatalf("after a refused batch: %d events, last seq %d; want 1, 1", len(evs), last)
	}
	out, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents after a refused batch")
	if out[0].Seq != 2 {
		t.Fatalf("seq after a refused batch = %d, want 2 (no gap)", out[0].Seq)
	}
}

func testEventsRead(t *T) {
	key := t.newSession("alice")
	var batch []rein.Event
	for i := 1; i <= 25; i++ {
		batch = append(batch, ev(rein.EventMessageDelta, "run_1", fmt.Sprintf(`{"run_id":"run_1","step":1,"text":"%d"}`, i)))
	}
	_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, batch)
	must(t, err, "AppendEvents")
	cases := []struct {
		after    int64
		limit    int
		from, to int64 // expected seqs, inclusive; from > to means none
	}{
		{0, 10, 1, 10},
		{10, 10, 11, 20},
		{20, 10, 21, 25},
		{25, 10, 1, 0},
		{99, 10, 1, 0},
		{3, 1, 4, 4},
		{0, 1000, 1, 25},
	}
	for _, c := range cases {
		evs, last, err := t.S.ReadEvents(t.Ctx, key, c.after, c.limit)
		must(t, err, "ReadEvents")
		if evs == nil {
			t.Fatalf("ReadEvents(after %d) returned nil, want a non-nil slice", c.after)
		}
		if last != 25 {
			t.Fatalf("ReadEvents(after %d) last = %d, want 25", c.after, last)
		}
		want := max(0, c.to-c.from+1)
		if int64(len(evs)) != want {
			t.Fatalf("ReadEvents(after %d, limit %d) = %d events, want %d", c.after, c.limit, len(evs), want)
		}
		for i, e := range evs {
			if e.Seq != c.from+int64(i) {
				t.Fatalf("ReadEvents(after %d) event %d has seq %d, want %d", c.after, i, e.Seq, c.from+int64(i))
			}
			var p rein.MessageDeltaPayload
			must(t, e.DecodePayload(&p), "decode payload")
			if p.Text != fmt.Sprint(e.Seq) {
				t.Fatalf("event seq %d carries payload of event %s", e.Seq, p.Text)
			}
		}
	}
	empty := t.newSession("alice")
	evs, last, err := t.S.ReadEvents(t.Ctx, empty, 0, 10)
	must(t, err, "ReadEvents of an empty log")
	if evs == nil || len(evs) != 0 || last != 0 {
		t.Fatalf("ReadEvents of an empty log = %#v, %d", evs, last)
	}
}

func testEventsOtherOwner(t *T) {
	key := t.newSession("alice")
	_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents")
	intruder := otherOwner(key)
	_, err = t.S.AppendEvents(t.Ctx, intruder, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	wantErr(t, err, rein.ErrNotFound, "AppendEvents as another owner")
	_, _, err = t.S.ReadEvents(t.Ctx, intruder, 0, 10)
	wantErr(t, err, rein.ErrNotFound, "ReadEvents as another owner")
	_, err = t.S.LastSeq(t.Ctx, intruder)
	wantErr(t, err, rein.ErrNotFound, "LastSeq as another owner")
	err = t.S.WaitEvents(t.Ctx, intruder, 0)
	wantErr(t, err, rein.ErrNotFound, "WaitEvents as another owner")
	_, _, err = t.S.ReadEvents(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_never"}, 0, 10)
	wantErr(t, err, rein.ErrNotFound, "ReadEvents of a missing session")
	last, err := t.S.LastSeq(t.Ctx, key)
	must(t, err, "LastSeq")
	if last != 1 {
		t.Fatalf("LastSeq = %d after another owner's append, want 1", last)
	}
}

// 32 goroutines append batches of 1–3 events to one session at once:
// every batch gets consecutive seqs and the log is 1..N without gap or
// duplicate.
func testEventsConcurrent(t *T) {
	key := t.newSession("alice")
	const writers, appends = 32, 15
	type result struct {
		w, i int
		evs  []rein.Event
		err  error
	}
	results := make(chan result, writers*appends)
	parallel(writers, func(w int) {
		for i := range appends {
			n := 1 + (w+i)%3
			batch := make([]rein.Event, n)
			for j := range batch {
				batch[j] = ev(rein.EventMessageDelta, "", fmt.Sprintf(`{"w":%d,"i":%d,"j":%d}`, w, i, j))
			}
			out, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, batch)
			results <- result{w, i, out, err}
		}
	})
	close(results)
	total := 0
	for r := range results {
		if r.err != nil {
			t.Fatalf("writer %d append %d: %v", r.w, r.i, r.err)
		}
		for j := 1; j < len(r.evs); j++ {
			if r.evs[j].Seq != r.evs[0].Seq+int64(j) {
				t.Fatalf("batch seqs %d, %d not contiguous", r.evs[0].Seq, r.evs[j].Seq)
			}
		}
		total += len(r.evs)
	}
	evs, last, err := t.S.ReadEvents(t.Ctx, key, 0, total+10)
	must(t, err, "ReadEvents")
	if last != int64(total) || len(evs) != total {
		t.Fatalf("log has %d events, last seq %d; %d were appended", len(evs), last, total)
	}
	ids := map[string]bool{}
	lastI := map[int]int{}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, e.Seq)
		}
		if ids[e.ID] {
			t.Fatalf("event id %s repeated", e.ID)
		}
		ids[e.ID] = true
		var p struct{ W, I, J int }
		must(t, json.Unmarshal(e.Payload, &p), "payload")
		// A writer's appends are sequential, so they land in its order.
		if prev, seen := lastI[p.W]; seen && p.J == 0 && p.I <= prev {
			t.Fatalf("writer %d append %d stored after its append %d", p.W, p.I, prev)
		}
		if p.J == 0 {
			lastI[p.W] = p.I
		}
	}
}

func testEventsCopies(t *T) {
	key := t.newSession("alice")
	in := []rein.Event{ev(rein.EventSystemMessage, "", `{"text":"orig"}`)}
	out, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, in)
	must(t, err, "AppendEvents")
	in[0].Payload[2] = 'X'
	out[0].Payload[2] = 'Y'
	read, _, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	read[0].Payload[2] = 'Z'
	again, _, err := t.S.ReadEvents(t.Ctx, key, 0, 10)
	must(t, err, "ReadEvents")
	if !jsonEqual(again[0].Payload, []byte(`{"text":"orig"}`)) {
		t.Fatalf("stored payload changed through caller slices: %s", again[0].Payload)
	}
}

func testWaitImmediate(t *T) {
	key := t.newSession("alice")
	_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`), ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents")
	// Nothing else appends: a WaitEvents that waited instead of answering
	// from the log would run into the deadline.
	ctx, cancel := context.WithTimeout(t.Ctx, 10*time.Second)
	defer cancel()
	for _, after := range []int64{0, 1} {
		must(t, t.S.WaitEvents(ctx, key, after), fmt.Sprintf("WaitEvents(after %d) with events past it", after))
	}
	_, err = t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
	must(t, err, "AppendEvents")
	must(t, t.S.WaitEvents(ctx, key, 2), "WaitEvents(after 2)")
}

func testWaitWakes(t *T) {
	key := t.newSession("alice")
	for round := int64(0); round < 3; round++ {
		waiting := make(chan struct{})
		woke := make(chan error, 1)
		go func() {
			close(waiting)
			woke <- t.S.WaitEvents(t.Ctx, key, round)
		}()
		<-waiting
		select {
		case err := <-woke:
			t.Fatalf("WaitEvents(after %d) returned %v before anything was appended", round, err)
		default:
		}
		_, err := t.S.AppendEvents(t.Ctx, key, store.Fence{}, []rein.Event{ev(rein.EventSystemMessage, "", `{}`)})
		must(t, err, "AppendEvents")
		select {
		case err := <-woke:
			must(t, err, "WaitEvents")
		case <-time.After(10 * time.Second):
			t.Fatalf("WaitEvents(after %d) did not wake within 10s of an append", round)
		}
	}
}

func testWaitContext(t *T) {
	key := t.newSession("alice")
	ctx, cancel := context.WithCancel(t.Ctx)
	done := make(chan error, 1)
	go func() { done <- t.S.WaitEvents(ctx, key, 0) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitEvents after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitEvents did not return within 10s of its context ending")
	}
	ctx, cancel = context.WithTimeout(t.Ctx, time.Millisecond)
	defer cancel()
	if err := t.S.WaitEvents(ctx, key, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEvents with a deadline = %v, want context.DeadlineExceeded", err)
	}
}

func testWaitClose(t *T) {
	key := t.newSession("alice")
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(waiting)
		done <- t.S.WaitEvents(t.Ctx, key, 0)
	}()
	<-waiting
	must(t, t.S.Close(), "Close")
	select {
	case err := <-done:
		// Returning nil would send a caller that loops "read, then wait"
		// into a hot loop on a closed store.
		if err == nil {
			t.Fatal("WaitEvents returned nil on Close, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitEvents did not return within 10s of Close")
	}
}
