package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const queueSynopsis = "rein queue [--server URL] [--token T] [--json] SESSION\n" +
	"       rein queue SESSION --edit RUN --text TEXT [--position N]\n" +
	"       rein queue SESSION --move RUN --position N\n" +
	"       rein queue SESSION --promote RUN [--mode interrupt|rollback]"

const queueAbout = `Lists a session's queued runs in the order they will run (position 1 is
next), with each one's text. A queued run can be edited before it starts:
--edit RUN --text TEXT replaces its text, --move RUN --position N moves it
(beyond the end: last), and --promote RUN sends it now: the session's current
run is stopped (--mode interrupt, the default: it ends with what it has;
rollback: cancelled, and its turn left out of later requests) and RUN runs
next. A run that has already started is not edited: rein queue says so, with
its status, and exits 1.`

func cmdQueue(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "queue", queueSynopsis, queueAbout)
	fs.interleave = true
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` whose queue to show or change (or give it as the argument)")
	jsonOut := fs.Bool("json", false, "print each queued run's JSON on its own line")
	edit := fs.String("edit", "", "replace the text of the queued `RUN` (with --text)")
	text := fs.String("text", "", "the new `TEXT` of the run named by --edit")
	move := fs.String("move", "", "move the queued `RUN` to --position")
	position := fs.Int("position", 0, "the new place `N` in the queue (1 = next) for --move or --edit")
	promote := fs.String("promote", "", "send the queued `RUN` now: stop the current run and run this one next")
	mode := fs.String("mode", "", "how --promote stops the current run: `interrupt` (default) or rollback")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	sid, err := oneSession(fs, *session, "queue")
	if err != nil {
		return err
	}
	posGiven := false
	fs.Visit(func(f *flag.Flag) { posGiven = posGiven || f.Name == "position" })
	given := 0
	for _, v := range []string{*edit, *move, *promote} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return usagef("give one of --edit, --move and --promote")
	case *text != "" && *edit == "":
		return usagef("--text goes with --edit RUN")
	case *edit != "" && *text == "":
		return usagef("--edit needs the new text: --text TEXT")
	case *position < 0 || (*position == 0 && posGiven):
		return usagef("--position must be 1 or more (1 = next)")
	case *move != "" && *position == 0:
		return usagef("--move needs the new place: --position N (1 = next)")
	case *position != 0 && *edit == "" && *move == "":
		return usagef("--position goes with --move RUN or --edit RUN")
	case *mode != "" && *promote == "":
		return usagef("--mode goes with --promote RUN")
	case *mode != "" && *mode != string(rein.WhenBusyInterrupt) && *mode != string(rein.WhenBusyRollback):
		return usagef("--mode must be interrupt or rollback, not %q", *mode)
	}
	if err := r.connect(); err != nil {
		return err
	}
	var (
		run   *client.Run
		runID string
		did   string
	)
	switch {
	case *edit != "" || *move != "":
		req := client.EditRunRequest{}
		runID = *edit + *move
		if *edit != "" {
			req.Text = text
			did = "edited"
		}
		if *position != 0 {
			req.Position = position
			if did == "" {
				did = "moved"
			} else {
				did = "edited and moved"
			}
		}
		run, err = r.c.EditRun(ctx, sid, runID, req)
	case *promote != "":
		runID, did = *promote, "promoted: it runs next"
		run, err = r.c.PromoteRun(ctx, sid, runID, rein.WhenBusy(*mode))
	default:
		return listQueue(ctx, r, std, sid, *jsonOut)
	}
	if err != nil {
		return queueFail(r, err, sid, runID)
	}
	if *jsonOut {
		return json.NewEncoder(std.out).Encode(run)
	}
	fmt.Fprintf(std.out, "run %s %s (position %d): %s\n", run.RunID, did, run.Position, oneLine(run.Input, 200))
	return nil
}

// listQueue prints the session's queued runs, next first.
func listQueue(ctx context.Context, r *remote, std stdio, sid string, jsonOut bool) error {
	runs, err := r.c.ListRuns(ctx, sid)
	if err != nil {
		return r.fail(err, sid)
	}
	queued := slices.DeleteFunc(runs, func(run client.Run) bool { return run.Position == 0 })
	slices.SortFunc(queued, func(a, b client.Run) int { return a.Position - b.Position })
	if jsonOut {
		enc := json.NewEncoder(std.out)
		for _, run := range queued {
			if err := enc.Encode(run); err != nil {
				return err
			}
		}
		return nil
	}
	if len(queued) == 0 {
		fmt.Fprintln(std.err, "nothing queued in session "+sid)
		return nil
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POS\tRUN\tCREATED\tTEXT")
	for _, run := range queued {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", run.Position, run.RunID, when(&run.CreatedAt), oneLine(run.Input, 80))
	}
	return tw.Flush()
}

// queueFail words the answers an edit can meet: a run that already left
// the queue (with its status), a run not found in the session.
func queueFail(r *remote, err error, sid, runID string) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		switch {
		case ce.Code == rein.CodeConflict && ce.RunStatus != "":
			what := "it already started"
			if ce.RunStatus.Terminal() {
				what = "it has already ended"
			}
			return &remoteError{msg: fmt.Sprintf("run %s is no longer queued: %s (%s) (conflict)", runID, what, ce.RunStatus), err: err}
		case ce.Code == rein.CodeNotFound:
			return &remoteError{msg: fmt.Sprintf("run %s not found in session %s (not_found)", runID, sid), err: err}
		}
	}
	return r.fail(err, sid)
}
