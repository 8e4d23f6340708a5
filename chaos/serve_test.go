package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reinhq/rein/client"
)

// binDir holds the rein binary, built once for the whole package (on first
// use, so that a -run that selects nothing builds nothing).
var (
	binDir  string
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rein-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// reinBinary builds ./cmd/rein (without -race: the processes under test are
// killed, not inspected, and the race detector's slowdown would only skew
// the timing the scenarios rely on) and returns its path.
func reinBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("building rein needs the go command: %v", err)
			return
		}
		binPath = filepath.Join(binDir, "rein")
		if runtime.GOOS == "windows" {
			binPath += ".exe"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool, "build", "-o", binPath, "github.com/reinhq/rein/cmd/rein")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ./cmd/rein: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// script is the scripted model every server of the package runs.
func script(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "chaos.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// backend is a store that outlives the processes using it.
type backend struct {
	name string
	// spec returns the --store value of a fresh, empty store that lives
	// until the end of the test.
	spec func(t *testing.T) string
}

// backends are the stores every scenario runs on: an SQLite file always,
// PostgreSQL when REIN_TEST_POSTGRES_DSN is set.
func backends() []backend {
	bs := []backend{{name: "sqlite", spec: func(t *testing.T) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "rein.db")
	}}}
	if dsn := os.Getenv("REIN_TEST_POSTGRES_DSN"); dsn != "" {
		bs = append(bs, backend{name: "postgres", spec: func(t *testing.T) string { return pgSchema(t, dsn) }})
	} else {
		bs = append(bs, backend{name: "postgres", spec: func(t *testing.T) string {
			t.Skip("REIN_TEST_POSTGRES_DSN not set")
			return ""
		}})
	}
	return bs
}

var schemaSeq atomic.Int64

// pgSchema creates a schema of its own for the test and returns the DSN
// that selects it (search_path), the way an operator would point rein
// serve at one. The schema is dropped when the test ends; since cleanups
// run last-registered first, every server the test starts afterwards is
// killed before that.
func pgSchema(t testing.TB, dsn string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	defer conn.Close(context.Background())
	schema := fmt.Sprintf("chaos_test_%d_%d", time.Now().UnixNano(), schemaSeq.Add(1))
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("REIN_TEST_POSTGRES_DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// leaseTTL is the --lease-ttl of every server: short, so that a restarted
// server takes over the killed one's runs within about a second.
const leaseTTL = time.Second

// proc is one `rein serve` process.
type proc struct {
	name string
	cmd  *exec.Cmd
	url  string
	// client talks to the server as the owner of serveOptions.token (in
	// single-user mode, as owner "local").
	client *client.Client
	// workspace is the process's --workspace directory.
	workspace string
	stderr    *stderrBuffer
	// done is closed once the process has exited and been waited for.
	done chan struct{}
}

// serveOptions are what a scenario may change about a server. The zero
// value is a single-user server with a workspace of its own.
type serveOptions struct {
	// workspace is the --workspace directory; "" gives the process a fresh
	// one. Servers that must see the same session folders (a restart on
	// the same store) share one.
	workspace string
	// tokens is the --tokens file; "" is single-user mode.
	tokens string
	// token is the bearer token proc.client sends (with tokens set).
	token string
	// config is the --config file (agents and MCP servers, docs/tools.md); ""
	// is the single agent default built from the flags.
	config string
	// instance is the --instance-id ("" : the server picks a fresh one).
	instance string
	// leaseTTL is the --lease-ttl (0: the package's leaseTTL).
	leaseTTL time.Duration
	// args are more flags, after the ones above (a later flag wins).
	args []string
}

// newClient is a client of p's server that sends token ("" for none).
func newClient(p *proc, token string) *client.Client {
	opts := []client.Option{client.WithBackoff(client.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond})}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	return client.New(p.url, opts...)
}

// listenURL finds the address in rein serve's "listening" line; other
// attributes (instance=…) may come between msg and url.
var listenURL = regexp.MustCompile(`msg="rein serve listening"(?: \S+)*? url=(http://\S+)`)

// startServe starts `rein serve` on store and waits until it answers
// /readyz. The process is killed when the test ends, and its log is shown
// if the test failed.
func startServe(ctx context.Context, t *testing.T, name, store string) *proc {
	t.Helper()
	return startServeWith(ctx, t, name, store, serveOptions{})
}

// startServeWith is startServe with options.
func startServeWith(ctx context.Context, t testing.TB, name, store string, o serveOptions) *proc {
	t.Helper()
	// The first server of the package builds the binary, which on a busy
	// machine can take longer than a start-up bound: the bound is about
	// the server, so it is moved by the build's time.
	built := time.Now()
	bin := reinBinary(t)
	if took := time.Since(built); took > time.Second {
		if dl, ok := ctx.Deadline(); ok {
			ctx = ctxFor(t, time.Until(dl)+took)
		}
	}
	work := t.TempDir()
	ws := o.workspace
	if ws == "" {
		ws = filepath.Join(work, "workspace")
	}
	ttl := o.leaseTTL
	if ttl == 0 {
		ttl = leaseTTL
	}
	args := []string{"serve",
		"--addr", "127.0.0.1:0",
		"--store", store,
		"--model", "scripted:" + script(t),
		"--lease-ttl", ttl.String(),
		"--workspace", ws,
	}
	if o.instance != "" {
		args = append(args, "--instance-id", o.instance)
	}
	if o.tokens != "" {
		args = append(args, "--tokens", o.tokens)
	}
	if o.config != "" {
		args = append(args, "--config", o.config)
	}
	args = append(args, o.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = work
	cmd.Env = serveEnv()
	p := &proc{name: name, cmd: cmd, workspace: ws, stderr: newStderrBuffer(), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s (rein serve --store %s) stderr:\n%s", name, store, p.stderr.String())
		}
	})

	select {
	case <-p.stderr.listening:
	case <-p.done:
		t.Fatalf("%s exited before listening (%v):\n%s", name, cmd.ProcessState, p.stderr.String())
	case <-ctx.Done():
		t.Fatalf("%s did not listen: %v:\n%s", name, context.Cause(ctx), p.stderr.String())
	}
	m := listenURL.FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("%s: no listen url in:\n%s", name, p.stderr.String())
	}
	p.url = m[1]
	p.client = newClient(p, o.token)
	// The listener is bound before the line is logged; wait until the
	// server also answers, bounded by ctx.
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.client.Ready(rctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready (%v):\n%s", name, cmd.ProcessState, p.stderr.String())
		case <-ctx.Done():
			t.Fatalf("%s not ready: %v (last: %v)", name, context.Cause(ctx), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits until the process is gone: no drain, no
// deferred call, no goodbye to the store.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// term sends SIGTERM (a graceful shutdown, docs/api.md "Shutdown") and waits,
// bounded by ctx, until the process has exited; it fails the test unless
// the process exits 0.
func (p *proc) term(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("%s did not exit after SIGTERM: %v\n%s", p.name, context.Cause(ctx), p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM (%v), want 0:\n%s", p.name, code, p.cmd.ProcessState, p.stderr.String())
	}
}

// serveEnv is the test's environment without REIN_* variables, so that a
// setting of the developer's shell cannot change the servers' flags.
func serveEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REIN_") {
			env = append(env, kv)
		}
	}
	return env
}

// stderrBuffer keeps a process's log and reports when it says it listens.
type stderrBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	listening chan struct{}
	seen      bool
	// grew is closed (and replaced) on every write, for waitFor.
	grew chan struct{}
}

func newStderrBuffer() *stderrBuffer {
	return &stderrBuffer{listening: make(chan struct{}), grew: make(chan struct{})}
}

func (b *stderrBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if !b.seen && listenURL.Match(b.buf.Bytes()) {
		b.seen = true
		close(b.listening)
	}
	close(b.grew)
	b.grew = make(chan struct{})
	return n, err
}

// waitFor waits until the log, from byte offset from on, matches re, and
// returns the matching text; "" when ctx ends first. Woken by writes, never
// by polling.
func (b *stderrBuffer) waitFor(ctx context.Context, from int, re *regexp.Regexp) string {
	for {
		b.mu.Lock()
		var m []byte
		if from < b.buf.Len() {
			m = re.Find(b.buf.Bytes()[from:])
		}
		grew := b.grew
		b.mu.Unlock()
		if m != nil {
			return string(m)
		}
		select {
		case <-grew:
		case <-ctx.Done():
			return ""
		}
	}
}

// Len is how many bytes of log the process has written so far.
func (b *stderrBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *stderrBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
