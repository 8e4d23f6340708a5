package readme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Markers a README author writes (see the package doc).
const (
	markRunsUntilCtrlC = "# (runs until Ctrl-C)"
	markNeedsDocker    = "# (needs Docker)"
)

var (
	// buildCommand is the README's way of building the binary.
	buildCommand = regexp.MustCompile(`^go build -o rein \./cmd/rein(\s|$)`)
	// serveCommand starts a server, whether the README marks it or not.
	serveCommand = regexp.MustCompile(`(^|[\s/])rein serve(\s|$)`)
	// apiError is the body of any non-2xx answer of the API.
	apiError = regexp.MustCompile(`"error":\{"code":`)
)

// expectations are what the README promises a reader will see. Each names
// a command by a piece of its text (after the port is rewritten) and a
// pattern the output of the block holding it must match; a long-lived
// command's output must match before the test stops it. A README that no
// longer has the command fails the test too: these are the walkthrough's
// steps, not optional extras.
var expectations = []struct {
	command string
	output  string
}{
	{`echo "$SID"`, `(?m)^ses_[0-9A-Za-z]+$`},
	{`echo "$RUN_ID"`, `(?m)^run_[0-9A-Za-z]+$`},
	{`"type":"user.supplement"`, `"supplement_id":"sup_[0-9A-Za-z]+","status":"queued"`},
	// The note was read by a step of the run: the README waits for it.
	{`grep -o '"type":"agent.supplement_consumed"`, `"type":"agent.supplement_consumed","payload":\{"supplement_id":"sup_[0-9A-Za-z]+","run_id":"run_[0-9A-Za-z]+","step":[0-9]+\}`},
	// The stop of exactly that run was accepted, and is in the log after
	// the cursor taken just before it.
	{`"type":"user.interrupt"`, `"accepted":true,"run_id":"run_`},
	{`events?after=$CURSOR"`, `"type":"user.interrupt","payload":\{"run_id":"run_[0-9A-Za-z]+","mode":"interrupt","accepted":true\}`},
	// The live stream showed the note's consumption and the run's end,
	// interrupted (a cooperative stop ends COMPLETED).
	{`/events/stream`, `(?s)event: agent.supplement_consumed\n.*event: session.run_completed\ndata: [^\n]*"status":"COMPLETED","reason":"interrupted"`},
	{`rein run "hello"`, `offline demo model`},
}

// command is one logical line of a block (continuations joined).
type command struct {
	line int    // in README.md
	text string // with the port rewritten
}

type block struct {
	line     int
	commands []command
}

// TestReadmeShellBlocks runs README.md's shell blocks in order.
func TestReadmeShellBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rein and runs the README's walkthrough (about 15 s)")
	}
	for _, tool := range []string{"bash", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's commands need %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	blocks := parseBlocks(string(readme), port)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh block")
	}
	checkExpectationsFound(t, blocks)

	sh := newShell(t, root, port)
	sh.build()
	for _, b := range blocks {
		sh.runBlock(b)
		if t.Failed() {
			break
		}
	}
	sh.finish()
}

// parseBlocks returns the ```sh blocks of a Markdown text, each as its
// logical commands, with localhost:8080 and 127.0.0.1:8080 pointing at port.
func parseBlocks(md string, port int) []block {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	rewrite := strings.NewReplacer("localhost:8080", addr, "127.0.0.1:8080", addr, "go run ./cmd/rein", "rein")
	var blocks []block
	var cur *block
	inFence := false
	var pending strings.Builder
	pendingLine := 0
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			switch {
			case !inFence:
				inFence = true
				if trimmed == "```sh" {
					blocks = append(blocks, block{line: i + 1})
					cur = &blocks[len(blocks)-1]
				}
			default:
				inFence, cur = false, nil
			}
			continue
		}
		if cur == nil {
			continue
		}
		if pending.Len() == 0 {
			pendingLine = i + 1
		}
		if strings.HasSuffix(line, `\`) {
			// bash joins it with the next line, as in a terminal.
			pending.WriteString(line)
			pending.WriteString("\n")
			continue
		}
		pending.WriteString(line)
		text := pending.String()
		pending.Reset()
		if strings.TrimSpace(text) == "" {
			continue
		}
		cur.commands = append(cur.commands, command{line: pendingLine, text: rewrite.Replace(text)})
	}
	return blocks
}

// checkExpectationsFound fails for an expectation whose command the README
// no longer has.
func checkExpectationsFound(t *testing.T, blocks []block) {
	t.Helper()
	for _, e := range expectations {
		found := false
		for _, b := range blocks {
			for _, c := range b.commands {
				found = found || strings.Contains(c.text, e.command)
			}
		}
		if !found {
			t.Errorf("README.md has no command containing %q any more (the walkthrough step it shows is checked here: update the README or this test)", e.command)
		}
	}
}

func (c command) is(mark string) bool { return strings.Contains(c.text, mark) }

// code is the command without a trailing comment, for matching.
func (c command) code() string {
	s := strings.TrimSpace(c.text)
	if i := strings.Index(s, " #"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

func (c command) comment() bool { return strings.HasPrefix(strings.TrimSpace(c.text), "#") }

func (c command) skipped() bool { return c.code() == "go test ./..." }

func (c command) longLived() bool {
	return !c.comment() && (c.is(markRunsUntilCtrlC) || serveCommand.MatchString(c.code()))
}

// shell runs blocks the way a reader would in one terminal (plus a second
// one for the commands that run until Ctrl-C).
type shell struct {
	t     *testing.T
	root  string // the repository, where the build runs
	work  string // the reader's folder: the binary, rein.db, rein-workspace
	state string // the shell variables blocks set, for the next blocks
	env   []string
	port  int

	mu sync.Mutex
	bg []*background // in start order
}

// background is a command started to run until Ctrl-C.
type background struct {
	cmd    command
	proc   *exec.Cmd
	out    *os.File
	done   chan struct{} // closed when it has exited
	err    error         // its exit, once done is closed
	server bool
}

func newShell(t *testing.T, root string, port int) *shell {
	work := t.TempDir()
	env := []string{}
	for _, kv := range os.Environ() {
		// The reader's own REIN_* settings must not change what the README
		// commands do; PATH gets the binary's folder first.
		if strings.HasPrefix(kv, "REIN_") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"PATH="+work+string(os.PathListSeparator)+os.Getenv("PATH"),
		"REIN_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"REIN_SERVER=http://127.0.0.1:"+strconv.Itoa(port),
	)
	sh := &shell{t: t, root: root, work: work, state: filepath.Join(work, ".readme-test-state.sh"), env: env, port: port}
	t.Cleanup(sh.killAll)
	return sh
}

// build puts the binary the README's build command made in the reader's
// folder, as ./rein.
func (sh *shell) build() {
	if err := os.Symlink(reinBinary(sh.t), filepath.Join(sh.work, "rein")); err != nil {
		sh.t.Fatal(err)
	}
}

// The binary is built once per test process, by the README's own build
// command, and shared by the tests of this package.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// reinBinary runs the README's build command (`go build -o rein
// ./cmd/rein`) from the repository root, with the output moved to a
// temporary folder, and returns the binary's path.
func reinBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			built.err = err
			return
		}
		readme, err := os.ReadFile(filepath.Join(root, "README.md"))
		if err != nil {
			built.err = err
			return
		}
		var build *command
		for _, b := range parseBlocks(string(readme), 8080) {
			for _, c := range b.commands {
				if build == nil && buildCommand.MatchString(c.code()) {
					build = &c
				}
			}
		}
		if build == nil {
			built.err = errors.New("README.md no longer says how to build the binary (`go build -o rein ./cmd/rein`)")
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "rein-readme-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "rein")
		args := strings.Fields(build.code())[2:] // after "go build"
		for i, a := range args {
			if a == "rein" && i > 0 && args[i-1] == "-o" {
				args[i] = built.path
			}
		}
		if raceEnabled {
			args = append([]string{"-race"}, args...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("README.md:%d: %s: %v\n%s", build.line, build.code(), err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

func (sh *shell) runBlock(b block) {
	t := sh.t
	if len(b.commands) > 0 && strings.TrimSpace(b.commands[0].text) == markNeedsDocker {
		t.Logf("README.md:%d: skipped (needs Docker; TestContainerImageEnvironment and internal/packaging stand in for it)", b.line)
		return
	}
	var fg []command
	flush := func() {
		if len(fg) > 0 {
			sh.foreground(b, fg)
			fg = nil
		}
	}
	for _, c := range b.commands {
		switch {
		case c.comment():
			fg = append(fg, c) // harmless, and keeps line numbers readable
		case buildCommand.MatchString(c.code()):
			// Built before the first block.
		case c.skipped():
			t.Logf("README.md:%d: skipped %q (it is what runs this test)", c.line, c.code())
		case c.longLived():
			flush()
			sh.start(c)
		default:
			fg = append(fg, c)
		}
		if t.Failed() {
			return
		}
	}
	flush()
}

// script wraps commands so that they see the variables earlier blocks set,
// and leave theirs for the next ones.
func (sh *shell) script(cmds []command) string {
	var s strings.Builder
	fmt.Fprintf(&s, "__state=%s\nif [ -f \"$__state\" ]; then . \"$__state\"; fi\n", shellQuote(sh.state))
	for _, c := range cmds {
		s.WriteString(c.text)
		s.WriteString("\n")
	}
	return s.String()
}

// saveState is appended to a foreground script: it writes the shell's own
// variables (not the environment's, not bash's) for the next blocks.
const saveState = `
__save_state() {
  local __v __d __f
  for __v in $(compgen -v); do
    case "$__v" in __*|BASH*|COMP*|HIST*|FUNCNAME|PIPESTATUS|_|GROUPS|DIRSTACK|LINENO|RANDOM|SRANDOM|SECONDS|EPOCHREALTIME|EPOCHSECONDS|PPID|UID|EUID|SHELLOPTS|PWD|OLDPWD|SHLVL|OPTIND|OPTERR|OPTARG|IFS|PS4|COLUMNS|LINES|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|REPLY) continue ;; esac
    __d=$(declare -p "$__v")
    __f=${__d#declare -}
    __f=${__f%% *}
    case "$__f" in *x*|*r*) continue ;; esac
    printf '%s\n' "$__d"
  done > "$__state.new"
  mv "$__state.new" "$__state"
}
__save_state
`

// foreground runs a block's consecutive ordinary commands as one script.
func (sh *shell) foreground(b block, cmds []command) {
	t := sh.t
	script := sh.script(cmds) + saveState
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = sh.work, sh.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	where := fmt.Sprintf("README.md:%d (block at line %d)", cmds[0].line, b.line)
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish in 60 s:\n%s\noutput:\n%s%s", where, listing(cmds), out.String(), sh.serverLogs())
	}
	if err != nil {
		t.Fatalf("%s failed (%v):\n%s\noutput:\n%s%s", where, err, listing(cmds), out.String(), sh.serverLogs())
	}
	t.Logf("%s:\n%s\n→\n%s", where, listing(cmds), out.String())
	sh.check(where, cmds, out.String(), false)
}

// check applies the generic rule (no API error) and the expectations of
// cmds to their output.
func (sh *shell) check(where string, cmds []command, out string, eventually bool) bool {
	t := sh.t
	if m := apiError.FindStringIndex(out); m != nil {
		t.Errorf("%s: the API answered an error:\n%s", where, out)
		return false
	}
	ok := true
	for _, e := range expectations {
		for _, c := range cmds {
			if !strings.Contains(c.text, e.command) {
				continue
			}
			if !regexp.MustCompile(e.output).MatchString(out) {
				ok = false
				if !eventually {
					t.Errorf("%s: the output of %q does not show %s:\n%s", where, c.code(), e.output, out)
				}
			}
		}
	}
	return ok
}

// start runs a command that lasts until Ctrl-C in the background. A server
// replaces the one running (the reader stops it first: it must exit 0), and
// the test goes on once it answers /healthz.
func (sh *shell) start(c command) {
	t := sh.t
	isServer := serveCommand.MatchString(c.code())
	if isServer {
		for _, b := range sh.bg {
			if b.server && !b.exited() {
				sh.stop(b)
			}
		}
	}
	sh.mu.Lock()
	n := len(sh.bg)
	sh.mu.Unlock()
	out, err := os.Create(filepath.Join(sh.work, fmt.Sprintf(".readme-test-bg-%d.log", n)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", sh.script([]command{c}))
	cmd.Dir, cmd.Env = sh.work, sh.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("README.md:%d: %s: %v", c.line, c.code(), err)
	}
	b := &background{cmd: c, proc: cmd, out: out, done: make(chan struct{}), server: isServer}
	go func() {
		b.err = cmd.Wait()
		close(b.done)
	}()
	sh.mu.Lock()
	sh.bg = append(sh.bg, b)
	sh.mu.Unlock()
	t.Logf("README.md:%d: started in the background: %s", c.line, c.code())
	if isServer {
		sh.waitHealthy(b)
	}
}

func (b *background) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *background) output() string {
	data, _ := os.ReadFile(b.out.Name())
	return string(data)
}

// waitHealthy polls the server's /healthz (an external process: there is
// nothing to wait on but its answer) until it answers 200.
func (sh *shell) waitHealthy(b *background) {
	t := sh.t
	url := "http://127.0.0.1:" + strconv.Itoa(sh.port) + "/healthz"
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-b.done:
			t.Fatalf("README.md:%d: %s exited before it served (%v):\n%s", b.cmd.line, b.cmd.code(), b.err, b.output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("README.md:%d: %s did not answer %s within 60 s:\n%s", b.cmd.line, b.cmd.code(), url, b.output())
		}
	}
}

// stop is the reader's Ctrl-C: SIGINT to the command's process group. A
// server must then drain and exit 0.
func (sh *shell) stop(b *background) {
	t := sh.t
	_ = syscall.Kill(-b.proc.Process.Pid, syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-b.proc.Process.Pid, syscall.SIGKILL)
		<-b.done
		t.Errorf("README.md:%d: %s did not exit within 30 s of Ctrl-C:\n%s", b.cmd.line, b.cmd.code(), b.output())
		return
	}
	if b.server && b.err != nil {
		t.Errorf("README.md:%d: %s exited with %v after Ctrl-C (want 0):\n%s", b.cmd.line, b.cmd.code(), b.err, b.output())
	}
}

// finish waits for the background commands' promised output, then stops
// them as the reader would.
func (sh *shell) finish() {
	t := sh.t
	if t.Failed() {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, b := range sh.bg {
		where := fmt.Sprintf("README.md:%d", b.cmd.line)
		for !sh.check(where, []command{b.cmd}, b.output(), true) {
			if t.Failed() {
				return
			}
			if b.exited() || time.Now().After(deadline) {
				sh.check(where, []command{b.cmd}, b.output(), false)
				t.Errorf("%s: %s (exited: %v)", where, b.cmd.code(), b.exited())
				return
			}
			time.Sleep(50 * time.Millisecond) // polling another process's output file
		}
		if b.exited() && !b.server {
			t.Errorf("%s: %s ended by itself (%v); it should run until Ctrl-C:\n%s", where, b.cmd.code(), b.err, b.output())
		}
	}
	for i := len(sh.bg) - 1; i >= 0; i-- {
		if b := sh.bg[i]; !b.exited() {
			sh.stop(b)
		}
	}
}

// serverLogs is the output of the running servers, for a failure message.
func (sh *shell) serverLogs() string {
	var s strings.Builder
	for _, b := range sh.bg {
		if b.server {
			fmt.Fprintf(&s, "\n--- %s (README.md:%d), last lines:\n%s", b.cmd.code(), b.cmd.line, lastLines(b.output(), 20))
		}
	}
	return s.String()
}

func (sh *shell) killAll() {
	for _, b := range sh.bg {
		if !b.exited() {
			_ = syscall.Kill(-b.proc.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	}
}

func listing(cmds []command) string {
	var s strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&s, "  %d: %s\n", c.line, strings.ReplaceAll(c.text, "\n", "\n     "))
	}
	return strings.TrimRight(s.String(), "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// freePort asks the kernel for a loopback port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
