package main

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const sendSynopsis = "rein send [--server URL] [--token T] [--session ID] [--when-busy MODE] [--json] [--timeout D] [--client-id KEY] [--budget-tokens N] [--budget-usd X] TEXT"

const sendAbout = `Sends TEXT as a user message to a Rein server and streams the reply to stdout
until the run ends. Without --session a new session is created and its id is
printed to stderr. Status lines (tools, queue, how the run ended) go to stderr.
First Ctrl-C interrupts the run (it answers with what it has); a second one
cancels it; a third stops waiting.
Exit status: 0 stop (also max_steps and budget), 3 interrupted, 4 timeout, 130 cancelled, 1 failed or any
error, 2 bad usage.`

// sendCmd is `rein send`: its flags, then one message and the run it
// starts, followed to its end.
type sendCmd struct {
	fs       *flagSet
	r        *remote
	session  *string
	whenBusy *choice
	jsonOut  *bool
	timeout  *time.Duration
	clientID *string
	// budgetTokens and budgetUSD bound the run (0: no bound).
	budgetTokens *int64
	budgetUSD    *float64
	text         string
}

func cmdSend(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "send", sendSynopsis, sendAbout)
	s := &sendCmd{
		fs:           fs,
		r:            addRemote(fs),
		session:      fs.String("session", "", "the `SESSION` to send to (default: create one and print its id to stderr)"),
		whenBusy:     newChoice(string(rein.WhenBusyReject), string(rein.WhenBusyReject), string(rein.WhenBusyEnqueue), string(rein.WhenBusyInterrupt), string(rein.WhenBusyRollback)),
		jsonOut:      fs.Bool("json", false, "print the run's events as JSON lines instead of the reply text"),
		timeout:      fs.Duration("timeout", 0, "deadline for the run, queue time included, such as 30s or 2m (0: none)"),
		clientID:     fs.String("client-id", "", "idempotency `KEY`: a repeat shows the first run instead of starting another"),
		budgetTokens: fs.Int64("budget-tokens", 0, "the run's budget: once its model requests have used `N` tokens (input and output) it makes no more and ends with reason budget (0: none)"),
		budgetUSD:    fs.Float64("budget-usd", 0, "the run's budget in US dollars (`X`; needs the model's price, 0: none)"),
	}
	fs.Var(s.whenBusy, "when-busy", "what to do if the session is busy (`MODE`): reject, enqueue (wait in the queue), interrupt (the current run answers, this one runs next) or rollback (the current run is cancelled and left out of the conversation, this one runs next)")
	if err := s.parse(args, std); err != nil {
		return err
	}
	sigs, stop := std.notify(os.Interrupt)
	defer stop()
	return s.run(ctx, std, sigs)
}

func (s *sendCmd) parse(args []string, std stdio) error {
	if err := s.fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	s.text = strings.TrimSpace(strings.Join(s.fs.args, " "))
	if s.text == "" {
		return usagef(`give the message TEXT, e.g. rein send "hello"`)
	}
	if *s.timeout < 0 {
		return s.fs.invalid("timeout", "must be a positive duration such as 30s (or 0 for none)")
	}
	if *s.budgetTokens < 0 {
		return s.fs.invalid("budget-tokens", "must be a whole number of tokens > 0 (or 0 for none)")
	}
	if !(*s.budgetUSD >= 0) || math.IsInf(*s.budgetUSD, 0) {
		return s.fs.invalid("budget-usd", "must be an amount in US dollars > 0 such as 0.50 (or 0 for none)")
	}
	return s.r.connect()
}

func (s *sendCmd) run(ctx context.Context, std stdio, sigs <-chan os.Signal) error {
	sid, err := s.r.ensureSession(ctx, *s.session, std)
	if err != nil {
		return err
	}
	after, err := s.cursor(ctx, sid)
	if err != nil {
		return err
	}
	msg := client.Message{Text: s.text, WhenBusy: rein.WhenBusy(s.whenBusy.val), ClientID: *s.clientID, TimeoutS: s.timeout.Seconds()}
	if b := (rein.Budget{Tokens: *s.budgetTokens, CostUSD: *s.budgetUSD}); !b.IsZero() {
		msg.Budget = &b
	}
	res, err := s.r.c.SendMessage(ctx, sid, msg)
	if err != nil {
		err = s.r.fail(err, sid)
		if errors.Is(err, rein.ErrSessionBusy) {
			return &remoteError{msg: err.Error() + ": use --when-busy enqueue to wait, interrupt or rollback to take over", err: err}
		}
		return err
	}

	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := s.r.c.Stream(streamCtx, sid, after)
	defer stream.Close()
	events, wait := pump(streamCtx, stream)
	defer wait()
	defer cancel()

	f := newFollower(res.RunID, std, *s.jsonOut)
	f.explain = func(err error) error { return s.r.fail(err, sid) }
	f.stop = func(ctx context.Context, mode rein.StopMode) (bool, error) {
		r, err := s.r.c.StopRun(ctx, sid, res.RunID, mode)
		return r.Accepted, err
	}
	f.confirm = func(ctx context.Context, toolUseID string, allow bool, deny string) error {
		_, err := s.r.c.ConfirmTool(ctx, sid, client.ToolConfirmation{ToolUseID: toolUseID, Allow: allow, DenyMessage: deny})
		return err
	}
	return f.follow(streamCtx, events, sigs)
}

// cursor is where the run's events begin: after the session's current end,
// since everything before is old news. A --client-id repeat may name a run
// that ended long ago, so then the whole log is read for it.
func (s *sendCmd) cursor(ctx context.Context, sid string) (int64, error) {
	if *s.clientID != "" {
		return 0, nil
	}
	info, err := s.r.c.GetSession(ctx, sid)
	if err != nil {
		return 0, s.r.fail(err, sid)
	}
	return info.LastSeq, nil
}
