package typescript

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestNodeClient builds rein, installs the client's one dev dependency
// from the committed lockfile (npm ci), builds the client with tsc and
// runs its node --test suite against the binary (REIN_BIN), which the
// suite starts as `rein serve` on temporary SQLite stores; then the built
// client runs in headless Chromium (browser_test.go). It skips when node
// or npm is not on PATH: the client is TypeScript, and Node builds it.
func TestNodeClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the TypeScript client's suite starts real servers")
	}
	node, nodeErr := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	if nodeErr != nil || npmErr != nil {
		t.Skip("node and npm (Node >= 20) are not both on PATH: the TypeScript client's tests need them")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building rein needs the go command: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(run(ctx, t, dir, nil, node, "--version"))
	var major int
	if _, err := fmt.Sscanf(version, "v%d.", &major); err != nil || major < 20 {
		t.Skipf("node %s is older than 20, which the TypeScript client needs", version)
	}

	bin := filepath.Join(t.TempDir(), "rein")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	// Without -race: the servers are killed, not inspected, and the race
	// detector's slowdown would only stretch the suite.
	run(ctx, t, "", nil, goTool, "build", "-o", bin, "github.com/reinhq/rein/cmd/rein")

	run(ctx, t, dir, nil, npm, "ci", "--no-audit", "--no-fund")
	run(ctx, t, dir, nil, npm, "run", "build")
	// The test files by name: given a directory, node --test would also
	// run the helpers beside them.
	files, err := filepath.Glob(filepath.Join("test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.mjs files (%v)", err)
	}
	out := run(ctx, t, dir, []string{"REIN_BIN=" + bin}, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	// The figures the suite measured (the reconnect test prints them).
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "reconnect:") {
			t.Log(strings.TrimSpace(sc.Text()))
		}
	}

	t.Run("browser", func(t *testing.T) { testBrowser(ctx, t, bin, dir) })
}

// run runs a command in dir with env added to the test's environment
// (less its REIN_* variables, so a developer's settings change nothing)
// and returns its output; it fails the test, showing the output, when the
// command fails.
func run(ctx context.Context, t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutRein(os.Environ()), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	line := fmt.Sprintf("%s %s (%s)", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	t.Log(line)
	if testing.Verbose() {
		t.Logf("%s", out)
	}
	return string(out)
}
