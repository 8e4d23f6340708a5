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

// TestCrashRestart: the server process is SIGKILLed mid-run. A new server
// on the same SQLite file records the RUNNING run FAILED (reason error,
// with its session.run_completed) within one lease TTL, starts the queued
// runs in order without any request, and the log's seq continues without
// a gap.
func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "rein.db")
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
	sid := remote.createSession("")
	a := remote.send("", sid, "long A", nil)["run_id"].(string)
	b := remote.send("", sid, "B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	c := remote.send("", sid, "C", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	remote.waitEvent("", sid, is(rein.EventToolUse, a))
	before := remote.events("", sid)

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true

	restart := time.Now()
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sv := serve(t, options{store: st, leaseTTL: crashTTL})
	pa := sv.completion("", sid, a)
	lost := time.Since(restart)
	t.Logf("crashed run recorded %v after the restart: %s", lost, pa.Error)
	if pa.Status != rein.StatusFailed || pa.Reason != rein.ReasonError || pa.Error == "" {
		t.Fatalf("the crashed run: %+v", pa)
	}
	// The lease was renewed at most TTL/3 before the kill, so it expires
	// within one TTL of the restart; the margin covers a busy machine.
	if lost > crashTTL+time.Second {
		t.Fatalf("the crashed run was recorded failed %v after the restart; TTL is %v", lost, crashTTL)
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
	// The dangling tool call of the lost run got its error result.
	if r, err := find(all, is(rein.EventToolResult, a)); err != nil || payloadOf(t, r)["is_error"] != true || r.Seq > aEnd.Seq {
		t.Fatalf("lost run's tool call has no error result before its completion: %v", err)
	}
	if sess := sv.must(200, "GET", "/api/sessions/"+sid, "", nil); sess["state"] != "idle" {
		t.Fatalf("session after recovery: %v", sess)
	}
	if err := sv.shutdown(); err != nil {
		t.Fatal(err)
	}
}
