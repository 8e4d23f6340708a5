package client_test

// End-to-end tests: the client against the real server package, over
// loopback HTTP, with the sessions service, the memory store, the scripted
// model of testdata/script.yaml and the built-in tools behind it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
)

// testTimeout bounds every wait: a test that needs longer has failed.
const testTimeout = 30 * time.Second

// stack is a running server and what is behind it.
type stack struct {
	url string
	hc  *http.Client

	mu sync.Mutex
	// seen are the requests the server received, in arrival order.
	seen []*http.Request
}

// newStack starts a server. tokens nil is single-user mode.
func newStack(t testing.TB, tokens map[string]string) *stack {
	t.Helper()
	s := &stack{}
	ts := reintest.NewServer(t, reintest.ServerOptions{
		Script: "testdata/script.yaml", Tokens: tokens,
		Configure: func(c *sessions.Config) { c.InterruptGrace = 2 * time.Second },
		Wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.mu.Lock()
				s.seen = append(s.seen, r.Clone(context.Background()))
				s.mu.Unlock()
				h.ServeHTTP(w, r)
			})
		},
	})
	s.url, s.hc = ts.URL, ts.HTTP
	return s
}

// client returns a client of the stack with token ("" for none).
func (s *stack) client(token string, opts ...client.Option) *client.Client {
	opts = append([]client.Option{client.WithHTTPClient(s.hc), client.WithToken(token)}, opts...)
	return client.New(s.url, opts...)
}

// requests returns the requests the server saw whose path ends with suffix.
func (s *stack) requests(suffix string) []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*http.Request
	for _, r := range s.seen {
		if strings.HasSuffix(r.URL.Path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// watcher follows a session's events through the client's stream.
type watcher struct {
	t    *testing.T
	st   *client.EventStream
	seen []rein.Event
}

func watch(t *testing.T, c *client.Client, sid string) *watcher {
	st := c.Stream(ctxT(t), sid, 0)
	t.Cleanup(func() { st.Close() })
	return &watcher{t: t, st: st}
}

// until reads events until one matches and returns it.
func (w *watcher) until(pred func(rein.Event) bool) rein.Event {
	w.t.Helper()
	for _, e := range w.seen {
		if pred(e) {
			return e
		}
	}
	for {
		e, err := w.st.Next()
		if err != nil {
			w.t.Fatalf("stream: %v (seen %d events)", err, len(w.seen))
		}
		if n := len(w.seen); n > 0 && e.Seq != w.seen[n-1].Seq+1 {
			w.t.Fatalf("stream gave seq %d after %d", e.Seq, w.seen[n-1].Seq)
		}
		w.seen = append(w.seen, e)
		if pred(e) {
			return e
		}
	}
}

func is(typ rein.EventType, runID string) func(rein.Event) bool {
	return func(e rein.Event) bool { return e.Type == typ && (runID == "" || e.RunID == runID) }
}

// completion waits for a run's session.run_completed.
func (w *watcher) completion(runID string) rein.RunCompletedPayload {
	w.t.Helper()
	var p rein.RunCompletedPayload
	if err := w.until(is(rein.EventRunCompleted, runID)).DecodePayload(&p); err != nil {
		w.t.Fatal(err)
	}
	return p
}

func payload[T any](t *testing.T, e rein.Event) T {
	t.Helper()
	var p T
	if err := e.DecodePayload(&p); err != nil {
		t.Fatalf("%s payload %s: %v", e.Type, e.Payload, err)
	}
	return p
}

// allEvents reads the whole log page by page with ListEvents.
func allEvents(t *testing.T, c *client.Client, sid string, limit int) []rein.Event {
	t.Helper()
	var all []rein.Event
	after := int64(0)
	for {
		evs, last, err := c.ListEvents(ctxT(t), sid, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
		if len(evs) == 0 || evs[len(evs)-1].Seq >= last {
			return all
		}
		after = evs[len(evs)-1].Seq
	}
}

func newSession(t testing.TB, c *client.Client) string {
	t.Helper()
	s, err := c.CreateSession(ctxT(t), client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func send(t *testing.T, c *client.Client, sid string, m client.Message) client.MessageResult {
	t.Helper()
	r, err := c.SendMessage(ctxT(t), sid, m)
	if err != nil {
		t.Fatalf("send %q: %v", m.Text, err)
	}
	return r
}

func stop(t *testing.T, c *client.Client, sid, runID string, mode rein.StopMode) client.InterruptResult {
	t.Helper()
	r, err := c.StopRun(ctxT(t), sid, runID, mode)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func runStatus(t *testing.T, c *client.Client, sid, runID string) rein.RunStatus {
	t.Helper()
	r, err := c.GetRun(ctxT(t), sid, runID)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func sameEvents(t *testing.T, got, want []rein.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Seq != w.Seq || g.ID != w.ID || g.Type != w.Type || g.RunID != w.RunID || g.SessionID != w.SessionID || string(g.Payload) != string(w.Payload) || !g.CreatedAt.Equal(w.CreatedAt) {
			t.Fatalf("event %d differs:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func TestE2EHealthAndReady(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"tok": "alice"})
	c := s.client("") // the probes need no token
	if err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestE2ESessionsAndRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sys := "be brief"
	created, err := c.CreateSession(ctx, client.CreateSessionRequest{Metadata: map[string]string{"title": "first"}, System: &sys})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.ID, "ses_") || string(created.Metadata) != `{"title":"first"}` || created.CreatedAt.IsZero() {
		t.Fatalf("created %+v", created)
	}
	other := newSession(t, c)
	list, err := c.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != other || list[1].ID != created.ID || list[0].ParentSessionID != "" {
		t.Fatalf("sessions %+v, want newest first", list)
	}
	got, err := c.GetSession(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "idle" || got.CurrentRunID != "" || len(got.QueuedRunIDs) != 0 || got.LastSeq != 0 {
		t.Fatalf("fresh session %+v", got)
	}
	if runs, err := c.ListRuns(ctx, created.ID); err != nil || len(runs) != 0 {
		t.Fatalf("runs of a fresh session: %v %v", runs, err)
	}

	w := watch(t, c, created.ID)
	r := send(t, c, created.ID, client.Message{Text: "system?"})
	if r.Status != rein.StatusRunning || !strings.HasPrefix(r.RunID, "run_") {
		t.Fatalf("send: %+v", r)
	}
	if p := w.completion(r.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonStop {
		t.Fatalf("completion %+v", p)
	}
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, r.RunID))); m.Text != "system=[be brief]" {
		t.Fatalf("reply %q", m.Text)
	}
	run, err := c.GetRun(ctx, created.ID, r.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if run.RunID != r.RunID || run.Status != rein.StatusCompleted || run.Reason != rein.ReasonStop || run.StartedAt == nil || run.EndedAt == nil || run.EndedAt.Before(*run.StartedAt) {
		t.Fatalf("run %+v", run)
	}
	runs, err := c.ListRuns(ctx, created.ID)
	if err != nil || len(runs) != 1 || runs[0].RunID != r.RunID {
		t.Fatalf("runs %+v %v", runs, err)
	}
	if _, err := c.GetRun(ctx, created.ID, "run_nope"); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	if _, err := c.GetSession(ctx, "ses_nope"); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	got, _ = c.GetSession(ctx, created.ID)
	if got.LastSeq != w.seen[len(w.seen)-1].Seq {
		t.Fatalf("last_seq %d, stream saw %d", got.LastSeq, w.seen[len(w.seen)-1].Seq)
	}
}

// TestE2EEventTable exercises every row of docs/api.md's submitted-event table
// through the client's typed helpers, and checks the events each one logs.
func TestE2EEventTable(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sid := newSession(t, c)
	w := watch(t, c, sid)

	// system.message: later runs see it.
	if err := c.SetSystem(ctx, sid, "speak softly"); err != nil {
		t.Fatal(err)
	}
	if p := payload[rein.SystemMessagePayload](t, w.until(is(rein.EventSystemMessage, ""))); p.Text != "speak softly" {
		t.Fatalf("system.message %+v", p)
	}
	r := send(t, c, sid, client.Message{Text: "system?"})
	w.completion(r.RunID)
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, r.RunID))); m.Text != "system=[speak softly]" {
		t.Fatalf("reply %q", m.Text)
	}

	// user.supplement while idle: queued, consumed by the next run's first
	// step; a repeat of its id adds nothing.
	sup, err := c.Supplement(ctx, sid, client.Supplement{Text: "mind the gap", ID: "note-1"})
	if err != nil {
		t.Fatal(err)
	}
	if sup.SupplementID != "note-1" || sup.Status != "queued" {
		t.Fatalf("supplement %+v", sup)
	}
	if p := payload[rein.SupplementPayload](t, w.until(is(rein.EventUserSupplement, ""))); p.SupplementID != "note-1" || p.Text != "mind the gap" || p.Source != "user" {
		t.Fatalf("user.supplement %+v", p)
	}
	r = send(t, c, sid, client.Message{Text: "hint?"})
	w.completion(r.RunID)
	consumed := payload[rein.SupplementConsumedPayload](t, w.until(is(rein.EventSupplementConsumed, r.RunID)))
	if consumed.SupplementID != "note-1" || consumed.RunID != r.RunID || consumed.Step != 1 {
		t.Fatalf("agent.supplement_consumed %+v", consumed)
	}
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, r.RunID))); m.Text != "hints=[mind the gap]" {
		t.Fatalf("reply %q", m.Text)
	}
	if again, err := c.Supplement(ctx, sid, client.Supplement{Text: "mind the gap", ID: "note-1"}); err != nil || again.Status != "consumed" {
		t.Fatalf("repeat supplement: %+v %v", again, err)
	}

	// user.tool_confirmation: allow, then deny with a message.
	r = send(t, c, sid, client.Message{Text: "note first"})
	req := payload[rein.ToolConfirmationRequestedPayload](t, w.until(is(rein.EventToolConfirmationRequested, r.RunID)))
	if req.Name != "write_note" || req.RunID != r.RunID {
		t.Fatalf("confirmation request %+v", req)
	}
	if st := runStatus(t, c, sid, r.RunID); st != rein.StatusRunning {
		t.Fatalf("a run waiting for confirmation is %s", st)
	}
	ok, err := c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: true})
	if err != nil || !ok.Allow || ok.ToolUseID != req.ToolUseID {
		t.Fatalf("confirm: %+v %v", ok, err)
	}
	if _, err := c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: true}); !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("second answer: %v, want conflict", err)
	}
	if _, err := c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: "call_nope", Allow: true}); !errors.Is(err, rein.ErrNotFound) {
		t.Fatalf("unknown tool_use_id: %v, want not_found", err)
	}
	w.completion(r.RunID)
	if res := payload[rein.ToolResultPayload](t, w.until(is(rein.EventToolResult, r.RunID))); res.IsError || res.ToolUseID != req.ToolUseID {
		t.Fatalf("allowed tool result %+v", res)
	}
	r = send(t, c, sid, client.Message{Text: "note second"})
	req = payload[rein.ToolConfirmationRequestedPayload](t, w.until(is(rein.EventToolConfirmationRequested, r.RunID)))
	if _, err := c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, DenyMessage: "not today"}); err != nil {
		t.Fatal(err)
	}
	if p := payload[rein.UserToolConfirmationPayload](t, w.until(is(rein.EventUserToolConfirmation, r.RunID))); p.Allow || p.DenyMessage == nil || *p.DenyMessage != "not today" {
		t.Fatalf("user.tool_confirmation %+v", p)
	}
	if p := w.completion(r.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("a denial ended the run: %+v", p)
	}
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, r.RunID))); !strings.Contains(m.Text, "not today") {
		t.Fatalf("reply after a denial %q", m.Text)
	}

	// user.message while busy: enqueue → run_queued; user.interrupt by
	// run id with mode interrupt → the run answers, reason interrupted.
	a := send(t, c, sid, client.Message{Text: "long"})
	use := payload[rein.ToolUsePayload](t, w.until(is(rein.EventToolUse, a.RunID)))
	if use.Name != "sleep" || use.Step != 1 {
		t.Fatalf("agent.tool_use %+v", use)
	}
	b := send(t, c, sid, client.Message{Text: "after long", WhenBusy: rein.WhenBusyEnqueue})
	if b.Status != rein.StatusQueued {
		t.Fatalf("enqueued: %+v", b)
	}
	if q := payload[rein.RunQueuedPayload](t, w.until(is(rein.EventRunQueued, b.RunID))); q.Position != 1 {
		t.Fatalf("run_queued %+v", q)
	}
	msg := "enough"
	in, err := c.Interrupt(ctx, sid, client.Interrupt{RunID: &a.RunID, Mode: rein.StopInterrupt, Message: &msg})
	if err != nil || !in.Accepted || in.RunID != a.RunID {
		t.Fatalf("interrupt: %+v %v", in, err)
	}
	ui := payload[rein.UserInterruptPayload](t, w.until(is(rein.EventUserInterrupt, a.RunID)))
	if ui.RunID == nil || *ui.RunID != a.RunID || ui.Mode != "interrupt" || !ui.Accepted || ui.Message == nil || *ui.Message != "enough" {
		t.Fatalf("user.interrupt %+v", ui)
	}
	if p := w.completion(a.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("interrupted run: %+v", p)
	}
	if res := payload[rein.ToolResultPayload](t, w.until(is(rein.EventToolResult, a.RunID))); !res.IsError {
		t.Fatalf("a tool cut short by an interrupt: %+v", res)
	}
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, a.RunID))); m.Reason != rein.ReasonInterrupted {
		t.Fatalf("interrupted reply %+v", m)
	}
	if p := w.completion(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("queued run after the interrupt: %+v", p)
	}
	if m := payload[rein.MessagePayload](t, w.until(is(rein.EventMessage, b.RunID))); m.Text != "echo: after long" {
		t.Fatalf("reply %q", m.Text)
	}

	// The log, read by pages of 3 with GET /events, is exactly what the
	// stream delivered; every run's lifecycle events are present.
	sameEvents(t, allEvents(t, c, sid, 3), w.seen)
	types := map[rein.EventType]bool{}
	for _, e := range w.seen {
		types[e.Type] = true
	}
	for _, typ := range []rein.EventType{
		rein.EventUserMessage, rein.EventRunQueued, rein.EventRunStarted, rein.EventMessageDelta, rein.EventToolUse,
		rein.EventToolConfirmationRequested, rein.EventUserToolConfirmation, rein.EventToolResult, rein.EventUserSupplement,
		rein.EventSupplementConsumed, rein.EventMessage, rein.EventUserInterrupt, rein.EventSystemMessage, rein.EventRunCompleted,
	} {
		if !types[typ] {
			t.Errorf("no %s in the log", typ)
		}
	}
}

// TestE2EStopQueuedRun: A running, B and C enqueued, stop B: only B ends,
// without starting; A keeps running, C keeps its place; a second stop of
// B is not accepted.
func TestE2EStopQueuedRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sid := newSession(t, c)
	w := watch(t, c, sid)
	a := send(t, c, sid, client.Message{Text: "long A"})
	w.until(is(rein.EventToolUse, a.RunID))

	_, err := c.SendMessage(ctx, sid, client.Message{Text: "rejected"})
	var ce *client.Error
	if !errors.Is(err, rein.ErrSessionBusy) || !errors.As(err, &ce) || ce.RunID != a.RunID || ce.Status != http.StatusConflict {
		t.Fatalf("message to a busy session: %v, want session_busy naming %s", err, a.RunID)
	}
	b := send(t, c, sid, client.Message{Text: "B", WhenBusy: rein.WhenBusyEnqueue})
	cc := send(t, c, sid, client.Message{Text: "C", WhenBusy: rein.WhenBusyEnqueue})
	info, err := c.GetSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "busy" || info.CurrentRunID != a.RunID || !slices.Equal(info.QueuedRunIDs, []string{b.RunID, cc.RunID}) {
		t.Fatalf("busy session %+v", info)
	}

	if r := stop(t, c, sid, b.RunID, rein.StopCancel); !r.Accepted || r.RunID != b.RunID {
		t.Fatalf("stop B: %+v", r)
	}
	if p := w.completion(b.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("B: %+v", p)
	}
	if st := runStatus(t, c, sid, a.RunID); st != rein.StatusRunning {
		t.Fatalf("A is %s after stopping B", st)
	}
	info, _ = c.GetSession(ctx, sid)
	if info.CurrentRunID != a.RunID || !slices.Equal(info.QueuedRunIDs, []string{cc.RunID}) {
		t.Fatalf("after stopping B: %+v", info)
	}
	if r := stop(t, c, sid, b.RunID, rein.StopCancel); r.Accepted {
		t.Fatalf("second stop of B accepted: %+v", r)
	}
	if st := runStatus(t, c, sid, a.RunID); st != rein.StatusRunning {
		t.Fatalf("A is %s after a second stop of B", st)
	}
	stop(t, c, sid, a.RunID, rein.StopCancel)
	if p := w.completion(cc.RunID); p.Status != rein.StatusCompleted {
		t.Fatalf("C: %+v", p)
	}
	for _, e := range w.seen {
		if e.Type == rein.EventRunStarted && e.RunID == b.RunID {
			t.Fatal("B started although it was stopped while queued")
		}
	}
	aEnd := w.until(is(rein.EventRunCompleted, a.RunID))
	cStart := w.until(is(rein.EventRunStarted, cc.RunID))
	if cStart.Seq < aEnd.Seq {
		t.Fatal("C started before A ended")
	}
}

// TestE2EStaleStop: a stop naming a finished run is not accepted and does
// not touch the run that is current now.
func TestE2EStaleStop(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	sid := newSession(t, c)
	w := watch(t, c, sid)
	old := send(t, c, sid, client.Message{Text: "quick"})
	w.completion(old.RunID)
	cur := send(t, c, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, cur.RunID))
	for _, mode := range []rein.StopMode{rein.StopCancel, rein.StopInterrupt} {
		if r := stop(t, c, sid, old.RunID, mode); r.Accepted || r.RunID != old.RunID {
			t.Fatalf("stale stop (%s): %+v", mode, r)
		}
	}
	if r := stop(t, c, sid, "run_unknown", rein.StopCancel); r.Accepted {
		t.Fatalf("stop of an unknown run: %+v", r)
	}
	if st := runStatus(t, c, sid, cur.RunID); st != rein.StatusRunning {
		t.Fatalf("the current run is %s after stale stops", st)
	}
	ui := payload[rein.UserInterruptPayload](t, w.until(is(rein.EventUserInterrupt, old.RunID)))
	if ui.Accepted {
		t.Fatalf("stale stop logged as accepted: %+v", ui)
	}
	// A run of another session is "unknown" here too.
	other := newSession(t, c)
	if r := stop(t, c, other, cur.RunID, rein.StopCancel); r.Accepted {
		t.Fatalf("a stop through another session was accepted: %+v", r)
	}
	if st := runStatus(t, c, sid, cur.RunID); st != rein.StatusRunning {
		t.Fatalf("the run is %s after a stop through another session", st)
	}
	if r := stop(t, c, sid, cur.RunID, rein.StopCancel); !r.Accepted {
		t.Fatalf("stop: %+v", r)
	}
	if r := stop(t, c, sid, cur.RunID, rein.StopCancel); r.Accepted {
		t.Fatalf("second stop accepted: %+v", r)
	}
	if p := w.completion(cur.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled {
		t.Fatalf("cancelled run %+v", p)
	}
}

// TestE2ESessionLevelInterrupt: without a run id the stop hits the running
// run only; queued runs are untouched.
func TestE2ESessionLevelInterrupt(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sid := newSession(t, c)
	w := watch(t, c, sid)
	if r, err := c.Interrupt(ctx, sid, client.Interrupt{}); err != nil || r.Accepted || r.RunID != "" {
		t.Fatalf("interrupt of an idle session: %+v %v", r, err)
	}
	ui := payload[rein.UserInterruptPayload](t, w.until(is(rein.EventUserInterrupt, "")))
	if ui.RunID != nil || ui.Accepted || ui.Mode != "cancel" {
		t.Fatalf("idle user.interrupt %+v", ui)
	}
	a := send(t, c, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, a.RunID))
	b := send(t, c, sid, client.Message{Text: "queued", WhenBusy: rein.WhenBusyEnqueue})
	r, err := c.Interrupt(ctx, sid, client.Interrupt{Mode: rein.StopInterrupt})
	if err != nil || !r.Accepted || r.RunID != a.RunID {
		t.Fatalf("session-level interrupt: %+v %v", r, err)
	}
	if p := w.completion(a.RunID); p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
	if p := w.completion(b.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("queued B %+v", p)
	}
}

// TestE2EWhenBusyInterrupt: the current run is interrupted and the new one
// runs next, ahead of runs already queued, which keep their order.
func TestE2EWhenBusyInterrupt(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	sid := newSession(t, c)
	w := watch(t, c, sid)
	a := send(t, c, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, a.RunID))
	b := send(t, c, sid, client.Message{Text: "B", WhenBusy: rein.WhenBusyEnqueue})
	m := send(t, c, sid, client.Message{Text: "M", WhenBusy: rein.WhenBusyInterrupt})
	if m.Status != rein.StatusQueued {
		t.Fatalf("when_busy=interrupt answered %+v, want QUEUED", m)
	}
	if q := payload[rein.RunQueuedPayload](t, w.until(is(rein.EventRunQueued, m.RunID))); q.Position != 1 {
		t.Fatalf("M queued at %d, want 1", q.Position)
	}
	if p := w.completion(a.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonInterrupted {
		t.Fatalf("A %+v", p)
	}
	w.completion(b.RunID)
	mStart := w.until(is(rein.EventRunStarted, m.RunID))
	bStart := w.until(is(rein.EventRunStarted, b.RunID))
	if mStart.Seq > bStart.Seq {
		t.Fatal("B ran before M")
	}
}

// TestE2EWhenBusyRollback: the current run is cancelled at once and its
// completion says rolled back; the new run runs next, ahead of runs
// already queued.
func TestE2EWhenBusyRollback(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	sid := newSession(t, c)
	w := watch(t, c, sid)
	a := send(t, c, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, a.RunID))
	b := send(t, c, sid, client.Message{Text: "B", WhenBusy: rein.WhenBusyEnqueue})
	m := send(t, c, sid, client.Message{Text: "M", WhenBusy: rein.WhenBusyRollback})
	if m.Status != rein.StatusQueued {
		t.Fatalf("when_busy=rollback answered %+v, want QUEUED", m)
	}
	if p := w.completion(a.RunID); p.Status != rein.StatusCancelled || p.Reason != rein.ReasonCancelled || !p.RolledBack {
		t.Fatalf("A %+v, want CANCELLED/cancelled rolled back", p)
	}
	if p := w.completion(b.RunID); p.RolledBack {
		t.Fatalf("B %+v", p)
	}
	mStart := w.until(is(rein.EventRunStarted, m.RunID))
	bStart := w.until(is(rein.EventRunStarted, b.RunID))
	if mStart.Seq > bStart.Seq {
		t.Fatal("B ran before M")
	}
}

// TestE2EClientIDRepeat: a repeat answers the first run and starts nothing,
// while it runs and after it ended.
func TestE2EClientIDRepeat(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	sid := newSession(t, c)
	w := watch(t, c, sid)
	first := send(t, c, sid, client.Message{Text: "long", ClientID: "k1"})
	w.until(is(rein.EventToolUse, first.RunID))
	again := send(t, c, sid, client.Message{Text: "long", ClientID: "k1"})
	if again != first {
		t.Fatalf("repeat while running: %+v, want %+v", again, first)
	}
	stop(t, c, sid, first.RunID, rein.StopCancel)
	w.completion(first.RunID)
	again = send(t, c, sid, client.Message{Text: "something else", ClientID: "k1"})
	if again.RunID != first.RunID || again.Status != rein.StatusCancelled {
		t.Fatalf("repeat after the end: %+v", again)
	}
	// The same key in another session is another message.
	other := newSession(t, c)
	if r := send(t, c, other, client.Message{Text: "hi", ClientID: "k1"}); r.RunID == first.RunID {
		t.Fatal("client_id leaked across sessions")
	}
	n := 0
	for _, e := range allEvents(t, c, sid, 0) {
		if e.Type == rein.EventUserMessage {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d user.message events for one client_id", n)
	}
}

func TestE2EErrorsAndBatches(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sid := newSession(t, c)

	_, err := c.SendMessage(ctx, sid, client.Message{Text: ""})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != rein.CodeInvalidArgument || ce.Param != "events[0].payload.text" {
		t.Fatalf("empty text: %v", err)
	}
	empty := ""
	if _, err := c.Interrupt(ctx, sid, client.Interrupt{RunID: &empty}); !errors.Is(err, rein.ErrInvalidArgument) {
		t.Fatalf("empty run_id: %v", err)
	}
	// An invalid event anywhere applies nothing.
	res, err := c.PostEvents(ctx, sid, []client.EventInput{
		{Type: rein.EventUserSupplement, Payload: client.Supplement{Text: "applied?"}},
		{Type: "user.bogus"},
	})
	if !errors.Is(err, rein.ErrInvalidArgument) || len(res) != 0 {
		t.Fatalf("invalid batch: %v %s", err, res)
	}
	if evs := allEvents(t, c, sid, 0); len(evs) != 0 {
		t.Fatalf("an invalid batch applied %d events", len(evs))
	}
	// A failure while applying stops the batch; the results of the events
	// before it come back with the error.
	w := watch(t, c, sid)
	a := send(t, c, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, a.RunID))
	res, err = c.PostEvents(ctx, sid, []client.EventInput{
		{Type: rein.EventUserSupplement, Payload: client.Supplement{Text: "first"}},
		{Type: rein.EventUserMessage, Payload: client.Message{Text: "busy"}},
		{Type: rein.EventUserSupplement, Payload: client.Supplement{Text: "never"}},
	})
	if !errors.As(err, &ce) || ce.Code != rein.CodeSessionBusy || ce.RunID != a.RunID {
		t.Fatalf("batch into a busy session: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("partial results %s, want the supplement's", res)
	}
	var sr client.SupplementResult
	if err := json.Unmarshal(res[0], &sr); err != nil || sr.Status != "queued" || sr.SupplementID == "" {
		t.Fatalf("partial result %s: %v", res[0], err)
	}
	// A successful batch answers one result per event, in order.
	res, err = c.PostEvents(ctx, sid, []client.EventInput{
		{Type: rein.EventSystemMessage, Payload: rein.SystemMessagePayload{Text: "x"}},
		{Type: rein.EventUserInterrupt, Payload: json.RawMessage(fmt.Sprintf(`{"run_id":%q}`, a.RunID))},
	})
	if err != nil || len(res) != 2 || string(res[0]) != "{}" || !strings.Contains(string(res[1]), `"accepted":true`) {
		t.Fatalf("batch: %s %v", res, err)
	}
	if _, _, err := c.ListEvents(ctx, sid, -1, 0); !errors.Is(err, rein.ErrInvalidArgument) {
		t.Fatalf("negative after: %v", err)
	}
}

// TestE2EOwnerIsolation: another owner's session is indistinguishable
// from a missing one on every route, the event stream included; a missing
// or wrong token is unauthenticated.
func TestE2EOwnerIsolation(t *testing.T) {
	t.Parallel()
	s := newStack(t, map[string]string{"tok-alice": "alice", "tok-bob": "bob"})
	alice, bob := s.client("tok-alice"), s.client("tok-bob")
	ctx := ctxT(t)
	sid := newSession(t, alice)
	w := watch(t, alice, sid)
	run := send(t, alice, sid, client.Message{Text: "long"})
	w.until(is(rein.EventToolUse, run.RunID))

	if list, err := bob.ListSessions(ctx); err != nil || len(list) != 0 {
		t.Fatalf("bob's sessions: %+v %v", list, err)
	}
	calls := map[string]func(c *client.Client) error{
		"GetSession": func(c *client.Client) error { _, err := c.GetSession(ctx, sid); return err },
		"ListRuns":   func(c *client.Client) error { _, err := c.ListRuns(ctx, sid); return err },
		"GetRun":     func(c *client.Client) error { _, err := c.GetRun(ctx, sid, run.RunID); return err },
		"SendMessage": func(c *client.Client) error {
			_, err := c.SendMessage(ctx, sid, client.Message{Text: "hi", WhenBusy: rein.WhenBusyEnqueue})
			return err
		},
		"StopRun":   func(c *client.Client) error { _, err := c.StopRun(ctx, sid, run.RunID, rein.StopCancel); return err },
		"Interrupt": func(c *client.Client) error { _, err := c.Interrupt(ctx, sid, client.Interrupt{}); return err },
		"Supplement": func(c *client.Client) error {
			_, err := c.Supplement(ctx, sid, client.Supplement{Text: "x"})
			return err
		},
		"ConfirmTool": func(c *client.Client) error {
			_, err := c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: "call_x"})
			return err
		},
		"SetSystem":  func(c *client.Client) error { return c.SetSystem(ctx, sid, "x") },
		"ListEvents": func(c *client.Client) error { _, _, err := c.ListEvents(ctx, sid, 0, 0); return err },
		"Stream": func(c *client.Client) error {
			st := c.Stream(ctx, sid, 0)
			defer st.Close()
			_, err := st.Next()
			return err
		},
	}
	for name, call := range calls {
		if err := call(bob); !errors.Is(err, rein.ErrNotFound) {
			t.Errorf("bob %s: %v, want not_found", name, err)
		}
		if err := call(s.client("")); !errors.Is(err, rein.ErrUnauthenticated) {
			t.Errorf("no token %s: %v, want unauthenticated", name, err)
		}
		if err := call(s.client("tok-mallory")); !errors.Is(err, rein.ErrUnauthenticated) {
			t.Errorf("bad token %s: %v, want unauthenticated", name, err)
		}
	}
	// Nothing bob tried reached alice's run or log.
	if st := runStatus(t, alice, sid, run.RunID); st != rein.StatusRunning {
		t.Fatalf("alice's run is %s", st)
	}
	for _, e := range allEvents(t, alice, sid, 0) {
		if e.Type == rein.EventUserInterrupt || e.Type == rein.EventUserSupplement || e.Type == rein.EventSystemMessage || (e.Type == rein.EventUserMessage && e.RunID != run.RunID) {
			t.Fatalf("bob's request reached alice's log: %+v", e)
		}
	}
}

// BenchmarkStreamReplay reads a stored log of 10,000 events through the
// client: over SSE with Stream, and page by page with ListEvents.
func BenchmarkStreamReplay(b *testing.B) {
	const n = 10000
	s := newStack(b, nil)
	c := s.client("")
	sid := newSession(b, c)
	ctx := ctxT(b)
	for i := range n / 100 {
		batch := make([]client.EventInput, 100)
		for j := range batch {
			batch[j] = client.EventInput{Type: rein.EventSystemMessage, Payload: rein.SystemMessagePayload{Text: fmt.Sprintf("system prompt number %d", i*100+j)}}
		}
		if _, err := c.PostEvents(ctx, sid, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("Stream", func(b *testing.B) {
		for b.Loop() {
			st := c.Stream(ctx, sid, 0)
			for range n {
				if _, err := st.Next(); err != nil {
					b.Fatal(err)
				}
			}
			st.Close()
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("ListEvents", func(b *testing.B) {
		for b.Loop() {
			got := 0
			for after := int64(0); got < n; {
				evs, _, err := c.ListEvents(ctx, sid, after, 1000)
				if err != nil {
					b.Fatal(err)
				}
				got += len(evs)
				after = evs[len(evs)-1].Seq
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
