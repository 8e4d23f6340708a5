package scripted

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

// TestDemoCountsSlowly: "count slowly to 20" is the demo's run that is long
// enough to steer by hand (the README's walkthrough sends it a note and a
// stop). Every number is its own step that calls sleep, so the run has a step
// boundary — where a note is read — about every second, and the 20th step
// ends the run.
func TestDemoCountsSlowly(t *testing.T) {
	m := Demo()
	m.rules = withoutDelays(m.rules)
	const input = "count slowly to 20"
	var msgs []rein.Message
	msgs = append(msgs, rein.Message{Role: rein.RoleUser, Text: input})
	var total time.Duration
	for step := 1; step <= 20; step++ {
		req := &model.Request{Input: input, Step: step, RunID: "run_1", Messages: msgs}
		if step == 5 {
			// A note consumed into this request: the demo says it saw it.
			msgs = append(msgs, rein.Message{Role: rein.RoleUser, Text: "answer in French", Hint: &rein.Hint{ID: "sup_1", Source: "user"}, RunID: "run_1", Step: 5})
			req.Messages = msgs
		}
		got := collect(t, m, req)
		text := got.text()
		if !strings.Contains(text, strconv.Itoa(step)) {
			t.Errorf("step %d says %q, not its number", step, text)
		}
		if step == 1 && !strings.HasPrefix(text, "Counting slowly to 20") {
			t.Errorf("step 1 = %q", text)
		}
		if hinted := strings.Contains(text, "(noted: answer in French)"); hinted != (step == 5) {
			t.Errorf("step %d = %q: the note must be echoed in the step that read it, and only there", step, text)
		}
		if step == 20 {
			if got.finish != model.FinishStop || len(got.calls) != 0 {
				t.Fatalf("step 20 must end the run: %+v", got)
			}
			break
		}
		if got.finish != model.FinishToolCalls || len(got.calls) != 1 || got.calls[0].Name != "sleep" {
			t.Fatalf("step %d must call sleep: %+v", step, got)
		}
		var in struct{ Seconds float64 }
		if err := json.Unmarshal(got.calls[0].Input, &in); err != nil || in.Seconds <= 0 {
			t.Fatalf("step %d sleep input %s: %v", step, got.calls[0].Input, err)
		}
		total += time.Duration(in.Seconds * float64(time.Second))
		msgs = append(msgs,
			rein.Message{Role: rein.RoleAssistant, Text: text, ToolCalls: got.calls},
			rein.Message{Role: rein.RoleTool, ToolCallID: got.calls[0].ID, Text: "slept"})
	}
	// Long enough to steer by hand, short enough to wait for.
	if total < 10*time.Second || total > 30*time.Second {
		t.Errorf("the count sleeps %v in all", total)
	}
}
