package main

// What the client-side commands (chat, send, events) share: the flags that
// name a server and a session, and the one-line rendering of events.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// defaultServer is where the client commands look for `rein serve`.
const defaultServer = "http://127.0.0.1:8080"

// remoteFlags are the flags of every command that talks to a server.
type remoteFlags struct {
	server  *string
	token   *string
	session *string
}

// addRemoteFlags defines --server, --token and --session on fs.
// sessionHelp describes --session for this command.
func addRemoteFlags(fs *flag.FlagSet, sessionHelp string) remoteFlags {
	return remoteFlags{
		server:  fs.String("server", defaultServer, "the Rein server's base URL"),
		token:   fs.String("token", "", "bearer token (none for a single-user server)"),
		session: fs.String("session", "", sessionHelp),
	}
}

func (f remoteFlags) client() *client.Client {
	var opts []client.Option
	if *f.token != "" {
		opts = append(opts, client.WithToken(*f.token))
	}
	return client.New(*f.server, opts...)
}

// ensureSession returns the --session id, or creates a session and tells
// the user its id on stderr, so that the next command can continue it.
func ensureSession(ctx context.Context, c *client.Client, f remoteFlags, io stdio) (string, error) {
	if *f.session != "" {
		return *f.session, nil
	}
	s, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(io.err, "session %s\n", s.ID)
	return s.ID, nil
}

// describeError turns a client error into a line for the terminal, with a
// hint where the fix is obvious.
func describeError(err error, server, session string) string {
	var ce *client.Error
	if !errors.As(err, &ce) {
		return err.Error() + " (is `rein serve` running at " + server + "?)"
	}
	switch ce.Code {
	case rein.CodeUnauthenticated:
		return "the server wants a valid token (--token or REIN_TOKEN)"
	case rein.CodeNotFound:
		if session != "" {
			return "session " + session + " not found"
		}
	case rein.CodeSessionBusy:
		return fmt.Sprintf("the session is busy with run %s (use --when-busy enqueue, interrupt or rollback)", ce.RunID)
	}
	msg := string(ce.Code)
	if ce.Message != "" {
		msg += ": " + ce.Message
	}
	if ce.Param != "" {
		msg += " (" + ce.Param + ")"
	}
	return msg
}

// oneLine shortens s to at most n runes on one line, for status lines.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// compact renders raw JSON without insignificant spaces.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// formatEvent renders an event as one readable line:
//
//	#12 15:04:05.000 agent.tool_use run_01H… step=1 name=sleep input={"seconds":5}
//
// Texts are quoted so that a line is always one event.
func formatEvent(e rein.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s", e.Seq, e.CreatedAt.Local().Format("15:04:05.000"), e.Type)
	if e.RunID != "" {
		b.WriteString(" " + e.RunID)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return b.String() + " " + string(e.Payload)
	}
	// The payload keys worth reading, in a fixed order per type; the run
	// id is already on the line.
	var keys []string
	switch e.Type {
	case rein.EventUserMessage, rein.EventSystemMessage:
		keys = []string{"text"}
	case rein.EventRunQueued:
		keys = []string{"position"}
	case rein.EventRunStarted:
	case rein.EventMessageDelta:
		keys = []string{"step", "text"}
	case rein.EventToolUse:
		keys = []string{"step", "tool_use_id", "name", "input"}
	case rein.EventToolConfirmationRequested:
		keys = []string{"tool_use_id", "name", "input"}
	case rein.EventUserToolConfirmation:
		keys = []string{"tool_use_id", "allow", "deny_message"}
	case rein.EventToolResult:
		keys = []string{"tool_use_id", "is_error", "in_doubt", "output"}
	case rein.EventUserSupplement:
		keys = []string{"supplement_id", "source", "text"}
	case rein.EventSupplementConsumed:
		keys = []string{"supplement_id", "step"}
	case rein.EventMessage:
		keys = []string{"reason", "text"}
	case rein.EventUserInterrupt:
		keys = []string{"mode", "accepted", "message"}
		if e.RunID == "" {
			keys = append([]string{"run_id"}, keys...)
		}
	case rein.EventRunCompleted:
		keys = []string{"status", "reason", "error", "rolled_back"}
	case rein.EventStepRestarted:
		keys = []string{"step", "attempt"}
	case rein.EventSubagentStarted:
		keys = []string{"child_id", "task_id"}
	case rein.EventSubagentCompleted:
		keys = []string{"child_id", "task_id", "status", "reason", "output"}
	default:
		for k := range p {
			if k != "run_id" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
	}
	for _, k := range keys {
		v, ok := p[k]
		if !ok {
			continue
		}
		b.WriteString(" " + k + "=" + compact(v))
	}
	return b.String()
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
	ch := make(chan streamItem)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ev, err := stream.Next()
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
