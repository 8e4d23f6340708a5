package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

func TestQueueCommand(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"REIN_SERVER": s.url}
	code, _, errs := run(t, "", env, "queue", sess.ID)
	if code != 0 || errs != "nothing queued in session "+sess.ID+"\n" {
		t.Fatalf("empty queue: exit %d, stderr %q", code, errs)
	}
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, long.RunID))
	a, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "first in line", WhenBusy: rein.WhenBusyEnqueue})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "second in line", WhenBusy: rein.WhenBusyEnqueue})
	if err != nil {
		t.Fatal(err)
	}

	code, out, errs := run(t, "", env, "queue", sess.ID)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !regexp.MustCompile(`^POS +RUN +CREATED +TEXT$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^1 +`+a.RunID+` +.* first in line$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^2 +`+b.RunID+` +.* second in line$`).MatchString(lines[2]) {
		t.Fatalf("queue: exit %d %s\n%s", code, errs, out)
	}

	code, out, errs = run(t, "", env, "queue", sess.ID, "--edit", b.RunID, "--text", "second, edited", "--position", "1")
	if code != 0 || out != "run "+b.RunID+" edited and moved (position 1): second, edited\n" {
		t.Fatalf("edit: exit %d %q %q", code, out, errs)
	}
	code, out, errs = run(t, "", env, "queue", sess.ID, "--move", b.RunID, "--position", "5")
	if code != 0 || out != "run "+b.RunID+" moved (position 2): second, edited\n" {
		t.Fatalf("move: exit %d %q %q", code, out, errs)
	}
	code, out, _ = run(t, "", env, "queue", sess.ID, "--json")
	if code != 0 || strings.Count(out, `"run_id":`) != 2 || !strings.Contains(out, `"input":"second, edited"`) {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}

	// Usage errors, before any request.
	for _, args := range [][]string{
		{"--edit", a.RunID},
		{"--move", a.RunID},
		{"--move", a.RunID, "--position", "0"},
		{"--promote", a.RunID, "--mode", "cancel"},
		{"--edit", a.RunID, "--text", "x", "--promote", b.RunID},
		{"--mode", "rollback"},
		{"--text", "x"},
	} {
		if code, _, errs := run(t, "", env, append([]string{"queue", sess.ID}, args...)...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want a usage error", args, code, errs)
		}
	}

	code, out, errs = run(t, "", env, "queue", sess.ID, "--promote", b.RunID)
	if code != 0 || out != "run "+b.RunID+" promoted: it runs next (position 1): second, edited\n" {
		t.Fatalf("promote: exit %d %q %q", code, out, errs)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, a.RunID))
	code, _, errs = run(t, "", env, "queue", sess.ID, "--edit", a.RunID, "--text", "too late")
	if code != exitFailed || errs != "rein: run "+a.RunID+" is no longer queued: it has already ended (COMPLETED) (conflict)\n" {
		t.Fatalf("late edit: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, "", env, "queue", sess.ID, "--promote", "run_nope")
	if code != exitFailed || errs != "rein: run run_nope not found in session "+sess.ID+" (not_found)\n" {
		t.Fatalf("unknown run: exit %d, stderr %q", code, errs)
	}
}
