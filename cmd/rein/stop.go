package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const stopSynopsis = "rein stop [--server URL] [--token T] [--interrupt] [--session SESSION] RUN_ID\n       rein stop [--server URL] [--token T] [--interrupt] --session SESSION --client-id ID"

const stopAbout = `Stops one run, by its id: it is cancelled at once (it ends CANCELLED, without a
reply), or with --interrupt stopped cooperatively (it ends COMPLETED with
reason interrupted, answering with what it has). A run that has already ended,
or is already being stopped, is left alone: the stop is not accepted, and
rein stop says so (exit 0). Without --session the run is looked for among your
sessions. A run id rein stop cannot find exits 1.

With --client-id, stops the run of the session's message sent with that
client id instead — also one that has not arrived yet: the stop is then
remembered for 24 hours, and that message's run is created already ended.`

func cmdStop(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "stop", stopSynopsis, stopAbout)
	fs.interleave = true
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` the run belongs to (default: look for it among your sessions)")
	interrupt := fs.Bool("interrupt", false, "stop cooperatively: the run ends with what it has, instead of being cancelled")
	clientID := fs.String("client-id", "", "stop the run of the message sent with this client `ID` (needs --session), even before it arrives")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	mode := rein.StopCancel
	if *interrupt {
		mode = rein.StopInterrupt
	}
	if *clientID != "" {
		switch {
		case len(fs.args) > 0:
			return usagef("give a run id or --client-id, not both")
		case *session == "":
			return usagef("--client-id needs --session: a client id names a message of one session")
		}
		return stopByClientID(ctx, r, std, *session, *clientID, mode)
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

// stopByClientID is rein stop --client-id.
func stopByClientID(ctx context.Context, r *remote, std stdio, session, clientID string, mode rein.StopMode) error {
	if err := r.connect(); err != nil {
		return err
	}
	res, err := r.c.StopByClientID(ctx, session, clientID, mode)
	if err != nil {
		return r.fail(err, session)
	}
	switch {
	case res.Accepted && res.RunID == "":
		fmt.Fprintf(std.out, "no message with client id %s has arrived yet: the stop is remembered for 24 hours, and its run will end CANCELLED as it arrives\n", clientID)
	case res.Accepted:
		fmt.Fprintf(std.out, "stop of run %s (client id %s) accepted (%s)\n", res.RunID, clientID, mode)
	default:
		fmt.Fprintf(std.out, "stop of run %s (client id %s) not accepted: it had already ended, or is already being stopped\n", res.RunID, clientID)
	}
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
