package protocoltest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RunNode runs an adapter's interop test written for its official
// JavaScript client: dir is an npm package pinning the client with a
// lockfile, installed with `npm ci`; start is called next (it starts the
// server and returns the environment the test reads, e.g. REIN_URL), then
// `node --test` runs in dir and must pass exactly want tests. Without node
// or npm on PATH it skips t, unless REIN_REQUIRE_NODE is set (CI sets it);
// a hang fails after a bound rather than at the CI's timeout.
func RunNode(t *testing.T, dir string, want int, start func() []string) {
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
	dir, err = filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ci := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	env := start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-timeout=60000")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# pass "+strconv.Itoa(want)+"\n") {
		t.Fatalf("node --test did not pass its %d tests:\n%s", want, out)
	}
}
