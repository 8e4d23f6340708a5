package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// Exit statuses of `rein run` (and `rein send`): how the run ended.
const (
	exitStop        = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 3
	exitTimeout     = 4
	exitCancelled   = 130
)

// exitCode maps a run's end to the process exit status.
func exitCode(status rein.RunStatus, reason rein.Reason) int {
	switch reason {
	case rein.ReasonStop, rein.ReasonMaxSteps:
		return exitStop
	case rein.ReasonInterrupted:
		return exitInterrupted
	case rein.ReasonTimeout:
		return exitTimeout
	case rein.ReasonCancelled:
		return exitCancelled
	}
	if status == rein.StatusCancelled {
		return exitCancelled
	}
	return exitFailed
}

func cmdRun(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("rein run", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "Usage: rein run [--model M] [--timeout D] [--json] TEXT\n\nRuns the agent once on TEXT in a fresh session and streams the reply to stdout.\nFirst Ctrl-C interrupts the run (it answers with what it has); a second one cancels it.\nExit status: 0 stop, 3 interrupted, 4 timeout, 1 failed, 130 cancelled.\n\nFlags:")
		fs.PrintDefaults()
	}
	modelName := fs.String("model", "demo", "model: demo, scripted:PATH, openai:NAME, ollama:NAME, anthropic:NAME")
	timeout := fs.Duration("timeout", 0, "deadline for the run (0: none)")
	jsonOut := fs.Bool("json", false, "print one event JSON per line on stdout instead of the reply text")
	storeSpec := fs.String("store", "memory:", "where to keep the session: memory:, sqlite:PATH or postgres://...")
	var confirm optionalString
	fs.Var(&confirm, "confirm", "comma-separated tools that need confirmation (replaces the default set; \"\" for none)")
	workspace := fs.String("workspace", "./rein-workspace", "directory for files tools write")
	verbose := fs.Bool("v", false, "log to stderr")
	if err := parseFlags(fs, args, io.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(io.err, "rein run:", err)
		return exitUsage
	}
	text := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if text == "" {
		fmt.Fprintln(io.err, "rein run: give the input TEXT, e.g. rein run \"hello\"")
		return exitUsage
	}
	if *timeout < 0 {
		fmt.Fprintln(io.err, "rein run: --timeout must be positive")
		return exitUsage
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(io.err, nil))
	}
	rt, err := buildRuntime(ctx, runtimeOptions{
		Store: *storeSpec, Model: *modelName, Confirm: confirm.confirm(), Workspace: *workspace,
		Logger: logger, LookupEnv: io.lookupEnv,
	})
	if err != nil {
		fmt.Fprintln(io.err, "rein run:", err)
		return exitUsage
	}
	defer rt.Close()
	svc := rt.svc
	if err := rt.Start(ctx); err != nil {
		fmt.Fprintln(io.err, "rein run:", err)
		return exitFailed
	}
	defer svc.Close()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	sess, err := svc.CreateSession(ctx, "local", sessions.CreateSessionRequest{})
	if err != nil {
		fmt.Fprintln(io.err, "rein run:", err)
		return exitFailed
	}
	return runOnce(ctx, svc, sess.Key(), text, *timeout, *jsonOut, sigs, io)
}

// runOnce runs text in the session key, printing as it goes, and returns
// the exit status. Each value on sigs stops the run: the first
// cooperatively, the next ones at once.
func runOnce(ctx context.Context, svc *sessions.Service, key rein.SessionKey, text string, timeout time.Duration, jsonOut bool, sigs <-chan os.Signal, io stdio) int {
	res, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: text, Timeout: timeout})
	if err != nil {
		fmt.Fprintln(io.err, "rein run:", err)
		return exitFailed
	}
	runID := res.RunID

	watch, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go func() {
		for mode := range stopModes(watch, sigs) {
			_, _ = svc.Interrupt(context.Background(), key, sessions.InterruptRequest{RunID: &runID, Mode: mode})
		}
	}()

	answers := bufio.NewReader(io.in)
	enc := json.NewEncoder(io.out)
	after := int64(0)
	wroteText := false
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			fmt.Fprintln(io.err, "rein run:", err)
			return exitFailed
		}
		for _, e := range evs {
			after = e.Seq
			if jsonOut {
				if err := enc.Encode(e); err != nil {
					return exitFailed
				}
			}
			switch e.Type {
			case rein.EventMessageDelta:
				if !jsonOut {
					var p rein.MessageDeltaPayload
					if e.DecodePayload(&p) == nil {
						fmt.Fprint(io.out, p.Text)
						wroteText = true
					}
				}
			case rein.EventToolUse:
				var p rein.ToolUsePayload
				if e.DecodePayload(&p) == nil {
					if !jsonOut && wroteText {
						fmt.Fprintln(io.out)
						wroteText = false
					}
					fmt.Fprintf(io.err, "[tool %s %s]\n", p.Name, p.Input)
				}
			case rein.EventToolConfirmationRequested:
				var p rein.ToolConfirmationRequestedPayload
				if e.DecodePayload(&p) == nil {
					go askConfirmation(svc, key, p, answers, io)
				}
			case rein.EventRunCompleted:
				if e.RunID != runID {
					continue
				}
				var p rein.RunCompletedPayload
				_ = e.DecodePayload(&p)
				if !jsonOut && wroteText {
					fmt.Fprintln(io.out)
				}
				if p.Reason != rein.ReasonStop {
					msg := fmt.Sprintf("[run %s: %s", strings.ToLower(string(p.Status)), p.Reason)
					if p.Error != "" {
						msg += ": " + p.Error
					}
					fmt.Fprintln(io.err, msg+"]")
				}
				return exitCode(p.Status, p.Reason)
			}
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			fmt.Fprintln(io.err, "rein run:", err)
			return exitFailed
		}
	}
}

// stopModes turns signals into stop modes: the first interrupts, every
// later one cancels. The channel closes when sigs closes or ctx ends.
func stopModes(ctx context.Context, sigs <-chan os.Signal) <-chan rein.StopMode {
	out := make(chan rein.StopMode)
	go func() {
		defer close(out)
		for n := 1; ; n++ {
			select {
			case _, ok := <-sigs:
				if !ok {
					return
				}
			case <-ctx.Done():
				return
			}
			mode := rein.StopInterrupt
			if n > 1 {
				mode = rein.StopCancel
			}
			select {
			case out <- mode:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// askConfirmation asks on the terminal whether a tool call may run.
func askConfirmation(svc *sessions.Service, key rein.SessionKey, p rein.ToolConfirmationRequestedPayload, in *bufio.Reader, io stdio) {
	fmt.Fprintf(io.err, "Allow tool %s with input %s? [y/N] ", p.Name, p.Input)
	line, _ := in.ReadString('\n')
	allow := strings.EqualFold(strings.TrimSpace(line), "y") || strings.EqualFold(strings.TrimSpace(line), "yes")
	req := sessions.ConfirmRequest{ToolUseID: p.ToolUseID, Allow: allow}
	if !allow {
		msg := "denied at the terminal"
		req.DenyMessage = &msg
	}
	if _, err := svc.ConfirmTool(context.Background(), key, req); err != nil && !errors.Is(err, rein.ErrConflict) {
		fmt.Fprintln(io.err, "rein run:", err)
	}
}
