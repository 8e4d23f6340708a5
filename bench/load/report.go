package load

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ReportVersion is the version of the report's JSON form; it changes when
// a field changes meaning or goes away.
const ReportVersion = 1

// Report is the result of a load run. Its JSON form (WriteJSON) is
// stable within a ReportVersion; durations are in milliseconds or seconds
// as their names say, memory in bytes.
type Report struct {
	// Version is ReportVersion.
	Version int `json:"version"`
	// StartedAt is when the run started (UTC).
	StartedAt time.Time `json:"started_at"`
	// Target is the server under load.
	Target Target `json:"target"`
	// Workload is what was asked for.
	Workload Workload `json:"workload"`
	// Env is the machine the tool ran on.
	Env Env `json:"env"`
	// DurationS is the load phase's wall time: from the first session's
	// creation to the last session's last session.run_completed.
	DurationS float64 `json:"duration_s"`
	// Latencies are the measured distributions, in the order of
	// LatencyNames.
	Latencies []Latency `json:"latencies"`
	// Runs counts the runs by fate.
	Runs Runs `json:"runs"`
	// Events counts the events.
	Events Events `json:"events"`
	// Server is the server's CPU and memory over the load phase.
	Server Server `json:"server"`
	// IdleStreams is the memory one idle open event stream costs.
	IdleStreams IdleStreams `json:"idle_streams"`
	// Verification is what the check of every log found.
	Verification Verification `json:"verification"`
	// Errors are the errors met, by kind ([] when none).
	Errors []ErrorCount `json:"errors"`
}

// Target describes the server under load.
type Target struct {
	// URL is the server's root (for an in-process server, its loopback
	// address).
	URL string `json:"url"`
	// InProcess is true when the tool started the server in its own
	// process: then its CPU and memory figures include the load client.
	InProcess bool `json:"in_process"`
	// Store is the in-process server's store ("" for a remote server).
	Store string `json:"store"`
}

// Workload echoes the options that shaped the run.
type Workload struct {
	Sessions     int     `json:"sessions"`
	Messages     int     `json:"messages"`
	Concurrency  int     `json:"concurrency"`
	RampS        float64 `json:"ramp_s"`
	Chunks       int     `json:"chunks"`
	ChunkDelayMS float64 `json:"chunk_delay_ms"`
	ToolCalls    int     `json:"tool_calls"`
	StopFraction float64 `json:"stop_fraction"`
	StopMode     string  `json:"stop_mode"`
	IdleStreams  int     `json:"idle_streams"`
	RunTimeoutS  float64 `json:"run_timeout_s"`
}

// Env describes where the tool ran: figures from a shared or small
// machine read differently.
type Env struct {
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
}

// The latency metrics, in report order.
const (
	// LatencyAdmission is a user.message's round trip: POST sent → its
	// 200 answer (the run admitted, RUNNING or QUEUED).
	LatencyAdmission = "admission"
	// LatencyRunStarted is user.message sent → its session.run_started
	// read on the session's stream.
	LatencyRunStarted = "run_started"
	// LatencyFirstDelta is user.message sent → the run's first
	// agent.message.delta read on the stream.
	LatencyFirstDelta = "first_delta"
	// LatencyStop is a stop sent → the run's session.run_completed read
	// on the stream (accepted stops only).
	LatencyStop = "stop"
	// LatencyRun is user.message sent → session.run_completed read on
	// the stream, for the runs that were not stopped.
	LatencyRun = "run"
)

// LatencyNames lists the latency metrics in report order.
var LatencyNames = []string{LatencyAdmission, LatencyRunStarted, LatencyFirstDelta, LatencyStop, LatencyRun}

// latencyLabels are the metrics' row labels in the table and the chart.
var latencyLabels = map[string]string{
	LatencyAdmission:  "admission (POST user.message)",
	LatencyRunStarted: "message → session.run_started",
	LatencyFirstDelta: "message → first delta",
	LatencyStop:       "stop → session.run_completed",
	LatencyRun:        "message → session.run_completed",
}

// Latency is one measured distribution, in milliseconds.
type Latency struct {
	// Name is one of LatencyNames.
	Name  string  `json:"name"`
	Count int     `json:"count"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	// CDFMS are the 0th, 1st, …, 100th percentiles (101 values; empty
	// when Count is 0): enough to redraw the distribution.
	CDFMS []float64 `json:"cdf_ms"`
}

// Runs counts the runs by fate.
type Runs struct {
	// Planned is Sessions × Messages.
	Planned int `json:"planned"`
	// Admitted is the user.messages answered with a run id.
	Admitted int `json:"admitted"`
	// Completed is the runs whose session.run_completed was read.
	Completed int `json:"completed"`
	// Stops is the stops sent; StopsAccepted those that stopped the run;
	// StopsLate those answered not accepted because the run had already
	// ended (not an error: the run simply won the race).
	Stops         int `json:"stops"`
	StopsAccepted int `json:"stops_accepted"`
	StopsLate     int `json:"stops_late"`
	// Skipped is the runs never sent, because an error ended their
	// session first (or the run was interrupted).
	Skipped int `json:"skipped"`
	// Outcomes counts the runs by "STATUS/reason" as their logs record.
	Outcomes map[string]int `json:"outcomes"`
}

// Events counts the events of the load's sessions.
type Events struct {
	// Received is the events read on the sessions' streams.
	Received int64 `json:"received"`
	// Logged is the events in the sessions' logs after the load.
	Logged int64 `json:"logged"`
	// PerSecond is Received / DurationS: the sustained rate the clients
	// got over the whole load phase.
	PerSecond float64 `json:"per_second"`
	// Deltas, ToolUses and ToolResults count those event types in the
	// logs (deltas can be fewer than Chunks per run: the server may
	// coalesce deltas that queue behind a slow append).
	Deltas      int64 `json:"deltas"`
	ToolUses    int64 `json:"tool_uses"`
	ToolResults int64 `json:"tool_results"`
	// StepRestarts counts agent.step_restarted: steps made again because
	// a run was resumed after its turn lease was lost (0 on a healthy
	// server; more means the server could not renew leases in time).
	StepRestarts int64 `json:"step_restarts"`
	// ServerAppended is the growth of the server's own counter,
	// rein_events_appended_total, over the load phase: a cross-check,
	// not the figure CPU per event uses (Logged is). It counts other
	// clients' events on a shared server, and it counts appends as the
	// server observes them, which need not be one per logged event.
	ServerAppended float64 `json:"server_appended"`
}

// Server is the server's CPU and memory over the load phase. Before and
// after are taken after a garbage collection when the server runs in
// process (so they are live memory); the peak is the largest of the
// samples taken every SampleInterval.
type Server struct {
	// Source says where the figures come from.
	Source string `json:"source"`
	// Missing names the measurements the server did not expose (their
	// figures are 0); [] when none.
	Missing []string `json:"missing"`
	// CPUS is the server's CPU time (user + system) over the load phase.
	CPUS float64 `json:"cpu_s"`
	// CPUPerEventUS is CPUS per logged event, in microseconds.
	CPUPerEventUS   float64 `json:"cpu_per_event_us"`
	RSSBeforeBytes  int64   `json:"rss_before_bytes"`
	RSSPeakBytes    int64   `json:"rss_peak_bytes"`
	RSSAfterBytes   int64   `json:"rss_after_bytes"`
	HeapBeforeBytes int64   `json:"heap_before_bytes"`
	HeapPeakBytes   int64   `json:"heap_peak_bytes"`
	HeapAfterBytes  int64   `json:"heap_after_bytes"`
}

// IdleStreams is the server memory one idle open event stream costs: the
// difference between two samples, before and after opening Opened
// streams, divided by Opened.
type IdleStreams struct {
	// Streams is how many were asked for (0: the measurement was
	// skipped); Opened how many the server accepted.
	Streams int `json:"streams"`
	Opened  int `json:"opened"`
	// Measured is true when the server counted every opened stream and
	// both samples were taken; the figures below are 0 otherwise.
	Measured bool `json:"measured"`
	// Per stream, in bytes: resident memory, heap, goroutine stacks.
	RSSPerStreamBytes    float64 `json:"rss_per_stream_bytes"`
	HeapPerStreamBytes   float64 `json:"heap_per_stream_bytes"`
	StacksPerStreamBytes float64 `json:"stacks_per_stream_bytes"`
}

// Verification is what the check of every session's log found (see
// Errors for each failed check).
type Verification struct {
	// Sessions, Runs and Events are what was checked.
	Sessions int   `json:"sessions"`
	Runs     int   `json:"runs"`
	Events   int64 `json:"events"`
	// Complete is true when every planned run reached its
	// session.run_completed, every log is gap-free and duplicate-free,
	// every stream delivered exactly its log, every outcome is the one
	// asked for, and no error of any kind happened.
	Complete bool `json:"complete"`
}

// ErrorCount is one kind of error and how often it happened.
type ErrorCount struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	// Example is the first such error's message.
	Example string `json:"example"`
}

func newReport(o Options, t *target) *Report {
	return &Report{
		Version:   ReportVersion,
		StartedAt: time.Now().UTC().Round(0),
		Target:    Target{URL: t.url, InProcess: t.inProcess, Store: t.store},
		Workload: Workload{
			Sessions: o.Sessions, Messages: o.Messages, Concurrency: o.Concurrency, RampS: o.Ramp.Seconds(),
			Chunks: o.Chunks, ChunkDelayMS: ms(o.ChunkDelay), ToolCalls: o.ToolCalls,
			StopFraction: o.StopFraction, StopMode: string(o.StopMode),
			IdleStreams: max(o.IdleStreams, 0), RunTimeoutS: o.RunTimeout.Seconds(),
		},
		Env: Env{
			GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
			NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		},
		Latencies: []Latency{},
		Errors:    []ErrorCount{},
		Server:    Server{Missing: []string{}},
	}
}

// fill completes the report from what the run saw.
func (rep *Report) fill(r *runner, before, after sample, duration time.Duration, v verified) {
	rep.DurationS = duration.Seconds()

	series := map[string][]time.Duration{}
	runs := Runs{Planned: r.o.Sessions * r.o.Messages, Outcomes: v.outcomes}
	attempted := 0
	for _, sr := range r.sessions {
		for _, rr := range sr.runs {
			attempted++
			if rr.id == "" {
				continue
			}
			runs.Admitted++
			series[LatencyAdmission] = append(series[LatencyAdmission], rr.admitted.Sub(rr.t0))
			if !rr.started.IsZero() {
				series[LatencyRunStarted] = append(series[LatencyRunStarted], rr.started.Sub(rr.t0))
			}
			if !rr.firstDelta.IsZero() {
				series[LatencyFirstDelta] = append(series[LatencyFirstDelta], rr.firstDelta.Sub(rr.t0))
			}
			if !rr.stopSent.IsZero() {
				runs.Stops++
			}
			if rr.stopAccepted {
				runs.StopsAccepted++
			}
			if rr.stopLate {
				runs.StopsLate++
			}
			if rr.completed.IsZero() {
				continue
			}
			runs.Completed++
			if rr.stopAccepted {
				series[LatencyStop] = append(series[LatencyStop], rr.completed.Sub(rr.stopSent))
			} else {
				series[LatencyRun] = append(series[LatencyRun], rr.completed.Sub(rr.t0))
			}
		}
	}
	// An attempted run that failed before its answer is an error, not a
	// skip; the rest of its session is skipped.
	runs.Skipped = runs.Planned - attempted
	rep.Runs = runs
	for _, name := range LatencyNames {
		rep.Latencies = append(rep.Latencies, newLatency(name, series[name]))
	}

	rep.Events = Events{
		Received: r.received.Load(), Logged: v.events,
		Deltas: v.deltas, ToolUses: v.uses, ToolResults: v.results, StepRestarts: v.restarts,
		ServerAppended: after.appended - before.appended,
	}
	if rep.DurationS > 0 {
		rep.Events.PerSecond = float64(rep.Events.Received) / rep.DurationS
	}

	missing := append(slices.Clone(before.missing), after.missing...)
	slices.Sort(missing)
	r.peakMu.Lock()
	rep.Server = Server{
		Source:         r.t.probe.source(),
		Missing:        slices.Compact(missing),
		CPUS:           after.cpu - before.cpu,
		RSSBeforeBytes: before.rss, RSSPeakBytes: r.peakRSS, RSSAfterBytes: after.rss,
		HeapBeforeBytes: before.heap, HeapPeakBytes: r.peakH, HeapAfterBytes: after.heap,
	}
	r.peakMu.Unlock()
	if rep.Server.Missing == nil {
		rep.Server.Missing = []string{}
	}
	if v.events > 0 {
		rep.Server.CPUPerEventUS = rep.Server.CPUS / float64(v.events) * 1e6
	}

	rep.Verification = Verification{Sessions: v.sessions, Runs: v.runs, Events: v.events}

	r.errs.mu.Lock()
	for kind, n := range r.errs.counts {
		rep.Errors = append(rep.Errors, ErrorCount{Kind: kind, Count: n, Example: r.errs.example[kind]})
	}
	r.errs.mu.Unlock()
	slices.SortFunc(rep.Errors, func(a, b ErrorCount) int { return strings.Compare(a.Kind, b.Kind) })

	rep.Verification.Complete = len(rep.Errors) == 0 && v.problems == 0 &&
		runs.Completed == runs.Planned && v.runs == runs.Planned &&
		rep.Events.Received == rep.Events.Logged
}

// newLatency summarizes one distribution.
func newLatency(name string, ds []time.Duration) Latency {
	l := Latency{Name: name, Count: len(ds), CDFMS: []float64{}}
	if len(ds) == 0 {
		return l
	}
	slices.Sort(ds)
	l.P50MS, l.P90MS, l.P99MS = ms(quantile(ds, 0.50)), ms(quantile(ds, 0.90)), ms(quantile(ds, 0.99))
	l.MaxMS = ms(ds[len(ds)-1])
	for p := range 101 {
		l.CDFMS = append(l.CDFMS, ms(quantile(ds, float64(p)/100)))
	}
	return l
}

// quantile is the nearest-rank q-quantile of sorted ds: the smallest
// value with at least q of the values at or below it.
func quantile(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// ms is d in milliseconds, rounded to the microsecond so that the JSON
// stays short.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Latency returns the named distribution (false when the report has none
// by that name).
func (rep *Report) Latency(name string) (Latency, bool) {
	for _, l := range rep.Latencies {
		if l.Name == name {
			return l, true
		}
	}
	return Latency{}, false
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("rein bench: read report: %w", err)
	}
	if rep.Version != ReportVersion {
		return nil, fmt.Errorf("rein bench: report version %d, this tool reads %d", rep.Version, ReportVersion)
	}
	return &rep, nil
}

// The files Run writes into Options.OutDir: WriteFiles writes the first
// three; FileScript is the in-process server's script (Options.Script).
const (
	FileJSON   = "report.json"
	FileSVG    = "report.svg"
	FileTable  = "report.txt"
	FileScript = "script.yaml"
)

// WriteFiles writes the JSON, the chart and the table into dir.
func (rep *Report) WriteFiles(dir string) error {
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{{FileJSON, rep.WriteJSON}, {FileSVG, rep.WriteSVG}, {FileTable, rep.WriteTable}} {
		var buf bytes.Buffer
		if err := f.write(&buf); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("rein bench: %w", err)
		}
	}
	return nil
}

// The table's row labels outside the latency rows, in order.
const (
	rowDuration     = "duration"
	rowEvents       = "events"
	rowEventsPerSec = "events/s"
	rowCPU          = "server CPU"
	rowCPUPerEvent  = "server CPU per event"
	rowRSS          = "server RSS"
	rowHeap         = "server heap"
	rowIdle         = "idle SSE stream"
	rowRuns         = "runs"
	rowStops        = "stops"
	rowOutcomes     = "outcomes"
	rowVerification = "verification"
	rowErrors       = "errors"
)

// WriteTable writes the report as a human-readable table.
func (rep *Report) WriteTable(w io.Writer) error {
	var b bytes.Buffer
	wl := rep.Workload
	where := "remote server " + rep.Target.URL
	if rep.Target.InProcess {
		where = "in-process server, store " + rep.Target.Store
	}
	fmt.Fprintf(&b, "rein bench: %s\n", where)
	fmt.Fprintf(&b, "%d sessions × %d messages, concurrency %d, ramp %s; %d deltas %s apart, %d tool call(s); stops %.0f%% (%s)\n",
		wl.Sessions, wl.Messages, wl.Concurrency, time.Duration(wl.RampS*float64(time.Second)), wl.Chunks, msDuration(wl.ChunkDelayMS), wl.ToolCalls, wl.StopFraction*100, wl.StopMode)
	fmt.Fprintf(&b, "%s %s/%s, %d CPUs, GOMAXPROCS %d\n\n", rep.Env.GoVersion, rep.Env.GOOS, rep.Env.GOARCH, rep.Env.NumCPU, rep.Env.GOMAXPROCS)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp90\tp99\tmax\t")
	for _, l := range rep.Latencies {
		label := latencyLabels[l.Name]
		if label == "" {
			label = l.Name
		}
		if l.Count == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t\n", label)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", label, l.Count, msCell(l.P50MS), msCell(l.P90MS), msCell(l.P99MS), msCell(l.MaxMS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")

	srv := rep.Server
	na := func(metric string, s string) string {
		if slices.Contains(srv.Missing, metric) {
			return "n/a (the server does not expose " + metric + ")"
		}
		return s
	}
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{label}, args...)...)
	}
	row(rowDuration, "%.2f s", rep.DurationS)
	row(rowEvents, "%d received on streams, %d in the logs (%d deltas, %d tool uses, %d tool results, %d step restarts)",
		rep.Events.Received, rep.Events.Logged, rep.Events.Deltas, rep.Events.ToolUses, rep.Events.ToolResults, rep.Events.StepRestarts)
	row(rowEventsPerSec, "%.0f", rep.Events.PerSecond)
	scope := ""
	if rep.Target.InProcess {
		scope = " (this process: server and load client)"
	}
	row(rowCPU, "%s", na(metricCPU, fmt.Sprintf("%.2f s%s", srv.CPUS, scope)))
	row(rowCPUPerEvent, "%s", na(metricCPU, fmt.Sprintf("%.1f µs", srv.CPUPerEventUS)))
	row(rowRSS, "%s", na(metricRSS, fmt.Sprintf("before %s, peak %s, after %s",
		formatBytes(float64(srv.RSSBeforeBytes)), formatBytes(float64(srv.RSSPeakBytes)), formatBytes(float64(srv.RSSAfterBytes)))))
	row(rowHeap, "%s", na(metricHeap, fmt.Sprintf("before %s, peak %s, after %s",
		formatBytes(float64(srv.HeapBeforeBytes)), formatBytes(float64(srv.HeapPeakBytes)), formatBytes(float64(srv.HeapAfterBytes)))))
	idle := rep.IdleStreams
	switch {
	case idle.Streams == 0:
		row(rowIdle, "not measured")
	case idle.Opened == 0:
		row(rowIdle, "none of %d opened (see errors)", idle.Streams)
	case !idle.Measured:
		row(rowIdle, "not measured: %d of %d opened, but the server did not count them (see errors)", idle.Opened, idle.Streams)
	default:
		row(rowIdle, "%s RSS, %s heap, %s stacks per stream (%d streams)",
			na(metricRSS, formatBytes(idle.RSSPerStreamBytes)), na(metricHeap, formatBytes(idle.HeapPerStreamBytes)),
			na(metricStacks, formatBytes(idle.StacksPerStreamBytes)), idle.Opened)
	}
	rs := rep.Runs
	row(rowRuns, "%d planned, %d admitted, %d completed, %d skipped", rs.Planned, rs.Admitted, rs.Completed, rs.Skipped)
	row(rowStops, "%d sent, %d accepted, %d late (the run had ended)", rs.Stops, rs.StopsAccepted, rs.StopsLate)
	outcomes := make([]string, 0, len(rs.Outcomes))
	for _, k := range sortedKeys(rs.Outcomes) {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", k, rs.Outcomes[k]))
	}
	if len(outcomes) == 0 {
		outcomes = append(outcomes, "none")
	}
	row(rowOutcomes, "%s", strings.Join(outcomes, ", "))
	verdict := "INCOMPLETE"
	if rep.Verification.Complete {
		verdict = "complete"
	}
	row(rowVerification, "%s: %d sessions, %d runs, %d events checked (seq gap-free, no duplicate, streams = logs, every run completed)",
		verdict, rep.Verification.Sessions, rep.Verification.Runs, rep.Verification.Events)
	if len(rep.Errors) == 0 {
		row(rowErrors, "none")
	}
	for _, e := range rep.Errors {
		row(rowErrors, "%d × %s: %s", e.Count, e.Kind, e.Example)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// msCell formats a latency for the table with sensible precision.
func msCell(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// msDuration formats milliseconds as a Go duration.
func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// formatBytes formats a byte count (possibly negative: a delta) in IEC
// units.
func formatBytes(v float64) string {
	abs := math.Abs(v)
	switch {
	case abs >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case abs >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case abs >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
