package main

import (
	"testing"

	"github.com/reinhq/rein"
)

// TestStatusLines: the status lines chat, send and run share; the chat
// names runs, send and run (one run each) do not.
func TestStatusLines(t *testing.T) {
	runID, deny := "run_1", "not now"
	mk := func(typ rein.EventType, p any) rein.Event { return rein.NewEvent(typ, "run_1", p) }
	for _, c := range []struct {
		e            rein.Event
		named, plain string
	}{
		{mk(rein.EventRunQueued, rein.RunQueuedPayload{RunID: runID, Position: 2}), "run run_1 queued (position 2)", "run queued (position 2)"},
		{mk(rein.EventRunStarted, rein.RunStartedPayload{RunID: runID}), "run run_1 running", "run running"},
		{mk(rein.EventToolUse, rein.ToolUsePayload{RunID: runID, Name: "sleep", Input: []byte(`{ "seconds": 5 }`)}), `tool sleep {"seconds":5}`, `tool sleep {"seconds":5}`},
		{mk(rein.EventToolResult, rein.ToolResultPayload{RunID: runID, Output: "ok"}), "tool result: ok", "tool result: ok"},
		{mk(rein.EventToolResult, rein.ToolResultPayload{RunID: runID, Output: "boom", IsError: true}), "tool error: boom", "tool error: boom"},
		{mk(rein.EventToolResult, rein.ToolResultPayload{RunID: runID, Output: "in doubt", IsError: true, InDoubt: true}), "tool error, in doubt (not run again): in doubt", "tool error, in doubt (not run again): in doubt"},
		{mk(rein.EventStepRestarted, rein.StepRestartedPayload{RunID: runID, Step: 2, Attempt: 3}), "… step 2 restarted after instance loss (attempt 3)", "… step 2 restarted after instance loss (attempt 3)"},
		{mk(rein.EventToolConfirmationRequested, rein.ToolConfirmationRequestedPayload{RunID: runID, ToolUseID: "call_1", Name: "write_note", Input: []byte(`{"text":"x"}`)}), `confirm tool write_note {"text":"x"} (call_1)`, `confirm tool write_note {"text":"x"} (call_1)`},
		{mk(rein.EventUserToolConfirmation, rein.UserToolConfirmationPayload{ToolUseID: "call_1", DenyMessage: &deny}), "call_1 denied: not now", "call_1 denied: not now"},
		{mk(rein.EventUserInterrupt, rein.UserInterruptPayload{RunID: &runID, Mode: "cancel", Accepted: true}), "run run_1 stopped (cancel)", "run run_1 stopped (cancel)"},
		{mk(rein.EventUserInterrupt, rein.UserInterruptPayload{Mode: "interrupt"}), "stop of the current run not accepted (interrupt)", "stop of the current run not accepted (interrupt)"},
		{mk(rein.EventRunCompleted, rein.RunCompletedPayload{RunID: runID, Status: rein.StatusFailed, Reason: rein.ReasonError, Error: "the model\nexploded"}), "run run_1 failed: error: the model exploded", "run failed: error: the model exploded"},
		{mk(rein.EventRunCompleted, rein.RunCompletedPayload{RunID: runID, Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, RolledBack: true}), "run run_1 cancelled: cancelled, rolled back", "run cancelled: cancelled, rolled back"},
		{mk(rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: runID, Text: "hi"}), "", ""},
	} {
		if got := (eventText{named: true}).status(c.e); got != c.named {
			t.Errorf("named %s: %q, want %q", c.e.Type, got, c.named)
		}
		if got := (eventText{}).status(c.e); got != c.plain {
			t.Errorf("%s: %q, want %q", c.e.Type, got, c.plain)
		}
	}
}
