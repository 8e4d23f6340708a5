package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/sessions"
)

// TestServeDelegates: an agent's delegates list bounds the agents its
// sessions may give a child. One that may delegate to no other cannot
// start a researcher (its spawn_agent offers no choice, and the call is an
// error result); one without the key may, as before.
func TestServeDelegates(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rein.yaml")
	const file = `agents:
  default:
    delegates: []
  open:
    system: "open"
  researcher:
    system: "You research."
`
	if err := os.WriteFile(cfg, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt, err := openRuntime(ctx, app.Options{Store: "memory:", Model: "scripted:testdata/delegates.yaml", ConfigFile: cfg, Workspace: t.TempDir(), LookupEnv: noEnv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	svc := rt.Service()
	reply := func(agentName string) string {
		t.Helper()
		sess, err := svc.CreateSession(ctx, "local", sessions.CreateSessionRequest{Agent: agentName})
		if err != nil {
			t.Fatal(err)
		}
		res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: "delegate research"})
		if err != nil {
			t.Fatal(err)
		}
		out, err := res.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kids, err := svc.ListChildren(ctx, sess.Key())
		if err != nil {
			t.Fatal(err)
		}
		return out.Reply + " children=" + strconv.Itoa(len(kids))
	}
	if got := reply("default"); !strings.HasPrefix(got, "delegated: invalid input for tool spawn_agent") || !strings.HasSuffix(got, " children=0") {
		t.Fatalf("an agent with delegates: [] delegating to researcher: %q", got)
	}
	if got, want := reply("open"), `delegated: {"output":"system=[You research.]","reason":"stop"} children=1`; got != want {
		t.Fatalf("an agent without delegates delegating to researcher: %q, want %q", got, want)
	}
}
