package main

// Following one run to its end, as `rein send` (over HTTP) and `rein run`
// (in-process) both do.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// follower follows one run's events until the run ends. It shows them —
// the reply on stdout as it streams (or every event of the run as a JSON
// line), status lines on stderr — asks on stderr about the tool calls that
// need confirmation and answers from stdin, and turns Ctrl-C into stops of
// that run, by its id.
type follower struct {
	runID string
	std   stdio
	// enc prints events as JSON lines (--json); nil prints the reply.
	enc   *json.Encoder
	reply *replyPrinter
	text  eventText
	// stop stops the run; confirm answers one of its tool calls.
	stop    func(ctx context.Context, mode rein.StopMode) (accepted bool, err error)
	confirm func(ctx context.Context, toolUseID string, allow bool, denyMessage string) error
	// explain rephrases errors of the event source, stop and confirm.
	explain func(error) error

	ctx context.Context
	// asking are the tool calls waiting for an answer here, first asked
	// first; answers are the lines of stdin, read only once a question is
	// asked.
	asking     []rein.ToolConfirmationRequestedPayload
	answers    <-chan string
	inputEnded bool
	stops      int
}

func newFollower(runID string, std stdio, jsonOut bool) *follower {
	f := &follower{runID: runID, std: std, reply: &replyPrinter{w: std.out}, explain: func(err error) error { return err }}
	if jsonOut {
		f.enc = json.NewEncoder(std.out)
	}
	return f
}

// follow runs until the run ends and returns how it ended: nil for a run
// that finished (stop, max_steps), an *exitError with the status of
// docs/cli.md otherwise, or the error that ended the event source.
func (f *follower) follow(ctx context.Context, events <-chan streamItem, sigs <-chan os.Signal) error {
	f.ctx = ctx
	for {
		select {
		case <-sigs:
			if err := f.interrupt(); err != nil {
				return err
			}
		case line, ok := <-f.answers:
			f.input(line, ok)
		case it := <-events:
			if it.err != nil {
				return f.explain(it.err)
			}
			if done, err := f.event(it.ev); done {
				return err
			}
		}
	}
}

// stopMode says what the n-th Ctrl-C does: the first interrupts the run
// (it answers with what it has), the second cancels it, the third stops
// waiting for it.
func stopMode(n int) (mode rein.StopMode, giveUp bool) {
	switch n {
	case 1:
		return rein.StopInterrupt, false
	case 2:
		return rein.StopCancel, false
	}
	return "", true
}

func (f *follower) interrupt() error {
	f.stops++
	mode, giveUp := stopMode(f.stops)
	switch {
	case giveUp:
		fmt.Fprintf(f.std.err, "\n[not waiting for run %s any longer]\n", f.runID)
		return &exitError{code: exitCancelled}
	case mode == rein.StopInterrupt:
		fmt.Fprintf(f.std.err, "\n[interrupting run %s; Ctrl-C again cancels it]\n", f.runID)
	default:
		fmt.Fprintf(f.std.err, "\n[cancelling run %s]\n", f.runID)
	}
	accepted, err := f.stop(f.ctx, mode)
	switch {
	case err != nil:
		f.warn(err)
	case !accepted:
		fmt.Fprintf(f.std.err, "[run %s was no longer stoppable]\n", f.runID)
	}
	return nil
}

func (f *follower) warn(err error) {
	fmt.Fprintln(f.std.err, "rein: "+message(f.explain(err)))
}

// status prints a status line on stderr, ending any streamed text first.
func (f *follower) status(s string) {
	if f.enc == nil {
		f.reply.endLine()
	}
	fmt.Fprintln(f.std.err, "["+s+"]")
}

// shows says which events of the run get a status line: the reply itself
// is on stdout, so only what explains it — queueing, tools, restarts, an
// in-doubt tool call, and an end that is not the normal one.
func shows(e rein.Event) bool {
	switch e.Type {
	case rein.EventRunQueued, rein.EventToolUse, rein.EventStepRestarted:
		return true
	case rein.EventToolResult:
		p, ok := decode[rein.ToolResultPayload](e)
		return ok && p.InDoubt
	case rein.EventRunCompleted:
		p, _ := decode[rein.RunCompletedPayload](e)
		return p.Reason != rein.ReasonStop
	}
	return false
}

// event handles one event and reports whether the run has ended, with its
// exit error.
func (f *follower) event(e rein.Event) (done bool, err error) {
	if e.RunID != f.runID {
		return false, nil
	}
	if f.enc != nil {
		if err := f.enc.Encode(e); err != nil {
			return true, err
		}
	} else {
		f.reply.event(e)
	}
	if shows(e) {
		f.status(f.text.status(e))
	}
	switch e.Type {
	case rein.EventToolConfirmationRequested:
		if p, ok := decode[rein.ToolConfirmationRequestedPayload](e); ok {
			f.asked(p)
		}
	case rein.EventUserToolConfirmation:
		if p, ok := decode[rein.UserToolConfirmationPayload](e); ok {
			f.answered(p.ToolUseID)
		}
	case rein.EventRunCompleted:
		p, _ := decode[rein.RunCompletedPayload](e)
		if f.enc == nil {
			f.reply.endLine()
		}
		if code := exitCode(p.Status, p.Reason); code != exitOK {
			return true, &exitError{code: code}
		}
		return true, nil
	}
	return false, nil
}

// exitCode maps a run's end to the exit status of docs/cli.md.
func exitCode(status rein.RunStatus, reason rein.Reason) int {
	switch reason {
	case rein.ReasonStop, rein.ReasonMaxSteps, rein.ReasonBudget:
		return exitOK
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

// asked queues a question; stdin is read from the first one on, lazily,
// so that Ctrl-C still works while a question waits.
func (f *follower) asked(p rein.ToolConfirmationRequestedPayload) {
	f.asking = append(f.asking, p)
	switch {
	case f.inputEnded:
		f.answer("")
	case f.answers == nil:
		f.answers = readLines(f.ctx, f.std.in)
		fallthrough
	default:
		if len(f.asking) == 1 {
			f.ask()
		}
	}
}

// ask shows the first open question.
func (f *follower) ask() {
	if len(f.asking) > 0 {
		p := f.asking[0]
		fmt.Fprintf(f.std.err, "Allow tool %s with input %s? [y/N] ", p.Name, oneLine(compact(p.Input), 200))
	}
}

// answer answers the first open question with a line of input: y or yes
// allows, anything else denies.
func (f *follower) answer(line string) {
	p := f.asking[0]
	f.asking = f.asking[1:]
	a := strings.ToLower(strings.TrimSpace(line))
	allow := a == "y" || a == "yes"
	deny := ""
	if !allow {
		deny = "denied at the terminal"
	}
	if err := f.confirm(f.ctx, p.ToolUseID, allow, deny); err != nil && !errors.Is(err, rein.ErrConflict) {
		f.warn(err)
	}
}

// input takes a line of stdin, or its end (ok false). The end of input
// denies every open question: a script piping into rein never approves a
// tool by accident.
func (f *follower) input(line string, ok bool) {
	if !ok {
		f.answers, f.inputEnded = nil, true
		if len(f.asking) > 0 {
			fmt.Fprintln(f.std.err)
		}
		for len(f.asking) > 0 {
			f.answer("")
		}
		return
	}
	if len(f.asking) > 0 {
		f.answer(line)
		f.ask()
	}
}

// answered drops a question answered here or by another client.
func (f *follower) answered(toolUseID string) {
	for i, a := range f.asking {
		if a.ToolUseID == toolUseID {
			f.asking = append(f.asking[:i], f.asking[i+1:]...)
			if i == 0 {
				fmt.Fprintln(f.std.err, "[answered elsewhere]")
				f.ask()
			}
			return
		}
	}
}

// readLines reads lines from r into the returned channel, which is closed
// at the end of input. It stops early when ctx is done, but a read already
// blocked on a terminal cannot be cancelled: the goroutine then ends with
// the process (or, in tests, when the input is closed), which is why no
// one waits for it.
func readLines(ctx context.Context, r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// streamItem is one event read from a stream, or the error that ended it.
type streamItem struct {
	ev  rein.Event
	err error
}

// pump reads stream in a goroutine and delivers what it reads on the
// returned channel, so a command can select on events, input and signals at
// once. It stops after the stream's first error or when ctx ends; wait
// waits for the goroutine (cancel ctx first).
func pump(ctx context.Context, stream *client.EventStream) (events <-chan streamItem, wait func()) {
	return pumpFrom(ctx, stream.Next)
}

// pumpFrom is pump over any source of events.
func pumpFrom(ctx context.Context, next func() (rein.Event, error)) (events <-chan streamItem, wait func()) {
	ch := make(chan streamItem)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ev, err := next()
			select {
			case ch <- streamItem{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	})
	return ch, wg.Wait
}
