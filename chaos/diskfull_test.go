package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // PRAGMA integrity_check on the server's file

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// diskSize is the size of the file system the SQLite store of
// TestDiskFullSQLite lives on.
const diskSize = 8 << 20

// smallDisk mounts a tmpfs of diskSize on a fresh directory and returns
// it; it is unmounted when the test ends, after every server the test
// starts later (cleanups run last-registered first). Without the right to
// mount (not root, or no CAP_SYS_ADMIN in a container) the test is
// skipped.
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", diskSize)); err != nil {
		t.Skipf("cannot mount a %d MiB tmpfs for a full disk (%v): the scenario needs root or CAP_SYS_ADMIN", diskSize>>20, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes path until the file system is full and returns how much it
// wrote.
func fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		k, err := f.Write(chunk)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			if k == 0 && len(chunk) > 512 {
				chunk = chunk[:len(chunk)/2]
				continue
			}
			if k == 0 {
				return n
			}
			continue
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
	}
}

// integrityCheck runs PRAGMA integrity_check on the SQLite file, read-only,
// and returns its answer ("ok" for a sound file).
func integrityCheck(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctxFor(t, 30*time.Second), "PRAGMA integrity_check")
	if err != nil {
		t.Fatalf("integrity_check %s: %v", path, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("integrity_check %s: %v", path, err)
	}
	return strings.Join(out, "; ")
}

// diskFull is what fillers were told while the disk was full.
type diskFull struct {
	mu        sync.Mutex
	refused   int      // 503 unavailable answers
	wrong     []string // any other failure
	messages  map[string]int
	acked     int
	firstFull time.Time
}

// record classifies err, an answer to a request sent while the disk may be
// full.
func (d *diskFull) record(err error, what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		d.acked++
		return
	}
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusServiceUnavailable && ce.Code == rein.CodeUnavailable {
		if d.refused == 0 {
			d.firstFull = time.Now()
		}
		d.refused++
		d.messages[ce.Message]++
		return
	}
	if !errors.Is(err, context.Canceled) {
		d.wrong = append(d.wrong, fmt.Sprintf("%s: %v", what, err))
	}
}

func (d *diskFull) refusals() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused
}

// diskFullLog matches what the server logs about the full disk.
var diskFullLog = regexp.MustCompile(`disk is full`)

const (
	// fullRefusals is how many refused requests the clients collect on
	// the full disk before the space returns.
	fullRefusals = 20
	// spaceBack is how much space returns: far less than the WAL may grow
	// to between two of the store's automatic checkpoints (about 40 MB),
	// as when an operator deletes a few files.
	spaceBack = 4 << 20
	// runsAfter is how many more streamed runs each session makes once
	// space is back: each delta is a write, so their WAL grows past
	// spaceBack several times over, while their data stays small.
	runsAfter = 8
)

// TestDiskFullSQLite fills the file system of an SQLite store (a tmpfs of
// 8 MiB) while runs stream and clients keep sending work. While it is
// full, requests that must write are answered 503 unavailable with a
// message that reveals no path, the server logs that the disk is full,
// keeps running, and the file passes PRAGMA integrity_check. Then 4 MiB
// of space return and the same process recovers by itself: the clients'
// retries (503 means retry later) are answered, more runs than the freed
// space holds in WAL complete, every run ends, nothing a client was
// answered is lost (the counts of loadTally), and the file still passes
// integrity_check after a graceful shutdown.
func TestDiskFullSQLite(t *testing.T) {
	t.Parallel()
	disk := smallDisk(t)
	db := filepath.Join(disk, "rein.db")
	ws := filepath.Join(t.TempDir(), "workspace")
	p := startServeWith(ctxFor(t, startTimeout), t, "server", "sqlite:"+db, serveOptions{workspace: ws})
	lc := newLoadClients(t)
	c := lc.of(p)

	// Before the disk fills: sessions with a completed run each.
	const fillers = 4
	l := &load{rep: 1}
	for i := range fillers {
		w := &loadSession{rep: 1, idx: i, kind: kindStream, post: p, read: p, c: c}
		s, err := c.CreateSession(ctxFor(t, callTimeout), client.CreateSessionRequest{})
		if err != nil {
			t.Fatalf("create session: %v", err)
		}
		w.sid = s.ID
		if w.stream, err = dialSSE(p, w.sid, 0); err != nil {
			t.Fatal(err)
		}
		l.sessions = append(l.sessions, w)
	}
	for _, w := range l.sessions {
		runID := w.sendText(ctxFor(t, callTimeout), "before the disk fills", "")
		if runID == "" {
			t.Fatalf("session %s: the first message was refused", w.sid)
		}
		if _, err := w.stream.wait(ctxFor(t, runTimeout), isType(rein.EventRunCompleted, runID)); err != nil {
			t.Fatalf("session %s: the first run did not end: %v", w.sid, err)
		}
	}

	// Clients keep sending streamed runs, supplements and new sessions;
	// the disk fills while runs stream, and the clients go on until the
	// store has refused enough of their requests.
	d := &diskFull{messages: map[string]int{}}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	var wg sync.WaitGroup
	streaming := make(chan struct{}, fillers)
	for _, w := range l.sessions {
		wg.Go(func() {
			once := false
			for ctx.Err() == nil && d.refusals() < fullRefusals {
				runID := w.sendText(ctx, "load-stream full", rein.WhenBusyEnqueue)
				d.record(w.lastErr, "user.message")
				if runID != "" && !once {
					// The run streams: its deltas are being written.
					if _, err := w.stream.wait(ctx, isDelta(runID)); err == nil {
						once = true
						streaming <- struct{}{}
					}
				}
				w.supplement(ctx)
				d.record(w.lastErr, "user.supplement")
				_, err := w.c.CreateSession(ctx, client.CreateSessionRequest{})
				d.record(err, "create session")
				if runID != "" {
					// Paced by the run's end, or by a while when the disk
					// keeps it from ending.
					wctx, wcancel := context.WithTimeout(ctx, time.Second)
					_, _ = w.stream.wait(wctx, isType(rein.EventRunCompleted, runID))
					wcancel()
				}
			}
		})
	}
	mark := p.stderr.Len()
	for range fillers {
		select {
		case <-streaming:
		case <-ctx.Done():
			t.Fatal("the runs did not stream")
		}
	}
	ballast := filepath.Join(disk, "ballast")
	filled := fill(t, ballast)
	t.Logf("the disk is full while runs stream: %s of ballast; %s", mib(filled), diskUsage(disk))
	wg.Wait()
	cancel()
	if d.refused < fullRefusals {
		t.Fatalf("%d requests refused in 60 s on a full disk (%d acknowledged), want %d", d.refused, d.acked, fullRefusals)
	}
	t.Logf("full disk: %d requests answered 503 unavailable (messages %v), %d acknowledged meanwhile", d.refused, d.messages, d.acked)
	for _, w := range d.wrong {
		t.Errorf("on a full disk, want 503 unavailable: %s", w)
	}
	for m := range d.messages {
		if m == "" || strings.Contains(m, disk) || strings.Contains(m, ".db") || strings.Contains(strings.ToLower(m), "sqlite") {
			t.Errorf("503 message %q is empty or reveals the store's file", m)
		}
	}
	if p.stderr.waitFor(ctxFor(t, 5*time.Second), mark, diskFullLog) == "" {
		t.Errorf("the server's log does not say that the disk is full")
	}
	select {
	case <-p.done:
		t.Fatalf("the server exited on a full disk (%v)", p.cmd.ProcessState)
	default:
	}
	if err := p.client.Health(ctxFor(t, callTimeout)); err != nil {
		t.Errorf("/healthz on a full disk: %v", err)
	}
	if got := integrityCheck(t, db); got != "ok" {
		t.Errorf("PRAGMA integrity_check on a full disk = %q, want ok", got)
	}

	// Some space returns; the same process recovers by itself.
	if err := os.Truncate(ballast, filled-spaceBack); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s returned: %s", mib(spaceBack), diskUsage(disk))
	tBack := time.Now()
	s, err := retryUnavailable(ctxFor(t, 30*time.Second), func(ctx context.Context) (*client.Session, error) {
		return c.CreateSession(ctx, client.CreateSessionRequest{})
	})
	if err != nil {
		t.Fatalf("a new session once space returned: %v", err)
	}
	t.Logf("a new session %v after the space returned", time.Since(tBack).Round(time.Millisecond))
	l.sessions = append(l.sessions, &loadSession{rep: 1, idx: fillers, kind: kindStream, post: p, read: p, c: c, sid: s.ID})
	for _, w := range l.sessions {
		w.stop()
	}
	// More runs than the freed space holds in WAL, one after the other in
	// each session; a client retries what is refused.
	parallel(l.sessions, func(w *loadSession) {
		for range runsAfter {
			w.sendText(ctxFor(t, callTimeout), "load-stream after", rein.WhenBusyEnqueue)
			m := w.msgs[len(w.msgs)-1]
			runID, err := retryUnavailable(ctxFor(t, runTimeout), func(ctx context.Context) (string, error) {
				if m.acked {
					return m.runID, nil
				}
				return w.postMsg(ctx, m, rein.WhenBusyEnqueue)
			})
			if err != nil {
				t.Errorf("session %s: a run once space returned: %v", w.sid, err)
				return
			}
			if !waitRunEnded(ctxFor(t, runTimeout), w.c, w.sid, runID) {
				t.Errorf("session %s: run %s did not end within %v once space returned", w.sid, runID, runTimeout)
				return
			}
		}
	})
	t.Logf("%d runs in each session after the space returned, %v; %s", runsAfter, time.Since(tBack).Round(time.Millisecond), diskUsage(disk))
	tl := recoverLoad(t, lc, []*proc{p}, l, ws)
	t.Logf("after the full disk: %s; %s", tl.figures(), tl.counts())
	tl.check(t, "full disk")

	p.term(ctxFor(t, termTimeout), t)
	if got := integrityCheck(t, db); got != "ok" {
		t.Errorf("PRAGMA integrity_check after the shutdown = %q, want ok", got)
	}
}

// waitRunEnded waits, bounded by ctx, until the run is terminal. Waiting
// on another process, it polls.
func waitRunEnded(ctx context.Context, c *client.Client, sid, runID string) bool {
	for {
		r, err := c.GetRun(ctx, sid, runID)
		if err == nil && r.Status.Terminal() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// diskUsage says how full the file system at dir is, and how big the
// files in it are.
func diskUsage(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err.Error()
	}
	var files []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			files = append(files, fmt.Sprintf("%s %s", e.Name(), mib(fi.Size())))
		}
	}
	return fmt.Sprintf("%s free of %s (%s)", mib(int64(st.Bavail)*st.Bsize), mib(int64(st.Blocks)*st.Bsize), strings.Join(files, ", "))
}

// retryUnavailable calls f until it is not refused with 503 unavailable,
// bounded by ctx: a client's retry while a server recovers.
func retryUnavailable[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	for {
		v, err := f(ctx)
		var ce *client.Error
		if err == nil || !errors.As(err, &ce) || ce.Code != rein.CodeUnavailable {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
