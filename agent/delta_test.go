package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/run"
)

// deltaSink is a sink that takes streamed text as it is.
type deltaSink struct {
	*sink
	mu     sync.Mutex
	deltas []rein.MessageDeltaPayload
}

func (d *deltaSink) EmitDelta(_ context.Context, runID string, step int, text string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deltas = append(d.deltas, rein.MessageDeltaPayload{RunID: runID, Step: step, Text: text})
	return nil
}

// A Sink that is a DeltaSink gets every chunk of streamed text through
// EmitDelta, with its run and step, and no encoded delta through Emit.
func TestDeltaSinkGetsTheTextAsItIs(t *testing.T) {
	e := newEnv(t, `
rules:
  - match: ".*"
    steps:
      - text: "one two three four "
        chunks: 4
`)
	ds := &deltaSink{sink: newSink()}
	turn := &agent.Turn{Session: sess, RunID: "run_d", Input: "hi", Events: ds,
		Journal: agent.NewJournal("run_d", e.hist, ds, e.inbox.Session(sess))}
	r := goRun("run_d", func(ctx context.Context, c *run.Control) run.Outcome {
		return e.agent.Run(ctx, c, turn)
	})
	if res := waitRun(t, r, 10*time.Second); res.Reason != rein.ReasonStop {
		t.Fatalf("run ended %s: %v", res.Reason, res.Err)
	}
	for _, ev := range ds.events() {
		if ev.Type == rein.EventMessageDelta {
			t.Fatalf("an encoded delta went to Emit: %s", ev.Payload)
		}
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if len(ds.deltas) != 4 {
		t.Fatalf("EmitDelta called %d times, want 4: %+v", len(ds.deltas), ds.deltas)
	}
	var text strings.Builder
	for _, d := range ds.deltas {
		if d.RunID != "run_d" || d.Step != 1 {
			t.Fatalf("delta %+v, want run_d step 1", d)
		}
		text.WriteString(d.Text)
	}
	if got := lastMessage(t, ds.events()).Text; text.String() != got {
		t.Fatalf("deltas add up to %q, the reply is %q", text.String(), got)
	}
}
