package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func registry(t *testing.T, opts tool.RegistryOptions) *tool.Registry {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	r, err := tool.NewRegistry(opts, All()...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return r
}

func TestSchemasRejectBadInput(t *testing.T) {
	r := registry(t, tool.RegistryOptions{})
	tests := []struct {
		name, tool, input, want string
	}{
		{"missing seconds", "sleep", `{}`, "invalid input for tool sleep: missing property 'seconds'"},
		{"seconds not a number", "sleep", `{"seconds": "abc"}`, "invalid input for tool sleep: seconds: got string, want number"},
		{"negative seconds", "sleep", `{"seconds": -1}`, "invalid input for tool sleep: seconds: minimum: got -1, want 0"},
		{"too long", "sleep", `{"seconds": 3601}`, "invalid input for tool sleep: seconds: maximum: got 3,601, want 3,600"},
		{"extra property", "sleep", `{"seconds": 1, "minutes": 2}`, "invalid input for tool sleep: additional properties 'minutes' not allowed"},
		{"sleep input not JSON", "sleep", `{seconds: 1}`, "invalid input for tool sleep: not valid JSON: invalid character 's' looking for beginning of object key string"},
		{"missing text", "write_note", `{}`, "invalid input for tool write_note: missing property 'text'"},
		{"empty text", "write_note", `{"text": ""}`, "invalid input for tool write_note: text: minLength: got 0, want 1"},
		{"text not a string", "write_note", `{"text": ["a"]}`, "invalid input for tool write_note: text: got array, want string"},
		{"unknown tool", "shell", `{"cmd": "rm -rf /"}`, `unknown tool "shell"; available tools: sleep, write_note`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := r.Execute(context.Background(), tool.Call{Name: tt.tool, Input: json.RawMessage(tt.input), Workspace: t.TempDir()})
			if !res.IsError || res.Output != tt.want {
				t.Errorf("got %+v\nwant error %q", res, tt.want)
			}
		})
	}
}

func TestSleep(t *testing.T) {
	r := registry(t, tool.RegistryOptions{})
	for in, want := range map[string]string{`{"seconds": 0}`: "slept 0s", `{"seconds": 0.005}`: "slept 0.005s"} {
		start := time.Now()
		res := r.Execute(context.Background(), tool.Call{Name: "sleep", Input: json.RawMessage(in)})
		if res.IsError || res.Output != want {
			t.Errorf("%s: %+v, want %q", in, res, want)
		}
		if in == `{"seconds": 0.005}` && time.Since(start) < 5*time.Millisecond {
			t.Errorf("slept only %v", time.Since(start))
		}
	}
}

func TestSleepCancelReturnsPromptly(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Sleep().Call(ctx, tool.Call{Name: "sleep", Input: json.RawMessage(`{"seconds": 3600}`)})
		done <- err
	}()
	cancel(rein.ErrInterrupted)
	start := time.Now()
	err := <-done
	if time.Since(start) > time.Second {
		t.Errorf("sleep took %v to notice the cancel", time.Since(start))
	}
	if !errors.Is(err, rein.ErrInterrupted) {
		t.Errorf("err = %v, want the cancel cause", err)
	}

	// Through the registry the model reads the synthetic interrupted result.
	r := registry(t, tool.RegistryOptions{})
	if res := r.Execute(ctx, tool.Call{Name: "sleep", Input: json.RawMessage(`{"seconds": 3600}`)}); res.Output != rein.InterruptedToolOutput || !res.IsError {
		t.Errorf("%+v", res)
	}
}

func TestSleepTimeout(t *testing.T) {
	r := registry(t, tool.RegistryOptions{Timeouts: map[string]time.Duration{"sleep": 20 * time.Millisecond}})
	res := r.Execute(context.Background(), tool.Call{Name: "sleep", Input: json.RawMessage(`{"seconds": 60}`)})
	if !res.IsError || res.Output != "tool sleep timed out after 20ms" {
		t.Errorf("%+v", res)
	}
}

func TestWriteNoteAppends(t *testing.T) {
	r := registry(t, tool.RegistryOptions{})
	ws := filepath.Join(t.TempDir(), "sessions", "ses_1") // created on demand
	for _, text := range []string{"buy milk", "call Ada — about Rein"} {
		in, _ := json.Marshal(map[string]string{"text": text})
		res := r.Execute(context.Background(), tool.Call{Name: "write_note", Input: in, Workspace: ws})
		if want := fmt.Sprintf("note saved (%d bytes)", len(text)); res.IsError || res.Output != want {
			t.Errorf("%q: %+v, want %q", text, res, want)
		}
	}
	path := filepath.Join(ws, NotesFile)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "buy milk\ncall Ada — about Rein\n"; string(got) != want {
		t.Errorf("notes file = %q, want %q", got, want)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, ws: 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
}

func TestWriteNoteConcurrentNotesStayWhole(t *testing.T) {
	ws := t.TempDir()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("note %02d %s", i, strings.Repeat("x", 500))})
			if _, err := WriteNote().Call(context.Background(), tool.Call{Name: "write_note", Input: in, Workspace: ws}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	data, err := os.ReadFile(filepath.Join(ws, NotesFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	slices.Sort(lines)
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	for i, l := range lines {
		if want := fmt.Sprintf("note %02d %s", i, strings.Repeat("x", 500)); l != want {
			t.Errorf("line %d mangled: %.40q…", i, l)
		}
	}
}

func TestWriteNoteFailures(t *testing.T) {
	r := registry(t, tool.RegistryOptions{})
	in := json.RawMessage(`{"text": "hello"}`)
	if res := r.Execute(context.Background(), tool.Call{Name: "write_note", Input: in}); !res.IsError || res.Output != "no workspace configured" {
		t.Errorf("no workspace: %+v", res)
	}
	// A workspace path that is a file: the error must not reveal the path.
	file := filepath.Join(t.TempDir(), "secret-server-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	res := r.Execute(context.Background(), tool.Call{Name: "write_note", Input: in, Workspace: file})
	if !res.IsError || !strings.HasPrefix(res.Output, "cannot create the workspace: ") || strings.Contains(res.Output, "secret-server-dir") {
		t.Errorf("workspace is a file: %+v", res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ws := t.TempDir()
	if _, err := WriteNote().Call(ctx, tool.Call{Name: "write_note", Input: in, Workspace: ws}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, NotesFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a cancelled call wrote the note: %v", err)
	}
}

func TestConfirmationDefaultsAndOverride(t *testing.T) {
	if !registry(t, tool.RegistryOptions{}).NeedsConfirmation("write_note") {
		t.Error("write_note must need confirmation by default")
	}
	if registry(t, tool.RegistryOptions{}).NeedsConfirmation("sleep") {
		t.Error("sleep must not need confirmation by default")
	}
	none := []string{}
	if registry(t, tool.RegistryOptions{Confirm: &none}).NeedsConfirmation("write_note") {
		t.Error(`--confirm "" must confirm nothing`)
	}
	onlySleep := []string{"sleep"}
	r := registry(t, tool.RegistryOptions{Confirm: &onlySleep})
	if !r.NeedsConfirmation("sleep") || r.NeedsConfirmation("write_note") {
		t.Error("--confirm sleep must replace the default set")
	}
}

func TestAll(t *testing.T) {
	var names []string
	for _, tl := range All() {
		names = append(names, tl.Spec().Name)
		if tl.Spec().Description == "" {
			t.Errorf("%s has no description", tl.Spec().Name)
		}
	}
	if strings.Join(names, ",") != "sleep,write_note" {
		t.Errorf("All() = %v", names)
	}
}
