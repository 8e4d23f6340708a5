package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

func cmdSend(ctx context.Context, args []string, io stdio) int {
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	return runSend(ctx, args, io, sigs)
}

// runSend is cmdSend with the interrupts coming from sigs: the first stops
// the run cooperatively (by its run id), the second cancels it, the third
// gives up waiting.
func runSend(ctx context.Context, args []string, io stdio, sigs <-chan os.Signal) int {
	fs := flag.NewFlagSet("rein send", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "Usage: rein send [--session ID] [--when-busy reject|enqueue|interrupt|rollback] [--json] TEXT\n\nSends TEXT as a user message to a Rein server and streams the reply to stdout\nuntil the run ends. Without --session a new session is created and its id is\nprinted to stderr. Status lines (tools, queue, how the run ended) go to stderr.\nFirst Ctrl-C interrupts the run (it answers with what it has); a second one\ncancels it; a third stops waiting.\nExit status: 0 stop, 3 interrupted, 4 timeout, 1 failed, 130 cancelled.\n\nFlags:")
		fs.PrintDefaults()
	}
	rf := addRemoteFlags(fs, "the session to send to (default: create one and print its id to stderr)")
	whenBusy := fs.String("when-busy", string(rein.WhenBusyReject), "if the session is busy: reject, enqueue, interrupt (the current run answers, this one runs next) or rollback (the current run is cancelled and left out of the conversation, this one runs next)")
	jsonOut := fs.Bool("json", false, "print the run's events as JSON lines instead of the reply text")
	timeout := fs.Duration("timeout", 0, "deadline for the run, queue time included (0: none)")
	clientID := fs.String("client-id", "", "idempotency key: a repeat shows the first run instead of starting another")
	if err := parseFlags(fs, args, io.lookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(io.err, "rein send:", err)
		return exitUsage
	}
	text := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if text == "" {
		fmt.Fprintln(io.err, "rein send: give the message TEXT, e.g. rein send \"hello\"")
		return exitUsage
	}
	wb := rein.WhenBusy(*whenBusy)
	if wb == "" || !wb.Valid() {
		fmt.Fprintf(io.err, "rein send: --when-busy must be reject, enqueue, interrupt or rollback, not %q\n", *whenBusy)
		return exitUsage
	}
	if *timeout < 0 {
		fmt.Fprintln(io.err, "rein send: --timeout must be positive")
		return exitUsage
	}
	c := rf.client()
	fail := func(err error) int {
		fmt.Fprintln(io.err, "rein send:", describeError(err, *rf.server, *rf.session))
		return exitFailed
	}
	sid, err := ensureSession(ctx, c, rf, io)
	if err != nil {
		return fail(err)
	}
	// Everything after the session's current end is news; the run's events
	// come after it. A client_id repeat may name a run that ended long ago,
	// so then the whole log is read for it.
	var after int64
	if *clientID == "" {
		info, err := c.GetSession(ctx, sid)
		if err != nil {
			return fail(err)
		}
		after = info.LastSeq
	}
	res, err := c.SendMessage(ctx, sid, client.Message{Text: text, WhenBusy: wb, ClientID: *clientID, TimeoutS: timeout.Seconds()})
	if err != nil {
		return fail(err)
	}
	runID := res.RunID

	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.Stream(streamCtx, sid, after)
	defer stream.Close()
	events, wait := pump(streamCtx, stream)
	defer wait()
	defer cancel()

	out := &replyPrinter{w: io.out}
	enc := json.NewEncoder(io.out)
	// Tool confirmations are asked one at a time on stderr and answered
	// from stdin, read lazily by a goroutine so that Ctrl-C still works
	// while a question waits.
	var asking []rein.ToolConfirmationRequestedPayload
	var answers <-chan string
	inputEnded := false
	ask := func() {
		if len(asking) > 0 {
			p := asking[0]
			fmt.Fprintf(io.err, "Allow tool %s with input %s? [y/N] ", p.Name, compact(p.Input))
		}
	}
	// answer answers the first open question with a line of input.
	answer := func(line string) {
		p := asking[0]
		asking = asking[1:]
		a := strings.ToLower(strings.TrimSpace(line))
		tc := client.ToolConfirmation{ToolUseID: p.ToolUseID, Allow: a == "y" || a == "yes"}
		if !tc.Allow {
			tc.DenyMessage = "denied at the terminal"
		}
		if _, err := c.ConfirmTool(ctx, sid, tc); err != nil && !errors.Is(err, rein.ErrConflict) {
			fmt.Fprintln(io.err, "rein send:", describeError(err, *rf.server, sid))
		}
	}
	stops := 0
	for {
		select {
		case <-sigs:
			stops++
			mode, giveUp := sendStopMode(stops)
			switch {
			case giveUp:
				fmt.Fprintf(io.err, "\n[not waiting for run %s any longer]\n", runID)
				return exitCancelled
			case mode == rein.StopInterrupt:
				fmt.Fprintf(io.err, "\n[interrupting run %s; Ctrl-C again cancels it]\n", runID)
			default:
				fmt.Fprintf(io.err, "\n[cancelling run %s]\n", runID)
			}
			r, err := c.StopRun(ctx, sid, runID, mode)
			if err != nil {
				fmt.Fprintln(io.err, "rein send:", describeError(err, *rf.server, sid))
			} else if !r.Accepted {
				fmt.Fprintf(io.err, "[run %s was no longer stoppable]\n", runID)
			}
		case line, ok := <-answers:
			if !ok {
				// End of input denies every open question: a script piping
				// into `rein send` never approves a tool by accident.
				answers, inputEnded = nil, true
				if len(asking) > 0 {
					fmt.Fprintln(io.err)
				}
				for len(asking) > 0 {
					answer("")
				}
				continue
			}
			if len(asking) > 0 {
				answer(line)
				ask()
			}
		case it := <-events:
			if it.err != nil {
				return fail(it.err)
			}
			e := it.ev
			if e.RunID != runID {
				continue
			}
			if *jsonOut {
				if err := enc.Encode(e); err != nil {
					return exitFailed
				}
			}
			switch e.Type {
			case rein.EventRunQueued:
				var p rein.RunQueuedPayload
				if e.DecodePayload(&p) == nil {
					fmt.Fprintf(io.err, "[queued, position %d]\n", p.Position)
				}
			case rein.EventMessageDelta:
				var p rein.MessageDeltaPayload
				if !*jsonOut && e.DecodePayload(&p) == nil {
					out.delta(p.Step, p.Text)
				}
			case rein.EventToolUse:
				var p rein.ToolUsePayload
				if e.DecodePayload(&p) == nil {
					if !*jsonOut {
						out.endLine()
					}
					fmt.Fprintf(io.err, "[tool %s %s]\n", p.Name, compact(p.Input))
				}
			case rein.EventToolResult:
				// Only in-doubt results are news on the terminal: the call
				// may or may not have taken effect.
				var p rein.ToolResultPayload
				if e.DecodePayload(&p) == nil && p.InDoubt {
					if !*jsonOut {
						out.endLine()
					}
					fmt.Fprintf(io.err, "[tool call %s in doubt: it was executing when its instance was lost and was not run again]\n", p.ToolUseID)
				}
			case rein.EventStepRestarted:
				var p rein.StepRestartedPayload
				if e.DecodePayload(&p) == nil {
					if !*jsonOut {
						out.restart(p.Step)
					}
					fmt.Fprintln(io.err, stepRestartedLine(p))
				}
			case rein.EventToolConfirmationRequested:
				var p rein.ToolConfirmationRequestedPayload
				if e.DecodePayload(&p) == nil {
					if !*jsonOut {
						out.endLine()
					}
					asking = append(asking, p)
					switch {
					case inputEnded:
						answer("")
					case answers == nil:
						answers = readLines(streamCtx, io.in)
						fallthrough
					default:
						if len(asking) == 1 {
							ask()
						}
					}
				}
			case rein.EventUserToolConfirmation:
				// Answered (here or by another client): stop asking.
				var p rein.UserToolConfirmationPayload
				if e.DecodePayload(&p) == nil {
					for i, a := range asking {
						if a.ToolUseID == p.ToolUseID {
							asking = append(asking[:i], asking[i+1:]...)
							if i == 0 {
								fmt.Fprintln(io.err, "[answered elsewhere]")
								ask()
							}
							break
						}
					}
				}
			case rein.EventMessage:
				var p rein.MessagePayload
				if !*jsonOut && e.DecodePayload(&p) == nil {
					out.final(p.Text)
				}
			case rein.EventRunCompleted:
				var p rein.RunCompletedPayload
				_ = e.DecodePayload(&p)
				if !*jsonOut {
					out.endLine()
				}
				if p.Reason != rein.ReasonStop {
					msg := fmt.Sprintf("[run %s: %s", strings.ToLower(string(p.Status)), p.Reason)
					if p.Error != "" {
						msg += ": " + p.Error
					}
					if p.RolledBack {
						msg += "; rolled back: left out of the conversation"
					}
					fmt.Fprintln(io.err, msg+"]")
				}
				return exitCode(p.Status, p.Reason)
			}
		}
	}
}

// sendStopMode says what the n-th Ctrl-C of `rein send` does: the first
// interrupts the run (it answers with what it has), the second cancels it,
// the third stops waiting for it.
func sendStopMode(n int) (mode rein.StopMode, giveUp bool) {
	switch n {
	case 1:
		return rein.StopInterrupt, false
	case 2:
		return rein.StopCancel, false
	}
	return "", true
}

// replyPrinter prints a run's reply as it streams, keeping the terminal
// tidy: each step's text on its own lines, and the final reply printed in
// full only when the streamed deltas did not already show it.
type replyPrinter struct {
	w interface{ Write([]byte) (int, error) }
	// step is the step whose deltas are on screen; text what they said.
	step    int
	text    strings.Builder
	midLine bool
}

func (r *replyPrinter) write(s string) {
	if s == "" {
		return
	}
	fmt.Fprint(r.w, s)
	r.midLine = !strings.HasSuffix(s, "\n")
}

// endLine finishes a line of streamed text, if one is open.
func (r *replyPrinter) endLine() {
	if r.midLine {
		fmt.Fprintln(r.w)
		r.midLine = false
	}
}

func (r *replyPrinter) delta(step int, text string) {
	if step != r.step {
		r.endLine()
		r.step = step
		r.text.Reset()
	}
	r.text.WriteString(text)
	r.write(text)
}

// restart forgets the deltas shown for step: a resumed run makes that
// step's model request again (agent.step_restarted), and its new deltas
// start on a fresh line. Text already on the terminal stays; the final
// reply is compared with the new deltas only.
func (r *replyPrinter) restart(step int) {
	if step == r.step {
		r.endLine()
		r.text.Reset()
	}
}

// stepRestartedLine is the status line of an agent.step_restarted.
func stepRestartedLine(p rein.StepRestartedPayload) string {
	return fmt.Sprintf("[… step %d restarted after instance loss (attempt %d)]", p.Step, p.Attempt)
}

// final shows the run's final reply: the deltas of the last step normally
// spell it exactly; what they did not show yet is printed now.
func (r *replyPrinter) final(text string) {
	shown := r.text.String()
	r.text.Reset()
	r.step = 0
	switch {
	case shown == text:
	case shown != "" && strings.HasPrefix(text, shown):
		r.write(text[len(shown):])
	default:
		r.endLine()
		r.write(text)
	}
	r.endLine()
}
