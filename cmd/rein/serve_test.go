package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// serving is `rein serve` running in-process.
type serving struct {
	url    string
	stderr *syncBuffer
	stop   context.CancelFunc
	done   chan int
}

var listenURL = regexp.MustCompile(`url=(http://\S+)`)

// startServe runs cmdServe until stop, and waits until it listens.
func startServe(t *testing.T, env map[string]string, args ...string) *serving {
	t.Helper()
	ctx, stop := context.WithCancel(ctxT(t))
	s := &serving{stderr: newSyncBuffer(), stop: stop, done: make(chan int, 1)}
	std := stdio{in: strings.NewReader(""), out: io.Discard, err: s.stderr, lookupEnv: fakeEnv(env)}
	go func() { s.done <- cmdServe(ctx, args, std) }()
	t.Cleanup(func() {
		stop()
		<-s.done
	})
	out := s.stderr.waitFor(t, "rein serve listening")
	m := listenURL.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no url in:\n%s", out)
	}
	s.url = m[1]
	return s
}

// shutdown stops the server the way SIGTERM does and returns the exit
// status.
func (s *serving) shutdown(t *testing.T) int {
	t.Helper()
	s.stop()
	code := <-s.done
	s.done <- code
	return code
}

func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# test tokens\ntok-a alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "rein.db")
	// Flags from the environment, one from the command line: --confirm ""
	// (given, empty) confirms nothing, so write_note runs at once.
	env := map[string]string{
		"REIN_STORE":         "sqlite:" + db,
		"REIN_MODEL":         "scripted:testdata/client-script.yaml",
		"REIN_TOKENS":        tokens,
		"REIN_DRAIN_TIMEOUT": "2s",
		"REIN_WORKSPACE":     filepath.Join(dir, "ws"),
	}
	s := startServe(t, env, "--addr", "127.0.0.1:0", "--confirm", "", "--instance-id", "ins-e2e")
	ctx := ctxT(t)
	c := client.New(s.url, client.WithToken("tok-a"))
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New(s.url).ListSessions(ctx); !errors.Is(err, rein.ErrUnauthenticated) {
		t.Fatalf("no token: %v", err)
	}
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "note from serve"})
	if err != nil {
		t.Fatal(err)
	}
	done := waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, res.RunID))
	var p rein.RunCompletedPayload
	if err := done.DecodePayload(&p); err != nil || p.Reason != rein.ReasonStop {
		t.Fatalf("run: %+v %v (a confirmation wait would have hung)", p, err)
	}
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "process_", `rein_runs_started_total{rein_instance="ins-e2e"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d after shutdown:\n%s", code, s.stderr)
	}
	log := s.stderr.String()
	for _, want := range []string{"request_id=", "owner=alice", "session=" + sess.ID, "run=" + res.RunID, "shut down", "instance=ins-e2e"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the SQLite file: %v", err)
	}
}

func TestServeRefusesOpenAddressWithoutTokens(t *testing.T) {
	for _, args := range [][]string{
		{"--addr", "0.0.0.0:0"},
		{"--addr", ":0"},
		{"--addr", "[::]:0"},
	} {
		code, _, stderr := run(t, withoutSignals(cmdServe), "", nil, append(args, "--store", "memory:")...)
		if code == 0 || !strings.Contains(stderr, "without --tokens") {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
	}
	// The same through the environment.
	code, _, stderr := run(t, withoutSignals(cmdServe), "", map[string]string{"REIN_ADDR": "0.0.0.0:0", "REIN_STORE": "memory:"})
	if code == 0 || !strings.Contains(stderr, "without --tokens") {
		t.Fatalf("REIN_ADDR: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestServeOpenAddressWithTokens(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tok bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--addr", "0.0.0.0:0", "--store", "memory:", "--tokens", tokens)
	if !strings.Contains(s.stderr.String(), "auth=tokens") {
		t.Fatalf("log:\n%s", s.stderr)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
}

func TestServeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad-tokens")
	if err := os.WriteFile(bad, []byte("# ok\ntok alice\njust-one-field\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens", bad}, "bad-tokens:3"},
		{[]string{"--tokens", filepath.Join(dir, "missing")}, "--tokens"},
		{[]string{"--drain-timeout", "0s"}, "must be positive"},
		{[]string{"--store", "nosuch:x"}, "--store"},
		{[]string{"--confirm", "no_such_tool"}, "no_such_tool"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--lease-ttl", "0s"}, "--lease-ttl must be positive"},
		{[]string{"--lease-ttl", "-1s"}, "--lease-ttl must be positive"},
		{[]string{"--lease-ttl", "soon"}, "lease-ttl"},
		{[]string{"--resume-attempts", "-1"}, "--resume-attempts must not be negative"},
		{[]string{"--resume-attempts", "two"}, "resume-attempts"},
		{[]string{"--resume-attempts", "1.5"}, "resume-attempts"},
	} {
		code, _, stderr := run(t, withoutSignals(cmdServe), "", nil, append([]string{"--addr", "127.0.0.1:0", "--store", "memory:"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr:\n%s", c.args, code, stderr)
		}
	}
	// The same values through the environment name the flag too.
	for _, env := range []map[string]string{
		{"REIN_LEASE_TTL": "0s"},
		{"REIN_LEASE_TTL": "soon"},
		{"REIN_RESUME_ATTEMPTS": "-3"},
		{"REIN_RESUME_ATTEMPTS": "many"},
	} {
		env["REIN_STORE"] = "memory:"
		want := "--lease-ttl"
		if _, ok := env["REIN_RESUME_ATTEMPTS"]; ok {
			want = "--resume-attempts"
		}
		code, _, stderr := run(t, withoutSignals(cmdServe), "", env, "--addr", "127.0.0.1:0")
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%v: exit %d, stderr:\n%s", env, code, stderr)
		}
	}
}

// TestServeResumeFlags: --resume-attempts 0 (no resume) and a custom
// --lease-ttl are accepted, and the flag's 0 reaches the sessions service
// as "never resume", not as its "default" zero.
func TestServeResumeFlags(t *testing.T) {
	s := startServe(t, map[string]string{"REIN_RESUME_ATTEMPTS": "0"}, "--addr", "127.0.0.1:0", "--store", "memory:", "--lease-ttl", "3s")
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
	for flag, want := range map[int]int{0: -1, 1: 1, 2: 2, 7: 7} {
		if got := resumeOption(flag); got != want {
			t.Errorf("--resume-attempts %d → sessions.Config.ResumeAttempts %d, want %d", flag, got, want)
		}
	}
}

// TestServeConfig: a configuration file's errors stop rein serve before it
// listens, as FILE:LINE: reason; a valid one gives each session its agent.
func TestServeConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("agents:\n  default:\n    model: demo\n    colour: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, withoutSignals(cmdServe), "", nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--config", bad)
	if code != exitUsage || !strings.Contains(stderr, bad+":4: ") || strings.Contains(stderr, "listening") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = run(t, withoutSignals(cmdServe), "", nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--max-steps", "0")
	if code != exitUsage || !strings.Contains(stderr, "--max-steps") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}

	good := filepath.Join(dir, "rein.yaml")
	cfg := "agents:\n  default:\n    system: \"plain\"\n  terse:\n    system: \"be terse\"\n    tools: [\"sleep\", \"read_file\"]\n"
	if err := os.WriteFile(good, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--config", good, "--workspace", filepath.Join(dir, "ws"))
	c := client.New(s.url)
	ctx := ctxT(t)
	if _, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "nobody"}); rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("unknown agent: %v", err)
	}
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "terse"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.Agent != "terse" {
		t.Fatalf("session %+v", sess)
	}
	if code := s.shutdown(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.stderr)
	}
}
