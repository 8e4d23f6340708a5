package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// cacheAgrees checks, inside the writer, that what the cache entry of key
// answers — its unended runs, each of them by id, its lease — is what the
// database holds.
func cacheAgrees(t *testing.T, s *Store, key rein.SessionKey, when string) {
	t.Helper()
	err := s.write(t.Context(), "check", func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		cached, err := tx.runs(si, unended)
		if err != nil {
			return err
		}
		db, err := tx.runsFromDB(si, unended)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(cached, db) {
			return fmt.Errorf("unended runs: cache %s, database %s", runIDs(cached), runIDs(db))
		}
		for _, r := range db {
			got, err := tx.getRun(si, r.ID)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(got, r) {
				return fmt.Errorf("run %s: cache %+v, database %+v", r.ID, got, r)
			}
		}
		queued, err := tx.runs(si, []rein.RunStatus{rein.StatusQueued})
		if err != nil {
			return err
		}
		dbQueued, err := tx.runsFromDB(si, []rein.RunStatus{rein.StatusQueued})
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(queued, dbQueued) {
			return fmt.Errorf("queued runs: cache %s, database %s", runIDs(queued), runIDs(dbQueued))
		}
		l, err := tx.lease(si)
		if err != nil {
			return err
		}
		fresh := &sessInfo{pk: si.pk}
		dbl, err := tx.lease(fresh)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(l, dbl) {
			return fmt.Errorf("lease: cache %+v, database %+v", l, dbl)
		}
		if (si.lease != 0) != (dbl != nil) || (dbl != nil && si.lease != dbl.Token) {
			return fmt.Errorf("lease token: cache %d, database %+v", si.lease, dbl)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
}

func runIDs(rs []*store.RunRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%s(%s,%d)", r.ID, r.Status, r.QueueOrder)
	}
	return out
}

// The writer's knowledge of a session's unended runs and of its lease
// follows every write to them, and a rolled-back operation takes back what
// it changed and what it read of its own writes.
func TestRunCacheFollowsWrites(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_rc")
	run := func(id string, st rein.RunStatus, order int64) *store.RunRecord {
		return &store.RunRecord{Owner: "o", SessionID: "ses_rc", ID: id, Status: st, Input: "in " + id, QueueOrder: order,
			ClientID: "c_" + id, Deadline: time.Now().Add(time.Hour)}
	}
	cacheAgrees(t, s, key, "a new session")
	var lease *store.Lease
	if err := s.Update(t.Context(), key, store.Fence{}, func(tx store.Tx) error {
		if _, err := tx.Runs(rein.StatusRunning, rein.StatusQueued); err != nil {
			return err
		}
		l, err := tx.AcquireLease("inst", "run_a", time.Minute)
		if err != nil {
			return err
		}
		lease = l
		if err := tx.CreateRun(run("run_a", rein.StatusRunning, 30)); err != nil {
			return err
		}
		if err := tx.CreateRun(run("run_b", rein.StatusQueued, 20)); err != nil {
			return err
		}
		return tx.CreateRun(run("run_c", rein.StatusQueued, 10))
	}); err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after an admission")
	if err := storetest.CreateRun(t.Context(), s, run("run_d", rein.StatusCreated, 5)); err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after CreateRun")
	if _, err := storetest.UpdateRun(t.Context(), s, key, lease.Fence(), "run_b", store.RunUpdate{QueueOrder: ptr(int64(1))}); err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after a new queue order")
	if _, err := s.RenewLease(t.Context(), lease, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after a renewal")

	boom := errors.New("boom")
	// Changes then a failure; reads of its own writes then a failure.
	for i, fn := range []func(tx store.Tx) error{
		func(tx store.Tx) error {
			if _, err := tx.UpdateRun("run_a", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: time.Now()}); err != nil {
				return err
			}
			if err := tx.ReleaseLease(lease.Token); err != nil {
				return err
			}
			if err := tx.CreateRun(run("run_x", rein.StatusQueued, 1)); err != nil {
				return err
			}
			return boom
		},
		func(tx store.Tx) error {
			if err := tx.CreateRun(run("run_y", rein.StatusQueued, 1)); err != nil {
				return err
			}
			if _, err := tx.GetRun("run_y"); err != nil {
				return err
			}
			return boom
		},
	} {
		// Drop the knowledge first, so that the failing operation loads it.
		if i == 1 {
			if err := s.write(t.Context(), "forget", func(tx *wtx) error {
				si, err := tx.session(key)
				if err == nil {
					si.active, si.activeKnown = nil, false
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Update(t.Context(), key, lease.Fence(), fn); !errors.Is(err, boom) {
			t.Fatalf("failing Update %d: %v", i, err)
		}
		cacheAgrees(t, s, key, fmt.Sprintf("after failing Update %d", i))
	}

	// The same failures in a batch of several operations (savepoints).
	release, held := holdWriter(t, s)
	o, finish := s.updateOp(t.Context(), key, lease.Fence(), func(tx store.Tx) error {
		if err := tx.CreateRun(run("run_z", rein.StatusQueued, 2)); err != nil {
			return err
		}
		if _, err := tx.UpdateRun("run_c", store.RunUpdate{Status: rein.StatusCancelled, Reason: rein.ReasonCancelled, EndedAt: time.Now()}); err != nil {
			return err
		}
		return boom
	})
	s.ops <- o
	after := enqueue(s, false, func(tx *wtx) error {
		si, err := tx.session(key)
		if err != nil {
			return err
		}
		_, err = tx.updateRun(si, "run_d", store.RunUpdate{Status: rein.StatusQueued})
		return err
	})
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := finish(<-o.done); !errors.Is(err, boom) {
		t.Fatalf("batched Update = %v", err)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after a batch with a failed operation")

	// Ends and a release that commit.
	if err := s.Update(t.Context(), key, lease.Fence(), func(tx store.Tx) error {
		for _, id := range []string{"run_a", "run_b"} {
			if _, err := tx.UpdateRun(id, store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: time.Now()}); err != nil {
				return err
			}
		}
		return tx.ReleaseLease(lease.Token)
	}); err != nil {
		t.Fatal(err)
	}
	cacheAgrees(t, s, key, "after ends and a release")
	if r, err := s.GetRun(t.Context(), key, "run_a"); err != nil || r.Status != rein.StatusCompleted {
		t.Fatalf("an ended run reads %+v, %v", r, err)
	}
}

// After a reopen the cache loads what an earlier Store wrote.
func TestRunCacheAfterReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rein.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := tailSession(t, s, "ses_ro")
	if _, err := storetest.AcquireLease(t.Context(), s, key, "inst", "run_1", time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, st := range []rein.RunStatus{rein.StatusRunning, rein.StatusQueued, rein.StatusCompleted} {
		if err := storetest.CreateRun(t.Context(), s, &store.RunRecord{Owner: "o", SessionID: "ses_ro", ID: fmt.Sprintf("run_%d", i+1), Status: st, QueueOrder: int64(10 - i)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if s, err = Open(t.Context(), path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cacheAgrees(t, s, key, "after a reopen")
}

func ptr[T any](v T) *T { return &v }
