package sessions_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store/memory"
)

// Children().LogEvent and Notice write subagent.* events only: a forged
// run end (or any other type) is refused as an invalid argument naming the
// allowed types, and nothing is written.
func TestChildrenLogOnlySubagentEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, memory.New())
	key := f.newSession()
	ctx := t.Context()
	forged := rein.NewEvent(rein.EventRunCompleted, "run_forged", rein.RunCompletedPayload{RunID: "run_forged", Status: rein.StatusCompleted})
	for name, err := range map[string]error{
		"LogEvent": f.svc.Children().LogEvent(ctx, key, forged),
		"Notice": func() error {
			_, _, err := f.svc.Children().Notice(ctx, key, "ntc_forged", "done", forged)
			return err
		}(),
	} {
		var re *rein.Error
		if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Param != "type" {
			t.Fatalf("%s of session.run_completed = %v, want invalid_argument (type)", name, err)
		}
		if !strings.Contains(re.Message, "subagent.started") || !strings.Contains(re.Message, "subagent.completed") {
			t.Fatalf("%s's refusal %q does not name the allowed types", name, re.Message)
		}
	}
	if evs := f.all(); len(evs) != 0 {
		t.Fatalf("refused events were logged: %+v", evs)
	}
	if n, err := f.st.PendingSupplements(ctx, key); err != nil || n != 0 {
		t.Fatalf("a refused notice was queued: %d, %v", n, err)
	}
	ok := rein.NewEvent(rein.EventSubagentStarted, "", rein.SubagentStartedPayload{})
	if err := f.svc.Children().LogEvent(ctx, key, ok); err != nil {
		t.Fatalf("LogEvent of subagent.started: %v", err)
	}
	if evs := f.all(); len(evs) != 1 || evs[0].Type != rein.EventSubagentStarted {
		t.Fatalf("log = %+v, want the one subagent.started", evs)
	}
}
