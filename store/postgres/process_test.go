package postgres

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Tests in this file run part of their work in other OS processes: the test
// binary re-executes itself with helperEnv set, and TestMain hands control
// to runHelper instead of running tests. That is the only honest way to
// check promises about "several processes" — goroutines share a Store's
// writer and hub, processes share nothing but the database.

const (
	helperEnv        = "REIN_PG_TEST_HELPER" // the helper mode: "append"
	helperDSNEnv     = "REIN_PG_TEST_HELPER_DSN"
	helperSchemaEnv  = "REIN_PG_TEST_HELPER_SCHEMA"
	helperOwnerEnv   = "REIN_PG_TEST_HELPER_OWNER"
	helperSessionEnv = "REIN_PG_TEST_HELPER_SESSION"
	helperCountEnv   = "REIN_PG_TEST_HELPER_COUNT" // events to append; 0 = until killed
	helperWorkersEnv = "REIN_PG_TEST_HELPER_WORKERS"
)

// runHelper is a child process's main. In "append" mode it appends events,
// one per AppendEvents call from several goroutines, and prints a line
// "ack SEQ ID" for each acknowledged event — printed only after
// AppendEvents returned, so a line is a promise the parent can check.
func runHelper(mode string) int {
	if mode != "append" {
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	count, _ := strconv.Atoi(os.Getenv(helperCountEnv))
	workers, _ := strconv.Atoi(os.Getenv(helperWorkersEnv))
	key := rein.SessionKey{Owner: os.Getenv(helperOwnerEnv), ID: os.Getenv(helperSessionEnv)}
	ctx := context.Background()
	s, err := Open(ctx, os.Getenv(helperDSNEnv), Options{Schema: os.Getenv(helperSchemaEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	// Tell the parent we are ready and wait for its go-ahead, so that
	// several children start appending at the same moment (process start
	// up takes longer than a few hundred appends).
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "waiting for go:", err)
		return 1
	}

	var (
		mu      sync.Mutex
		out     = bufio.NewWriter(os.Stdout)
		wg      sync.WaitGroup
		failed  bool
		pid     = os.Getpid()
		counter int
	)
	next := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		counter++
		return counter, count == 0 || counter <= count
	}
	for w := range max(workers, 1) {
		wg.Go(func() {
			for {
				n, ok := next()
				if !ok {
					return
				}
				ev := rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: fmt.Sprintf("pid %d worker %d event %d", pid, w, n)})
				got, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{ev})
				mu.Lock()
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					failed = true
					mu.Unlock()
					return
				}
				fmt.Fprintf(out, "ack %d %s\n", got[0].Seq, got[0].ID)
				// Flush every line: the crash test kills us at an
				// arbitrary moment and counts only what it has read.
				_ = out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed {
		return 1
	}
	return 0
}

// ack is one acknowledged event as a child reported it.
type ack struct {
	seq int64
	id  string
}

// child is a running helper process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{} // closed when the child has opened its store
	acks  chan ack      // closed when the child's stdout ends
	err   chan error
}

// start tells the ready children to begin appending, all at once.
func start(t *testing.T, children ...*child) {
	t.Helper()
	for _, c := range children {
		select {
		case <-c.ready:
		case err := <-c.err:
			t.Fatal(err)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// startAppender starts a child appending count events (0: until killed) to
// key with workers goroutines.
func startAppender(t *testing.T, dsn, schema string, key rein.SessionKey, count, workers int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"=append",
		helperDSNEnv+"="+dsn,
		helperSchemaEnv+"="+schema,
		helperOwnerEnv+"="+key.Owner,
		helperSessionEnv+"="+key.ID,
		helperCountEnv+"="+strconv.Itoa(count),
		helperWorkersEnv+"="+strconv.Itoa(workers),
	)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, ready: make(chan struct{}), acks: make(chan ack, 1024), err: make(chan error, 1)}
	go func() {
		defer close(c.acks)
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			c.err <- fmt.Errorf("child did not get ready (printed %q)", sc.Text())
			_, _ = io.Copy(io.Discard, stdout)
			return
		}
		close(c.ready)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "ack" {
				c.err <- fmt.Errorf("child printed %q", sc.Text())
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			seq, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				c.err <- fmt.Errorf("child printed %q", sc.Text())
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			c.acks <- ack{seq, f[2]}
		}
	}()
	t.Cleanup(func() {
		// A test that failed half-way must not leave a child behind.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// collect reads every ack until the child's stdout ends.
func (c *child) collect(t *testing.T) []ack {
	t.Helper()
	var acks []ack
	for a := range c.acks {
		acks = append(acks, a)
	}
	select {
	case err := <-c.err:
		t.Fatal(err)
	default:
	}
	return acks
}

// readAll reads the session's whole log.
func readAll(t testing.TB, s *Store, key rein.SessionKey) []rein.Event {
	t.Helper()
	var all []rein.Event
	for {
		evs, last, err := s.ReadEvents(t.Context(), key, int64(len(all)), 1000)
		if err != nil {
			t.Fatalf("ReadEvents: %v", err)
		}
		all = append(all, evs...)
		if int64(len(all)) >= last || len(evs) == 0 {
			return all
		}
	}
}

// checkLog asserts that the log holds seqs 1..len exactly, and every
// acknowledged event at the seq it was acknowledged with.
func checkLog(t *testing.T, all []rein.Event, acks []ack) {
	t.Helper()
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a duplicate", i, e.Seq)
		}
	}
	for _, a := range acks {
		if a.seq < 1 || a.seq > int64(len(all)) {
			t.Fatalf("acknowledged seq %d (%s) is missing: the log ends at %d", a.seq, a.id, len(all))
		}
		if got := all[a.seq-1].ID; got != a.id {
			t.Fatalf("seq %d is %s, but %s was acknowledged with it", a.seq, got, a.id)
		}
	}
}

func newSessionKey(t *testing.T, s *Store) rein.SessionKey {
	t.Helper()
	sess := &store.Session{Owner: "alice", ID: "ses_" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	if err := s.CreateSession(t.Context(), sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess.Key()
}

// Two processes append to one session at once: the log is 1..2N with no gap
// and no duplicate, and every event either child was told it appended is
// there, at the seq it was told.
func TestTwoProcessesAppendToOneSession(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	s := openStore(t, dsn, Options{Schema: schema})
	key := newSessionKey(t, s)

	const perChild = 400
	a := startAppender(t, dsn, schema, key, perChild, 4)
	b := startAppender(t, dsn, schema, key, perChild, 4)
	start(t, a, b)
	acksA, acksB := a.collect(t), b.collect(t)
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("child A: %v", err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("child B: %v", err)
	}
	if len(acksA) != perChild || len(acksB) != perChild {
		t.Fatalf("children acknowledged %d and %d events, want %d each", len(acksA), len(acksB), perChild)
	}
	all := readAll(t, s, key)
	if len(all) != 2*perChild {
		t.Fatalf("log has %d events, want %d", len(all), 2*perChild)
	}
	checkLog(t, all, append(acksA, acksB...))
	// The test is only worth something if the children really appended
	// at the same time: their seq ranges must interleave.
	lo := func(acks []ack) int64 {
		return slices.MinFunc(acks, func(x, y ack) int { return cmp.Compare(x.seq, y.seq) }).seq
	}
	hi := func(acks []ack) int64 {
		return slices.MaxFunc(acks, func(x, y ack) int { return cmp.Compare(x.seq, y.seq) }).seq
	}
	if hi(acksA) < lo(acksB) || hi(acksB) < lo(acksA) {
		t.Fatalf("children appended one after the other (A %d..%d, B %d..%d), not concurrently",
			lo(acksA), hi(acksA), lo(acksB), hi(acksB))
	}
}

// A child killed with SIGKILL while appending loses nothing it acknowledged:
// AppendEvents returns only after commit.
func TestKilledAppenderLosesNoAcknowledgedEvent(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	s := openStore(t, dsn, Options{Schema: schema})
	key := newSessionKey(t, s)

	c := startAppender(t, dsn, schema, key, 0, 8)
	start(t, c)
	var acks []ack
	for a := range c.acks {
		acks = append(acks, a)
		if len(acks) == 300 {
			// Kill mid-stream: other workers have appends in flight.
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := c.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	if len(acks) < 300 {
		t.Fatalf("child acknowledged only %d events before dying", len(acks))
	}
	all := readAll(t, s, key)
	checkLog(t, all, acks)
	t.Logf("%d events acknowledged before the kill, %d in the log", len(acks), len(all))
}

// A waiter in this process wakes when another process appends: the only
// path for that is the listener's NOTIFY (the safety re-check is set to an
// hour, and this process does not append).
func TestWaiterWakesOnOtherProcessAppend(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	waiting := make(chan struct{}, 1)
	opts := Options{Schema: schema, WaitRecheck: time.Hour}
	opts.hooks.waiting = func(rein.SessionKey) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	s := openStore(t, dsn, opts)
	key := newSessionKey(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(ctx, key, 0) }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("WaitEvents returned %v before anything was appended", err)
	}

	c := startAppender(t, dsn, schema, key, 1, 1)
	start(t, c)
	begin := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("WaitEvents: %v", err)
	}
	t.Logf("woken %v after letting the child append", time.Since(begin))
	if acks := c.collect(t); len(acks) != 1 || acks[0].seq != 1 {
		t.Fatalf("child acknowledged %v, want seq 1", acks)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}
