package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/reinhq/rein/bench/load"
)

// TestBenchCommand: a seconds-long rein bench against a server it starts
// writes every report file and prints the table; bad flags are usage
// errors naming the flag.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := run(t, "", nil, "bench", "--sessions", "3", "--messages", "2", "--chunks", "3",
		"--chunk-delay", "1ms", "--tool-calls", "1", "--stop-fraction", "0.5", "--idle-streams", "3",
		"--store", "sqlite:"+filepath.Join(dir, "bench.db"), "--out", filepath.Join(dir, "out"),
		"--cpuprofile", filepath.Join(dir, "cpu.out"))
	if code != 0 {
		t.Fatalf("rein bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// A CPU profile is gzipped protobuf: it starts with gzip's magic.
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.out")); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--cpuprofile wrote %d bytes, %v; want a gzipped profile", len(b), err)
	}
	for _, f := range []string{load.FileJSON, load.FileSVG, load.FileTable, load.FileScript} {
		if st, err := os.Stat(filepath.Join(dir, "out", f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	f, err := os.Open(filepath.Join(dir, "out", load.FileJSON))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := load.ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Verification.Complete || rep.Runs.Completed != 6 {
		t.Errorf("report: complete=%v, %d runs completed, want 6", rep.Verification.Complete, rep.Runs.Completed)
	}
	table, err := os.ReadFile(filepath.Join(dir, "out", load.FileTable))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, string(table)) {
		t.Errorf("stdout does not hold the table:\n%s", out)
	}

	code, _, errs = run(t, "", nil, "bench", "--sessions", "0")
	if code != exitUsage || !strings.Contains(errs, "--sessions") {
		t.Errorf("rein bench --sessions 0: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, "", nil, "bench", "--stop-mode", "sideways")
	if code != exitUsage || !strings.Contains(errs, "--stop-mode") {
		t.Errorf("rein bench --stop-mode sideways: exit %d, stderr %q", code, errs)
	}
}

// TestBenchAgainstAServerCollectsLess: against a server of its own, rein
// bench's collector runs at GOGC=400 unless the environment sets GOGC; the
// in-process server's process keeps the default (its figures are rein
// serve's).
func TestBenchAgainstAServerCollectsLess(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	s := startServe(t, nil, "--addr", "127.0.0.1:0", "--store", "memory:", "--model", "scripted:testdata/client-script.yaml")
	args := []string{"bench", "--url", s.url, "--sessions", "2", "--messages", "1", "--chunks", "2", "--chunk-delay", "1ms", "--idle-streams", "-1"}
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{nil, 400},
		{map[string]string{"GOGC": "150"}, 100},
	} {
		debug.SetGCPercent(100)
		if code, out, errs := run(t, "", c.env, args...); code != 0 {
			t.Fatalf("rein bench --url: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
		}
		if got := debug.SetGCPercent(100); got != c.want {
			t.Errorf("env %v: GC percent %d after rein bench --url, want %d", c.env, got, c.want)
		}
	}
	dir := t.TempDir()
	debug.SetGCPercent(100)
	if code, out, errs := run(t, "", nil, "bench", "--sessions", "2", "--messages", "1", "--chunks", "2", "--chunk-delay", "1ms",
		"--idle-streams", "-1", "--store", "sqlite:"+filepath.Join(dir, "b.db")); code != 0 {
		t.Fatalf("rein bench: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after rein bench with a server in its process, want 100 (unchanged)", got)
	}
}
