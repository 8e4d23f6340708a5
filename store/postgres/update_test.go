package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// These tests check what the conformance suite cannot see from one Store:
// two Stores on one schema are two pools, two group-commit writers and two
// listeners — two instances as far as the database can tell — so what they
// show holds across processes.

// twoStores opens two stores on one fresh schema.
func twoStores(t *testing.T, opts Options) (a, b *Store) {
	t.Helper()
	dsn := testDSN(t)
	opts.Schema = newSchema(t)
	return openStore(t, dsn, opts), openStore(t, dsn, opts)
}

func sysEvent(text string) rein.Event {
	return rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: text})
}

// Updates and plain appends from two instances on one session, all at once:
// the log is gap-free, every seq an Update or an append was given holds the
// event it was given for, and the Updates ran one at a time (each saw a
// different number of runs before creating its own).
func TestUpdatesAndAppendsFromTwoStoresStayGapFree(t *testing.T) {
	a, b := twoStores(t, Options{})
	ctx := t.Context()
	key := newSessionKey(t, a)

	const perStore, appendsPerStore = 24, 48
	var (
		mu     sync.Mutex
		gave   []ack // every seq an Update or an append was given
		counts = map[int]bool{}
		wg     sync.WaitGroup
		errs   = make(chan error, 2*(perStore+appendsPerStore))
	)
	record := func(evs []rein.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			gave = append(gave, ack{e.Seq, e.ID})
		}
	}
	start := make(chan struct{})
	for si, s := range []*Store{a, b} {
		for i := range perStore {
			wg.Go(func() {
				<-start
				var evs []rein.Event
				err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
					runs, err := tx.Runs()
					if err != nil {
						return err
					}
					mu.Lock()
					dup := counts[len(runs)]
					counts[len(runs)] = true
					mu.Unlock()
					if dup {
						return fmt.Errorf("two Updates saw %d runs: they overlapped", len(runs))
					}
					if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID,
						ID: fmt.Sprintf("run_%d_%02d", si, i), Status: rein.StatusQueued}); err != nil {
						return err
					}
					evs, err = tx.AppendEvents(sysEvent("queued"), sysEvent("message"))
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("Update: %w", err)
					return
				}
				record(evs)
			})
		}
		for range appendsPerStore {
			wg.Go(func() {
				<-start
				evs, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{sysEvent("plain")})
				if err != nil {
					errs <- fmt.Errorf("AppendEvents: %w", err)
					return
				}
				record(evs)
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := readAll(t, a, key)
	if want := 2 * (2*perStore + appendsPerStore); len(all) != want {
		t.Fatalf("log has %d events, want %d", len(all), want)
	}
	checkLog(t, all, gave)
}

// An Update on one instance wakes a reader waiting on another, through
// NOTIFY alone (the waiter's safety re-check is an hour away).
func TestUpdateWakesWaiterOnOtherStore(t *testing.T) {
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
	reader := openStore(t, dsn, opts)
	writer := openStore(t, dsn, Options{Schema: schema})
	key := newSessionKey(t, writer)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- reader.WaitEvents(ctx, key, 0) }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("WaitEvents returned %v before anything was appended", err)
	}
	err := writer.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.AppendEvents(sysEvent("from the other instance"))
		return err
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitEvents: %v", err)
	}
}

// backendPID is the database backend an Update's transaction runs on.
func backendPID(tx store.Tx) uint32 { return tx.(*updateTx).conn.Conn().PgConn().PID() }

// waitBlockedBy returns once some backend is waiting for a lock that pid
// holds, or fails the test if done (the operation expected to block)
// returns first.
func waitBlockedBy(t *testing.T, conn *pgx.Conn, pid uint32, done <-chan error) error {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`,
			int32(pid)).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the operation returned %v without waiting for the Update", err)
		default:
		}
	}
}

// Every write to a session (an Update of its own, or a lease's renewal)
// waits while an Update on another instance holds it, and then sees what
// the Update committed. Each case
// also makes the Update write the same key the waiting write is about to
// (a client id, a lease, a supplement id) after the other has queued: with
// the locks taken in different orders the two would deadlock, which
// PostgreSQL breaks by failing one of them as unavailable.
func TestWritesWaitForUpdate(t *testing.T) {
	dsn := testDSN(t)
	a, b := twoStores(t, Options{})
	observer, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close(context.Background())
	ctx := t.Context()
	const ttl = time.Minute

	type kase struct {
		name string
		// setup prepares the session; the lease it may return is given
		// to the other two.
		setup  func(t *testing.T, key rein.SessionKey) *store.Lease
		public func(key rein.SessionKey, l *store.Lease) error
		inTx   func(tx store.Tx, key rein.SessionKey, l *store.Lease) error
		// check judges the public write's result, after the Update.
		check func(key rein.SessionKey, l *store.Lease, err error) error
	}
	// Run ids are unique across sessions: each case's are its session's.
	runIn := func(key rein.SessionKey, id, clientID string) *store.RunRecord {
		return &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: id + "_" + key.ID, ClientID: clientID, Status: rein.StatusQueued}
	}
	cases := []kase{{
		name: "CreateRun with the client id the Update takes",
		public: func(key rein.SessionKey, _ *store.Lease) error {
			return storetest.CreateRun(ctx, b, runIn(key, "run_b", "c-1"))
		},
		inTx: func(tx store.Tx, key rein.SessionKey, _ *store.Lease) error {
			return tx.CreateRun(runIn(key, "run_a", "c-1"))
		},
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error {
			if !errors.Is(err, rein.ErrConflict) {
				return fmt.Errorf("CreateRun = %v, want conflict", err)
			}
			return nil
		},
	}, {
		name: "AcquireLease while the Update acquires",
		public: func(key rein.SessionKey, _ *store.Lease) error {
			_, err := storetest.AcquireLease(ctx, b, key, "inst-b", "run_b", ttl)
			return err
		},
		inTx: func(tx store.Tx, _ rein.SessionKey, _ *store.Lease) error {
			_, err := tx.AcquireLease("inst-a", "run_a", ttl)
			return err
		},
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error {
			var re *rein.Error
			if !errors.Is(err, rein.ErrSessionBusy) || !errors.As(err, &re) || re.RunID != "run_a" {
				return fmt.Errorf("AcquireLease = %v, want busy with run_a", err)
			}
			return nil
		},
	}, {
		name: "RenewLease while the Update releases",
		setup: func(t *testing.T, key rein.SessionKey) *store.Lease {
			l, err := storetest.AcquireLease(ctx, a, key, "inst-a", "run_a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		public: func(_ rein.SessionKey, l *store.Lease) error { _, err := b.RenewLease(ctx, l, ttl); return err },
		inTx:   func(tx store.Tx, _ rein.SessionKey, l *store.Lease) error { return tx.ReleaseLease(l.Token) },
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error {
			if !errors.Is(err, rein.ErrLeaseLost) {
				return fmt.Errorf("RenewLease = %v, want lease lost", err)
			}
			return nil
		},
	}, {
		name: "fenced AppendEvents while the Update takes the lease over",
		setup: func(t *testing.T, key rein.SessionKey) *store.Lease {
			l, err := storetest.AcquireLease(ctx, a, key, "inst-a", "run_a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			// Expire it by the database's clock, so the Update may take
			// it over.
			if _, err := a.pool.Exec(ctx, `UPDATE leases SET expires_at = now() - interval '1 second' WHERE session_id = $1`, key.ID); err != nil {
				t.Fatal(err)
			}
			return l
		},
		public: func(key rein.SessionKey, l *store.Lease) error {
			_, err := b.AppendEvents(ctx, key, l.Fence(), []rein.Event{sysEvent("late")})
			return err
		},
		inTx: func(tx store.Tx, _ rein.SessionKey, _ *store.Lease) error {
			_, err := tx.AcquireLease("inst-a", "run_next", ttl)
			return err
		},
		check: func(key rein.SessionKey, _ *store.Lease, err error) error {
			if !errors.Is(err, rein.ErrLeaseLost) {
				return fmt.Errorf("AppendEvents with the taken-over fence = %v, want lease lost", err)
			}
			return nil
		},
	}, {
		name: "unfenced AppendEvents while the Update appends",
		public: func(key rein.SessionKey, _ *store.Lease) error {
			evs, err := b.AppendEvents(ctx, key, store.Fence{}, []rein.Event{sysEvent("after")})
			if err == nil && evs[0].Seq != 3 {
				return fmt.Errorf("seq %d, want 3 (after the Update's two)", evs[0].Seq)
			}
			return err
		},
		inTx: func(tx store.Tx, _ rein.SessionKey, _ *store.Lease) error {
			_, err := tx.AppendEvents(sysEvent("one"), sysEvent("two"))
			return err
		},
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error { return err },
	}, {
		name: "PushSupplement with the id the Update pushes",
		public: func(key rein.SessionKey, _ *store.Lease) error {
			got, created, err := storetest.PushSupplement(ctx, b, &store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "sup_1", Text: "b", Source: "user"})
			if err == nil && (created || got.Text != "a") {
				return fmt.Errorf("PushSupplement = %+v, created %v; want the Update's, not created", got, created)
			}
			return err
		},
		inTx: func(tx store.Tx, key rein.SessionKey, _ *store.Lease) error {
			_, _, err := tx.PushSupplement(&store.Supplement{Owner: key.Owner, SessionID: key.ID, ID: "sup_1", Text: "a", Source: "user"})
			return err
		},
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error { return err },
	}, {
		name: "UpdateRun while the Update ends the run",
		setup: func(t *testing.T, key rein.SessionKey) *store.Lease {
			if err := storetest.CreateRun(ctx, a, runIn(key, "run_a", "")); err != nil {
				t.Fatal(err)
			}
			return nil
		},
		public: func(key rein.SessionKey, _ *store.Lease) error {
			_, err := storetest.UpdateRun(ctx, b, key, store.Fence{}, "run_a_"+key.ID, store.RunUpdate{Stop: "cancel"})
			return err
		},
		inTx: func(tx store.Tx, key rein.SessionKey, _ *store.Lease) error {
			_, err := tx.UpdateRun("run_a_"+key.ID, store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop})
			return err
		},
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error {
			if !errors.Is(err, rein.ErrConflict) {
				return fmt.Errorf("UpdateRun of the run the Update ended = %v, want conflict", err)
			}
			return nil
		},
	}, {
		name: "ResolveConfirmation while the Update closes it",
		setup: func(t *testing.T, key rein.SessionKey) *store.Lease {
			if err := storetest.CreateConfirmation(ctx, a, &store.Confirmation{Owner: key.Owner, SessionID: key.ID, RunID: "run_a", ToolUseID: "call_1", Name: "t"}); err != nil {
				t.Fatal(err)
			}
			return nil
		},
		public: func(key rein.SessionKey, _ *store.Lease) error {
			_, err := storetest.ResolveConfirmation(ctx, b, key, "call_1", true, "")
			return err
		},
		inTx: func(tx store.Tx, _ rein.SessionKey, _ *store.Lease) error { return tx.CloseConfirmations("run_a") },
		check: func(_ rein.SessionKey, _ *store.Lease, err error) error {
			if !errors.Is(err, rein.ErrConflict) {
				return fmt.Errorf("ResolveConfirmation of a closed confirmation = %v, want conflict", err)
			}
			return nil
		},
	}, {
		name: "AppendHistory while the Update appends history",
		public: func(key rein.SessionKey, _ *store.Lease) error {
			return storetest.AppendHistory(ctx, b, key, store.Fence{}, []rein.Message{{Role: rein.RoleUser, Text: "second"}})
		},
		inTx: func(tx store.Tx, _ rein.SessionKey, _ *store.Lease) error {
			return tx.AppendHistory(rein.Message{Role: rein.RoleUser, Text: "first"})
		},
		check: func(key rein.SessionKey, _ *store.Lease, err error) error {
			if err != nil {
				return err
			}
			hist, err := a.LoadHistory(ctx, key)
			if err != nil || len(hist) != 2 || hist[0].Text != "first" || hist[1].Text != "second" {
				return fmt.Errorf("history = %+v, %v; want first, second", hist, err)
			}
			return nil
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := newSessionKey(t, a)
			var l *store.Lease
			if c.setup != nil {
				l = c.setup(t, key)
			}
			done := make(chan error, 1)
			err := a.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
				go func() { done <- c.public(key, l) }()
				if err := waitBlockedBy(t, observer, backendPID(tx), done); err != nil {
					return err
				}
				return c.inTx(tx, key, l)
			})
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			if err := c.check(key, l, <-done); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A statement the database refuses aborts the transaction: the Update
// fails even if its function carries on and returns nil, and nothing it
// wrote before is stored. The same for a write refused at commit (the held
// back events).
func TestUpdateDatabaseRefusalWritesNothing(t *testing.T) {
	s := openStore(t, testDSN(t), Options{})
	ctx := t.Context()
	key := newSessionKey(t, s)

	err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued}); err != nil {
			return err
		}
		if _, err := tx.AppendEvents(sysEvent("lost")); err != nil {
			return err
		}
		// A NUL byte is refused by a text column: the statement fails.
		bad := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_2", Status: rein.StatusQueued, Input: "a\x00b"})
		if rein.CodeOf(bad) != rein.CodeInvalidArgument {
			return fmt.Errorf("CreateRun with a NUL byte = %v, want invalid argument", bad)
		}
		if _, err := tx.GetRun("run_1"); err == nil {
			return errors.New("GetRun after an aborted statement succeeded")
		}
		return nil // ignoring the failure does not save the transaction
	})
	if rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("Update = %v, want the invalid argument that aborted it", err)
	}
	if _, err := s.GetRun(ctx, key, "run_1"); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("GetRun of the aborted Update's run = %v, want not found", err)
	}

	var runID string
	err = s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		runID = "run_3"
		if err := tx.CreateRun(&store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: runID, Status: rein.StatusQueued}); err != nil {
			return err
		}
		// Refused only when the held-back events are written, at commit.
		_, err := tx.AppendEvents(rein.NewEvent(rein.EventSystemMessage, "run_\x00", rein.SystemMessagePayload{Text: "x"}))
		return err
	})
	if rein.CodeOf(err) != rein.CodeInvalidArgument {
		t.Fatalf("Update refused at commit = %v, want invalid argument", err)
	}
	if _, err := s.GetRun(ctx, key, runID); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("GetRun of the Update refused at commit = %v, want not found", err)
	}
	if last, err := s.LastSeq(ctx, key); err != nil || last != 0 {
		t.Fatalf("LastSeq = %d, %v; want 0", last, err)
	}
	// The connection went back to the pool clean: the store works on.
	if err := s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		_, err := tx.AppendEvents(sysEvent("fine"))
		return err
	}); err != nil {
		t.Fatalf("Update after the refused ones: %v", err)
	}

	var kept store.Tx
	_ = s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error { kept = tx; return nil })
	if _, err := kept.AppendEvents(sysEvent("too late")); err == nil {
		t.Fatal("a Tx kept after its Update returned still appends")
	}
}

// With Options.Clock unset, leases expire by the database's clock and not
// the process's: instances whose clocks are an hour apart still agree.
// (The skewed process clock is visible in the stamps, which it does drive.)
func TestLeaseExpiryFollowsDatabaseClock(t *testing.T) {
	dsn := testDSN(t)
	schema := newSchema(t)
	skewed := func(d time.Duration) *Store {
		opts := Options{Schema: schema}
		opts.hooks.wallClock = func() time.Time { return time.Now().Add(d) }
		return openStore(t, dsn, opts)
	}
	fast, slow := skewed(time.Hour), skewed(-time.Hour)
	ctx := t.Context()
	key := newSessionKey(t, fast)
	dbNow := func() time.Time {
		var now time.Time
		if err := fast.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	within := func(what string, got, lo, hi time.Time) {
		t.Helper()
		if got.Before(lo.Truncate(time.Microsecond)) || got.After(hi) {
			t.Fatalf("%s = %v, want within [%v, %v]", what, got, lo, hi)
		}
	}
	evs, err := fast.AppendEvents(ctx, key, store.Fence{}, []rein.Event{sysEvent("stamped")})
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].CreatedAt.Sub(dbNow()) < 50*time.Minute {
		t.Fatalf("CreatedAt %v does not follow the skewed process clock", evs[0].CreatedAt)
	}
	// An Update's stamps are its transaction's time, the database's.
	lo := dbNow()
	if err := storetest.CreateRun(ctx, fast, &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_0", Status: rein.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	if r, err := fast.GetRun(ctx, key, "run_0"); err != nil {
		t.Fatal(err)
	} else {
		within("a run's CreatedAt", r.CreatedAt, lo, dbNow())
	}

	const ttl = time.Minute
	lo = dbNow()
	l, err := storetest.AcquireLease(ctx, fast, key, "fast", "run_1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	within("ExpiresAt", l.ExpiresAt, lo.Add(ttl), dbNow().Add(ttl))
	// By its own clock the fast instance would think the lease long gone.
	if _, err := storetest.AcquireLease(ctx, fast, key, "fast", "run_2", ttl); !errors.Is(err, rein.ErrSessionBusy) {
		t.Fatalf("AcquireLease of an unexpired lease by a fast instance = %v, want busy", err)
	}
	lo = dbNow()
	if l, err = fast.RenewLease(ctx, l, ttl); err != nil {
		t.Fatalf("RenewLease: %v", err)
	}
	within("renewed ExpiresAt", l.ExpiresAt, lo.Add(ttl), dbNow().Add(ttl))

	// Expired by the database's clock: the slow instance, which by its own
	// clock would see an hour left, takes it over; the holder cannot renew.
	if _, err := fast.pool.Exec(ctx, `UPDATE leases SET expires_at = now() - interval '1 millisecond'`); err != nil {
		t.Fatal(err)
	}
	if got, err := slow.GetLease(ctx, key); err != nil || got.Token != l.Token || !got.ExpiresAt.Before(dbNow()) {
		t.Fatalf("GetLease = %+v, %v; want the lease, expired", got, err)
	}
	if _, err := slow.RenewLease(ctx, l, ttl); !errors.Is(err, rein.ErrLeaseLost) {
		t.Fatalf("RenewLease of an expired lease = %v, want lease lost", err)
	}
	var inTx *store.Lease
	lo = dbNow()
	err = slow.Update(ctx, key, l.Fence(), func(tx store.Tx) error {
		if now := tx.Now(); now.Before(lo.Truncate(time.Microsecond)) || now.After(dbNow()) {
			return fmt.Errorf("Tx.Now() = %v, want the database's now (about %v)", now, lo)
		}
		var err error
		inTx, err = tx.AcquireLease("slow", "run_1", ttl)
		return err
	})
	if err != nil {
		t.Fatalf("Update taking the expired lease over: %v", err)
	}
	within("ExpiresAt from Tx.AcquireLease", inTx.ExpiresAt, lo.Add(ttl), dbNow().Add(ttl))
	if inTx.Token <= l.Token {
		t.Fatalf("token %d after %d", inTx.Token, l.Token)
	}
}

// UpdateRun's SQL applies a RunUpdate exactly as store.RunUpdate.Apply
// does. Every field of RunUpdate must be set by some case, so a field added
// to RunUpdate fails here until the SQL (and this list) learn it.
func TestUpdateRunMatchesApply(t *testing.T) {
	s := openStore(t, testDSN(t), Options{})
	ctx := t.Context()
	key := newSessionKey(t, s)
	seven, three := int64(7), 3
	cost := 0.25
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901234, time.UTC)
	updates := []store.RunUpdate{
		{Input: "edited while queued"},
		{Status: rein.StatusRunning, Instance: "inst-b", StartedAt: at},
		{Reason: rein.ReasonStop, Error: "boom"},
		{QueueOrder: &seven, Resumes: &three},
		{Stop: "interrupt", RolledBack: true},
		{Usage: &rein.Usage{InputTokens: 11, OutputTokens: 22}},
		{AddUsage: &rein.Usage{InputTokens: 5, OutputTokens: 6, CostUSD: &cost}},
		{AddUsage: &rein.Usage{InputTokens: 1, OutputTokens: 1}},
		{Usage: &rein.Usage{InputTokens: 2, OutputTokens: 3, CostUSD: &cost}, AddUsage: &rein.Usage{InputTokens: 1, OutputTokens: 1, CostUSD: &cost}},
		{Stop: "rollback"},
		{Status: rein.StatusFailed, EndedAt: at.Add(time.Second)},
	}
	covered := reflect.ValueOf(store.RunUpdate{})
	for i := range covered.NumField() {
		set := false
		for _, u := range updates {
			set = set || !reflect.ValueOf(u).Field(i).IsZero()
		}
		if !set {
			t.Fatalf("no case sets RunUpdate.%s", covered.Type().Field(i).Name)
		}
	}
	want := &store.RunRecord{Owner: key.Owner, SessionID: key.ID, ID: "run_1", Status: rein.StatusQueued, Input: "hi",
		ClientID: "c-1", QueueOrder: 1, Instance: "inst-a", Resumes: 1}
	if err := storetest.CreateRun(ctx, s, want); err != nil {
		t.Fatal(err)
	}
	for i, u := range updates {
		got, err := storetest.UpdateRun(ctx, s, key, store.Fence{}, "run_1", u)
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		u.Apply(want, dbTime)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("update %d (%+v):\n got  %+v\n want %+v", i, u, got, want)
		}
	}
}
