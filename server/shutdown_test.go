package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
)

// served is a server run by Serve on a real listener, as `rein serve`
// runs it.
type served struct {
	*stack
	stop context.CancelFunc
	done chan error
}

// serve starts Serve on a loopback listener; stopping it is the test's
// job (shutdown), with a cleanup that stops it if the test did not.
func serve(t *testing.T, o options) *served {
	t.Helper()
	if o.store == nil {
		o.store = memory.New()
	}
	ws := o.workspace
	if ws == "" {
		ws = t.TempDir()
	}
	svc, metrics, err := assemble(o, ws)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Service: svc, Tokens: o.tokens, Logger: o.logger, Metrics: metrics, Heartbeat: o.heartbeat, DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	sv := &served{
		stack: &stack{t: t, st: o.store, svc: svc, srv: srv, url: "http://" + ln.Addr().String()},
		stop:  stop,
		done:  make(chan error, 1),
	}
	go func() { sv.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		<-sv.done
	})
	return sv
}

// shutdown cancels Serve's context, as SIGTERM does, and returns Serve's
// result.
func (sv *served) shutdown() error {
	sv.stop()
	select {
	case err := <-sv.done:
		sv.done <- err // for the cleanup
		return err
	case <-time.After(testTimeout):
		sv.t.Fatal("Serve did not return after its context ended")
		return nil
	}
}

// TestGracefulShutdown: SIGTERM mid-run interrupts the running run
// cooperatively (its run_completed reaches the open stream before the
// stream ends), leaves the queued run queued in the store, returns nil;
// a new server on the same store starts the queued run by itself.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	st := memory.New()
	defer st.Close()
	sv := serve(t, options{store: st})
	sid := sv.createSession("")
	a := sv.send("", sid, "long A", nil)["run_id"].(string)
	b := sv.send("", sid, "B", map[string]any{"when_busy": "enqueue"})["run_id"].(string)
	stream := sv.stream("", sid, "", "")
	stream.until(is(rein.EventToolUse, a))

	if err := sv.shutdown(); err != nil {
		t.Fatalf("Serve after a graceful shutdown: %v", err)
	}
	// The stream got A's completion, then ended.
	got := stream.until(is(rein.EventRunCompleted, a))
	var p rein.RunCompletedPayload
	if err := got[len(got)-1].DecodePayload(&p); err != nil || p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A's completion on the stream: %+v %v", p, err)
	}
	if _, err := stream.next(); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the stream did not end with the server: %v", err)
	}

	key := rein.SessionKey{Owner: server.LocalOwner, ID: sid}
	checkRun(t, st, key, a, rein.StatusCompleted, rein.ReasonInterrupted)
	checkRun(t, st, key, b, rein.StatusQueued, "")
	evs, _, err := st.ReadEvents(t.Context(), key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	checkLog(t, evs)
	if _, err := find(evs, is(rein.EventRunStarted, b)); err == nil {
		t.Fatal("the queued run started during shutdown")
	}

	// Up again on the same store: B runs without any request.
	sv2 := serve(t, options{store: st})
	if p := sv2.completion("", sid, b); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("B after restart: %+v", p)
	}
	checkLog(t, sv2.events("", sid))
	if err := sv2.shutdown(); err != nil {
		t.Fatal(err)
	}
}

func checkRun(t *testing.T, st store.Store, key rein.SessionKey, runID string, status rein.RunStatus, reason rein.Reason) {
	t.Helper()
	r, err := st.GetRun(t.Context(), key, runID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != status || r.Reason != reason {
		t.Fatalf("run %s is %s/%s, want %s/%s", runID, r.Status, r.Reason, status, reason)
	}
}
