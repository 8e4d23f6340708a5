//go:build unix

package sqlite

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/reinhq/rein"
)

// TestOutOfDescriptorsIsNamed: an error that carries EMFILE or ENFILE is
// reported as running out of descriptors (unavailable, with the fix), not
// as whatever the failing call was.
func TestOutOfDescriptorsIsNamed(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := mapErr("/data/rein.db", "opening a read connection", fmt.Errorf("open /data/rein.db-wal: %w", errno))
		if rein.CodeOf(err) != rein.CodeUnavailable || !strings.Contains(err.Error(), "too many open files: raise the limit (ulimit -n)") {
			t.Errorf("%v: mapped to %v", errno, err)
		}
	}
	if descriptorsExhausted() {
		t.Error("descriptorsExhausted in a test process with descriptors to spare")
	}
}

// TestDescriptorsExhaustedProbe runs the probe in a child process whose
// descriptor limit is used up: it must say so (the parent's limit is left
// alone, other tests need it).
func TestDescriptorsExhaustedProbe(t *testing.T) {
	if os.Getenv("REIN_FD_PROBE_CHILD") == "1" {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		lim.Cur = 64
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Skip("cannot lower RLIMIT_NOFILE:", err)
		}
		var files []*os.File
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				if !outOfDescriptors(err) {
					t.Fatalf("open failed otherwise: %v", err)
				}
				break
			}
			files = append(files, f)
		}
		if !descriptorsExhausted() {
			t.Fatal("descriptorsExhausted = false with no descriptor left")
		}
		files[0].Close()
		files = files[1:]
		if descriptorsExhausted() {
			t.Fatal("descriptorsExhausted = true with a descriptor free")
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDescriptorsExhaustedProbe$", "-test.v")
	cmd.Env = append(os.Environ(), "REIN_FD_PROBE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
