package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/tool"
)

// The model-facing tools (docs/api.md).
const (
	ToolSpawn     = "spawn_agent"
	ToolSend      = "send_message"
	ToolList      = "list_agents"
	ToolInterrupt = "interrupt_agent"
)

// Tools returns the model-facing tools over m: spawn_agent, send_message,
// list_agents and interrupt_agent. Their results reach the model as JSON
// text; a failed call is an error tool result whose output is
// {"error": {"code": ..., "message": ...}}, never a crash.
func Tools(m *Manager) []tool.Tool {
	return []tool.Tool{spawnTool{m: m}, sendTool{m}, listTool{m}, interruptTool{m}}
}

// spawnTool is spawn_agent. With only nil, it offers the Manager's
// configured agents (Options.Agents, SetAgents); made by SpawnTool, it
// offers only, and accepts only, the agents in only.
type spawnTool struct {
	m    *Manager
	only []string
	spec *tool.Spec
}

// SpawnTool is spawn_agent for the sessions of one agent that may give a
// child only the agents named (its own among them, first): the tool's
// schema lists only those, and a call naming another is refused
// (unauthorized) without starting anything. Offer it in place of the
// spawn_agent of Tools, whose choice is every configured agent.
func SpawnTool(m *Manager, agents []string) tool.Tool {
	sp := spawnSpec(agents)
	return spawnTool{m: m, only: slices.Clone(agents), spec: &sp}
}

func (t spawnTool) Spec() tool.Spec {
	if t.spec != nil {
		return *t.spec
	}
	return *t.m.spawnSpec.Load()
}

// spawnSpec is spawn_agent's spec; with more than one configured agent,
// its input lets the model name the child's ("agent", one of them).
func spawnSpec(agents []string) tool.Spec {
	props := map[string]any{
		"description": map[string]any{"type": "string", "description": "a short label for the task"},
		"prompt":      map[string]any{"type": "string", "minLength": 1, "description": "what the subagent should do"},
		"background":  map[string]any{"type": "boolean", "description": "start a continuable subagent and return at once"},
		"subagent_id": map[string]any{"type": "string", "minLength": 1, "description": "the id to give a background subagent"},
	}
	desc := "Delegate a task to a subagent. In the foreground (the default) it waits and returns the subagent's output; with background: true it returns at once with the subagent's id, which send_message can continue later."
	if len(agents) > 1 {
		props["agent"] = map[string]any{"type": "string", "enum": agents,
			"description": "the configured agent the subagent runs (default: this session's)"}
		desc += " The subagent runs this session's agent unless \"agent\" names another: " + strings.Join(agents, ", ") + "."
	}
	schema, _ := json.Marshal(map[string]any{"type": "object", "additionalProperties": false,
		"required": []string{"description", "prompt"}, "properties": props})
	return tool.Spec{Name: ToolSpawn, Description: desc, InputSchema: schema}
}

func (t spawnTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		Description string `json:"description"`
		Prompt      string `json:"prompt"`
		Background  bool   `json:"background"`
		SubagentID  string `json:"subagent_id"`
		Agent       string `json:"agent"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return fail(err), nil
	}
	if t.only != nil && in.Agent != "" && !slices.Contains(t.only, in.Agent) {
		// The schema's enum already says so; this holds whatever the
		// registry checks.
		return fail(errorf(CodeUnauthorized, "this session's agent may not delegate to the agent %q (it may: %s)", in.Agent, strings.Join(t.only, ", "))), nil
	}
	req := StartRequest{Prompt: in.Prompt, Label: in.Description, Agent: in.Agent}
	if in.Background {
		s, err := t.m.StartContinuable(ctx, c.Session, ContinuableSpec{StartRequest: req, ChildID: in.SubagentID})
		if err != nil {
			return fail(err), nil
		}
		return ok(map[string]any{"subagent_id": s.ChildID, "task_id": s.TaskID, "message_id": s.MessageID}), nil
	}
	if in.SubagentID != "" {
		return fail(rein.InvalidArgument("subagent_id", "subagent_id names a background (continuable) subagent; a foreground one is not kept")), nil
	}
	r, err := t.m.Start(ctx, c.Session, req)
	if err != nil {
		return fail(err), nil
	}
	return ok(map[string]any{"output": r.Output, "reason": r.Reason}), nil
}

type sendTool struct{ m *Manager }

func (sendTool) Spec() tool.Spec {
	return tool.Spec{
		Name:        ToolSend,
		Description: "Send a message to a background subagent of this session: it steers the subagent's running task, or starts a new one that continues its conversation.",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["subagent_id","message"],
"properties":{"subagent_id":{"type":"string","minLength":1},"message":{"type":"string","minLength":1}}}`),
	}
}

func (t sendTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		SubagentID string `json:"subagent_id"`
		Message    string `json:"message"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return fail(err), nil
	}
	r, err := t.m.Followup(ctx, c.Session, in.SubagentID, in.Message, FollowupOptions{Source: "parent"})
	if err != nil {
		return fail(err), nil
	}
	return ok(map[string]any{"message_id": r.MessageID, "route": r.Route, "task_id": r.TaskID}), nil
}

type listTool struct{ m *Manager }

func (listTool) Spec() tool.Spec {
	return tool.Spec{
		Name:        ToolList,
		Description: "List this session's subagents and whether each is running.",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{}}`),
	}
}

func (t listTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	kids, err := t.m.List(ctx, c.Session)
	if err != nil {
		return fail(err), nil
	}
	agents := make([]map[string]any, 0, len(kids))
	for _, k := range kids {
		agents = append(agents, map[string]any{"subagent_id": k.ID, "label": k.Label, "state": k.State, "parent_session_id": k.ParentSessionID})
	}
	return ok(map[string]any{"agents": agents}), nil
}

type interruptTool struct{ m *Manager }

func (interruptTool) Spec() tool.Spec {
	return tool.Spec{
		Name:        ToolInterrupt,
		Description: "Stop the running task of a subagent of this session.",
		InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["subagent_id"],
"properties":{"subagent_id":{"type":"string","minLength":1}}}`),
	}
}

func (t interruptTool) Call(ctx context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		SubagentID string `json:"subagent_id"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return fail(err), nil
	}
	accepted, err := t.m.Interrupt(ctx, c.Session, in.SubagentID)
	if err != nil {
		return fail(err), nil
	}
	return ok(map[string]any{"accepted": accepted}), nil
}

func ok(v any) tool.Result {
	b, _ := json.Marshal(v)
	return tool.Result{Output: string(b)}
}

// fail renders an error as the JSON the model reads.
func fail(err error) tool.Result {
	code, msg := "internal", err.Error()
	var se *Error
	var re *rein.Error
	switch {
	case errors.As(err, &se):
		code, msg = se.Code, se.Message
	case errors.As(err, &re) && re.Code == rein.CodeUnavailable:
		code, msg = CodeDraining, re.Message
	case errors.As(err, &re):
		code, msg = string(re.Code), re.Message
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg}})
	return tool.Result{Output: string(b), IsError: true}
}
