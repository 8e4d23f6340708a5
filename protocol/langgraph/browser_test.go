package langgraph_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/browsertest"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/protocol/protocoltest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// pageState is what the page shows (testdata/browser/page.jsx).
type pageState struct {
	ThreadID  string   `json:"threadId"`
	IsLoading bool     `json:"isLoading"`
	Interrupt string   `json:"interrupt"`
	Messages  []string `json:"messages"`
	Error     string   `json:"error"`
}

// TestUseStreamBrowser runs a React page built on the SDK's useStream
// (testdata/browser, pinned with a lockfile, bundled by esbuild) in
// headless Chromium against Rein: submit and stream, an interrupt
// approved, stop (the run cancelled on the server), and a reload mid-run
// that rejoins the run (reconnectOnMount) with its text shown once; then a
// submit while busy with each multitask strategy the hook sends, checked
// both on the page and in the server's runs.
func TestUseStreamBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("installs npm packages and starts a browser")
	}
	required := os.Getenv("REIN_REQUIRE_NODE") != ""
	npm, err := exec.LookPath("npm")
	node, err2 := exec.LookPath("node")
	if err != nil || err2 != nil {
		if required {
			t.Fatal("node and npm are required (REIN_REQUIRE_NODE is set)")
		}
		t.Skip("node or npm is not on PATH")
	}
	browsertest.Require(t)
	dir, err := filepath.Abs("testdata/browser")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{npm, "ci", "--no-audit", "--no-fund"}, {node, "build.mjs"}} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	srv := reintest.NewServer(t, reintest.ServerOptions{
		Script: protocoltest.WriteScript(t),
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{langgraph.Mount(svc, langgraph.Options{})}
		},
	})
	target, _ := url.Parse(srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	mux := http.NewServeMux()
	mux.Handle("/langgraph/", proxy)
	mux.HandleFunc("GET /page.js", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, "dist", "page.js"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, filepath.Join(dir, "index.html")) })
	page := httptest.NewServer(mux)
	defer page.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, browsertest.Options(t.TempDir())...)
	defer acancel()
	b, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(b, chromedp.Navigate(page.URL+"/")); err != nil {
		t.Fatal(err)
	}
	state := func() pageState {
		raw, err := chromedp.Run(b, chromedp.Evaluate[string](`window.page ? JSON.stringify(window.page.state()) : ""`))
		if err != nil || raw == "" {
			return pageState{}
		}
		var s pageState
		_ = json.Unmarshal([]byte(raw), &s)
		return s
	}
	wait := func(what string, ok func(pageState) bool) pageState {
		t.Helper()
		for {
			s := state()
			if ok(s) {
				return s
			}
			select {
			case <-ctx.Done():
				if s.ThreadID != "" {
					runs, _ := srv.Service.ListRuns(context.Background(), rein.SessionKey{Owner: "local", ID: s.ThreadID})
					for _, r := range runs {
						t.Logf("run %s %q %s %s", r.ID, r.Input, r.Status, r.Reason)
					}
				}
				t.Fatalf("waiting for %s: %+v", what, s)
			case <-time.After(25 * time.Millisecond):
			}
		}
	}
	do := func(js string) {
		t.Helper()
		if _, err := chromedp.Run(b, chromedp.Evaluate[any](js+"; null")); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
	}
	last := func(s pageState) string {
		if len(s.Messages) == 0 {
			return ""
		}
		return s.Messages[len(s.Messages)-1]
	}
	const streamText = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	wait("the page", func(s pageState) bool { return s.Messages != nil })

	do(`window.page.submit("stream it")`)
	s := wait("the streamed reply", func(s pageState) bool { return !s.IsLoading && last(s) == "ai: "+streamText })
	if want := []string{"human: stream it", "ai: " + streamText}; !slices.Equal(s.Messages, want) {
		t.Fatalf("messages %q, want %q", s.Messages, want)
	}

	do(`window.page.submit("note the cake")`)
	wait("the interrupt", func(s pageState) bool { return !s.IsLoading && s.Interrupt == "write_note" })
	do(`window.page.approve()`)
	wait("the run after its approval", func(s pageState) bool {
		return !s.IsLoading && s.Interrupt == "" && strings.HasPrefix(last(s), "ai: note result: note saved")
	})

	do(`window.page.submit("long stop me")`)
	s = wait("the long run's text", func(s pageState) bool { return slices.Contains(s.Messages, "ai: sleeping for an hour") })
	key := rein.SessionKey{Owner: "local", ID: s.ThreadID}
	runs, err := srv.Service.ListRuns(ctx, key)
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs %v (%v)", runs, err)
	}
	long := runs[0].ID
	do(`window.page.stop()`)
	if out, err := srv.Service.WaitRun(ctx, key, long); err != nil || out.Status != rein.StatusCancelled {
		t.Fatalf("the stopped run ended %+v (%v), want CANCELLED", out, err)
	}
	wait("the stop", func(s pageState) bool { return !s.IsLoading })

	// A reload mid-run: the page mounts again on the thread and rejoins the
	// run from its first event; its text is shown once.
	do(`window.page.submit("stream after reload")`)
	wait("the run's start", func(s pageState) bool {
		return s.IsLoading && slices.Contains(s.Messages, "human: stream after reload")
	})
	if err := chromedp.Do(b, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	s = wait("the rejoined run's end", func(s pageState) bool { return !s.IsLoading && last(s) == "ai: "+streamText })
	if n := strings.Count(strings.Join(s.Messages, "\n"), "human: stream after reload"); n != 1 {
		t.Fatalf("the reloaded page shows the message %d times: %q", n, s.Messages)
	}
	if n := strings.Count(strings.Join(s.Messages, "\n")+"\n", "ai: "+streamText+"\n"); n != 2 {
		t.Fatalf("the reloaded page shows the streamed reply %d times (want 2: this run's and the first's): %q", n, s.Messages)
	}
	if s.Error != "" {
		t.Fatalf("the page shows an error: %s", s.Error)
	}

	// Submitting while busy, with each multitask strategy useStream sends.
	run := func(input string) *store.RunRecord {
		t.Helper()
		runs, err := srv.Service.ListRuns(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Input == input {
				return r
			}
		}
		return nil
	}
	ended := func(input string) sessions.RunOutcome {
		t.Helper()
		r := run(input)
		if r == nil {
			t.Fatalf("no run for %q", input)
		}
		out, err := srv.Service.WaitRun(ctx, key, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	streamed := "ai: " + streamText
	for _, c := range []struct {
		strategy string
		status   rein.RunStatus
		reason   rein.Reason
	}{
		// interrupt: the busy run is stopped cooperatively and ends
		// interrupted; rollback: it is cancelled and its turn dropped.
		{"interrupt", rein.StatusCompleted, rein.ReasonInterrupted},
		{"rollback", rein.StatusCancelled, rein.ReasonCancelled},
	} {
		busy, next := "long, then "+c.strategy, "stream after "+c.strategy
		do(`window.page.submit(` + strconv.Quote(busy) + `)`)
		wait("the busy run's text", func(s pageState) bool {
			return s.IsLoading && slices.Contains(s.Messages, "ai: sleeping for an hour") && slices.Contains(s.Messages, "human: "+busy)
		})
		do(`window.page.submit(` + strconv.Quote(next) + `, {multitaskStrategy: "` + c.strategy + `"})`)
		s = wait("the run after "+c.strategy, func(s pageState) bool {
			return !s.IsLoading && slices.Contains(s.Messages, "human: "+next) && last(s) == streamed
		})
		if out := ended(busy); out.Status != c.status || out.Reason != c.reason {
			t.Fatalf("%s: the busy run ended %s/%s, want %s/%s", c.strategy, out.Status, out.Reason, c.status, c.reason)
		}
		if out := ended(next); out.Status != rein.StatusCompleted {
			t.Fatalf("%s: the new run ended %s/%s", c.strategy, out.Status, out.Reason)
		}
		if s.Error != "" {
			t.Fatalf("%s: the page shows an error: %s", c.strategy, s.Error)
		}
		// A rolled-back turn leaves the thread's state, as in LangGraph.
		if rolled := slices.Contains(s.Messages, "human: "+busy); rolled == (c.strategy == "rollback") {
			t.Fatalf("%s: the busy run's message shown=%v: %q", c.strategy, rolled, s.Messages)
		}
	}

	// enqueue: useStream holds the second submit until the first run's
	// stream ends, then sends it; both run, in order, each shown once.
	do(`window.page.submit("stream first"); window.page.submit("stream second", {multitaskStrategy: "enqueue"})`)
	s = wait("both enqueued runs", func(s pageState) bool {
		return !s.IsLoading && slices.Contains(s.Messages, "human: stream second") && last(s) == streamed
	})
	first, second := run("stream first"), run("stream second")
	if first == nil || second == nil || first.Status != rein.StatusCompleted || second.Status != rein.StatusCompleted ||
		second.StartedAt.Before(first.EndedAt) {
		t.Fatalf("enqueued runs: %+v, %+v", first, second)
	}
	tail := s.Messages[len(s.Messages)-4:]
	if want := []string{"human: stream first", streamed, "human: stream second", streamed}; !slices.Equal(tail, want) {
		t.Fatalf("enqueued runs shown as %q, want %q", tail, want)
	}

	// reject: another client's run holds the thread; the page's submit is
	// refused with the SDK's error, and no run is created for it.
	other, err := srv.Service.SendMessage(ctx, key, sessions.MessageRequest{Text: "long, from elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	do(`window.page.submit("stream rejected", {multitaskStrategy: "reject"})`)
	s = wait("the refusal", func(s pageState) bool { return !s.IsLoading && s.Error != "" })
	if r := run("stream rejected"); r != nil {
		t.Fatalf("a rejected submit created run %+v", r)
	}
	if res, err := srv.Service.Interrupt(ctx, key, sessions.InterruptRequest{RunID: &other.RunID}); err != nil || !res.Accepted {
		t.Fatalf("stopping the other client's run: %+v (%v)", res, err)
	}
}
