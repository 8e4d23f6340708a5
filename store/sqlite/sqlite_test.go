package sqlite_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path) // a helper process for TestCrashLosesNoAcknowledgedEvent; exits
	}
	goleak.VerifyTestMain(m)
}

// open is the storetest Opener: a fresh database file per test.
func open(tb testing.TB, clock rein.Clock) store.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "rein.db"), sqlite.Options{Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, open) }

func mustOpen(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// wantRefused checks that opening path fails with code, a message naming
// the file and containing what, and that neither Open nor Migrate changed
// the file or left anything beside it.
func wantRefused(t *testing.T, path string, code rein.Code, what string) {
	t.Helper()
	before, files := digest(t, path), dirNames(t, filepath.Dir(path))
	_, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err == nil {
		t.Fatalf("Open(%s) succeeded, want it refused", path)
	}
	if rein.CodeOf(err) != code || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), what) {
		t.Fatalf("Open error = %v (code %s), want code %s naming %s and saying %q", err, rein.CodeOf(err), code, path, what)
	}
	if _, _, err := sqlite.Migrate(t.Context(), path); rein.CodeOf(err) != code {
		t.Fatalf("Migrate error = %v, want code %s", err, code)
	}
	if digest(t, path) != before {
		t.Fatal("the refused file was modified")
	}
	if after := dirNames(t, filepath.Dir(path)); strings.Join(after, ",") != strings.Join(files, ",") {
		t.Fatalf("files beside the refused database changed: %v, was %v", after, files)
	}
}

func TestRefusesRandomBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.db")
	if err := os.WriteFile(path, []byte(rand.Text()+rand.Text()+strings.Repeat("\x00\xff", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, path, rein.CodeInvalidArgument, "is not a Rein database")
}

func TestRefusesDamagedSQLiteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "damaged.db")
	junk := make([]byte, 8192)
	rand.Read(junk)
	if err := os.WriteFile(path, append([]byte("SQLite format 3\x00"), junk...), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, path, rein.CodeInvalidArgument, "is not a Rein database")
}

func TestRefusesForeignSQLiteDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other-app.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices (total) VALUES (9.5)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wantRefused(t, path, rein.CodeInvalidArgument, "is not a Rein database")
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s := mustOpen(t, path)
	if err := s.CreateSession(t.Context(), &store.Session{Owner: "o", ID: "s"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE schema_version SET version = 999`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	wantRefused(t, path, rein.CodeInvalidArgument, "schema version 999")
}

func TestEmptyFileIsANewDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, path)
	if err := s.CreateSession(t.Context(), &store.Session{Owner: "o", ID: "s"}); err != nil {
		t.Fatal(err)
	}
}

func TestSecondOpenIsRefusedWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	first := mustOpen(t, path)
	_, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if !errors.Is(err, rein.ErrUnavailable) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open = %v, want unavailable: in use", err)
	}
	if _, _, err := sqlite.Migrate(t.Context(), path); !errors.Is(err, rein.ErrUnavailable) {
		t.Fatalf("Migrate while open = %v, want unavailable", err)
	}
	first.Close()
	mustOpen(t, path).Close()
}

func TestReadOnlyFileIsUnavailable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("file permissions do not bind root")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rein.db")
	mustOpen(t, path).Close()
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(path, 0o600) })
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err == nil {
		// SQLite may open a read-only file read-only; then the first
		// write must say why it fails.
		defer s.Close()
		err = s.CreateSession(t.Context(), &store.Session{Owner: "o", ID: "s"})
	}
	if !errors.Is(err, rein.ErrUnavailable) || !strings.Contains(err.Error(), path) {
		t.Fatalf("writing a read-only database: %v, want unavailable naming %s", err, path)
	}
}

func TestMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	from, to, err := sqlite.Migrate(t.Context(), path)
	if err != nil || from != 0 || to < 1 {
		t.Fatalf("Migrate(new file) = %d, %d, %v; want 0, ≥1, nil", from, to, err)
	}
	again, to2, err := sqlite.Migrate(t.Context(), path)
	if err != nil || again != to || to2 != to {
		t.Fatalf("Migrate(current) = %d, %d, %v; want %d, %d, nil", again, to2, err, to, to)
	}
	mustOpen(t, path)
}

// Everything survives a close and reopen, and fencing tokens keep growing
// across the restart.
func TestReopenKeepsEverything(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "rein.db")
	s := mustOpen(t, path)
	key := rein.SessionKey{Owner: "alice", ID: "ses_1"}
	sys := "persona"
	must(t, s.CreateSession(ctx, &store.Session{Owner: key.Owner, ID: key.ID, System: &sys,
		Subagent: &store.SubagentDescriptor{Agent: "a", Label: "l", Depth: 1}}))
	lease, err := storetest.AcquireLease(ctx, s, key, "inst", "run_1", time.Minute)
	must(t, err)
	_, err = s.AppendEvents(ctx, key, lease.Fence(), []rein.Event{{Type: rein.EventRunStarted, RunID: "run_1", Payload: []byte(`{"run_id":"run_1"}`)}})
	must(t, err)
	must(t, storetest.AppendHistory(ctx, s, key, lease.Fence(), []rein.Message{{Role: rein.RoleUser, Text: "hi"}}))
	must(t, storetest.CreateRun(ctx, s, &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_2", Status: rein.StatusQueued, ClientID: "c"}))
	_, _, err = storetest.PushSupplement(ctx, s, &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "n1", Text: "note"})
	must(t, err)
	must(t, s.Close())

	s = mustOpen(t, path)
	got, err := s.GetSession(ctx, key)
	must(t, err)
	if got.System == nil || *got.System != sys || got.Subagent == nil || got.Subagent.Agent != "a" {
		t.Fatalf("session after reopen = %+v", got)
	}
	if last, err := s.LastSeq(ctx, key); err != nil || last != 1 {
		t.Fatalf("LastSeq after reopen = %d, %v", last, err)
	}
	if h, err := s.LoadHistory(ctx, key); err != nil || len(h) != 1 {
		t.Fatalf("history after reopen = %v, %v", h, err)
	}
	if r, err := s.GetRunByClientID(ctx, key, "c"); err != nil || r.ID != "run_2" {
		t.Fatalf("run after reopen = %+v, %v", r, err)
	}
	if n, err := s.PendingSupplements(ctx, key); err != nil || n != 1 {
		t.Fatalf("pending supplements after reopen = %d, %v", n, err)
	}
	// The lease is still current after the restart, so its fence holds.
	_, err = s.AppendEvents(ctx, key, lease.Fence(), []rein.Event{{Type: rein.EventMessageDelta, RunID: "run_1"}})
	must(t, err)
	must(t, storetest.ReleaseLease(ctx, s, lease))
	next, err := storetest.AcquireLease(ctx, s, key, "inst", "run_2", time.Minute)
	must(t, err)
	if next.Token <= lease.Token {
		t.Fatalf("token after restart %d <= %d", next.Token, lease.Token)
	}
}

// Closing while writers are busy: every call returns, with success or
// unavailable, and nothing hangs.
func TestCloseWhileWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s := mustOpen(t, path)
	key := rein.SessionKey{Owner: "o", ID: "s"}
	must(t, s.CreateSession(t.Context(), &store.Session{Owner: key.Owner, ID: key.ID}))
	started := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for {
				_, err := s.AppendEvents(context.Background(), key, store.Fence{}, []rein.Event{{Type: rein.EventMessageDelta}})
				once.Do(func() { close(started) })
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	<-started
	must(t, s.Close())
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, rein.ErrUnavailable) {
			t.Fatalf("append during Close = %v, want unavailable", err)
		}
	}
	// The log is still whole after reopening.
	s = mustOpen(t, path)
	evs, last, err := s.ReadEvents(t.Context(), key, 0, 1_000_000)
	must(t, err)
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d after close and reopen", i, e.Seq)
		}
	}
	if int64(len(evs)) != last {
		t.Fatalf("%d events, last seq %d", len(evs), last)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
