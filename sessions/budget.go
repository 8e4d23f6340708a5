// Usage and budgets (docs/api.md "Budgets and usage"): what a session's
// runs spent, the bounds a session or a message sets, and the checks that
// hold them — a cost bound needs a price, and a session over its budget
// admits no new run.

package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/store"
)

// budgetExhausted begins the message of the conflict a session over its
// budget answers a new message with.
const budgetExhausted = "budget exhausted"

// CheckBudget validates a budget given by a client: each bound it sets is
// positive and finite, and it sets one at least. param names it in the
// error (e.g. "budget", "events[0].payload.budget").
func CheckBudget(b *rein.Budget, param string) error {
	if b == nil {
		return nil
	}
	if b.Tokens < 0 {
		return rein.InvalidArgument(param+".tokens", "%s.tokens must be a whole number > 0", param)
	}
	if b.CostUSD < 0 || math.IsNaN(b.CostUSD) || math.IsInf(b.CostUSD, 0) {
		return rein.InvalidArgument(param+".cost_usd", "%s.cost_usd must be a number > 0", param)
	}
	if b.IsZero() {
		return rein.InvalidArgument(param, "%s must set tokens or cost_usd (null: no budget)", param)
	}
	return nil
}

// checkPriced refuses a cost bound for an agent whose model has no price:
// its cost would stay null, and the bound could never be reached.
func (s *Service) checkPriced(b *rein.Budget, agentName, param string) error {
	if b == nil || b.CostUSD == 0 {
		return nil
	}
	if agentName == "" {
		agentName = DefaultAgent
	}
	name := ""
	if ag := s.cfg.Agents[agentName]; ag != nil {
		name = ag.Model
		if name == "" && ag.Loop != nil && ag.Loop.Model() != nil {
			name = ag.Loop.Model().Name()
		}
	}
	if name != "" && s.cfg.Prices != nil {
		if _, ok := s.cfg.Prices(name); ok {
			return nil
		}
	}
	what := "the agent's model"
	if name != "" {
		what = fmt.Sprintf("model %q (agent %q)", name, agentName)
	}
	return rein.InvalidArgument(param+".cost_usd", "%s has no price: give it one in the configuration's models map, or bound tokens instead", what)
}

// sessionUsage sums the usage of runs (a session's runs, or all but one).
func sessionUsage(runs []*store.RunRecord, except string) rein.Usage {
	var u rein.Usage
	for _, r := range runs {
		if r.ID != except {
			u = u.Add(r.Usage)
		}
	}
	return u
}

// refuseOverBudget is the admission's budget check, inside its write: a
// session whose runs have together reached its budget admits no new run.
// It reads the runs only when the session has a budget.
func refuseOverBudget(tx store.Tx) error {
	b, err := tx.Budget()
	if err != nil || b == nil {
		return err
	}
	runs, err := tx.Runs()
	if err != nil {
		return err
	}
	if b.Reached(sessionUsage(runs, "")) {
		return rein.Errorf(rein.CodeConflict, "%s: the session's runs have spent its budget; raise it (PATCH the session's budget) to send more", budgetExhausted)
	}
	return nil
}

// bindBudget gives a run's Turn its prices, its budgets and what was spent
// before it: the run's own saved usage (a resumed run's) and, under a
// session budget, the session's other runs'.
func (s *Service) bindBudget(ctx context.Context, t *agent.Turn, sess *store.Session, rec *store.RunRecord) error {
	t.Price = s.cfg.Prices
	t.Spent = rec.Usage
	if rec.Budget != nil {
		t.Budget = *rec.Budget
	}
	if sess.Budget == nil {
		return nil
	}
	t.SessionBudget = *sess.Budget
	runs, err := s.st.ListRuns(ctx, sess.Key())
	if err != nil {
		return err
	}
	t.SessionSpent = sessionUsage(runs, rec.ID)
	return nil
}

// requestUsage sums the usage of the agent.model_request events among evs
// (a run's closing events), nil when there is none.
func requestUsage(evs []rein.Event) *rein.Usage {
	var (
		u     rein.Usage
		found bool
	)
	for _, e := range evs {
		if e.Type != rein.EventModelRequest {
			continue
		}
		var p rein.ModelRequestPayload
		if json.Unmarshal(e.Payload, &p) != nil {
			continue
		}
		u, found = u.Add(p.Usage), true
	}
	if !found {
		return nil
	}
	return &u
}
