package rein

import "fmt"

// ValidateTranscript checks docs/api.md "Transcript validity": every assistant
// tool call is answered by exactly one tool result before the next user or
// assistant message, no tool result answers an unknown call, and a partial
// assistant message never carries tool calls. Every provider can accept a
// transcript that passes.
func ValidateTranscript(msgs []Message) error {
	// open holds the calls of the latest assistant message and whether each
	// is answered; a slice, since a step rarely has more than a few calls.
	type call struct {
		id       string
		answered bool
	}
	var open []call
	pending := 0
	for i, m := range msgs {
		switch m.Role {
		case RoleAssistant:
			if pending > 0 {
				return fmt.Errorf("message %d: assistant message while %d tool call(s) are unanswered", i, pending)
			}
			if m.Partial && len(m.ToolCalls) > 0 {
				return fmt.Errorf("message %d: partial assistant message carries tool calls", i)
			}
			open = open[:0]
			for _, c := range m.ToolCalls {
				if c.ID == "" {
					return fmt.Errorf("message %d: tool call without id", i)
				}
				for _, o := range open {
					if o.id == c.ID {
						return fmt.Errorf("message %d: duplicate tool call id %q", i, c.ID)
					}
				}
				open = append(open, call{id: c.ID})
			}
			pending = len(m.ToolCalls)
		case RoleTool:
			j := -1
			for k, o := range open {
				if o.id == m.ToolCallID {
					j = k
					break
				}
			}
			if j < 0 {
				return fmt.Errorf("message %d: tool result for unknown call %q", i, m.ToolCallID)
			}
			if open[j].answered {
				return fmt.Errorf("message %d: second tool result for call %q", i, m.ToolCallID)
			}
			open[j].answered = true
			pending--
		case RoleUser:
			if pending > 0 {
				return fmt.Errorf("message %d: user message while %d tool call(s) are unanswered", i, pending)
			}
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	if pending > 0 {
		return fmt.Errorf("transcript ends with %d unanswered tool call(s)", pending)
	}
	return nil
}

// InterruptedToolOutput is the output of the synthetic error result that
// answers a tool call cut short by a stop.
const InterruptedToolOutput = "tool call did not complete: the run was stopped"

// RepairTranscript returns msgs made valid: a tool call left unanswered
// (for instance by a process that died mid-step) gets a synthetic error
// result right after the results it does have, and results for unknown calls
// are dropped. A valid transcript is returned unchanged.
func RepairTranscript(msgs []Message) []Message {
	if ValidateTranscript(msgs) == nil {
		return msgs
	}
	out := make([]Message, 0, len(msgs)+2)
	var open []ToolCall
	answered := map[string]bool{}
	flush := func() {
		for _, c := range open {
			if !answered[c.ID] {
				out = append(out, Message{Role: RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: InterruptedToolOutput, IsError: true})
			}
		}
		open, answered = nil, map[string]bool{}
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleTool:
			known := false
			for _, c := range open {
				if c.ID == m.ToolCallID {
					known = true
				}
			}
			if !known || answered[m.ToolCallID] {
				continue
			}
			answered[m.ToolCallID] = true
			out = append(out, m)
		default:
			flush()
			if m.Role == RoleAssistant && m.Partial && len(m.ToolCalls) > 0 {
				m.ToolCalls = nil
			}
			out = append(out, m)
			if m.Role == RoleAssistant {
				seen := map[string]bool{}
				for _, c := range m.ToolCalls {
					if !seen[c.ID] {
						seen[c.ID] = true
						open = append(open, c)
					}
				}
			}
		}
	}
	flush()
	return out
}

// InDoubtToolOutput is the output of the error result that answers a tool
// call that was executing when its instance was lost (docs/api.md): it may or
// may not have taken effect, and Rein never runs it again.
const InDoubtToolOutput = "in doubt: the call was executing when its instance was lost; it may or may not have taken effect, and it was not run again"

// OrderToolResults returns msgs with the tool results that follow each
// assistant message put in the order of its tool calls. Results are saved
// as each call finishes, in any order; every model request sees them in
// the model's order. Results for unknown calls keep their place after the
// known ones. A transcript already in order is returned unchanged.
func OrderToolResults(msgs []Message) []Message {
	var out []Message
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role != RoleAssistant || len(m.ToolCalls) < 2 {
			if out != nil {
				out = append(out, m)
			}
			continue
		}
		j := i + 1
		for j < len(msgs) && msgs[j].Role == RoleTool {
			j++
		}
		run := msgs[i+1 : j]
		if inCallOrder(m.ToolCalls, run) {
			if out != nil {
				out = append(out, msgs[i:j]...)
			}
			i = j - 1
			continue
		}
		if out == nil {
			out = make([]Message, 0, len(msgs))
			out = append(out, msgs[:i]...)
		}
		out = append(out, m)
		used := make([]bool, len(run))
		for _, c := range m.ToolCalls {
			for k, r := range run {
				if !used[k] && r.ToolCallID == c.ID {
					used[k] = true
					out = append(out, r)
					break
				}
			}
		}
		for k, r := range run {
			if !used[k] {
				out = append(out, r)
			}
		}
		i = j - 1
	}
	if out == nil {
		return msgs
	}
	return out
}

// inCallOrder reports whether results answer calls in the calls' order.
func inCallOrder(calls []ToolCall, results []Message) bool {
	k := 0
	for _, r := range results {
		for k < len(calls) && calls[k].ID != r.ToolCallID {
			k++
		}
		if k == len(calls) {
			return false
		}
		k++
	}
	return true
}
