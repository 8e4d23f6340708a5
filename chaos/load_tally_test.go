package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// TestLoadTallyCounts feeds loadTally a session whose log, runs list and
// notes file break each rule once or twice, and checks every count: the
// load scenarios pass only while these counts are 0, so each must be able
// to count.
func TestLoadTallyCounts(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var log []rein.Event
	add := func(typ rein.EventType, runID string, payload any) rein.Event {
		p, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		ev := rein.Event{Seq: int64(len(log) + 1), ID: "evt_" + string(rune('a'+len(log))), SessionID: "ses_t", RunID: runID, Type: typ, Payload: p, CreatedAt: at}
		log = append(log, ev)
		return ev
	}
	completed := func(runID string) {
		add(rein.EventRunCompleted, runID, rein.RunCompletedPayload{RunID: runID, Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	}
	use := func(runID, id, text string) {
		add(rein.EventToolUse, runID, rein.ToolUsePayload{RunID: runID, Step: 1, ToolUseID: id, Name: "write_note", Input: json.RawMessage(`{"text":"` + text + `"}`)})
	}
	result := func(runID, id string, isErr bool) {
		add(rein.EventToolResult, runID, rein.ToolResultPayload{RunID: runID, ToolUseID: id, Output: "note saved", IsError: isErr})
	}

	// run_a: fine, with every kind of event.
	first := add(rein.EventUserMessage, "run_a", rein.UserMessagePayload{Text: "a", RunID: "run_a"})
	changed := add(rein.EventRunStarted, "run_a", rein.RunStartedPayload{RunID: "run_a"})
	add(rein.EventUserSupplement, "", rein.SupplementPayload{SupplementID: "sup_ok", Text: "x", Source: "user"})
	add(rein.EventSupplementConsumed, "run_a", rein.SupplementConsumedPayload{SupplementID: "sup_ok", RunID: "run_a", Step: 1})
	add(rein.EventUserSupplement, "", rein.SupplementPayload{SupplementID: "sup_twice", Text: "x", Source: "user"})
	add(rein.EventSupplementConsumed, "run_a", rein.SupplementConsumedPayload{SupplementID: "sup_twice", RunID: "run_a", Step: 1})
	add(rein.EventSupplementConsumed, "run_a", rein.SupplementConsumedPayload{SupplementID: "sup_twice", RunID: "run_a", Step: 2})
	use("run_a", "tu_ok", "note ok")
	add(rein.EventToolConfirmationRequested, "run_a", rein.ToolConfirmationRequestedPayload{RunID: "run_a", ToolUseID: "tu_ok", Name: "write_note"})
	add(rein.EventUserToolConfirmation, "run_a", rein.UserToolConfirmationPayload{ToolUseID: "tu_ok", Allow: true})
	result("run_a", "tu_ok", false)
	// A call asked twice, a call whose note is written twice, a success
	// without its note, a denied call whose note is there.
	use("run_a", "tu_asked", "note asked")
	add(rein.EventToolConfirmationRequested, "run_a", rein.ToolConfirmationRequestedPayload{RunID: "run_a", ToolUseID: "tu_asked", Name: "write_note"})
	add(rein.EventToolConfirmationRequested, "run_a", rein.ToolConfirmationRequestedPayload{RunID: "run_a", ToolUseID: "tu_asked", Name: "write_note"})
	result("run_a", "tu_asked", true)
	use("run_a", "tu_twice", "note twice")
	result("run_a", "tu_twice", false)
	use("run_a", "tu_missing", "note missing")
	result("run_a", "tu_missing", false)
	use("run_a", "tu_denied", "note denied")
	add(rein.EventUserToolConfirmation, "run_a", rein.UserToolConfirmationPayload{ToolUseID: "tu_denied", Allow: false})
	result("run_a", "tu_denied", true)
	// The same call made again (same input: same run and step).
	use("run_a", "tu_again", "note ok")
	result("run_a", "tu_again", true)
	add(rein.EventStepRestarted, "run_a", rein.StepRestartedPayload{RunID: "run_a", Step: 1, Attempt: 2})
	completed("run_a")
	// run_b ends twice; run_c never ends.
	add(rein.EventUserMessage, "run_b", rein.UserMessagePayload{Text: "b", RunID: "run_b"})
	completed("run_b")
	completed("run_b")
	add(rein.EventUserMessage, "run_c", rein.UserMessagePayload{Text: "c", RunID: "run_c"})

	seenChanged := changed
	seenChanged.Payload = json.RawMessage(`{"run_id":"run_other"}`)
	w := &loadSession{
		sid: "ses_t",
		msgs: []*loadMsg{
			{text: "a", runID: "run_a", acked: true},
			{text: "lost", runID: "run_lost", acked: true},
			{text: "never answered", runID: "", acked: false},
		},
		sups: []*loadSup{
			{id: "sup_ok", acked: true},
			{id: "sup_twice", acked: true},
			{id: "sup_lost", acked: true},
			{id: "sup_unanswered", acked: false},
		},
		answers: []loadAnswer{{"tu_ok", true}, {"tu_denied", false}, {"tu_unlogged", true}},
		seen:    []rein.Event{first, seenChanged, {Seq: 99, Type: rein.EventMessageDelta}},
	}
	runs := []client.Run{
		{RunID: "run_a", Status: rein.StatusCompleted},
		{RunID: "run_b", Status: rein.StatusCompleted},
		{RunID: "run_c", Status: rein.StatusRunning},
	}
	notes := "note ok\nnote twice\nnote twice\nnote denied\n"

	tl := &loadTally{}
	tl.tallySession(w, log, runs, notes)
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"eventsLost (changed, missing)", tl.eventsLost, 2},
		{"runsLost (run_lost)", tl.runsLost, 1},
		{"supplementsLost (sup_lost)", tl.supplementsLost, 1},
		{"supplementsTwice (sup_twice)", tl.supplementsTwice, 1},
		{"confirmationsLost (tu_unlogged, tu_asked asked twice)", tl.confirmationsLost, 2},
		{"nonTerminal (run_c)", tl.nonTerminal, 1},
		{"toolTwice (note twice written twice, note ok called twice)", tl.toolTwice, 2},
		{"toolEffects (tu_twice, tu_missing, tu_denied)", tl.toolEffects, 3},
		{"logBroken (run_b ends twice)", tl.logBroken, 1},
		{"clientIDRepeats (only counted on retries)", tl.clientIDRepeats, 0},
		{"runs", tl.runs, 3},
		{"events", tl.events, len(log)},
		{"supplements acknowledged", tl.supplements, 3},
		{"answers acknowledged", tl.answers, 3},
		{"step restarts", tl.restarts, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("problems:\n%v", tl.problems)
	}

	// A gap in the seqs is a broken log.
	gap := &loadTally{}
	gap.tallySession(&loadSession{sid: "ses_gap"}, []rein.Event{{Seq: 1}, {Seq: 3}}, nil, "")
	if gap.logBroken != 1 {
		t.Errorf("a log with seqs 1, 3: logBroken = %d, want 1", gap.logBroken)
	}
}
