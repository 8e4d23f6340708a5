package chaos

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The "sweep" rule of testdata/chaos.yaml: the texts of its first two
// steps (the third shows the tool result and the note).
const (
	sweepStep1 = "step one streams first"
	sweepStep2 = "step two streams next"
	sweepNote  = "sup-sweep"
)

// sweepCut is one cut point of TestKillSweep: the kill comes once the run's
// events read so far satisfy at.
type sweepCut struct {
	name string
	at   func(run []rein.Event, runID string) bool
}

// TestKillSweep kills `rein serve` at a sample of points of a run with a
// tool step, a streamed step with a confirmed call, a note and a streamed
// final step — mid-stream of each step, mid-tool, the first delta after a
// tool step, while the confirmation waits — restarts it on the same store
// and checks the run's rendering: for every step, the deltas after its
// last agent.step_restarted (all of them when it has none) concatenate to
// the step's text, so a client never shows text twice; the run completes
// once, no event a client read is lost or changed, no call runs twice and
// the acknowledged note is consumed once. (sessions' TestCrashWindows cuts
// the same shape of run at every write, in process.)
func TestKillSweep(t *testing.T) {
	deltasOf := func(run []rein.Event, runID string, step int) int { return len(deltas(run, runID, step)) }
	cuts := []sweepCut{
		{"step1-mid-stream", func(run []rein.Event, id string) bool { return deltasOf(run, id, 1) >= 2 }},
		{"mid-tool", func(run []rein.Event, id string) bool { return find(run, rein.EventToolUse, id) != nil }},
		{"step2-first-delta", func(run []rein.Event, id string) bool { return deltasOf(run, id, 2) >= 1 }},
		{"awaiting-confirmation", func(run []rein.Event, id string) bool {
			return find(run, rein.EventToolConfirmationRequested, id) != nil
		}},
		{"step3-mid-stream", func(run []rein.Event, id string) bool { return deltasOf(run, id, 3) >= 2 }},
		{"step3-last-delta", func(run []rein.Event, id string) bool { return deltasOf(run, id, 3) >= 4 }},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			// One cut at a time: the package's other tests bound how fast
			// a lost run is taken up, and a dozen servers started at once
			// beside them would load the machine past those bounds.
			for _, cut := range cuts {
				t.Run(cut.name, func(t *testing.T) {
					killSweepAt(t, b.spec(t), cut)
				})
			}
		})
	}
}

func killSweepAt(t *testing.T, store string, cut sweepCut) {
	ws := t.TempDir()
	p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, serveOptions{workspace: ws})
	sid := newSession(t, p1)
	runID := send(t, p1, sid, "sweep")

	// The client: follows the stream, pushes the note and allows the call
	// as soon as it is asked (unless the cut comes first).
	noted, answered := false, map[string]bool{}
	var seen []rein.Event
	s := p1.client.Stream(ctxFor(t, cutTimeout), sid, 0)
	for {
		run := runEvents(seen, runID)
		if cut.at(run, runID) {
			break
		}
		if ev := find(run, rein.EventRunCompleted, runID); ev != nil {
			s.Close()
			t.Fatalf("the run ended before the cut %s\n%s", cut.name, dump(seen))
		}
		if req := find(run, rein.EventToolConfirmationRequested, runID); req != nil {
			noted = noted || note(t, p1.client, sid)
			answered = allowAll(t, p1.client, sid, run, answered)
		}
		ev, err := s.Next()
		if err != nil {
			s.Close()
			t.Fatalf("%s: reading the event stream: %v\nread so far:\n%s", p1.name, err, dump(seen))
		}
		seen = append(seen, ev)
	}
	s.Close()
	p1.kill()
	t.Logf("killed %s at %s after %d events (last seq %d)", p1.name, cut.name, len(seen), seen[len(seen)-1].Seq)

	// The restart: the client pushes its note if it had not, and answers
	// what is still asked, until the run ends.
	p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, serveOptions{workspace: ws})
	if !noted {
		noted = note(t, p2.client, sid)
	}
	ctx := ctxFor(t, runTimeout)
	s2 := p2.client.Stream(ctx, sid, 0)
	defer s2.Close()
	var after []rein.Event
	for find(after, rein.EventRunCompleted, runID) == nil {
		if find(after, rein.EventToolConfirmationRequested, runID) != nil {
			answered = allowAll(t, p2.client, sid, runEvents(after, runID), answered)
		}
		ev, err := s2.Next()
		if err != nil {
			log, _ := listAll(context.Background(), p2, sid)
			t.Fatalf("%s: run %s did not complete: %v\nlog:\n%s", p2.name, runID, err, dump(log))
		}
		after = append(after, ev)
	}
	log, err := listAll(ctxFor(t, callTimeout), p2, sid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log after the restart:\n%s", dump(log))
		}
	})
	checkLog(t, log)
	checkKept(t, seen, log)
	run := runEvents(log, runID)
	checkCompletedOnce(t, run, runID)
	final := finalMessage(t, run, runID)

	// What a client renders of each step.
	last := 0
	for _, ev := range all(run, rein.EventMessageDelta) {
		var d rein.MessageDeltaPayload
		decode(t, ev, &d)
		last = max(last, d.Step)
	}
	for step := 1; step <= last; step++ {
		want := final.Text
		switch step {
		case 1:
			want = sweepStep1
		case 2:
			want = sweepStep2
		case last:
		default:
			continue // a step of the final-step rule: its text is not known here
		}
		if got := rendered(t, run, runID, step); got != want {
			t.Errorf("step %d: the deltas after its last agent.step_restarted concatenate to %q, want %q", step, got, want)
		}
	}

	// No call ran twice: one agent.tool_use and one agent.tool_result per
	// call, and the note's file has the note at most once.
	uses := map[string]int{}
	for _, ev := range all(run, rein.EventToolUse) {
		var u rein.ToolUsePayload
		decode(t, ev, &u)
		uses[u.ToolUseID]++
	}
	for _, ev := range all(run, rein.EventToolResult) {
		var r rein.ToolResultPayload
		decode(t, ev, &r)
		uses[r.ToolUseID] += 100
	}
	for id, n := range uses {
		if n != 101 {
			t.Errorf("call %s: %d agent.tool_use and %d agent.tool_result, want one each", id, n%100, n/100)
		}
	}
	if b, err := os.ReadFile(notesPath(p2, "local", sid)); err == nil && strings.Count(string(b), "swept") > 1 {
		t.Errorf("the confirmed note was written %d times", strings.Count(string(b), "swept"))
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	// The acknowledged note was consumed exactly once.
	consumed := 0
	for _, ev := range all(log, rein.EventSupplementConsumed) {
		var c rein.SupplementConsumedPayload
		decode(t, ev, &c)
		if c.SupplementID == sweepNote {
			consumed++
		}
	}
	if consumed != 1 {
		t.Errorf("the note was consumed %d times, want once", consumed)
	}
}

// rendered is what a reader shows of a step: its deltas after the step's
// last agent.step_restarted.
func rendered(t *testing.T, run []rein.Event, runID string, step int) string {
	var b strings.Builder
	for _, ev := range run {
		switch ev.Type {
		case rein.EventStepRestarted:
			var r rein.StepRestartedPayload
			decode(t, ev, &r)
			if r.Step == step {
				b.Reset()
			}
		case rein.EventMessageDelta:
			var d rein.MessageDeltaPayload
			decode(t, ev, &d)
			if d.Step == step {
				b.WriteString(d.Text)
			}
		}
	}
	return b.String()
}

// note pushes the sweep's note (idempotent by its id).
func note(t *testing.T, c *client.Client, sid string) bool {
	t.Helper()
	if _, err := c.Supplement(ctxFor(t, callTimeout), sid, client.Supplement{Text: "be brief", ID: sweepNote}); err != nil {
		t.Fatalf("note: %v", err)
	}
	return true
}

// allowAll allows every call of run asked for and not yet answered; a call
// answered before a kill may be refused as no longer pending.
func allowAll(t *testing.T, c *client.Client, sid string, run []rein.Event, answered map[string]bool) map[string]bool {
	t.Helper()
	for _, ev := range all(run, rein.EventToolConfirmationRequested) {
		var r rein.ToolConfirmationRequestedPayload
		decode(t, ev, &r)
		if answered[r.ToolUseID] {
			continue
		}
		_, err := c.ConfirmTool(ctxFor(t, callTimeout), sid, client.ToolConfirmation{ToolUseID: r.ToolUseID, Allow: true})
		var ce *client.Error
		if err != nil && !(errors.As(err, &ce) && ce.Status == http.StatusConflict) {
			t.Fatalf("allow %s: %v", r.ToolUseID, err)
		}
		answered[r.ToolUseID] = true
	}
	return answered
}
