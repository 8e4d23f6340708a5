//go:build unix

package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/sqlite"
)

// crashChildEnv selects the helper mode of the test binary: append events
// to the database named by its value until killed.
const crashChildEnv = "REIN_SQLITE_CRASH_CHILD"

var crashKey = rein.SessionKey{Owner: "crash", ID: "ses_crash"}

type crashPayload struct {
	G int `json:"g"`
	I int `json:"i"`
}

// crashChild appends one event per call from a few goroutines (so group
// commit batches several) and prints "seq g i" for each append only after
// AppendEvents returned, i.e. after the store said it is durable. It runs
// until the parent kills it.
func crashChild(path string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	if err := s.CreateSession(ctx, &store.Session{Owner: crashKey.Owner, ID: crashKey.ID}); err != nil {
		fmt.Fprintln(os.Stderr, "create session:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				p, _ := json.Marshal(crashPayload{G: g, I: i})
				out, err := s.AppendEvents(ctx, crashKey, store.Fence{}, []rein.Event{{Type: rein.EventMessageDelta, Payload: p}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(2)
				}
				// One write per line: a pipe write this small is atomic,
				// so the parent never reads half a line.
				mu.Lock()
				os.Stdout.WriteString(fmt.Sprintf("%d %d %d\n", out[0].Seq, g, i))
				mu.Unlock()
			}
		}()
	}
	select {}
}

// A process killed with SIGKILL in the middle of appending loses no event
// it acknowledged: each is present and intact after reopening, and the log
// continues at last+1 without a gap.
func TestCrashLosesNoAcknowledgedEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]crashPayload{}
	sc := bufio.NewScanner(stdout)
	for len(acked) < 200 && sc.Scan() {
		var seq int64
		var p crashPayload
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d", &seq, &p.G, &p.I); err != nil {
			t.Fatalf("child printed %q: %v", sc.Text(), err)
		}
		acked[seq] = p
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Acknowledgements already in the pipe count too.
	for sc.Scan() {
		var seq int64
		var p crashPayload
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d", &seq, &p.G, &p.I); err == nil {
			acked[seq] = p
		}
	}
	cmd.Wait()
	if len(acked) < 200 {
		t.Fatalf("child acknowledged only %d appends before dying", len(acked))
	}

	s := mustOpen(t, path)
	evs, last, err := s.ReadEvents(t.Context(), crashKey, 0, 1_000_000)
	must(t, err)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap", i, e.Seq)
		}
	}
	for seq, want := range acked {
		if seq > last {
			t.Fatalf("acknowledged seq %d lost: log ends at %d", seq, last)
		}
		var got crashPayload
		if err := json.Unmarshal(evs[seq-1].Payload, &got); err != nil || got != want {
			t.Fatalf("event %d = %s, acknowledged as %+v", seq, evs[seq-1].Payload, want)
		}
	}
	out, err := s.AppendEvents(t.Context(), crashKey, store.Fence{}, []rein.Event{{Type: rein.EventSystemMessage}})
	must(t, err)
	if out[0].Seq != last+1 {
		t.Fatalf("append after the crash got seq %d, want %d", out[0].Seq, last+1)
	}
	t.Logf("%d acknowledged, %d in the log after SIGKILL", len(acked), last)
}
