package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

var _ = register(
	test{"History/RoundTripEveryField", testHistoryRoundTrip},
	test{"History/EmptyIsNotNil", testHistoryEmpty},
	test{"History/OtherOwnerIsNotFound", testHistoryOtherOwner},
	test{"History/ConcurrentBatchesStayWhole", testHistoryConcurrentBatches},
	test{"History/ValuesAreCopied", testHistoryCopies},
)

// transcript uses every field of rein.Message, including a tool call whose
// input is not valid JSON (models produce those; the transcript must keep
// them so the registry can answer with an error result).
func transcript() []rein.Message {
	return []rein.Message{
		{Role: rein.RoleUser, Text: "hello — ünïcode ✓ \"quoted\" \\ back\nslash", RunID: "run_1", Step: 0},
		{Role: rein.RoleAssistant, Text: "calling tools", RunID: "run_1", Step: 1, ToolCalls: []rein.ToolCall{
			{ID: "call_1", Name: "search", Input: json.RawMessage(`{"q": "go", "n": [1, 2.5, null], "deep": {"x": true}}`)},
			{ID: "call_2", Name: "broken", Input: json.RawMessage(`{"q": "unterminated`)},
			{ID: "call_3", Name: "noargs", Input: json.RawMessage(`{}`)},
		}},
		{Role: rein.RoleTool, ToolCallID: "call_1", ToolName: "search", Text: "result", RunID: "run_1", Step: 1},
		{Role: rein.RoleTool, ToolCallID: "call_2", ToolName: "broken", Text: "invalid input", IsError: true, RunID: "run_1", Step: 1},
		{Role: rein.RoleTool, ToolCallID: "call_3", ToolName: "noargs", Text: "", RunID: "run_1", Step: 1},
		{Role: rein.RoleUser, Text: "note from the user", Hint: &rein.Hint{ID: "sup_1", Source: "user"}, RunID: "run_1", Step: 2},
		{Role: rein.RoleAssistant, Text: "half a sent", Partial: true, RunID: "run_1", Step: 2},
	}
}

func wantMessages(t testing.TB, got, want []rein.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("history has %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if err := sameMessage(got[i], want[i]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

func sameMessage(got, want rein.Message) error {
	g, w := got, want
	g.ToolCalls, w.ToolCalls = nil, nil
	g.Hint, w.Hint = nil, nil
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("got %+v, want %+v", got, want)
	}
	if (got.Hint == nil) != (want.Hint == nil) || (got.Hint != nil && *got.Hint != *want.Hint) {
		return fmt.Errorf("hint = %+v, want %+v", got.Hint, want.Hint)
	}
	if len(got.ToolCalls) != len(want.ToolCalls) {
		return fmt.Errorf("%d tool calls, want %d", len(got.ToolCalls), len(want.ToolCalls))
	}
	for i, c := range want.ToolCalls {
		gc := got.ToolCalls[i]
		if gc.ID != c.ID || gc.Name != c.Name {
			return fmt.Errorf("tool call %d = %s/%s, want %s/%s", i, gc.ID, gc.Name, c.ID, c.Name)
		}
		if json.Valid(c.Input) {
			if !jsonEqual(gc.Input, c.Input) {
				return fmt.Errorf("tool call %d input = %s, want %s", i, gc.Input, c.Input)
			}
		} else if !bytes.Equal(gc.Input, c.Input) {
			// Invalid JSON cannot be normalised, so it must come back as is.
			return fmt.Errorf("tool call %d invalid input = %q, want %q byte for byte", i, gc.Input, c.Input)
		}
	}
	return nil
}

func testHistoryRoundTrip(t *T) {
	key := t.newSession("alice")
	msgs := transcript()
	must(t, t.appendHistory(key, store.Fence{}, msgs[:3]), "AppendHistory(first part)")
	must(t, t.appendHistory(key, store.Fence{}, msgs[3:]), "AppendHistory(rest)")
	must(t, t.appendHistory(key, store.Fence{}, nil), "AppendHistory(nothing)")
	got, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	wantMessages(t, got, msgs)
}

func testHistoryEmpty(t *T) {
	key := t.newSession("alice")
	got, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	if got == nil || len(got) != 0 {
		t.Fatalf("LoadHistory of a new session = %#v, want empty non-nil", got)
	}
}

func testHistoryOtherOwner(t *T) {
	key := t.newSession("alice")
	must(t, t.appendHistory(key, store.Fence{}, transcript()[:1]), "AppendHistory")
	intruder := otherOwner(key)
	_, err := t.S.LoadHistory(t.Ctx, intruder)
	wantErr(t, err, rein.ErrNotFound, "LoadHistory as another owner")
	err = t.appendHistory(intruder, store.Fence{}, transcript()[:1])
	wantErr(t, err, rein.ErrNotFound, "AppendHistory as another owner")
	_, err = t.S.LoadHistory(t.Ctx, rein.SessionKey{Owner: "alice", ID: "ses_never"})
	wantErr(t, err, rein.ErrNotFound, "LoadHistory of a missing session")
	got, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	if len(got) != 1 {
		t.Fatalf("history has %d messages after another owner's append, want 1", len(got))
	}
}

// Appends are atomic and ordered: batches from concurrent writers never
// interleave, and each writer's batches keep their order.
func testHistoryConcurrentBatches(t *T) {
	key := t.newSession("alice")
	const writers, batches, size = 8, 10, 3
	errs := make(chan error, writers*batches)
	parallel(writers, func(w int) {
		for b := range batches {
			msgs := make([]rein.Message, size)
			for i := range msgs {
				msgs[i] = rein.Message{Role: rein.RoleUser, Text: fmt.Sprintf("w%d b%d m%d", w, b, i), Step: b}
			}
			if err := t.appendHistory(key, store.Fence{}, msgs); err != nil {
				errs <- err
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent AppendHistory: %v", err)
	}
	got, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	if len(got) != writers*batches*size {
		t.Fatalf("history has %d messages, want %d", len(got), writers*batches*size)
	}
	nextBatch := make(map[int]int)
	for i := 0; i < len(got); i += size {
		var w, b, m int
		if _, err := fmt.Sscanf(got[i].Text, "w%d b%d m%d", &w, &b, &m); err != nil || m != 0 {
			t.Fatalf("message %d = %q does not start a batch", i, got[i].Text)
		}
		for j := 1; j < size; j++ {
			if want := fmt.Sprintf("w%d b%d m%d", w, b, j); got[i+j].Text != want {
				t.Fatalf("message %d = %q, want %q: batches interleaved", i+j, got[i+j].Text, want)
			}
		}
		if b != nextBatch[w] {
			t.Fatalf("writer %d batch %d stored where batch %d was due", w, b, nextBatch[w])
		}
		nextBatch[w]++
	}
}

func testHistoryCopies(t *T) {
	key := t.newSession("alice")
	msgs := transcript()
	must(t, t.appendHistory(key, store.Fence{}, msgs), "AppendHistory")
	msgs[1].ToolCalls[0].Input[2] = 'X'
	msgs[1].ToolCalls[0].Name = "changed"
	msgs[5].Hint.ID = "changed"
	got, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	got[1].ToolCalls[1].Input[0] = 'Y'
	got[5].Hint.Source = "changed"
	again, err := t.S.LoadHistory(t.Ctx, key)
	must(t, err, "LoadHistory")
	wantMessages(t, again, transcript())
}
