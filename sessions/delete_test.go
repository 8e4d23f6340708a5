package sessions_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

func TestDeleteBusyTree(t *testing.T) {
	t.Parallel()
	onBackends(t, testDeleteBusyTree)
}

func TestDeleteIdleTree(t *testing.T) {
	t.Parallel()
	onBackends(t, testDeleteIdleTree)
}

func TestDeleteRacesMessage(t *testing.T) {
	t.Parallel()
	onBackends(t, testDeleteRacesMessage)
}

func TestRetentionDeletesIdleTrees(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testRetention)
}

// ------------------------------------------------------------- helpers

// waitEnd waits for the run's session.run_completed in the log.
func waitEnd(t *testing.T, st store.Store, key rein.SessionKey, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, ok := waitFor(ctx, st, key, rein.EventRunCompleted, runID); !ok {
		// Say whether the run hung or its end was not seen.
		rec, err := st.GetRun(context.Background(), key, runID)
		evs, last, rerr := st.ReadEvents(context.Background(), key, 0, 1000)
		var types []string
		for _, e := range evs {
			types = append(types, fmt.Sprintf("%d:%s", e.Seq, e.Type))
		}
		t.Fatalf("run %s did not end: record %+v (%v); log last_seq %d (%v): %v", runID, rec, err, last, rerr, types)
	}
}

// waitType waits for an event of typ of the run in the log.
func waitType(t *testing.T, st store.Store, key rein.SessionKey, typ rein.EventType, runID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, ok := waitFor(ctx, st, key, typ, runID); !ok {
		t.Fatalf("run %s: no %s", runID, typ)
	}
}

// wantBusy fails unless err is session_busy naming runID.
func wantBusy(t *testing.T, err error, runID, what string) {
	t.Helper()
	var re *rein.Error
	if !errors.Is(err, rein.ErrSessionBusy) || !errors.As(err, &re) || re.RunID != runID {
		t.Fatalf("%s: DeleteSession = %v, want session_busy naming %s", what, err, runID)
	}
}

// wantGone fails unless the session is missing.
func wantGone(t *testing.T, svc *sessions.Service, key rein.SessionKey) {
	t.Helper()
	if _, err := svc.GetSession(context.Background(), key); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("GetSession(%s) = %v, want not found", key.ID, err)
	}
}

// wantThere fails unless the session exists.
func wantThere(t *testing.T, svc *sessions.Service, key rein.SessionKey) {
	t.Helper()
	if _, err := svc.GetSession(context.Background(), key); err != nil {
		t.Fatalf("GetSession(%s) = %v, want the session", key.ID, err)
	}
}

func child(t *testing.T, svc *sessions.Service, parent rein.SessionKey) rein.SessionKey {
	t.Helper()
	c, err := svc.Children().Create(context.Background(), parent, sessions.ChildRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Key()
}

func message(t *testing.T, svc *sessions.Service, key rein.SessionKey, req sessions.MessageRequest) string {
	t.Helper()
	res, err := svc.SendMessage(context.Background(), key, req)
	if err != nil {
		t.Fatalf("message %q to %s: %v", req.Text, key.ID, err)
	}
	return res.RunID
}

func cancelRun(t *testing.T, svc *sessions.Service, st store.Store, key rein.SessionKey, runID string) {
	t.Helper()
	if _, err := svc.Interrupt(context.Background(), key, sessions.InterruptRequest{RunID: &runID}); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, st, key, runID)
}

// note runs "note …" in key and answers its write_note confirmation, so
// the tool writes into the session's workspace.
func note(t *testing.T, svc *sessions.Service, st store.Store, key rein.SessionKey) {
	t.Helper()
	run := message(t, svc, key, sessions.MessageRequest{Text: "note " + key.ID})
	waitType(t, st, key, rein.EventToolConfirmationRequested, run)
	info, err := svc.GetSession(context.Background(), key)
	if err != nil || len(info.PendingConfirmations) != 1 {
		t.Fatalf("pending confirmations of %s: %+v %v", key.ID, info, err)
	}
	if _, err := svc.ConfirmTool(context.Background(), key, sessions.ConfirmRequest{ToolUseID: info.PendingConfirmations[0].ToolUseID, Allow: true}); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, st, key, run)
}

// ------------------------------------------------------------ busy / idle

func testDeleteBusyTree(t *testing.T, open opener) {
	st := open(t)
	pc := &parkCounter{Observer: nop{}, ch: make(chan struct{}, 1)}
	f := newFixture(t, st, func(c *sessions.Config) { c.Observer = pc })
	ctx := context.Background()
	root := f.newSession()
	kid := child(t, f.svc, root)
	grand := child(t, f.svc, kid)

	// The session's own running run, with one queued behind it: the
	// running one is named.
	run := f.send("block", "")
	f.blocking(run.RunID)
	queued := f.send("queued", "enqueue")
	wantBusy(t, f.svc.DeleteSession(ctx, root), run.RunID, "a running run of the session")
	cancelRun(t, f.svc, st, root, run.RunID)
	waitEnd(t, st, root, queued.RunID)

	// A grandchild's run makes the whole tree busy, from any level above.
	g := message(t, f.svc, grand, sessions.MessageRequest{Text: "block"})
	waitType(t, st, grand, rein.EventToolUse, g)
	wantBusy(t, f.svc.DeleteSession(ctx, root), g, "a running run of a grandchild")
	wantBusy(t, f.svc.DeleteSession(ctx, kid), g, "a running run of a child")
	cancelRun(t, f.svc, st, grand, g)

	// A parked run (waiting for a confirmation, held by no instance) is
	// running: busy, here and after a restart.
	p := message(t, f.svc, kid, sessions.MessageRequest{Text: "note milk"})
	select {
	case <-pc.ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not park")
	}
	wantBusy(t, f.svc.DeleteSession(ctx, root), p, "a parked run of a child")
	f.svc.Close()
	again := newFixture(t, st)
	wantBusy(t, again.svc.DeleteSession(ctx, root), p, "a parked run after a restart")
	for _, k := range []rein.SessionKey{root, kid, grand} {
		wantThere(t, again.svc, k)
	}
	info, err := again.svc.GetSession(ctx, kid)
	if err != nil || len(info.PendingConfirmations) != 1 {
		t.Fatalf("the parked run's confirmation: %+v %v", info, err)
	}
	if _, err := again.svc.ConfirmTool(ctx, kid, sessions.ConfirmRequest{ToolUseID: info.PendingConfirmations[0].ToolUseID}); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, st, kid, p)
	if err := again.svc.DeleteSession(ctx, root); err != nil {
		t.Fatalf("deleting the tree once idle: %v", err)
	}
	for _, k := range []rein.SessionKey{root, kid, grand} {
		wantGone(t, again.svc, k)
	}
}

func testDeleteIdleTree(t *testing.T, open opener) {
	st := open(t)
	ws := t.TempDir()
	f := newFixture(t, st, func(c *sessions.Config) { c.Workspace = ws })
	ctx := context.Background()
	root := f.newSession()
	kid := child(t, f.svc, root)
	grand := child(t, f.svc, kid)
	survivor, err := f.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []rein.SessionKey{root, kid, survivor.Key()} {
		note(t, f.svc, st, k)
	}
	waitEnd(t, st, grand, message(t, f.svc, grand, sessions.MessageRequest{Text: "hello", ClientID: "c-1"}))
	if _, err := f.svc.Supplement(ctx, grand, sessions.SupplementRequest{Text: "later"}); err != nil {
		t.Fatal(err)
	}
	dir := func(k rein.SessionKey) string { return filepath.Join(ws, k.Owner, k.ID) }
	for _, k := range []rein.SessionKey{root, kid, survivor.Key()} {
		if _, err := os.Stat(dir(k)); err != nil {
			t.Fatalf("workspace of %s before the delete: %v", k.ID, err)
		}
	}
	// Waiting readers of the tree (an event stream's loop) end with it.
	waits := make(chan error, 2)
	for _, k := range []rein.SessionKey{root, grand} {
		last, err := st.LastSeq(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		go func() { waits <- f.svc.WaitEvents(ctx, k, last) }()
	}

	if err := f.svc.DeleteSession(ctx, rein.SessionKey{Owner: "bob", ID: root.ID}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("another owner's DeleteSession = %v, want not found", err)
	}
	if err := f.svc.DeleteSession(ctx, root); err != nil {
		t.Fatalf("DeleteSession of an idle tree: %v", err)
	}
	for range 2 {
		select {
		case err := <-waits:
			if !errors.Is(err, rein.ErrNotFound) {
				t.Fatalf("a reader waiting on the deleted tree got %v, want not found", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a reader waiting on the deleted tree was not woken")
		}
	}
	for _, k := range []rein.SessionKey{root, kid, grand} {
		wantGone(t, f.svc, k)
		if _, err := f.svc.ListRuns(ctx, k); !errors.Is(err, rein.ErrNotFound) {
			t.Fatalf("ListRuns(%s) = %v", k.ID, err)
		}
	}
	if _, err := os.Stat(dir(root)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root's workspace is still there: %v", err)
	}
	if _, err := os.Stat(dir(kid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the child's workspace is still there: %v", err)
	}
	if _, err := os.Stat(dir(survivor.Key())); err != nil {
		t.Fatalf("another session's workspace went too: %v", err)
	}
	list, err := f.svc.ListSessions(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].ID != survivor.ID {
		t.Fatalf("ListSessions after the delete = %v %v, want only the other session", list, err)
	}
	if _, err := f.svc.SendMessage(ctx, grand, sessions.MessageRequest{Text: "hello", ClientID: "c-1"}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("a message (with the deleted session's client id) to a deleted session = %v, want not found", err)
	}
	if _, err := f.svc.Supplement(ctx, kid, sessions.SupplementRequest{Text: "x"}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("a supplement to a deleted session = %v, want not found", err)
	}
	if err := f.svc.DeleteSession(ctx, root); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("a second delete = %v, want not found", err)
	}
	// The service goes on as usual.
	f.newSession()
	waitEnd(t, st, f.key, f.send("hello again", "").RunID)
}

// testDeleteRacesMessage: a user.message and a delete of its session's
// tree, at the same moment, end one of two ways — the message runs and the
// delete is busy naming its run, or the delete wins and the message finds
// no session — never a run in a deleted session.
func testDeleteRacesMessage(t *testing.T, open opener) {
	st := open(t)
	f := newFixture(t, st)
	ctx := context.Background()
	rounds := 300
	switch {
	case strings.Contains(t.Name(), "sqlite"):
		rounds = 200 // each round is a dozen synced commits
	case strings.Contains(t.Name(), "postgres"):
		rounds = 40
	}
	var won [2]int
	for i := range rounds {
		root := f.newSession()
		target := root
		if i%2 == 1 {
			target = child(t, f.svc, root)
		}
		var (
			res             sessions.MessageResult
			sendErr, delErr error
			wg              sync.WaitGroup
			start           = make(chan struct{})
		)
		wg.Go(func() {
			<-start
			res, sendErr = f.svc.SendMessage(ctx, target, sessions.MessageRequest{Text: "block"})
		})
		wg.Go(func() {
			<-start
			delErr = f.svc.DeleteSession(ctx, root)
		})
		close(start)
		wg.Wait()
		switch {
		case sendErr == nil && errors.Is(delErr, rein.ErrSessionBusy):
			won[0]++
			wantBusy(t, delErr, res.RunID, fmt.Sprintf("round %d", i))
			cancelRun(t, f.svc, st, target, res.RunID)
			if err := f.svc.DeleteSession(ctx, root); err != nil {
				t.Fatalf("round %d: delete after the run ended: %v", i, err)
			}
		case errors.Is(sendErr, rein.ErrNotFound) && delErr == nil:
			won[1]++
		default:
			t.Fatalf("round %d: message = %+v %v, delete = %v", i, res, sendErr, delErr)
		}
		wantGone(t, f.svc, target)
	}
	t.Logf("%d rounds: the message first %d times, the delete first %d times", rounds, won[0], won[1])
	// Nothing is left running anywhere.
	active, err := st.ListRunsByStatus(ctx, rein.StatusQueued, rein.StatusRunning)
	if err != nil || len(active) != 0 {
		t.Fatalf("runs left active: %d %v", len(active), err)
	}
}

// ------------------------------------------------------------- retention

// syncBuffer is a log destination safe for the service's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testRetention: with Retention 1h, a sweep deletes root sessions whose
// whole tree has been idle for longer — and only those: a busy tree, one
// whose child was active recently, and a recent one stay. Time moves by
// the service's (and the store's) clock, not by waiting.
func testRetention(t *testing.T, open clockedOpener) {
	clk := &shiftClock{}
	st := open(t, clk.now)
	ws := t.TempDir()
	// One service does the work; a second one, not started (so no sweeper
	// races the test's), sweeps when told. Leases outlive the clock's
	// jumps: a busy run stays busy.
	f := newFixture(t, st, func(c *sessions.Config) {
		c.Clock, c.Workspace, c.LeaseTTL = clk.now, ws, 10*time.Hour
	})
	logs := &syncBuffer{}
	sweeper, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) {
		c.Clock, c.Workspace, c.LeaseTTL, c.Retention = clk.now, ws, 10*time.Hour, time.Hour
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sweeper.Close() })
	ctx := context.Background()
	sweep := func(want int, what string) {
		t.Helper()
		n, err := sweeper.SweepRetention(ctx)
		if err != nil || n != want {
			t.Fatalf("%s: SweepRetention = %d, %v; want %d deleted", what, n, err, want)
		}
	}
	dir := func(k rein.SessionKey) string { return filepath.Join(ws, k.Owner, k.ID) }

	idle := f.newSession()
	idleKid := child(t, f.svc, idle)
	note(t, f.svc, st, idleKid)
	busy := f.newSession()
	block := f.send("block", "").RunID
	f.blocking(block)
	quietRoot := f.newSession()
	activeKid := child(t, f.svc, quietRoot)
	sweep(0, "nothing is old yet")

	clk.advance(2 * time.Hour)
	recent := f.newSession()
	waitEnd(t, st, activeKid, message(t, f.svc, activeKid, sessions.MessageRequest{Text: "hello"}))
	sweep(1, "two hours later")
	wantGone(t, f.svc, idle)
	wantGone(t, f.svc, idleKid)
	if _, err := os.Stat(dir(idleKid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted child's workspace is still there: %v", err)
	}
	for _, k := range []rein.SessionKey{busy, quietRoot, activeKid, recent} {
		wantThere(t, f.svc, k)
	}
	if line := logLine(logs.String(), idle.ID); !strings.Contains(line, "level=INFO") || !strings.Contains(line, "age=2h") {
		t.Fatalf("the deletion's log line = %q, want an info line with the session and its age\nlog:\n%s", line, logs)
	}

	clk.advance(2 * time.Hour)
	sweep(2, "the child's activity and the recent session are old now")
	for _, k := range []rein.SessionKey{quietRoot, activeKid, recent} {
		wantGone(t, f.svc, k)
	}
	wantThere(t, f.svc, busy)

	// Once its run ends the busy session is idle, and recent (its end was
	// just logged) until another two hours pass.
	cancelRun(t, f.svc, st, busy, block)
	sweep(0, "just ended")
	clk.advance(2 * time.Hour)
	sweep(1, "ended two hours ago")
	wantGone(t, f.svc, busy)
	if n := strings.Count(logs.String(), "deleted an idle session"); n != 4 {
		t.Fatalf("%d deletions logged, want 4 (one per root)\n%s", n, logs)
	}
}

// logLine returns the log line that names session, "" if none.
func logLine(log, session string) string {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "session="+session) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestRetentionSweeper: Start runs a sweeper only when Retention is set; it
// sweeps at once (sessions left old by a restart go without waiting a
// period) and then periodically.
func TestRetentionSweeper(t *testing.T) {
	t.Parallel()
	clk := &shiftClock{}
	st := memory.New(memory.WithClock(clk.now))
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	old := &store.Session{Owner: "alice", ID: "ses_old", CreatedAt: clk.now().Add(-2 * time.Hour)}
	if err := st.CreateSession(ctx, old); err != nil {
		t.Fatal(err)
	}
	// A goroutine startRetention created, whether it has begun to run
	// (retentionLoop) or not yet (its go statement's wrapper).
	sweeping := func() bool {
		buf := make([]byte, 1<<20)
		for {
			// Every goroutine's stack: the buffer must hold them all.
			if n := runtime.Stack(buf, true); n < len(buf) {
				return bytes.Contains(buf[:n], []byte("created by github.com/reinhq/rein/sessions.(*Service).startRetention"))
			}
			buf = make([]byte, 2*len(buf))
		}
	}

	off := newFixture(t, st)
	if sweeping() {
		t.Fatal("a sweeper runs with Retention 0")
	}
	off.svc.Close()
	wantThere(t, off.svc, old.Key())

	on := newFixture(t, st, func(c *sessions.Config) { c.Clock, c.Retention = clk.now, 5*time.Second })
	if !sweeping() {
		t.Fatal("no sweeper runs with Retention set")
	}
	// A deletion wakes a reader of the session: that is the signal.
	gone := func(key rein.SessionKey, what string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := st.WaitEvents(wctx, key, 0); !errors.Is(err, rein.ErrNotFound) {
			t.Fatalf("%s: waiting for the deletion of %s: %v", what, key.ID, err)
		}
	}
	gone(old.Key(), "the first sweep, at Start")
	later := &store.Session{Owner: "alice", ID: "ses_later", CreatedAt: clk.now().Add(-time.Minute)}
	if err := st.CreateSession(ctx, later); err != nil {
		t.Fatal(err)
	}
	gone(later.Key(), "a periodic sweep")
	wantThere(t, on.svc, on.newSession())
	list, err := st.ListSessions(ctx, "alice")
	if err != nil || !slices.ContainsFunc(list, func(s *store.Session) bool { return s.ID == on.key.ID }) {
		t.Fatalf("a fresh session went too: %v %v", list, err)
	}
}
