package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/sessions"
)

func noEnv(string) (string, bool) { return "", false }

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	out, errb := newSyncBuffer(), newSyncBuffer()
	code = mainWith(context.Background(), append([]string{"run", "--model", "scripted:testdata/run.yaml", "--workspace", t.TempDir()}, args...),
		stdio{in: strings.NewReader(""), out: out, err: errb, lookupEnv: noEnv})
	return code, out.String(), errb.String()
}

func TestRunStreamsReply(t *testing.T) {
	code, out, errs := runCmd(t, "hello", "world")
	if code != 0 || out != "echo hello world\n" {
		t.Fatalf("code %d out %q err %q", code, out, errs)
	}
}

func TestRunJSONIsOnlyEvents(t *testing.T) {
	code, out, _ := runCmd(t, "--json", "hi")
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var types []rein.EventType
	for i, l := range lines {
		var e rein.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d is not an event: %q", i, l)
		}
		if e.Seq != int64(i+1) {
			t.Fatalf("seq %d at line %d", e.Seq, i)
		}
		types = append(types, e.Type)
	}
	if types[0] != rein.EventUserMessage || types[len(types)-1] != rein.EventRunCompleted {
		t.Fatalf("%v", types)
	}
}

func TestRunExitCodes(t *testing.T) {
	if code, _, errs := runCmd(t, "fail now"); code != exitFailed || !strings.Contains(errs, "upstream exploded") {
		t.Fatalf("failed run: %d %q", code, errs)
	}
	if code, _, _ := runCmd(t, "--timeout", "50ms", "long wait"); code != exitTimeout {
		t.Fatalf("timeout: %d", code)
	}
	if code, _, errs := runCmd(t); code != exitUsage || !strings.Contains(errs, "TEXT") {
		t.Fatalf("empty input: %d %q", code, errs)
	}
	if code, _, errs := runCmd(t, "--model", "nope", "x"); code != exitUsage || !strings.Contains(errs, `unknown model "nope"`) {
		t.Fatalf("unknown model: %d %q", code, errs)
	}
	if code, _, errs := runCmd(t, "--model", "scripted:testdata/missing.yaml", "x"); code != exitUsage || !strings.Contains(errs, "missing.yaml") {
		t.Fatalf("missing script: %d %q", code, errs)
	}
}

// TestRunFirstSignalInterrupts: the first signal interrupts the run by its
// id (exit 3, the run answers); the stop is cooperative, so the transcript
// and events stay complete.
func TestRunFirstSignalInterrupts(t *testing.T) {
	ctx := context.Background()
	rt, err := openRuntime(ctx, app.Options{Store: "memory:", Model: "scripted:testdata/run.yaml", Workspace: t.TempDir(), LookupEnv: noEnv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	svc := rt.Service()
	sess, err := svc.CreateSession(ctx, "local", sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	key := sess.Key()
	sigs := make(chan os.Signal, 2)
	out := newSyncBuffer()
	done := make(chan int)
	go func() {
		err := runOnce(ctx, svc, key, "long job", 0, false, sigs, stdio{in: strings.NewReader(""), out: out, err: out, lookupEnv: noEnv})
		done <- exitStatus("run", runSynopsis, err, out)
	}()
	// Wait (on the session's log) until the run is inside its hour-long
	// tool call.
	waitEventType(t, svc, key, rein.EventToolUse)
	sigs <- os.Interrupt
	select {
	case code := <-done:
		if code != exitInterrupted {
			t.Fatalf("exit %d, want %d; output %q", code, exitInterrupted, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
	ev := waitEventType(t, svc, key, rein.EventUserInterrupt)
	var p rein.UserInterruptPayload
	if err := ev.DecodePayload(&p); err != nil || p.Mode != "interrupt" || !p.Accepted || p.RunID == nil {
		t.Fatalf("%+v %v", p, err)
	}
}

func waitEventType(t *testing.T, svc *sessions.Service, key rein.SessionKey, typ rein.EventType) rein.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	after := int64(0)
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == typ {
				return e
			}
			after = e.Seq
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			t.Fatalf("no %s event: %v", typ, err)
		}
	}
}
