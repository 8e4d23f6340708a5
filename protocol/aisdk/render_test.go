package aisdk

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// chunksOf renders evs for run "r1" and returns the chunks as JSON lines.
func chunksOf(evs ...rein.Event) []string {
	rd := newRunRenderer("c1", "r1")
	for i := range evs {
		evs[i].Seq = int64(i + 1)
		evs[i].ID = "ev" + string(rune('a'+i))
		rd.event(evs[i])
	}
	out := make([]string, len(rd.out))
	for i, c := range rd.out {
		b, _ := json.Marshal(c.data)
		out[i] = string(b)
	}
	return out
}

func delta(step int, text string) rein.Event {
	return rein.NewEvent(rein.EventMessageDelta, "r1", rein.MessageDeltaPayload{RunID: "r1", Step: step, Text: text})
}

func restarted(step, attempt int) rein.Event {
	return rein.NewEvent(rein.EventStepRestarted, "r1", rein.StepRestartedPayload{RunID: "r1", Step: step, Attempt: attempt})
}

func completed(status rein.RunStatus, reason rein.Reason) rein.Event {
	return rein.NewEvent(rein.EventRunCompleted, "r1", rein.RunCompletedPayload{RunID: "r1", Status: status, Reason: reason})
}

// shownText joins the text-delta chunks of each text part, in order.
func shownText(t *testing.T, chunks []string) []string {
	t.Helper()
	var parts []string
	open := map[string]int{}
	for _, c := range chunks {
		var m struct{ Type, ID, Delta string }
		if err := json.Unmarshal([]byte(c), &m); err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case "text-start":
			open[m.ID] = len(parts)
			parts = append(parts, "")
		case "text-delta":
			i, ok := open[m.ID]
			if !ok {
				t.Fatalf("text-delta of a part not open: %s", c)
			}
			parts[i] += m.Delta
		case "text-end":
			if _, ok := open[m.ID]; !ok {
				t.Fatalf("text-end of a part not open: %s", c)
			}
			delete(open, m.ID)
		}
	}
	if len(open) != 0 {
		t.Fatalf("text parts left open: %v", open)
	}
	return parts
}

// A step redone after its server was lost: where the redo repeats what the
// cut request showed, the client sees the text once, in one part.
func TestRestartedStepShowsItsTextOnce(t *testing.T) {
	got := chunksOf(
		rein.NewEvent(rein.EventRunStarted, "r1", rein.RunStartedPayload{RunID: "r1"}),
		delta(1, "Hello, "), delta(1, "wor"),
		restarted(1, 2),
		delta(1, "Hel"), delta(1, "lo, world"), delta(1, "!"),
		rein.NewEvent(rein.EventMessage, "r1", rein.MessagePayload{RunID: "r1", Text: "Hello, world!", Reason: rein.ReasonStop}),
		completed(rein.StatusCompleted, rein.ReasonStop),
	)
	if parts := shownText(t, got); len(parts) != 1 || parts[0] != "Hello, world!" {
		t.Fatalf("text parts %q, want the reply once:\n%s", parts, strings.Join(got, "\n"))
	}
	if !strings.Contains(strings.Join(got, "\n"), `{"type":"data-rein-step-restarted","id":"evd","data":{"attempt":2,"step":1,"text_id":"evb"}}`) {
		t.Fatalf("no restart part naming the cut text part:\n%s", strings.Join(got, "\n"))
	}
}

// A redo that says something else ends the cut part and shows its text in
// a new one; the restart part named the cut part for the client to drop.
func TestRestartedStepThatDivergesOpensANewPart(t *testing.T) {
	got := chunksOf(
		delta(1, "Hello, "), delta(1, "wor"),
		restarted(1, 2),
		delta(1, "Hi"), delta(1, " there"),
		completed(rein.StatusCompleted, rein.ReasonStop),
	)
	parts := shownText(t, got)
	if len(parts) != 2 || parts[0] != "Hello, wor" || parts[1] != "Hi there" {
		t.Fatalf("text parts %q:\n%s", parts, strings.Join(got, "\n"))
	}
}

// Tool results: an error and an in-doubt result are tool-output-error; a
// denied call is tool-output-denied, its synthetic result not shown again.
func TestToolOutcomes(t *testing.T) {
	use := func(id string) rein.Event {
		return rein.NewEvent(rein.EventToolUse, "r1", rein.ToolUsePayload{RunID: "r1", Step: 1, ToolUseID: id, Name: "t", Input: json.RawMessage(`{}`)})
	}
	result := func(id string, isErr, inDoubt bool) rein.Event {
		return rein.NewEvent(rein.EventToolResult, "r1", rein.ToolResultPayload{RunID: "r1", ToolUseID: id, Output: "out", IsError: isErr, InDoubt: inDoubt})
	}
	deny := "no"
	got := strings.Join(chunksOf(
		use("a"), use("b"), use("c"), use("d"),
		rein.NewEvent(rein.EventToolConfirmationRequested, "r1", rein.ToolConfirmationRequestedPayload{RunID: "r1", ToolUseID: "d", Name: "t", Input: json.RawMessage(`{}`)}),
		rein.NewEvent(rein.EventUserToolConfirmation, "r1", rein.UserToolConfirmationPayload{ToolUseID: "d", Allow: false, DenyMessage: &deny}),
		result("a", false, false), result("b", true, false), result("c", true, true), result("d", true, false),
		completed(rein.StatusFailed, rein.ReasonError),
	), "\n")
	for _, want := range []string{
		`{"type":"tool-input-available","toolCallId":"a","toolName":"t","input":{}}`,
		`{"type":"tool-approval-request","approvalId":"d","toolCallId":"d"}`,
		`{"type":"tool-output-denied","toolCallId":"d"}`,
		`{"type":"tool-output-available","toolCallId":"a","output":"out"}`,
		`{"type":"tool-output-error","toolCallId":"b","errorText":"out"}`,
		`{"type":"tool-output-error","toolCallId":"c","errorText":"in doubt: `,
		`"finishReason":"error"`,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("no %s in:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"toolCallId":"d","errorText"`) || strings.Count(got, `"start-step"`) != 1 || strings.Count(got, `"finish-step"`) != 1 {
		t.Fatalf("chunks:\n%s", got)
	}
}

// Another run's events are not the stream's.
func TestOtherRunsLeftOut(t *testing.T) {
	other := rein.NewEvent(rein.EventMessageDelta, "r2", rein.MessageDeltaPayload{RunID: "r2", Step: 1, Text: "not mine"})
	if got := chunksOf(other, rein.NewEvent(rein.EventRunQueued, "r1", rein.RunQueuedPayload{RunID: "r1", Position: 2})); len(got) != 1 || got[0] != `{"type":"data-rein-queue","id":"queue","data":{"position":2}}` {
		t.Fatalf("chunks %q", got)
	}
}
