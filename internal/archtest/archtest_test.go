package archtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

const module = "github.com/reinhq/rein"

// row is one row of the table: the packages it covers and what they may
// import of Rein's own packages.
type row struct {
	line     int
	patterns []string // module-relative: "" is the root, "x/*" is every package below x
	allowed  []string // same form
	any      bool     // "everything"
	// stdOnly: the row says "standard library only": what the packages
	// pull in, transitively, is the standard library and the packages of
	// Rein the row allows (whose own rows say the same).
	stdOnly bool
}

// pkg is what `go list` says of one package of the module.
type pkg struct {
	path    string   // module-relative
	imports []string // full import paths, not test-only ones
	deps    []string // everything it pulls in, transitively
}

// forbidden is the document's paragraph under the table, as data: packages
// matching from may not depend on (directly or through anything they
// import) an import path with one of the prefixes in to.
var forbidden = []struct {
	from []string
	to   []string
	why  string
}{
	{[]string{"agent", "run"}, []string{"net/http", "database/sql", "github.com/jackc/pgx", "modernc.org/sqlite"},
		"nothing in agent or run imports HTTP or SQL"},
	{[]string{"store", "store/*"}, []string{module + "/agent", module + "/run", module + "/sessions", module + "/subagent", module + "/server"},
		"storage knows nothing of agents' control flow or of the service above it"},
}

func TestImportsMatchArchitectureDoc(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parseTable(string(doc))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	pkgs := listPackages(t, root)
	for _, v := range check(rows, pkgs) {
		t.Error(v)
	}
	for _, r := range rows {
		if !r.coversAny(pkgs) {
			// Not an error: another change may be adding the package.
			t.Logf("docs/architecture.md:%d: no package matches %v", r.line, r.patterns)
		}
	}
}

// TestCheckFindsViolations: the checker itself reports each kind of
// mismatch, so the test above can fail.
func TestCheckFindsViolations(t *testing.T) {
	rows, err := parseTable(strings.Join([]string{
		"| package | why it exists | may import (of Rein's packages) |",
		"|---|---|---|",
		"| `rein` (root) | vocabulary | `internal/jsonx` (standard library only) |",
		"| `internal/jsonx` | JSON | nothing (standard library only) |",
		"| `run` | handles | `rein` |",
		"| `store`, `store/*` | storage | `rein` |",
		"| `agent` | loop | `rein`, `run` (outcomes) |",
		"| `cmd/rein` | command line | everything |",
	}, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := []pkg{
		{path: "", imports: []string{"fmt", module + "/internal/jsonx"}, deps: []string{"fmt", "github.com/acme/x", module + "/internal/jsonx"}},
		{path: "internal/jsonx", imports: []string{"bytes"}, deps: []string{"bytes", module + "/run"}},
		{path: "run", imports: []string{module}, deps: []string{module}},
		{path: "store", imports: []string{module}},
		{path: "store/sqlite", imports: []string{module, module + "/store", module + "/agent"}, deps: []string{module + "/agent"}},
		{path: "agent", imports: []string{module, module + "/run", module + "/store"}, deps: []string{"net/http"}},
		{path: "cmd/rein", imports: []string{module + "/agent", module + "/store/sqlite"}},
		{path: "newpkg", imports: []string{module}},
	}
	got := strings.Join(check(rows, pkgs), "\n")
	for _, want := range []string{
		"root package depends on github.com/acme/x",
		"internal/jsonx depends on github.com/reinhq/rein/run: its row (line 4) allows the standard library only",
		"store/sqlite imports github.com/reinhq/rein/agent, which its row (line 6) does not allow",
		"store/sqlite depends on github.com/reinhq/rein/agent: storage knows nothing",
		"agent imports github.com/reinhq/rein/store, which its row (line 7) does not allow",
		"agent depends on net/http: nothing in agent or run imports HTTP or SQL",
		"newpkg is not in the table",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations do not say %q:\n%s", want, got)
		}
	}
	for _, v := range strings.Split(got, "\n") {
		for _, fine := range []string{"run ", "cmd/rein ", "store ", "root package depends on github.com/reinhq/rein/internal/jsonx"} {
			if strings.HasPrefix(v, fine) {
				t.Errorf("allowed, but reported: %s", v)
			}
		}
	}
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseTable reads the table whose header starts with "| package |" and
// whose third column says what may be imported.
func parseTable(doc string) ([]row, error) {
	var rows []row
	in := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !in {
			in = strings.HasPrefix(line, "| package |") && strings.Contains(line, "may import")
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			return nil, fmt.Errorf("line %d: want 3 cells, got %d", n, len(cells))
		}
		if strings.Trim(cells[0], " -:") == "" {
			continue // the separator row
		}
		r := row{line: n}
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.patterns = append(r.patterns, relative(m[1]))
		}
		may := cells[2]
		r.stdOnly = strings.Contains(may, "standard library only")
		switch {
		case strings.Contains(may, "everything"):
			r.any = true
		case strings.HasPrefix(strings.TrimSpace(may), "nothing"):
		default:
			for _, m := range backticked.FindAllStringSubmatch(may, -1) {
				r.allowed = append(r.allowed, relative(m[1]))
			}
			if len(r.allowed) == 0 {
				return nil, fmt.Errorf("line %d: the third cell names no package and says neither \"nothing\" nor \"everything\"", n)
			}
		}
		if len(r.patterns) == 0 {
			return nil, fmt.Errorf("line %d: the first cell names no package", n)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf(`no table with the header "| package | why it exists | may import … |"`)
	}
	return rows, nil
}

// relative turns a name as the document writes it into a module-relative
// path: `rein` is the root.
func relative(name string) string {
	if name == "rein" {
		return ""
	}
	return name
}

// match reports whether the module-relative path p matches pattern, and
// how specifically (longer is more specific; an exact match beats a glob).
func match(pattern, p string) (int, bool) {
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if strings.HasPrefix(p, prefix+"/") {
			return len(prefix), true
		}
		return 0, false
	}
	if pattern == p {
		return 1 << 20, true
	}
	return 0, false
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if _, ok := match(pat, p); ok {
			return true
		}
	}
	return false
}

// rowOf is the most specific row covering p.
func rowOf(rows []row, p string) *row {
	var best *row
	bestScore := -1
	for i := range rows {
		for _, pat := range rows[i].patterns {
			if score, ok := match(pat, p); ok && score > bestScore {
				best, bestScore = &rows[i], score
			}
		}
	}
	return best
}

func (r row) coversAny(pkgs []pkg) bool {
	for _, p := range pkgs {
		if matchAny(r.patterns, p.path) {
			return true
		}
	}
	return false
}

func name(p string) string {
	if p == "" {
		return "root package"
	}
	return p
}

// check lists every way pkgs disagree with rows and with the forbidden
// dependencies.
func check(rows []row, pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		r := rowOf(rows, p.path)
		if r == nil {
			out = append(out, fmt.Sprintf("%s is not in the table of docs/architecture.md: add a row (why it exists, what it may import)", name(p.path)))
			continue
		}
		for _, imp := range p.imports {
			rel, ours := strings.CutPrefix(imp, module)
			if !ours || (rel != "" && !strings.HasPrefix(rel, "/")) {
				continue
			}
			rel = strings.TrimPrefix(rel, "/")
			if r.any || matchAny(r.patterns, rel) || matchAny(r.allowed, rel) {
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s, which its row (line %d) does not allow: allow it in docs/architecture.md if the design wants it, or drop the import", name(p.path), imp, r.line))
		}
		if r.stdOnly {
			for _, d := range p.deps {
				if rel, ours := strings.CutPrefix(d, module+"/"); standard(d) || ours && matchAny(r.allowed, rel) {
					continue
				}
				if p.path == "" {
					out = append(out, fmt.Sprintf("root package depends on %s: the root is vocabulary, standard library only", d))
				} else {
					out = append(out, fmt.Sprintf("%s depends on %s: its row (line %d) allows the standard library only", name(p.path), d, r.line))
				}
			}
		}
		for _, f := range forbidden {
			if !matchAny(f.from, p.path) {
				continue
			}
			for _, d := range p.deps {
				for _, bad := range f.to {
					if d == bad || strings.HasPrefix(d, bad+"/") {
						out = append(out, fmt.Sprintf("%s depends on %s: %s", name(p.path), d, f.why))
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// standard reports whether an import path is the standard library's: its
// first element has no dot (as the go command decides).
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// listPackages runs `go list` over the module (its non-test imports only:
// tests may use anything).
func listPackages(t *testing.T, root string) []pkg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}\t{{if .Error}}{{.Error}}{{end}}", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		if f[3] != "" {
			// A package that does not load (someone is editing it) has
			// partial imports; the build of that package reports it.
			t.Logf("go list: %s: %s", f[0], f[3])
		}
		rel, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		pkgs = append(pkgs, pkg{path: strings.TrimPrefix(rel, "/"), imports: strings.Fields(f[1]), deps: strings.Fields(f[2])})
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}
