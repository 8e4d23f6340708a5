package load

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/store/backend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestSmoke is the seconds-long check of the whole tool: an in-process
// server on SQLite, 5 sessions × 2 messages with tool calls, half the runs
// stopped. Every field of the report must be present and sane, the JSON
// must read back identical, the SVG must be well-formed with one series
// per metric, and the table must have every row.
func TestSmoke(t *testing.T) {
	o := DefaultOptions()
	o.Store = "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
	o.Sessions, o.Messages = 5, 2
	// Six deltas 50 ms apart: a stop sent at the first delta lands well
	// before the run could finish, even under -race on a busy machine.
	o.Chunks, o.ChunkDelay = 6, 50*time.Millisecond
	o.ToolCalls = 2
	o.StopFraction = 0.5
	// Enough idle streams that their few KiB each stand out of the heap's
	// noise.
	o.IdleStreams = 100
	o.OutDir = filepath.Join(t.TempDir(), "out")
	o.SampleInterval = 50 * time.Millisecond
	var progress bytes.Buffer
	o.Progress = &progress

	rep, err := Run(testContext(t), o)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	checkComplete(t, rep)
	if !rep.Target.InProcess || !strings.HasPrefix(rep.Target.URL, "http://127.0.0.1:") || !strings.HasPrefix(rep.Target.Store, "sqlite:") {
		t.Errorf("target = %+v, want an in-process server on SQLite", rep.Target)
	}
	want := Workload{Sessions: 5, Messages: 2, Concurrency: 5, Chunks: 6, ChunkDelayMS: 50, ToolCalls: 2,
		StopFraction: 0.5, StopMode: "cancel", IdleStreams: 100, RunTimeoutS: 120}
	if rep.Workload != want {
		t.Errorf("workload = %+v, want %+v", rep.Workload, want)
	}
	if rep.Env.GoVersion == "" || rep.Env.GOOS == "" || rep.Env.GOARCH == "" || rep.Env.NumCPU < 1 || rep.Env.GOMAXPROCS < 1 {
		t.Errorf("env = %+v", rep.Env)
	}
	if rep.StartedAt.IsZero() || rep.StartedAt.Location() != time.UTC {
		t.Errorf("started_at = %v, want a UTC time", rep.StartedAt)
	}

	// Half the runs (every second one) are stopped at their first delta
	// and end cancelled; the others finish after their tool calls.
	if r := rep.Runs; r.Planned != 10 || r.Admitted != 10 || r.Completed != 10 || r.Stops != 5 || r.StopsAccepted != 5 || r.StopsLate != 0 || r.Skipped != 0 {
		t.Errorf("runs = %+v", r)
	}
	if got, want := rep.Runs.Outcomes, map[string]int{"COMPLETED/stop": 5, "CANCELLED/cancelled": 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}
	counts := map[string]int{LatencyAdmission: 10, LatencyRunStarted: 10, LatencyFirstDelta: 10, LatencyStop: 5, LatencyRun: 5}
	checkLatencies(t, rep, counts)
	// The first delta comes after one chunk delay; a run that is not
	// stopped streams all six.
	if l, _ := rep.Latency(LatencyFirstDelta); l.CDFMS[0] < 50 {
		t.Errorf("first delta after %v ms, before the script's 50 ms delay", l.CDFMS[0])
	}
	if l, _ := rep.Latency(LatencyRun); l.CDFMS[0] < 300 {
		t.Errorf("a run took %v ms, less than its 6 × 50 ms of deltas", l.CDFMS[0])
	}
	if a, s := rep.Latencies[1], rep.Latencies[2]; a.P50MS >= s.P50MS {
		t.Errorf("run_started p50 %v ≥ first_delta p50 %v", a.P50MS, s.P50MS)
	}

	ev := rep.Events
	// Five finished runs × two tool calls, and a stopped run has made
	// its calls only if its stop was slow to arrive; every call has its
	// result either way.
	if ev.ToolUses < 10 || ev.ToolUses > 20 || ev.ToolResults != ev.ToolUses {
		t.Errorf("tool uses/results = %d/%d, want 10 to 20, all answered", ev.ToolUses, ev.ToolResults)
	}
	// At least one delta per stopped run and two steps' worth per
	// finished one (deltas may coalesce).
	if ev.Deltas < 5+5*2 || ev.Deltas > 5*7+5*6 {
		t.Errorf("deltas = %d", ev.Deltas)
	}
	if ev.ServerAppended <= 0 {
		t.Errorf("the server counted %v appended events", ev.ServerAppended)
	}
	checkServer(t, rep, true)

	idle := rep.IdleStreams
	if idle.Streams != 100 || idle.Opened != 100 || !idle.Measured {
		t.Errorf("idle streams = %+v, want 100 opened", idle)
	}
	// An open stream holds a goroutine, its connection and its buffers:
	// live heap, whatever the pages and stack caches did.
	if idle.HeapPerStreamBytes <= 0 || idle.HeapPerStreamBytes > 1<<20 {
		t.Errorf("heap per idle stream = %v bytes", idle.HeapPerStreamBytes)
	}
	for _, v := range []float64{idle.RSSPerStreamBytes, idle.StacksPerStreamBytes} {
		if math.IsNaN(v) || math.Abs(v) > 16<<20 {
			t.Errorf("idle streams = %+v: a figure is not sane", idle)
		}
	}

	checkArtifacts(t, rep, o, o.OutDir)
	checkTable(t, table.String())

	p := progress.String()
	if !strings.Contains(p, "rein bench") || !strings.Contains(p, "sessions 5/5") || !strings.Contains(p, "runs 10/10") || !strings.HasSuffix(p, "\n") {
		t.Errorf("progress = %q, want a last line with 5/5 sessions and 10/10 runs, then a newline", p)
	}
}

// TestInterrupt stops every run cooperatively on the memory store: each
// ends COMPLETED with reason interrupted, with a reply.
func TestInterrupt(t *testing.T) {
	o := DefaultOptions()
	o.Store = "memory:"
	o.Sessions, o.Messages, o.Concurrency = 3, 2, 2
	o.Chunks, o.ChunkDelay = 5, 50*time.Millisecond
	o.ToolCalls = 1
	o.StopFraction, o.StopMode = 1, rein.StopInterrupt
	o.IdleStreams = -1
	o.Ramp = 300 * time.Millisecond

	rep, err := Run(testContext(t), o)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, rep)
	if got, want := rep.Runs.Outcomes, map[string]int{"COMPLETED/interrupted": 6}; !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes = %v, want %v", got, want)
	}
	checkLatencies(t, rep, map[string]int{LatencyAdmission: 6, LatencyRunStarted: 6, LatencyFirstDelta: 6, LatencyStop: 6, LatencyRun: 0})
	if rep.IdleStreams != (IdleStreams{}) {
		t.Errorf("idle streams = %+v, want the measurement skipped", rep.IdleStreams)
	}
	if rep.Events.ToolUses != rep.Events.ToolResults {
		t.Errorf("%d tool uses, %d results", rep.Events.ToolUses, rep.Events.ToolResults)
	}
	// The third session starts two thirds into the ramp.
	if rep.DurationS < 0.2 || rep.Workload.RampS != 0.3 {
		t.Errorf("duration %v s with a ramp of %v s: the ramp was not kept", rep.DurationS, rep.Workload.RampS)
	}
}

// TestRemote loads a server the tool did not start, with a token, through
// its URL. That server's registry has no Go or process collectors: the
// report must say which figures it lacks instead of showing zeros as
// measurements, and everything else must work.
func TestRemote(t *testing.T) {
	o := DefaultOptions()
	o.Sessions, o.Messages = 4, 2
	o.Chunks, o.ChunkDelay = 3, 10*time.Millisecond
	o.IdleStreams = 3
	o.SampleInterval = 50 * time.Millisecond
	script := filepath.Join(t.TempDir(), "bench.yaml")
	if err := os.WriteFile(script, o.Script(), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := reintest.NewServer(t, reintest.ServerOptions{Script: script, Tokens: map[string]string{"secret": "alice"}})
	o.URL, o.Token = srv.URL, "secret"
	o.OutDir = t.TempDir()

	rep, err := Run(testContext(t), o)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, rep)
	// The tool does not know the script a remote server runs.
	if _, err := os.Stat(filepath.Join(o.OutDir, FileScript)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s written for a remote server: %v", FileScript, err)
	}
	if _, err := os.Stat(filepath.Join(o.OutDir, FileJSON)); err != nil {
		t.Error(err)
	}
	if rep.Target.InProcess || rep.Target.URL != srv.URL || rep.Target.Store != "" {
		t.Errorf("target = %+v, want the remote server", rep.Target)
	}
	checkLatencies(t, rep, map[string]int{LatencyAdmission: 8, LatencyRunStarted: 8, LatencyFirstDelta: 8, LatencyStop: 0, LatencyRun: 8})
	wantMissing := []string{metricHeap, metricStacks, metricCPU, metricRSS}
	slices.Sort(wantMissing)
	if !slices.Equal(rep.Server.Missing, wantMissing) {
		t.Errorf("missing = %v, want %v", rep.Server.Missing, wantMissing)
	}
	if rep.Server.Source != srv.URL+"/metrics" {
		t.Errorf("source = %q", rep.Server.Source)
	}
	if rep.Events.ServerAppended <= 0 {
		t.Errorf("scraped %v appended events", rep.Events.ServerAppended)
	}
	if rep.IdleStreams.Opened != 3 || !rep.IdleStreams.Measured {
		t.Errorf("idle streams = %+v, want 3 opened with the token", rep.IdleStreams)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "n/a (the server does not expose process_cpu_seconds_total)") {
		t.Errorf("the table does not say CPU is unavailable:\n%s", table.String())
	}
}

// TestErrorsAreReported points the tool at a server with a wrong token:
// the run finishes, and its report counts every failure by kind instead of
// pretending to have measured anything.
func TestErrorsAreReported(t *testing.T) {
	o := DefaultOptions()
	o.Sessions, o.Messages = 3, 2
	o.Chunks, o.ChunkDelay = 1, 0
	o.IdleStreams = 2
	script := filepath.Join(t.TempDir(), "bench.yaml")
	if err := os.WriteFile(script, o.Script(), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := reintest.NewServer(t, reintest.ServerOptions{Script: script, Tokens: map[string]string{"secret": "alice"}})
	o.URL, o.Token = srv.URL, "wrong"

	rep, err := Run(testContext(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verification.Complete {
		t.Error("a run where nothing worked is marked complete")
	}
	if r := rep.Runs; r.Planned != 6 || r.Admitted != 0 || r.Completed != 0 || r.Skipped != 6 {
		t.Errorf("runs = %+v, want all 6 skipped", r)
	}
	got := map[string]int{}
	for _, e := range rep.Errors {
		got[e.Kind] = e.Count
		if e.Example == "" {
			t.Errorf("error kind %s has no example", e.Kind)
		}
	}
	want := map[string]int{"create session: unauthenticated": 3, "idle streams: create session: unauthenticated": 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors = %v, want %v", got, want)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if s := table.String(); !strings.Contains(s, "INCOMPLETE") || !strings.Contains(s, "3 × create session: unauthenticated") {
		t.Errorf("the table hides the failure:\n%s", s)
	}
}

// cancelWriter cancels a context at its first write.
type cancelWriter struct{ cancel context.CancelFunc }

func (w cancelWriter) Write(p []byte) (int, error) {
	w.cancel()
	return len(p), nil
}

// TestCancel interrupts a run whose runs cannot finish for a minute: Run
// answers at once with the context's error and the partial report.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	o := DefaultOptions()
	o.Store = "memory:"
	o.Sessions, o.Messages = 3, 1
	o.Chunks, o.ChunkDelay = 2, 30*time.Second
	o.IdleStreams = -1
	// The first progress line comes once the load has begun.
	o.SampleInterval = 20 * time.Millisecond
	o.Progress = cancelWriter{cancel}

	start := time.Now()
	rep, err := Run(ctx, o)
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("Run = %v, %v; want a partial report and context.Canceled", rep, err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("Run took %s after its context was cancelled", took)
	}
	if rep.Runs.Completed != 0 || rep.Verification.Complete {
		t.Errorf("runs %+v, verification %+v", rep.Runs, rep.Verification)
	}
	found := false
	for _, e := range rep.Errors {
		found = found || strings.Contains(e.Kind, "interrupted")
	}
	if !found {
		t.Errorf("errors %+v do not say the run was interrupted", rep.Errors)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		param string
		edit  func(*Options)
	}{
		{"sessions", func(o *Options) { o.Sessions = 0 }},
		{"messages", func(o *Options) { o.Messages = -1 }},
		{"concurrency", func(o *Options) { o.Concurrency = -1 }},
		{"ramp", func(o *Options) { o.Ramp = -time.Second }},
		{"chunks", func(o *Options) { o.Chunks = 0 }},
		{"chunk-delay", func(o *Options) { o.ChunkDelay = -time.Millisecond }},
		{"tool-calls", func(o *Options) { o.ToolCalls = -1 }},
		{"stop-fraction", func(o *Options) { o.StopFraction = 1.5 }},
		{"stop-fraction", func(o *Options) { o.StopFraction = math.NaN() }},
		{"stop-mode", func(o *Options) { o.StopMode = "pause" }},
		{"run-timeout", func(o *Options) { o.RunTimeout = 0 }},
		{"url", func(o *Options) { o.URL = "localhost:8080" }},
		{"url", func(o *Options) { o.URL = "ftp://example.com" }},
		{"store", func(o *Options) { o.Store = "mysql://x" }},
	} {
		o := DefaultOptions()
		tc.edit(&o)
		rep, err := Run(t.Context(), o)
		var re *rein.Error
		if rep != nil || !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument || re.Param != tc.param {
			t.Errorf("%s: Run = %v, %v; want no report and invalid_argument naming %s", tc.param, rep, err, tc.param)
		}
	}
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("the default options are invalid: %v", err)
	}
}

func TestUnreachableServer(t *testing.T) {
	o := DefaultOptions()
	o.URL = "http://127.0.0.1:1"
	rep, err := Run(t.Context(), o)
	if rep != nil || rein.CodeOf(err) != rein.CodeUnavailable {
		t.Errorf("Run = %v, %v; want no report and an unavailable error", rep, err)
	}
}

func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := Flags(fs)
	if !reflect.DeepEqual(*o, DefaultOptions()) {
		t.Errorf("unparsed flags = %+v, want the defaults %+v", *o, DefaultOptions())
	}
	err := fs.Parse([]string{"-url", "http://h:1", "-token", "t", "-store", "memory:", "-sessions", "7", "-messages", "3",
		"-concurrency", "2", "-ramp", "1s", "-chunks", "4", "-chunk-delay", "5ms", "-tool-calls", "1", "-stop-fraction", "0.25",
		"-stop-mode", "interrupt", "-idle-streams", "-1", "-run-timeout", "9s", "-out", "dir", "-server-log", "log.txt"})
	if err != nil {
		t.Fatal(err)
	}
	want := Options{URL: "http://h:1", Token: "t", Store: "memory:", Sessions: 7, Messages: 3, Concurrency: 2, Ramp: time.Second, Chunks: 4,
		ChunkDelay: 5 * time.Millisecond, ToolCalls: 1, StopFraction: 0.25, StopMode: rein.StopInterrupt, IdleStreams: -1,
		RunTimeout: 9 * time.Second, OutDir: "dir", ServerLog: "log.txt"}
	if !reflect.DeepEqual(*o, want) {
		t.Errorf("parsed = %+v, want %+v", *o, want)
	}
	if err := Flags(flag.NewFlagSet("b", flag.ContinueOnError)).Validate(); err != nil {
		t.Errorf("default flags invalid: %v", err)
	}
	bad := flag.NewFlagSet("bench", flag.ContinueOnError)
	bad.SetOutput(io.Discard)
	Flags(bad)
	if err := bad.Parse([]string{"-stop-mode", "pause"}); err == nil {
		t.Error("-stop-mode pause accepted")
	}
}

func TestStopAt(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		runs int
		want int
	}{{0, 10, 0}, {1, 10, 10}, {0.5, 10, 5}, {0.3, 10, 3}, {0.25, 1000, 250}, {0.01, 50, 0}} {
		r := &runner{o: Options{StopFraction: tc.f}}
		n, last := 0, -10
		for i := range tc.runs {
			if r.stopAt(i) {
				n++
				if tc.f <= 0.5 && i-last < 2 {
					t.Errorf("f=%v: runs %d and %d both stopped: not spread", tc.f, last, i)
				}
				last = i
			}
		}
		if n != tc.want {
			t.Errorf("f=%v over %d runs: %d stops, want %d", tc.f, tc.runs, n, tc.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0: 1, 0.1: 1, 0.5: 5, 0.9: 9, 0.91: 10, 0.99: 10, 1: 10} {
		if got := quantile(ds, q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	l := newLatency("x", []time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if l.Count != 3 || l.P50MS != 2 || l.P99MS != 3 || l.MaxMS != 3 || len(l.CDFMS) != 101 || l.CDFMS[0] != 1 || l.CDFMS[100] != 3 {
		t.Errorf("newLatency = %+v", l)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
go_memstats_heap_alloc_bytes 1.048576e+06
rein_sse_subscribers{rein_instance="a"} 3
rein_sse_subscribers{rein_instance="b"} 4
rein_http_requests_total{code="200",method="GET",route="/api/sessions/{id} x"} 5 1700000000000
rein_weird{v="a \"}\" b"} 7

`
	got, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"process_cpu_seconds_total": 12.5, "go_memstats_heap_alloc_bytes": 1 << 20,
		"rein_sse_subscribers": 7, "rein_http_requests_total": 5, "rein_weird": 7,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMetrics = %v, want %v", got, want)
	}
	for _, bad := range []string{"name_only", `x{a="1" 2`, "x abc"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMetrics(%q) accepted", bad)
		}
	}
}

// TestSVGWithoutSamples draws a report where no metric has samples: the
// chart is still well-formed, with one (empty) series per metric.
func TestSVGWithoutSamples(t *testing.T) {
	rep := &Report{Version: ReportVersion}
	for _, n := range LatencyNames {
		rep.Latencies = append(rep.Latencies, newLatency(n, nil))
	}
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	series := svgSeries(t, b.Bytes())
	if len(series) != len(LatencyNames) {
		t.Fatalf("%d series, want %d", len(series), len(LatencyNames))
	}
	for _, s := range series {
		if s.points != 0 {
			t.Errorf("series %s has %d points without samples", s.metric, s.points)
		}
	}
}

func TestAxisLabel(t *testing.T) {
	for e, want := range map[int]string{-3: "1 µs", -2: "10 µs", -1: "100 µs", 0: "1 ms", 2: "100 ms", 3: "1 s", 4: "10 s"} {
		if got := axisLabel(e); got != want {
			t.Errorf("axisLabel(%d) = %q, want %q", e, got, want)
		}
	}
}

// checkComplete fails unless the verification passed without an error.
func checkComplete(t *testing.T, rep *Report) {
	t.Helper()
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %+v", rep.Errors)
	}
	v := rep.Verification
	if !v.Complete || v.Sessions != rep.Workload.Sessions || v.Runs != rep.Runs.Planned || v.Events != rep.Events.Logged {
		t.Errorf("verification = %+v (runs %+v, events %+v)", v, rep.Runs, rep.Events)
	}
	if rep.Events.Received != rep.Events.Logged || rep.Events.Logged == 0 {
		t.Errorf("events = %+v: the streams did not deliver the logs", rep.Events)
	}
	if rep.DurationS <= 0 || rep.Events.PerSecond <= 0 {
		t.Errorf("duration %v s, %v events/s", rep.DurationS, rep.Events.PerSecond)
	}
	if math.Abs(rep.Events.PerSecond*rep.DurationS-float64(rep.Events.Received)) > 1e-6*float64(rep.Events.Received) {
		t.Errorf("events/s %v is not received/duration", rep.Events.PerSecond)
	}
}

// checkLatencies checks every metric is present, in order, with the
// given counts and ordered, consistent statistics.
func checkLatencies(t *testing.T, rep *Report, counts map[string]int) {
	t.Helper()
	names := make([]string, len(rep.Latencies))
	for i, l := range rep.Latencies {
		names[i] = l.Name
	}
	if !slices.Equal(names, LatencyNames) {
		t.Fatalf("latencies %v, want %v", names, LatencyNames)
	}
	for _, l := range rep.Latencies {
		if l.Count != counts[l.Name] {
			t.Errorf("%s: %d samples, want %d", l.Name, l.Count, counts[l.Name])
		}
		if l.Count == 0 {
			if len(l.CDFMS) != 0 || l.P50MS != 0 || l.MaxMS != 0 {
				t.Errorf("%s: figures without samples: %+v", l.Name, l)
			}
			continue
		}
		if len(l.CDFMS) != 101 || !slices.IsSorted(l.CDFMS) {
			t.Errorf("%s: cdf %v, want 101 ascending percentiles", l.Name, l.CDFMS)
			continue
		}
		if !(l.CDFMS[0] > 0 && l.P50MS <= l.P90MS && l.P90MS <= l.P99MS && l.P99MS <= l.MaxMS && l.MaxMS < 60_000) {
			t.Errorf("%s: %+v is not sane", l.Name, l)
		}
		if l.CDFMS[50] != l.P50MS || l.CDFMS[90] != l.P90MS || l.CDFMS[99] != l.P99MS || l.CDFMS[100] != l.MaxMS {
			t.Errorf("%s: cdf disagrees with the percentiles: %+v", l.Name, l)
		}
	}
}

// checkServer checks the CPU and memory figures of an in-process server.
func checkServer(t *testing.T, rep *Report, inProcess bool) {
	t.Helper()
	s := rep.Server
	if s.Source == "" || len(s.Missing) != 0 {
		t.Errorf("server source %q, missing %v", s.Source, s.Missing)
	}
	if s.CPUS <= 0 || s.CPUPerEventUS <= 0 || math.Abs(s.CPUPerEventUS-s.CPUS/float64(rep.Events.Logged)*1e6) > 1e-6 {
		t.Errorf("cpu %v s, %v µs/event", s.CPUS, s.CPUPerEventUS)
	}
	for _, v := range []int64{s.RSSBeforeBytes, s.RSSAfterBytes, s.HeapBeforeBytes, s.HeapAfterBytes} {
		if v <= 0 {
			t.Errorf("server = %+v: a memory figure is not positive", s)
			break
		}
	}
	if s.RSSPeakBytes < max(s.RSSBeforeBytes, s.RSSAfterBytes) || s.HeapPeakBytes < max(s.HeapBeforeBytes, s.HeapAfterBytes) {
		t.Errorf("server = %+v: a peak below a sample", s)
	}
}

// checkArtifacts checks the files Run wrote into dir.
func checkArtifacts(t *testing.T, rep *Report, o Options, dir string) {
	t.Helper()
	var direct bytes.Buffer
	if err := rep.WriteJSON(&direct); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, FileJSON))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("the JSON does not read back to the report:\n got %+v\nwant %+v", back, rep)
	}
	var again bytes.Buffer
	if err := back.WriteJSON(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), direct.Bytes()) {
		t.Error("JSON → report → JSON changed the bytes")
	}

	svg, err := os.ReadFile(filepath.Join(dir, FileSVG))
	if err != nil {
		t.Fatal(err)
	}
	series := svgSeries(t, svg)
	if len(series) != len(LatencyNames) {
		t.Fatalf("the SVG has %d series, want %d", len(series), len(LatencyNames))
	}
	for i, s := range series {
		l := rep.Latencies[i]
		want := 0
		if l.Count > 0 {
			want = 101
		}
		if s.metric != l.Name || s.points != want {
			t.Errorf("SVG series %d = %+v, want metric %s with %d points", i, s, l.Name, want)
		}
	}

	script, err := os.ReadFile(filepath.Join(dir, FileScript))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(script, o.Script()) {
		t.Errorf("%s is not the script the server ran:\n%s", FileScript, script)
	}

	txt, err := os.ReadFile(filepath.Join(dir, FileTable))
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(txt, table.Bytes()) {
		t.Errorf("%s differs from WriteTable", FileTable)
	}
}

// checkTable checks that the table has every row.
func checkTable(t *testing.T, table string) {
	t.Helper()
	rows := []string{
		"latency (ms)", "admission (POST user.message)", "message → session.run_started", "message → first delta",
		"stop → session.run_completed", "message → session.run_completed",
		"duration", "events", "events/s", "server CPU", "server CPU per event", "server RSS", "server heap",
		"idle SSE stream", "runs", "stops", "outcomes", "verification", "errors",
	}
	lines := strings.Split(table, "\n")
	for _, row := range rows {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), row+" ") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the table has no row %q:\n%s", row, table)
		}
	}
	if !strings.Contains(table, "complete: 5 sessions, 10 runs") || !strings.Contains(table, "errors  ") {
		t.Errorf("table:\n%s", table)
	}
}

// svgSeriesInfo is one <g class="series"> of a chart.
type svgSeriesInfo struct {
	metric string
	points int
}

// svgSeries parses an SVG document strictly and returns its series.
func svgSeries(t *testing.T, doc []byte) []svgSeriesInfo {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var (
		out    []svgSeriesInfo
		depth  int
		inside = -1
		root   string
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			if root == "" {
				root = el.Name.Space + " " + el.Name.Local
			}
			attr := func(name string) string {
				for _, a := range el.Attr {
					if a.Name.Local == name {
						return a.Value
					}
				}
				return ""
			}
			if el.Name.Local == "g" && attr("class") == "series" {
				out = append(out, svgSeriesInfo{metric: attr("data-metric")})
				inside = depth
			}
			if el.Name.Local == "polyline" && inside > 0 {
				out[len(out)-1].points += len(strings.Fields(attr("points")))
			}
		case xml.EndElement:
			if depth == inside {
				inside = -1
			}
			depth--
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
	return out
}

// TestPostgres runs a small load on an in-process server over PostgreSQL
// (skipped without REIN_TEST_POSTGRES_DSN), in a schema of its own chosen
// through the DSN's search_path. The report shows the DSN as redacted
// for logs (without a password).
func TestPostgres(t *testing.T) {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set")
	}
	ctx := testContext(t)
	schema := fmt.Sprintf("bench_load_test_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = conn.Close(context.Background())
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	spec := u.String()

	o := DefaultOptions()
	o.Store = spec
	o.Sessions, o.Messages = 3, 2
	o.Chunks, o.ChunkDelay = 4, 20*time.Millisecond
	o.ToolCalls = 1
	o.StopFraction = 0.5
	o.IdleStreams = 3
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, rep)
	checkLatencies(t, rep, map[string]int{LatencyAdmission: 6, LatencyRunStarted: 6, LatencyFirstDelta: 6, LatencyStop: 3, LatencyRun: 3})
	if rep.Target.Store != backend.Redact(spec) || !rep.IdleStreams.Measured {
		t.Errorf("target %+v, idle streams %+v", rep.Target, rep.IdleStreams)
	}
}

// A stop that comes after its run ended is answered accepted: false and
// logged after the run's session.run_completed, naming the run: that
// event is the request's record, and the run still verifies. Any other
// event after the end, an accepted stop's included, is a fault.
func TestVerifyLateStop(t *testing.T) {
	at := time.Now()
	event := func(typ rein.EventType, p any) rein.Event {
		e := rein.NewEvent(typ, "run_1", p)
		e.CreatedAt = at
		return e
	}
	rid := "run_1"
	o := DefaultOptions()
	r := &runner{o: o, t: &target{}, errs: newErrorLog()}
	base := []rein.Event{
		event(rein.EventRunStarted, rein.RunStartedPayload{RunID: rid}),
		event(rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: rid, Step: 1, Text: "hi"}),
		event(rein.EventMessage, rein.MessagePayload{RunID: rid, Text: "hi", Reason: rein.ReasonStop}),
		event(rein.EventRunCompleted, rein.RunCompletedPayload{RunID: rid, Status: rein.StatusCompleted, Reason: rein.ReasonStop}),
	}
	for _, c := range []struct {
		name     string
		after    rein.Event
		problems int
	}{
		{"a late stop", event(rein.EventUserInterrupt, rein.UserInterruptPayload{RunID: &rid, Mode: "cancel", Accepted: false}), 0},
		{"an accepted stop", event(rein.EventUserInterrupt, rein.UserInterruptPayload{RunID: &rid, Mode: "cancel", Accepted: true}), 1},
		// A delta there also makes the deltas disagree with the reply.
		{"a delta", event(rein.EventMessageDelta, rein.MessageDeltaPayload{RunID: rid, Step: 1, Text: "more"}), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.errs = newErrorLog()
			v := verified{outcomes: map[string]int{}}
			rr := &runResult{id: rid, stop: true, stopLate: true, status: rein.StatusCompleted, reason: rein.ReasonStop}
			r.verifyRun(&v, &sessionResult{id: "ses_1"}, rr, append(slices.Clone(base), c.after))
			if v.problems != c.problems {
				t.Fatalf("%d problems, want %d: %v", v.problems, c.problems, r.errs)
			}
		})
	}
}

// Runs that end at their one delta are stopped there, so most stops come
// too late: whichever way each stop went, the report is complete — the
// late stops' user.interrupt events, logged after their runs' ends, are
// read off the streams and verified like the rest.
func TestLateStops(t *testing.T) {
	o := DefaultOptions()
	o.Store = "memory:"
	o.Sessions, o.Messages = 4, 3
	o.Chunks, o.ChunkDelay = 1, 0
	o.StopFraction = 1
	o.IdleStreams = -1
	rep, err := Run(testContext(t), o)
	if err != nil {
		t.Fatal(err)
	}
	checkComplete(t, rep)
	if rep.Runs.Stops != 12 || rep.Runs.StopsAccepted+rep.Runs.StopsLate != 12 {
		t.Errorf("stops %+v: want 12 sent, each accepted or late", rep.Runs)
	}
	// Runs of one delta end before a stop sent at that delta arrives: some
	// (in practice all) stops must have come late, or the path is untested.
	if rep.Runs.StopsLate == 0 {
		t.Errorf("no stop of a one-delta run came late (%+v): the late path was not exercised", rep.Runs)
	}
	t.Logf("%d of 12 stops late", rep.Runs.StopsLate)
}
