package sessions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/storetest"
	"github.com/reinhq/rein/tool"
	"github.com/reinhq/rein/tool/builtin"
)

// TestCrashWindows stops the store at every write of a run that streams,
// calls a tool, takes a supplement and waits for a confirmation — once with
// the write lost, once with it committed but its answer lost — restarts a
// service on the same store, and checks what recovery made of it (DESIGN.md
// rule 5: every crash window has a test).
func TestCrashWindows(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, testCrashWindows)
}

// counter is a tool that counts its executions per tool_use_id: a call
// must never run twice, whatever crashed in between.
type counter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *counter) Spec() tool.Spec {
	return tool.Spec{Name: "count", Description: "counts", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (c *counter) Call(_ context.Context, call tool.Call) (tool.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[call.ID]++
	return tool.Result{Output: "counted"}, nil
}

// pacedModel makes every streamed delta of a run its own write: before
// it hands the model's next text chunk on, it waits until the previous
// one is in the log (or the store has crashed), so no two deltas are
// coalesced into one append and the harness can cut between any two.
type pacedModel struct {
	model.Model
	st   store.Store
	key  rein.SessionKey
	dead <-chan struct{}
}

func (m *pacedModel) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	s, err := m.Model.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pacedStream{Stream: s, m: m, ctx: ctx, run: req.RunID, step: req.Step}, nil
}

type pacedStream struct {
	model.Stream
	m      *pacedModel
	ctx    context.Context
	run    string
	step   int
	texts  int   // text chunks handed on
	logged int   // deltas of this step's latest attempt seen in the log
	after  int64 // where the log was read to
}

func (s *pacedStream) Recv() (model.Chunk, error) {
	ch, err := s.Stream.Recv()
	if err != nil || ch.Kind != model.ChunkText || ch.Text == "" {
		return ch, err
	}
	if s.texts > 0 {
		s.waitLogged(s.texts)
	}
	s.texts++
	return ch, nil
}

// waitLogged waits until n deltas of this request's step are in the log
// after its first chunk was handed on, the store crashed, or the request
// ended.
func (s *pacedStream) waitLogged(n int) {
	for s.logged < n {
		evs, _, err := s.m.st.ReadEvents(s.ctx, s.m.key, s.after, 1000)
		if err != nil {
			return
		}
		for _, e := range evs {
			s.after = e.Seq
			var d rein.MessageDeltaPayload
			if e.Type == rein.EventMessageDelta && e.RunID == s.run && e.DecodePayload(&d) == nil && d.Step == s.step {
				s.logged++
			}
			var r rein.StepRestartedPayload
			if e.Type == rein.EventStepRestarted && e.RunID == s.run && e.DecodePayload(&r) == nil && r.Step == s.step {
				// A redo of the step: count only its own deltas.
				s.logged = 0
			}
		}
		if s.logged >= n {
			return
		}
		wctx, cancel := context.WithCancel(s.ctx)
		go func() {
			select {
			case <-s.m.dead:
			case <-wctx.Done():
			}
			cancel()
		}()
		err = s.m.st.WaitEvents(wctx, s.m.key, s.after)
		cancel()
		if err != nil {
			return
		}
	}
}

func testCrashWindows(t *testing.T, open clockedOpener) {
	for n := 1; ; n++ {
		wrote := 0
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("write%d", n)
			if after {
				name += "-committed"
			}
			t.Run(name, func(t *testing.T) {
				clk := &shiftClock{}
				wrote = crashAt(t, open(t, clk.now), clk, n, after)
			})
			if t.Failed() {
				return
			}
		}
		if wrote < n {
			// The scenario made fewer than n writes: every window is done.
			if n < 8 {
				t.Fatalf("the scenario made only %d writes", wrote)
			}
			return
		}
	}
}

// crashAt runs the scenario with the store crashing at write n and checks
// recovery. It returns how many writes the scenario made before the crash
// (all of them when it never came). clk is the store's clock: the restart
// moves it past the crashed instance's leases.
func crashAt(t *testing.T, base store.Store, clk *shiftClock, n int, afterCommit bool) int {
	ctx := context.Background()
	workspace := t.TempDir()
	count := &counter{calls: map[string]int{}}
	// The session exists before the faults start.
	sess := &store.Session{Owner: "alice", ID: "ses_crash", Metadata: json.RawMessage("{}")}
	if err := base.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	key := sess.Key()
	f := storetest.NewFaulty(base)
	f.CrashAt(n, afterCommit)
	newService := func(st store.Store, instance string) *sessions.Service {
		pace := func(m model.Model) model.Model { return &pacedModel{Model: m, st: base, key: key, dead: f.Crashed()} }
		svc, err := reintest.ServiceWithModel("testdata/service.yaml", pace, st, func(c *sessions.Config) {
			c.Workspace, c.LeaseTTL, c.Instance = workspace, liveLease, instance
		}, count)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return svc
	}
	first := newService(f, "first")

	// The client's side: what it was answered for.
	var ackedRuns, ackedSups, ackedConfirms []string
	crashed, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		select {
		case <-f.Crashed():
		case <-crashed.Done():
		}
		stopWaiting()
	}()
	if res, err := first.SendMessage(ctx, key, sessions.MessageRequest{Text: "crash test"}); err == nil {
		ackedRuns = append(ackedRuns, res.RunID)
	}
	if req, ok := waitFor(crashed, base, key, rein.EventToolConfirmationRequested); ok {
		if res, err := first.Supplement(ctx, key, sessions.SupplementRequest{Text: "be brief", ID: "sup-1"}); err == nil {
			ackedSups = append(ackedSups, res.ID)
		}
		var p rein.ToolConfirmationRequestedPayload
		_ = req.DecodePayload(&p)
		if _, err := first.ConfirmTool(ctx, key, sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: true}); err == nil {
			ackedConfirms = append(ackedConfirms, p.ToolUseID)
		}
		waitFor(crashed, base, key, rein.EventRunCompleted)
	}
	wrote := f.Writes()
	first.Close()
	clk.advance(lapse)

	// The restart: a new instance on the same store drives every run to its
	// end, answering confirmations still pending, then takes a new message.
	second := newService(base, "second")
	defer second.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runs, err := base.ListRuns(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, r := range runs {
			if !r.Status.Terminal() {
				open++
			}
		}
		if open == 0 {
			break
		}
		pend, _ := base.ListConfirmations(ctx, key, store.ConfirmationPending)
		for _, c := range pend {
			if _, err := second.ConfirmTool(ctx, key, sessions.ConfirmRequest{ToolUseID: c.ToolUseID, Allow: true}); err == nil {
				ackedConfirms = append(ackedConfirms, c.ToolUseID)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs still not ended after the restart: %+v", runs)
		}
		last, _ := base.LastSeq(ctx, key)
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_ = base.WaitEvents(wctx, key, last)
		cancel()
	}
	after, err := second.SendMessage(ctx, key, sessions.MessageRequest{Text: "after the crash"})
	if err != nil {
		t.Fatalf("the session refuses a new message after recovery: %v", err)
	}
	ackedRuns = append(ackedRuns, after.RunID)
	if _, ok := waitFor(ctx, base, key, rein.EventRunCompleted, after.RunID); !ok {
		t.Fatal("the new run did not end")
	}

	if wrote < n && (len(ackedRuns) != 2 || len(ackedSups) != 1 || len(ackedConfirms) != 1) {
		// Without a crash the scenario must have done everything it tests.
		t.Fatalf("scenario incomplete: runs %v, supplements %v, confirmations %v", ackedRuns, ackedSups, ackedConfirms)
	}
	checkRecovered(t, base, key, ackedRuns, ackedSups, ackedConfirms, count, workspace)
	return wrote
}

// waitFor waits for an event of typ (of run, when given) in the log, until
// ctx ends.
func waitFor(ctx context.Context, st store.Store, key rein.SessionKey, typ rein.EventType, run ...string) (rein.Event, bool) {
	after := int64(0)
	for {
		evs, _, err := st.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return rein.Event{}, false
		}
		for _, e := range evs {
			if e.Type == typ && (len(run) == 0 || e.RunID == run[0]) {
				return e, true
			}
			after = e.Seq
		}
		if err := st.WaitEvents(ctx, key, after); err != nil {
			return rein.Event{}, false
		}
	}
}

func checkRecovered(t *testing.T, st store.Store, key rein.SessionKey, ackedRuns, ackedSups, ackedConfirms []string, count *counter, workspace string) {
	t.Helper()
	ctx := context.Background()
	evs, last, err := st.ReadEvents(ctx, key, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("seq gap: event %d has seq %d", i, e.Seq)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Seq != last {
		t.Fatalf("log ends at %d, last seq %d", len(evs), last)
	}
	runs, err := st.ListRuns(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, r := range runs {
		known[r.ID] = true
		if !r.Status.Terminal() {
			t.Errorf("run %s left %s", r.ID, r.Status)
		}
		completed, lastIdx := 0, -1
		for i, e := range evs {
			if e.RunID != r.ID {
				continue
			}
			lastIdx = i
			if e.Type == rein.EventRunCompleted {
				completed++
			}
		}
		if completed != 1 {
			t.Errorf("run %s has %d session.run_completed", r.ID, completed)
		} else if evs[lastIdx].Type != rein.EventRunCompleted {
			t.Errorf("run %s: %s after its session.run_completed", r.ID, evs[lastIdx].Type)
		}
		if n := countEvents(evs, rein.EventUserMessage, r.ID); n != 1 {
			t.Errorf("run %s has %d user.message", r.ID, n)
		}
		if n := countEvents(evs, rein.EventRunStarted, r.ID); n > 1 {
			t.Errorf("run %s started %d times", r.ID, n)
		}
	}
	for _, id := range ackedRuns {
		if !known[id] {
			t.Errorf("acknowledged run %s is lost", id)
		}
	}
	for _, id := range ackedSups {
		sup, err := st.GetSupplement(ctx, key, id)
		if err != nil {
			t.Errorf("acknowledged supplement %s: %v", id, err)
			continue
		}
		if sup.Status != store.SupplementConsumed {
			t.Errorf("supplement %s still %s after the next run", id, sup.Status)
		}
	}
	// Every supplement is logged once and consumed at most once.
	logged, consumed := map[string]int{}, map[string]int{}
	for _, e := range evs {
		switch e.Type {
		case rein.EventUserSupplement:
			var p rein.SupplementPayload
			_ = e.DecodePayload(&p)
			logged[p.SupplementID]++
		case rein.EventSupplementConsumed:
			var p rein.SupplementConsumedPayload
			_ = e.DecodePayload(&p)
			consumed[p.SupplementID]++
		}
	}
	for id, n := range logged {
		if n != 1 || consumed[id] > 1 {
			t.Errorf("supplement %s logged %d times, consumed %d times", id, n, consumed[id])
		}
	}
	for id := range consumed {
		if logged[id] == 0 {
			t.Errorf("supplement %s consumed but never logged", id)
		}
	}
	for _, id := range ackedConfirms {
		n := 0
		for _, e := range evs {
			if e.Type == rein.EventUserToolConfirmation {
				var p rein.UserToolConfirmationPayload
				_ = e.DecodePayload(&p)
				if p.ToolUseID == id {
					n++
				}
			}
		}
		if n != 1 {
			t.Errorf("confirmation %s logged %d times", id, n)
		}
	}
	// No tool call ran twice.
	count.mu.Lock()
	for id, n := range count.calls {
		if n > 1 {
			t.Errorf("tool call %s ran %d times", id, n)
		}
	}
	count.mu.Unlock()
	notes := 0
	if b, err := os.ReadFile(filepath.Join(workspace, "alice", "ses_crash", builtin.NotesFile)); err == nil {
		notes = strings.Count(string(b), "crash test")
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if uses := countEvents(evs, rein.EventToolUse, "") / 2; notes > uses {
		t.Errorf("%d notes written for %d write_note calls", notes, uses)
	}
	// The saved transcript is valid as it is.
	h, err := st.LoadHistory(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rein.ValidateTranscript(h); err != nil {
		t.Errorf("transcript: %v", err)
	}
	checkStepTexts(t, evs, h)
	checkModelRequests(t, evs, h, runs)
	if t.Failed() {
		for _, e := range evs {
			t.Logf("%3d %-38s run=%s %s", e.Seq, e.Type, e.RunID, e.Payload)
		}
	}
}

// checkStepTexts checks what a reader renders of every step: the deltas
// of a step after its last agent.step_restarted (all of them when it has
// none) concatenate to the text the step saved, so a reader that drops
// what it holds of a restarted step never shows text twice or a cut text.
// The final step's text is also the run's agent.message.
func checkStepTexts(t *testing.T, evs []rein.Event, hist []rein.Message) {
	t.Helper()
	type stepKey struct {
		run  string
		step int
	}
	rendered := map[stepKey]*strings.Builder{}
	for _, e := range evs {
		switch e.Type {
		case rein.EventStepRestarted:
			var p rein.StepRestartedPayload
			_ = e.DecodePayload(&p)
			rendered[stepKey{p.RunID, p.Step}] = &strings.Builder{}
		case rein.EventMessageDelta:
			var p rein.MessageDeltaPayload
			_ = e.DecodePayload(&p)
			k := stepKey{p.RunID, p.Step}
			if rendered[k] == nil {
				rendered[k] = &strings.Builder{}
			}
			rendered[k].WriteString(p.Text)
		}
	}
	saved := map[stepKey]string{}
	for _, m := range hist {
		if m.Role == rein.RoleAssistant && !m.Partial {
			saved[stepKey{m.RunID, m.Step}] = m.Text
		}
	}
	for k, text := range saved {
		got := ""
		if b := rendered[k]; b != nil {
			got = b.String()
		}
		if got != text {
			t.Errorf("run %s step %d: its deltas after its last agent.step_restarted concatenate to %q, want its saved text %q", k.run, k.step, got, text)
		}
	}
	for k := range rendered {
		if _, ok := saved[k]; !ok {
			t.Errorf("run %s step %d streamed deltas but saved no step", k.run, k.step)
		}
	}
	for _, e := range evs {
		if e.Type != rein.EventMessage {
			continue
		}
		var p rein.MessagePayload
		_ = e.DecodePayload(&p)
		last := 0
		for k := range saved {
			if k.run == p.RunID && k.step > last {
				last = k.step
			}
		}
		if last > 0 && saved[stepKey{p.RunID, last}] != p.Text {
			t.Errorf("run %s: agent.message %q is not its last step's text %q", p.RunID, p.Text, saved[stepKey{p.RunID, last}])
		}
	}
}

func countEvents(evs []rein.Event, typ rein.EventType, runID string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ && (runID == "" || e.RunID == runID) {
			n++
		}
	}
	return n
}

// expiryCrash is a store that "crashes" at the first write that expires a
// confirmation: with the write lost, or committed with only its answer
// lost. From then on no write reaches the store, as if the process had
// died. (storetest.Faulty counts writes; the expiry's is told apart here
// by what it does, since the schedule's own looks may write around it.)
type expiryCrash struct {
	store.Store
	afterCommit bool
	mu          sync.Mutex
	crashed     bool
	dead        chan struct{}
}

var errCrashed = rein.Errorf(rein.CodeUnavailable, "test: the process crashed")

func (c *expiryCrash) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashed
}

func (c *expiryCrash) crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.crashed {
		c.crashed = true
		close(c.dead)
	}
}

type expiryTx struct {
	store.Tx
	expiry *bool
}

func (t expiryTx) ExpireConfirmation(id string) (*store.Confirmation, error) {
	*t.expiry = true
	return t.Tx.ExpireConfirmation(id)
}

func (c *expiryCrash) Update(ctx context.Context, key rein.SessionKey, fence store.Fence, fn func(store.Tx) error) error {
	if c.isDead() {
		return errCrashed
	}
	expiry := false
	err := c.Store.Update(ctx, key, fence, func(tx store.Tx) error {
		if err := fn(expiryTx{Tx: tx, expiry: &expiry}); err != nil {
			return err
		}
		if expiry && !c.afterCommit {
			return errCrashed // dies before the commit
		}
		return nil
	})
	if expiry {
		c.crash()
		return errCrashed
	}
	return err
}

func (c *expiryCrash) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	if c.isDead() {
		return nil, errCrashed
	}
	return c.Store.AppendEvents(ctx, key, fence, evs)
}

func (c *expiryCrash) RenewLease(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if c.isDead() {
		return nil, errCrashed
	}
	return c.Store.RenewLease(ctx, l, ttl)
}

// TestCrashWindowsOfExpiry: the store stops at the expiry's one write — with
// the write lost, and with it committed but its answer lost — and a new
// instance on the same store completes it: the confirmation expired once
// (one session.confirmation_expired), the call denied "expired", and the
// parked run gone on to its end.
func TestCrashWindowsOfExpiry(t *testing.T) {
	t.Parallel()
	onClockedBackends(t, func(t *testing.T, open clockedOpener) {
		for _, afterCommit := range []bool{false, true} {
			name := "lost"
			if afterCommit {
				name = "committed"
			}
			t.Run(name, func(t *testing.T) {
				clk := &shiftClock{}
				base := open(t, clk.now)
				crashing := &expiryCrash{Store: base, afterCommit: afterCommit, dead: make(chan struct{})}
				pc := &parkCounter{Observer: sessions.NopObserver{}, ch: make(chan struct{}, 1)}
				ttl := func(c *sessions.Config) { c.ConfirmTTL, c.Clock = time.Hour, clk.now }
				first := expiryService(t, crashing, func(c *sessions.Config) { ttl(c); c.Observer = pc })
				f := &fixture{t: t, st: base, svc: first}
				f.newSession()
				r := f.send("note milk", "")
				select {
				case <-pc.ch:
				case <-time.After(20 * time.Second):
					t.Fatal("the run did not park")
				}
				// Its time comes; the instance's scan (every TTL/3) finds
				// it due and writes the expiry, and the process dies there.
				clk.advance(2 * time.Hour)
				select {
				case <-crashing.dead:
				case <-time.After(20 * time.Second):
					t.Fatal("the expiry was never written")
				}
				first.Close()
				pend, err := base.ListConfirmations(context.Background(), f.key, store.ConfirmationPending)
				if err != nil {
					t.Fatal(err)
				}
				if afterCommit != (len(pend) == 0) {
					t.Fatalf("after the crash, %d confirmations pending (expiry committed: %v)", len(pend), afterCommit)
				}
				f.svc = expiryService(t, base, ttl)
				expiredRun(t, f, r.RunID)
			})
		}
	})
}

// checkModelRequests checks the agent.model_request records: every saved
// step has exactly one that ended ok — the write that saved the step
// logged it, so a request cut by the crash has none and its redo has its
// own — every ok one belongs to a saved step, and a run's usage is the sum
// of its requests' (added in the same writes).
func checkModelRequests(t *testing.T, evs []rein.Event, hist []rein.Message, runs []*store.RunRecord) {
	t.Helper()
	type stepKey struct {
		run  string
		step int
	}
	ok := map[stepKey]int{}
	sums := map[string]rein.Usage{}
	for _, e := range evs {
		if e.Type != rein.EventModelRequest {
			continue
		}
		var p rein.ModelRequestPayload
		if err := e.DecodePayload(&p); err != nil {
			t.Fatal(err)
		}
		if p.RunID != e.RunID || p.Model == "" || p.DurationMS < 0 {
			t.Errorf("agent.model_request %s", e.Payload)
		}
		if p.Outcome == rein.RequestOK {
			ok[stepKey{p.RunID, p.Step}]++
		}
		sums[p.RunID] = sums[p.RunID].Add(p.Usage)
	}
	saved := map[stepKey]bool{}
	for _, m := range hist {
		if m.Role == rein.RoleAssistant && !m.Partial {
			saved[stepKey{m.RunID, m.Step}] = true
		}
	}
	for k := range saved {
		if ok[k] != 1 {
			t.Errorf("run %s step %d: %d agent.model_request with outcome ok, want 1", k.run, k.step, ok[k])
		}
	}
	for k := range ok {
		if !saved[k] {
			t.Errorf("run %s step %d: an agent.model_request ok without a saved step", k.run, k.step)
		}
	}
	for _, r := range runs {
		if r.Usage.InputTokens != sums[r.ID].InputTokens || r.Usage.OutputTokens != sums[r.ID].OutputTokens {
			t.Errorf("run %s: usage %+v, its requests sum to %+v", r.ID, r.Usage, sums[r.ID])
		}
	}
}
