package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The scenarios of this file are about docs/tools.md (agents and MCP servers of
// the configuration file) and the MCP half of docs/api.md's idempotency keys,
// against a real `rein serve --config` whose MCP server "calc" is a real
// stdio process: the test server of package mcp
// (tool/mcp/internal/testserver/cmd/testserver), built once by path. The
// model is the scripted one of testdata/chaos.yaml, whose "mcp: ..." rules
// make the calls.

const (
	// mcpAddInput starts a run of the "mcp: add" rule: calc__add {a: 19,
	// b: 23}, then calc__idem, then "mcp done: <idem's result>".
	mcpAddInput     = "mcp: add please"
	mcpAddInputJSON = `{"a":19,"b":23}`
	mcpSum          = "42"
	// mcpFailInput: calc__fail (isError), then "after the failure: <result>".
	mcpFailInput = "mcp: fail please"
	mcpFailText  = "it failed on purpose" // testserver.FailText
	// mcpSlowInput: calc__slow, which blocks until cancelled if it ever
	// reaches the server; then "after slow: <result>".
	mcpSlowInput = "mcp: slow please"
	// mcpCountInput: calc__pid and calc__wait_started {n: 0} in one step
	// (the server's pid and how many calls of slow it has seen), then
	// "counted: <wait_started's result>".
	mcpCountInput = "mcp: count please"
	// mcpCrashInput: calc__pid, then calc__crash (the server exits
	// mid-call), then "after the crash: <crash's result>".
	mcpCrashInput = "mcp: crash please"

	// mcpServerName is the server of mcpConfig; its errors start with
	// mcpServerError.
	mcpServerName  = "calc"
	mcpServerError = `MCP server "calc"`
)

var (
	testServerOnce sync.Once
	testServerPath string
	testServerErr  error
)

// testServerBinary builds the MCP test server's stdio command (once for the
// package) and returns its path. An internal package cannot be imported
// from here, but its main package can be built by import path.
func testServerBinary(t *testing.T) string {
	t.Helper()
	testServerOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			testServerErr = fmt.Errorf("building the MCP test server needs the go command: %v", err)
			return
		}
		testServerPath = filepath.Join(binDir, "mcp-testserver")
		if runtime.GOOS == "windows" {
			testServerPath += ".exe"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", testServerPath,
			"github.com/reinhq/rein/tool/mcp/internal/testserver/cmd/testserver")
		if out, err := cmd.CombinedOutput(); err != nil {
			testServerErr = fmt.Errorf("go build the MCP test server: %v\n%s", err, out)
		}
	})
	if testServerErr != nil {
		t.Fatal(testServerErr)
	}
	return testServerPath
}

// writeConfig writes a --config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rein.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// mcpConfig is the configuration of every MCP scenario: agent default may
// call sleep and every tool of calc, agent narrow only sleep; calc is the
// test server on stdio.
func mcpConfig(t *testing.T) string {
	t.Helper()
	// A JSON string is a YAML double-quoted scalar.
	bin, _ := json.Marshal(testServerBinary(t))
	return writeConfig(t, fmt.Sprintf(`agents:
  default:
    tools: ["sleep", "calc__*"]
  narrow:
    tools: ["sleep"]
mcp_servers:
  %s:
    command: [%s, "-name", "calc"]
`, mcpServerName, bin))
}

// startMCPServe starts `rein serve --config` with mcpConfig on store.
func startMCPServe(t *testing.T, store string) *proc {
	t.Helper()
	return startServeWith(ctxFor(t, startTimeout), t, "mcp", store, serveOptions{config: mcpConfig(t)})
}

// newAgentSession creates a session of the named agent and checks that the
// server says it is that agent's.
func newAgentSession(t *testing.T, p *proc, agent string) string {
	t.Helper()
	s, err := p.client.CreateSession(ctxFor(t, callTimeout), client.CreateSessionRequest{Agent: agent})
	if err != nil {
		t.Fatalf("%s: create a session of agent %s: %v", p.name, agent, err)
	}
	if s.Agent != agent {
		t.Fatalf("%s: session %s has agent %q, want %q", p.name, s.ID, s.Agent, agent)
	}
	return s.ID
}

// mcpRun sends text, waits (bounded) for its run to end and checks that it
// completed once with stop, in a gap-free log. It returns the run's events.
func mcpRun(t *testing.T, p *proc, sid, text string) (runID string, run []rein.Event) {
	t.Helper()
	runID = send(t, p, sid, text)
	log := waitRunEnd(ctxFor(t, runTimeout), t, p, sid, runID)
	checkLog(t, log)
	run = runEvents(log, runID)
	checkCompletedOnce(t, run, runID)
	checkRun(t, p, sid, runID, rein.StatusCompleted, rein.ReasonStop)
	return runID, run
}

// call is one tool call of a run and its one result.
type call struct {
	use    rein.ToolUsePayload
	result rein.ToolResultPayload
}

// callsOf returns the run's calls of the named tool, in log order, each
// with its one result; it fails the test unless there are want of them.
func callsOf(t *testing.T, run []rein.Event, runID, name string, want int) []call {
	t.Helper()
	var out []call
	for _, ev := range all(run, rein.EventToolUse) {
		var u rein.ToolUsePayload
		decode(t, ev, &u)
		if u.Name != name {
			continue
		}
		if u.RunID != runID || u.ToolUseID == "" {
			t.Errorf("agent.tool_use %s = %+v, want run %s and a tool_use_id", name, u, runID)
		}
		out = append(out, call{use: u, result: resultOf(t, run, u.ToolUseID)})
	}
	if len(out) != want {
		t.Fatalf("run %s: want %d call(s) of %s, got %d\n%s", runID, want, name, len(out), dump(run))
	}
	return out
}

// checkOK checks that a call succeeded with output want.
func checkOK(t *testing.T, c call, want string) {
	t.Helper()
	if c.result.IsError || c.result.InDoubt || c.result.Output != want {
		t.Errorf("agent.tool_result of %s (%s) = %+v, want the success %q", c.use.Name, c.use.ToolUseID, c.result, want)
	}
}

// checkNotAllowed checks that a call of a tool the agent does not allow got
// an error result saying the tool is not available.
func checkNotAllowed(t *testing.T, c call) {
	t.Helper()
	r := c.result
	if !r.IsError || r.InDoubt || !strings.Contains(r.Output, strconv.Quote(c.use.Name)) ||
		!strings.Contains(r.Output, "unknown tool") || strings.Contains(r.Output, mcpServerError) {
		t.Errorf("agent.tool_result of the not-allowed %s = %+v, want an error result saying %q is an unknown tool (not an MCP server's answer)",
			c.use.Name, r, c.use.Name)
	}
	if c.use.ToolUseID != "" && strings.Contains(r.Output, c.use.ToolUseID) {
		t.Errorf("the not-allowed %s answered with its idempotency key %q: the call reached the server", c.use.Name, c.use.ToolUseID)
	}
}

// checkFinal checks the run's final reply.
func checkFinal(t *testing.T, run []rein.Event, runID, want string) {
	t.Helper()
	if got := finalMessage(t, run, runID).Text; got != want {
		t.Errorf("final reply of run %s = %q, want %q", runID, got, want)
	}
}

// checkAdd checks a run of mcpAddInput on an agent that allows calc: the
// sum in step 1, then in step 2 the idempotency key the server received,
// which is the call's tool_use_id (docs/api.md).
func checkAdd(t *testing.T, run []rein.Event, runID string) {
	t.Helper()
	add := callsOf(t, run, runID, "calc__add", 1)[0]
	if !sameJSON(add.use.Input, json.RawMessage(mcpAddInputJSON)) || add.use.Step != 1 {
		t.Errorf("agent.tool_use calc__add = %+v (input %s), want step 1 with input %s", add.use, add.use.Input, mcpAddInputJSON)
	}
	checkOK(t, add, mcpSum)
	idem := callsOf(t, run, runID, "calc__idem", 1)[0]
	if idem.use.Step != 2 {
		t.Errorf("agent.tool_use calc__idem is in step %d, want 2", idem.use.Step)
	}
	checkOK(t, idem, idem.use.ToolUseID)
	if idem.use.ToolUseID == add.use.ToolUseID {
		t.Errorf("calc__add and calc__idem share the tool_use_id %q", idem.use.ToolUseID)
	}
	checkFinal(t, run, runID, "mcp done: "+idem.use.ToolUseID)
}

// count runs mcpCountInput on a session of an agent that allows calc and
// returns the server's pid and how many calls of slow it has seen.
func count(t *testing.T, p *proc, sid string) (pid string, started string) {
	t.Helper()
	runID, run := mcpRun(t, p, sid, mcpCountInput)
	pc := callsOf(t, run, runID, "calc__pid", 1)[0]
	if pc.result.IsError || pc.result.Output == "" {
		t.Fatalf("agent.tool_result of calc__pid = %+v, want a pid", pc.result)
	}
	if _, err := strconv.Atoi(pc.result.Output); err != nil {
		t.Fatalf("calc__pid answered %q, want a number", pc.result.Output)
	}
	wc := callsOf(t, run, runID, "calc__wait_started", 1)[0]
	if wc.result.IsError || !strings.HasPrefix(wc.result.Output, "started=") {
		t.Fatalf("agent.tool_result of calc__wait_started = %+v, want started=N", wc.result)
	}
	checkFinal(t, run, runID, "counted: "+wc.result.Output)
	return pc.result.Output, wc.result.Output
}

// TestMCPCalls is scenarios 1 and 2: agent default calls calc__add and
// calc__idem over a real stdio server; the sum comes back, and the key the
// server received is the call's tool_use_id. Then calc__fail's isError
// result is an error tool result, and the run goes on to its next step.
func TestMCPCalls(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p := startMCPServe(t, b.spec(t))
			sid := newAgentSession(t, p, "default")

			runID, run := mcpRun(t, p, sid, mcpAddInput)
			checkAdd(t, run, runID)

			runID, run = mcpRun(t, p, sid, mcpFailInput)
			fail := callsOf(t, run, runID, "calc__fail", 1)[0]
			if !fail.result.IsError || fail.result.InDoubt || !strings.Contains(fail.result.Output, mcpFailText) {
				t.Errorf("agent.tool_result of calc__fail = %+v, want an error result carrying %q", fail.result, mcpFailText)
			}
			checkFinal(t, run, runID, "after the failure: "+fail.result.Output)
		})
	}
}

// TestMCPNarrowAgent is scenario 3: agent narrow allows only sleep. Its
// calls of calc tools get error results (unknown tool) that never reach
// the server, and its runs complete: calc__idem does not answer with the
// call's key, and a call of calc__slow — which would block its run if it
// reached the server — leaves the server's count of slow calls at 0, read
// from the same server process (same pid) through agent default.
func TestMCPNarrowAgent(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p := startMCPServe(t, b.spec(t))
			wide := newAgentSession(t, p, "default")
			narrow := newAgentSession(t, p, "narrow")

			pid, started := count(t, p, wide)
			if started != "started=0" {
				t.Fatalf("before any slow call the server says %q, want started=0", started)
			}

			runID, run := mcpRun(t, p, narrow, mcpAddInput)
			add := callsOf(t, run, runID, "calc__add", 1)[0]
			checkNotAllowed(t, add)
			idem := callsOf(t, run, runID, "calc__idem", 1)[0]
			checkNotAllowed(t, idem)
			checkFinal(t, run, runID, "mcp done: "+idem.result.Output)

			runID, run = mcpRun(t, p, narrow, mcpSlowInput)
			slow := callsOf(t, run, runID, "calc__slow", 1)[0]
			checkNotAllowed(t, slow)
			checkFinal(t, run, runID, "after slow: "+slow.result.Output)

			pid2, started := count(t, p, wide)
			if pid2 != pid {
				t.Fatalf("the calc server changed from pid %s to %s: its count says nothing", pid, pid2)
			}
			if started != "started=0" {
				t.Errorf("after agent narrow's calc__slow the server says %q, want started=0: a not-allowed call reached the server", started)
			}

			// The server's tools are not gone for agent default.
			runID, run = mcpRun(t, p, wide, mcpAddInput)
			checkAdd(t, run, runID)
		})
	}
}

// TestMCPCrashRestart is scenario 4: calc__crash makes the stdio server
// exit mid-call. That call gets an error result naming the server, the run
// goes on, and the next run's calls are answered by a new server process
// (started again at the next call).
func TestMCPCrashRestart(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p := startMCPServe(t, b.spec(t))
			sid := newAgentSession(t, p, "default")

			runID, run := mcpRun(t, p, sid, mcpCrashInput)
			pc := callsOf(t, run, runID, "calc__pid", 1)[0]
			if pc.result.IsError || pc.result.Output == "" {
				t.Fatalf("agent.tool_result of calc__pid = %+v, want a pid", pc.result)
			}
			crash := callsOf(t, run, runID, "calc__crash", 1)[0]
			if !crash.result.IsError || crash.result.InDoubt || !strings.HasPrefix(crash.result.Output, mcpServerError) {
				t.Errorf("agent.tool_result of calc__crash = %+v, want an error result starting %q", crash.result, mcpServerError)
			}
			checkFinal(t, run, runID, "after the crash: "+crash.result.Output)

			runID, run = mcpRun(t, p, sid, mcpAddInput)
			checkAdd(t, run, runID)

			pid, started := count(t, p, sid)
			if pid == pc.result.Output {
				t.Errorf("the calc server still has pid %s after calc__crash: it did not exit", pid)
			}
			if started != "started=0" {
				t.Errorf("the restarted server says %q, want started=0", started)
			}
		})
	}
}

// TestMCPConfigErrorExits is scenario 5: a config whose agent tools entry
// matches no tool stops `rein serve` before it listens, non-zero, with
// FILE:LINE: reason on stderr.
func TestMCPConfigErrorExits(t *testing.T) {
	t.Parallel()
	bin, _ := json.Marshal(testServerBinary(t))
	cfg := writeConfig(t, fmt.Sprintf(`agents:
  default:
    tools: ["sleep", "nosuch"]
mcp_servers:
  calc:
    command: [%s]
`, bin))
	const badLine = 3 // the tools line

	work := t.TempDir()
	ctx := ctxFor(t, startTimeout)
	cmd := exec.Command(reinBinary(t), "serve",
		"--addr", "127.0.0.1:0",
		"--store", "sqlite:"+filepath.Join(work, "rein.db"),
		"--model", "scripted:"+script(t),
		"--workspace", filepath.Join(work, "workspace"),
		"--config", cfg,
	)
	cmd.Dir = work
	cmd.Env = serveEnv()
	stderr := newStderrBuffer()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case <-done:
	case <-stderr.listening:
		t.Fatalf("rein serve listened with a config whose tools entry matches nothing:\n%s", stderr.String())
	case <-ctx.Done():
		t.Fatalf("rein serve did not exit: %v\n%s", context.Cause(ctx), stderr.String())
	}
	out := stderr.String()
	if code := cmd.ProcessState.ExitCode(); code <= 0 {
		t.Errorf("rein serve exited with %v, want a non-zero exit code\n%s", cmd.ProcessState, out)
	}
	if listenURL.MatchString(out) {
		t.Errorf("rein serve logged that it listened:\n%s", out)
	}
	want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cfg) + `:` + strconv.Itoa(badLine) + `: .*nosuch`)
	if !want.MatchString(out) {
		t.Errorf("stderr does not say %s:%d: ... about \"nosuch\":\n%s", cfg, badLine, out)
	}
	t.Logf("rein serve exited %d:\n%s", cmd.ProcessState.ExitCode(), out)
}
