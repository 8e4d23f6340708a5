package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const sessionsSynopsis = "rein sessions [--server URL] [--token T] [--json]"

const sessionsAbout = `Lists your sessions on a server, newest first: id, when it was created, its
agent, its parent (for a subagent's session) and its state (idle, or busy
with the run it is running). Subagent sessions are included.`

func cmdSessions(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "sessions", sessionsSynopsis, sessionsAbout)
	r := addRemote(fs)
	jsonOut := fs.Bool("json", false, "print each session's JSON, with its state, on its own line")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	if err := r.connect(); err != nil {
		return err
	}
	list, err := r.c.ListSessions(ctx)
	if err != nil {
		return r.fail(err, "")
	}
	// The list does not say what each session is doing; its details do.
	detailed := make([]*client.Session, 0, len(list))
	for _, s := range list {
		info, err := r.c.GetSession(ctx, s.ID)
		if errors.Is(err, rein.ErrNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return r.fail(err, s.ID)
		}
		detailed = append(detailed, info)
	}
	if *jsonOut {
		enc := json.NewEncoder(std.out)
		for _, s := range detailed {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(detailed) == 0 {
		fmt.Fprintln(std.err, "no sessions")
		return nil
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tAGENT\tPARENT\tSTATE")
	for _, s := range detailed {
		state := s.State
		if s.CurrentRunID != "" {
			state += " (" + s.CurrentRunID + ")"
		}
		if n := len(s.QueuedRunIDs); n > 0 {
			state += fmt.Sprintf(" +%d queued", n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, when(&s.CreatedAt), dash(s.Agent), dash(s.ParentSessionID), state)
	}
	return tw.Flush()
}

// when renders a time of a listing in local time, "-" when there is none.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
