package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

func TestSendStreamsTheReply(t *testing.T) {
	s := newTestServer(t, nil)
	code, out, errs := run(t, "", nil, "send", "--server", s.url, "chunky", "please")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errs)
	}
	if out != "one two three four five\n" {
		t.Fatalf("stdout %q", out)
	}
	sid := sessionFrom(t, errs)
	// The session it created holds the run.
	evs, _, err := s.client("").ListEvents(ctxT(t), sid, 0, 0)
	if err != nil || len(evs) == 0 || evs[0].Type != rein.EventUserMessage {
		t.Fatalf("session %s: %v %v", sid, evs, err)
	}
	// --session continues it; REIN_SERVER names the server.
	code, out, errs = run(t, "", map[string]string{"REIN_SERVER": s.url, "REIN_SESSION": sid}, "send", "again")
	if code != 0 || out != "echo: again\n" || strings.Contains(errs, "session ses_") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestSendJSON(t *testing.T) {
	s := newTestServer(t, nil)
	code, out, errs := run(t, "", nil, "send", "--server", s.url, "--json", "hi")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var types []string
	runID := ""
	for _, l := range lines {
		var e rein.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if runID == "" {
			runID = e.RunID
		}
		if e.RunID != runID || runID == "" {
			t.Fatalf("event of another run: %s", l)
		}
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, " "); got != "user.message session.run_started agent.message.delta agent.model_request agent.message session.run_completed" {
		t.Fatalf("events %s", got)
	}
}

func TestSendExitStatus(t *testing.T) {
	s := newTestServer(t, nil)
	code, _, errs := run(t, "", nil, "send", "--server", s.url, "fail now")
	if code != exitFailed || !strings.Contains(errs, "the model exploded") {
		t.Fatalf("failed run: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, "", nil, "send", "--server", s.url, "--timeout", "50ms", "long")
	if code != exitTimeout || !strings.Contains(errs, "timeout") {
		t.Fatalf("timed out run: exit %d, stderr %q", code, errs)
	}
}

// TestSendCtrlC: the first Ctrl-C interrupts the run by its id (exit 3,
// with the interrupted reply), a second one cancels it (exit 130).
func TestSendCtrlC(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")

	cmd := start(t, nil, "send", "--server", s.url, "long")
	cmd.err.waitFor(t, "[tool sleep")
	sid := sessionFrom(t, cmd.err.String())
	cmd.ctrlC()
	if code := cmd.exit(); code != exitInterrupted {
		t.Fatalf("exit %d after one Ctrl-C; stderr:\n%s", code, cmd.err)
	}
	ui := waitEvent(t, c, sid, isEvent(rein.EventUserInterrupt, ""))
	var p rein.UserInterruptPayload
	_ = ui.DecodePayload(&p)
	if p.RunID == nil || *p.RunID == "" || p.Mode != "interrupt" || !p.Accepted {
		t.Fatalf("Ctrl-C sent %+v, want an interrupt by run id", p)
	}
	if !strings.Contains(cmd.out.String(), "sleeping") {
		t.Fatalf("stdout %q", cmd.out)
	}

	// Ctrl-C on a run still queued cancels it: it never starts.
	long, err := c.SendMessage(ctxT(t), sid, client.Message{Text: "long blocker"})
	if err != nil {
		t.Fatal(err)
	}
	cmd = start(t, nil, "send", "--server", s.url, "--session", sid, "--when-busy", "enqueue", "queued")
	cmd.err.waitFor(t, "[run queued (position 1)]")
	cmd.ctrlC()
	if code := cmd.exit(); code != exitCancelled {
		t.Fatalf("exit %d after Ctrl-C on a queued run; stderr:\n%s", code, cmd.err)
	}
	if st, err := c.GetRun(ctxT(t), sid, long.RunID); err != nil || st.Status != rein.StatusRunning {
		t.Fatalf("the run ahead is %+v (%v) after Ctrl-C on the queued one", st, err)
	}
}

func TestStopEscalates(t *testing.T) {
	for n, want := range map[int]rein.StopMode{1: rein.StopInterrupt, 2: rein.StopCancel} {
		if mode, giveUp := stopMode(n); mode != want || giveUp {
			t.Errorf("Ctrl-C #%d: %q %v, want %q", n, mode, giveUp, want)
		}
	}
	if _, giveUp := stopMode(3); !giveUp {
		t.Error("the third Ctrl-C still waits")
	}
}

// TestSendReportsAStopFromElsewhere: a run cancelled by another client ends
// the command with the cancelled status.
func TestSendReportsAStopFromElsewhere(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	cmd := start(t, nil, "send", "--server", s.url, "long")
	cmd.err.waitFor(t, "[tool sleep")
	sid := sessionFrom(t, cmd.err.String())
	if r, err := c.Interrupt(ctxT(t), sid, client.Interrupt{}); err != nil || !r.Accepted {
		t.Fatalf("stop: %+v %v", r, err)
	}
	if code := cmd.exit(); code != exitCancelled || !strings.Contains(cmd.err.String(), "[run cancelled: cancelled]") {
		t.Fatalf("exit %d; stderr:\n%s", code, cmd.err)
	}
}

// TestSendBusySession: a busy session rejects by default; --when-busy
// enqueue waits in the queue and then streams.
func TestSendBusySession(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, "", nil, "send", "--server", s.url, "--session", sess.ID, "hello")
	if code != exitFailed || !strings.Contains(errs, "busy with run "+long.RunID) {
		t.Fatalf("busy: exit %d, stderr %q", code, errs)
	}
	cmd := start(t, nil, "send", "--server", s.url, "--session", sess.ID, "--when-busy", "enqueue", "queued hello")
	cmd.err.waitFor(t, "[run queued (position 1)]")
	if _, err := c.StopRun(ctx, sess.ID, long.RunID, rein.StopCancel); err != nil {
		t.Fatal(err)
	}
	if code := cmd.exit(); code != 0 || cmd.out.String() != "echo: queued hello\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, cmd.out, cmd.err)
	}
}

// TestSendRollback: --when-busy rollback cancels the current run at once
// (its completion says rolled back) and streams the new run's reply.
func TestSendRollback(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, long.RunID))
	code, out, errs := run(t, "", map[string]string{"REIN_WHEN_BUSY": "rollback"}, "send", "--server", s.url, "--session", sess.ID, "instead")
	if code != 0 || out != "echo: instead\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	var p rein.RunCompletedPayload
	if err := waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, long.RunID)).DecodePayload(&p); err != nil || p.Status != rein.StatusCancelled || !p.RolledBack {
		t.Fatalf("the replaced run: %+v %v", p, err)
	}
}

// TestSendConfirmations: a tool needing confirmation is asked on stderr
// and answered from stdin; end of input denies.
func TestSendConfirmations(t *testing.T) {
	s := newTestServer(t, nil)
	code, out, errs := run(t, "y\n", nil, "send", "--server", s.url, "note hello")
	if code != 0 || !strings.Contains(errs, "Allow tool write_note") || !strings.Contains(out, "note result:") || strings.Contains(out, "denied") {
		t.Fatalf("approved: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = run(t, "", nil, "send", "--server", s.url, "note hello")
	if code != 0 || !strings.Contains(out, "denied at the terminal") {
		t.Fatalf("end of input: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestSendErrors(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok": "alice"})
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--server", s.url}, exitUsage, "give the message TEXT"},
		{[]string{"--server", s.url, "--when-busy", "later", "hi"}, exitUsage, `--when-busy "later": use reject, enqueue, interrupt or rollback`},
		{[]string{"--server", s.url, "--when-busy", "", "hi"}, exitUsage, `--when-busy "": use reject`},
		{[]string{"--server", s.url, "hi"}, exitFailed, "token"},
		{[]string{"--server", s.url, "--token", "tok", "--session", "ses_nope", "hi"}, exitFailed, "session ses_nope not found"},
		{[]string{"--server", "http://127.0.0.1:1", "hi"}, exitFailed, "is `rein serve` running"},
	}
	for _, tc := range tests {
		code, _, errs := run(t, "", nil, append([]string{"send"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("rein send %q: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	code, out, _ := run(t, "", map[string]string{"REIN_TOKEN": "tok"}, "send", "--server", s.url, "hi")
	if code != 0 || out != "echo: hi\n" {
		t.Fatalf("REIN_TOKEN: exit %d, stdout %q", code, out)
	}
}
