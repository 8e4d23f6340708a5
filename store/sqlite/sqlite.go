// Package sqlite is Rein's embedded store: a complete store.Store in one
// SQLite file, for a single Rein process (the default `rein serve`).
//
// It exists so that Rein runs with durable sessions, queues and event logs
// without any server to install. It is built on modernc.org/sqlite (pure
// Go, so Rein stays one static binary) and shaped by two facts measured on
// the target machines (DESIGN.md): a durable commit costs one fsync, and
// committing each event alone caps a machine at a few thousand events per
// second. So every write goes through one writer goroutine that commits
// whatever is pending as one transaction — group commit — and answers each
// caller only after that commit is on disk; reads use a separate pool of
// connections and never wait for the writer (WAL mode).
//
// Only one process may use a database file at a time: Open takes an
// exclusive lock on PATH.lock and fails if another process holds it (see
// docs/decisions/0012-sqlite-single-process-lock.md). Holding that lock
// proves every turn lease in the file dead — its holder was an earlier
// process, or an earlier Store now closed — so Open marks them all expired
// (keeping them, and their fencing tokens), and the runs they held can be
// resumed at once instead of after their TTL. Durability choices
// are in docs/decisions/0010-sqlite-durability-group-commit.md, schema
// migrations in docs/decisions/0011-sqlite-schema-migrations.md.
package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Options configures a Store.
type Options struct {
	// Clock is the time source for every time the store decides
	// (CreatedAt defaults, lease expiry, consumption and resolution
	// times); nil means the wall clock.
	Clock rein.Clock
	// ReadConns bounds the pool of read connections; 0 means
	// max(4, GOMAXPROCS).
	ReadConns int
	// BusyTimeout is how long a connection waits for a lock held by
	// another connection (SQLite's busy_timeout); 0 means 5 s. With a
	// single writer it only matters while a checkpoint runs.
	BusyTimeout time.Duration
}

// Store is a store.Store on one SQLite file. Create it with Open; it is
// safe for concurrent use.
type Store struct {
	store.FlushRegistry

	file  string
	clock rein.Clock
	lock  *fileLock

	wdb   *sql.DB   // the writer's database handle, one connection
	wconn *sql.Conn // that connection, used only by the writer goroutine
	rdb   *sql.DB   // the read pool
	rq    reader    // its prepared queries
	// insertArgs is the writer goroutine's argument slice for event
	// inserts, kept between them (empty between uses).
	insertArgs []any

	ops     chan *op
	closing chan struct{} // closed by Close: stop taking work, wake waiters
	stopped chan struct{} // closed by the writer goroutine when it exits
	// asyncMu is read-held while an operation nobody waits for is
	// queued, and held by the writer for its last drain (submitAsync).
	asyncMu   sync.RWMutex
	closeOnce sync.Once
	closeErr  error

	waiters notifier
	tails   tails

	// Writer-goroutine state: no lock, nothing else touches it.
	stmts map[string]*sql.Stmt
	cache map[rein.SessionKey]*sessInfo
	// committing are the sessions the batch being committed changes on
	// the tails (tails.beginCommit), until its answer; writer only.
	committing []rein.SessionKey
	// afterCommit, when a test sets it, runs between a batch's COMMIT and
	// its answer: the moment a read of the database sees what the tails
	// do not have yet.
	afterCommit func()
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the Rein database at path, migrates it
// to this binary's schema, expires every lease an earlier process left and
// starts the writer. It refuses, without
// modifying anything, a file that is not SQLite, a SQLite database that is
// not Rein's, a Rein database with a newer schema than this binary knows,
// and a database another process has open.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	file, lock, err := lockAndInspect(path)
	if err != nil {
		return nil, err
	}
	s := &Store{
		file:    file,
		clock:   opts.Clock,
		lock:    lock,
		ops:     make(chan *op, 4096),
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
		stmts:   map[string]*sql.Stmt{},
		cache:   map[rein.SessionKey]*sessInfo{},
	}
	if err := s.open(ctx, opts); err != nil {
		s.closeHandles()
		lock.unlock(false)
		return nil, err
	}
	go s.writer()
	return s, nil
}

// Migrate brings the database at path to this binary's schema and reports
// the version it found and the version it left; an up-to-date database
// gives from == to. The same refusals as Open apply.
func Migrate(ctx context.Context, path string) (from, to int, err error) {
	file, lock, err := lockAndInspect(path)
	if err != nil {
		return 0, 0, err
	}
	defer lock.unlock(false)
	db, err := sql.Open("sqlite", dsn(file, false, 5*time.Second))
	if err != nil {
		return 0, 0, mapErr(file, "opening", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, 0, mapErr(file, "opening", err)
	}
	defer conn.Close()
	return migrate(ctx, conn, file)
}

// dsn builds the connection string. Every connection gets WAL,
// synchronous=FULL (a commit is on disk when it returns; see decision
// 0010) and enforced foreign keys; readers are additionally query-only so
// a bug can never write around the writer.
func dsn(file string, reader bool, busy time.Duration) string {
	u := url.URL{Scheme: "file", Path: file}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(FULL)")
	if reader {
		q.Add("_pragma", "query_only(1)")
		q.Add("_pragma", "cache_size(-8192)") // KiB
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		// Checkpoint every ~40 MB of WAL instead of SQLite's 4 MB: under
		// load a hot page is then copied into the database once per
		// checkpoint rather than dozens of times, and the database file
		// is synced a tenth as often. journal_size_limit trims the WAL
		// back after a burst. See decision 0010.
		q.Add("_pragma", "wal_autocheckpoint(10000)")
		q.Add("_pragma", "journal_size_limit(67108864)")
		// The writer touches the tail of every active session's log; keep
		// those pages cached (16 MiB).
		q.Add("_pragma", "cache_size(-16384)")
		// The journals that undo one operation of a batch (its savepoint)
		// or one statement are needed only until the batch commits, never
		// after a crash: held in memory instead of a temporary file. Under
		// load a batch outgrew SQLite's in-memory spill threshold, and
		// every journaled page then cost two write system calls (its
		// number and its content) — 4% of the server's CPU.
		q.Add("_pragma", "temp_store(MEMORY)")
	}
	u.RawQuery = q.Encode()
	// url.URL renders file:///abs/path, which SQLite's URI parser accepts.
	return u.String()
}

func (s *Store) open(ctx context.Context, opts Options) error {
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	var err error
	if s.wdb, err = sql.Open("sqlite", dsn(s.file, false, busy)); err != nil {
		return s.fail("opening", err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	if s.wconn, err = s.wdb.Conn(ctx); err != nil {
		return s.fail("opening", err)
	}
	if _, _, err := migrate(ctx, s.wconn, s.file); err != nil {
		return err
	}
	if err := expireLeases(ctx, s.wconn, s.now()); err != nil {
		return s.fail("expiring the leases of an earlier process", err)
	}
	if s.rdb, err = sql.Open("sqlite", dsn(s.file, true, busy)); err != nil {
		return s.fail("opening", err)
	}
	n := opts.ReadConns
	if n <= 0 {
		n = max(4, runtime.GOMAXPROCS(0))
	}
	s.rdb.SetMaxOpenConns(n)
	s.rdb.SetMaxIdleConns(n)
	if err := s.rdb.PingContext(ctx); err != nil {
		return s.fail("opening", err)
	}
	s.rq.db = s.rdb
	if err := s.rq.prepare(ctx, qReadPK, qEvents, qPendingByKey, qLeaseByKey, qHistoryByKey); err != nil {
		return s.fail("opening", err)
	}
	return nil
}

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// lockAndInspect takes the file's process lock, then checks that path is
// empty, new, or a Rein database this binary can use. On refusal it
// releases the lock (removing a lock file it created) so that a file that
// is not Rein's is left exactly as it was found.
func lockAndInspect(path string) (string, *fileLock, error) {
	if path == "" {
		return "", nil, rein.InvalidArgument("path", "sqlite: database path is empty")
	}
	file, err := filepath.Abs(path)
	if err != nil {
		return "", nil, rein.Errorf(rein.CodeInvalidArgument, "sqlite: database path %q: %w", path, err)
	}
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return "", nil, rein.Errorf(rein.CodeInvalidArgument, "sqlite: %s is a directory, not a database file", file)
	}
	lock, created, err := lockFile(file + ".lock")
	if errors.Is(err, errLocked) {
		return "", nil, rein.Errorf(rein.CodeUnavailable, "sqlite: %s is in use by another Rein process (lock %s.lock is held)", file, file)
	}
	if err != nil {
		return "", nil, rein.Errorf(rein.CodeUnavailable, "sqlite: cannot lock %s: %w", file, err)
	}
	// The lock is held, so no Store in this process has the file open and
	// reading it here cannot disturb SQLite's own locks.
	if err := inspect(file); err != nil {
		lock.unlock(created)
		return "", nil, err
	}
	return file, lock, nil
}

// inspect refuses files Rein must not touch: not SQLite, SQLite but not
// Rein's, or Rein's but newer. It opens the database read-only, so a
// refusal never changes the file.
func inspect(file string) error {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return rein.Errorf(rein.CodeUnavailable, "sqlite: cannot read %s: %w", file, err)
	}
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	f.Close()
	switch {
	case n == 0 && (err == io.EOF):
		return nil // an empty file is an empty database
	case err != nil && !errors.Is(err, io.ErrUnexpectedEOF):
		return rein.Errorf(rein.CodeUnavailable, "sqlite: cannot read %s: %w", file, err)
	case !bytes.Equal(head[:n], sqliteHeader):
		return errNotRein(file, "it is not a SQLite database")
	}

	// Read-only, and immutable unless a WAL file is waiting: an immutable
	// open creates no -wal/-shm files beside a file Rein may refuse. A WAL
	// left by a crash must be read through, so then SQLite is allowed its
	// usual read-only machinery; either way the database is not written.
	// migrate repeats the decisive checks under the write lock.
	query := "mode=ro&immutable=1"
	if _, err := os.Stat(file + "-wal"); err == nil {
		query = "mode=ro"
	}
	u := url.URL{Scheme: "file", Path: file, RawQuery: query}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return mapErr(file, "inspecting", err)
	}
	defer db.Close()
	ctx := context.Background()
	var tables, hasVersion int
	err = db.QueryRowContext(ctx, `SELECT
			count(*) FILTER (WHERE name NOT LIKE 'sqlite\_%' ESCAPE '\'),
			count(*) FILTER (WHERE name = 'schema_version')
		FROM sqlite_master WHERE type = 'table'`).Scan(&tables, &hasVersion)
	if isCode(err, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) {
		return errNotRein(file, "it is damaged or not a SQLite database: "+err.Error())
	}
	if err != nil {
		return mapErr(file, "inspecting", err)
	}
	if tables == 0 {
		return nil
	}
	if hasVersion == 0 {
		return errNotRein(file, "it holds tables but no Rein schema_version")
	}
	v, err := readVersion(ctx, db)
	if err != nil {
		return mapErr(file, "reading schema version", err)
	}
	if v > latestVersion() {
		return errNewerSchema(file, v)
	}
	return nil
}

func (s *Store) now() time.Time { return norm(s.clock.Now()) }

// Ping implements store.Store: it runs a query on the read pool.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.closing:
		return errClosed(s.file)
	default:
	}
	var one int
	return s.fail("ping", s.rdb.QueryRowContext(ctx, "SELECT 1").Scan(&one))
}

// Close implements store.Store. It lets the writer finish the batch it is
// committing, fails work still queued as unavailable, wakes every
// WaitEvents caller, closes the database and releases the file lock.
// Closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		<-s.stopped
		s.closeErr = s.closeHandles()
		s.lock.unlock(false)
	})
	return s.closeErr
}

func (s *Store) closeHandles() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rq.close(), s.rdb.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return mapErr(s.file, "closing", err)
	}
	return nil
}
