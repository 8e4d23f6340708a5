// Package postgres is Rein's PostgreSQL store: the backend for several Rein
// instances sharing one database.
//
// It exists because the embedded stores cannot be shared: with many
// instances, every promise of store.Store — gap-free per-session seqs,
// exactly-once inbox consumption, fenced writes, prompt wake-ups of event
// readers — must hold across processes, and PostgreSQL is where they meet.
//
// Four design choices carry most of the weight (docs/decisions 0020, 0021,
// 0022 and 0023):
//
//   - Appends are group-committed. AppendEvents hands its events to a writer
//     goroutine that collects every pending append into one pipelined
//     implicit transaction, assigning each session's seqs with one counter
//     update per session (and fence) per transaction. The counter row lock,
//     held until commit, is what keeps seqs gap-free and unique when other
//     processes append to the same session.
//   - Readers wake by LISTEN/NOTIFY. The appending transaction NOTIFYs the
//     session key and its new last seq; each Store keeps one dedicated
//     listening connection, reconnects it when it drops, and wakes every
//     waiter after a reconnect so none sleeps through a missed notification.
//   - An Update is one transaction that locks the session first. It opens
//     with the session row, the lease row and the event counter row locked
//     (in that order, the order every writer here follows), sends the
//     writes whose outcome its function needs as they are made, and holds
//     events and history back for the last round trip, with the COMMIT.
//     Every write to a session but an append and a lease's renewal is an
//     Update (store.Tx), and those two wait on the counter and lease rows
//     the Update holds, so nothing changes what an Update read before it
//     commits. Lease expiry is judged by the database's now().
//   - Database trouble is rein.CodeUnavailable. Connection failures, a
//     server shutting down, an exhausted pool, or a database that does not
//     answer within Options.Timeout all surface as unavailable errors, and
//     the pool recovers by itself once the database is back.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Clock tells the time for the stamps the store decides (CreatedAt
	// defaults, consumption and resolution times); nil means the wall clock.
	//
	// Lease expiry is another matter: with Clock nil it is judged by the
	// database's clock — now(), the start of the judging transaction — so
	// that instances whose own clocks disagree still agree on who holds a
	// turn and when it lapses (docs/api.md: "expired by the store's clock").
	// A set Clock replaces the database's clock for leases too, which is
	// what tests driving time by hand (storetest) need; instances sharing
	// a database must then share that clock.
	Clock rein.Clock
	// Schema is the PostgreSQL schema to keep Rein's tables in; "" uses the
	// connection's search_path (normally "public"). Open creates the schema
	// if it does not exist. Stores using different schemas of one database
	// are fully independent (tables and notification channel alike).
	Schema string
	// MaxConns caps the connection pool; 0 means pgxpool's default
	// (max(4, number of CPUs)) unless the DSN sets pool_max_conns. The
	// listening connection is extra.
	MaxConns int32
	// Timeout bounds each database operation (waiting for a pooled
	// connection included) when the caller's context allows longer; an
	// operation that hits it fails with rein.CodeUnavailable. 0 means 10s.
	Timeout time.Duration
	// WaitRecheck is how often a WaitEvents that has heard nothing re-reads
	// the session's last seq, as a safety net under LISTEN/NOTIFY; 0 means
	// 5s. It bounds how late a waiter can be if a notification is lost in a
	// way the listener could not detect.
	WaitRecheck time.Duration
	// Logger receives listener disconnects and reconnects; nil discards.
	Logger *slog.Logger
	// IdleInTransaction bounds how long a transaction of this store may
	// sit idle (PostgreSQL's idle_in_transaction_session_timeout) before
	// the server ends it and frees its locks: an instance paused in the
	// middle of an Update (GC, SIGSTOP, a VM migration) must not hold a
	// session's rows past the time others may take its turn. 0 means 5s;
	// keep it below the lease TTL (rein serve passes TTL/2). A DSN setting
	// wins.
	IdleInTransaction time.Duration

	// hooks lets this package's tests observe the store's goroutines.
	hooks testHooks
}

// testHooks are called, when set, at points tests synchronise on (instead
// of sleeping). They are set before Open, so goroutines read them safely.
type testHooks struct {
	// waiting: a WaitEvents caller has read the log and is about to block.
	waiting func(key rein.SessionKey)
	// listening: the listener has (re)connected and issued LISTEN.
	listening func()
	// wallClock stands in for the process's own clock when Options.Clock
	// is nil, so a test can skew it and check that leases still follow
	// the database's clock.
	wallClock rein.Clock
}

const (
	defaultTimeout     = 10 * time.Second
	defaultWaitRecheck = 5 * time.Second
)

// Store is the PostgreSQL implementation of store.Store. It is safe for
// concurrent use; Close it when done.
type Store struct {
	// FlushRegistry provides the flush barrier (docs/api.md): durability
	// listeners are in-process code, the same for every backend.
	store.FlushRegistry

	pool  *pgxpool.Pool
	clock rein.Clock
	// leaseClock is Options.Clock: nil means leases expire by the
	// database's now().
	leaseClock  rein.Clock
	timeout     time.Duration
	waitRecheck time.Duration
	log         *slog.Logger

	// channel is the NOTIFY channel of this store's schema.
	channel string
	hub     *hub
	// msgs are the handlers of instance messages (store.Messenger).
	msgs listeners

	appends      chan *appendReq
	writersDone  chan struct{}
	listenerDone chan struct{}

	closed    chan struct{}
	closeOnce sync.Once
	// life is cancelled by Close to stop the listener mid-wait.
	life       context.Context
	cancelLife context.CancelFunc

	hooks testHooks
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at dsn, brings its schema up to date
// (creating Options.Schema if needed) and starts the store's writer and
// listener. It fails, touching nothing, if the database's schema is newer
// than this build knows.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, rein.Errorf(rein.CodeInvalidArgument, "postgres: bad DSN: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		// Every statement here is a few primary-key lookups whose best
		// plan does not depend on the parameters, yet PostgreSQL keeps
		// re-planning a prepared statement whose arguments are arrays
		// (the append's unnest): measured, planning doubled the latency
		// of a single append (≈0.5 ms → ≈0.3 ms without it). Generic
		// plans are still re-made when autovacuum's ANALYZE updates a
		// table's statistics. A DSN may override this.
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}

	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		idle := opts.IdleInTransaction
		if idle <= 0 {
			idle = 5 * time.Second
		}
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(idle.Milliseconds(), 1), 10)
	}
	if opts.Schema != "" {
		if err := ensureSchema(ctx, cfg.ConnConfig, opts.Schema); err != nil {
			return nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{opts.Schema}.Sanitize()
	}
	if _, _, err := migrateConfig(ctx, cfg.ConnConfig); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify(ctx, ctx, "open pool", err)
	}

	s := &Store{
		pool:         pool,
		clock:        opts.Clock,
		leaseClock:   opts.Clock,
		timeout:      opts.Timeout,
		waitRecheck:  opts.WaitRecheck,
		log:          opts.Logger,
		hooks:        opts.hooks,
		hub:          newHub(),
		appends:      make(chan *appendReq, 4*maxBatchItems),
		writersDone:  make(chan struct{}),
		listenerDone: make(chan struct{}),
		closed:       make(chan struct{}),
	}
	if s.timeout <= 0 {
		s.timeout = defaultTimeout
	}
	if s.waitRecheck <= 0 {
		s.waitRecheck = defaultWaitRecheck
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = opts.hooks.wallClock
	}
	s.life, s.cancelLife = context.WithCancel(context.Background())

	// The first listening connection is made here, not in the background,
	// so that a WaitEvents started right after Open already hears other
	// processes' appends.
	lconn, channel, err := s.connectListener(ctx, cfg.ConnConfig)
	if err != nil {
		s.cancelLife()
		pool.Close()
		return nil, err
	}
	s.channel = channel

	var writers sync.WaitGroup
	for range appendWriters {
		writers.Go(s.runWriter)
	}
	go func() {
		writers.Wait()
		close(s.writersDone)
	}()
	go s.runListener(cfg.ConnConfig, lconn)
	return s, nil
}

// ensureSchema creates the schema if it is missing. It checks first so that
// a role without CREATE on the database can still open an existing schema,
// and it does both under the migration lock, because concurrent CREATE
// SCHEMA IF NOT EXISTS statements can still collide in the catalog.
func ensureSchema(ctx context.Context, cc *pgx.ConnConfig, schema string) error {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return classify(ctx, ctx, "connect", err)
	}
	defer closeConn(conn)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return classify(ctx, ctx, "look up schema", err)
	}
	if exists {
		return nil
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrateLockKey, schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize())
		return err
	})
	return classify(ctx, ctx, "create schema", err)
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	return s.fail(ctx, octx, "ping", s.pool.Ping(octx))
}

// Close stops the store: appends already handed to the writer are finished,
// later calls fail with rein.CodeUnavailable, waiters in WaitEvents return,
// and the connections are closed. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		<-s.writersDone
		s.cancelLife()
		<-s.listenerDone
		s.pool.Close()
	})
	return nil
}

var errClosed = rein.Errorf(rein.CodeUnavailable, "postgres: store is closed")

func (s *Store) checkOpen() error {
	select {
	case <-s.closed:
		return errClosed
	default:
		return nil
	}
}

// now returns the store clock's time at the database's precision, so a
// value returned to the caller equals the one read back later.
func (s *Store) now() time.Time { return dbTime(s.clock.Now()) }

// leaseNow is the time lease expiry is judged by, as a statement argument:
// nil lets the statement use the database's now() (see Options.Clock).
func (s *Store) leaseNow() *time.Time {
	if s.leaseClock == nil {
		return nil
	}
	t := s.leaseClock.Now()
	return &t
}

// dbTime truncates t to PostgreSQL's microsecond precision, in UTC.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// opContext bounds one database operation by the store's Timeout.
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// classify turns a database error into a rein error. ctx is the caller's
// context, octx the operation's (ctx bounded by the store's Timeout): which
// of them ended decides between "the caller gave up" and "the database did
// not answer".
func classify(ctx, octx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var re *rein.Error
	if errors.As(err, &re) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		if errors.Is(cerr, context.DeadlineExceeded) {
			// The database did not answer before the caller's deadline:
			// from the caller's point of view it is unavailable. The
			// context error stays in the chain for errors.Is.
			return &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: " + op + ": no answer before the deadline", Err: cerr}
		}
		return fmt.Errorf("postgres: %s: %w", op, cerr)
	}
	if octx.Err() != nil {
		return &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: " + op + ": the database did not answer in time", Err: err}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &rein.Error{Code: pgCode(pe), Message: "postgres: " + op + ": " + pe.Message, Err: err}
	}
	if connectionError(err) {
		return &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: " + op + ": database unreachable", Err: err}
	}
	return &rein.Error{Code: rein.CodeInternal, Message: "postgres: " + op + " failed", Err: err}
}

// pgCode maps a server error to a rein code.
func pgCode(pe *pgconn.PgError) rein.Code {
	switch pe.Code {
	case "23505": // unique_violation
		return rein.CodeConflict
	case "23503": // foreign_key_violation: the session (or parent) is missing
		return rein.CodeNotFound
	case "22P02", "22021", "22P05", "22001", "54000", "22023":
		// invalid text / byte sequence, untranslatable character, string
		// too long, program limit (e.g. an oversized row), invalid value.
		return rein.CodeInvalidArgument
	case "57P01", "57P02", "57P03", "53300", "25006", "40001", "40P01", "55P03", "57014":
		// admin/crash shutdown, cannot connect now, too many connections,
		// read-only (a standby after failover), serialization failure,
		// deadlock, lock not available, statement cancelled by the server:
		// all transient, all "try again later".
		return rein.CodeUnavailable
	}
	switch pe.Code[:2] {
	case "08", "53", "58": // connection exception, insufficient resources, system error
		return rein.CodeUnavailable
	}
	return rein.CodeInternal
}

// connectionError reports whether err says the connection (not the query)
// failed: every pgconn-level error (they all implement SafeToRetry), a
// failed connect, a network error.
func connectionError(err error) bool {
	var retryable interface{ SafeToRetry() bool }
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &retryable) || errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// unavailable reports whether err is a connection-level failure after which
// the pool's other idle connections are suspect too (a restarted or
// unreachable server breaks them all at once).
func unavailable(err error) bool {
	var re *rein.Error
	if !errors.As(err, &re) || re.Code != rein.CodeUnavailable {
		return false
	}
	var pe *pgconn.PgError
	return !errors.As(err, &pe) || pe.Code[:2] == "08" || pe.Code[:3] == "57P"
}

// fail classifies err and, if it shows the connection to the database is
// broken, drops the pool's connections so that the next operation dials
// afresh instead of tripping over another dead one. (A mere timeout does not
// count: a slow database is not a broken connection.)
func (s *Store) fail(ctx, octx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if s.checkOpen() != nil {
		// Racing Close: the pool is gone, and that is the whole story.
		return &rein.Error{Code: rein.CodeUnavailable, Message: "postgres: " + op + ": store is closed", Err: err}
	}
	err = classify(ctx, octx, op, err)
	if ctx.Err() == nil && octx.Err() == nil && unavailable(err) {
		s.pool.Reset()
	}
	return err
}
