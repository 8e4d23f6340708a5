package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const stopSynopsis = "rein stop [--server URL] [--token T] [--interrupt] [--session SESSION] RUN_ID"

const stopAbout = `Stops one run, by its id: it is cancelled at once (it ends CANCELLED, without a
reply), or with --interrupt stopped cooperatively (it ends COMPLETED with
reason interrupted, answering with what it has). A run that has already ended,
or is already being stopped, is left alone: the stop is not accepted, and
rein stop says so (exit 0). Without --session the run is looked for among your
sessions. A run id rein stop cannot find exits 1.`

func cmdStop(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "stop", stopSynopsis, stopAbout)
	fs.interleave = true
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` the run belongs to (default: look for it among your sessions)")
	interrupt := fs.Bool("interrupt", false, "stop cooperatively: the run ends with what it has, instead of being cancelled")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	switch {
	case len(fs.args) == 0:
		return usagef("give the run to stop, e.g. rein stop run_01K2… (rein runs SESSION lists a session's runs)")
	case len(fs.args) > 1:
		return usagef("unexpected argument %q: give one run id, e.g. rein stop run_01K2…", fs.args[1])
	}
	runID := fs.args[0]
	if err := r.connect(); err != nil {
		return err
	}
	sid, err := findRun(ctx, r, *session, runID)
	if err != nil {
		return err
	}
	mode := rein.StopCancel
	if *interrupt {
		mode = rein.StopInterrupt
	}
	res, err := r.c.StopRun(ctx, sid, runID, mode)
	if err != nil {
		return r.fail(err, sid)
	}
	if res.Accepted {
		fmt.Fprintf(std.out, "stop of run %s accepted (%s)\n", runID, mode)
		return nil
	}
	why := "it had already ended"
	if run, err := r.c.GetRun(ctx, sid, runID); err == nil {
		if run.Status.Terminal() {
			why = fmt.Sprintf("it had already ended (%s: %s)", run.Status, run.Reason)
		} else {
			why = fmt.Sprintf("it is already being stopped (%s)", run.Status)
		}
	}
	fmt.Fprintf(std.out, "stop of run %s not accepted: %s\n", runID, why)
	return nil
}

// findRun returns the session of a run: session when given (once the run
// is known there), else the first of the caller's sessions that has it.
func findRun(ctx context.Context, r *remote, session, runID string) (string, error) {
	if session != "" {
		if _, err := r.c.GetRun(ctx, session, runID); err != nil {
			if errors.Is(err, rein.ErrNotFound) {
				return "", notFoundRun(runID, "in session "+session, err)
			}
			return "", r.fail(err, session)
		}
		return session, nil
	}
	list, err := r.c.ListSessions(ctx)
	if err != nil {
		return "", r.fail(err, "")
	}
	for _, s := range list {
		_, err := r.c.GetRun(ctx, s.ID, runID)
		switch {
		case err == nil:
			return s.ID, nil
		case !errors.Is(err, rein.ErrNotFound):
			return "", r.fail(err, s.ID)
		}
	}
	return "", notFoundRun(runID, "among your sessions", &client.Error{Code: rein.CodeNotFound})
}

func notFoundRun(runID, where string, err error) error {
	return &remoteError{msg: fmt.Sprintf("run %s not found %s (not_found)", runID, where), err: err}
}
