package main

import (
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// TestApprovalsCommand: rein approvals lists the calls waiting across
// sessions, answers one by its id alone (in its own session), refuses to
// answer twice, and lists what was answered.
func TestApprovalsCommand(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok-a": "alice", "tok-b": "bob"})
	c := s.client("tok-a")
	ctx := ctxT(t)
	env := map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "tok-a"}
	var calls []rein.ToolConfirmationRequestedPayload
	var runs []string
	for _, title := range []string{"groceries", "errands"} {
		sess, err := c.CreateSession(ctx, client.CreateSessionRequest{Title: title})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "note " + title})
		if err != nil {
			t.Fatal(err)
		}
		e := waitEvent(t, c, sess.ID, isEvent(rein.EventToolConfirmationRequested, r.RunID))
		var p rein.ToolConfirmationRequestedPayload
		if err := e.DecodePayload(&p); err != nil {
			t.Fatal(err)
		}
		calls, runs = append(calls, p), append(runs, r.RunID)
	}
	code, out, errs := run(t, "", env, "approvals")
	if code != exitOK || errs != "" {
		t.Fatalf("list: %d %q", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], calls[1].ToolUseID) || !strings.Contains(lines[1], "(errands)") ||
		!strings.HasPrefix(lines[2], calls[0].ToolUseID) || !strings.Contains(lines[2], "write_note") {
		t.Fatalf("list:\n%s", out)
	}
	if code, _, errs := run(t, "", map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "tok-b"}, "approvals"); code != exitOK || errs != "no pending approvals\n" {
		t.Fatalf("bob's list: %d %q", code, errs)
	}

	code, out, errs = run(t, "", env, "approvals", "--deny", calls[0].ToolUseID, "--message", "not today")
	if code != exitOK || !strings.HasPrefix(out, "denied write_note "+calls[0].ToolUseID) {
		t.Fatalf("deny: %d %q %q", code, out, errs)
	}
	code, out, errs = run(t, "", env, "approvals", "--allow", calls[1].ToolUseID)
	if code != exitOK || !strings.HasPrefix(out, "allowed write_note "+calls[1].ToolUseID) {
		t.Fatalf("allow: %d %q %q", code, out, errs)
	}
	code, _, errs = run(t, "", env, "approvals", "--allow", calls[1].ToolUseID)
	if code != exitFailed || !strings.Contains(errs, "no call "+calls[1].ToolUseID+" waits for your approval") {
		t.Fatalf("answered twice: %d %q", code, errs)
	}
	code, out, _ = run(t, "", env, "approvals", "--status", "answered")
	if code != exitOK || !strings.Contains(out, "allowed") || !strings.Contains(out, "denied") {
		t.Fatalf("answered list:\n%s", out)
	}
	for _, args := range [][]string{
		{"approvals", "--status", "later"}, {"approvals", "--allow", "a", "--deny", "b"},
		{"approvals", "--message", "x"}, {"approvals", "--limit", "0"}, {"approvals", "extra"},
	} {
		if code, _, _ := run(t, "", env, args...); code != exitUsage {
			t.Fatalf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestExpiredEventText: session.confirmation_expired reads as a denial in
// rein events and rein chat.
func TestExpiredEventText(t *testing.T) {
	e := rein.NewEvent(rein.EventConfirmationExpired, "run_1", rein.ConfirmationExpiredPayload{RunID: "run_1", ToolUseID: "call_1"})
	if got := (eventText{}).status(e); got != "call_1 expired unanswered: denied" {
		t.Fatalf("status = %q", got)
	}
}
