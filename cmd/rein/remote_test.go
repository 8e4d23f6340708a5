package main

// Test helpers of the client commands (chat, send, events): a real server
// on loopback, and a way to run a command in-process with its terminal
// faked — stdin a pipe, stdout and stderr buffers a test can wait on,
// Ctrl-C a channel.

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
	"github.com/reinhq/rein/internal/reintest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every wait: a test that needs longer has failed.
const testTimeout = 30 * time.Second

// testServer is a running `rein serve` equivalent on loopback, with the
// scripted model of testdata/client-script.yaml.
type testServer struct {
	url string
}

func newTestServer(t *testing.T, tokens map[string]string) *testServer {
	t.Helper()
	ts := reintest.NewServer(t, reintest.ServerOptions{Script: "testdata/client-script.yaml", Tokens: tokens})
	return &testServer{url: ts.URL}
}

// client returns a Go client of the server, for the test's own moves.
func (s *testServer) client(token string) *client.Client {
	return client.New(s.url, client.WithToken(token))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer is an io.Writer a test can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{})} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor blocks until the output contains substr n times (n ≤ 1: once)
// and returns the output.
func (s *syncBuffer) waitFor(t *testing.T, substr string, n ...int) string {
	t.Helper()
	want := 1
	if len(n) > 0 {
		want = n[0]
	}
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		out, ch := s.b.String(), s.changed
		s.mu.Unlock()
		if strings.Count(out, substr) >= want {
			return out
		}
		select {
		case <-ch:
		case <-timer.C:
			t.Fatalf("timed out waiting for %q (×%d) in:\n%s", substr, want, out)
		}
	}
}

// cli is a command running in-process.
type cli struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *syncBuffer
	err  *syncBuffer
	sigs chan os.Signal
	done chan int
}

// fakeEnv is an environment with only the given variables, so that the
// tester's own REIN_* variables never leak into a test.
func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// start runs a command (args[0]: "chat", "send", ...) in a goroutine, the
// way main does, with a faked terminal. env may be nil.
func start(t *testing.T, env map[string]string, args ...string) *cli {
	t.Helper()
	pr, pw := io.Pipe()
	c := &cli{t: t, in: pw, out: newSyncBuffer(), err: newSyncBuffer(), sigs: make(chan os.Signal, 3), done: make(chan int, 1)}
	std := stdio{in: pr, out: c.out, err: c.err, lookupEnv: fakeEnv(env), signals: c.signals}
	ctx := ctxT(t)
	go func() { c.done <- mainWith(ctx, args, std) }()
	t.Cleanup(func() {
		// Ending the input ends the command's stdin reader; a command
		// still running when its test failed is then told to stop.
		pw.Close()
		pr.Close()
	})
	return c
}

// signals is stdio.signals: Ctrl-C comes from ctrlC.
func (c *cli) signals(...os.Signal) (<-chan os.Signal, func()) { return c.sigs, func() {} }

// line types a line on the command's stdin.
func (c *cli) line(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, s+"\n"); err != nil {
		c.t.Fatalf("stdin: %v", err)
	}
}

// ctrlC presses Ctrl-C.
func (c *cli) ctrlC() { c.sigs <- os.Interrupt }

// exit waits for the command to return and gives its exit status.
func (c *cli) exit() int {
	c.t.Helper()
	select {
	case code := <-c.done:
		return code
	case <-time.After(testTimeout):
		c.t.Fatalf("the command did not exit; stdout:\n%s\nstderr:\n%s", c.out, c.err)
		return -1
	}
}

// run runs a command (args[0]) to completion, the way main does, with
// stdin given, and returns its exit status, stdout and stderr.
func run(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	out, errb := newSyncBuffer(), newSyncBuffer()
	code := mainWith(ctxT(t), args, stdio{in: strings.NewReader(stdin), out: out, err: errb, lookupEnv: fakeEnv(env)})
	return code, out.String(), errb.String()
}

// sessionFrom finds the "session ID" line a command prints on stderr.
func sessionFrom(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if id, ok := strings.CutPrefix(l, "session "); ok && strings.HasPrefix(id, "ses_") {
			return id
		}
	}
	t.Fatalf("no session id on stderr:\n%s", stderr)
	return ""
}

// waitEvent follows a session's log until an event matches.
func waitEvent(t *testing.T, c *client.Client, sid string, pred func(rein.Event) bool) rein.Event {
	t.Helper()
	st := c.Stream(ctxT(t), sid, 0)
	defer st.Close()
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if pred(e) {
			return e
		}
	}
}

func isEvent(typ rein.EventType, runID string) func(rein.Event) bool {
	return func(e rein.Event) bool { return e.Type == typ && (runID == "" || e.RunID == runID) }
}

func TestFormatEvent(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6e6, time.Local)
	mk := func(typ rein.EventType, runID string, p any) rein.Event {
		e := rein.NewEvent(typ, runID, p)
		e.Seq, e.CreatedAt = 7, at
		return e
	}
	runID := "run_1"
	deny := "no"
	tests := []struct {
		e    rein.Event
		want string
	}{
		{mk(rein.EventUserMessage, "run_1", rein.UserMessagePayload{Text: "hi\nthere", RunID: "run_1"}), `#7 03:04:05.006 user.message run_1 text="hi\nthere"`},
		{mk(rein.EventRunQueued, "run_1", rein.RunQueuedPayload{RunID: "run_1", Position: 2}), `#7 03:04:05.006 session.run_queued run_1 position=2`},
		{mk(rein.EventRunStarted, "run_1", rein.RunStartedPayload{RunID: "run_1"}), `#7 03:04:05.006 session.run_started run_1`},
		{mk(rein.EventToolUse, "run_1", rein.ToolUsePayload{RunID: "run_1", Step: 1, ToolUseID: "call_1", Name: "sleep", Input: []byte(`{ "seconds": 5 }`)}), `#7 03:04:05.006 agent.tool_use run_1 step=1 tool_use_id="call_1" name="sleep" input={"seconds":5}`},
		{mk(rein.EventUserToolConfirmation, "run_1", rein.UserToolConfirmationPayload{ToolUseID: "call_1", DenyMessage: &deny}), `#7 03:04:05.006 user.tool_confirmation run_1 tool_use_id="call_1" allow=false deny_message="no"`},
		{mk(rein.EventUserInterrupt, "", rein.UserInterruptPayload{Mode: "cancel"}), `#7 03:04:05.006 user.interrupt run_id=null mode="cancel" accepted=false`},
		{mk(rein.EventUserInterrupt, "run_1", rein.UserInterruptPayload{RunID: &runID, Mode: "interrupt", Accepted: true}), `#7 03:04:05.006 user.interrupt run_1 mode="interrupt" accepted=true`},
		{mk(rein.EventRunCompleted, "run_1", rein.RunCompletedPayload{RunID: "run_1", Status: rein.StatusFailed, Reason: rein.ReasonError, Error: "boom"}), `#7 03:04:05.006 session.run_completed run_1 status="FAILED" reason="error" error="boom"`},
		{mk(rein.EventRunCompleted, "run_1", rein.RunCompletedPayload{RunID: "run_1", Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, RolledBack: true}), `#7 03:04:05.006 session.run_completed run_1 status="CANCELLED" reason="cancelled" rolled_back=true`},
		{mk(rein.EventToolResult, "run_1", rein.ToolResultPayload{RunID: "run_1", ToolUseID: "call_1", Output: "in doubt: x", IsError: true, InDoubt: true}), `#7 03:04:05.006 agent.tool_result run_1 tool_use_id="call_1" is_error=true in_doubt=true output="in doubt: x"`},
		{mk(rein.EventToolResult, "run_1", rein.ToolResultPayload{RunID: "run_1", ToolUseID: "call_1", Output: "ok"}), `#7 03:04:05.006 agent.tool_result run_1 tool_use_id="call_1" is_error=false output="ok"`},
		{mk(rein.EventStepRestarted, "run_1", rein.StepRestartedPayload{RunID: "run_1", Step: 3, Attempt: 2}), `#7 03:04:05.006 agent.step_restarted run_1 step=3 attempt=2`},
		{mk("future.event", "", map[string]any{"b": 1, "a": "x"}), `#7 03:04:05.006 future.event a="x" b=1`},
	}
	for _, tc := range tests {
		if got := (eventText{}).logLine(tc.e); got != tc.want {
			t.Errorf("logLine(%s)\n got %s\nwant %s", tc.e.Type, got, tc.want)
		}
	}
}

func TestReplyPrinter(t *testing.T) {
	tests := []struct {
		name string
		do   func(r *replyPrinter)
		want string
	}{
		{"deltas spell the reply", func(r *replyPrinter) { r.delta(1, "hel"); r.delta(1, "lo"); r.final("hello") }, "hello\n"},
		{"no deltas", func(r *replyPrinter) { r.final("hello") }, "hello\n"},
		{"deltas show a prefix", func(r *replyPrinter) { r.delta(1, "hel"); r.final("hello") }, "hello\n"},
		{"deltas of an earlier step", func(r *replyPrinter) { r.delta(1, "thinking"); r.delta(2, "done"); r.final("done") }, "thinking\ndone\n"},
		{"a reply unlike its deltas", func(r *replyPrinter) { r.delta(1, "abc"); r.final("xyz") }, "abc\nxyz\n"},
		{"text ending in a newline", func(r *replyPrinter) { r.delta(1, "line\n"); r.final("line\n") }, "line\n"},
		{"a restarted step", func(r *replyPrinter) { r.delta(2, "hal"); r.restart(2); r.delta(2, "hello"); r.final("hello") }, "hal\nhello\n"},
		{"a restarted step with no new deltas", func(r *replyPrinter) { r.delta(2, "hal"); r.restart(2); r.final("hello") }, "hal\nhello\n"},
		{"a restart of another step", func(r *replyPrinter) { r.delta(1, "hel"); r.restart(2); r.delta(1, "lo"); r.final("hello") }, "hello\n"},
	}
	for _, tc := range tests {
		var b strings.Builder
		r := &replyPrinter{w: &b}
		tc.do(r)
		if b.String() != tc.want {
			t.Errorf("%s: printed %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}
