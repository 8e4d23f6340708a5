package main

// How the commands show events to people. chat, send, run and events all
// render events here, so that one event reads the same wherever it shows:
// the one-line log form of `rein events`, the bracketed status lines of
// chat, send and run, and a run's reply as it streams.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/reinhq/rein"
)

// eventText renders events.
type eventText struct {
	// named: status lines name the run they are about. The chat shows
	// several runs, so it names them; send and run follow one run.
	named bool
}

// decode decodes an event's payload, reporting whether it could.
func decode[T any](e rein.Event) (T, bool) {
	var p T
	err := e.DecodePayload(&p)
	return p, err == nil
}

// run is how a status line names an event's run.
func (t eventText) run(runID string) string {
	if t.named && runID != "" {
		return "run " + runID
	}
	return "run"
}

// status is an event's status line without its brackets, or "" for an
// event that has none (a run's text is the replyPrinter's).
func (t eventText) status(e rein.Event) string {
	switch e.Type {
	case rein.EventRunQueued:
		if p, ok := decode[rein.RunQueuedPayload](e); ok {
			return fmt.Sprintf("%s queued (position %d)", t.run(e.RunID), p.Position)
		}
	case rein.EventRunStarted:
		return t.run(e.RunID) + " running"
	case rein.EventRunEdited:
		if p, ok := decode[rein.RunEditedPayload](e); ok {
			return t.run(e.RunID) + " edited while queued: " + oneLine(p.Text, 200)
		}
	case rein.EventToolUse:
		if p, ok := decode[rein.ToolUsePayload](e); ok {
			return "tool " + p.Name + " " + oneLine(compact(p.Input), 200)
		}
	case rein.EventToolResult:
		if p, ok := decode[rein.ToolResultPayload](e); ok {
			kind := "result"
			switch {
			case p.InDoubt:
				kind = "error, in doubt (not run again)"
			case p.IsError:
				kind = "error"
			}
			return "tool " + kind + ": " + oneLine(p.Output, 200)
		}
	case rein.EventStepRestarted:
		if p, ok := decode[rein.StepRestartedPayload](e); ok {
			return fmt.Sprintf("… step %d restarted after instance loss (attempt %d)", p.Step, p.Attempt)
		}
	case rein.EventToolConfirmationRequested:
		if p, ok := decode[rein.ToolConfirmationRequestedPayload](e); ok {
			return fmt.Sprintf("confirm tool %s %s (%s)", p.Name, oneLine(compact(p.Input), 200), p.ToolUseID)
		}
	case rein.EventConfirmationExpired:
		if p, ok := decode[rein.ConfirmationExpiredPayload](e); ok {
			return p.ToolUseID + " expired unanswered: denied"
		}
	case rein.EventUserToolConfirmation:
		if p, ok := decode[rein.UserToolConfirmationPayload](e); ok {
			if p.Allow {
				return p.ToolUseID + " approved"
			}
			if p.DenyMessage != nil && *p.DenyMessage != "" {
				return p.ToolUseID + " denied: " + oneLine(*p.DenyMessage, 200)
			}
			return p.ToolUseID + " denied"
		}
	case rein.EventUserSupplement:
		if p, ok := decode[rein.SupplementPayload](e); ok {
			return "note " + p.SupplementID + " queued: " + oneLine(p.Text, 200)
		}
	case rein.EventSupplementConsumed:
		if p, ok := decode[rein.SupplementConsumedPayload](e); ok {
			return fmt.Sprintf("note %s read by run %s at step %d", p.SupplementID, p.RunID, p.Step)
		}
	case rein.EventUserInterrupt:
		if p, ok := decode[rein.UserInterruptPayload](e); ok {
			target := "the current run"
			if p.RunID != nil {
				target = "run " + *p.RunID
			}
			if !p.Accepted {
				return "stop of " + target + " not accepted (" + p.Mode + ")"
			}
			return target + " stopped (" + p.Mode + ")"
		}
	case rein.EventSystemMessage:
		return "system prompt set for later runs"
	case rein.EventRunCompleted:
		if p, ok := decode[rein.RunCompletedPayload](e); ok {
			line := fmt.Sprintf("%s %s: %s", t.run(e.RunID), strings.ToLower(string(p.Status)), p.Reason)
			if p.Error != "" {
				line += ": " + oneLine(p.Error, 200)
			}
			if p.RolledBack {
				line += ", rolled back"
			}
			return line
		}
	case rein.EventSubagentStarted:
		if p, ok := decode[rein.SubagentStartedPayload](e); ok {
			return "subagent " + p.ChildID + " started task " + p.TaskID + "; open it with: rein chat --session " + p.ChildID
		}
	case rein.EventSubagentCompleted:
		if p, ok := decode[rein.SubagentCompletedPayload](e); ok {
			return fmt.Sprintf("subagent %s %s: %s", p.ChildID, strings.ToLower(string(p.Status)), p.Reason)
		}
	}
	return ""
}

// logKeys are the payload keys worth reading in the log form, in a fixed
// order per type; the run id is already on the line.
var logKeys = map[rein.EventType][]string{
	rein.EventUserMessage:               {"text"},
	rein.EventSystemMessage:             {"text"},
	rein.EventRunQueued:                 {"position"},
	rein.EventRunStarted:                {},
	rein.EventMessageDelta:              {"step", "text"},
	rein.EventToolUse:                   {"step", "tool_use_id", "name", "input"},
	rein.EventToolConfirmationRequested: {"tool_use_id", "name", "input"},
	rein.EventUserToolConfirmation:      {"tool_use_id", "allow", "deny_message"},
	rein.EventConfirmationExpired:       {"tool_use_id"},
	rein.EventToolResult:                {"tool_use_id", "is_error", "in_doubt", "output"},
	rein.EventUserSupplement:            {"supplement_id", "source", "text"},
	rein.EventSupplementConsumed:        {"supplement_id", "step"},
	rein.EventMessage:                   {"reason", "text"},
	rein.EventUserInterrupt:             {"mode", "accepted", "message"},
	rein.EventRunCompleted:              {"status", "reason", "error", "rolled_back"},
	rein.EventStepRestarted:             {"step", "attempt"},
	rein.EventSubagentStarted:           {"child_id", "task_id"},
	rein.EventSubagentCompleted:         {"child_id", "task_id", "status", "reason", "output"},
	rein.EventRunEdited:                 {"text"},
	rein.EventQueueChanged:              {"queued"},
}

// logLine renders an event as one line of the session's log:
//
//	#12 15:04:05.000 agent.tool_use run_01H… step=1 name=sleep input={"seconds":5}
//
// Values are JSON (texts quoted), so a line is always one event.
func (eventText) logLine(e rein.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s", e.Seq, e.CreatedAt.Local().Format("15:04:05.000"), e.Type)
	if e.RunID != "" {
		b.WriteString(" " + e.RunID)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return b.String() + " " + string(e.Payload)
	}
	keys, known := logKeys[e.Type]
	if !known {
		for k := range p {
			if k != "run_id" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
	}
	if e.Type == rein.EventUserInterrupt && e.RunID == "" {
		keys = append([]string{"run_id"}, keys...)
	}
	for _, k := range keys {
		if v, ok := p[k]; ok {
			b.WriteString(" " + k + "=" + compact(v))
		}
	}
	return b.String()
}

// oneLine shortens s to at most n runes on one line, for status lines.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// compact renders raw JSON without insignificant spaces.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// replyPrinter prints a run's reply as it streams, keeping the terminal
// tidy: each step's text on its own lines, and the final reply printed in
// full only when the streamed deltas did not already show it.
type replyPrinter struct {
	w io.Writer
	// step is the step whose deltas are on screen; text what they said.
	step    int
	text    strings.Builder
	midLine bool
}

func (r *replyPrinter) write(s string) {
	if s == "" {
		return
	}
	fmt.Fprint(r.w, s)
	r.midLine = !strings.HasSuffix(s, "\n")
}

// endLine finishes a line of streamed text, if one is open.
func (r *replyPrinter) endLine() {
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}

func (r *replyPrinter) delta(step int, text string) {
	if step != r.step {
		r.endLine()
		r.step = step
		r.text.Reset()
	}
	r.text.WriteString(text)
	r.write(text)
}

// restart forgets the deltas shown for step: a resumed run makes that
// step's model request again (agent.step_restarted), and its new deltas
// start on a fresh line. Text already on the terminal stays; the final
// reply is compared with the new deltas only.
func (r *replyPrinter) restart(step int) {
	if step == r.step {
		r.endLine()
		r.text.Reset()
	}
}

// final shows the run's final reply: the deltas of the last step normally
// spell it exactly; what they did not show yet is printed now.
func (r *replyPrinter) final(text string) {
	shown := r.text.String()
	r.text.Reset()
	r.step = 0
	switch {
	case shown == text:
	case shown != "" && strings.HasPrefix(text, shown):
		r.write(text[len(shown):])
	default:
		r.endLine()
		r.write(text)
	}
	r.endLine()
}

// event shows what an event adds to the reply (its deltas, its final
// text, the restart of a step) and reports whether it was such an event.
func (r *replyPrinter) event(e rein.Event) bool {
	switch e.Type {
	case rein.EventMessageDelta:
		if p, ok := decode[rein.MessageDeltaPayload](e); ok {
			r.delta(p.Step, p.Text)
		}
	case rein.EventMessage:
		if p, ok := decode[rein.MessagePayload](e); ok {
			r.final(p.Text)
		}
	case rein.EventStepRestarted:
		if p, ok := decode[rein.StepRestartedPayload](e); ok {
			r.restart(p.Step)
		}
		return false
	default:
		return false
	}
	return true
}
