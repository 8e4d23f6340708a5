package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

const sessionsSynopsis = "rein sessions [--server URL] [--token T] [--json]"

const sessionsAbout = `Lists your sessions on a server, newest first: id, when it was created, when
its last event was logged, its agent, its parent (for a subagent's session),
its state (idle, or busy with the run it is running; how many tool calls wait
for your approval) and its title. Subagent sessions are included.`

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
	if *jsonOut {
		enc := json.NewEncoder(std.out)
		for _, s := range list {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(std.err, "no sessions")
		return nil
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tLAST EVENT\tAGENT\tPARENT\tSTATE\tTITLE")
	for _, s := range list {
		state := s.State
		if s.State == "busy" {
			// Which run: the one a stop would name (a busy session's
			// details, not a request per session).
			if info, err := r.c.GetSession(ctx, s.ID); err == nil {
				if info.CurrentRunID != "" {
					state += " (" + info.CurrentRunID + ")"
				}
				if n := len(info.QueuedRunIDs); n > 0 {
					state += fmt.Sprintf(" +%d queued", n)
				}
			}
		}
		if s.PendingConfirmations > 0 {
			state += fmt.Sprintf(", %d to approve", s.PendingConfirmations)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, when(&s.CreatedAt), when(s.LastEventAt), dash(s.Agent), dash(s.ParentSessionID), state, dash(listTitle(s.Title)))
	}
	return tw.Flush()
}

// listTitle keeps a title to one short cell of a table.
func listTitle(t string) string {
	t = strings.Join(strings.Fields(t), " ")
	if r := []rune(t); len(r) > 40 {
		return string(r[:39]) + "…"
	}
	return t
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
