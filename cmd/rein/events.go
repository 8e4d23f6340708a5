package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/reinhq/rein"
)

const eventsSynopsis = "rein events [--server URL] [--token T] [--after N] [--follow] [--json] SESSION"

const eventsAbout = `Prints a session's events, one per line: the readable form by default, the
event JSON with --json. --follow keeps printing new events as they happen
(reconnecting if the connection drops, without losing or repeating one)
until Ctrl-C, which exits 0. The session is the argument or --session.`

func cmdEvents(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "events", eventsSynopsis, eventsAbout)
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` whose events to print (or give it as the argument)")
	after := fs.Int64("after", 0, "print only events with seq greater than `N`")
	follow := fs.Bool("follow", false, "keep printing new events as they are appended")
	jsonOut := fs.Bool("json", false, "print each event's JSON on its own line")
	fs.interleave = true
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	sid, err := oneSession(fs, *session, "events")
	if err != nil {
		return err
	}
	if *after < 0 {
		return fs.invalid("after", "must be a seq ≥ 0, e.g. --after 20")
	}
	if err := r.connect(); err != nil {
		return err
	}
	var text eventText
	enc := json.NewEncoder(std.out)
	emit := func(e rein.Event) error {
		if *jsonOut {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(std.out, text.logLine(e))
		return err
	}
	if !*follow {
		return printEvents(ctx, r, sid, *after, emit)
	}
	// Ctrl-C ends --follow; it is the normal way out, so it is not an error.
	sigs, stop := std.notify(os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := r.c.Stream(ctx, sid, *after)
	defer stream.Close()
	events, wait := pump(ctx, stream)
	defer wait()
	defer cancel()
	for {
		select {
		case <-sigs:
			return nil
		case <-ctx.Done():
			return nil
		case it := <-events:
			if it.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return r.fail(it.err, sid)
			}
			if err := emit(it.ev); err != nil {
				return err
			}
		}
	}
}

// printEvents prints a session's log after seq after, page by page.
func printEvents(ctx context.Context, r *remote, sid string, after int64, emit func(rein.Event) error) error {
	for {
		evs, last, err := r.c.ListEvents(ctx, sid, after, 1000)
		if err != nil {
			return r.fail(err, sid)
		}
		for _, e := range evs {
			if err := emit(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if len(evs) == 0 || after >= last {
			return nil
		}
	}
}
