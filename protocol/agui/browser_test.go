package agui_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/agui"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
)

// browserScript: a reply that streams a step and then sleeps in a tool
// for an hour — a run that is still going, deterministically, whenever the
// page reloads or its Stop is pressed.
const browserScript = `rules:
  - match: "^hold"
    steps:
      - text: "Working on it; this takes a long while, so please hold on."
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

// TestBrowserAGUI drives an AG-UI page (testdata/browser: @ag-ui/client at
// a pinned version, built from the committed lockfile) in headless
// Chromium: HttpAgent runs a message whose text streams; the page reloaded
// mid-run rejoins the thread's stream (decoded by the client's own SSE
// decoder) and shows the text once; its Stop — the cancel route, by the
// runId the page chose — ends exactly that run, and the rejoined stream
// shows it cancelled.
func TestBrowserAGUI(t *testing.T) {
	page := protocoltest.BuildPage(t, "testdata/browser")
	srv := protocoltest.NewPageServer(t, browserScript, page, func(svc *sessions.Service) []protocol.Mount {
		return []protocol.Mount{agui.Mount(svc, agui.Options{})}
	})
	const thread = "browser-thread"
	key := rein.SessionKey{Owner: "alice", ID: thread}
	ready := `window.reinPageReady`
	p := protocoltest.OpenPage(t, srv.URL+"/page/?thread="+thread+"&token=tok-alice", ready)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sameText := func(when string) {
		t.Helper()
		_, want := protocoltest.StreamedText(ctx, t, srv.Service, key)
		if got := p.Text(".msg.assistant"); got != want {
			t.Fatalf("%s: the page shows %q, the run streamed %q", when, got, want)
		}
		if n := protocoltest.Eval[int](p, `document.querySelectorAll(".msg.assistant").length`); n != 1 {
			t.Fatalf("%s: %d assistant messages shown, want 1", when, n)
		}
	}

	p.Type("#input", "hold the line")
	p.WaitJS(`document.querySelector(".msg.assistant")?.textContent.includes("please hold on")`, "the streamed text")
	protocoltest.WaitEvent(ctx, t, srv.Service, key, func(e rein.Event) bool {
		return e.Type == rein.EventToolUse && strings.Contains(string(e.Payload), `"sleep"`)
	})
	run, _ := protocoltest.StreamedText(ctx, t, srv.Service, key)
	sameText("while the run sleeps")

	// Reload mid-run: the page rejoins the thread's stream.
	p.Reload(ready)
	p.WaitJS(`document.querySelector("#status").dataset.status === "running" && document.querySelector(".msg.assistant")?.textContent.includes("please hold on")`, "the rejoined run")
	sameText("after the reload")
	if rec, err := srv.Service.GetRun(ctx, key, run); err != nil || rec.Status != rein.StatusRunning {
		t.Fatalf("the run after the reload: %+v, %v; want it RUNNING", rec, err)
	}

	p.Click("#stop")
	p.WaitJS(`document.querySelector("#status").dataset.status === "cancelled"`, "the rejoined stream to show the run cancelled")
	out, err := srv.Service.WaitRun(ctx, key, run)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != rein.StatusCancelled || out.Reason != rein.ReasonCancelled {
		t.Fatalf("the stopped run ended %s/%s, want CANCELLED/cancelled", out.Status, out.Reason)
	}
	sameText("after Stop")
	if rejoined := srv.Streams(); rejoined != 1 {
		t.Fatalf("%d thread streams answered 200, want the one the reloaded page opened", rejoined)
	}
}
