package sessions_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/memory"
)

// orderObserver records run starts and ends; the first end blocks until
// released, holding that run's end bookkeeping open.
type orderObserver struct {
	sessions.NopObserver
	mu      sync.Mutex
	log     []string
	ended   chan struct{} // closed when the first end is observed
	release chan struct{}
	second  chan struct{} // closed when a second run starts
}

func (o *orderObserver) RunStarted() {
	o.mu.Lock()
	o.log = append(o.log, "started")
	n := 0
	for _, e := range o.log {
		if e == "started" {
			n++
		}
	}
	o.mu.Unlock()
	if n == 2 {
		close(o.second)
	}
}

func (o *orderObserver) RunEnded(st rein.RunStatus, _ rein.Reason) {
	o.mu.Lock()
	o.log = append(o.log, "ended")
	first := len(o.log) == 2
	o.mu.Unlock()
	if first {
		close(o.ended)
		<-o.release
	}
}

// TestClaimedRunWaitsForThePreviousEnd: a session's runs never overlap on
// an instance. A run claimed the moment the previous run's end is written
// (the turn is free in the store) begins its loop only once the previous
// run's end bookkeeping here is over — what the per-session lanes of the
// run package used to guarantee, now kept by runClaimed.
func TestClaimedRunWaitsForThePreviousEnd(t *testing.T) {
	obs := &orderObserver{ended: make(chan struct{}), release: make(chan struct{}), second: make(chan struct{})}
	waiting := make(chan string, 1)
	defer sessions.SetWaitPrevious(func(id string) { waiting <- id })()
	st := memory.New()
	defer st.Close()
	svc, err := reintest.Service("testdata/service.yaml", st, func(c *sessions.Config) { c.Observer = obs })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(obs.release) }) }
	defer release() // before Close, which waits for the first run's end
	sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	key := sess.Key()
	if _, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-obs.ended: // the first run's end is written; its bookkeeping is held
	case <-time.After(10 * time.Second):
		t.Fatal("the first run did not end")
	}
	b, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != rein.StatusRunning {
		t.Fatalf("second run %s: the turn is free in the store, want it claimed at once", b.Status)
	}
	select {
	case id := <-waiting:
		if id != b.RunID {
			t.Fatalf("run %s waited, want %s", id, b.RunID)
		}
	case <-obs.second:
		t.Fatal("the second run began while the first run's end was still running here")
	case <-time.After(10 * time.Second):
		t.Fatal("the second run neither began nor waited")
	}
	release()
	if _, err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	// The second run's end may still be on its way to the observer.
	want := []string{"started", "ended", "started"}
	if len(obs.log) < len(want) {
		t.Fatalf("observed %v, want %v", obs.log, want)
	}
	for i := range want {
		if obs.log[i] != want[i] {
			t.Fatalf("observed %v, want %v", obs.log, want)
		}
	}
}
