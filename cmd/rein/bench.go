package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/bench/load"
)

const benchSynopsis = "rein bench [--url URL] [--sessions N] [--messages M] [--chunks K] [--chunk-delay D] [--out DIR] [flags]"

const benchAbout = `Loads a server with N sessions × M messages of the scripted model and
measures admission, message → session.run_started on the event stream, the
first delta, stop → session.run_completed, events per second, and the
server's CPU per event and memory (also per idle open stream). Without
--url it starts a server in this process (SQLite in a temporary directory
unless --store says otherwise). Afterwards every session's log is checked
(gap-free, no duplicate, every run ended as asked); the table is printed,
and with --out a JSON report, an SVG chart and the script are written.
Exit status 1 when the check found the run incomplete. Ctrl-C stops early
and reports what was measured.`

func cmdBench(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "bench", benchSynopsis, benchAbout)
	o := load.Flags(fs.FlagSet)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of rein bench itself (the load client, and the server when it runs in this process) to `FILE`, for go tool pprof")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if len(fs.args) > 0 {
		return usagef("unexpected argument %q: rein bench takes flags only, e.g. rein bench --sessions 100", fs.args[0])
	}
	if err := o.Validate(); err != nil {
		var re *rein.Error
		if errors.As(err, &re) && re.Param != "" && fs.Lookup(re.Param) != nil {
			return fs.invalid(re.Param, "%s", re.Message)
		}
		return usagef("%s", err)
	}
	o.Progress = std.err
	if _, set := std.lookupEnv("GOGC"); o.URL != "" && !set {
		// Against a server of its own the load client shares the machine
		// with it: its collector, a sixth of its CPU at the default, is
		// made to run a quarter as often (GOGC=400; the environment's
		// GOGC wins). Not for a server in this process, whose figures must
		// be those of rein serve.
		debug.SetGCPercent(400)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usagef("%s: %v", fs.label("cpuprofile"), err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return usagef("%s: %v", fs.label("cpuprofile"), err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	sig, stop := std.notify(os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	rep, err := load.Run(ctx, *o)
	if rep != nil {
		if werr := rep.WriteTable(std.out); werr != nil {
			return werr
		}
		if o.OutDir != "" {
			fmt.Fprintf(std.out, "report written to %s\n", o.OutDir)
		}
	}
	switch {
	case err != nil && errors.Is(err, context.Canceled) && rep != nil:
		return &exitError{code: 130}
	case err != nil:
		return err
	case !rep.Verification.Complete:
		return &exitError{code: 1, err: errors.New("the run is incomplete: see the errors and the verification above")}
	}
	return nil
}
