package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/sessions"
)

const runSynopsis = "rein run [--model M] [--timeout D] [--json] [--store S] [--confirm TOOLS] [--workspace DIR] [-v] TEXT"

const runAbout = `Runs the agent once on TEXT in a fresh session, in this process (no server),
and streams the reply to stdout; status lines go to stderr. A tool that needs
confirmation is asked on stderr and answered from stdin (the end of input
denies). First Ctrl-C interrupts the run (it answers with what it has); a
second one cancels it; a third stops waiting.
Exit status: 0 stop, 3 interrupted, 4 timeout, 130 cancelled, 1 failed or any
error, 2 bad usage.`

func cmdRun(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "run", runSynopsis, runAbout)
	modelName := fs.String("model", "demo", "the `MODEL`: demo, scripted:PATH, openai:NAME, ollama:NAME, anthropic:NAME")
	timeout := fs.Duration("timeout", 0, "deadline for the run, such as 30s or 2m (0: none)")
	jsonOut := fs.Bool("json", false, "print one event JSON per line on stdout instead of the reply text")
	storeSpec := fs.String("store", "memory:", "where to keep the session (`STORE`): memory:, sqlite:PATH or postgres://...")
	var confirm optionalString
	fs.Var(&confirm, "confirm", "comma-separated `TOOLS` that need confirmation (replaces the default set; \"\" for none)")
	workspace := fs.String("workspace", "./rein-workspace", "`DIR` for files tools write")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	text := strings.TrimSpace(strings.Join(fs.args, " "))
	if text == "" {
		return usagef(`give the input TEXT, e.g. rein run "hello"`)
	}
	if *timeout < 0 {
		return fs.invalid("timeout", "must be a positive duration such as 30s (or 0 for none)")
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(std.err, nil))
	}
	rt, err := openRuntime(ctx, app.Options{
		Store: *storeSpec, Model: *modelName, Confirm: confirm.confirm(), Workspace: *workspace,
		Logger: logger, LookupEnv: std.lookupEnv,
	}, fs)
	if err != nil {
		return err
	}
	// Close cancels what still runs, records its end, and closes the store.
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		return err
	}
	svc := rt.Service()

	sigs, stop := std.notify(os.Interrupt, syscall.SIGTERM)
	defer stop()
	sess, err := svc.CreateSession(ctx, "local", sessions.CreateSessionRequest{})
	if err != nil {
		return err
	}
	return runOnce(ctx, svc, sess.Key(), text, *timeout, *jsonOut, sigs, std)
}

// runOnce runs text in the session key and follows the run to its end,
// like rein send does over HTTP.
func runOnce(ctx context.Context, svc *sessions.Service, key rein.SessionKey, text string, timeout time.Duration, jsonOut bool, sigs <-chan os.Signal, std stdio) error {
	res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: text, Timeout: timeout})
	if err != nil {
		return err
	}
	runID := res.RunID
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, wait := pumpFrom(ctx, serviceEvents(ctx, svc, key))
	defer wait()
	defer cancel()

	f := newFollower(runID, std, jsonOut)
	f.stop = func(ctx context.Context, mode rein.StopMode) (bool, error) {
		r, err := svc.Interrupt(ctx, key, sessions.InterruptRequest{RunID: &runID, Mode: mode})
		return r.Accepted, err
	}
	f.confirm = func(ctx context.Context, toolUseID string, allow bool, deny string) error {
		req := sessions.ConfirmRequest{ToolUseID: toolUseID, Allow: allow}
		if !allow {
			req.DenyMessage = &deny
		}
		_, err := svc.ConfirmTool(ctx, key, req)
		return err
	}
	return f.follow(ctx, events, sigs)
}

// serviceEvents reads a session's log in-process, event by event, waiting
// for more at its end.
func serviceEvents(ctx context.Context, svc *sessions.Service, key rein.SessionKey) func() (rein.Event, error) {
	var (
		after int64
		page  []rein.Event
	)
	return func() (rein.Event, error) {
		for len(page) == 0 {
			evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
			if err != nil {
				return rein.Event{}, err
			}
			if len(evs) == 0 {
				if err := svc.WaitEvents(ctx, key, after); err != nil {
					return rein.Event{}, err
				}
				continue
			}
			page = evs
		}
		e := page[0]
		page, after = page[1:], e.Seq
		return e, nil
	}
}
