// Package load is Rein's load tool, the library behind `rein bench`: it
// drives N sessions × M messages through a server's HTTP API with the
// scripted model, and reports what users and operators feel — admission
// latency, message → session.run_started, message → first delta, stop →
// session.run_completed, events per second, the server's CPU per event and
// its memory, and the memory one idle open event stream costs.
//
// It exists because the testing.B benchmarks of the packages measure one
// path at a time on a quiet process, while the questions that decide a
// deployment ("how many sessions fit on this box, and what does the p99
// look like then?") are about many sessions at once. The tool talks to the
// server only through the Go client (package client), so what it measures
// is what any client gets, over loopback HTTP and SSE with Last-Event-ID
// resume — and it checks what it measured: every run reached
// session.run_completed, every session's log is gap-free and
// duplicate-free, and every stream delivered exactly the log.
//
// Run either targets a running server (Options.URL) or starts one in this
// process over a chosen store (Options.Store) with a scripted model built
// from the options (Options.Script). A run that meets errors still
// finishes and reports them by kind; only a setup failure (bad options, an
// unreachable server) makes Run return without a report.
package load

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/reinhq/rein"
)

// Options describe one load run. The zero value is not valid; start from
// DefaultOptions (or Flags) and change what you need.
type Options struct {
	// URL is the root of a running server (http://host:port). Empty
	// means: start a server in this process over Store.
	URL string
	// Token is the bearer token for URL ("" for a single-user server).
	Token string
	// Store is the in-process server's store: sqlite:PATH, postgres://…,
	// or memory:. Empty means a SQLite file in a fresh temporary
	// directory, removed afterwards. Ignored when URL is set.
	Store string

	// Sessions is how many sessions are driven (N ≥ 1).
	Sessions int
	// Messages is how many user messages each session sends, one after
	// the other's session.run_completed (M ≥ 1).
	Messages int
	// Concurrency caps the sessions driven at once (0: all of them).
	Concurrency int
	// Ramp spreads the sessions' starts evenly over this long (0: all
	// start at once, a burst the first admissions wait behind).
	Ramp time.Duration

	// Chunks is how many deltas the scripted model streams per run (≥ 1).
	Chunks int
	// ChunkDelay is the pause before each delta.
	ChunkDelay time.Duration
	// ToolCalls is how many sleep(0) tool calls the model makes after its
	// text; a run with tool calls has a second, one-delta step.
	ToolCalls int

	// StopFraction is the share of runs (0 to 1) that get a stop, sent
	// as soon as the run's first delta arrives; the stopped runs are
	// spread evenly over the whole workload.
	StopFraction float64
	// StopMode is the stop's mode: rein.StopCancel or rein.StopInterrupt.
	StopMode rein.StopMode

	// IdleStreams is how many idle event streams are opened, before the
	// load, to measure the server memory one costs (0: as many as
	// Sessions; negative: skip the measurement).
	IdleStreams int
	// RunTimeout bounds the wait for one run's session.run_completed.
	RunTimeout time.Duration

	// OutDir, when set, receives report.json, report.svg and report.txt,
	// and for an in-process server the script it ran, script.yaml.
	OutDir string
	// ServerLog, when set, is a file that receives the in-process
	// server's log (text, warnings and errors), to see why requests
	// failed; none by default, so the log does not perturb the load.
	ServerLog string
	// Progress, when set, receives a live progress line (rewritten in
	// place with carriage returns) and a final newline.
	Progress io.Writer
	// SampleInterval is how often the progress line is written and the
	// server's memory is sampled for its peak (0: one second).
	SampleInterval time.Duration
}

// DefaultOptions returns the options `rein bench` starts from: 100
// sessions × 2 messages on a temporary SQLite file, 20 deltas 20 ms apart,
// no tool calls, no stops.
func DefaultOptions() Options {
	return Options{
		Sessions:   100,
		Messages:   2,
		Chunks:     20,
		ChunkDelay: 20 * time.Millisecond,
		StopMode:   rein.StopCancel,
		RunTimeout: 2 * time.Minute,
	}
}

// Flags registers the load tool's flags on fs, with DefaultOptions as
// their defaults, and returns the Options they fill in when fs is parsed.
// Progress and SampleInterval are left to the caller.
func Flags(fs *flag.FlagSet) *Options {
	o := DefaultOptions()
	fs.StringVar(&o.URL, "url", o.URL, "root URL of a running server to load (default: start one in this process)")
	fs.StringVar(&o.Token, "token", o.Token, "bearer token for --url (none for a single-user server)")
	fs.StringVar(&o.Store, "store", o.Store, "store of the in-process server: sqlite:PATH, postgres://... or memory: (default: SQLite in a temporary directory)")
	fs.IntVar(&o.Sessions, "sessions", o.Sessions, "sessions to drive")
	fs.IntVar(&o.Messages, "messages", o.Messages, "messages per session, each sent after the previous run completed")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "sessions driven at once (0: all)")
	fs.DurationVar(&o.Ramp, "ramp", o.Ramp, "spread the sessions' starts evenly over this long (0: all at once)")
	fs.IntVar(&o.Chunks, "chunks", o.Chunks, "deltas the scripted model streams per run")
	fs.DurationVar(&o.ChunkDelay, "chunk-delay", o.ChunkDelay, "pause before each delta")
	fs.IntVar(&o.ToolCalls, "tool-calls", o.ToolCalls, "sleep(0) tool calls per run, after the text")
	fs.Float64Var(&o.StopFraction, "stop-fraction", o.StopFraction, "share of runs (0 to 1) stopped at their first delta")
	fs.Func("stop-mode", "mode of the stops: cancel or interrupt (default cancel)", func(v string) error {
		m := rein.StopMode(v)
		if v == "" || !m.Valid() {
			return fmt.Errorf("want cancel or interrupt, got %q", v)
		}
		o.StopMode = m
		return nil
	})
	fs.IntVar(&o.IdleStreams, "idle-streams", o.IdleStreams, "idle event streams opened to measure the memory of one (0: as many as --sessions; -1: skip)")
	fs.DurationVar(&o.RunTimeout, "run-timeout", o.RunTimeout, "longest wait for one run's session.run_completed")
	fs.StringVar(&o.OutDir, "out", o.OutDir, "directory for report.json, report.svg, report.txt and script.yaml (none: nothing written)")
	fs.StringVar(&o.ServerLog, "server-log", o.ServerLog, "file for the in-process server's warnings and errors (none: discarded)")
	return &o
}

// Validate reports the first invalid option as an invalid_argument error
// whose Param is the option's flag name.
func (o *Options) Validate() error {
	switch {
	case o.Sessions < 1:
		return rein.InvalidArgument("sessions", "must be at least 1, got %d", o.Sessions)
	case o.Messages < 1:
		return rein.InvalidArgument("messages", "must be at least 1, got %d", o.Messages)
	case o.Concurrency < 0:
		return rein.InvalidArgument("concurrency", "must not be negative, got %d", o.Concurrency)
	case o.Ramp < 0:
		return rein.InvalidArgument("ramp", "must not be negative, got %s", o.Ramp)
	case o.Chunks < 1:
		return rein.InvalidArgument("chunks", "must be at least 1, got %d", o.Chunks)
	case o.ChunkDelay < 0:
		return rein.InvalidArgument("chunk-delay", "must not be negative, got %s", o.ChunkDelay)
	case o.ToolCalls < 0:
		return rein.InvalidArgument("tool-calls", "must not be negative, got %d", o.ToolCalls)
	case math.IsNaN(o.StopFraction) || o.StopFraction < 0 || o.StopFraction > 1:
		return rein.InvalidArgument("stop-fraction", "must be between 0 and 1, got %v", o.StopFraction)
	case !o.StopMode.Valid():
		return rein.InvalidArgument("stop-mode", "must be cancel or interrupt, got %q", o.StopMode)
	case o.RunTimeout <= 0:
		return rein.InvalidArgument("run-timeout", "must be positive, got %s", o.RunTimeout)
	case o.SampleInterval < 0:
		return rein.InvalidArgument("sample-interval", "must not be negative, got %s", o.SampleInterval)
	}
	if o.URL != "" {
		if err := checkURL(o.URL); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults fills the zero values that mean "the default".
func (o Options) withDefaults() Options {
	if o.StopMode == "" {
		o.StopMode = rein.StopCancel
	}
	if o.Concurrency == 0 || o.Concurrency > o.Sessions {
		o.Concurrency = o.Sessions
	}
	if o.IdleStreams == 0 {
		o.IdleStreams = o.Sessions
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = time.Second
	}
	return o
}

// Run executes the load run o describes and returns its report. Errors met
// by the workload (a failed request, a run that timed out, a gap in a log)
// never end it: they are counted by kind in Report.Errors, and
// Report.Verification.Complete is false. Run returns an error without a
// report only when the run cannot happen: invalid options, a server that
// does not start or answer, an output directory that cannot be written.
// When ctx is cancelled mid-run, Run returns the partial report together
// with ctx's error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if o.OutDir != "" {
		if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
			return nil, fmt.Errorf("rein bench: output directory: %w", err)
		}
	}
	target, err := openTarget(ctx, o)
	if err != nil {
		return nil, err
	}
	defer target.close()

	r := newRunner(o, target)
	rep, runErr := r.run(ctx)
	if o.OutDir != "" {
		if err := rep.WriteFiles(o.OutDir); err != nil {
			return rep, err
		}
		if target.inProcess {
			if err := os.WriteFile(filepath.Join(o.OutDir, FileScript), o.Script(), 0o644); err != nil {
				return rep, fmt.Errorf("rein bench: %w", err)
			}
		}
	}
	return rep, runErr
}
