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

// listenURL finds the address in the start-up line, text or JSON.
var listenURL = regexp.MustCompile(`"?url"?[=:]"?(https?://[^\s"]+)`)

// startServe runs rein serve until stop, and waits until it listens.
func startServe(t *testing.T, env map[string]string, args ...string) *serving {
	t.Helper()
	ctx, stop := context.WithCancel(ctxT(t))
	s := &serving{stderr: newSyncBuffer(), stop: stop, done: make(chan int, 1)}
	std := stdio{in: strings.NewReader(""), out: io.Discard, err: s.stderr, lookupEnv: fakeEnv(env)}
	go func() { s.done <- mainWith(ctx, append([]string{"serve"}, args...), std) }()
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
		code, _, stderr := run(t, "", nil, append([]string{"serve"}, append(args, "--store", "memory:")...)...)
		if code == 0 || !strings.Contains(stderr, "without --tokens") {
			t.Fatalf("%v: exit %d, stderr:\n%s", args, code, stderr)
		}
	}
	// The same through the environment.
	code, _, stderr := run(t, "", map[string]string{"REIN_ADDR": "0.0.0.0:0", "REIN_STORE": "memory:"}, "serve")
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
		{[]string{"--tokens", bad}, "rein: --tokens: " + bad + `:3: want "TOKEN OWNER"`},
		{[]string{"--tokens", filepath.Join(dir, "missing")}, "rein: --tokens: tokens file: open " + filepath.Join(dir, "missing")},
		{[]string{"--drain-timeout", "0s"}, `--drain-timeout "0s": must be a positive duration such as 10s`},
		{[]string{"--store", "nosuch:x"}, `--store: unknown store "nosuch:x": use sqlite:PATH, postgres://… or memory:`},
		{[]string{"--confirm", "no_such_tool"}, `--confirm: unknown tool "no_such_tool": name tools among sleep, `},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--lease-ttl", "0s"}, `--lease-ttl "0s": must be a positive duration`},
		{[]string{"--lease-ttl", "-1s"}, `--lease-ttl "-1s": must be a positive duration`},
		{[]string{"--lease-ttl", "soon"}, `--lease-ttl "soon": not a duration: use one such as 30s`},
		{[]string{"--resume-attempts", "-1"}, `--resume-attempts "-1": must be a whole number ≥ 0`},
		{[]string{"--resume-attempts", "two"}, `--resume-attempts "two": not a whole number`},
		{[]string{"--resume-attempts", "1.5"}, `--resume-attempts "1.5": not a whole number`},
		{[]string{"--addr", "bogus"}, `--addr "bogus": not a listen address; use HOST:PORT, e.g. 127.0.0.1:8080`},
		{[]string{"--addr", "127.0.0.1:http-alt"}, `--addr "127.0.0.1:http-alt": not a listen address`},
		{[]string{"--log-level", "loud"}, `--log-level "loud": use debug, info, warn or error`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": use text or json`},
		{[]string{"--nosuch"}, "unknown flag --nosuch (rein serve has --addr, "},
		{[]string{"--tokens"}, "--tokens needs a value, e.g. --tokens FILE"},
		{[]string{"--pprof-addr", "0.0.0.0:6060"}, `--pprof-addr "0.0.0.0:6060": must be a loopback HOST:PORT such as 127.0.0.1:6060`},
		{[]string{"--pprof-addr", "6060"}, `--pprof-addr "6060": must be a loopback HOST:PORT`},
	} {
		code, _, stderr := run(t, "", nil, append([]string{"serve", "--addr", "127.0.0.1:0", "--store", "memory:"}, c.args...)...)
		if code != exitUsage || !strings.HasPrefix(stderr, "rein: ") || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "usage: rein serve ") {
			t.Errorf("%v: exit %d, stderr:\n%s", c.args, code, stderr)
		}
	}
	// The same values through the environment name the variable and the
	// flag: a bad REIN_ADDR is an address problem, not a tokens one.
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REIN_LEASE_TTL": "0s"}, `REIN_LEASE_TTL="0s" (--lease-ttl): must be a positive duration`},
		{map[string]string{"REIN_LEASE_TTL": "soon"}, `REIN_LEASE_TTL="soon" (--lease-ttl): not a duration`},
		{map[string]string{"REIN_RESUME_ATTEMPTS": "-3"}, `REIN_RESUME_ATTEMPTS="-3" (--resume-attempts): must be a whole number ≥ 0`},
		{map[string]string{"REIN_RESUME_ATTEMPTS": "many"}, `REIN_RESUME_ATTEMPTS="many" (--resume-attempts): not a whole number`},
		{map[string]string{"REIN_ADDR": "bogus"}, `REIN_ADDR="bogus" (--addr): not a listen address; use HOST:PORT, e.g. 127.0.0.1:8080`},
		{map[string]string{"REIN_LOG_LEVEL": "verbose"}, `REIN_LOG_LEVEL="verbose" (--log-level): use debug, info, warn or error`},
		{map[string]string{"REIN_MODEL": "gpt-4o"}, `REIN_MODEL (--model): unknown model "gpt-4o"`},
	} {
		c.env["REIN_STORE"] = "memory:"
		args := []string{"serve"}
		if _, ok := c.env["REIN_ADDR"]; !ok {
			args = append(args, "--addr", "127.0.0.1:0")
		}
		code, _, stderr := run(t, "", c.env, args...)
		if code != exitUsage || !strings.Contains(stderr, "rein: "+c.want) || strings.Contains(stderr, "without --tokens") {
			t.Errorf("%v: exit %d, stderr:\n%s", c.env, code, stderr)
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
	code, _, stderr := run(t, "", nil, "serve", "--addr", "127.0.0.1:0", "--store", "memory:", "--config", bad)
	if code != exitUsage || !strings.Contains(stderr, bad+":4: ") || strings.Contains(stderr, "listening") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = run(t, "", nil, "serve", "--addr", "127.0.0.1:0", "--store", "memory:", "--max-steps", "0")
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
