// Package rein is the vocabulary every part of Rein shares: sessions, runs,
// messages, events and error codes.
//
// It exists so that the run engine, the agent loop, the stores, the model
// providers and the HTTP server can talk about the same things without
// depending on one another. It imports nothing beyond the standard library
// and holds no behaviour beyond small helpers on these types; see
// docs/architecture.md for the picture of how the packages fit together.
package rein

import (
	"encoding/json"
	"time"
)

// SessionKey identifies a session. Every session belongs to exactly one
// owner, and every lookup carries the owner so that another owner's session
// is indistinguishable from a missing one.
type SessionKey struct {
	Owner string
	ID    string
}

// String renders the key for logs.
func (k SessionKey) String() string { return k.Owner + "/" + k.ID }

// RunStatus is the lifecycle state of a run (docs/api.md).
type RunStatus string

// The run statuses. CREATED → QUEUED → RUNNING → one terminal status.
const (
	StatusCreated   RunStatus = "CREATED"
	StatusQueued    RunStatus = "QUEUED"
	StatusRunning   RunStatus = "RUNNING"
	StatusCompleted RunStatus = "COMPLETED"
	StatusFailed    RunStatus = "FAILED"
	StatusCancelled RunStatus = "CANCELLED"
)

// Terminal reports whether s is final.
func (s RunStatus) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of the six statuses.
func (s RunStatus) Valid() bool {
	switch s {
	case StatusCreated, StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Reason says why a run ended (docs/api.md).
type Reason string

// The stop reasons. stop, interrupted, max_steps and budget end COMPLETED
// with a final reply; cancelled and timeout end CANCELLED; error ends FAILED.
const (
	ReasonStop        Reason = "stop"
	ReasonInterrupted Reason = "interrupted"
	ReasonMaxSteps    Reason = "max_steps"
	// ReasonBudget: the run's or its session's budget was reached, and the
	// run made no further model request (docs/api.md "Budgets and usage").
	ReasonBudget    Reason = "budget"
	ReasonCancelled Reason = "cancelled"
	ReasonTimeout   Reason = "timeout"
	ReasonError     Reason = "error"
)

// Status is the terminal status a run ending for reason r has.
func (r Reason) Status() RunStatus {
	switch r {
	case ReasonStop, ReasonInterrupted, ReasonMaxSteps, ReasonBudget:
		return StatusCompleted
	case ReasonCancelled, ReasonTimeout:
		return StatusCancelled
	default:
		return StatusFailed
	}
}

// HasReply reports whether a run ending for reason r produces a final reply
// (an agent.message event).
func (r Reason) HasReply() bool { return r.Status() == StatusCompleted }

// Role is who speaks a message in a transcript.
type Role string

// Transcript roles. The system prompt is not a message: it travels beside
// the transcript (model.Request.System) so providers can place it where
// their API wants it.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// ToolCall is one tool invocation requested by the model.
type ToolCall struct {
	// ID is the model's id for the call (tool_use_id); unique within a run.
	ID string `json:"id"`
	// Name is the tool's name.
	Name string `json:"name"`
	// Input is the JSON input the model produced. It may be invalid JSON if
	// the model produced invalid JSON; the tool registry answers that with an
	// error result.
	Input json.RawMessage `json:"input"`
}

// Hint marks a user-role message as a supplement or a subagent notice rather
// than user input (docs/api.md). Providers render it as a clearly marked note.
type Hint struct {
	// ID is the supplement id (or the notice id).
	ID string `json:"id"`
	// Source is a label ("user", "parent", "subagent"), never an identity.
	Source string `json:"source"`
}

// Message is one entry of a session's transcript (its history).
type Message struct {
	Role Role `json:"role"`
	// Text is the message text. For a tool result it is the tool's output.
	Text string `json:"text,omitempty"`
	// ToolCalls are the calls an assistant message makes. Every one of them
	// MUST be answered by a RoleTool message before the next assistant or
	// user message (transcript validity, docs/api.md).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a RoleTool message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// ToolName is the name of the tool a RoleTool message answers.
	ToolName string `json:"tool_name,omitempty"`
	// IsError marks a tool result as an error (including synthetic results
	// for calls cut short by a stop).
	IsError bool `json:"is_error,omitempty"`
	// Partial marks an assistant message whose generation was cut short and
	// kept by the partial-output policy.
	Partial bool `json:"partial,omitempty"`
	// Hint is set on a user-role message that carries a supplement or notice.
	Hint *Hint `json:"hint,omitempty"`
	// RunID and Step record where the message was produced or consumed;
	// they are provenance, not part of what a model sees.
	RunID string `json:"run_id,omitempty"`
	Step  int    `json:"step,omitempty"`
}

// Usage counts model tokens, and what they cost when the model has a price.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CostUSD is what the tokens cost in US dollars: nil when no request
	// counted in it had a price (a sum of priced and unpriced requests
	// counts the priced ones).
	CostUSD *float64 `json:"cost_usd"`
}

// Add returns u + v. The cost is nil only when both are.
func (u Usage) Add(v Usage) Usage {
	out := Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens}
	if u.CostUSD != nil || v.CostUSD != nil {
		var c float64
		if u.CostUSD != nil {
			c += *u.CostUSD
		}
		if v.CostUSD != nil {
			c += *v.CostUSD
		}
		out.CostUSD = &c
	}
	return out
}

// Tokens is input and output tokens together: what a tokens budget bounds.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Budget bounds what runs may spend (docs/api.md "Budgets and usage"). A
// zero field is no bound.
type Budget struct {
	// Tokens bounds input and output tokens together (> 0).
	Tokens int64 `json:"tokens,omitempty"`
	// CostUSD bounds the cost in US dollars (> 0).
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// IsZero reports whether b bounds nothing.
func (b Budget) IsZero() bool { return b.Tokens == 0 && b.CostUSD == 0 }

// Reached reports whether u has reached one of b's bounds. Without a cost
// (nil) a cost bound is never reached.
func (b Budget) Reached(u Usage) bool {
	if b.Tokens > 0 && u.Tokens() >= b.Tokens {
		return true
	}
	return b.CostUSD > 0 && u.CostUSD != nil && *u.CostUSD >= b.CostUSD
}

// Clock tells the time. Components take one so tests can control time; nil
// means the wall clock.
type Clock func() time.Time

// Now returns the current time from c, or the wall clock when c is nil,
// always in UTC.
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now().UTC()
	}
	return c().UTC()
}

// WhenBusy says what a user.message does when the session's turn is held
// (docs/api.md).
type WhenBusy string

// The when_busy values. The empty value means WhenBusyReject.
const (
	// WhenBusyReject answers session_busy (the default).
	WhenBusyReject WhenBusy = "reject"
	// WhenBusyEnqueue queues the run behind the current ones.
	WhenBusyEnqueue WhenBusy = "enqueue"
	// WhenBusyInterrupt interrupts the current run cooperatively (then
	// cancels it after a grace period) and runs this one next.
	WhenBusyInterrupt WhenBusy = "interrupt"
	// WhenBusyRollback cancels the current run at once, leaves its turn out
	// of every later model request, and runs this one next.
	WhenBusyRollback WhenBusy = "rollback"
)

// Valid reports whether w is one of the four values (or empty).
func (w WhenBusy) Valid() bool {
	switch w {
	case "", WhenBusyReject, WhenBusyEnqueue, WhenBusyInterrupt, WhenBusyRollback:
		return true
	}
	return false
}

// StopMode is how user.interrupt stops a run (docs/api.md).
type StopMode string

// The stop modes. The empty value means StopCancel.
const (
	// StopCancel stops the run at once (status CANCELLED).
	StopCancel StopMode = "cancel"
	// StopInterrupt stops it cooperatively: it still answers, with reason
	// interrupted.
	StopInterrupt StopMode = "interrupt"
)

// Valid reports whether m is one of the two modes (or empty).
func (m StopMode) Valid() bool {
	return m == "" || m == StopCancel || m == StopInterrupt
}
