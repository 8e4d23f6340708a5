// Package workspace provides the workspace tools of docs/tools.md — list_files,
// read_file and write_file — which let a model keep files in its session's
// folder (tool.Call.Workspace) and nowhere else.
//
// The folder is the only thing these tools may touch, whatever path the
// model sends: every access goes through an [os.Root] opened on it, so an
// absolute path, a ".." that climbs out, or a symbolic link pointing
// outside (even one swapped in while a call runs) is refused by the kernel
// walk os.Root performs (openat with O_NOFOLLOW, one component at a time),
// not by a string check that a race could defeat. The string checks done
// first only exist to give the model a clearer reason.
//
// Every refusal or failure is an error result (tool.Result.IsError) whose
// text tells the model what to change; a Go error is only returned when the
// call's context ends. File system errors never name the server's own
// paths: the model and the client have no business knowing where
// workspaces live.
//
// Not covered by os.Root, hence not by this package: hard links and bind
// mounts placed inside a workspace by someone with access to the server's
// file system (a hard link is the file itself, not a pointer to check).
// The tools themselves never create links.
package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/reinhq/rein/tool"
)

// Tool names.
const (
	ListFilesName = "list_files"
	ReadFileName  = "read_file"
	WriteFileName = "write_file"
)

// MaxFileSize is the largest file read_file returns and write_file writes,
// in bytes (1 MiB).
const MaxFileSize = 1 << 20

// MaxEntries bounds what list_files returns, so one huge folder cannot
// flood the model's context.
const MaxEntries = 1000

// Permissions of what the tools create: a workspace holds the user's data.
const (
	dirPerm  = 0o700
	filePerm = 0o600
)

// Tools returns a fresh instance of each workspace tool: list_files,
// read_file and write_file (which needs confirmation by default).
func Tools() []tool.Tool { return []tool.Tool{ListFiles(), ReadFile(), WriteFile()} }

// ListFiles returns the list_files tool: {"path"?: string} → the entries
// directly under path (default the workspace itself), sorted, one per line,
// folders ending in "/". A symbolic link is shown as what it points to
// when that is a folder in the workspace, as a plain name otherwise.
func ListFiles() tool.Tool { return listFiles{} }

// ReadFile returns the read_file tool: {"path": string} → the file's text.
// Files over MaxFileSize, and files that are not UTF-8 text, are refused.
func ReadFile() tool.Tool { return readFile{} }

// WriteFile returns the write_file tool: {"path": string, "text": string}
// → creates or replaces the file, creating folders as needed. It needs
// confirmation by default (Spec.Confirm).
//
// A file is replaced atomically: the text goes to a temporary file in the
// same folder, which is synced and then renamed over the old one, so a
// reader (or a crash) sees the old text or the new, never a mix. A
// replaced file keeps its permissions; a new one is private (0600). When
// the path names a symbolic link (to a file in the workspace), the linked
// file is rewritten in place instead, so the link stays a link.
func WriteFile() tool.Tool { return writeFile{} }

var listSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Folder to list, relative to the workspace (default: the workspace itself)."}
  },
  "additionalProperties": false
}`)

var readSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File to read, relative to the workspace."}
  },
  "required": ["path"],
  "additionalProperties": false
}`)

var writeSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File to create or replace, relative to the workspace; missing folders are created."},
    "text": {"type": "string", "description": "The file's new content (at most 1 MiB)."}
  },
  "required": ["path", "text"],
  "additionalProperties": false
}`)

type listFiles struct{}

func (listFiles) Spec() tool.Spec {
	return tool.Spec{
		Name:        ListFilesName,
		Description: "List the files and folders in a folder of this conversation's workspace, one per line; folder names end with '/'.",
		InputSchema: listSchema,
	}
}

func (listFiles) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return failf("invalid input: %v", err), nil
	}
	if in.Path == "" {
		in.Path = "."
	}
	name, res, ok := clean(in.Path)
	if !ok {
		return res, nil
	}
	root, res, ok := open(ctx, call.Workspace)
	if !ok {
		return res, context.Cause(ctx)
	}
	defer root.Close()

	dir, err := root.OpenFile(name, readFlags, 0)
	if err != nil {
		return fsFailure(in.Path, "list", err), nil
	}
	defer dir.Close()
	fi, err := dir.Stat()
	if err != nil {
		return fsFailure(in.Path, "list", err), nil
	}
	if !fi.IsDir() {
		return failf("%s is a file, not a folder: use %s to read it", quote(in.Path), ReadFileName), nil
	}
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fsFailure(in.Path, "list", err), nil
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var b strings.Builder
	for i, e := range entries {
		if i == MaxEntries {
			fmt.Fprintf(&b, "… and %d more entries\n", len(entries)-MaxEntries)
			break
		}
		if i%64 == 0 && ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			// Resolved through the root: a link that points outside is
			// simply not a folder here, and nothing outside is looked at.
			t, err := root.Stat(filepath.Join(name, e.Name()))
			isDir = err == nil && t.IsDir()
		}
		b.WriteString(e.Name())
		if isDir {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return tool.Result{Output: "(empty folder)"}, nil
	}
	return tool.Result{Output: strings.TrimSuffix(b.String(), "\n")}, nil
}

type readFile struct{}

func (readFile) Spec() tool.Spec {
	return tool.Spec{
		Name:        ReadFileName,
		Description: "Read a text file (UTF-8, at most 1 MiB) from this conversation's workspace.",
		InputSchema: readSchema,
	}
}

func (readFile) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return failf("invalid input: %v", err), nil
	}
	name, res, ok := clean(in.Path)
	if !ok {
		return res, nil
	}
	root, res, ok := open(ctx, call.Workspace)
	if !ok {
		return res, context.Cause(ctx)
	}
	defer root.Close()

	// Everything below is about the opened file, never the name again, so
	// a swap after the open changes nothing.
	f, err := root.OpenFile(name, readFlags, 0)
	if err != nil {
		return fsFailure(in.Path, "read", err), nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsFailure(in.Path, "read", err), nil
	}
	switch {
	case fi.IsDir():
		return failf("%s is a folder, not a file: use %s to see what it holds", quote(in.Path), ListFilesName), nil
	case !fi.Mode().IsRegular():
		return failf("%s is not a regular file", quote(in.Path)), nil
	case fi.Size() > MaxFileSize:
		return tooLarge(in.Path, fi.Size()), nil
	}
	// The file may grow after the Stat: read one byte past the limit.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return fsFailure(in.Path, "read", err), nil
	}
	if len(data) > MaxFileSize {
		return tooLarge(in.Path, int64(len(data))), nil
	}
	if !utf8.Valid(data) {
		return failf("%s is not UTF-8 text; %s only reads text files", quote(in.Path), ReadFileName), nil
	}
	return tool.Result{Output: string(data)}, nil
}

func tooLarge(path string, size int64) tool.Result {
	return failf("%s is too large (%s bytes): %s reads files of at most 1 MiB (%d bytes)",
		quote(path), strconv.FormatInt(size, 10), ReadFileName, MaxFileSize)
}

type writeFile struct {
	// beforeWrite, when set (tests only), runs after the path has been
	// resolved and checked and before anything is written: the window a
	// TOCTOU swap would aim for.
	beforeWrite func()
}

func (writeFile) Spec() tool.Spec {
	return tool.Spec{
		Name:        WriteFileName,
		Description: "Create or replace a text file (at most 1 MiB) in this conversation's workspace; missing folders are created.",
		InputSchema: writeSchema,
		Confirm:     true,
	}
}

func (w writeFile) Call(ctx context.Context, call tool.Call) (tool.Result, error) {
	var in struct {
		Path string `json:"path"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(call.Input, &in); err != nil {
		return failf("invalid input: %v", err), nil
	}
	if len(in.Text) > MaxFileSize {
		return failf("text is too large (%d bytes): %s writes files of at most 1 MiB (%d bytes)", len(in.Text), WriteFileName, MaxFileSize), nil
	}
	name, res, ok := clean(in.Path)
	if !ok {
		return res, nil
	}
	if name == "." || strings.HasSuffix(in.Path, "/") {
		return failf("%s names a folder; give the path of a file", quote(in.Path)), nil
	}
	root, res, ok := open(ctx, call.Workspace)
	if !ok {
		return res, context.Cause(ctx)
	}
	defer root.Close()

	dirName, base := filepath.Split(name)
	dirName = filepath.Clean(dirName) // "." at the top
	if dirName != "." {
		if err := root.MkdirAll(dirName, dirPerm); err != nil {
			if errors.Is(innermost(err), fs.ErrExist) {
				// What exists on the way is not a folder.
				err = syscall.ENOTDIR
			}
			return fsFailure(in.Path, "create the folders of", err), nil
		}
	}
	// Work inside the parent folder's own root: it holds the folder itself
	// (a descriptor), so the folder being renamed or replaced by a link
	// from now on cannot redirect the temporary file or the rename.
	dir, err := root.OpenRoot(dirName)
	if err != nil {
		return fsFailure(in.Path, "write", err), nil
	}
	defer dir.Close()
	if err := ctx.Err(); err != nil {
		return tool.Result{}, context.Cause(ctx)
	}

	fi, err := dir.Lstat(base)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fi = nil
	case err != nil:
		return fsFailure(in.Path, "write", err), nil
	case fi.IsDir():
		return failf("%s is a folder; give the path of a file", quote(in.Path)), nil
	case fi.Mode()&fs.ModeSymlink != 0:
		if w.beforeWrite != nil {
			w.beforeWrite()
		}
		return writeThrough(root, name, in.Path, in.Text), nil
	case !fi.Mode().IsRegular():
		return failf("%s is not a regular file; it cannot be replaced", quote(in.Path)), nil
	}
	if w.beforeWrite != nil {
		w.beforeWrite()
	}
	perm := os.FileMode(filePerm)
	if fi != nil {
		perm = fi.Mode().Perm()
	}
	if err := replace(dir, base, in.Text, perm); err != nil {
		return fsFailure(in.Path, "write", err), nil
	}
	return wrote(in.Text, in.Path), nil
}

func wrote(text, path string) tool.Result {
	return tool.Result{Output: fmt.Sprintf("wrote %d bytes to %s", len(text), path)}
}

// replace writes text to a temporary file in dir and renames it to base.
// Both names are single components of dir, so nothing is resolved again.
func replace(dir *os.Root, base, text string, perm os.FileMode) (err error) {
	var f *os.File
	var tmp string
	for range 10 {
		tmp = "." + base + ".tmp-" + strconv.FormatUint(rand.Uint64(), 36)
		f, err = dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			dir.Remove(tmp)
		}
	}()
	if _, err = f.WriteString(text); err != nil {
		return err
	}
	if perm != filePerm {
		// Through the descriptor: a name-based Chmod would follow a link.
		if err = f.Chmod(perm); err != nil {
			return err
		}
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return dir.Rename(tmp, base)
}

// writeThrough rewrites, in place, the file a symbolic link at name points
// to. The root resolves the link and refuses it if it leads outside.
func writeThrough(root *os.Root, name, path, text string) tool.Result {
	if fi, err := root.Stat(name); err == nil && fi.IsDir() {
		return failf("%s is a folder; give the path of a file", quote(path))
	}
	f, err := root.OpenFile(name, writeThroughFlags, filePerm)
	if err != nil {
		return fsFailure(path, "write", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return fsFailure(path, "write", err)
		}
		return failf("%s is not a regular file; it cannot be replaced", quote(path))
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsFailure(path, "write", err)
	}
	return wrote(text, path)
}

// clean checks a path the model sent and returns it in the form os.Root
// takes. The reasons given here are for the model; os.Root enforces the
// same (and more: links) on its own.
func clean(path string) (string, tool.Result, bool) {
	p := filepath.FromSlash(path)
	if strings.ContainsRune(path, 0) {
		return "", failf("path must not contain a NUL character"), false
	}
	if filepath.IsAbs(p) || strings.HasPrefix(path, "/") || strings.HasPrefix(path, `\`) || filepath.VolumeName(p) != "" {
		return "", failf("path must be relative to the workspace, got %s", quote(path)), false
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator)) {
		return "", failf("path leaves the workspace: %s climbs above it with \"..\"", quote(path)), false
	}
	if !filepath.IsLocal(c) && c != "." {
		return "", failf("path %s is not allowed in the workspace", quote(path)), false
	}
	return c, tool.Result{}, true
}

// open creates the session's folder if needed and opens it as a root.
// When ok is false, res is the result to return (and a Go error is due
// only if ctx has ended).
func open(ctx context.Context, workspace string) (root *os.Root, res tool.Result, ok bool) {
	if workspace == "" {
		return nil, failf("no workspace configured"), false
	}
	if ctx.Err() != nil {
		return nil, tool.Result{}, false
	}
	// The workspace path comes from the runtime, not the model: following
	// links in it is fine.
	if err := os.MkdirAll(workspace, dirPerm); err != nil {
		return nil, failf("cannot create the workspace: %v", innermost(err)), false
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, failf("cannot open the workspace: %v", innermost(err)), false
	}
	return root, tool.Result{}, true
}

// escapeText is the text of os's (unexported) error for a path that
// resolves outside a Root. Matching its text is the only way to tell it
// apart; TestEscapeErrorText fails if a Go release changes it.
const escapeText = "path escapes from parent"

// fsFailure turns a file system error on path into a result the model can
// act on, without the server's paths.
func fsFailure(path, verb string, err error) tool.Result {
	e := innermost(err)
	switch {
	case e.Error() == escapeText:
		return failf("path leaves the workspace: %s goes through a symbolic link that points outside it", quote(path))
	case errors.Is(e, syscall.ELOOP):
		return failf("cannot %s %s: too many symbolic links", verb, quote(path))
	case errors.Is(e, fs.ErrNotExist):
		return failf("%s does not exist", quote(path))
	case errors.Is(e, syscall.ENOTDIR):
		return failf("cannot %s %s: a part of the path is a file, not a folder", verb, quote(path))
	case errors.Is(e, syscall.EISDIR):
		return failf("%s is a folder; give the path of a file", quote(path))
	case errors.Is(e, fs.ErrPermission):
		return failf("cannot %s %s: permission denied", verb, quote(path))
	}
	return failf("cannot %s %s: %v", verb, quote(path), e)
}

// innermost strips the path and link errors wrapping a system error: their
// paths are the server's.
func innermost(err error) error {
	for {
		var pe *fs.PathError
		var le *os.LinkError
		switch {
		case errors.As(err, &pe):
			err = pe.Err
		case errors.As(err, &le):
			err = le.Err
		default:
			return err
		}
	}
}

func quote(path string) string { return strconv.Quote(path) }

func failf(format string, args ...any) tool.Result {
	return tool.Result{Output: fmt.Sprintf(format, args...), IsError: true}
}
