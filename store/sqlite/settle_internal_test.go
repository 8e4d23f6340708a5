package sqlite

import (
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
)

// A run's end is one commit: its terminal record and its
// session.run_completed. Between that COMMIT and the writer's answer the
// database has both and the log tail neither. A read of the record from
// the database in that moment (held open here) answers only once the tail
// has the event too, so a client that saw the run ended finds its end in
// the log.
func TestReadOfTheDatabaseSettlesOnTheTails(t *testing.T) {
	s := openTemp(t)
	key := tailSession(t, s, "ses_settle")
	ctx := t.Context()
	run := &store.RunRecord{Owner: "o", SessionID: "ses_settle", ID: "run_s", Status: rein.StatusRunning, Input: "x", Deadline: time.Now().Add(time.Hour)}
	if err := storetest.CreateRun(ctx, s, run); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{rein.NewEvent(rein.EventRunStarted, "run_s", rein.RunStartedPayload{RunID: "run_s"})}); err != nil {
		t.Fatal(err)
	}
	// The log tail knows the session (every read below is answered from it).
	if evs := readAll(t, s, key, 0, 10); len(evs) != 1 {
		t.Fatalf("%d events before the end, want 1", len(evs))
	}

	entered, hold := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the store closes, also when the test fails
	var once sync.Once
	s.afterCommit = func() { once.Do(func() { close(entered); <-hold }) }
	ended := make(chan error, 1)
	go func() {
		ended <- s.Update(ctx, key, store.Fence{}, func(tx store.Tx) error {
			if _, err := tx.UpdateRun("run_s", store.RunUpdate{Status: rein.StatusCompleted, Reason: rein.ReasonStop, EndedAt: time.Now()}); err != nil {
				return err
			}
			_, err := tx.AppendEvents(rein.NewEvent(rein.EventRunCompleted, "run_s", rein.RunCompletedPayload{RunID: "run_s", Status: rein.StatusCompleted, Reason: rein.ReasonStop}))
			return err
		})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the end was never committed")
	}

	type answer struct {
		rec *store.RunRecord
		err error
	}
	got := make(chan answer, 1)
	go func() {
		rec, err := s.GetRun(ctx, key, "run_s")
		got <- answer{rec, err}
	}()
	// Until the reader answers or waits on the tails: it read the
	// committed record either way.
	deadline := time.Now().Add(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case a := <-got:
			t.Fatalf("GetRun answered %+v %v while the log tail lacked the run's end: it should wait for it", a.rec, a.err)
		default:
		}
		s.tails.mu.Lock()
		waiting = s.tails.settled != nil
		s.tails.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the reader neither answered nor waited")
		}
		runtime.Gosched()
	}
	release()
	a := <-got
	if a.err != nil || a.rec.Status != rein.StatusCompleted {
		t.Fatalf("GetRun after the commit: %+v %v", a.rec, a.err)
	}
	evs := readAll(t, s, key, 0, 10)
	if len(evs) != 2 || evs[1].Type != rein.EventRunCompleted {
		t.Fatalf("the log after GetRun saw the run ended: %d events, want its session.run_completed last", len(evs))
	}
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
}

// Every kind of change an operation records for the tails must be marked
// while its batch commits, or a database read would not wait for it: each
// slice of op that names sessions is set here to one session of its own,
// and tailKeys must name them all. A new kind of change is a new slice,
// which this test refuses until it is told whether it changes the tails.
func TestTailKeysNameEveryTailChange(t *testing.T) {
	notTailChanges := map[string]bool{
		"wakes": true, // readers woken once the tails have the batch
	}
	keyType := reflect.TypeFor[rein.SessionKey]()
	var o op
	v := reflect.ValueOf(&o).Elem()
	var planted []rein.SessionKey
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Slice || notTailChanges[f.Name] {
			continue
		}
		key := rein.SessionKey{Owner: "o", ID: "ses_" + f.Name}
		elem := reflect.New(f.Type.Elem()).Elem()
		switch et := f.Type.Elem(); {
		case et == keyType:
			elem.Set(reflect.ValueOf(key))
		case et == reflect.TypeFor[*store.Session]():
			elem.Set(reflect.ValueOf(&store.Session{Owner: key.Owner, ID: key.ID}))
		case et.Kind() == reflect.Struct:
			sf, ok := et.FieldByName("key")
			if !ok || sf.Type != keyType {
				t.Fatalf("op.%s holds %s, which names no session: say whether it changes the tails", f.Name, et)
			}
			field := elem.FieldByIndex(sf.Index)
			reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem().Set(reflect.ValueOf(key))
		default:
			t.Fatalf("op.%s is a slice of %s: say whether it changes the tails", f.Name, et)
		}
		fv := v.Field(i)
		reflect.NewAt(fv.Type(), unsafe.Pointer(fv.UnsafeAddr())).Elem().Set(reflect.Append(reflect.MakeSlice(f.Type, 0, 1), elem))
		planted = append(planted, key)
	}
	if len(planted) < 6 {
		t.Fatalf("only %d kinds of tail change found in op, want at least the six applyTails makes", len(planted))
	}
	keys := o.tailKeys(nil)
	for _, k := range planted {
		if !slices.Contains(keys, k) {
			t.Errorf("tailKeys does not name %s: a read of the database would not wait for that change", k.ID)
		}
	}
}
