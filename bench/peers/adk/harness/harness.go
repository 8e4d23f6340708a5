// Package harness is the framework-neutral half of Rein's peer comparison:
// the workloads, the script every peer's fake model follows, the one tool,
// and the measurements. It exists so that Rein and each competitor are timed
// by the same code doing the same things, and differ only in the adapter
// that drives their own API.
//
// The canonical file is bench/peers/harness/harness.go. Each Go peer module
// holds a byte-identical copy at <peer>/harness/harness.go (the peers are
// separate modules so the main module never depends on a competitor, and a
// copy keeps them independent of each other too); the driver's tests fail
// when a copy drifts. The harness imports only the standard library.
//
// A peer binary calls Main with one Builder per peer name it offers. Main
// runs one workload once (one process per workload and round, so no
// workload warms another's caches or heap) and prints one JSON line, a
// Result, on stdout.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Workload names, as the -workload flag takes them.
const (
	// Instant is workload (a): one model request, no tools, an instant
	// one-chunk reply; N sequential runs.
	Instant = "instant"
	// ToolStream is workload (b): the model calls the echo tool, then
	// streams a 20-chunk answer; N sequential runs.
	ToolStream = "tool_stream"
	// CancelStream is workload (c): the model streams a chunk every 10 ms;
	// right after its first chunk the run is cancelled with the framework's
	// immediate stop. Measured: stop call → the caller sees the run end.
	CancelStream = "cancel_stream"
	// StopBlocked is workload (d): the model blocks until its context ends;
	// once it is blocked the run gets the framework's cooperative stop (one
	// that lets the run end its turn cleanly). Measured like CancelStream.
	StopBlocked = "stop_blocked"
	// Blocked is workload (e): N runs at once, all blocked in the model;
	// measured: heap+stack and goroutines per run.
	Blocked = "blocked"
	// DurableStream is workload (f): N sessions on a durable store stream
	// at once; measured: events/s read back and each chunk's latency from
	// the model to a reader of the log.
	DurableStream = "durable_stream"
)

// Workloads lists every workload in the order the driver runs them.
var Workloads = []string{Instant, ToolStream, CancelStream, StopBlocked, Blocked, DurableStream}

// DefaultN is each workload's default size: runs for the sequential
// workloads, concurrent runs or sessions for the others.
var DefaultN = map[string]int{
	Instant:       2000,
	ToolStream:    1000,
	CancelStream:  200,
	StopBlocked:   100,
	Blocked:       1000,
	DurableStream: 10000,
}

// Model says what a peer's fake model does. A peer builds its fake model
// for the one Model its workload needs (ModelOf).
type Model int

// The fake model's behaviours.
const (
	// ModelInstant answers InstantReply in one chunk at once.
	ModelInstant Model = iota + 1
	// ModelToolThenAnswer calls EchoTool once with EchoArgs(input) in its
	// first request; in the request after the tool result it streams
	// AnswerChunks chunks, AnswerChunk(0) … AnswerChunk(19), at once.
	ModelToolThenAnswer
	// ModelTicking streams TickChunk(0) at once and then one more chunk
	// every TickEvery, until its context ends (or its reader goes away).
	// It calls Env.Entered after the first chunk is handed over.
	ModelTicking
	// ModelBlocked sends nothing: it calls Env.Entered and then waits
	// until its context ends, like a provider that has not answered yet.
	ModelBlocked
	// ModelStamped streams Config.StampChunks chunks, Config.StampEvery
	// apart (the first at once), each chunk's text being Stamp() taken as
	// it is handed over.
	ModelStamped
)

// ModelOf returns the fake model workload w needs.
func ModelOf(w string) (Model, error) {
	switch w {
	case Instant:
		return ModelInstant, nil
	case ToolStream:
		return ModelToolThenAnswer, nil
	case CancelStream:
		return ModelTicking, nil
	case StopBlocked, Blocked:
		return ModelBlocked, nil
	case DurableStream:
		return ModelStamped, nil
	}
	return 0, fmt.Errorf("unknown workload %q (want one of %s)", w, strings.Join(Workloads, ", "))
}

// The script every fake model follows.
const (
	// InstantReply is ModelInstant's reply.
	InstantReply = "ok"
	// AnswerChunks is how many chunks ModelToolThenAnswer's answer has.
	AnswerChunks = 20
	// TickEvery is ModelTicking's pause between chunks.
	TickEvery = 10 * time.Millisecond
	// EchoTool is the one tool every peer offers: it returns its "text"
	// argument unchanged (through Env.Echo).
	EchoTool = "echo"
	// EchoDescription describes EchoTool to the model.
	EchoDescription = "Returns its text argument unchanged."
	// EchoSchema is EchoTool's input schema (JSON Schema).
	EchoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`
	// EchoCallID is the id of ModelToolThenAnswer's tool call.
	EchoCallID = "call_echo_1"
)

// AnswerChunk is chunk i of ModelToolThenAnswer's answer.
func AnswerChunk(i int) string { return fmt.Sprintf("tok%02d ", i) }

// Answer is ModelToolThenAnswer's whole answer.
func Answer() string {
	var b strings.Builder
	for i := range AnswerChunks {
		b.WriteString(AnswerChunk(i))
	}
	return b.String()
}

// TickChunk is chunk i of ModelTicking's endless stream.
func TickChunk(i int) string { return fmt.Sprintf("tick%d ", i) }

// EchoArgs is the JSON arguments ModelToolThenAnswer passes to EchoTool.
func EchoArgs(input string) string {
	b, _ := json.Marshal(map[string]string{"text": input})
	return string(b)
}

// Stamp is a chunk of ModelStamped: the time it is taken, for Durable's
// latency. Several stamps may arrive concatenated in one event (a runtime
// may coalesce consecutive deltas); ParseStamps splits them.
func Stamp() string { return strconv.FormatInt(time.Now().UnixNano(), 10) + ";" }

// ParseStamps returns the times in text made of Stamp()s.
func ParseStamps(text string) ([]time.Time, error) {
	var out []time.Time
	for _, s := range strings.Split(text, ";") {
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("stamp %q: %w", s, err)
		}
		out = append(out, time.Unix(0, n))
	}
	return out, nil
}

// Env connects a peer's fake model and tool to the harness: the model says
// when a run has reached it, the tool does the echo and is counted. A peer
// gets one Env (in Config) and shares it among all its runs; it is safe for
// concurrent use.
type Env struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	calls   atomic.Int64
}

// NewEnv returns an Env.
func NewEnv() *Env { return &Env{waiting: map[string]chan struct{}{}} }

// Entered is called by ModelTicking (after its first chunk) and
// ModelBlocked (as it starts to wait) with the run's user input. Calls for
// an input the harness does not wait for, and repeated calls, do nothing.
func (e *Env) Entered(input string) {
	e.mu.Lock()
	ch := e.waiting[input]
	delete(e.waiting, input)
	e.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// expect returns a channel closed when the model reports input entered.
func (e *Env) expect(input string) <-chan struct{} {
	ch := make(chan struct{})
	e.mu.Lock()
	e.waiting[input] = ch
	e.mu.Unlock()
	return ch
}

// Echo is EchoTool's body: it counts the call and returns text.
func (e *Env) Echo(text string) string {
	e.calls.Add(1)
	return text
}

// ToolCalls is how often Echo ran.
func (e *Env) ToolCalls() int64 { return e.calls.Load() }

// Config is what a peer is built with, once per process.
type Config struct {
	// Workload is the workload this process runs.
	Workload string
	// Model is what the peer's fake model must do.
	Model Model
	// Env connects the fake model and the tool to the harness.
	Env *Env
	// Dir is a fresh scratch directory (for a database file); removed
	// after the run.
	Dir string
	// StampChunks and StampEvery shape ModelStamped.
	StampChunks int
	StampEvery  time.Duration
	// StopTimeout bounds a cooperative stop for a framework whose
	// cooperative stop waits for a safe point and needs a bound to end a
	// run whose model never reaches one (it then escalates to immediate).
	StopTimeout time.Duration
}

// ErrUnsupported is returned (wrapped, with the reason) by a Handle's Stop
// or a Builder for a feature the framework does not have.
var ErrUnsupported = errors.New("not supported")

// Peer drives one framework through its in-process API. Every run gets a
// fresh conversation (session) of its own.
type Peer interface {
	// Run executes one run of input to its end, consuming the reply as a
	// stream the way a caller of the framework would, and returns the
	// reply text assembled from the streamed chunks.
	Run(ctx context.Context, input string) (reply string, err error)
	// Start starts one run of input and returns without waiting for it.
	// A peer need not consume the run's output until Wait, unless the
	// framework only makes progress while its output is consumed.
	Start(ctx context.Context, input string) (Handle, error)
}

// Handle is a started run.
type Handle interface {
	// Cancel stops the run at once, with the framework's immediate stop.
	Cancel()
	// Stop asks for the framework's cooperative stop: the run ends its
	// turn and stays resumable or consistent. It returns ErrUnsupported
	// (wrapped) if the framework has none.
	Stop() error
	// Wait blocks until the caller observes the run's end (or ctx ends)
	// and reports whether it ended the way the stop asked for: nil, or
	// what happened instead.
	Wait(ctx context.Context) error
}

// DurableStreamer is offered by a peer with a durable session store
// comparable to Rein's (workload DurableStream).
type DurableStreamer interface {
	// OpenSessions creates one session per input (not measured).
	OpenSessions(ctx context.Context, inputs []string) error
	// StreamSessions starts one run in each opened session, all at once
	// (input as its message), every run with ModelStamped; it reads each
	// session's event log as it grows and calls observe (concurrently) for
	// every event of the run it reads, with the streamed text of a delta
	// event and "" for any other. It returns when every run's end has been
	// read.
	StreamSessions(ctx context.Context, inputs []string, observe func(deltaText string)) error
}

// Noter is offered by a peer that has facts to report about how it ran
// the workload (a stop that had to escalate, a mode it had to use); they
// become Result.Notes.
type Noter interface {
	Notes() []string
}

// Builder builds a peer for one process. The peer may implement io.Closer
// and Noter.
type Builder func(ctx context.Context, cfg Config) (Peer, error)

// Options say what one process runs.
type Options struct {
	Peer    string
	Version string
	// Workload is one of Workloads.
	Workload string
	// N is the workload's size (0: DefaultN).
	N int
	// Warmup runs are made before a sequential workload is measured
	// (negative: none; 0: N/10, at least 1).
	Warmup int
	// Round is echoed in the Result.
	Round int
	// StampChunks and StampEvery shape DurableStream (0: 20 and 100 ms).
	StampChunks int
	StampEvery  time.Duration
	// StopTimeout (0: 100 ms) is Config.StopTimeout.
	StopTimeout time.Duration
	// WaitTimeout bounds every wait for a run (to reach its model, to end
	// after a stop); 0 means 60 s. A run that exceeds it fails the
	// workload.
	WaitTimeout time.Duration
}

// Result is one (peer, workload, round): the JSON line a process prints.
type Result struct {
	Peer     string `json:"peer"`
	Version  string `json:"version"`
	Workload string `json:"workload"`
	// N is the workload's size.
	N     int `json:"n"`
	Round int `json:"round"`
	// Runtime is the language runtime (go1.26.8, node v20.20.2).
	Runtime string `json:"runtime"`
	// Procs is GOMAXPROCS (or the runtime's equivalent).
	Procs int `json:"procs"`
	// WallS is how long the measured part took.
	WallS float64 `json:"wall_s"`
	// Metrics by name (see the Metric* constants).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Unsupported, when set, says why the peer cannot run the workload;
	// Metrics are then absent.
	Unsupported string `json:"unsupported,omitempty"`
	// Notes are facts about how the peer ran it (a stop that had to
	// escalate, the mode used).
	Notes []string `json:"notes,omitempty"`
}

// Metric names.
const (
	// MetricP50 and MetricP99 are per-run latencies in µs: a whole run for
	// Instant and ToolStream; stop call → end observed for CancelStream
	// and StopBlocked.
	MetricP50 = "p50_us"
	MetricP99 = "p99_us"
	// MetricAllocs is heap allocations per run (runtime.MemStats.Mallocs
	// delta over the measured runs, every goroutine's included).
	MetricAllocs = "allocs_per_op"
	// MetricMem is the growth of live heap plus stacks per blocked run,
	// after a GC, in bytes (Node: V8 heap used).
	MetricMem = "heap_stack_per_run_b"
	// MetricRSS is the growth of the resident set per blocked run, bytes.
	MetricRSS = "rss_per_run_b"
	// MetricGoroutines is the growth of live goroutines per blocked run.
	MetricGoroutines = "goroutines_per_run"
	// MetricStartUs is µs per blocked run from the first Start to every
	// run's model entered.
	MetricStartUs = "start_per_run_us"
	// MetricWrongEnds counts blocked runs that ended otherwise than
	// cancelled (Blocked; absent when there are none).
	MetricWrongEnds = "wrong_ends"
	// MetricEventsPerS is events read back per second of DurableStream.
	MetricEventsPerS = "events_per_s"
	// MetricDeltaP50 and MetricDeltaP99 are µs from a chunk leaving the
	// model to a reader of the log seeing it (DurableStream).
	MetricDeltaP50 = "delta_p50_us"
	MetricDeltaP99 = "delta_p99_us"
)

// Main is a peer binary's main: it parses the flags, runs one workload and
// prints its Result as one JSON line. peers maps the peer names the binary
// offers to their builders; -peer picks one (the only one by default).
func Main(version string, peers map[string]Builder) {
	names := make([]string, 0, len(peers))
	for n := range peers {
		names = append(names, n)
	}
	sort.Strings(names)
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	var o Options
	def := ""
	if len(names) == 1 {
		def = names[0]
	}
	fs.StringVar(&o.Peer, "peer", def, "peer to run: "+strings.Join(names, ", "))
	fs.StringVar(&o.Workload, "workload", "", "workload: "+strings.Join(Workloads, ", "))
	fs.IntVar(&o.N, "n", 0, "workload size (0: its default)")
	fs.IntVar(&o.Warmup, "warmup", 0, "warm-up runs before a sequential workload (0: n/10; negative: none)")
	fs.IntVar(&o.Round, "round", 0, "round number, echoed in the result")
	fs.IntVar(&o.StampChunks, "chunks", 0, "durable_stream: chunks per run (0: 20)")
	fs.DurationVar(&o.StampEvery, "chunk-every", 0, "durable_stream: pause between chunks (0: 100ms)")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 0, "bound of a cooperative stop that waits for a safe point (0: 100ms)")
	fs.DurationVar(&o.WaitTimeout, "wait-timeout", 0, "bound of every wait for a run (0: 60s)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole process here")
	_ = fs.Parse(os.Args[1:])
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	b := peers[o.Peer]
	if b == nil {
		fmt.Fprintf(os.Stderr, "unknown -peer %q (want one of %s)\n", o.Peer, strings.Join(names, ", "))
		os.Exit(2)
	}
	o.Version = version
	res, err := Run(context.Background(), o, b)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(res)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", o.Peer, o.Workload, err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// ModuleVersion returns the version of the module at path that this
// binary was built with ("" if it has none), so a Result names the exact
// release measured.
func ModuleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Version + " => " + d.Replace.Path
			}
			return d.Version
		}
	}
	return ""
}

// Run builds the peer and runs one workload.
func Run(ctx context.Context, o Options, build Builder) (Result, error) {
	m, err := ModelOf(o.Workload)
	if err != nil {
		return Result{}, err
	}
	if o.N <= 0 {
		o.N = DefaultN[o.Workload]
	}
	if o.Warmup == 0 {
		o.Warmup = max(1, o.N/10)
	} else if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.StampChunks <= 0 {
		o.StampChunks = 20
	}
	if o.StampEvery <= 0 {
		o.StampEvery = 100 * time.Millisecond
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 100 * time.Millisecond
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 60 * time.Second
	}
	dir, err := os.MkdirTemp("", "rein-peer-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	env := NewEnv()
	cfg := Config{Workload: o.Workload, Model: m, Env: env, Dir: dir, StampChunks: o.StampChunks,
		StampEvery: o.StampEvery, StopTimeout: o.StopTimeout}
	res := Result{Peer: o.Peer, Version: o.Version, Workload: o.Workload, N: o.N, Round: o.Round,
		Runtime: runtime.Version(), Procs: runtime.GOMAXPROCS(0), Metrics: map[string]float64{}}
	p, err := build(ctx, cfg)
	if errors.Is(err, ErrUnsupported) {
		res.Metrics = nil
		res.Unsupported = err.Error()
		return res, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("build: %w", err)
	}
	if c, ok := p.(io.Closer); ok {
		defer c.Close()
	}
	r := &runner{o: o, env: env, p: p, res: &res}
	t0 := time.Now()
	switch o.Workload {
	case Instant:
		err = r.sequential(func(ctx context.Context, in string) (time.Duration, error) {
			return r.whole(ctx, in, InstantReply)
		})
	case ToolStream:
		err = r.sequential(func(ctx context.Context, in string) (time.Duration, error) {
			return r.whole(ctx, in, Answer())
		})
		if err == nil && env.ToolCalls() != int64(o.N+o.Warmup) {
			err = fmt.Errorf("the echo tool ran %d times for %d runs", env.ToolCalls(), o.N+o.Warmup)
		}
	case CancelStream:
		err = r.sequential(func(ctx context.Context, in string) (time.Duration, error) {
			return r.stop(ctx, in, func(h Handle) error { h.Cancel(); return nil })
		})
	case StopBlocked:
		err = r.sequential(func(ctx context.Context, in string) (time.Duration, error) {
			return r.stop(ctx, in, Handle.Stop)
		})
	case Blocked:
		err = r.blocked(ctx)
	case DurableStream:
		err = r.durable(ctx)
	}
	res.WallS = time.Since(t0).Seconds()
	if n, ok := p.(Noter); ok {
		for _, s := range n.Notes() {
			r.note(s)
		}
	}
	var unsup unsupportedError
	if errors.As(err, &unsup) {
		res.Metrics = nil
		res.Unsupported = unsup.Error()
		return res, nil
	}
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// unsupportedError carries an ErrUnsupported met mid-workload.
type unsupportedError struct{ error }

func (u unsupportedError) Unwrap() error { return u.error }

type runner struct {
	o   Options
	env *Env
	p   Peer
	res *Result
}

// Note records a fact about how the peer ran the workload (once).
func (r *runner) note(s string) {
	if !slices.Contains(r.res.Notes, s) {
		r.res.Notes = append(r.res.Notes, s)
	}
}

// sequential runs Warmup unmeasured ops, then N measured ones.
func (r *runner) sequential(op func(ctx context.Context, input string) (time.Duration, error)) error {
	ctx := context.Background()
	for i := range r.o.Warmup {
		if _, err := op(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
			return fmt.Errorf("warm-up run %d: %w", i, err)
		}
	}
	lat := make([]time.Duration, 0, r.o.N)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for i := range r.o.N {
		d, err := op(ctx, fmt.Sprintf("run-%d", i))
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		lat = append(lat, d)
	}
	runtime.ReadMemStats(&m1)
	r.res.Metrics[MetricP50] = us(Percentile(lat, 50))
	r.res.Metrics[MetricP99] = us(Percentile(lat, 99))
	r.res.Metrics[MetricAllocs] = float64(m1.Mallocs-m0.Mallocs) / float64(r.o.N)
	return nil
}

// whole times one run to its end and checks its reply.
func (r *runner) whole(ctx context.Context, input, want string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.WaitTimeout)
	defer cancel()
	t0 := time.Now()
	reply, err := r.p.Run(ctx, input)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if reply != want {
		return 0, fmt.Errorf("reply %q, want %q", reply, want)
	}
	return d, nil
}

// stop starts a run, waits until its model is entered, stops it and times
// stop → end observed.
func (r *runner) stop(ctx context.Context, input string, stop func(Handle) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.WaitTimeout)
	defer cancel()
	entered := r.env.expect(input)
	h, err := r.p.Start(ctx, input)
	if err != nil {
		return 0, err
	}
	select {
	case <-entered:
	case <-ctx.Done():
		return 0, fmt.Errorf("the run did not reach its model within %v", r.o.WaitTimeout)
	}
	t0 := time.Now()
	if err := stop(h); err != nil {
		h.Cancel()
		_ = h.Wait(ctx)
		if errors.Is(err, ErrUnsupported) {
			return 0, unsupportedError{err}
		}
		return 0, err
	}
	if err := h.Wait(ctx); err != nil {
		return 0, fmt.Errorf("after the stop: %w", err)
	}
	return time.Since(t0), nil
}

// blocked starts N runs, waits until all are blocked in the model, and
// measures what they hold; then it cancels them all.
func (r *runner) blocked(ctx context.Context) error {
	n := r.o.N
	ctx, cancel := context.WithTimeout(ctx, r.o.WaitTimeout)
	defer cancel()
	entered := make([]<-chan struct{}, n)
	inputs := make([]string, n)
	for i := range n {
		inputs[i] = fmt.Sprintf("run-%d", i)
		entered[i] = r.env.expect(inputs[i])
	}
	hs := make([]Handle, n)
	defer func() {
		// On a failure, leave nothing running behind.
		for _, h := range hs {
			if h != nil {
				h.Cancel()
			}
		}
	}()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	rss0 := rss()
	t0 := time.Now()
	if err := parallel(n, func(i int) (err error) {
		hs[i], err = r.p.Start(ctx, inputs[i])
		if err != nil {
			return fmt.Errorf("start run %d: %w", i, err)
		}
		return nil
	}); err != nil {
		return err
	}
	for i, ch := range entered {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("run %d did not reach its model within %v", i, r.o.WaitTimeout)
		}
	}
	start := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	rss1 := rss()
	mem := float64(int64(m1.HeapAlloc+m1.StackInuse)-int64(m0.HeapAlloc+m0.StackInuse)) / float64(n)
	r.res.Metrics[MetricMem] = mem
	r.res.Metrics[MetricGoroutines] = float64(g1-g0) / float64(n)
	r.res.Metrics[MetricStartUs] = us(start) / float64(n)
	if rss0 > 0 && rss1 > 0 {
		r.res.Metrics[MetricRSS] = float64(rss1-rss0) / float64(n)
	}
	stopped := hs
	hs = nil
	_ = parallel(n, func(i int) error { stopped[i].Cancel(); return nil })
	// A run that ends otherwise than cancelled is counted and reported
	// beside the figures, which it does not change; one that does not end
	// at all fails the workload.
	var (
		wrong      atomic.Int64
		firstWrong firstError
	)
	if err := parallel(n, func(i int) error {
		if err := stopped[i].Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("run %d did not end after the cancel: %w", i, err)
			}
			wrong.Add(1)
			firstWrong.set(fmt.Errorf("run %d: %w", i, err))
		}
		return nil
	}); err != nil {
		return err
	}
	if w := wrong.Load(); w > 0 {
		r.res.Metrics[MetricWrongEnds] = float64(w)
		r.note(fmt.Sprintf("%d of %d runs did not end as the cancel asks (first: %v)", w, n, firstWrong.get()))
	}
	return nil
}

// Starters is how many goroutines start, stop and wait for the runs of
// Blocked: several let a store batch their concurrent writes, as it does
// for many clients.
const Starters = 64

// parallel calls f(0) … f(n-1) from Starters goroutines and returns the
// first error (the calls not yet made are then skipped).
func parallel(n int, f func(i int) error) error {
	var (
		next  atomic.Int64
		first firstError
		wg    sync.WaitGroup
	)
	for range min(Starters, n) {
		wg.Go(func() {
			for first.get() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				first.set(f(i))
			}
		})
	}
	wg.Wait()
	return first.get()
}

// firstError keeps the first non-nil error set.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// durable runs DurableStream on a peer that offers it.
func (r *runner) durable(ctx context.Context) error {
	ds, ok := r.p.(DurableStreamer)
	if !ok {
		return unsupportedError{fmt.Errorf("%w: no durable session store comparable to Rein's", ErrUnsupported)}
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.WaitTimeout)
	defer cancel()
	inputs := make([]string, r.o.N)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("session-%d", i)
	}
	var (
		mu     sync.Mutex
		lat    = make([]time.Duration, 0, r.o.N*r.o.StampChunks)
		events atomic.Int64
		chunks atomic.Int64
		bad    firstError
	)
	if err := ds.OpenSessions(ctx, inputs); err != nil {
		return fmt.Errorf("open sessions: %w", err)
	}
	t0 := time.Now()
	err := ds.StreamSessions(ctx, inputs, func(text string) {
		now := time.Now()
		events.Add(1)
		if text == "" {
			return
		}
		ts, err := ParseStamps(text)
		if err != nil {
			bad.set(err)
			return
		}
		chunks.Add(int64(len(ts)))
		mu.Lock()
		for _, t := range ts {
			lat = append(lat, now.Sub(t))
		}
		mu.Unlock()
	})
	wall := time.Since(t0)
	if err != nil {
		return err
	}
	if err := bad.get(); err != nil {
		return err
	}
	if want := int64(r.o.N * r.o.StampChunks); chunks.Load() != want {
		return fmt.Errorf("read %d chunks back, want %d", chunks.Load(), want)
	}
	r.res.Metrics[MetricEventsPerS] = float64(events.Load()) / wall.Seconds()
	r.res.Metrics[MetricDeltaP50] = us(Percentile(lat, 50))
	r.res.Metrics[MetricDeltaP99] = us(Percentile(lat, 99))
	r.note(fmt.Sprintf("%d chunks per session, %v apart; %d events read", r.o.StampChunks, r.o.StampEvery, events.Load()))
	return nil
}

// Percentile returns the p-th percentile (nearest rank) of ds; ds is
// sorted in place. Zero for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	k := int(math.Ceil(float64(len(ds))*p/100)) - 1
	return ds[min(max(k, 0), len(ds)-1)]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// rss is the resident set size in bytes (0 where /proc is absent).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(rest))
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}
