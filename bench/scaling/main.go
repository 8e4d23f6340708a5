// Command scaling measures how a Rein server's cost grows with the number
// of concurrent sessions and with the events per run, and draws it: the
// scaling chart of docs/performance.md. Each point is a `rein serve` of its
// own (a fresh SQLite file, the scripted model the load needs), loaded by
// the load tool from this process, so the server's CPU is the server's
// alone. It runs on demand, never in CI:
//
//	go build -o /tmp/rein ./cmd/rein
//	go run ./bench/scaling -rein /tmp/rein -out /tmp/scaling
//
// It writes scaling.json (every point's report summary), scaling.svg (the
// chart) and prints the table.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein/bench/load"
)

// Point is one measured load.
type Point struct {
	Sessions int `json:"sessions"`
	Chunks   int `json:"chunks"`
	// CPUPerEventUS is the server's CPU per logged event; CPUPerRunMS its
	// CPU per run.
	CPUPerEventUS float64 `json:"cpu_per_event_us"`
	CPUPerRunMS   float64 `json:"cpu_per_run_ms"`
	EventsPerS    float64 `json:"events_per_s"`
	// StartedP50MS and StartedP99MS are message → session.run_started on
	// the stream.
	StartedP50MS float64 `json:"run_started_p50_ms"`
	StartedP99MS float64 `json:"run_started_p99_ms"`
	Events       int64   `json:"events"`
	Complete     bool    `json:"complete"`
}

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("scaling", flag.ContinueOnError)
	bin := fs.String("rein", "", "the rein binary to serve with (required)")
	out := fs.String("out", "", "directory for scaling.json and scaling.svg (required)")
	sessions := fs.String("sessions", "10,100,300,1000", "session counts of the first series (20 deltas a run)")
	chunks := fs.String("chunks", "5,20,80", "deltas per run of the second series (at -base sessions)")
	base := fs.Int("base", 100, "sessions of the second series")
	delay := fs.Duration("chunk-delay", 20*time.Millisecond, "pause before each delta")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *out == "" {
		return errors.New("-rein and -out are required")
	}
	ns, err := ints(*sessions)
	if err != nil {
		return fmt.Errorf("-sessions: %w", err)
	}
	cs, err := ints(*chunks)
	if err != nil {
		return fmt.Errorf("-chunks: %w", err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var bySessions, byChunks []Point
	for _, n := range ns {
		p, err := measure(ctx, *bin, n, 20, *delay)
		if err != nil {
			return err
		}
		bySessions = append(bySessions, p)
	}
	for _, c := range cs {
		p, err := measure(ctx, *bin, *base, c, *delay)
		if err != nil {
			return err
		}
		byChunks = append(byChunks, p)
	}
	all := map[string][]Point{"by_sessions": bySessions, "by_chunks": byChunks}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "scaling.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "scaling.svg"), chart(bySessions, byChunks, *base), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "| sessions | deltas per run | server CPU per event | per run | events/s | run_started p50 / p99 | verified |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|")
	for _, p := range append(bySessions, byChunks...) {
		fmt.Fprintf(stdout, "| %d | %d | %.1f µs | %.2f ms | %.0f | %.1f / %.1f ms | %v |\n",
			p.Sessions, p.Chunks, p.CPUPerEventUS, p.CPUPerRunMS, p.EventsPerS, p.StartedP50MS, p.StartedP99MS, p.Complete)
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a count ≥ 1", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// measure serves a fresh SQLite file with `rein serve` and loads it with
// one message per session.
func measure(ctx context.Context, bin string, sessions, chunks int, delay time.Duration) (Point, error) {
	o := load.DefaultOptions()
	o.Sessions, o.Messages, o.Chunks, o.ChunkDelay, o.IdleStreams = sessions, 1, chunks, delay, -1
	dir, err := os.MkdirTemp("", "rein-scaling-*")
	if err != nil {
		return Point{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "script.yaml")
	if err := os.WriteFile(script, o.Script(), 0o644); err != nil {
		return Point{}, err
	}
	addr, err := freeAddr()
	if err != nil {
		return Point{}, err
	}
	srv := exec.CommandContext(ctx, bin, "serve", "--model", "scripted:"+script,
		"--store", "sqlite:"+filepath.Join(dir, "bench.db"), "--addr", addr)
	// The server's defaults, its log included (to a file here).
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return Point{}, err
	}
	defer logf.Close()
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		return Point{}, err
	}
	defer func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
	}()
	o.URL = "http://" + addr
	if err := ready(ctx, o.URL); err != nil {
		return Point{}, err
	}
	rep, err := load.Run(ctx, o)
	if err != nil {
		return Point{}, err
	}
	p := Point{Sessions: sessions, Chunks: chunks, CPUPerEventUS: rep.Server.CPUPerEventUS,
		CPUPerRunMS: 1000 * rep.Server.CPUS / float64(max(rep.Runs.Completed, 1)),
		Events:      rep.Events.Logged, EventsPerS: rep.Events.PerSecond, Complete: rep.Verification.Complete}
	for _, l := range rep.Latencies {
		if l.Name == load.LatencyRunStarted {
			p.StartedP50MS, p.StartedP99MS = l.P50MS, l.P99MS
		}
	}
	fmt.Fprintf(os.Stderr, "scaling: %d sessions, %d deltas: %.1f µs/event\n", sessions, chunks, p.CPUPerEventUS)
	return p, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// ready waits until the server answers /readyz.
func ready(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server at %s did not become ready: %w", url, ctx.Err())
		case <-tick.C:
		}
	}
}
