// Package builtin holds the tools every Rein agent has, whatever its model
// (docs/models.md): sleep, which makes a run take time in a way that honours
// cancellation (for demos and tests of stopping), and write_note, which
// leaves a trace on disk and needs a human's confirmation by default (for
// demos and tests of the confirmation gate).
//
// The subagent tools of docs/api.md live with the subagent package, which owns
// what they do.
package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/reinhq/rein/tool"
)

// MaxSleep is the longest sleep the sleep tool accepts, in seconds.
const MaxSleep = 3600

// NotesFile is the file in a session's workspace that write_note appends to.
const NotesFile = "notes.md"

// All returns a fresh instance of every built-in tool.
func All() []tool.Tool { return []tool.Tool{Sleep(), WriteNote()} }

// Sleep returns the sleep tool: {"seconds": number} between 0 and MaxSleep.
// It returns as soon as its context ends.
func Sleep() tool.Tool { return sleepTool{} }

type sleepTool struct{}

var sleepSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "seconds": {"type": "number", "minimum": 0, "maximum": ` + strconv.Itoa(MaxSleep) + `, "description": "How long to sleep, in seconds (fractions allowed)."}
  },
  "required": ["seconds"],
  "additionalProperties": false
}`)

func (sleepTool) Spec() tool.Spec {
	return tool.Spec{
		Name:        "sleep",
		Description: "Wait for the given number of seconds, then report how long it slept. Useful to wait for something, or to take time on purpose.",
		InputSchema: sleepSchema,
	}
}

func (sleepTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return tool.Result{}, fmt.Errorf("invalid input: %w", err)
	}
	// The registry has validated the input; check again so the tool is
	// safe on its own.
	if in.Seconds < 0 || in.Seconds > MaxSleep {
		return tool.Result{}, fmt.Errorf("seconds must be between 0 and %d, got %v", MaxSleep, in.Seconds)
	}
	t := time.NewTimer(time.Duration(in.Seconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return tool.Result{Output: "slept " + strconv.FormatFloat(in.Seconds, 'f', -1, 64) + "s"}, nil
	case <-ctx.Done():
		return tool.Result{}, context.Cause(ctx)
	}
}

// WriteNote returns the write_note tool: {"text": string}, appended with a
// newline to NotesFile in the call's workspace. It needs confirmation by
// default (Spec.Confirm). The workspace directory is created (0700) and
// the file is private to its owner (0600): notes are the user's data.
func WriteNote() tool.Tool { return writeNoteTool{} }

type writeNoteTool struct{}

var writeNoteSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "text": {"type": "string", "minLength": 1, "description": "The note to save."}
  },
  "required": ["text"],
  "additionalProperties": false
}`)

// errNoWorkspace is the result of write_note when the runtime has no
// workspace for the session.
var errNoWorkspace = errors.New("no workspace configured")

func (writeNoteTool) Spec() tool.Spec {
	return tool.Spec{
		Name:        "write_note",
		Description: "Append a note (one paragraph of text) to the notes file of this conversation.",
		InputSchema: writeNoteSchema,
		Confirm:     true,
	}
}

func (writeNoteTool) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return tool.Result{}, fmt.Errorf("invalid input: %w", err)
	}
	if in.Text == "" {
		return tool.Result{}, errors.New("text must not be empty")
	}
	if call.Workspace == "" {
		return tool.Result{}, errNoWorkspace
	}
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err
	}
	if err := os.MkdirAll(call.Workspace, 0o700); err != nil {
		return tool.Result{}, fmt.Errorf("cannot create the workspace: %w", withoutPath(err))
	}
	f, err := os.OpenFile(filepath.Join(call.Workspace, NotesFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return tool.Result{}, fmt.Errorf("cannot open the notes file: %w", withoutPath(err))
	}
	// One write, so concurrent notes (O_APPEND) never interleave.
	_, err = f.Write([]byte(in.Text + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("cannot save the note: %w", withoutPath(err))
	}
	return tool.Result{Output: fmt.Sprintf("note saved (%d bytes)", len(in.Text))}, nil
}

// withoutPath drops the file path from a file system error: the output
// goes to the model and the client, who have no business knowing where
// the server keeps workspaces.
func withoutPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
