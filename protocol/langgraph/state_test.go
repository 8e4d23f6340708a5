package langgraph

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// events builds a log: each entry a type and its payload.
func events(t *testing.T, run string, specs ...any) []rein.Event {
	t.Helper()
	var out []rein.Event
	for i := 0; i < len(specs); i += 2 {
		b, err := json.Marshal(specs[i+1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rein.Event{Seq: int64(len(out) + 1), ID: "evt_" + string(rune('a'+len(out))), RunID: run, Type: specs[i].(rein.EventType), Payload: b})
	}
	return out
}

func chunks(f *fold) []string {
	var out []string
	for _, fr := range f.out {
		if fr.event == "messages" {
			out = append(out, fr.data.([]any)[0].(map[string]any)["content"].(string))
		}
	}
	return out
}

// TestRestartedStepShowsNoTextTwice: a step made again after its instance
// was lost streams only what its redo says beyond what was shown; a redo
// that says something else streams whole, and the state holds the redo's
// text only.
func TestRestartedStepShowsNoTextTwice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		redo   []string
		chunks []string
		final  string
	}{
		{"repeats then goes on", []string{"hel", "lo wor", "ld"}, []string{"hel", "lo", " wor", "ld"}, "hello world"},
		{"says something else", []string{"bye"}, []string{"hel", "lo", "bye"}, "bye"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := "run_1"
			specs := []any{
				rein.EventUserMessage, rein.UserMessagePayload{Text: "hi", RunID: run},
				rein.EventRunStarted, rein.RunStartedPayload{RunID: run},
				rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: "hel"},
				rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: "lo"},
				rein.EventStepRestarted, rein.StepRestartedPayload{RunID: run, Step: 1, Attempt: 2},
			}
			for _, r := range tc.redo {
				specs = append(specs, rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: r})
			}
			specs = append(specs,
				rein.EventMessage, rein.MessagePayload{RunID: run, Text: tc.final, Reason: rein.ReasonStop},
				rein.EventRunCompleted, rein.RunCompletedPayload{RunID: run, Status: rein.StatusCompleted, Reason: rein.ReasonStop})
			f := newFold("t")
			f.render(run, []string{"messages-tuple", "values"})
			for _, e := range events(t, run, specs...) {
				f.event(e)
			}
			if got := chunks(f); strings.Join(got, "|") != strings.Join(tc.chunks, "|") {
				t.Fatalf("chunks %q, want %q", got, tc.chunks)
			}
			msgs := f.head().msgs
			if len(msgs) != 2 || msgs[1].v["content"] != tc.final {
				t.Fatalf("state %v, want the human message and %q", msgs, tc.final)
			}
		})
	}
}
