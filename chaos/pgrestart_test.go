package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The PostgreSQL of REIN_TEST_POSTGRES_DSN is shared by everything on the
// machine, so it is never restarted: TestLoadPostgresRestart starts a
// PostgreSQL server of its own (initdb in a temporary directory, a random
// loopback port) and restarts that one.

// privatePG is a PostgreSQL server that belongs to one test.
type privatePG struct {
	bin  string // the directory of initdb and postgres
	dir  string // the server's directory: data/ and its socket
	port int
	// cred runs the server as another user: PostgreSQL refuses to run as
	// root (nil: as this process's user).
	cred *syscall.Credential
	cmd  *exec.Cmd
	log  *stderrBuffer
	done chan struct{}
}

// pgBinDir finds a directory holding initdb and postgres: the newest
// /usr/lib/postgresql/*/bin (Debian's layout), else the PATH.
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil && filepath.Dir(initdb) == filepath.Dir(postgres) {
		return filepath.Dir(initdb)
	}
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// pgReady matches the server's log line once it accepts connections.
var pgReady = regexp.MustCompile(`database system is ready to accept connections`)

// startPrivatePG initializes a cluster and starts it; the test is skipped
// when the binaries are missing, or when the test runs as root and there is
// no other user to run them as. The server is stopped when the test ends.
func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		t.Skip("no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin or on the PATH: the PostgreSQL restart scenario needs a server of its own")
	}
	pg := &privatePG{bin: bin}
	if os.Geteuid() == 0 {
		var u *user.User
		for _, name := range []string{"postgres", "nobody"} {
			if u2, err := user.Lookup(name); err == nil {
				u = u2
				break
			}
		}
		if u == nil {
			t.Skip("running as root and no user postgres or nobody to run a PostgreSQL server of the test's own as")
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are private to this user, and the server
	// may run as another one.
	dir, err := os.MkdirTemp("", "rein-chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	pg.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if pg.cred != nil {
		if err := os.Chown(dir, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	initdb.Env = append(serveEnv(), "LC_ALL=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pg.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	pg.start(t)
	t.Cleanup(pg.crash)
	return pg
}

// dsn is the DSN of the server's database postgres.
func (pg *privatePG) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// start starts the server on its port and waits until it accepts
// connections (after crash recovery, when it was crashed).
func (pg *privatePG) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(filepath.Join(pg.bin, "postgres"), "-D", filepath.Join(pg.dir, "data"),
		"-p", strconv.Itoa(pg.port), "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+pg.dir,
		"-c", "max_connections=200")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	cmd.Env = append(serveEnv(), "LC_ALL=C")
	pg.log = newStderrBuffer()
	cmd.Stderr = pg.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	pg.cmd, pg.done = cmd, make(chan struct{})
	done := pg.done
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	ctx := ctxFor(t, 60*time.Second)
	if pg.log.waitFor(ctx, 0, pgReady) == "" {
		t.Fatalf("postgres did not accept connections: %v\n%s", context.Cause(ctx), pg.log.String())
	}
}

// crash stops the server the way a crash does: an immediate shutdown
// (SIGQUIT) ends every backend at once, without a checkpoint, so that the
// next start runs crash recovery.
func (pg *privatePG) crash() {
	if pg.cmd == nil {
		return
	}
	select {
	case <-pg.done:
		return
	default:
	}
	_ = pg.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-pg.done:
	case <-time.After(30 * time.Second):
		_ = pg.cmd.Process.Kill()
		<-pg.done
	}
}

// waitReady polls p's /readyz, bounded by ctx, until its answer is what
// want says (nil error: ready; else 503 unavailable), and returns how long
// that took. Waiting on another process, it polls.
func waitReady(ctx context.Context, p *proc, ready bool) (time.Duration, error) {
	t0 := time.Now()
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.client.Ready(rctx)
		cancel()
		var ce *client.Error
		switch {
		case ready && err == nil:
			return time.Since(t0), nil
		case !ready && errors.As(err, &ce) && ce.Status == http.StatusServiceUnavailable && ce.Code == rein.CodeUnavailable:
			return time.Since(t0), nil
		}
		last = err
		select {
		case <-ctx.Done():
			return time.Since(t0), fmt.Errorf("%s: /readyz still answers %v: %w", p.name, last, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// outageFor is how long the private PostgreSQL stays down: longer than a
// lease, so that every run's lease expires by the store's clock meanwhile.
const outageFor = leaseTTL + 500*time.Millisecond

// TestLoadPostgresRestart crashes (immediate shutdown) the PostgreSQL of
// two instances under load, keeps it down past the lease TTL, and starts it
// again. While it is down both instances answer /readyz and new work with
// 503 unavailable and stay up; once it is back they recover by themselves
// (no restart): /readyz is ready again, and the runs of the load are
// resumed and complete. Then the violations of loadTally are counted, as
// after a kill.
func TestLoadPostgresRestart(t *testing.T) {
	t.Parallel()
	pl := plan(loadPlan{sessions: 20, reps: 2}, loadPlan{sessions: 100, reps: 20})
	pg := startPrivatePG(t)
	seed := loadSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d (REIN_CHAOS_SEED), %d sessions × %d PostgreSQL restarts; PostgreSQL of its own on port %d (%s)", seed, pl.sessions, pl.reps, pg.port, pg.bin)
	store := pg.dsn()
	ws := filepath.Join(t.TempDir(), "workspace")
	lc := newLoadClients(t)
	opts := func(name string) serveOptions {
		return serveOptions{workspace: ws, config: loadConfig(t), instance: "chaos-" + name}
	}
	servers := []*proc{
		startServeWith(ctxFor(t, startTimeout), t, "A", store, opts("A")),
		startServeWith(ctxFor(t, startTimeout), t, "B", store, opts("B")),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log:\n%s", pg.log.String())
		}
	})
	total := &loadTally{}
	var maxRSS int64
	var downs, ups []time.Duration
	seen := 0 // events the clients had read when the crashes came
	for rep := 1; rep <= pl.reps; rep++ {
		l := startLoad(t, lc, servers, rep, pl.sessions, seed)
		at := killMoment(rng)
		waitMoment(t, at)
		tDown := time.Now()
		pg.crash()
		l.stop()
		seen += countSeen(l)
		t.Logf("rep %d: PostgreSQL crashed %v into the load, %d events read by then", rep, at.Round(time.Millisecond), countSeen(l))

		// Down: not ready, new work refused with 503, the process up.
		for _, p := range servers {
			took, err := waitReady(ctxFor(t, 10*time.Second), p, false)
			if err != nil {
				t.Fatalf("rep %d: with PostgreSQL down: %v", rep, err)
			}
			downs = append(downs, took)
			if err := p.client.Health(ctxFor(t, callTimeout)); err != nil {
				t.Errorf("rep %d: %s: /healthz with PostgreSQL down: %v, want 200", rep, p.name, err)
			}
			_, err = p.client.CreateSession(ctxFor(t, 10*time.Second), client.CreateSessionRequest{})
			checkUnavailable(t, err, fmt.Sprintf("rep %d: %s: a new session with PostgreSQL down", rep, p.name))
		}
		waitPast(ctxFor(t, 2*outageFor), t, tDown.Add(outageFor))
		pg.start(t)
		tUp := time.Now()
		for _, p := range servers {
			if _, err := waitReady(ctxFor(t, 30*time.Second), p, true); err != nil {
				t.Fatalf("rep %d: after PostgreSQL came back: %v", rep, err)
			}
			ups = append(ups, time.Since(tUp))
			select {
			case <-p.done:
				t.Fatalf("rep %d: %s exited during the outage (%v)", rep, p.name, p.cmd.ProcessState)
			default:
			}
		}
		tl := recoverLoad(t, lc, servers, l, ws)
		var rss []string
		for _, p := range servers {
			r := vmRSS(p.cmd.Process.Pid)
			maxRSS = max(maxRSS, r)
			rss = append(rss, p.name+" "+mib(r))
		}
		t.Logf("rep %d: %s; RSS %s; %s", rep, tl.figures(), strings.Join(rss, ", "), tl.counts())
		tl.check(t, fmt.Sprintf("rep %d", rep))
		total.add(tl)
		if t.Failed() {
			break
		}
	}
	t.Logf("total: %d PostgreSQL restarts, %d events read by clients before them; /readyz failed within %v (max) of the crash and was ready again within %v (max) of the restart; %s; instance RSS at most %s; %s",
		pl.reps, seen, slices.Max(downs).Round(time.Millisecond), slices.Max(ups).Round(time.Millisecond), total.figures(), mib(maxRSS), total.counts())
}

// checkUnavailable checks that err is 503 unavailable with a message that
// says nothing of the store's internals.
func checkUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.Code != rein.CodeUnavailable {
		t.Errorf("%s: %v, want 503 unavailable", what, err)
		return
	}
	for _, leak := range []string{"127.0.0.1", "postgres", "sqlite", "dial", "connection refused", ".db"} {
		if strings.Contains(strings.ToLower(ce.Message), leak) {
			t.Errorf("%s: the message %q reveals %q", what, ce.Message, leak)
		}
	}
}
