package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/reinhq/rein"
)

func cmdEvents(ctx context.Context, args []string, io stdio) int {
	// Ctrl-C ends --follow; it is the normal way out, so it is not an error.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	return runEvents(ctx, args, io)
}

// runEvents is cmdEvents without the signal wiring: cancelling ctx ends a
// --follow with exit status 0.
func runEvents(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("rein events", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "Usage: rein events --session ID [--after N] [--follow] [--json]\n\nPrints a session's events, one per line: the readable form by default, the\nevent JSON with --json. --follow keeps printing new events as they happen\n(reconnecting if the connection drops, without losing or repeating one)\nuntil Ctrl-C.\n\nFlags:")
		fs.PrintDefaults()
	}
	rf := addRemoteFlags(fs, "the session whose events to print (required; also the first argument)")
	after := fs.Int64("after", 0, "print only events with seq greater than this")
	follow := fs.Bool("follow", false, "keep printing new events as they are appended")
	jsonOut := fs.Bool("json", false, "print each event's JSON on its own line")
	if err := parseFlags(fs, args, io.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(io.err, "rein events:", err)
		return exitUsage
	}
	if *rf.session == "" && fs.NArg() == 1 {
		*rf.session = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintln(io.err, "rein events: unexpected arguments:", fs.Args())
		return exitUsage
	}
	if *rf.session == "" {
		fmt.Fprintln(io.err, "rein events: give the session: rein events --session ID")
		return exitUsage
	}
	if *after < 0 {
		fmt.Fprintln(io.err, "rein events: --after must not be negative")
		return exitUsage
	}
	c := rf.client()
	sid := *rf.session
	enc := json.NewEncoder(io.out)
	emit := func(e rein.Event) error {
		if *jsonOut {
			return enc.Encode(e)
		}
		_, err := fmt.Fprintln(io.out, formatEvent(e))
		return err
	}
	fail := func(err error) int {
		fmt.Fprintln(io.err, "rein events:", describeError(err, *rf.server, sid))
		return exitFailed
	}

	if !*follow {
		cursor := *after
		for {
			evs, last, err := c.ListEvents(ctx, sid, cursor, 1000)
			if err != nil {
				return fail(err)
			}
			for _, e := range evs {
				if err := emit(e); err != nil {
					return exitFailed
				}
				cursor = e.Seq
			}
			if len(evs) == 0 || cursor >= last {
				return 0
			}
		}
	}

	stream := c.Stream(ctx, sid, *after)
	defer stream.Close()
	for e, err := range stream.All() {
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			return fail(err)
		}
		if err := emit(e); err != nil {
			return exitFailed
		}
	}
	return 0
}
