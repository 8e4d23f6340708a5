package agui

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

func logOf(t *testing.T, evs ...any) []rein.Event {
	t.Helper()
	var out []rein.Event
	for i := 0; i < len(evs); i += 2 {
		b, err := json.Marshal(evs[i+1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rein.Event{Seq: int64(len(out) + 1), RunID: "run_1", Type: evs[i].(rein.EventType), Payload: b})
	}
	return out
}

// shownText is the text a client that applied frames would hold, by
// message, and the frames' types.
func shownText(frames []frame) (map[string]string, []string) {
	text := map[string]string{}
	var types []string
	for _, f := range frames {
		types = append(types, f.data["type"].(string))
		if f.data["type"] == "TEXT_MESSAGE_CONTENT" {
			text[f.data["messageId"].(string)] += f.data["delta"].(string)
		}
	}
	return text, types
}

// TestRestartedStepShownOnce: a step redone after its instance was lost
// shows only what its redo says beyond what was shown; a redo that says
// something else ends the message and shows the redo as a new one.
func TestRestartedStepShownOnce(t *testing.T) {
	delta := func(s string) rein.MessageDeltaPayload {
		return rein.MessageDeltaPayload{RunID: "run_1", Step: 1, Text: s}
	}
	for _, tc := range []struct {
		name string
		redo []string
		want map[string]string
	}{
		{"same text", []string{"hel", "lo wor", "ld"}, map[string]string{"msg_run_1_1": "hello world"}},
		{"other text", []string{"good", "bye"}, map[string]string{"msg_run_1_1": "hello", "msg_run_1_1_2": "goodbye"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := []any{
				rein.EventUserMessage, rein.UserMessagePayload{Text: "hi", RunID: "run_1"},
				rein.EventRunStarted, rein.RunStartedPayload{RunID: "run_1"},
				rein.EventMessageDelta, delta("hel"),
				rein.EventMessageDelta, delta("lo"),
				rein.EventStepRestarted, rein.StepRestartedPayload{RunID: "run_1", Step: 1, Attempt: 2},
			}
			final := ""
			for _, s := range tc.redo {
				evs = append(evs, rein.EventMessageDelta, delta(s))
				final += s
			}
			evs = append(evs, rein.EventMessage, rein.MessagePayload{RunID: "run_1", Text: final, Reason: rein.ReasonStop},
				rein.EventRunCompleted, rein.RunCompletedPayload{RunID: "run_1", Status: rein.StatusCompleted, Reason: rein.ReasonStop})
			rd := newRenderer("t", "run_1", "client-run")
			for _, e := range logOf(t, evs...) {
				rd.event(e)
			}
			text, types := shownText(rd.out)
			if len(text) != len(tc.want) {
				t.Fatalf("messages %q, want %q (%v)", text, tc.want, types)
			}
			for id, s := range tc.want {
				if text[id] != s {
					t.Fatalf("message %s = %q, want %q (all %q)", id, text[id], s, text)
				}
			}
			if types[0] != "RUN_STARTED" || types[len(types)-1] != "RUN_FINISHED" || !rd.done {
				t.Fatalf("frames %v", types)
			}
			if got := strings.Count(strings.Join(types, " "), "TEXT_MESSAGE_START"); got != strings.Count(strings.Join(types, " "), "TEXT_MESSAGE_END") {
				t.Fatalf("a message left open: %v", types)
			}
		})
	}
}
