package main

// Tests of sessions, runs, stop and delete against a real server.

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// lineOf returns the line of out that starts with prefix.
func lineOf(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starting with %q in:\n%s", prefix, out)
	return ""
}

func TestSessionsCommand(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok-a": "alice", "tok-b": "bob"})
	c := s.client("tok-a")
	ctx := ctxT(t)
	env := map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "tok-a"}

	code, out, errs := run(t, "", env, "sessions")
	if code != 0 || out != "" || !strings.Contains(errs, "no sessions") {
		t.Fatalf("no sessions: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	idle, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.SendMessage(ctx, busy.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.SendMessage(ctx, parent.ID, client.Message{Text: "delegate"})
	if err != nil {
		t.Fatal(err)
	}
	started := waitEvent(t, c, parent.ID, isEvent(rein.EventSubagentStarted, ""))
	sp, _ := decode[rein.SubagentStartedPayload](started)
	waitEvent(t, c, parent.ID, isEvent(rein.EventSubagentCompleted, ""))
	waitEvent(t, c, parent.ID, isEvent(rein.EventRunCompleted, r.RunID))
	// Another owner's session is never listed.
	if _, err := s.client("tok-b").CreateSession(ctx, client.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}

	code, out, errs = run(t, "", env, "sessions")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 || !regexp.MustCompile(`^ID +CREATED +LAST EVENT +AGENT +PARENT +STATE +TITLE$`).MatchString(lines[0]) {
		t.Fatalf("want a header and 4 sessions:\n%s", out)
	}
	const ts = `(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|-)`
	row := regexp.MustCompile(`^(ses_\S+) +` + ts + ` +` + ts + ` +(\S+) +(\S+) +(.+)$`)
	for id, want := range map[string][]string{
		idle.ID:    {"default", "-", "idle  ", "-"},
		busy.ID:    {"default", "-", "busy (" + long.RunID + ")", "long"},
		parent.ID:  {"default", "-", "idle  ", "delegate"},
		sp.ChildID: {"default", parent.ID, "idle  ", ""},
	} {
		m := row.FindStringSubmatch(lineOf(t, out, id+" "))
		if m == nil || m[4] != want[0] || m[5] != want[1] || !strings.HasPrefix(m[6], want[2]) || !strings.HasSuffix(m[6], want[3]) {
			t.Errorf("session %s: %q, want agent, parent, state, title %q", id, m, want)
		}
	}
	if m := row.FindStringSubmatch(lineOf(t, out, idle.ID+" ")); m == nil || m[3] != "-" {
		t.Errorf("a session without events: %q, want its last event -", m)
	}

	code, out, _ = run(t, "", env, "sessions", "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var got client.SessionSummary
		if err := json.Unmarshal([]byte(l), &got); err != nil || got.State == "" {
			t.Fatalf("line %q: %+v %v", l, got, err)
		}
		if got.ID == busy.ID && (got.State != "busy" || got.Title != "long" || got.LastEventAt == nil) {
			t.Fatalf("busy session: %+v", got)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("%d sessions in JSON:\n%s", n, out)
	}

	code, _, errs = run(t, "", map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "nope"}, "sessions")
	if code != exitFailed || !strings.Contains(errs, "refused the token given by --token or REIN_TOKEN (unauthenticated)") {
		t.Fatalf("bad token: exit %d, stderr %q", code, errs)
	}
}

func TestRunsCommand(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, done.RunID))
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "later", WhenBusy: rein.WhenBusyEnqueue})
	if err != nil {
		t.Fatal(err)
	}

	// The session as an argument, flags after it.
	code, out, errs := run(t, "", nil, "runs", sess.ID, "--server", s.url)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^RUN +STATUS +REASON +CREATED +STARTED +ENDED +TOKENS IN/OUT +COST$`).MatchString(lines[0]) {
		t.Fatalf("want a header and 3 runs:\n%s", out)
	}
	ts := `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`
	for id, pattern := range map[string]string{
		// The scripted model has no price: its cost is "-"; a queued run
		// has spent nothing.
		done.RunID:   `^` + done.RunID + ` +COMPLETED +stop +` + ts + ` +` + ts + ` +` + ts + ` +[1-9]\d*/[1-9]\d* +-$`,
		long.RunID:   `^` + long.RunID + ` +RUNNING +- +` + ts + ` +` + ts + ` +- +[1-9]\d*/[1-9]\d* +-$`,
		queued.RunID: `^` + queued.RunID + ` +QUEUED +- +` + ts + ` +- +- +0/0 +-$`,
	} {
		if l := lineOf(t, out, id+" "); !regexp.MustCompile(pattern).MatchString(strings.TrimRight(l, " ")) {
			t.Errorf("run line %q does not match %s", l, pattern)
		}
	}
	// Newest first.
	if !strings.HasPrefix(lines[1], queued.RunID) || !strings.HasPrefix(lines[3], done.RunID) {
		t.Errorf("not newest first:\n%s", out)
	}

	code, out, _ = run(t, "", map[string]string{"REIN_SERVER": s.url, "REIN_SESSION": sess.ID}, "runs", "--json")
	if code != 0 || strings.Count(out, `"run_id":`) != 3 || !strings.Contains(out, `"status":"QUEUED"`) {
		t.Fatalf("--json: exit %d:\n%s", code, out)
	}
	code, _, errs = run(t, "", nil, "runs", "--server", s.url, "ses_nope")
	if code != exitFailed || errs != "rein: session ses_nope not found (not_found)\n" {
		t.Fatalf("unknown session: exit %d, stderr %q", code, errs)
	}
}

func TestStopCommand(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok-a": "alice", "tok-b": "bob"})
	c := s.client("tok-a")
	ctx := ctxT(t)
	env := map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "tok-a"}
	// A few sessions, so that the run has to be looked for.
	for range 3 {
		if _, err := c.CreateSession(ctx, client.CreateSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, long.RunID))
	if _, err := c.CreateSession(ctx, client.CreateSessionRequest{}); err != nil {
		t.Fatal(err)
	}

	// Another owner cannot find it, let alone stop it.
	code, _, errs := run(t, "", map[string]string{"REIN_SERVER": s.url, "REIN_TOKEN": "tok-b"}, "stop", long.RunID)
	if code != exitFailed || errs != "rein: run "+long.RunID+" not found among your sessions (not_found)\n" {
		t.Fatalf("bob: exit %d, stderr %q", code, errs)
	}
	// Without --session: found among the caller's sessions, cancelled.
	code, out, errs := run(t, "", env, "stop", long.RunID)
	if code != 0 || out != "stop of run "+long.RunID+" accepted (cancel)\n" {
		t.Fatalf("stop: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	var p rein.RunCompletedPayload
	if err := waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, long.RunID)).DecodePayload(&p); err != nil || p.Status != rein.StatusCancelled {
		t.Fatalf("after rein stop: %+v %v", p, err)
	}
	// Again: not accepted, and why.
	code, out, _ = run(t, "", env, "stop", long.RunID)
	if code != 0 || out != "stop of run "+long.RunID+" not accepted: it had already ended (CANCELLED: cancelled)\n" {
		t.Fatalf("second stop: exit %d, stdout %q", code, out)
	}

	// --interrupt and --session, after the run id.
	next, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long again"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, next.RunID))
	code, out, errs = run(t, "", env, "stop", next.RunID, "--interrupt", "--session", sess.ID)
	if code != 0 || out != "stop of run "+next.RunID+" accepted (interrupt)\n" {
		t.Fatalf("stop --interrupt: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if err := waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, next.RunID)).DecodePayload(&p); err != nil || p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("after rein stop --interrupt: %+v %v", p, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stop", "run_nope"}, "rein: run run_nope not found among your sessions (not_found)\n"},
		{[]string{"stop", "--session", sess.ID, "run_nope"}, "rein: run run_nope not found in session " + sess.ID + " (not_found)\n"},
		{[]string{"stop", "--session", "ses_nope", long.RunID}, "rein: run " + long.RunID + " not found in session ses_nope (not_found)\n"},
	} {
		if code, _, errs := run(t, "", env, tc.args...); code != exitFailed || errs != tc.want {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestStopCommandByClientID: rein stop --client-id before the message
// (remembered: its run ends CANCELLED as it arrives) and after it (the
// run, stopped).
func TestStopCommandByClientID(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	env := map[string]string{"REIN_SERVER": s.url}
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "", env, "stop", "--session", sess.ID, "--client-id", "tab-1")
	if code != 0 || !strings.HasPrefix(out, "no message with client id tab-1 has arrived yet: the stop is remembered") {
		t.Fatalf("stop before the message: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	early, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long", ClientID: "tab-1"})
	if err != nil || early.Status != rein.StatusCancelled {
		t.Fatalf("the message = %+v, %v; want CANCELLED", early, err)
	}
	next, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "long", ClientID: "tab-2"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventToolUse, next.RunID))
	code, out, errs = run(t, "", env, "stop", "--interrupt", "--session", sess.ID, "--client-id", "tab-2")
	if code != 0 || out != "stop of run "+next.RunID+" (client id tab-2) accepted (interrupt)\n" {
		t.Fatalf("stop of the running run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	var p rein.RunCompletedPayload
	if err := waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, next.RunID)).DecodePayload(&p); err != nil || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("after rein stop --client-id: %+v %v", p, err)
	}
	for _, args := range [][]string{{"stop", "--client-id", "x"}, {"stop", "--session", sess.ID, "--client-id", "x", next.RunID}} {
		if code, _, _ := run(t, "", env, args...); code == 0 {
			t.Errorf("%v: exit 0, want a usage error", args)
		}
	}
}

func TestDeleteCommand(t *testing.T) {
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
	// A busy session is kept, and the message says what to do.
	code, out, errs := run(t, "", nil, "delete", "--server", s.url, sess.ID)
	want := "rein: session " + sess.ID + " is busy with run " + long.RunID + " (session_busy): stop it first (rein stop " + long.RunID + ") or wait for it to end\n"
	if code != exitFailed || out != "" || errs != want {
		t.Fatalf("busy: exit %d, stdout %q, stderr %q\nwant %q", code, out, errs, want)
	}
	if _, err := c.GetSession(ctx, sess.ID); err != nil {
		t.Fatalf("the busy session is gone: %v", err)
	}
	if code, _, errs := run(t, "", nil, "stop", "--server", s.url, long.RunID); code != 0 {
		t.Fatalf("stop: exit %d: %s", code, errs)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, long.RunID))

	code, out, errs = run(t, "", map[string]string{"REIN_SERVER": s.url}, "delete", sess.ID)
	if code != 0 || out != "deleted session "+sess.ID+"\n" {
		t.Fatalf("delete: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, err := c.GetSession(ctx, sess.ID); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("after rein delete: %v", err)
	}
	code, _, errs = run(t, "", map[string]string{"REIN_SERVER": s.url}, "delete", sess.ID)
	if code != exitFailed || errs != "rein: session "+sess.ID+" not found (not_found)\n" {
		t.Fatalf("again: exit %d, stderr %q", code, errs)
	}
}

// TestErrorMessagesSayTheirCodeOnce: an error the server answers reads as
// its message with its code once, at the end (the client package's own
// "rein: 400 invalid_argument: …" form never reaches the terminal); a local
// error reads as its message, without its code and without repeating its
// cause.
func TestErrorMessagesSayTheirCodeOnce(t *testing.T) {
	bad := &client.Error{Status: 400, Code: rein.CodeInvalidArgument, Message: "timeout_s must be > 0", Param: "events[0].payload.timeout_s"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{bad, "timeout_s must be > 0 (invalid_argument at events[0].payload.timeout_s)"},
		{fmt.Errorf("send: %w", bad), "send: timeout_s must be > 0 (invalid_argument at events[0].payload.timeout_s)"},
		{&client.Error{Status: 503, Code: rein.CodeUnavailable, Message: "unavailable"}, "Service Unavailable (unavailable)"},
		{&client.Error{Status: 502, Code: rein.CodeInternal, Message: "Bad Gateway: <html>…"}, "Bad Gateway: <html>… (internal)"},
		{rein.Errorf(rein.CodeInvalidArgument, "bad thing: %w", errors.New("cause")), "bad thing: cause"},
		{fmt.Errorf("--store: %w", rein.InvalidArgument("store", "unknown store %q", "x")), `--store: unknown store "x"`},
		{&rein.Error{Code: rein.CodeUnavailable, Message: "database unreachable", Err: errors.New("dial tcp: refused")}, "database unreachable: dial tcp: refused"},
		{errors.New("line one\nline two"), "line one; line two"},
	} {
		if got := message(c.err); got != c.want {
			t.Errorf("message(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	// Through a real server: host:port without a scheme is a server address,
	// and its not_found is said once.
	s := newTestServer(t, nil)
	code, out, errs := run(t, "", nil, "send", "--server", strings.TrimPrefix(s.url, "http://"), "hi")
	if code != 0 || out != "echo: hi\n" {
		t.Fatalf("--server HOST:PORT: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = run(t, "", nil, "events", "--server", strings.TrimPrefix(s.url, "http://"), "ses_nope")
	if code != exitFailed || errs != "rein: session ses_nope not found (not_found)\n" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}
