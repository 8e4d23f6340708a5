package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
)

const runsSynopsis = "rein runs [--server URL] [--token T] [--json] SESSION"

const runsAbout = `Lists a session's runs, newest first: run id, status, the reason it ended,
when it was created, started and ended, and what its model requests used
(input and output tokens, and the cost in US dollars when the model has a
price).`

func cmdRuns(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "runs", runsSynopsis, runsAbout)
	fs.interleave = true
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` whose runs to list (or give it as the argument)")
	jsonOut := fs.Bool("json", false, "print each run's JSON on its own line")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	sid, err := oneSession(fs, *session, "runs")
	if err != nil {
		return err
	}
	if err := r.connect(); err != nil {
		return err
	}
	runs, err := r.c.ListRuns(ctx, sid)
	if err != nil {
		return r.fail(err, sid)
	}
	if *jsonOut {
		enc := json.NewEncoder(std.out)
		for _, run := range runs {
			if err := enc.Encode(run); err != nil {
				return err
			}
		}
		return nil
	}
	if len(runs) == 0 {
		fmt.Fprintln(std.err, "no runs in session "+sid)
		return nil
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tREASON\tCREATED\tSTARTED\tENDED\tTOKENS IN/OUT\tCOST")
	for _, run := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", run.RunID, run.Status, dash(string(run.Reason)), when(&run.CreatedAt), when(run.StartedAt), when(run.EndedAt),
			run.Usage.InputTokens, run.Usage.OutputTokens, cost(run.Usage.CostUSD))
	}
	return tw.Flush()
}

// cost shows a cost in US dollars, "-" when there is none (no price).
func cost(usd *float64) string {
	if usd == nil {
		return "-"
	}
	return fmt.Sprintf("$%.4f", *usd)
}

// oneSession is the session a command is about: its one argument, or
// --session.
func oneSession(fs *flagSet, flagValue, cmd string) (string, error) {
	switch {
	case flagValue == "" && len(fs.args) == 1:
		return fs.args[0], nil
	case len(fs.args) > 1 || (flagValue != "" && len(fs.args) > 0):
		return "", usagef("unexpected argument %q: give one session, e.g. rein %s ses_01K2…", fs.args[len(fs.args)-1], cmd)
	case flagValue == "":
		return "", usagef("give the session, e.g. rein %s ses_01K2… (rein sessions lists them)", cmd)
	}
	return flagValue, nil
}
