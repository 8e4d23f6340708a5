// Command rein is Rein's command line: the server (serve), one-shot runs
// (run), a terminal chat against a server (chat), and small tools around
// them (send, events, sessions, runs, stop, delete, migrate, version).
//
// Each command lives in its own file as a function taking its arguments
// and the process's standard streams and returning an error, so tests run
// commands in-process; mainWith alone turns errors into exit statuses and
// messages (errors.go). Every flag can also be set by an environment
// variable: REIN_ + the flag name upper-cased with '-' → '_'
// (--drain-timeout → REIN_DRAIN_TIMEOUT); a flag on the command line wins
// over its variable.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
)

// stdio is a command's standard streams and surroundings.
type stdio struct {
	in  io.Reader
	out io.Writer
	err io.Writer
	// lookupEnv reads the environment (os.LookupEnv in production).
	lookupEnv func(string) (string, bool)
	// signals relays the given signals to the returned channel until stop
	// is called (signal.Notify in production; tests press Ctrl-C through a
	// channel of their own). Nil relays nothing.
	signals func(sig ...os.Signal) (ch <-chan os.Signal, stop func())
}

// notify returns a channel of the given signals and the function that
// stops relaying them.
func (s stdio) notify(sig ...os.Signal) (<-chan os.Signal, func()) {
	if s.signals == nil {
		return make(chan os.Signal), func() {}
	}
	return s.signals(sig...)
}

// osSignals is stdio.signals of the real process.
func osSignals(sig ...os.Signal) (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 3)
	signal.Notify(ch, sig...)
	return ch, func() { signal.Stop(ch) }
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // the usage line
	summary  string // one line for the list of commands
	run      func(ctx context.Context, args []string, io stdio) error
}

// commands are the subcommands, in the order `rein` lists them.
func commands() []command {
	return []command{
		{"serve", serveSynopsis, "run the HTTP server (embedded SQLite, offline demo model by default)", cmdServe},
		{"run", runSynopsis, "run the agent once on TEXT in a fresh session and stream the reply (no server)", cmdRun},
		{"migrate", migrateSynopsis, "apply the store's schema migrations and exit", cmdMigrate},
		{"chat", chatSynopsis, "chat with a server in the terminal", cmdChat},
		{"send", sendSynopsis, "send one message to a server and stream the reply", cmdSend},
		{"events", eventsSynopsis, "print a session's events (optionally following live)", cmdEvents},
		{"sessions", sessionsSynopsis, "list your sessions on a server", cmdSessions},
		{"runs", runsSynopsis, "list a session's runs", cmdRuns},
		{"stop", stopSynopsis, "stop a run by its id, or by its message's client id", cmdStop},
		{"queue", queueSynopsis, "list a session's queued runs; edit, move or promote one", cmdQueue},
		{"approvals", approvalsSynopsis, "list the tool calls waiting for your approval, and answer them", cmdApprovals},
		{"delete", deleteSynopsis, "delete a session and everything in it", cmdDelete},
		{"bench", benchSynopsis, "load a server with many sessions and report latencies, events/s and memory", cmdBench},
		{"version", versionSynopsis, "print the version, the Go version and the revision built from", cmdVersion},
		{"help", helpSynopsis, "print a command's help", cmdHelp},
	}
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func main() {
	std := stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, lookupEnv: os.LookupEnv, signals: osSignals}
	os.Exit(mainWith(context.Background(), os.Args[1:], std))
}

// mainWith runs the command args name and returns the exit status.
func mainWith(ctx context.Context, args []string, io stdio) int {
	if len(args) == 0 {
		usage(io.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(io.out)
		return exitOK
	case "-version", "--version":
		args = []string{"version"}
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		fmt.Fprintf(io.err, "rein: unknown command %q (the commands are %s)\n\n", args[0], orList(commandNames()))
		usage(io.err)
		return exitUsage
	}
	return exitStatus(c.name, c.synopsis, c.run(ctx, args[1:], io), io.err)
}

func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Rein runs LLM agents under precise execution control.")
	fmt.Fprintln(w, "\nUsage: rein COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'rein help COMMAND' (or 'rein COMMAND -h') for a command's flags; 'rein --version' for the version.")
}

const helpSynopsis = "rein help [COMMAND]"

// cmdHelp is `rein help CMD`: exactly what `rein CMD -h` prints.
func cmdHelp(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "help", helpSynopsis, "Prints a command's help: what it does and its flags, each with its default and\nits variable (the same as rein COMMAND -h). Without a command, the list of\ncommands.")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	switch len(fs.args) {
	case 0:
		usage(std.out)
		return nil
	case 1:
	default:
		return usagef("give one command, e.g. rein help serve (not %q)", strings.Join(fs.args, " "))
	}
	c, ok := lookupCommand(fs.args[0])
	if !ok {
		return usagef("unknown command %q: the commands are %s", fs.args[0], orList(commandNames()))
	}
	return c.run(ctx, []string{"-h"}, std)
}
