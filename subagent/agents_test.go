package subagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/subagent"
	"github.com/reinhq/rein/tool"
)

// agentsWorld is a world with two configured agents, "default" and
// "researcher" (its own system prompt), whose models are named, and a
// model opener that knows one more model, "scripted:other".
func agentsWorld(t *testing.T) *world {
	t.Helper()
	return newWorld(t, openMemory(t), subagent.Options{Agents: []string{"default", "researcher"}}, nil, func(c *sessions.Config) {
		c.Agents = map[string]*sessions.Agent{
			"default":    {Model: "scripted:subagent"},
			"researcher": {Model: "scripted:subagent", System: "You research; you never write."},
		}
		c.Models = func(name string) (model.Model, error) {
			if name != "scripted:other" {
				return nil, errors.New("no such model")
			}
			return scripted.Open("testdata/other-model.yaml")
		}
	})
}

// A model names a configured agent as its child's (spawn_agent's "agent"):
// the child runs that agent (its system prompt), and its descriptor says
// so, with the agent's model.
func TestSpawnNamesConfiguredAgent(t *testing.T) {
	w := agentsWorld(t)
	ctx := context.Background()
	root := w.root("alice")
	rr := w.send(root, "delegate research")
	defer dump(t, w, root)
	if p := w.completed(root, rr.RunID); p.Status != rein.StatusCompleted {
		t.Fatalf("root run %+v", p)
	}
	want := `delegated: {"output":"system=[You research; you never write.]","reason":"stop"}`
	if got := w.reply(root, rr.RunID); got != want {
		t.Fatalf("root reply %q, want %q", got, want)
	}
	kids, err := w.m.List(ctx, root)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children %+v %v", kids, err)
	}
	info, err := w.svc.GetSession(ctx, key("alice", kids[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	if info.Agent != "researcher" || info.Subagent == nil || info.Subagent.Agent != "researcher" || info.Subagent.Model != "scripted:subagent" {
		t.Fatalf("child session agent %q descriptor %+v", info.Agent, info.Subagent)
	}

	// An agent no one configured: the input is refused by its schema, an
	// error result naming the agents there are, and no child is made.
	rr = w.send(root, "delegate nowhere")
	w.completed(root, rr.RunID)
	calls := toolCalls(t, w.all(root), rr.RunID)
	if len(calls) != 1 || !calls[0].isErr || !strings.Contains(calls[0].output, "'default', 'researcher'") {
		t.Fatalf("spawn_agent with an unknown agent: %+v", calls)
	}
	if kids, _ := w.m.List(ctx, root); len(kids) != 1 {
		t.Fatalf("%d children after a refused spawn", len(kids))
	}
	// Past the schema (a caller of the Go API), it is invalid_argument.
	_, err = w.m.Start(ctx, root, subagent.StartRequest{Prompt: "x", Agent: "nobody"})
	if rein.CodeOf(err) != rein.CodeInvalidArgument || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("Start with an unknown agent: %v", err)
	}
}

// spawn_agent offers "agent" only when there is a choice, naming the
// agents.
func TestSpawnSchemaListsAgents(t *testing.T) {
	for _, tc := range []struct {
		agents []string
		want   bool
	}{{nil, false}, {[]string{"default"}, false}, {[]string{"default", "researcher"}, true}} {
		m := subagent.New(subagent.Options{Agents: tc.agents})
		spec := subagent.Tools(m)[0].Spec()
		has := strings.Contains(string(spec.InputSchema), `"agent"`)
		if has != tc.want || tc.want && !strings.Contains(string(spec.InputSchema), `"enum":["default","researcher"]`) {
			t.Errorf("agents %v: schema %s", tc.agents, spec.InputSchema)
		}
		// SetAgents after the tools were made changes what they offer.
		m.SetAgents([]string{"default", "writer"})
		if s := subagent.Tools(m)[0].Spec(); !strings.Contains(string(s.InputSchema), `"enum":["default","writer"]`) {
			t.Errorf("after SetAgents: schema %s", s.InputSchema)
		}
	}
}

// A child whose request names a model runs with it, from its first
// activation to a followup that starts its next one; a
// model the service cannot open fails the start and creates nothing.
func TestChildRunsItsDescriptorsModel(t *testing.T) {
	w := agentsWorld(t)
	ctx := context.Background()
	root := w.root("alice")
	s := w.startChild(root, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "first", Model: "scripted:other"}})
	child := key("alice", s.ChildID)
	w.completed(child, s.TaskID)
	if got := w.reply(child, s.TaskID); got != "other model: first" {
		t.Fatalf("first activation reply %q", got)
	}
	info, err := w.svc.GetSession(ctx, child)
	if err != nil || info.Subagent == nil || info.Subagent.Model != "scripted:other" {
		t.Fatalf("descriptor %+v %v", info.Subagent, err)
	}
	w.settled(root, s.TaskID)
	r := w.followup(root, s.ChildID, "second")
	w.completed(child, r.TaskID)
	if got := w.reply(child, r.TaskID); got != "other model: second" {
		t.Fatalf("followup reply %q", got)
	}

	before, err := w.svc.Children().List(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.m.StartContinuable(ctx, root, subagent.ContinuableSpec{StartRequest: subagent.StartRequest{Prompt: "x", Model: "openai:nope"}})
	if rein.CodeOf(err) != rein.CodeInvalidArgument || !strings.Contains(err.Error(), "openai:nope") {
		t.Fatalf("start with an unknown model: %v, want invalid_argument naming it", err)
	}
	if after, _ := w.svc.Children().List(ctx, root); len(after) != len(before) {
		t.Fatalf("a refused start created a child: %d → %d", len(before), len(after))
	}
}

// SpawnTool is spawn_agent for an agent that may delegate to some agents
// only: its schema lists those, a call naming another is refused as
// unauthorized and starts nothing, and one naming an allowed agent runs
// it.
func TestSpawnToolLimitsTheAgents(t *testing.T) {
	w := agentsWorld(t)
	ctx := context.Background()
	root := w.root("alice")
	defer dump(t, w, root)

	own := subagent.SpawnTool(w.m, []string{"default"})
	if strings.Contains(string(own.Spec().InputSchema), `"agent"`) {
		t.Fatalf("spawn_agent of an agent that delegates to none other offers a choice: %s", own.Spec().InputSchema)
	}
	res, err := own.Call(ctx, tool.Call{Session: root, Input: json.RawMessage(`{"description": "r", "prompt": "show system", "agent": "researcher"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal([]byte(res.Output), &out) != nil || !res.IsError || out.Error.Code != subagent.CodeUnauthorized || !strings.Contains(out.Error.Message, `"researcher"`) {
		t.Fatalf("a child of a forbidden agent: %+v", res)
	}
	if kids, err := w.m.List(ctx, root); err != nil || len(kids) != 0 {
		t.Fatalf("children after the refusal: %+v %v", kids, err)
	}

	both := subagent.SpawnTool(w.m, []string{"default", "researcher"})
	var schema struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(both.Spec().InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if got := schema.Properties["agent"].Enum; !slices.Equal(got, []string{"default", "researcher"}) {
		t.Fatalf("spawn_agent offers %q, want [default researcher]", got)
	}
	res, err = both.Call(ctx, tool.Call{Session: root, Input: json.RawMessage(`{"description": "r", "prompt": "show system", "agent": "researcher"}`)})
	if err != nil || res.IsError {
		t.Fatalf("a child of an allowed agent: %+v %v", res, err)
	}
	if want := `{"output":"system=[You research; you never write.]","reason":"stop"}`; res.Output != want {
		t.Fatalf("the child's result %s, want %s", res.Output, want)
	}
}
