package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const chatSynopsis = "rein chat [--server URL] [--token T] [--session ID]"

func cmdChat(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "chat", chatSynopsis, "Chats with a Rein server in the terminal. Without --session a new session is\ncreated and its id is printed to stderr.\n\n"+chatHelp)
	r := addRemote(fs)
	session := fs.String("session", "", "the `SESSION` to chat in (default: create one and print its id to stderr)")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if len(fs.args) > 0 {
		return usagef("unexpected argument %q: rein chat takes no message on the command line; type it once the chat runs (or use rein send TEXT)", fs.args[0])
	}
	if err := r.connect(); err != nil {
		return err
	}
	sid, err := r.ensureSession(ctx, *session, std)
	if err != nil {
		return err
	}
	info, err := r.c.GetSession(ctx, sid)
	if err != nil {
		return r.fail(err, sid)
	}
	ch := &chat{
		r: r, c: r.c, sid: sid, io: std,
		showAfter: info.LastSeq,
		mine:      map[string]bool{},
		open:      map[string]bool{},
		stops:     map[string]int{},
		reply:     &replyPrinter{w: std.out},
		text:      eventText{named: true},
	}
	fmt.Fprintln(std.err, "chatting in session "+sid+"; /help for commands")
	if len(info.PendingConfirmations) > 0 {
		// Asked before this chat began — maybe yesterday, before a restart:
		// it can be answered now.
		// One write, so the list is never seen without its calls.
		var b strings.Builder
		b.WriteString("[waiting for confirmation since before this chat; /approve or /deny:]\n")
		for _, p := range info.PendingConfirmations {
			fmt.Fprintf(&b, "  %s %s %s (asked %s)\n", p.ToolUseID, p.Name, p.Input, p.CreatedAt.Format(time.RFC3339))
		}
		io.WriteString(std.err, b.String())
	}
	sigs, stop := std.notify(os.Interrupt)
	defer stop()
	return ch.loop(ctx, sigs)
}

const chatHelp = `Type a message and press Enter to send it; replies stream as they arrive.
A message sent while a run is working waits in the queue.
  /replace TEXT            send TEXT instead of the current run: that run is
                           cancelled and left out of the conversation (rollback)
  /supplement TEXT         add a note the running agent reads at its next step
  /approve [TOOL_USE_ID]   allow a tool call waiting for confirmation
  /deny [TOOL_USE_ID] [MESSAGE]  deny it (the agent is told MESSAGE)
  /stop                    stop the current run (same as Ctrl-C)
  /system TEXT             set the system prompt for later runs
  /status                  show the session's state and queue
  /subagents               list this session's subagents (open one with
                           rein chat --session ID)
  /help                    show this help
  /quit                    leave (runs keep going on the server)
Ctrl-C stops the current run (a second Ctrl-C cancels it); with nothing
running it leaves. At the end of input the chat waits for its runs to end.
A line starting with // sends the rest, starting with /, as a message.`

// chat is the state of one terminal chat. Everything it shows comes from
// the session's event stream; only the main loop touches it, so it needs
// no locks.
type chat struct {
	r   *remote
	c   *client.Client
	sid string
	io  stdio
	ctx context.Context

	// showAfter: events up to this seq happened before the chat began.
	// They are replayed silently so that the state below (current run,
	// queue, waiting confirmations) is exact, then shown from here on.
	showAfter int64

	running string   // the run running now, "" when none
	queued  []string // queued runs, next first
	// pending are tool calls waiting for confirmation, oldest first.
	pending []rein.ToolConfirmationRequestedPayload
	// mine are runs this chat started; open those of them not yet ended
	// (at the end of input the chat waits for them).
	mine map[string]bool
	open map[string]bool
	// stops counts the stop requests sent per run: the first interrupts,
	// the second cancels.
	stops map[string]int
	reply *replyPrinter
	text  eventText
}

// loop runs the chat until /quit, Ctrl-C with nothing running, or the
// end of input once its runs have ended.
func (ch *chat) loop(ctx context.Context, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch.ctx = ctx
	stream := ch.c.Stream(ctx, ch.sid, 0)
	defer stream.Close()
	events, wait := pump(ctx, stream)
	defer wait()
	defer cancel()
	// Input waits until the silent replay of the session's past is done,
	// so that the first command already sees the current run and any
	// tool call waiting for confirmation.
	input := readLines(ctx, ch.io.in)
	var lines <-chan string
	if ch.showAfter == 0 {
		lines = input
	}
	inputEnded := false
	for {
		if inputEnded && len(ch.open) == 0 {
			return nil
		}
		select {
		case line, ok := <-lines:
			if !ok {
				lines, inputEnded = nil, true
				if n := len(ch.open); n > 0 {
					ch.status(fmt.Sprintf("[end of input: waiting for %d run(s) to end; Ctrl-C stops the current one]", n))
				}
				continue
			}
			if ch.command(line) {
				return nil
			}
		case it := <-events:
			if it.err != nil {
				if ctx.Err() != nil {
					return &exitError{code: exitCancelled}
				}
				ch.reply.endLine()
				return ch.r.fail(it.err, ch.sid)
			}
			ch.event(it.ev)
			if lines == nil && !inputEnded && it.ev.Seq >= ch.showAfter {
				lines = input
			}
		case <-sigs:
			if ch.running == "" {
				ch.reply.endLine()
				return nil
			}
			ch.stop(ch.running)
		case <-ctx.Done():
			return &exitError{code: exitCancelled}
		}
	}
}

// status prints a status line, ending any streamed text first.
func (ch *chat) status(s string) {
	ch.reply.endLine()
	fmt.Fprintln(ch.io.out, s)
}

func (ch *chat) fail(err error) {
	ch.status("[error: " + message(ch.r.fail(err, ch.sid)) + "]")
}

// command handles one line of input and reports whether to quit.
func (ch *chat) command(line string) bool {
	line = strings.TrimSpace(line)
	if line == "" {
		return false
	}
	if !strings.HasPrefix(line, "/") || strings.HasPrefix(line, "//") {
		ch.send(strings.TrimPrefix(line, "/"), rein.WhenBusyEnqueue)
		return false
	}
	name, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch name {
	case "/quit", "/exit":
		ch.reply.endLine()
		return true
	case "/help":
		ch.status(chatHelp)
	case "/status":
		ch.showStatus()
	case "/stop":
		if ch.running == "" {
			ch.status("[nothing is running]")
		} else {
			ch.stop(ch.running)
		}
	case "/replace":
		if rest == "" {
			ch.status("[usage: /replace TEXT]")
			return false
		}
		ch.send(rest, rein.WhenBusyRollback)
	case "/supplement":
		if rest == "" {
			ch.status("[usage: /supplement TEXT]")
			return false
		}
		if _, err := ch.c.Supplement(ch.ctx, ch.sid, client.Supplement{Text: rest}); err != nil {
			ch.fail(err)
		}
	case "/system":
		if rest == "" {
			ch.status("[usage: /system TEXT]")
			return false
		}
		if err := ch.c.SetSystem(ch.ctx, ch.sid, rest); err != nil {
			ch.fail(err)
		}
	case "/approve", "/deny":
		ch.confirm(name == "/approve", rest)
	case "/subagents":
		ch.listSubagents()
	default:
		ch.status("[unknown command " + name + "; /help lists them]")
	}
	return false
}

// send posts a user message; a busy session queues it (enqueue) or rolls
// its current run back (rollback: /replace).
func (ch *chat) send(text string, whenBusy rein.WhenBusy) {
	res, err := ch.c.SendMessage(ch.ctx, ch.sid, client.Message{Text: text, WhenBusy: whenBusy})
	if err != nil {
		ch.fail(err)
		return
	}
	ch.mine[res.RunID] = true
	if !res.Status.Terminal() {
		ch.open[res.RunID] = true
	}
	// The run is current as soon as the server says so, before its
	// run_started arrives: a Ctrl-C right after Enter stops this run.
	if res.Status == rein.StatusRunning && ch.running == "" {
		ch.running = res.RunID
	}
}

// stop stops one run by its id: first cooperatively, then at once. It
// never stops "whatever is current" on the server, so a run that started
// in the meantime is never hit by a stop meant for its predecessor.
func (ch *chat) stop(runID string) {
	ch.stops[runID]++
	mode := rein.StopInterrupt
	if ch.stops[runID] > 1 {
		mode = rein.StopCancel
	}
	res, err := ch.c.StopRun(ch.ctx, ch.sid, runID, mode)
	switch {
	case err != nil:
		ch.fail(err)
	case !res.Accepted:
		ch.status("[run " + runID + " had already ended]")
	case mode == rein.StopInterrupt:
		ch.status("[interrupting run " + runID + "; Ctrl-C again cancels it]")
	default:
		ch.status("[cancelling run " + runID + "]")
	}
}

// confirm answers a waiting tool call: "/approve [ID]", "/deny [ID] [MSG]".
func (ch *chat) confirm(allow bool, rest string) {
	verb := "/deny"
	if allow {
		verb = "/approve"
	}
	if len(ch.pending) == 0 {
		ch.status("[no tool call is waiting for confirmation]")
		return
	}
	first, msg, _ := strings.Cut(rest, " ")
	var target *rein.ToolConfirmationRequestedPayload
	for i := range ch.pending {
		if ch.pending[i].ToolUseID == first {
			target = &ch.pending[i]
			msg = strings.TrimSpace(msg)
		}
	}
	if target == nil {
		if len(ch.pending) > 1 {
			ch.status("[several tool calls are waiting; say which: " + verb + " TOOL_USE_ID]")
			ch.listPending()
			return
		}
		target, msg = &ch.pending[0], rest
	}
	if allow && msg != "" {
		ch.status("[no tool call " + first + " is waiting]")
		ch.listPending()
		return
	}
	tc := client.ToolConfirmation{ToolUseID: target.ToolUseID, Allow: allow, DenyMessage: msg}
	if _, err := ch.c.ConfirmTool(ch.ctx, ch.sid, tc); err != nil {
		if errors.Is(err, rein.ErrConflict) || errors.Is(err, rein.ErrNotFound) {
			ch.status("[tool call " + tc.ToolUseID + " is no longer waiting]")
			ch.dropPending(tc.ToolUseID)
			return
		}
		ch.fail(err)
	}
}

// listSubagents shows the session's direct children and how to open one.
func (ch *chat) listSubagents() {
	kids, err := ch.c.ListSubagents(ch.ctx, ch.sid)
	if err != nil {
		ch.fail(err)
		return
	}
	if len(kids) == 0 {
		ch.status("[no subagents]")
		return
	}
	ch.status("[subagents — open one with: rein chat --session ID]")
	for _, k := range kids {
		line := fmt.Sprintf("  %s  %s  %s", k.ID, k.State, k.Label)
		if k.CurrentRunID != "" {
			line += "  (running " + k.CurrentRunID + ")"
		}
		ch.status(line)
	}
}

func (ch *chat) listPending() {
	for _, p := range ch.pending {
		ch.status(fmt.Sprintf("  %s  %s %s", p.ToolUseID, p.Name, oneLine(compact(p.Input), 120)))
	}
}

func (ch *chat) dropPending(toolUseID string) {
	ch.pending = slices.DeleteFunc(ch.pending, func(p rein.ToolConfirmationRequestedPayload) bool { return p.ToolUseID == toolUseID })
}

func (ch *chat) showStatus() {
	s, err := ch.c.GetSession(ch.ctx, ch.sid)
	if err != nil {
		ch.fail(err)
		return
	}
	line := "[session " + s.ID + ": " + s.State
	if s.CurrentRunID != "" {
		line += "; running " + s.CurrentRunID
	}
	if len(s.QueuedRunIDs) > 0 {
		line += "; queued " + strings.Join(s.QueuedRunIDs, ", ")
	}
	line += fmt.Sprintf("; %d events]", s.LastSeq)
	ch.status(line)
	if len(ch.pending) > 0 {
		ch.status("[waiting for confirmation:]")
		ch.listPending()
	}
}

// queueNote is " (N queued)" when runs wait, for status lines.
func (ch *chat) queueNote() string {
	if len(ch.queued) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d queued)", len(ch.queued))
}

// event updates the state from one event and shows it unless it predates
// the chat.
func (ch *chat) event(e rein.Event) {
	show := e.Seq > ch.showAfter
	if h, ok := chatHandlers[e.Type]; ok {
		h(ch, e, show)
		return
	}
	if show && ch.reply.event(e) {
		return
	}
	if s := ch.text.status(e); show && s != "" {
		ch.status("[" + s + "]")
	}
}

// chatHandlers are the events that change the chat's state, or that it
// shows its own way; every other event shows as its status line.
var chatHandlers = map[rein.EventType]func(ch *chat, e rein.Event, show bool){
	rein.EventUserMessage:               (*chat).onUserMessage,
	rein.EventRunQueued:                 (*chat).onQueued,
	rein.EventRunStarted:                (*chat).onStarted,
	rein.EventToolConfirmationRequested: (*chat).onConfirmationRequested,
	rein.EventUserToolConfirmation:      (*chat).onConfirmation,
	rein.EventConfirmationExpired:       (*chat).onExpired,
	rein.EventUserInterrupt:             (*chat).onInterrupt,
	rein.EventRunCompleted:              (*chat).onCompleted,
}

// onUserMessage shows other clients' messages; this chat's own were typed.
func (ch *chat) onUserMessage(e rein.Event, show bool) {
	if p, ok := decode[rein.UserMessagePayload](e); ok && show && !ch.mine[e.RunID] {
		ch.status("> " + p.Text)
	}
}

func (ch *chat) onQueued(e rein.Event, show bool) {
	p, ok := decode[rein.RunQueuedPayload](e)
	if !ok {
		return
	}
	// position 1 = next: a when_busy=interrupt message jumps the queue.
	i := min(max(p.Position-1, 0), len(ch.queued))
	ch.queued = slices.Insert(slices.DeleteFunc(ch.queued, func(id string) bool { return id == e.RunID }), i, e.RunID)
	if show {
		ch.status("[" + ch.text.status(e) + "]")
	}
}

func (ch *chat) onStarted(e rein.Event, show bool) {
	ch.running = e.RunID
	ch.queued = slices.DeleteFunc(ch.queued, func(id string) bool { return id == e.RunID })
	if show {
		ch.status("[" + ch.text.status(e) + ch.queueNote() + "]")
	}
}

func (ch *chat) onConfirmationRequested(e rein.Event, show bool) {
	p, ok := decode[rein.ToolConfirmationRequestedPayload](e)
	if !ok {
		return
	}
	ch.pending = append(ch.pending, p)
	if show {
		hint := "/approve or /deny [MESSAGE]"
		if len(ch.pending) > 1 {
			hint = "/approve " + p.ToolUseID + " or /deny " + p.ToolUseID + " [MESSAGE]"
		}
		ch.status("[" + ch.text.status(e) + ": " + hint + "]")
	}
}

func (ch *chat) onConfirmation(e rein.Event, show bool) {
	if p, ok := decode[rein.UserToolConfirmationPayload](e); ok {
		ch.dropPending(p.ToolUseID)
		if show {
			ch.status("[" + ch.text.status(e) + "]")
		}
	}
}

// onExpired drops a call no one answered in time: it is denied, and no
// longer waits for this chat's answer.
func (ch *chat) onExpired(e rein.Event, show bool) {
	if p, ok := decode[rein.ConfirmationExpiredPayload](e); ok {
		ch.dropPending(p.ToolUseID)
		if show {
			ch.status("[" + ch.text.status(e) + "]")
		}
	}
}

// onInterrupt shows the stops other clients made; this chat's own are
// reported when the server answers them.
func (ch *chat) onInterrupt(e rein.Event, show bool) {
	p, ok := decode[rein.UserInterruptPayload](e)
	if ok && show && p.RunID != nil && ch.stops[*p.RunID] == 0 && p.Accepted {
		ch.status("[" + ch.text.status(e) + " by another client]")
	}
}

func (ch *chat) onCompleted(e rein.Event, show bool) {
	if ch.running == e.RunID {
		ch.running = ""
	}
	ch.queued = slices.DeleteFunc(ch.queued, func(id string) bool { return id == e.RunID })
	ch.pending = slices.DeleteFunc(ch.pending, func(q rein.ToolConfirmationRequestedPayload) bool { return q.RunID == e.RunID })
	delete(ch.open, e.RunID)
	if show {
		ch.status("[" + ch.text.status(e) + ch.queueNote() + "]")
	}
}
