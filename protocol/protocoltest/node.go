package protocoltest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeTimeout bounds a Node interop run: a hang fails with the tests'
// output rather than at the CI's timeout.
const (
	nodeTimeout     = 3 * time.Minute
	nodeTestTimeout = 30 * time.Second
)

// RunNode runs an adapter's interop test in Node against a server: `npm
// ci` of dir's committed lockfile (the official client at its pinned
// version), then `node --test` in dir with env, which must pass exactly
// tests tests. serve starts the server once npm is done and returns the
// environment the tests read (REIN_URL, …). Without node and npm on PATH
// the test is skipped, unless REIN_REQUIRE_NODE is set (CI sets it); with
// -short it is skipped.
func RunNode(t *testing.T, dir string, tests int, serve func() []string) {
	t.Helper()
	node, npm := nodeTools(t)
	abs := npmCI(t, npm, dir)
	env := serve()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", fmt.Sprintf("--test-timeout=%d", nodeTestTimeout.Milliseconds()))
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), fmt.Sprintf("# pass %d\n", tests)) {
		t.Fatalf("node --test did not pass its %d tests:\n%s", tests, out)
	}
}

// nodeTools finds node and npm, skipping the test without them (or with
// -short) unless REIN_REQUIRE_NODE is set.
func nodeTools(t *testing.T) (node, npm string) {
	t.Helper()
	if testing.Short() {
		t.Skip("installs npm packages")
	}
	node, err := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err != nil || err2 != nil {
		if os.Getenv("REIN_REQUIRE_NODE") != "" {
			t.Fatal("node and npm are required (REIN_REQUIRE_NODE is set)")
		}
		t.Skip("node or npm is not on PATH")
	}
	return node, npm
}

// npmCI installs dir's committed lockfile and returns dir's absolute path.
func npmCI(t *testing.T, npm, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ci := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	ci.Dir = abs
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	return abs
}
