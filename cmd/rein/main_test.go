package main

import (
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestUsageListsEveryCommand: `rein` alone lists every command (exit 2: it
// did nothing); -h and `rein help` print the same on stdout (exit 0).
func TestUsageListsEveryCommand(t *testing.T) {
	code, out, errs := run(t, "", nil)
	if code != exitUsage || out != "" {
		t.Fatalf("rein: exit %d, stdout %q", code, out)
	}
	for _, name := range []string{"serve", "run", "migrate", "chat", "send", "events", "sessions", "runs", "stop", "delete", "version", "help"} {
		if !strings.Contains(errs, "\n  "+name+" ") {
			t.Errorf("the usage lacks %s:\n%s", name, errs)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, _ := run(t, "", nil, args...)
		if code != 0 || out != errs {
			t.Errorf("rein %v: exit %d, stdout:\n%s", args, code, out)
		}
	}
	code, _, errs = run(t, "", nil, "nosuch")
	if code != exitUsage || !strings.Contains(errs, `rein: unknown command "nosuch" (the commands are serve, run,`) {
		t.Fatalf("unknown command: exit %d, stderr:\n%s", code, errs)
	}
}

// TestHelpIsTheCommandsHelp: `rein help CMD` prints exactly what
// `rein CMD -h` prints, on stdout, exit 0; an unknown one is a usage error.
func TestHelpIsTheCommandsHelp(t *testing.T) {
	for _, c := range commands() {
		code, help, errs := run(t, "", nil, "help", c.name)
		if code != 0 || errs != "" || !strings.HasPrefix(help, "Usage: ") {
			t.Errorf("rein help %s: exit %d, stdout %q, stderr %q", c.name, code, help, errs)
			continue
		}
		code, dashH, _ := run(t, "", nil, c.name, "-h")
		if code != 0 || dashH != help {
			t.Errorf("rein %s -h: exit %d, and differs from rein help %s:\n%s\n---\n%s", c.name, code, c.name, dashH, help)
		}
		if c.name != "help" && !strings.HasPrefix(help, "Usage: "+c.synopsis+"\n") {
			t.Errorf("rein help %s does not start with the synopsis:\n%s", c.name, help)
		}
	}
	code, help, _ := run(t, "", nil, "help", "serve")
	if code != 0 || !strings.Contains(help, "  --drain-timeout duration\n") || !strings.Contains(help, `(default "10s"; REIN_DRAIN_TIMEOUT)`) {
		t.Fatalf("rein help serve:\n%s", help)
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "send", "events"}} {
		code, out, errs := run(t, "", nil, args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errs, "rein: ") || !strings.Contains(errs, "usage: rein help [COMMAND]") {
			t.Errorf("rein %v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/reinhq/rein/cmd/rein", Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "55befd1c0ffee"}, {Key: "vcs.time", Value: "2025-06-01T10:00:00Z"}, {Key: "vcs.modified", Value: "false"},
		}}, "rein v1.2.3\ngo:       go1.26.8\nrevision: 55befd1c0ffee\ntime:     2025-06-01T10:00:00Z\n"},
		{"dirty checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2025-06-02T11:00:00Z"}, {Key: "vcs.modified", Value: "true"},
		}}, "rein (devel)\ngo:       go1.26.8\nrevision: abc123-dirty\ntime:     2025-06-02T11:00:00Z\n"},
		{"no VCS stamp", &debug.BuildInfo{GoVersion: "go1.26.8"}, "rein (devel)\ngo:       go1.26.8\nrevision: unknown\n"},
		{"no build info", nil, "rein (devel)\ngo:       unknown\nrevision: unknown\n"},
	} {
		var b strings.Builder
		writeVersion(&b, c.info)
		if b.String() != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", c.name, b.String(), c.want)
		}
	}
	// Both spellings print this binary's own build info.
	code, out, _ := run(t, "", nil, "version")
	if code != 0 || !strings.HasPrefix(out, "rein ") || !strings.Contains(out, "go:       "+goruntime.Version()+"\n") || !strings.Contains(out, "revision: ") {
		t.Fatalf("rein version: exit %d:\n%s", code, out)
	}
	code, out2, _ := run(t, "", nil, "--version")
	if code != 0 || out2 != out {
		t.Fatalf("rein --version: exit %d:\n%s", code, out2)
	}
	if code, _, errs := run(t, "", nil, "version", "extra"); code != exitUsage || !strings.Contains(errs, `unexpected argument "extra"`) {
		t.Fatalf("rein version extra: exit %d, stderr %q", code, errs)
	}
}

// TestUsageErrors: every command line rein cannot act on exits 2, says
// what was wrong and what a valid value looks like, and names the
// command's usage — whichever command, and whether the value came from a
// flag or its variable.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"send"}, `give the message TEXT, e.g. rein send "hello"`},
		{nil, []string{"send", "--timeout", "-1s", "hi"}, `--timeout "-1s": must be a positive duration such as 30s`},
		{nil, []string{"send", "--timeout", "soon", "hi"}, `--timeout "soon": not a duration: use one such as 30s, 2m or 1h30m`},
		{nil, []string{"send", "--json=maybe", "hi"}, `--json "maybe": use true or false`},
		{nil, []string{"send", "--budget-tokens", "-5", "hi"}, `--budget-tokens "-5": must be a whole number of tokens > 0`},
		{nil, []string{"send", "--budget-usd", "-1", "hi"}, `--budget-usd "-1": must be an amount in US dollars > 0`},
		{nil, []string{"send", "--server", "ftp://x", "hi"}, `--server "ftp://x": not a server address (scheme "ftp"; the server speaks http or https); use HOST:PORT or http(s)://HOST[:PORT], e.g. 127.0.0.1:8080`},
		{map[string]string{"REIN_SERVER": "http://:8080"}, []string{"send", "hi"}, `REIN_SERVER="http://:8080" (--server): not a server address (no host)`},
		{nil, []string{"send", "--server"}, "--server needs a value, e.g. --server http://127.0.0.1:8080"},
		{nil, []string{"send", "--nope", "hi"}, "unknown flag --nope (rein send has --budget-tokens, --budget-usd, --client-id, --json, --server, --session, --timeout, --token, --when-busy)"},
		{nil, []string{"send", "---x", "hi"}, `bad flag syntax "---x": write --name value or --name=value`},
		{map[string]string{"REIN_WHEN_BUSY": "later"}, []string{"send", "hi"}, `REIN_WHEN_BUSY="later" (--when-busy): use reject, enqueue, interrupt or rollback`},
		{nil, []string{"chat", "hello"}, `unexpected argument "hello": rein chat takes no message on the command line`},
		{nil, []string{"events"}, "give the session, e.g. rein events ses_01K2…"},
		{nil, []string{"runs"}, "give the session, e.g. rein runs ses_01K2…"},
		{nil, []string{"runs", "a", "b"}, `unexpected argument "b": give one session, e.g. rein runs ses_01K2…`},
		{nil, []string{"stop"}, "give the run to stop, e.g. rein stop run_01K2…"},
		{nil, []string{"stop", "run_a", "run_b"}, `unexpected argument "run_b": give one run id`},
		{nil, []string{"stop", "--interrupt=sure", "run_a"}, `--interrupt "sure": use true or false`},
		{nil, []string{"delete"}, "give the session to delete, e.g. rein delete ses_01K2…"},
		{nil, []string{"sessions", "extra"}, `unexpected argument "extra": rein sessions takes flags only`},
		{nil, []string{"run"}, `give the input TEXT, e.g. rein run "hello"`},
		{nil, []string{"run", "--model", "gpt-4o", "hi"}, `--model: unknown model "gpt-4o": accepted forms are demo | scripted:PATH | openai:NAME | ollama:NAME | anthropic:NAME (for a provider's model say which: openai:gpt-4o`},
		{map[string]string{"REIN_MODEL": "mistral:large"}, []string{"run", "hi"}, `REIN_MODEL (--model): unknown model "mistral:large": accepted forms are demo |`},
		{nil, []string{"run", "--model", "scripted:testdata/not-a-script.txt", "hi"}, "--model: testdata/not-a-script.txt:1: not a valid script: a script is a mapping with a rules list, and this file holds a string"},
		{nil, []string{"run", "--model", "openai:gpt-4o", "hi"}, `--model: model "openai:gpt-4o": OPENAI_API_KEY is not set`},
		{nil, []string{"migrate", "--store", "nosuch:x"}, `--store: unknown store "nosuch:x": use sqlite:PATH, postgres://… or memory:`},
		{nil, []string{"migrate", "extra"}, `unexpected argument "extra": rein migrate takes flags only`},
	} {
		code, out, errs := run(t, "", c.env, c.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errs, "rein: "+c.want) || !strings.Contains(errs, "\nusage: rein "+c.args[0]+" ") {
			t.Errorf("%v %v: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and rein: %s", c.env, c.args, code, out, errs, c.want)
		}
		for _, code := range []string{"invalid_argument", "not_found"} {
			if strings.Contains(errs, code+":") {
				t.Errorf("%v: the message leads with its code:\n%s", c.args, errs)
			}
		}
	}
}

func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":      "http://127.0.0.1:8080",
		"127.0.0.1:8080":             "http://127.0.0.1:8080",
		"localhost:8080/":            "http://localhost:8080",
		"[::1]:8080":                 "http://[::1]:8080",
		"https://rein.example.com":   "https://rein.example.com",
		" https://h.example/prefix/": "https://h.example/prefix",
		"rein.internal":              "http://rein.internal",
	} {
		if got, err := serverURL(in); err != nil || got != want {
			t.Errorf("serverURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ftp://h", "http://", "http://h:99999", "http://h:port", "http://u:p@h", "h:8080?x=1", "http://[::1", "http://a b:80", "::1:8080"} {
		if got, err := serverURL(in); err == nil {
			t.Errorf("serverURL(%q) = %q, want an error", in, got)
		}
	}
}
