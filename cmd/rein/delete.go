package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const deleteSynopsis = "rein delete [--server URL] [--token T] SESSION"

const deleteAbout = `Deletes a session for good: its events, its runs, its workspace, and every
session below it (its subagents, theirs, ...). A session with a queued or
running run is not deleted (exit 1, naming the run): stop the run first
(rein stop RUN_ID), or wait for it to end.`

func cmdDelete(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "delete", deleteSynopsis, deleteAbout)
	fs.interleave = true
	r := addRemote(fs)
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	switch {
	case len(fs.args) == 0:
		return usagef("give the session to delete, e.g. rein delete ses_01K2… (rein sessions lists them)")
	case len(fs.args) > 1:
		return usagef("unexpected argument %q: give one session, e.g. rein delete ses_01K2…", fs.args[1])
	}
	sid := fs.args[0]
	if err := r.connect(); err != nil {
		return err
	}
	if err := r.c.DeleteSession(ctx, sid); err != nil {
		err = r.fail(err, sid)
		var ce *client.Error
		if errors.Is(err, rein.ErrSessionBusy) && errors.As(err, &ce) {
			return &remoteError{msg: fmt.Sprintf("%s: stop it first (rein stop %s) or wait for it to end", err, ce.RunID), err: err}
		}
		return err
	}
	fmt.Fprintf(std.out, "deleted session %s\n", sid)
	return nil
}
