// Package tool defines the tools an agent can call: their interface, the
// registry that validates input against each tool's JSON Schema and turns
// every failure (unknown tool, bad input, timeout, panic) into an error
// result the model can read, and the confirmation gate that holds a call
// until a human allows or denies it (docs/tools.md).
package tool

import (
	"context"
	"encoding/json"

	"github.com/reinhq/rein"
)

// Tool is something the model can call.
type Tool interface {
	// Spec describes the tool; InputSchema is a JSON Schema object.
	Spec() Spec
	// Call runs the tool. It MUST honour ctx: a cancelled context ends the
	// call promptly. A returned error becomes an error result whose output
	// is the error's text; Result.IsError lets a tool report a failure with
	// its own output.
	Call(ctx context.Context, call Call) (Result, error)
}

// Spec describes a tool.
type Spec struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	// Confirm marks a tool that needs a human's confirmation by default.
	Confirm bool
}

// Call is one invocation.
type Call struct {
	// ID is the tool_use_id.
	ID    string
	Name  string
	Input json.RawMessage
	// Session and RunID say on whose behalf the tool runs.
	Session rein.SessionKey
	RunID   string
	Step    int
	// Workspace is a directory the tool may write in for this session
	// ("" when the runtime has none).
	Workspace string
}

// Result is a tool's answer.
type Result struct {
	Output  string
	IsError bool
}
