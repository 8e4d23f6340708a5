package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

func TestChatConversation(t *testing.T) {
	s := newTestServer(t, nil)
	cmd := start(t, nil, "chat", "--server", s.url)
	sid := sessionFrom(t, cmd.err.waitFor(t, "/help for commands"))

	cmd.line("hello")
	cmd.out.waitFor(t, "echo: hello\n")
	cmd.out.waitFor(t, "completed: stop]")
	cmd.line("chunky")
	out := cmd.out.waitFor(t, "completed: stop]", 2)
	if !strings.Contains(out, "\none two three four five\n") {
		t.Fatalf("streamed reply not on its own line:\n%s", out)
	}
	cmd.line("/status")
	cmd.out.waitFor(t, "[session "+sid+": idle;")
	cmd.line("/help")
	cmd.out.waitFor(t, "/supplement TEXT")
	cmd.line("/nope")
	cmd.out.waitFor(t, "[unknown command /nope")
	cmd.line("//slash")
	cmd.out.waitFor(t, "echo: /slash\n")
	cmd.in.Close()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d at the end of input; stderr:\n%s", code, cmd.err)
	}
	// What the user typed is not echoed back; status lines and replies are.
	if strings.Contains(cmd.out.String(), "> hello") {
		t.Fatalf("own message echoed:\n%s", cmd.out)
	}
}

// TestChatEndOfInputWaitsForTheReply: `echo hi | rein chat` prints the
// reply before leaving.
func TestChatEndOfInputWaitsForTheReply(t *testing.T) {
	s := newTestServer(t, nil)
	code, out, errs := run(t, "hello\nchunky\n", nil, "chat", "--server", s.url)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errs)
	}
	if !strings.Contains(out, "echo: hello\n") || !strings.Contains(out, "one two three four five\n") || strings.Count(out, "completed: stop") != 2 {
		t.Fatalf("output:\n%s", out)
	}
}

// TestChatQueueAndCtrlC: a message sent while a run works is queued and
// shown so; Ctrl-C interrupts the current run by its id (not the session's
// current run), the queued one then runs; Ctrl-C with nothing running
// leaves.
func TestChatQueueAndCtrlC(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	cmd := start(t, nil, "chat", "--server", s.url)
	sid := sessionFrom(t, cmd.err.waitFor(t, "/help for commands"))

	cmd.line("long task")
	cmd.out.waitFor(t, "[tool sleep")
	cmd.line("second")
	cmd.out.waitFor(t, "queued (position 1)]")
	info, err := c.GetSession(ctxT(t), sid)
	if err != nil {
		t.Fatal(err)
	}
	cmd.line("/status")
	cmd.out.waitFor(t, "; running "+info.CurrentRunID+"; queued "+info.QueuedRunIDs[0])

	cmd.ctrlC()
	cmd.out.waitFor(t, "[interrupting run "+info.CurrentRunID)
	cmd.out.waitFor(t, "[run "+info.CurrentRunID+" completed: interrupted")
	cmd.out.waitFor(t, "echo: second\n")
	cmd.out.waitFor(t, "[run "+info.QueuedRunIDs[0]+" completed: stop]")

	ui := waitEvent(t, c, sid, isEvent(rein.EventUserInterrupt, ""))
	var p rein.UserInterruptPayload
	if err := ui.DecodePayload(&p); err != nil || p.RunID == nil || *p.RunID != info.CurrentRunID || p.Mode != "interrupt" {
		t.Fatalf("Ctrl-C sent %+v, want an interrupt of %s by its id", p, info.CurrentRunID)
	}

	cmd.ctrlC()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d on Ctrl-C with nothing running", code)
	}
}

func TestChatSupplementAndConfirmations(t *testing.T) {
	s := newTestServer(t, nil)
	cmd := start(t, nil, "chat", "--server", s.url)
	cmd.err.waitFor(t, "/help for commands")

	cmd.line("/supplement mind the step")
	cmd.out.waitFor(t, "queued: mind the step]")
	cmd.line("hint?")
	cmd.out.waitFor(t, "hints=[mind the step]")
	cmd.out.waitFor(t, "read by run")
	// Let that run end first: a note sent while it runs would be queued,
	// and its end would read "completed: stop (1 queued)]".
	cmd.out.waitFor(t, "completed: stop]")

	cmd.line("/approve")
	cmd.out.waitFor(t, "[no tool call is waiting for confirmation]")
	cmd.line("note first")
	cmd.out.waitFor(t, "[confirm tool write_note")
	cmd.line("/approve")
	cmd.out.waitFor(t, " approved]")
	cmd.out.waitFor(t, "note result:")
	cmd.out.waitFor(t, "completed: stop]", 2)

	cmd.line("note second")
	cmd.out.waitFor(t, "[confirm tool write_note", 2)
	cmd.line("/deny not today")
	cmd.out.waitFor(t, " denied: not today]")
	out := cmd.out.waitFor(t, "completed: stop]", 3)
	if !strings.Contains(out[strings.LastIndex(out, " denied: not today]"):], "not today") {
		t.Fatalf("output:\n%s", out)
	}
	cmd.line("/quit")
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestChatShowsOtherClients: what another client does in the session is
// shown, and the chat's view of the queue follows it.
func TestChatShowsOtherClients(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	cmd := start(t, nil, "chat", "--server", s.url)
	sid := sessionFrom(t, cmd.err.waitFor(t, "/help for commands"))

	r, err := c.SendMessage(ctxT(t), sid, client.Message{Text: "long from elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.out.waitFor(t, "> long from elsewhere\n")
	cmd.out.waitFor(t, "[tool sleep")
	if _, err := c.StopRun(ctxT(t), sid, r.RunID, rein.StopCancel); err != nil {
		t.Fatal(err)
	}
	cmd.out.waitFor(t, "[run "+r.RunID+" stopped (cancel) by another client]")
	cmd.out.waitFor(t, "[run "+r.RunID+" cancelled: cancelled")
	// /quit leaves at once; runs belong to the server, not to the chat.
	cmd.line("long again")
	cmd.out.waitFor(t, "[tool sleep", 2)
	cmd.line("/quit")
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	info, err := c.GetSession(ctxT(t), sid)
	if err != nil || info.CurrentRunID == "" {
		t.Fatalf("after /quit: %+v %v, want the run still running", info, err)
	}
}

// TestChatResumesASession: joining a busy session replays its past
// silently, so the chat knows the current run and the waiting tool call.
func TestChatResumesASession(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "note from before"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolConfirmationRequested, r.RunID))

	cmd := start(t, map[string]string{"REIN_SERVER": s.url}, "chat", "--session", sess.ID)
	cmd.err.waitFor(t, "/help for commands")
	// Joining shows what waits for an answer, without being asked.
	joined := cmd.err.waitFor(t, "since before this chat")
	if !strings.Contains(joined, "write_note") {
		t.Fatalf("join did not show the pending call:\n%s", joined)
	}
	cmd.line("/status")
	out := cmd.out.waitFor(t, "[waiting for confirmation:]")
	if strings.Contains(out, "echo") || strings.Contains(out, "[confirm tool") {
		t.Fatalf("the past was shown again:\n%s", out)
	}
	cmd.line("/deny")
	cmd.out.waitFor(t, " denied]")
	cmd.out.waitFor(t, "[run "+r.RunID+" completed: stop]")
	cmd.in.Close()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestChatReplace: /replace TEXT rolls the current run back and runs TEXT
// next; the rolled-back run's end says so.
func TestChatReplace(t *testing.T) {
	s := newTestServer(t, nil)
	cmd := start(t, nil, "chat", "--server", s.url)
	cmd.err.waitFor(t, "/help for commands")

	cmd.line("/replace")
	cmd.out.waitFor(t, "[usage: /replace TEXT]")
	cmd.line("long task")
	cmd.out.waitFor(t, "[tool sleep")
	cmd.line("/replace do this instead")
	cmd.out.waitFor(t, " cancelled: cancelled, rolled back")
	cmd.out.waitFor(t, "echo: do this instead\n")
	cmd.out.waitFor(t, "completed: stop]")
	cmd.in.Close()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, cmd.err)
	}
}

// TestChatShowsResumes: a step restarted after instance loss is marked and
// its earlier deltas no longer count; an in-doubt tool result is marked.
func TestChatShowsResumes(t *testing.T) {
	out := newSyncBuffer()
	ch := &chat{io: stdio{out: out}, reply: &replyPrinter{w: out}, text: eventText{named: true}, mine: map[string]bool{}, open: map[string]bool{}, stops: map[string]int{}}
	seq := int64(0)
	emit := func(typ rein.EventType, p any) {
		seq++
		e := rein.NewEvent(typ, "run_1", p)
		e.Seq = seq
		ch.event(e)
	}
	emit(rein.EventRunStarted, rein.RunStartedPayload{RunID: "run_1"})
	emit(rein.EventToolResult, rein.ToolResultPayload{RunID: "run_1", ToolUseID: "call_1", Output: rein.InDoubtToolOutput, IsError: true, InDoubt: true})
	emit(rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: "run_1", Step: 2, Text: "half a tho"})
	emit(rein.EventStepRestarted, rein.StepRestartedPayload{RunID: "run_1", Step: 2, Attempt: 2})
	emit(rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: "run_1", Step: 2, Text: "whole answer"})
	emit(rein.EventMessage, rein.MessagePayload{RunID: "run_1", Text: "whole answer", Reason: rein.ReasonStop})
	emit(rein.EventRunCompleted, rein.RunCompletedPayload{RunID: "run_1", Status: rein.StatusCompleted, Reason: rein.ReasonStop})
	want := "[run run_1 running]\n" +
		"[tool error, in doubt (not run again): in doubt: the call was executing when its instance was lost; it may or may not have taken effect, and it was not run again]\n" +
		"half a tho\n" +
		"[… step 2 restarted after instance loss (attempt 2)]\n" +
		"whole answer\n" +
		"[run run_1 completed: stop]\n"
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

// TestChatSeveralPending: with several tool calls waiting, /approve and
// /deny need an id, and list the candidates.
func TestChatSeveralPending(t *testing.T) {
	out := newSyncBuffer()
	ch := &chat{io: stdio{out: out}, reply: &replyPrinter{w: out}, pending: []rein.ToolConfirmationRequestedPayload{
		{RunID: "run_1", ToolUseID: "call_a", Name: "write_note", Input: []byte(`{"text":"a"}`)},
		{RunID: "run_1", ToolUseID: "call_b", Name: "write_note", Input: []byte(`{"text":"b"}`)},
	}}
	ch.confirm(true, "")
	ch.confirm(false, "no reason")
	got := out.String()
	if strings.Count(got, "several tool calls are waiting") != 2 || strings.Count(got, "  call_b  write_note {\"text\":\"b\"}") != 2 {
		t.Fatalf("output:\n%s", got)
	}
}

func TestChatErrors(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok": "alice"})
	code, _, errs := run(t, "", nil, "chat", "--server", s.url)
	if code != exitFailed || !strings.Contains(errs, "token") {
		t.Fatalf("no token: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, "", nil, "chat", "--server", s.url, "--token", "tok", "--session", "ses_nope")
	if code != exitFailed || !strings.Contains(errs, "session ses_nope not found") {
		t.Fatalf("unknown session: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, "", nil, "chat", "--server", s.url, "extra")
	if code != exitUsage {
		t.Fatalf("extra argument: exit %d, stderr %q", code, errs)
	}
}

// TestChatShowsSubagents: a subagent's start is shown with how to open it,
// and /subagents lists the session's children.
func TestChatShowsSubagents(t *testing.T) {
	s := newTestServer(t, nil)
	cmd := start(t, map[string]string{"REIN_SERVER": s.url}, "chat")
	cmd.err.waitFor(t, "/help for commands")
	cmd.line("delegate this")
	started := cmd.out.waitFor(t, "open it with: rein chat --session ")
	m := regexp.MustCompile(`subagent (ses_\S+) started`).FindStringSubmatch(started)
	if m == nil {
		t.Fatalf("no child id in:\n%s", started)
	}
	cmd.out.waitFor(t, "[subagent "+m[1]+" completed: stop]")
	cmd.line("/subagents")
	list := cmd.out.waitFor(t, "  "+m[1]+"  ")
	if !strings.Contains(list, "helper") {
		t.Fatalf("list:\n%s", list)
	}
	cmd.in.Close()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
