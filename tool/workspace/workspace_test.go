package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func registry(t *testing.T) *tool.Registry {
	t.Helper()
	r, err := tool.NewRegistry(tool.RegistryOptions{Logger: slog.New(slog.DiscardHandler)}, Tools()...)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	return r
}

// input encodes a tool's input; keys and values alternate.
func input(kv ...string) json.RawMessage {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return b
}

// sandbox is a temporary directory holding a workspace (ws) and, beside
// it, things a confined tool must never touch: base/x and base/outside/
// (with a file, a folder, and a file in that folder).
type sandbox struct {
	base, ws, outside string
}

const sentinel = "sentinel: must never change"

// onlyOutside is a file name found only outside the workspace.
const onlyOutside = "only-outside"

func newSandbox(t *testing.T) sandbox {
	t.Helper()
	base := t.TempDir()
	s := sandbox{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.ws, s.outside, filepath.Join(s.outside, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(base, "x"), filepath.Join(s.outside, "secret"), filepath.Join(s.outside, "sub", "secret"), filepath.Join(s.outside, onlyOutside)} {
		if err := os.WriteFile(f, []byte(sentinel), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// snapshot describes everything under base except the workspace: each
// entry's type, permissions and content (or link target).
func (s sandbox) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(s.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == s.ws {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// untouched fails the test if anything outside the workspace differs from
// before.
func (s sandbox) untouched(t *testing.T, before map[string]string) {
	t.Helper()
	after := s.snapshot(t)
	for p, want := range before {
		if got, ok := after[p]; !ok {
			t.Errorf("outside the workspace, %s was removed", p)
		} else if got != want {
			t.Errorf("outside the workspace, %s changed: %q, was %q", p, got, want)
		}
	}
	for p, got := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("outside the workspace, %s appeared: %q", p, got)
		}
	}
}

func (s sandbox) symlink(t *testing.T, target, name string) {
	t.Helper()
	p := filepath.Join(s.ws, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func (s sandbox) write(t *testing.T, name, text string) {
	t.Helper()
	p := filepath.Join(s.ws, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSpecs(t *testing.T) {
	r := registry(t)
	if r.Len() != 3 {
		t.Fatalf("%d tools, want 3", r.Len())
	}
	for name, confirm := range map[string]bool{ListFilesName: false, ReadFileName: false, WriteFileName: true} {
		if _, ok := r.Lookup(name); !ok {
			t.Errorf("%s not registered", name)
		}
		if got := r.NeedsConfirmation(name); got != confirm {
			t.Errorf("NeedsConfirmation(%s) = %v, want %v", name, got, confirm)
		}
	}
}

func TestSchemasRejectBadInput(t *testing.T) {
	r := registry(t)
	tests := []struct {
		name, tool, input, want string
	}{
		{"read without path", ReadFileName, `{}`, "invalid input for tool read_file: missing property 'path'"},
		{"read empty path", ReadFileName, `{"path": ""}`, "invalid input for tool read_file: path: minLength: got 0, want 1"},
		{"read path not a string", ReadFileName, `{"path": 1}`, "invalid input for tool read_file: path: got number, want string"},
		{"write without text", WriteFileName, `{"path": "a"}`, "invalid input for tool write_file: missing property 'text'"},
		{"write text not a string", WriteFileName, `{"path": "a", "text": null}`, "invalid input for tool write_file: text: got null, want string"},
		{"list extra property", ListFilesName, `{"path": ".", "recursive": true}`, "invalid input for tool list_files: additional properties 'recursive' not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			res := r.Execute(context.Background(), tool.Call{Name: tt.tool, Input: json.RawMessage(tt.input), Workspace: ws})
			if !res.IsError || res.Output != tt.want {
				t.Errorf("got %+v\nwant error %q", res, tt.want)
			}
			if entries, _ := os.ReadDir(ws); len(entries) != 0 {
				t.Errorf("refused input left %d entries in the workspace", len(entries))
			}
		})
	}
}

// step is one call in a scenario and what it must answer.
type step struct {
	tool    string
	input   json.RawMessage
	want    string // the whole output
	isError bool
}

func run(t *testing.T, r *tool.Registry, ws string, steps []step) {
	t.Helper()
	for i, s := range steps {
		res := r.Execute(context.Background(), tool.Call{ID: fmt.Sprintf("toolu_%d", i), Name: s.tool, Input: s.input, Workspace: ws})
		if res.IsError != s.isError || res.Output != s.want {
			t.Errorf("step %d: %s %s = %+v\nwant output %q (error %v)", i, s.tool, s.input, res, s.want, s.isError)
		}
	}
}

func TestHappyPaths(t *testing.T) {
	r := registry(t)
	s := newSandbox(t)
	ws := filepath.Join(s.ws, "alice", "ses_1") // created on first use
	before := s.snapshot(t)
	run(t, r, ws, []step{
		{tool: ListFilesName, input: input(), want: "(empty folder)"},
		{tool: WriteFileName, input: input("path", "a.txt", "text", "hello"), want: "wrote 5 bytes to a.txt"},
		{tool: WriteFileName, input: input("path", "docs/deep/b.md", "text", "# B — ✓\n"), want: "wrote 12 bytes to docs/deep/b.md"},
		{tool: WriteFileName, input: input("path", "empty", "text", ""), want: "wrote 0 bytes to empty"},
		{tool: ListFilesName, input: input(), want: "a.txt\ndocs/\nempty"},
		{tool: ListFilesName, input: input("path", "."), want: "a.txt\ndocs/\nempty"},
		{tool: ListFilesName, input: input("path", "docs"), want: "deep/"},
		{tool: ListFilesName, input: input("path", "docs/deep/"), want: "b.md"},
		{tool: ReadFileName, input: input("path", "docs/deep/b.md"), want: "# B — ✓\n"},
		{tool: ReadFileName, input: input("path", "./docs/../a.txt"), want: "hello"},
		{tool: ReadFileName, input: input("path", "empty"), want: ""},
		{tool: WriteFileName, input: input("path", "a.txt", "text", "replaced"), want: "wrote 8 bytes to a.txt"},
		{tool: ReadFileName, input: input("path", "a.txt"), want: "replaced"},
		{tool: WriteFileName, input: input("path", "docs/c.txt", "text", "c"), want: "wrote 1 bytes to docs/c.txt"},
		{tool: ListFilesName, input: input("path", "docs"), want: "c.txt\ndeep/"},
	})
	for p, want := range map[string]os.FileMode{ws: 0o700, filepath.Join(ws, "docs", "deep"): 0o700, filepath.Join(ws, "a.txt"): 0o600, filepath.Join(ws, "docs", "deep", "b.md"): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	// No temporary file is left behind.
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
	s.untouched(t, before)
}

func TestReplaceKeepsPermissions(t *testing.T) {
	s := newSandbox(t)
	s.write(t, "script.sh", "old")
	if err := os.Chmod(filepath.Join(s.ws, "script.sh"), 0o750); err != nil {
		t.Fatal(err)
	}
	run(t, registry(t), s.ws, []step{{tool: WriteFileName, input: input("path", "script.sh", "text", "new"), want: "wrote 3 bytes to script.sh"}})
	fi, err := os.Stat(filepath.Join(s.ws, "script.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("mode %v, want 0750", fi.Mode().Perm())
	}
}

func TestNoWorkspace(t *testing.T) {
	r := registry(t)
	run(t, r, "", []step{
		{tool: ListFilesName, input: input(), want: "no workspace configured", isError: true},
		{tool: ReadFileName, input: input("path", "a"), want: "no workspace configured", isError: true},
		{tool: WriteFileName, input: input("path", "a", "text", "x"), want: "no workspace configured", isError: true},
	})
}

func TestSizeLimit(t *testing.T) {
	r := registry(t)
	s := newSandbox(t)
	s.write(t, "max", strings.Repeat("a", MaxFileSize))
	s.write(t, "over", strings.Repeat("a", MaxFileSize+1))
	s.write(t, "binary", "\xff\xfe\x00PNG")
	run(t, r, s.ws, []step{
		{tool: ReadFileName, input: input("path", "max"), want: strings.Repeat("a", MaxFileSize)},
		{tool: ReadFileName, input: input("path", "over"), isError: true,
			want: `"over" is too large (1048577 bytes): read_file reads files of at most 1 MiB (1048576 bytes)`},
		{tool: ReadFileName, input: input("path", "binary"), isError: true, want: `"binary" is not UTF-8 text; read_file only reads text files`},
		{tool: WriteFileName, input: input("path", "w", "text", strings.Repeat("é", MaxFileSize/2)), want: "wrote 1048576 bytes to w"},
		{tool: WriteFileName, input: input("path", "w2", "text", strings.Repeat("a", MaxFileSize+1)), isError: true,
			want: "text is too large (1048577 bytes): write_file writes files of at most 1 MiB (1048576 bytes)"},
	})
	if _, err := os.Lstat(filepath.Join(s.ws, "w2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused write left a file: %v", err)
	}
}

func TestMistakes(t *testing.T) {
	r := registry(t)
	s := newSandbox(t)
	s.write(t, "f", "text")
	s.write(t, "d/g", "text")
	if err := os.Mkdir(filepath.Join(s.ws, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, r, s.ws, []step{
		{tool: ReadFileName, input: input("path", "missing"), isError: true, want: `"missing" does not exist`},
		{tool: ListFilesName, input: input("path", "missing"), isError: true, want: `"missing" does not exist`},
		{tool: ListFilesName, input: input("path", "empty"), want: "(empty folder)"},
		{tool: ReadFileName, input: input("path", "d"), isError: true, want: `"d" is a folder, not a file: use list_files to see what it holds`},
		{tool: ListFilesName, input: input("path", "f"), isError: true, want: `"f" is a file, not a folder: use read_file to read it`},
		{tool: WriteFileName, input: input("path", "d", "text", "x"), isError: true, want: `"d" is a folder; give the path of a file`},
		{tool: WriteFileName, input: input("path", "new/", "text", "x"), isError: true, want: `"new/" names a folder; give the path of a file`},
		{tool: WriteFileName, input: input("path", ".", "text", "x"), isError: true, want: `"." names a folder; give the path of a file`},
		{tool: WriteFileName, input: input("path", "f/g", "text", "x"), isError: true,
			want: `cannot create the folders of "f/g": a part of the path is a file, not a folder`},
		{tool: ReadFileName, input: input("path", "f/g"), isError: true, want: `cannot read "f/g": a part of the path is a file, not a folder`},
	})
	if b, _ := os.ReadFile(filepath.Join(s.ws, "f")); string(b) != "text" {
		t.Errorf("f = %q", b)
	}
}

const (
	relativeMsg = "path must be relative to the workspace"
	leavesMsg   = "path leaves the workspace"
	linkMsg     = "goes through a symbolic link that points outside it"
)

func TestEscapesRefused(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, s sandbox)
		tool  string
		input func(s sandbox) json.RawMessage
		want  []string // substrings of the error
	}{
		{name: "read ../x", tool: ReadFileName, input: path("../x"), want: []string{leavesMsg, `"../x"`}},
		{name: "write ../x", tool: WriteFileName, input: pathText("../x"), want: []string{leavesMsg}},
		{name: "write ../outside/new", tool: WriteFileName, input: pathText("../outside/new"), want: []string{leavesMsg}},
		{name: "list ..", tool: ListFilesName, input: path(".."), want: []string{leavesMsg}},
		{name: "read a/../../x", tool: ReadFileName, input: path("a/../../x"), want: []string{leavesMsg}},
		{name: "write a/../../x", tool: WriteFileName, input: pathText("a/../../x"), want: []string{leavesMsg}},
		{name: "read /etc/passwd", tool: ReadFileName, input: path("/etc/passwd"), want: []string{relativeMsg, `"/etc/passwd"`}},
		{name: "list /", tool: ListFilesName, input: path("/"), want: []string{relativeMsg}},
		{name: "write absolute path to a file outside", tool: WriteFileName,
			input: func(s sandbox) json.RawMessage {
				return input("path", filepath.Join(s.outside, "secret"), "text", "pwned")
			},
			want: []string{relativeMsg}},
		{name: "write absolute path to the workspace itself", tool: WriteFileName,
			input: func(s sandbox) json.RawMessage { return input("path", filepath.Join(s.ws, "f"), "text", "x") },
			want:  []string{relativeMsg}},

		{name: "read through a link to a file outside", setup: link("../outside/secret", "link"),
			tool: ReadFileName, input: path("link"), want: []string{leavesMsg, linkMsg, `"link"`}},
		{name: "write through a link to a file outside", setup: link("../outside/secret", "link"),
			tool: WriteFileName, input: pathText("link"), want: []string{leavesMsg, linkMsg}},
		{name: "read through an absolute link to a file outside", setup: absLink("outside/secret", "link"),
			tool: ReadFileName, input: path("link"), want: []string{leavesMsg, linkMsg}},
		{name: "write through an absolute link to a file outside", setup: absLink("outside/secret", "link"),
			tool: WriteFileName, input: pathText("link"), want: []string{leavesMsg, linkMsg}},
		{name: "write through a dangling link outside", setup: link("../outside/new", "link"),
			tool: WriteFileName, input: pathText("link"), want: []string{leavesMsg, linkMsg}},
		{name: "read through a link chain leading outside", setup: both(link("l2", "l1"), link("../outside/secret", "l2")),
			tool: ReadFileName, input: path("l1"), want: []string{linkMsg}},
		{name: "write through a link chain leading outside", setup: both(link("l2", "l1"), link("../outside/secret", "l2")),
			tool: WriteFileName, input: pathText("l1"), want: []string{linkMsg}},
		{name: "read through a link in a subfolder", setup: link("../../outside/secret", "sub/link"),
			tool: ReadFileName, input: path("sub/link"), want: []string{linkMsg}},

		{name: "list a linked folder outside", setup: link("../outside", "dir"),
			tool: ListFilesName, input: path("dir"), want: []string{leavesMsg, linkMsg}},
		{name: "read a file in a linked folder outside", setup: link("../outside", "dir"),
			tool: ReadFileName, input: path("dir/secret"), want: []string{linkMsg}},
		{name: "replace a file in a linked folder outside", setup: link("../outside", "dir"),
			tool: WriteFileName, input: pathText("dir/secret"), want: []string{linkMsg}},
		{name: "create a file in a linked folder outside", setup: link("../outside", "dir"),
			tool: WriteFileName, input: pathText("dir/new"), want: []string{linkMsg}},
		{name: "create folders in a linked folder outside", setup: link("../outside", "dir"),
			tool: WriteFileName, input: pathText("dir/a/b/new"), want: []string{linkMsg}},
		{name: "write in a sub folder of a linked folder outside", setup: link("../outside", "dir"),
			tool: WriteFileName, input: pathText("dir/sub/secret"), want: []string{linkMsg}},
		{name: "climb out through a link whose target climbs", setup: link("a/../..", "up"),
			tool: ReadFileName, input: path("up/x"), want: []string{leavesMsg, linkMsg}},
		{name: "write out through a link whose target climbs", setup: link("a/../..", "up"),
			tool: WriteFileName, input: pathText("up/x"), want: []string{leavesMsg, linkMsg}},
		{name: "climb out through .. after a link", setup: link("a/b", "deep"),
			tool: ReadFileName, input: path("deep/../../../x"), want: []string{leavesMsg}},
	}
	r := registry(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			if err := os.MkdirAll(filepath.Join(s.ws, "a", "b"), 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, s)
			}
			before := s.snapshot(t)
			in := tt.input(s)
			res := r.Execute(context.Background(), tool.Call{Name: tt.tool, Input: in, Workspace: s.ws})
			if !res.IsError {
				t.Errorf("not refused: %+v", res)
			}
			for _, w := range tt.want {
				if !strings.Contains(res.Output, w) {
					t.Errorf("output %q does not contain %q", res.Output, w)
				}
			}
			if strings.Contains(res.Output, s.base) && !strings.Contains(string(in), s.base) {
				t.Errorf("output %q names the server's paths", res.Output)
			}
			s.untouched(t, before)
		})
	}
}

func path(p string) func(sandbox) json.RawMessage {
	return func(sandbox) json.RawMessage { return input("path", p) }
}

func pathText(p string) func(sandbox) json.RawMessage {
	return func(sandbox) json.RawMessage { return input("path", p, "text", "pwned") }
}

// link makes name (in the workspace) a symbolic link to target.
func link(target, name string) func(*testing.T, sandbox) {
	return func(t *testing.T, s sandbox) { s.symlink(t, target, name) }
}

// absLink makes name a symbolic link to the absolute path of target (under
// the sandbox's base).
func absLink(target, name string) func(*testing.T, sandbox) {
	return func(t *testing.T, s sandbox) { s.symlink(t, filepath.Join(s.base, target), name) }
}

func both(fs ...func(*testing.T, sandbox)) func(*testing.T, sandbox) {
	return func(t *testing.T, s sandbox) {
		for _, f := range fs {
			f(t, s)
		}
	}
}

func TestLinksInsideWork(t *testing.T) {
	r := registry(t)
	s := newSandbox(t)
	s.write(t, "real.txt", "real")
	s.write(t, "sub/inner.txt", "inner")
	s.symlink(t, "real.txt", "link.txt")
	s.symlink(t, "sub", "dirlink")
	s.symlink(t, "../outside", "out")
	s.symlink(t, "../real.txt", "sub/up.txt")
	before := s.snapshot(t)
	run(t, r, s.ws, []step{
		{tool: ListFilesName, input: input(), want: "dirlink/\nlink.txt\nout\nreal.txt\nsub/"},
		{tool: ReadFileName, input: input("path", "link.txt"), want: "real"},
		{tool: ReadFileName, input: input("path", "sub/up.txt"), want: "real"},
		{tool: ListFilesName, input: input("path", "dirlink"), want: "inner.txt\nup.txt"},
		{tool: ReadFileName, input: input("path", "dirlink/inner.txt"), want: "inner"},
		{tool: WriteFileName, input: input("path", "link.txt", "text", "via link"), want: "wrote 8 bytes to link.txt"},
		{tool: ReadFileName, input: input("path", "real.txt"), want: "via link"},
		{tool: WriteFileName, input: input("path", "dirlink/new.txt", "text", "new"), want: "wrote 3 bytes to dirlink/new.txt"},
		{tool: ReadFileName, input: input("path", "sub/new.txt"), want: "new"},
	})
	if fi, err := os.Lstat(filepath.Join(s.ws, "link.txt")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("link.txt is no longer a link: %v %v", fi, err)
	}
	s.untouched(t, before)
}

// TestSwapBetweenCheckAndUse swaps a path for a link to outside at the
// exact moment between write_file's checks and its write.
func TestSwapBetweenCheckAndUse(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, s sandbox)
		path  string
		swap  func(s sandbox) error
		check func(t *testing.T, s sandbox, res tool.Result)
	}{
		{
			name:  "file replaced by a link to a file outside",
			setup: func(t *testing.T, s sandbox) { s.write(t, "f", "old") },
			path:  "f",
			swap: func(s sandbox) error {
				p := filepath.Join(s.ws, "f")
				return errors.Join(os.Remove(p), os.Symlink(filepath.Join(s.outside, "secret"), p))
			},
			check: func(t *testing.T, s sandbox, res tool.Result) {
				// The rename replaces the link itself: the new text lands
				// in the workspace.
				if res.IsError {
					t.Errorf("%+v", res)
				}
				if b, err := os.ReadFile(filepath.Join(s.ws, "f")); err != nil || string(b) != "pwned" {
					t.Errorf("f = %q, %v", b, err)
				}
			},
		},
		{
			name:  "missing file replaced by a link to outside",
			path:  "f",
			swap:  func(s sandbox) error { return os.Symlink(filepath.Join(s.outside, "new"), filepath.Join(s.ws, "f")) },
			check: func(t *testing.T, s sandbox, res tool.Result) {},
		},
		{
			name: "folder replaced by a link to a folder outside",
			setup: func(t *testing.T, s sandbox) {
				if err := os.Mkdir(filepath.Join(s.ws, "d"), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			path: "d/secret",
			swap: func(s sandbox) error {
				d := filepath.Join(s.ws, "d")
				return errors.Join(os.Rename(d, d+".real"), os.Symlink(s.outside, d))
			},
			check: func(t *testing.T, s sandbox, res tool.Result) {
				// The write went to the folder that was checked, now
				// d.real, still in the workspace.
				if b, err := os.ReadFile(filepath.Join(s.ws, "d.real", "secret")); res.IsError || err != nil || string(b) != "pwned" {
					t.Errorf("%+v; d.real/secret = %q, %v", res, b, err)
				}
			},
		},
		{
			name: "link inside replaced by a link outside",
			setup: func(t *testing.T, s sandbox) {
				s.write(t, "real", "real")
				s.symlink(t, "real", "l")
			},
			path: "l",
			swap: func(s sandbox) error {
				p := filepath.Join(s.ws, "l")
				return errors.Join(os.Remove(p), os.Symlink("../outside/secret", p))
			},
			check: func(t *testing.T, s sandbox, res tool.Result) {
				if !res.IsError || !strings.Contains(res.Output, linkMsg) {
					t.Errorf("%+v, want a refusal", res)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			if tt.setup != nil {
				tt.setup(t, s)
			}
			before := s.snapshot(t)
			swapped := false
			w := writeFile{beforeWrite: func() {
				if err := tt.swap(s); err != nil {
					t.Errorf("swap: %v", err)
				}
				swapped = true
			}}
			res, err := w.Call(context.Background(), tool.Call{Name: WriteFileName, Input: input("path", tt.path, "text", "pwned"), Workspace: s.ws})
			if err != nil {
				t.Fatalf("Go error: %v", err)
			}
			if !swapped {
				t.Fatalf("the swap never ran: %+v", res)
			}
			tt.check(t, s, res)
			s.untouched(t, before)
		})
	}
}

// TestSwapRace flips a folder between a real folder and a link to outside
// as fast as it can while the tools write and read through it: however the
// race falls, nothing appears or changes outside, and nothing outside is
// ever read.
func TestSwapRace(t *testing.T) {
	r := registry(t)
	s := newSandbox(t)
	before := s.snapshot(t)
	d := filepath.Join(s.ws, "d")

	stop := make(chan struct{})
	var flips, calls atomic.Int64
	var wg sync.WaitGroup
	stopFlipping := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopFlipping()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Errors are expected: the tools create d too. Each state is
			// held until the next call ends, so that flips fall at random
			// points inside calls and calls run in both states.
			os.RemoveAll(d)
			os.Mkdir(d, 0o700)
			hold(&calls, stop)
			os.RemoveAll(d)
			os.Symlink(s.outside, d)
			hold(&calls, stop)
			flips.Add(1)
		}
	})

	const rounds = 1000
	var wrote, refused, throughLink int
	for i := range rounds {
		for _, p := range []string{"d/secret", "d/new", "d/sub/secret", "d/a/b/new"} {
			res := r.Execute(context.Background(), tool.Call{Name: WriteFileName, Input: input("path", p, "text", "pwned"), Workspace: s.ws})
			calls.Add(1)
			if res.IsError {
				refused++
				if strings.Contains(res.Output, linkMsg) {
					throughLink++
				}
			} else {
				wrote++
			}
		}
		for _, p := range []string{"d/secret", "d/sub/secret"} {
			res := r.Execute(context.Background(), tool.Call{Name: ReadFileName, Input: input("path", p), Workspace: s.ws})
			calls.Add(1)
			if strings.Contains(res.Output, sentinel) {
				t.Fatalf("round %d: read %s outside the workspace: %+v", i, p, res)
			}
		}
		res := r.Execute(context.Background(), tool.Call{Name: ListFilesName, Input: input("path", "d"), Workspace: s.ws})
		calls.Add(1)
		if strings.Contains(res.Output, onlyOutside) {
			t.Fatalf("round %d: listed the folder outside the workspace: %+v", i, res)
		}
	}
	stopFlipping()
	t.Logf("%d flips; %d writes done, %d refused (%d for the link)", flips.Load(), wrote, refused, throughLink)
	// Each state lasts at least until a call ends, so both happen: if not,
	// the test did not test the race.
	if wrote == 0 || throughLink == 0 {
		t.Errorf("the race was not exercised: %d writes done, %d refused for the link", wrote, throughLink)
	}
	s.untouched(t, before)
}

// hold waits until *calls has moved on, or stop is closed.
func hold(calls *atomic.Int64, stop <-chan struct{}) {
	seen := calls.Load()
	for calls.Load() == seen {
		select {
		case <-stop:
			return
		default:
			runtime.Gosched()
		}
	}
}

// TestEscapeErrorText guards the text fsFailure recognises os.Root's
// escape error by.
func TestEscapeErrorText(t *testing.T) {
	s := newSandbox(t)
	s.symlink(t, "../outside", "out")
	root, err := os.OpenRoot(s.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, name := range []string{"../x", "out/secret", "/x"} {
		_, err := root.Open(name)
		if err == nil || innermost(err).Error() != escapeText {
			t.Errorf("Open(%q): %v, want %q", name, err, escapeText)
		}
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ws := filepath.Join(t.TempDir(), "ws")
	for _, tl := range Tools() {
		in := input("path", "f", "text", "x")
		if tl.Spec().Name != WriteFileName {
			in = input("path", "f")
		}
		if _, err := tl.Call(ctx, tool.Call{Name: tl.Spec().Name, Input: in, Workspace: ws}); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", tl.Spec().Name, err)
		}
	}
	if _, err := os.Stat(ws); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cancelled call created the workspace: %v", err)
	}
}
