package aisdk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/aisdk"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// browserScript: a reply that streams a step, asks to write a note (an
// approval), then streams a second step and sleeps in a tool for an hour —
// a run that is still going, deterministically, whenever the page reloads
// or its Stop is pressed.
const browserScript = `rules:
  - match: "^approve"
    steps:
      - text: "Let me write that down for you, one small piece at a time."
        chunks: 12
        chunk_delay: 10ms
        tool_calls:
          - name: write_note
            input: {text: "{{.Input}}"}
      - text: "Saved. Now thinking about it for a long while, please hold on."
        chunks: 12
        chunk_delay: 10ms
        tool_calls:
          - name: sleep
            input: {seconds: 3600}
      - text: "never reached"
  - match: ""
    steps:
      - text: "echo: {{.Input}}"
`

// TestBrowserUseChat drives the useChat page of docs/protocols.md
// (testdata/browser: @ai-sdk/react and ai at pinned versions, built from
// the committed lockfile) in headless Chromium: a message streams; the
// approval it asks for survives a reload (resume: true replays the run from
// its start, no text twice) and is answered by addToolApprovalResponse,
// continuing the same run; a reload while the run is in its second step
// resumes it again; the page's Stop (the stop route) ends exactly that
// resumed run; and the text the page shows is, every time, the run's
// deltas in the log, each once.
func TestBrowserUseChat(t *testing.T) {
	page := protocoltest.BuildPage(t, "testdata/browser")
	srv := protocoltest.NewPageServer(t, browserScript, page, func(svc *sessions.Service) []protocol.Mount {
		return []protocol.Mount{aisdk.Mount(svc, aisdk.Options{})}
	})
	const chat = "browser-chat"
	key := rein.SessionKey{Owner: "alice", ID: chat}
	ready := `window.reinPageReady && document.querySelector("#status")`
	p := protocoltest.OpenPage(t, srv.URL+"/page/?chat="+chat+"&token=tok-alice", ready)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// shown is what the page shows of the assistant's reply; logged is the
	// run's streamed text in the log, step by step, each delta once.
	shown := func() string { return p.Text(".msg.assistant .text") }
	logged := func() (run, text string) { return protocoltest.StreamedText(ctx, t, srv.Service, key) }
	sameText := func(when string) {
		t.Helper()
		_, want := logged()
		if got := shown(); got != want {
			t.Fatalf("%s: the page shows %q, the run streamed %q", when, got, want)
		}
		if n := protocoltest.Eval[int](p, `document.querySelectorAll(".msg.assistant").length`); n != 1 {
			t.Fatalf("%s: %d assistant messages shown, want 1", when, n)
		}
	}

	p.Type("#input", "approve the plan")
	p.WaitJS(`document.querySelector("#allow")`, "the approval to be asked")
	sameText("asking for approval")
	if !strings.HasPrefix(shown(), "Let me write that down") {
		t.Fatalf("the page shows %q", shown())
	}

	// Reload while the run waits: the resumed stream rebuilds the reply.
	p.Reload(ready)
	p.WaitJS(`document.querySelector("#allow")`, "the approval to be asked again after the reload")
	sameText("after the reload")

	p.Click("#allow")
	p.WaitJS(`document.querySelector(".msg.assistant")?.textContent.includes("please hold on")`, "the second step's text")
	run, _ := logged()
	protocoltest.WaitEvent(ctx, t, srv.Service, key, func(e rein.Event) bool {
		return e.Type == rein.EventToolUse && strings.Contains(string(e.Payload), `"sleep"`)
	})
	if rec, err := srv.Service.GetRun(ctx, key, run); err != nil || rec.Status != rein.StatusRunning {
		t.Fatalf("the run after the approval: %+v, %v; want it RUNNING in its second step", rec, err)
	}
	sameText("after the approval")

	// Reload mid-run: the stream is resumed again, then the page's Stop
	// ends exactly this run, through the stop route.
	p.Reload(ready)
	p.WaitJS(`document.querySelector("#stop") && document.querySelector(".msg.assistant")?.textContent.includes("please hold on")`, "the resumed run with its Stop")
	sameText("after the second reload")
	p.Click("#stop")
	p.WaitJS(`document.querySelector("#status").dataset.status === "ready"`, "the page to be ready after Stop")
	out, err := srv.Service.WaitRun(ctx, key, run)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != rein.StatusCompleted || out.Reason != rein.ReasonInterrupted {
		t.Fatalf("the stopped run ended %s/%s, want COMPLETED/interrupted", out.Status, out.Reason)
	}
	sameText("after Stop")
	if resumed := srv.Streams(); resumed < 2 {
		t.Fatalf("%d resumed streams answered 200, want the page to have resumed the run after each of its 2 reloads", resumed)
	}
}
