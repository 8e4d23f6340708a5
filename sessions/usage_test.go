package sessions_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// The usage tests' model and its price: $1 per million input tokens, $2
// per million output tokens.
const usageModel = "scripted:testdata/usage.yaml"

var usagePrice = model.Price{InputPerMTok: 1, OutputPerMTok: 2}

func TestUsageRecorded(t *testing.T) {
	t.Parallel()
	onBackends(t, testUsageRecorded)
}

func TestMessageBudget(t *testing.T) {
	t.Parallel()
	onBackends(t, testMessageBudget)
}

func TestSessionBudget(t *testing.T) {
	t.Parallel()
	onBackends(t, testSessionBudget)
}

func TestCostBudgetNeedsPrice(t *testing.T) {
	t.Parallel()
	onBackends(t, testCostBudgetNeedsPrice)
}

// usageFixture is a service on the usage model; priced gives the model
// its price.
func usageFixture(t *testing.T, st store.Store, priced bool) *fixture {
	t.Helper()
	svc, err := reintest.Service("testdata/usage.yaml", st, func(c *sessions.Config) {
		c.Workspace, c.LeaseTTL = t.TempDir(), liveLease
		c.Agents = map[string]*sessions.Agent{sessions.DefaultAgent: {Model: usageModel}}
		if priced {
			c.Prices = func(name string) (model.Price, bool) { return usagePrice, name == usageModel }
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &fixture{t: t, st: st, svc: svc}
}

func (f *fixture) sendReq(req sessions.MessageRequest) sessions.MessageResult {
	f.t.Helper()
	res, err := f.svc.SendMessage(context.Background(), f.key, req)
	if err != nil {
		f.t.Fatalf("send %q: %v", req.Text, err)
	}
	return res
}

// modelRequests returns the run's agent.model_request payloads, in order.
func (f *fixture) modelRequests(runID string) []rein.ModelRequestPayload {
	f.t.Helper()
	var out []rein.ModelRequestPayload
	for _, e := range f.all() {
		if e.Type == rein.EventModelRequest && e.RunID == runID {
			var p rein.ModelRequestPayload
			if err := e.DecodePayload(&p); err != nil {
				f.t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func costOf(u rein.Usage) float64 {
	if u.CostUSD == nil {
		return math.NaN()
	}
	return *u.CostUSD
}

func testUsageRecorded(t *testing.T, open opener) {
	ctx := context.Background()
	for _, priced := range []bool{false, true} {
		f := usageFixture(t, open(t), priced)
		f.newSession()
		res := f.send("hello", "")
		if p := f.completed(res.RunID); p.Reason != rein.ReasonStop {
			t.Fatalf("%+v", p)
		}
		reqs := f.modelRequests(res.RunID)
		if len(reqs) != 1 {
			t.Fatalf("priced=%v: %d agent.model_request, want 1: %+v", priced, len(reqs), reqs)
		}
		r := reqs[0]
		if r.Step != 1 || r.Model != usageModel || r.Outcome != rein.RequestOK || r.DurationMS < 0 ||
			r.Usage.InputTokens != 100 || r.Usage.OutputTokens != 20 {
			t.Fatalf("priced=%v: %+v", priced, r)
		}
		want := (100*1 + 20*2) / 1e6
		if priced != (r.Usage.CostUSD != nil) || (priced && !near(*r.Usage.CostUSD, want)) {
			t.Fatalf("priced=%v: cost %v, want %v", priced, r.Usage.CostUSD, want)
		}
		// The request is logged before the reply, in the run's end write.
		types := f.runEvents(res.RunID)
		if n := len(types); n < 3 || types[n-3] != rein.EventModelRequest || types[n-2] != rein.EventMessage {
			t.Fatalf("event order %v", types)
		}

		// A run with tool calls: one request per step, each logged with
		// its step, the run's usage their sum.
		tools := f.sendReq(sessions.MessageRequest{Text: "tools", Budget: &rein.Budget{Tokens: 300}})
		if p := f.completed(tools.RunID); p.Reason != rein.ReasonBudget {
			t.Fatalf("%+v", p)
		}
		reqs = f.modelRequests(tools.RunID)
		if len(reqs) != 3 {
			t.Fatalf("%d requests, want 3 (330 tokens reach 300 at the third): %+v", len(reqs), reqs)
		}
		for i, r := range reqs {
			if r.Step != i+1 || r.Usage.Tokens() != 110 {
				t.Fatalf("request %d: %+v", i, r)
			}
		}
		rec, err := f.svc.GetRun(ctx, f.key, tools.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Usage.InputTokens != 300 || rec.Usage.OutputTokens != 30 || priced != (rec.Usage.CostUSD != nil) ||
			(priced && !near(*rec.Usage.CostUSD, 3*(100+20)/1e6)) {
			t.Fatalf("run usage %+v (cost %v)", rec.Usage, costOf(rec.Usage))
		}
		info, err := f.svc.GetSession(ctx, f.key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Usage.InputTokens != 400 || info.Usage.OutputTokens != 50 || priced != (info.Usage.CostUSD != nil) ||
			(priced && !near(*info.Usage.CostUSD, (400+100)/1e6)) {
			t.Fatalf("session usage %+v (cost %v)", info.Usage, costOf(info.Usage))
		}
	}
}

// testMessageBudget: a message's budget ends its run once reached, with
// the last step's text as the reply and that step's calls answered as for
// a stop; the next message, without a budget, is not bounded by it.
func testMessageBudget(t *testing.T, open opener) {
	ctx := context.Background()
	f := usageFixture(t, open(t), true)
	f.newSession()
	res := f.sendReq(sessions.MessageRequest{Text: "tools", Budget: &rein.Budget{Tokens: 200}})
	if p := f.completed(res.RunID); p.Status != rein.StatusCompleted || p.Reason != rein.ReasonBudget {
		t.Fatalf("%+v", p)
	}
	if n := len(f.modelRequests(res.RunID)); n != 2 {
		t.Fatalf("%d requests, want 2 (220 tokens reach 200 at the second)", n)
	}
	var reply rein.MessagePayload
	var uses, results []string
	for _, e := range f.all() {
		if e.RunID != res.RunID {
			continue
		}
		switch e.Type {
		case rein.EventMessage:
			_ = e.DecodePayload(&reply)
		case rein.EventToolUse:
			var p rein.ToolUsePayload
			_ = e.DecodePayload(&p)
			uses = append(uses, p.ToolUseID)
		case rein.EventToolResult:
			var p rein.ToolResultPayload
			_ = e.DecodePayload(&p)
			results = append(results, p.ToolUseID)
			if len(results) == 2 && (!p.IsError || p.Output != rein.InterruptedToolOutput) {
				t.Fatalf("the second step's call: %+v, want the stop's synthetic result", p)
			}
		}
	}
	if reply.Reason != rein.ReasonBudget || reply.Text != "step 2" {
		t.Fatalf("reply %+v", reply)
	}
	if len(uses) != 2 || len(results) != 2 || uses[1] != results[1] {
		t.Fatalf("tool uses %v, results %v", uses, results)
	}
	h, err := f.st.LoadHistory(ctx, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rein.ValidateTranscript(h); err != nil {
		t.Fatal(err)
	}
	// A cost bound, priced: $0.00011 per step reaches $0.0003 at the third.
	res = f.sendReq(sessions.MessageRequest{Text: "tools", Budget: &rein.Budget{CostUSD: 0.0003}})
	if p := f.completed(res.RunID); p.Reason != rein.ReasonBudget {
		t.Fatalf("%+v", p)
	}
	if n := len(f.modelRequests(res.RunID)); n != 3 {
		t.Fatalf("%d requests under the cost budget, want 3", n)
	}
	rec, err := f.svc.GetRun(ctx, f.key, res.RunID)
	if err != nil || rec.Budget == nil || rec.Budget.CostUSD != 0.0003 {
		t.Fatalf("the run's budget %+v: %v", rec, err)
	}
}

// testSessionBudget: a session's budget counts every run; a run that
// reaches it ends with reason budget, and the session then refuses new
// messages with a conflict until the budget is raised or cleared.
func testSessionBudget(t *testing.T, open opener) {
	ctx := context.Background()
	f := usageFixture(t, open(t), false)
	sess, err := f.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Budget: &rein.Budget{Tokens: 350}})
	if err != nil {
		t.Fatal(err)
	}
	f.key = sess.Key()
	// 120 tokens: under the bound.
	first := f.send("hello", "")
	if p := f.completed(first.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	// 120 + 110 + 110 = 340, then 450: the bound is reached after the
	// second step of this run, whose own usage is far from it.
	second := f.send("tools", "")
	if p := f.completed(second.RunID); p.Reason != rein.ReasonBudget {
		t.Fatalf("%+v", p)
	}
	if n := len(f.modelRequests(second.RunID)); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
	_, err = f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "more"})
	if rein.CodeOf(err) != rein.CodeConflict || !errors.Is(err, rein.ErrConflict) {
		t.Fatalf("a message to a session over its budget: %v, want conflict", err)
	}
	info, err := f.svc.GetSession(ctx, f.key)
	if err != nil || info.Budget == nil || info.Budget.Tokens != 350 || info.Usage.Tokens() != 120+3*110 {
		t.Fatalf("%+v %v", info, err)
	}
	// Raised: the session takes messages again.
	if _, err := f.svc.UpdateSession(ctx, f.key, sessions.UpdateSessionRequest{SetBudget: true, Budget: &rein.Budget{Tokens: 1000}}); err != nil {
		t.Fatal(err)
	}
	third := f.send("again", "")
	if p := f.completed(third.RunID); p.Reason != rein.ReasonStop {
		t.Fatalf("%+v", p)
	}
	// Lowered below what was spent, then cleared.
	if _, err := f.svc.UpdateSession(ctx, f.key, sessions.UpdateSessionRequest{SetBudget: true, Budget: &rein.Budget{Tokens: 10}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "more"}); rein.CodeOf(err) != rein.CodeConflict {
		t.Fatalf("%v, want conflict", err)
	}
	info, err = f.svc.UpdateSession(ctx, f.key, sessions.UpdateSessionRequest{SetBudget: true})
	if err != nil || info.Budget != nil {
		t.Fatalf("cleared: %+v %v", info, err)
	}
	f.completed(f.send("free", "").RunID)
}

func testCostBudgetNeedsPrice(t *testing.T, open opener) {
	ctx := context.Background()
	f := usageFixture(t, open(t), false)
	cost := &rein.Budget{CostUSD: 1}
	_, err := f.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Budget: cost})
	if re := asError(err); re == nil || re.Code != rein.CodeInvalidArgument || re.Param != "budget.cost_usd" {
		t.Fatalf("create with a cost budget, no price: %v", err)
	}
	f.newSession()
	if _, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "hi", Budget: cost}); asError(err) == nil || asError(err).Param != "budget.cost_usd" {
		t.Fatalf("message with a cost budget, no price: %v", err)
	}
	if _, err := f.svc.UpdateSession(ctx, f.key, sessions.UpdateSessionRequest{SetBudget: true, Budget: cost}); asError(err) == nil || asError(err).Param != "budget.cost_usd" {
		t.Fatalf("PATCH with a cost budget, no price: %v", err)
	}
	for _, bad := range []struct {
		b     rein.Budget
		param string
	}{{rein.Budget{Tokens: -1}, "budget.tokens"}, {rein.Budget{CostUSD: -1}, "budget.cost_usd"}, {rein.Budget{}, "budget"}} {
		if _, err := f.svc.SendMessage(ctx, f.key, sessions.MessageRequest{Text: "hi", Budget: &bad.b}); asError(err) == nil || asError(err).Param != bad.param {
			t.Fatalf("budget %+v: %v, want invalid_argument %s", bad.b, err, bad.param)
		}
	}
	// Nothing was admitted.
	if runs, err := f.svc.ListRuns(ctx, f.key); err != nil || len(runs) != 0 {
		t.Fatalf("%d runs, %v", len(runs), err)
	}
	// A tokens budget needs no price.
	f.completed(f.sendReq(sessions.MessageRequest{Text: "hi", Budget: &rein.Budget{Tokens: 5}}).RunID)
	// Priced, a cost budget is taken.
	p := usageFixture(t, open(t), true)
	if _, err := p.svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{Budget: cost}); err != nil {
		t.Fatal(err)
	}
}

func asError(err error) *rein.Error {
	var re *rein.Error
	if errors.As(err, &re) && re.Code == rein.CodeInvalidArgument {
		return re
	}
	return nil
}
