// Package protocoltest holds the scenarios every protocol adapter must
// pass, written once: each adapter's test implements Driver through its
// protocol's official client and calls Run. The scenarios are the promises
// of docs/protocols.md — a message sent and answered; a run streamed and
// read back the same; a stream resumed at any point, mid-run or after, with
// no gap and no duplicate; a stop of exactly the run named while another
// waits in the queue; two messages queued; a note read by the next step;
// an approval allowed and one denied; another owner's session invisible.
//
// A scenario drives the adapter only through the Driver, and checks what
// the protocol cannot show (a run's status) through the sessions service
// the server runs on. The scripted model's rules the scenarios need are in
// Script.
package protocoltest

import (
	"context"
	_ "embed"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// Script is the scripted model (docs/models.md) the server under test must
// run: the scenarios' messages are matched by its rules.
//
//go:embed script.yaml
var Script string

// WriteScript writes Script to a file of t's and returns its path.
func WriteScript(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(Script), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Kind is what a protocol event means, in the scenarios' terms.
type Kind string

// The kinds a Driver reports.
const (
	// KindUser is the user's message (or another user input) echoed.
	KindUser Kind = "user"
	// KindRunning: a run started (or went on after its approvals).
	KindRunning Kind = "running"
	// KindText is text the agent produced: a step's or the reply.
	KindText Kind = "text"
	// KindPreview is streamed text ahead of its KindText.
	KindPreview Kind = "preview"
	// KindApproval: the run waits for answers to Refs.
	KindApproval Kind = "approval"
	// KindIdle: a run ended and the session waits for input.
	KindIdle Kind = "idle"
	// KindOther is anything else the protocol shows (tool calls, spans).
	KindOther Kind = "other"
)

// Item is one protocol event as the scenarios see it.
type Item struct {
	// ID is the protocol event's id; "" for events without one
	// (previews). Scenarios compare streams and histories by it.
	ID string
	// Cursor is where a stream opened after this item resumes.
	Cursor string
	Kind   Kind
	// Text is KindText's and KindPreview's text.
	Text string
	// Refs are what KindApproval asks answers for (Driver.Answer).
	Refs []string
}

// Stream is an open event stream.
type Stream interface {
	// Next returns the next item, waiting for it; io.EOF when the stream
	// ended.
	Next() (Item, error)
	// Close ends the stream (never a run).
	Close() error
}

// Driver drives an adapter through its official client. Owners are Rein
// owners: the driver knows each one's credential.
type Driver interface {
	// CreateSession creates a session of owner's and returns its id.
	CreateSession(ctx context.Context, owner string) (string, error)
	// Send sends a user message, queued when the session is busy, and
	// returns the run id the server gave it.
	Send(ctx context.Context, owner, session, text string) (runID string, err error)
	// Stop stops exactly the run named.
	Stop(ctx context.Context, owner, session, runID string) error
	// Note sends a note the session's next step reads.
	Note(ctx context.Context, owner, session, text string) error
	// Answer answers an approval: ref is one of KindApproval's Refs.
	Answer(ctx context.Context, owner, session, ref string, allow bool, denyMessage string) error
	// Stream opens the session's events after cursor ("": from the log's
	// first event); previews asks for KindPreview items too.
	Stream(ctx context.Context, owner, session, cursor string, previews bool) (Stream, error)
	// History is everything the protocol lists for the session, oldest
	// first (no previews).
	History(ctx context.Context, owner, session string) ([]Item, error)
	// Get reads the session.
	Get(ctx context.Context, owner, session string) error
	// NotFound reports whether err is the protocol's answer for a session
	// that does not exist.
	NotFound(err error) bool
}

// Env is an adapter under test.
type Env struct {
	Driver Driver
	// Service is the sessions service behind the server.
	Service *sessions.Service
	// Owners are two owners the Driver has credentials for.
	Owners [2]string
}

// Run runs every scenario against env.
func Run(t *testing.T, env Env) {
	for _, sc := range []struct {
		name string
		run  func(*testing.T, Env)
	}{
		{"CreateAndSend", createAndSend},
		{"StreamAndReadBack", streamAndReadBack},
		{"Previews", previews},
		{"ResumeAnywhere", resumeAnywhere},
		{"StopExactlyTheNamedRun", stopExact},
		{"QueueTwo", queueTwo},
		{"NoteInNextStep", noteInNextStep},
		{"ApprovalAllowedAndDenied", approvals},
		{"OtherOwnersSessionInvisible", isolation},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, env) })
	}
}

// scenarioTimeout bounds a scenario: a hang is a failure, not a CI timeout.
const scenarioTimeout = 30 * time.Second

func setup(t *testing.T, env Env) (context.Context, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	owner := env.Owners[0]
	id, err := env.Driver.CreateSession(ctx, owner)
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return ctx, owner, id
}

// until reads st until an item of kind want (returned with all read).
func until(t *testing.T, st Stream, want Kind) []Item {
	t.Helper()
	var got []Item
	for {
		it, err := st.Next()
		if err != nil {
			t.Fatalf("stream ended (%v) before %s; got %v", err, want, got)
		}
		got = append(got, it)
		if it.Kind == want {
			return got
		}
	}
}

func texts(items []Item) []string {
	var out []string
	for _, it := range items {
		if it.Kind == KindText {
			out = append(out, it.Text)
		}
	}
	return out
}

func ids(items []Item) []string {
	var out []string
	for _, it := range items {
		if it.Kind != KindPreview {
			out = append(out, string(it.Kind)+" "+it.ID)
		}
	}
	return out
}

func open(t *testing.T, env Env, ctx context.Context, owner, session, cursor string, previews bool) Stream {
	t.Helper()
	st, err := env.Driver.Stream(ctx, owner, session, cursor, previews)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func send(t *testing.T, env Env, ctx context.Context, owner, session, text string) string {
	t.Helper()
	run, err := env.Driver.Send(ctx, owner, session, text)
	if err != nil {
		t.Fatalf("send %q: %v", text, err)
	}
	if run == "" {
		t.Fatalf("send %q: no run id", text)
	}
	return run
}

func history(t *testing.T, env Env, ctx context.Context, owner, session string) []Item {
	t.Helper()
	h, err := env.Driver.History(ctx, owner, session)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	return h
}

func outcome(t *testing.T, env Env, ctx context.Context, owner, session, run string) sessions.RunOutcome {
	t.Helper()
	out, err := env.Service.WaitRun(ctx, rein.SessionKey{Owner: owner, ID: session}, run)
	if err != nil {
		t.Fatalf("wait for run %s: %v", run, err)
	}
	return out
}

// createAndSend: a message sent is answered, on a stream opened before it.
func createAndSend(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", false)
	send(t, env, ctx, owner, id, "hello there")
	got := until(t, st, KindIdle)
	if tx := texts(got); !slices.Equal(tx, []string{"echo: hello there"}) {
		t.Fatalf("texts = %q, want the echo", tx)
	}
}

// streamAndReadBack: what a stream showed is what the history lists, event
// for event, ids included.
func streamAndReadBack(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", false)
	send(t, env, ctx, owner, id, "stream it")
	streamed := until(t, st, KindIdle)
	h := history(t, env, ctx, owner, id)
	if !slices.Equal(ids(streamed), ids(h)) {
		t.Fatalf("streamed %q\nhistory  %q", ids(streamed), ids(h))
	}
	if tx := texts(h); len(tx) != 1 || tx[0] != streamText {
		t.Fatalf("texts = %q, want [%q]", tx, streamText)
	}
}

// streamText is what the script's "stream" rule says, in many deltas.
const streamText = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// previews: a stream that asks for previews gets the text ahead of the
// reply, and the previews add up to it.
func previews(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", true)
	send(t, env, ctx, owner, id, "stream with previews")
	got := until(t, st, KindIdle)
	var pre strings.Builder
	sawText := false
	for _, it := range got {
		switch it.Kind {
		case KindPreview:
			if sawText {
				t.Fatalf("a preview after the text it previews: %v", got)
			}
			pre.WriteString(it.Text)
		case KindText:
			sawText = true
		}
	}
	if pre.String() != streamText || !slices.Equal(texts(got), []string{streamText}) {
		t.Fatalf("previews %q, texts %q; want both %q", pre.String(), texts(got), streamText)
	}
}

// resumeAnywhere: a stream cut mid-run and resumed shows every event once;
// after the run, a stream resumed at any item's cursor shows exactly the
// items after it.
func resumeAnywhere(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", false)
	send(t, env, ctx, owner, id, "stream and cut")
	var first []Item
	for len(first) < 3 {
		it, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, it)
	}
	_ = st.Close()
	rest := until(t, open(t, env, ctx, owner, id, first[len(first)-1].Cursor, false), KindIdle)
	all := append(first, rest...)
	h := history(t, env, ctx, owner, id)
	if !slices.Equal(ids(all), ids(h)) {
		t.Fatalf("cut and resumed %q\nhistory          %q", ids(all), ids(h))
	}
	for i := range h {
		// Items rendered from one log event share a cursor: a stream
		// resumed there continues after the last of them.
		j := i + 1
		for j < len(h) && h[j].Cursor == h[i].Cursor {
			j++
		}
		if j == len(h) {
			break
		}
		s := open(t, env, ctx, owner, id, h[i].Cursor, false)
		tail := until(t, s, KindIdle)
		_ = s.Close()
		if want := h[j:]; !slices.Equal(ids(tail), ids(want)) {
			t.Fatalf("resumed after item %d: %q, want %q", i, ids(tail), ids(want))
		}
	}
}

// stopExact: a stop names one run; the run queued behind it is untouched
// and runs next.
func stopExact(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	key := rein.SessionKey{Owner: owner, ID: id}
	st := open(t, env, ctx, owner, id, "", false)
	a := send(t, env, ctx, owner, id, "long one")
	until(t, st, KindRunning)
	b := send(t, env, ctx, owner, id, "long two")
	if run, err := env.Service.GetRun(ctx, key, b); err != nil || run.Status != rein.StatusQueued {
		t.Fatalf("run b = %+v, %v; want QUEUED", run, err)
	}
	if err := env.Driver.Stop(ctx, owner, id, a); err != nil {
		t.Fatalf("stop a: %v", err)
	}
	if out := outcome(t, env, ctx, owner, id, a); out.Reason != rein.ReasonInterrupted && out.Reason != rein.ReasonCancelled {
		t.Fatalf("run a ended %+v, want stopped", out)
	}
	// b runs now: nothing stopped it.
	run, err := env.Service.GetRun(ctx, key, b)
	if err != nil || run.Status.Terminal() {
		t.Fatalf("run b = %+v, %v; want queued or running, untouched", run, err)
	}
	if err := env.Driver.Stop(ctx, owner, id, b); err != nil {
		t.Fatalf("stop b: %v", err)
	}
	outcome(t, env, ctx, owner, id, b)
}

// queueTwo: two messages sent to a busy session run after it, in order.
func queueTwo(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	key := rein.SessionKey{Owner: owner, ID: id}
	st := open(t, env, ctx, owner, id, "", false)
	a := send(t, env, ctx, owner, id, "long first")
	until(t, st, KindRunning)
	b := send(t, env, ctx, owner, id, "one")
	c := send(t, env, ctx, owner, id, "two")
	info, err := env.Service.GetSession(ctx, key)
	if err != nil || !slices.Equal(info.QueuedRunIDs, []string{b, c}) {
		t.Fatalf("queue = %v (%v), want [%s %s]", info.QueuedRunIDs, err, b, c)
	}
	if err := env.Driver.Stop(ctx, owner, id, a); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{b, c} {
		if out := outcome(t, env, ctx, owner, id, r); out.Status != rein.StatusCompleted {
			t.Fatalf("run %s ended %+v", r, out)
		}
	}
	tx := texts(history(t, env, ctx, owner, id))
	i, j := slices.Index(tx, "echo: one"), slices.Index(tx, "echo: two")
	if i < 0 || j < i {
		t.Fatalf("texts = %q, want echo: one before echo: two", tx)
	}
}

// noteInNextStep: a note sent while a run waits is read by its next step,
// not by the one before.
func noteInNextStep(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", false)
	send(t, env, ctx, owner, id, "note the milk")
	got := until(t, st, KindApproval)
	if err := env.Driver.Note(ctx, owner, id, "buy oat milk"); err != nil {
		t.Fatalf("note: %v", err)
	}
	ap := got[len(got)-1]
	if len(ap.Refs) != 1 {
		t.Fatalf("approval refs = %q", ap.Refs)
	}
	if err := env.Driver.Answer(ctx, owner, id, ap.Refs[0], true, ""); err != nil {
		t.Fatalf("answer: %v", err)
	}
	got = append(got, until(t, st, KindIdle)...)
	tx := texts(got)
	if len(tx) != 2 || !strings.Contains(tx[0], "hints=[]") || !strings.Contains(tx[1], "hints=[buy oat milk]") {
		t.Fatalf("texts = %q, want the note in the second step only", tx)
	}
}

// approvals: one call allowed runs; one denied gets the deny message.
func approvals(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	st := open(t, env, ctx, owner, id, "", false)
	for _, allow := range []bool{true, false} {
		send(t, env, ctx, owner, id, "note this")
		got := until(t, st, KindApproval)
		ap := got[len(got)-1]
		if len(ap.Refs) != 1 {
			t.Fatalf("approval refs = %q", ap.Refs)
		}
		if err := env.Driver.Answer(ctx, owner, id, ap.Refs[0], allow, "not now"); err != nil {
			t.Fatalf("answer: %v", err)
		}
		tx := texts(until(t, st, KindIdle))
		last := tx[len(tx)-1]
		if allow == strings.Contains(last, "not now") || !strings.HasPrefix(last, "note result: ") {
			t.Fatalf("allow=%v: reply %q", allow, last)
		}
	}
}

// isolation: another owner's session is answered as a missing one, by
// every route.
func isolation(t *testing.T, env Env) {
	ctx, owner, id := setup(t, env)
	other := env.Owners[1]
	send(t, env, ctx, owner, id, "mine")
	d := env.Driver
	checks := map[string]error{}
	checks["get"] = d.Get(ctx, other, id)
	_, checks["send"] = d.Send(ctx, other, id, "theirs")
	checks["note"] = d.Note(ctx, other, id, "theirs")
	checks["stop"] = d.Stop(ctx, other, id, "run_x")
	_, checks["history"] = d.History(ctx, other, id)
	st, err := d.Stream(ctx, other, id, "", false)
	if err == nil {
		_, err = st.Next()
		_ = st.Close()
	}
	checks["stream"] = err
	for name, err := range checks {
		if !d.NotFound(err) {
			t.Errorf("%s as another owner: %v, want the protocol's not found", name, err)
		}
	}
	// Nothing reached the session.
	h := history(t, env, ctx, owner, id)
	for _, it := range h {
		if it.Kind == KindText && strings.Contains(it.Text, "theirs") {
			t.Fatalf("another owner's message reached the session: %v", h)
		}
	}
}
