// Command rein is Rein's command line: the server (serve), one-shot runs
// (run), a terminal chat against a server (chat), and small tools around
// them (send, events, migrate).
//
// Each subcommand lives in its own file as a function taking its arguments
// and the process's standard streams, so tests can run commands in-process.
// Every flag can also be set by an environment variable: REIN_ + the flag
// name upper-cased with '-' → '_' (--drain-timeout → REIN_DRAIN_TIMEOUT); a
// flag on the command line wins over its variable.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// stdio is a command's standard streams and environment.
type stdio struct {
	in  io.Reader
	out io.Writer
	err io.Writer
	// lookupEnv reads the environment (os.LookupEnv in production).
	lookupEnv func(string) (string, bool)
}

// command is one subcommand: it returns the process exit status.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, io stdio) int
}

func commands() map[string]command {
	return map[string]command{
		"serve":   {"run the HTTP server (embedded SQLite, offline demo model by default)", cmdServe},
		"run":     {"run the agent once on TEXT in a fresh session and stream the reply", cmdRun},
		"migrate": {"apply the store's schema migrations and exit", cmdMigrate},
		"chat":    {"chat with a server in the terminal", cmdChat},
		"send":    {"send one message to a server and stream the reply", cmdSend},
		"events":  {"print a session's events (optionally following live)", cmdEvents},
	}
}

func main() {
	os.Exit(mainWith(context.Background(), os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, lookupEnv: os.LookupEnv}))
}

func mainWith(ctx context.Context, args []string, io stdio) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(io.err, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(io.err, "rein: unknown command %q\n\n", args[0])
		usage(io.err, cmds)
		return 2
	}
	return c.run(ctx, args[1:], io)
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Rein runs LLM agents under precise execution control.")
	fmt.Fprintln(w, "\nUsage: rein COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'rein COMMAND -h' for a command's flags.")
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return "REIN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}
