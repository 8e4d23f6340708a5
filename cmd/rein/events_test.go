package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// finishedSession makes a session with one completed run and returns it
// with its log.
func finishedSession(t *testing.T, s *testServer) (string, []rein.Event) {
	t.Helper()
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.SendMessage(ctx, sess.ID, client.Message{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, sess.ID, isEvent(rein.EventRunCompleted, r.RunID))
	evs, _, err := c.ListEvents(ctx, sess.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID, evs
}

func TestEventsPrintsTheLog(t *testing.T) {
	s := newTestServer(t, nil)
	sid, evs := finishedSession(t, s)
	code, out, errs := run(t, "", nil, "events", "--server", s.url, "--session", sid)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("%d lines for %d events:\n%s", len(lines), len(evs), out)
	}
	for i, l := range lines {
		if want := (eventText{}).logLine(evs[i]); l != want {
			t.Fatalf("line %d = %q, want %q", i, l, want)
		}
	}
	if !strings.Contains(out, `agent.message `+evs[0].RunID+` reason="stop" text="echo: hello"`) {
		t.Fatalf("no readable agent.message line in:\n%s", out)
	}

	// --after, --json, and the session as an argument.
	code, out, errs = run(t, "", nil, "events", "--server", s.url, "--after", "2", "--json", sid)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(evs)-2 {
		t.Fatalf("%d lines after 2 of %d events", len(lines), len(evs))
	}
	for i, l := range lines {
		want, _ := json.Marshal(evs[i+2])
		if l != string(want) {
			t.Fatalf("line %d = %s, want %s", i, l, want)
		}
	}
}

func TestEventsPagesThroughLongLogs(t *testing.T) {
	s := newTestServer(t, nil)
	c := s.client("")
	ctx := ctxT(t)
	sess, err := c.CreateSession(ctx, client.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// 1,100 events: more than one page of 1,000.
	for i := range 11 {
		batch := make([]client.EventInput, 100)
		for j := range batch {
			batch[j] = client.EventInput{Type: rein.EventSystemMessage, Payload: rein.SystemMessagePayload{Text: fmt.Sprint(i*100 + j)}}
		}
		if _, err := c.PostEvents(ctx, sess.ID, batch); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := run(t, "", nil, "events", "--server", s.url, "--session", sess.ID)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1100 || !strings.HasPrefix(lines[1099], "#1100 ") || !strings.HasSuffix(lines[1099], `text="1099"`) {
		t.Fatalf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

func TestEventsFollow(t *testing.T) {
	s := newTestServer(t, nil)
	sid, evs := finishedSession(t, s)
	// Flags may follow the session.
	cmd := start(t, nil, "events", "--server", s.url, sid, "--follow", "--after", fmt.Sprint(len(evs)))

	r, err := s.client("").SendMessage(ctxT(t), sid, client.Message{Text: "live"})
	if err != nil {
		t.Fatal(err)
	}
	out := cmd.out.waitFor(t, "session.run_completed "+r.RunID)
	if strings.Contains(out, "#1 ") || !strings.HasPrefix(out, fmt.Sprintf("#%d ", len(evs)+1)) {
		t.Fatalf("--after was not honoured:\n%s", out)
	}
	if !strings.Contains(out, `text="echo: live"`) {
		t.Fatalf("output:\n%s", out)
	}
	// Ctrl-C ends a follow normally.
	cmd.ctrlC()
	if code := cmd.exit(); code != 0 {
		t.Fatalf("exit %d after Ctrl-C; stderr:\n%s", code, cmd.err)
	}
}

func TestEventsErrors(t *testing.T) {
	s := newTestServer(t, map[string]string{"tok": "alice"})
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--server", s.url}, exitUsage, "give the session"},
		{[]string{"--server", s.url, "--session", "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"--server", s.url, "a", "b"}, exitUsage, `unexpected argument "b"`},
		{[]string{"--server", s.url, "--session", "a", "--after", "-1"}, exitUsage, `--after "-1": must be a seq ≥ 0`},
		{[]string{"--server", s.url, "--session", "a", "--after", "x"}, exitUsage, `--after "x": not a whole number`},
		{[]string{"--server", s.url, "--token", "tok", "--session", "ses_nope"}, exitFailed, "session ses_nope not found"},
		{[]string{"--server", s.url, "--token", "tok", "--session", "ses_nope", "--follow"}, exitFailed, "session ses_nope not found"},
		{[]string{"--server", s.url, "--session", "ses_nope", "--follow"}, exitFailed, "token"},
	}
	for _, tc := range tests {
		code, _, errs := run(t, "", nil, append([]string{"events"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("rein events %q: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
