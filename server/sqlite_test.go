package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store/sqlite"
)

// TestRestartKeepsEverything: a server on a SQLite file shuts down and a
// new one opens the same file: every event is still there, and new events
// continue the seq where the old ones stopped.
func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rein.db")
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sv := serve(t, options{store: st})
	sid := sv.createSession("")
	first := sv.send("", sid, "hello", map[string]any{"client_id": "once"})["run_id"].(string)
	sv.completion("", sid, first)
	sv.results("", sid, ev("user.supplement", map[string]any{"text": "remember me", "id": "sup-keep"}))
	before := sv.events("", sid)
	if err := sv.shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	sv2 := serve(t, options{store: st2})
	kept := sv2.events("", sid)
	if len(kept) != len(before) {
		t.Fatalf("after restart the log has %d events, before it had %d", len(kept), len(before))
	}
	for i := range kept {
		if kept[i].ID != before[i].ID || kept[i].Seq != before[i].Seq || string(kept[i].Payload) != string(before[i].Payload) {
			t.Fatalf("event %d changed across the restart: %+v → %+v", i, before[i], kept[i])
		}
	}
	// client_id idempotency and the acknowledged supplement survived.
	if again := sv2.send("", sid, "hello", map[string]any{"client_id": "once"}); again["run_id"] != first || again["status"] != "COMPLETED" {
		t.Fatalf("client_id repeat after restart: %v", again)
	}
	second := sv2.send("", sid, "hint after restart", nil)["run_id"].(string)
	sv2.completion("", sid, second)
	all := sv2.events("", sid)
	checkLog(t, all)
	if all[len(before)].Seq != before[len(before)-1].Seq+1 {
		t.Fatalf("seq did not continue: %d after %d", all[len(before)].Seq, before[len(before)-1].Seq)
	}
	msg, _ := find(all, is(rein.EventMessage, second))
	if txt := payloadOf(t, msg)["text"]; txt != "hints=[remember me]" {
		t.Fatalf("the supplement pushed before the restart: reply %q", txt)
	}
	if err := sv2.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// The crash test runs a server in a child process: the test binary
// re-executed with these variables set.
const (
	childDBEnv  = "REIN_SERVER_TEST_CHILD_DB"
	childTTLEnv = "REIN_SERVER_TEST_CHILD_TTL"
)

// crashTTL is the turn lease TTL of the crash test: short, so the test is
// quick, and long enough that a loaded machine renews in time.
const crashTTL = time.Second

// runChild serves on the database named by the environment until killed,
// printing "listening ADDR" once it accepts connections.
func runChild() {
	ttl, err := time.ParseDuration(os.Getenv(childTTLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: ttl:", err)
		os.Exit(2)
	}
	st, err := sqlite.Open(context.Background(), os.Getenv(childDBEnv), sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: open:", err)
		os.Exit(2)
	}
	workspace, err := os.MkdirTemp("", "rein-crash-child-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(workspace)
	svc, metrics, err := assemble(options{store: st, leaseTTL: ttl}, workspace)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	srv, err := server.New(server.Config{Service: svc, Metrics: metrics})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	_ = srv.Serve(context.Background(), ln) // until SIGKILL
	os.Exit(3)
}

// crashMidRun starts a server in a child process on the SQLite file at
// path, starts "long A" (executing its hour-long sleep) with B and C queued
// behind it, SIGKILLs the child and returns the log as it was before the
// kill, the session and the three run ids, and when the kill happened.
func crashMidRun(t *testing.T, path string) (before []rein.Event, sid, a, b, c string, killedAt time.Time) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childDBEnv+"="+path, childTTLEnv+"="+crashTTL.String())
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("child said %q (%v)", line, err)
	}
	remote := &stack{t: t, url: "http://" + addr}
	sid = remote.createSession("")
	a = remote.send("", sid, "long A", nil)["run_id"].(string)
	b = remote.send("", sid, "B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	c = remote.send("", sid, "C", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	remote.waitEvent("", sid, is(rein.EventToolUse, a))
	before = remote.events("", sid)

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	return before, sid, a, b, c, time.Now()
}

// TestCrashRestart: the server process is SIGKILLed while a run's tool
// call executes. A new server on the same SQLite file resumes that run
// within one lease TTL: the call is not run again but answered with an
// in-doubt error result, the model's request that made it is not repeated,
// and the run goes on to its next step and completes. Then the queued runs
// start in order without any request, and the log's seq continues without
// a gap.
func TestCrashRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "rein.db")
	before, sid, a, b, c, restart := crashMidRun(t, path)
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sv := serve(t, options{store: st, leaseTTL: crashTTL})
	pa := sv.completion("", sid, a)
	lost := time.Since(restart)
	t.Logf("crashed run ended %v after the restart", lost)
	if pa.Status != rein.StatusCompleted || pa.Reason != rein.ReasonStop {
		t.Fatalf("the resumed run: %+v", pa)
	}
	// The lease was renewed at most TTL/3 before the kill, so it expires
	// within one TTL of the restart; the margin covers a busy machine.
	if lost > crashTTL+time.Second {
		t.Fatalf("the crashed run ended %v after the restart; TTL is %v", lost, crashTTL)
	}
	for _, id := range []string{b, c} {
		if p := sv.completion("", sid, id); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
			t.Fatalf("queued run %s after the crash: %+v", id, p)
		}
	}
	all := sv.events("", sid)
	checkLog(t, all)
	for i := range before {
		if all[i].ID != before[i].ID {
			t.Fatalf("event %d changed across the crash", i)
		}
	}
	aEnd, _ := find(all, is(rein.EventRunCompleted, a))
	bStart, _ := find(all, is(rein.EventRunStarted, b))
	bEnd, _ := find(all, is(rein.EventRunCompleted, b))
	cStart, _ := find(all, is(rein.EventRunStarted, c))
	if !(aEnd.Seq < bStart.Seq && bEnd.Seq < cStart.Seq) {
		t.Fatalf("order after the crash: A ends %d, B starts %d, B ends %d, C starts %d", aEnd.Seq, bStart.Seq, bEnd.Seq, cStart.Seq)
	}
	uses, results, restarts := 0, 0, 0
	for _, e := range all {
		if e.RunID != a {
			continue
		}
		switch e.Type {
		case rein.EventToolUse:
			uses++
		case rein.EventStepRestarted:
			restarts++
		case rein.EventToolResult:
			results++
			p := payloadOf(t, e)
			out, _ := p["output"].(string)
			if p["is_error"] != true || p["in_doubt"] != true || !strings.HasPrefix(out, "in doubt:") || e.Seq > aEnd.Seq {
				t.Fatalf("the executing call's result after the crash: seq %d %v", e.Seq, p)
			}
		}
	}
	// One call, made once, with one (in-doubt) result; the step's model
	// request had ended, so it is not made again.
	if uses != 1 || results != 1 || restarts != 0 {
		t.Fatalf("lost run: %d tool uses, %d results, %d step restarts; want 1, 1, 0", uses, results, restarts)
	}
	msg, err := find(all, is(rein.EventMessage, a))
	if txt, _ := payloadOf(t, msg)["text"].(string); err != nil || !strings.Contains(txt, "woke up: in doubt:") {
		t.Fatalf("the resumed run's reply %q (%v): the model should see the in-doubt result", txt, err)
	}
	if sess := sv.must(200, "GET", "/api/sessions/"+sid, "", nil); sess["state"] != "idle" {
		t.Fatalf("session after recovery: %v", sess)
	}
	if err := sv.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestCrashRestartWithoutResume: with resumes turned off, the run of the
// lost instance ends FAILED with "instance lost" (its executing call gets
// its error result first), and the queued runs go on.
func TestCrashRestartWithoutResume(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "rein.db")
	_, sid, a, b, c, _ := crashMidRun(t, path)
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sv := serve(t, options{store: st, leaseTTL: crashTTL, resumeAttempts: -1})
	if pa := sv.completion("", sid, a); pa.Status != rein.StatusFailed || pa.Reason != rein.ReasonError || pa.Error != "instance lost" {
		t.Fatalf("the crashed run: %+v", pa)
	}
	for _, id := range []string{b, c} {
		if p := sv.completion("", sid, id); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
			t.Fatalf("queued run %s after the crash: %+v", id, p)
		}
	}
	all := sv.events("", sid)
	checkLog(t, all)
	aEnd, _ := find(all, is(rein.EventRunCompleted, a))
	if r, err := find(all, is(rein.EventToolResult, a)); err != nil || payloadOf(t, r)["is_error"] != true || r.Seq > aEnd.Seq {
		t.Fatalf("lost run's tool call has no error result before its completion: %v", err)
	}
	if err := sv.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// TestApprovalSurvivesShutdown: a run waiting for a confirmation is left
// waiting by a graceful shutdown (the drain neither interrupts it nor waits
// for it); after a restart the session is busy with it, lists the call in
// pending_confirmations, and an answer then runs the tool once.
func TestApprovalSurvivesShutdown(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rein.db")
	workspace := t.TempDir()
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sv := serve(t, options{store: st, workspace: workspace})
	sid := sv.createSession("")
	run := sv.send("", sid, "note buy milk", nil)["run_id"].(string)
	req := sv.waitEvent("", sid, is(rein.EventToolConfirmationRequested, run))
	toolUse := payloadOf(t, req)["tool_use_id"].(string)
	if err := sv.shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	sv2 := serve(t, options{store: st2, workspace: workspace})
	sess := sv2.must(200, "GET", "/api/sessions/"+sid, "", nil)
	pend, _ := sess["pending_confirmations"].([]any)
	if sess["state"] != "busy" || sess["current_run_id"] != run || len(pend) != 1 || pend[0].(map[string]any)["tool_use_id"] != toolUse {
		t.Fatalf("session after restart: %v", sess)
	}
	if r := sv2.post("", sid, ev("user.message", map[string]any{"text": "hello"})); r.status != 409 || r.errorCode(t) != "session_busy" {
		t.Fatalf("new message to the waiting session: %d %s", r.status, r.body)
	}
	sv2.results("", sid, ev("user.tool_confirmation", map[string]any{"tool_use_id": toolUse, "allow": true}))
	if done := sv2.completion("", sid, run); done.Status != rein.StatusCompleted {
		t.Fatalf("%+v", done)
	}
	n := 0
	for _, e := range sv2.events("", sid) {
		if e.Type == rein.EventToolConfirmationRequested {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("confirmation requested %d times", n)
	}
	notes, err := os.ReadFile(filepath.Join(workspace, "local", sid, "notes.md"))
	if err != nil || strings.Count(string(notes), "note buy milk") != 1 {
		t.Fatalf("notes %q %v", notes, err)
	}
}
