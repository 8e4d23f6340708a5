package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// --- Dockerfile ---

// goMinor is go.mod's language version as major.minor ("1.26").
func goMinor(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readFile(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return m[1]
}

// buildOutput is where the build stage's `go build -o` writes the binary.
func buildOutput(build Stage) string {
	for _, in := range build.All("RUN") {
		if strings.Contains(in.Args, "go build") {
			if m := regexp.MustCompile(`-o\s+(\S+)`).FindStringSubmatch(in.Args); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

// TestDockerfile holds the Dockerfile to the rules of the image the README
// describes. (No Docker daemon runs in CI, so the file is read, not built.)
func TestDockerfile(t *testing.T) {
	stages, err := ParseDockerfile(readFile(t, "Dockerfile"))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, p := range dockerfileProblems(stages, goMinor(t)) {
		t.Error(p)
	}
}

// TestDockerfileRulesCatchMistakes: each rule fires on a Dockerfile that
// breaks it.
func TestDockerfileRulesCatchMistakes(t *testing.T) {
	single, err := ParseDockerfile("FROM golang:1.25\nRUN go build -o /rein ./cmd/rein\nCMD [\"/rein\", \"serve\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := dockerfileProblems(single, "1.26"); len(got) != 1 || !strings.Contains(got[0], "stage") {
		t.Errorf("a single stage: %q", got)
	}
	bad, err := ParseDockerfile(`FROM golang:1.25 AS build
RUN go build -o /out/rein ./cmd/rein
FROM alpine:3.22
COPY --from=build /out/rein /usr/local/bin/rein
USER root
ENV REIN_STORE=sqlite:./rein.db
ENTRYPOINT rein serve
`)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(dockerfileProblems(bad, "1.26"), "\n")
	for _, want := range []string{"go.mod's go 1.26", "lacks \"CGO_ENABLED=0\"", "no CA certificates", "USER root is root",
		"no VOLUME /data", "no EXPOSE 8080", "HEALTHCHECK", "REIN_STORE=\"sqlite:./rein.db\"", "REIN_WORKSPACE", "REIN_ADDR", "ENTRYPOINT", "CMD"} {
		if !strings.Contains(got, want) {
			t.Errorf("the problems do not mention %q:\n%s", want, got)
		}
	}
}

// dockerfileProblems lists how a Dockerfile's stages break the image's rules.
func dockerfileProblems(stages []Stage, goMinor string) []string {
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(stages) < 2 {
		return []string{fmt.Sprintf("Dockerfile: %d stage(s); want a build stage and a small final one", len(stages))}
	}
	build, final := stages[0], stages[len(stages)-1]
	out := buildOutput(build)

	// The build stage: the Go of go.mod, a static binary of ./cmd/rein.
	img, tag, _ := strings.Cut(build.Image, ":")
	if img != "golang" {
		errorf("Dockerfile:%d: the build stage is %s; want a golang image", build.Line, build.Image)
	}
	if minor := goMinor; !(tag == minor || strings.HasPrefix(tag, minor+".") || strings.HasPrefix(tag, minor+"-")) {
		errorf("Dockerfile:%d: %s does not match go.mod's go %s", build.Line, build.Image, minor)
	}
	var buildRun Instruction
	for _, in := range build.All("RUN") {
		if strings.Contains(in.Args, "go build") {
			buildRun = in
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/rein", "-o "} {
		if !strings.Contains(buildRun.Args, want) {
			errorf("Dockerfile: the build stage's `go build` (line %d: %q) lacks %q: the image needs a static binary of ./cmd/rein", buildRun.Line, buildRun.Args, want)
		}
	}

	// The final stage: small, with the binary from the build stage.
	if strings.HasPrefix(final.Image, "golang") {
		errorf("Dockerfile:%d: the final stage is %s; want a minimal base", final.Line, final.Image)
	}
	from := build.Name
	if from == "" {
		from = "0"
	}
	copied := false
	for _, in := range final.All("COPY") {
		w := in.Words()
		copied = copied || (slices.Contains(w, "--from="+from) && out != "" && slices.Contains(w, out))
	}
	if !copied {
		errorf("Dockerfile: the final stage does not COPY --from=%s the binary %q", from, out)
	}
	caOK := strings.HasPrefix(final.Image, "gcr.io/distroless/")
	for _, in := range final.All("RUN") {
		caOK = caOK || strings.Contains(in.Args, "ca-certificates")
	}
	if !caOK {
		errorf("Dockerfile:%d: the final stage has no CA certificates (HTTPS providers and PostgreSQL over TLS need them)", final.Line)
	}

	// It runs as a non-root user.
	if u, ok := final.Last("USER"); !ok {
		errorf("Dockerfile: the final stage has no USER: it would run as root")
	} else if user, _, _ := strings.Cut(u.Args, ":"); user == "root" || user == "0" || user == "" {
		errorf("Dockerfile:%d: USER %s is root", u.Line, u.Args)
	}

	// Its data is in the /data volume; it listens on 8080 on every
	// interface; /healthz is its health check.
	hasVolume := false
	for _, in := range final.All("VOLUME") {
		hasVolume = hasVolume || slices.Contains(in.Words(), "/data")
	}
	if !hasVolume {
		errorf("Dockerfile: no VOLUME /data")
	}
	exposed := false
	for _, in := range final.All("EXPOSE") {
		for _, w := range in.Words() {
			exposed = exposed || w == "8080" || w == "8080/tcp"
		}
	}
	if !exposed {
		errorf("Dockerfile: no EXPOSE 8080")
	}
	if hc, ok := final.Last("HEALTHCHECK"); !ok || !strings.Contains(hc.Args, "/healthz") || !strings.Contains(hc.Args, ":8080") {
		errorf("Dockerfile: want a HEALTHCHECK of /healthz on port 8080, got %q", hc.Args)
	}
	env := final.Env()
	if v := env["REIN_STORE"]; !strings.HasPrefix(v, "sqlite:/data/") {
		errorf("Dockerfile: REIN_STORE=%q; want the SQLite database in the /data volume", v)
	}
	if v := env["REIN_WORKSPACE"]; !strings.HasPrefix(v, "/data/") {
		errorf("Dockerfile: REIN_WORKSPACE=%q; want the session folders in the /data volume", v)
	}
	if v := env["REIN_ADDR"]; v != "0.0.0.0:8080" {
		errorf("Dockerfile: REIN_ADDR=%q; want 0.0.0.0:8080", v)
	}
	ep, ok := final.Last("ENTRYPOINT")
	if w := ep.Words(); !ok || !strings.HasPrefix(ep.Args, "[") || len(w) == 0 || path.Base(w[0]) != "rein" {
		errorf("Dockerfile: ENTRYPOINT %q; want the exec form running rein (so it gets SIGTERM itself)", ep.Args)
	}
	if cmd, ok := final.Last("CMD"); !ok || len(cmd.Words()) == 0 || cmd.Words()[0] != "serve" {
		errorf("Dockerfile: CMD %q; want serve", cmd.Args)
	}
	return problems
}

// TestCmdReinBuildsWithoutCgo: the image's CGO_ENABLED=0 build needs every
// package rein uses to build without cgo (the SQLite driver is pure Go);
// with cgo off, the go command links a static binary.
func TestCmdReinBuildsWithoutCgo(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}", "./cmd/rein")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("with CGO_ENABLED=0 these packages of ./cmd/rein do not build:\n%s", s)
	}
}

// --- .dockerignore ---

// ignored reports whether the build context leaves out rel (slash
// separated) under .dockerignore's patterns: the last matching pattern
// decides, "!" re-includes, and a pattern that matches a folder leaves out
// all of it.
func ignored(patterns []string, rel string) bool {
	out := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
		re := globRegexp(strings.TrimSuffix(p, "/"))
		for cand := rel; ; {
			if re.MatchString(cand) {
				out = !neg
				break
			}
			i := strings.LastIndex(cand, "/")
			if i < 0 {
				break
			}
			cand = cand[:i]
		}
	}
	return out
}

// globRegexp turns a .dockerignore pattern into a regexp: ** is any number
// of folders, * and ? stay within one.
func globRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case p[i] == '*':
			b.WriteString("[^/]*")
		case p[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func TestDockerignore(t *testing.T) {
	var patterns []string
	for _, line := range strings.Split(readFile(t, ".dockerignore"), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	// What the build needs, .git included: the binary records the revision
	// it was built from.
	for _, keep := range []string{"go.mod", "go.sum", "cmd/rein/main.go", "model/scripted/demo.yaml", "store/sqlite", ".git/HEAD", "Dockerfile"} {
		if ignored(patterns, keep) {
			t.Errorf(".dockerignore leaves out %s, which the image's build needs", keep)
		}
	}
	// Secrets and a local server's data never enter the context.
	for _, drop := range []string{"tokens", ".env", "rein.db", "rein.db-wal", "rein.db.lock", "rein-workspace/ses_1/note.txt", "rein", "console/node_modules/x/index.js"} {
		if !ignored(patterns, drop) {
			t.Errorf(".dockerignore lets %s into the build context", drop)
		}
	}
}

func TestIgnoredMatchesDockerRules(t *testing.T) {
	for _, tc := range []struct {
		patterns []string
		path     string
		want     bool
	}{
		{[]string{"/rein-workspace/"}, "rein-workspace/a/b", true},
		{[]string{"*.test"}, "x.test", true},
		{[]string{"*.test"}, "pkg/x.test", false}, // * does not cross folders at the root
		{[]string{"**/node_modules/"}, "a/b/node_modules/c", true},
		{[]string{"**/node_modules/"}, "node_modules/c", true},
		{[]string{"docs", "!docs/api.md"}, "docs/api.md", false},
		{[]string{"/rein"}, "cmd/rein/main.go", false},
	} {
		if got := ignored(tc.patterns, tc.path); got != tc.want {
			t.Errorf("ignored(%q, %q) = %v, want %v", tc.patterns, tc.path, got, tc.want)
		}
	}
}

// --- compose.yaml ---

// TestCompose: two rein instances on one PostgreSQL, as the README says:
// distinct instance ids, one tokens file, ports 8081 and 8082.
func TestCompose(t *testing.T) {
	var doc struct {
		Services map[string]struct {
			Image       string         `yaml:"image"`
			Build       any            `yaml:"build"`
			Command     []string       `yaml:"command"`
			Environment map[string]any `yaml:"environment"`
			Ports       []string       `yaml:"ports"`
			Secrets     []string       `yaml:"secrets"`
			DependsOn   map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
			Healthcheck     map[string]any `yaml:"healthcheck"`
			StopGracePeriod string         `yaml:"stop_grace_period"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "compose.yaml")), &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var pg string
	for name, s := range doc.Services {
		if strings.HasPrefix(s.Image, "postgres:") {
			pg = name
			if s.Healthcheck == nil {
				t.Errorf("compose.yaml: %s has no healthcheck: rein would start before it accepts connections", name)
			}
		}
	}
	if pg == "" {
		t.Fatal("compose.yaml: no postgres service")
	}
	ids := map[string]string{}
	var tokens []string
	var hostPorts []string
	for name, s := range doc.Services {
		if name == pg {
			continue
		}
		if s.Build != "." {
			t.Errorf("compose.yaml: %s is not built from this folder's Dockerfile (build: %v)", name, s.Build)
		}
		if len(s.Command) == 0 || s.Command[0] != "serve" {
			t.Errorf("compose.yaml: %s: command %v; want serve", name, s.Command)
		}
		id := flagValue(s.Command, "--instance-id")
		if id == "" {
			t.Errorf("compose.yaml: %s has no --instance-id", name)
		} else if other, dup := ids[id]; dup {
			t.Errorf("compose.yaml: %s and %s share the instance id %q", name, other, id)
		}
		ids[id] = name
		store := fmt.Sprint(s.Environment["REIN_STORE"])
		if !strings.HasPrefix(store, "postgres://") || !strings.Contains(store, "@"+pg+":") {
			t.Errorf("compose.yaml: %s: REIN_STORE=%q; want the %s service's database", name, store, pg)
		}
		tok := fmt.Sprint(s.Environment["REIN_TOKENS"])
		secret, ok := strings.CutPrefix(tok, "/run/secrets/")
		if !ok || !slices.Contains(s.Secrets, secret) || doc.Secrets[secret].File == "" {
			t.Errorf("compose.yaml: %s: REIN_TOKENS=%q is not a secret of the service with a file", name, tok)
		}
		tokens = append(tokens, tok)
		if d, ok := s.DependsOn[pg]; !ok || d.Condition != "service_healthy" {
			t.Errorf("compose.yaml: %s does not wait for %s to be healthy", name, pg)
		}
		if grace, err := time.ParseDuration(s.StopGracePeriod); err != nil || grace <= 10*time.Second {
			t.Errorf("compose.yaml: %s: stop_grace_period %q; want more than the 10 s drain", name, s.StopGracePeriod)
		}
		for _, p := range s.Ports {
			f := strings.Split(p, ":")
			if f[len(f)-1] != "8080" || len(f) < 2 {
				t.Errorf("compose.yaml: %s: port %q does not publish the container's 8080", name, p)
				continue
			}
			hostPorts = append(hostPorts, f[len(f)-2])
		}
	}
	if len(ids) != 2 {
		t.Errorf("compose.yaml: %d rein instances; want 2", len(ids))
	}
	slices.Sort(hostPorts)
	if !slices.Equal(hostPorts, []string{"8081", "8082"}) {
		t.Errorf("compose.yaml: host ports %v; want 8081 and 8082", hostPorts)
	}
	if len(tokens) == 2 && tokens[0] != tokens[1] {
		t.Errorf("compose.yaml: the instances read different tokens files %v; every instance needs the same", tokens)
	}
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
