// Package console_test drives the web console (server/web) in a real
// headless Chromium against the real runtime: the sessions service with the
// scripted model of testdata/script.yaml, behind the HTTP server, reached
// through a small loopback reverse proxy the tests control. The proxy keeps
// the page's base URL fixed while the backend behind it changes (a server
// restart), and it can cut or refuse the page's event streams (a dropped
// connection).
//
// The tests need Debian's chromium at /usr/bin/chromium. Without it they
// skip, except under CI (CI=true), where they fail: .ci/run installs it.
// Each scenario saves a screenshot under console/screenshots/ (git-ignored).
package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"go.uber.org/goleak"

	"github.com/reinhq/rein/internal/browsertest"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/web"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/subagent"
)

const (
	script = "testdata/script.yaml"
	// waitFor bounds every wait for the page to show something.
	waitFor = 10 * time.Second
)

// ------------------------------------------------------------- the browser

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	// With the browser gone, nothing a test started (servers, proxies,
	// streams, chromedp's readers) may still run.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// chromium returns the context of the one browser the tests share (each
// page is a tab of it), starting it on first use.
func chromium(t *testing.T) context.Context {
	t.Helper()
	browsertest.Require(t)
	browser.once.Do(func() {
		dir, err := os.MkdirTemp("", "rein-console-chromium-")
		if err != nil {
			browser.err = err
			return
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), browsertest.Options(dir)...)
		bctx, bcancel := chromedp.NewContext(actx)
		browser.ctx = bctx
		browser.cancel = func() {
			bcancel()
			acancel()
			_ = os.RemoveAll(dir)
		}
		browser.err = chromedp.Do(bctx) // starts the browser
	})
	if browser.err != nil {
		t.Fatalf("start %s: %v", browsertest.Path, browser.err)
	}
	return browser.ctx
}

// ---------------------------------------------------------------- the page

// page is one tab showing the console at base.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// openPage opens a tab on the console at base (the proxy's URL), at
// width×height CSS pixels.
func openPage(t *testing.T, base string, width, height int64) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(chromium(t))
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.checkConsole)
	p.do(chromedp.Navigate(base + "/"))
	p.waitJS(`document.readyState === "complete" && !!window.reinConsole`, "the console to load")
	return p
}

// checkConsole fails the test on an uncaught exception or a console.error
// of the page. Network errors the scenarios cause on purpose (a refused
// stream, a 401) are browser log entries, and only logged.
func (p *page) checkConsole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.console {
		switch {
		case m.IsException(), m.Type == chromedp.ConsoleError && m.Source == "":
			p.t.Errorf("the page reported: %s", m)
		case m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning:
			p.t.Logf("browser log: %s", m)
		}
	}
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitFor)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.fail("browser action: %v", err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitFor)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until the expression is truthy.
func (p *page) waitJS(expr, what string) {
	p.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, waitFor)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.fail("waited %v for %s (%s); last error: %v", waitFor, what, expr, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitText waits until the text of the first element matching sel
// contains want.
func (p *page) waitText(sel, want string) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`(document.querySelector(%s)?.textContent || "").includes(%s)`, js(sel), js(want)),
		fmt.Sprintf("%q in %s", want, sel))
}

func (p *page) text(sel string) string {
	p.t.Helper()
	return eval[string](p, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ""`, js(sel)))
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// typeIn focuses the field, replaces its text and types keys (kb.Enter
// and the like included).
func (p *page) typeIn(sel, keys string) {
	p.t.Helper()
	// (SetValue cannot set "": chromedp drops an empty string argument.)
	eval[chromedp.Void](p, fmt.Sprintf(`(() => { const n = document.querySelector(%s); n.value = ""; n.dispatchEvent(new Event("input", {bubbles: true})); n.focus(); })()`, js(sel)))
	enter := strings.HasSuffix(keys, kb.Enter)
	keys = strings.TrimSuffix(keys, kb.Enter)
	if keys != "" {
		p.do(chromedp.SendKeys(chromedp.CSS(sel), keys))
	}
	if enter {
		p.pressEnter(0)
	}
}

// pressEnter presses Enter in the focused element as a keyboard does: one
// keydown that carries the text (so a handler's preventDefault stops the
// newline), then a keyup. (chromedp's kb.Enter sends the text as a
// separate char event that preventDefault on keydown cannot stop.)
func (p *page) pressEnter(mods chromedp.Modifier) {
	p.t.Helper()
	p.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		down := input.DispatchKeyEventParams{
			Type: input.DispatchKeyEventTypeKeyDown, Key: "Enter", Code: "Enter", Text: "\r", UnmodifiedText: "\r",
			WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13, Modifiers: int64(mods),
		}
		if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, down); err != nil {
			return err
		}
		up := down
		up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
		_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, up)
		return err
	}))
}

func (p *page) reload() {
	p.t.Helper()
	p.do(chromedp.Reload())
	p.waitJS(`document.readyState === "complete" && !!window.reinConsole`, "the console to load again")
}

// shot saves a screenshot of the page as console/screenshots/NAME.png.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitFor)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.MkdirAll("screenshots", 0o755); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join("screenshots", name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
	}
}

// fail saves a screenshot of what the page showed, and fails.
func (p *page) fail(format string, args ...any) {
	p.t.Helper()
	p.shot(strings.ReplaceAll(p.t.Name(), "/", "_") + "-FAILED")
	p.t.Fatalf(format, args...)
}

func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ------------------------------------------------------- session helpers

// createSession creates a session from the form and waits until it is open.
func (p *page) createSession(title string) string {
	p.t.Helper()
	p.typeIn("#new-agent", "default")
	p.typeIn("#new-title", title)
	p.click("#create-session")
	p.waitJS(`window.reinConsole.sessionId && window.reinConsole.connected`, "the new session to open, streaming")
	return eval[string](p, `window.reinConsole.sessionId`)
}

// send types a message and presses Enter.
func (p *page) send(text string) {
	p.t.Helper()
	p.typeIn("#message", text+kb.Enter)
	p.waitJS(`document.querySelector("#message").value === ""`, "the composer to clear after sending")
}

// runIDs lists the run blocks in the order shown.
func (p *page) runIDs() []string {
	p.t.Helper()
	return eval[[]string](p, `[...document.querySelectorAll("#chat .run")].map(n => n.dataset.runId)`)
}

// waitRuns waits until n run blocks are shown and returns their ids.
func (p *page) waitRuns(n int) []string {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`document.querySelectorAll("#chat .run").length >= %d`, n), fmt.Sprintf("%d run blocks", n))
	return p.runIDs()
}

func runSel(runID string) string { return fmt.Sprintf(`#chat .run[data-run-id=%s]`, js(runID)) }

// waitStatus waits until the run block's status badge reads want.
func (p *page) waitStatus(runID, want string) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`document.querySelector(%s)?.textContent === %s`, js(runSel(runID)+" .badge.status"), js(want)),
		fmt.Sprintf("run %s to be %q (now %q)", runID, want, p.status(runID)))
}

// waitRunsTable waits until the runs table lists n runs.
func (p *page) waitRunsTable(n int) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`document.querySelectorAll("#runs-table tbody tr").length === %d`, n), fmt.Sprintf("%d rows in the runs table", n))
}

func (p *page) status(runID string) string {
	return eval[string](p, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ""`, js(runSel(runID)+" .badge.status")))
}

// ------------------------------------------------------------- the server

// proxy is a loopback reverse proxy in front of the backend under test:
// the page's base URL stays the proxy's while the backend changes. It can
// cut the event streams it carries and refuse new ones.
type proxy struct {
	url string

	mu      sync.Mutex
	target  *url.URL
	streams map[int]context.CancelFunc
	next    int
	refuse  bool
	// losePosts: a POST reaches the backend, which applies it, but its
	// answer never reaches the page (the connection is closed instead).
	losePosts bool
	requests  []*http.Request // clones, for what the page sent
}

func newProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	p := &proxy{streams: map[int]context.CancelFunc{}}
	p.switchTo(backend)
	quiet := log.New(io.Discard, "", 0)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream := strings.HasSuffix(r.URL.Path, "/events/stream")
		p.mu.Lock()
		target, refuse, lose := p.target, p.refuse, p.losePosts && r.Method == http.MethodPost
		p.requests = append(p.requests, r.Clone(context.Background()))
		id := p.next
		p.next++
		ctx, cancel := context.WithCancel(r.Context())
		if stream {
			p.streams[id] = cancel
		}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.streams, id)
			p.mu.Unlock()
			cancel()
		}()
		if stream && refuse {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"the test's proxy refuses event streams"}}`)
			return
		}
		rp := &httputil.ReverseProxy{
			Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
			FlushInterval: -1,
			ErrorLog:      quiet,
		}
		if lose {
			errLost := errors.New("the answer is lost")
			rp.ModifyResponse = func(*http.Response) error { return errLost }
			rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
				if conn, _, herr := http.NewResponseController(w).Hijack(); herr == nil {
					_ = conn.Close() // a network failure, as the browser sees it
				}
			}
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
	}))
	ts.Config.ErrorLog = quiet
	ts.Start()
	t.Cleanup(func() {
		p.cut()
		ts.Close()
	})
	p.url = ts.URL
	return p
}

func (p *proxy) switchTo(backend string) {
	u, err := url.Parse(backend)
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
}

// cut ends every event stream the proxy is carrying, mid-body.
func (p *proxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.streams {
		c()
	}
	return len(p.streams)
}

func (p *proxy) losePostAnswers(on bool) {
	p.mu.Lock()
	p.losePosts = on
	p.mu.Unlock()
}

func (p *proxy) refuseStreams(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// streamRequests returns the Last-Event-ID header of each stream request.
func (p *proxy) streamRequests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, r := range p.requests {
		if strings.HasSuffix(r.URL.Path, "/events/stream") {
			ids = append(ids, r.Header.Get("Last-Event-ID"))
		}
	}
	return ids
}

func (p *proxy) allRequests() []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*http.Request(nil), p.requests...)
}

// env is a real server behind a proxy, and a page on the proxy.
type env struct {
	srv   *reintest.Server
	proxy *proxy
	page  *page
}

type envOptions struct {
	tokens        map[string]string
	width, height int64
	// agents, when set, are the configured agents' names (each running
	// the script).
	agents []string
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	chromium(t) // skip (or fail) first, before starting anything
	srv := reintest.NewServer(t, reintest.ServerOptions{Script: script, Tokens: o.tokens, Configure: func(c *sessions.Config) {
		if len(o.agents) > 0 {
			c.Agents = map[string]*sessions.Agent{}
			for _, name := range o.agents {
				c.Agents[name] = &sessions.Agent{Loop: c.Agent}
			}
		}
	}})
	px := newProxy(t, srv.URL)
	if o.width == 0 {
		o.width, o.height = 1280, 900
	}
	return &env{srv: srv, proxy: px, page: openPage(t, px.url, o.width, o.height)}
}

// apiGet reads a route of the server under test directly (not through the
// page), for checking what the page did.
func apiGet(t *testing.T, base, token, path string, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

type runJSON struct {
	RunID  string  `json:"run_id"`
	Status string  `json:"status"`
	Reason *string `json:"reason"`
}

func runsOf(t *testing.T, base, token, sid string) map[string]runJSON {
	t.Helper()
	var body struct {
		Runs []runJSON `json:"runs"`
	}
	apiGet(t, base, token, "/api/sessions/"+sid+"/runs", &body)
	m := map[string]runJSON{}
	for _, r := range body.Runs {
		m[r.RunID] = r
	}
	return m
}

// ---------------------------------------------------------------- scenarios

// TestSendAndStream: the console lists and creates sessions (offering the
// configured agents; an unknown agent shows the server's 400 message),
// Enter sends, the reply streams in delta by delta, the run ends completed
// with its timeline and a row in the runs table, and a reload rebuilds
// exactly the same conversation.
func TestSendAndStream(t *testing.T) {
	e := newEnv(t, envOptions{agents: []string{"researcher", "default"}})
	p := e.page

	p.waitJS(`[...document.querySelectorAll("#agent-options option")].map((o) => o.value).join(",") === "default,researcher"`,
		"the configured agents offered, default first")
	p.waitText("#agent-hint", "Configured: default, researcher")

	p.typeIn("#new-agent", "nope")
	p.click("#create-session")
	p.waitText("#new-error", `unknown agent "nope"`)

	sid := p.createSession("streaming")
	p.waitText("#session-title", "streaming")
	p.waitJS(fmt.Sprintf(`document.querySelector('#session-list [data-session-id=%s] a[aria-current="page"]')`, js(sid)), "the new session, current, in the list")

	p.send("stream it please")
	runs := p.waitRuns(1)
	run := runs[0]
	step := runSel(run) + " .step .reply-text"
	want := "The quick brown fox jumps over the lazy dog; 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ."
	// Part of the reply shows while the rest is still coming.
	p.waitJS(fmt.Sprintf(`(() => { const t = document.querySelector(%s)?.textContent || ""; return t.length > 0 && t.length < %d; })()`, js(step), len(want)),
		"a partial reply")
	if got := p.status(run); got != "running" {
		t.Errorf("status while streaming: %q, want running", got)
	}
	p.shot("send-streaming")
	p.waitStatus(run, "done")
	if got := p.text(step); got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
	p.waitText(runSel(run)+" .timeline", "started")
	p.waitText(runSel(run)+" .timeline", "done after")
	p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(run)), "done")
	p.waitText(runSel(run)+" .final", "tokens:")
	p.waitText(runSel(run)+" .user-msg", "stream it please")

	// Shift+Enter is a new line, not a send.
	p.typeIn("#message", "two")
	p.pressEnter(chromedp.ModifierShift)
	p.do(chromedp.SendKeys(chromedp.CSS("#message"), "lines"))
	if v := eval[string](p, `document.querySelector("#message").value`); v != "two\nlines" {
		t.Fatalf("after Shift+Enter the composer holds %q", v)
	}
	p.typeIn("#message", "")

	before := p.text("#chat")
	p.reload()
	p.waitJS(`window.reinConsole.connected`, "the stream after the reload")
	p.waitStatus(run, "done")
	if after := p.text("#chat"); after != before {
		t.Fatalf("the reload shows another conversation:\nbefore %q\nafter  %q", before, after)
	}
	p.shot("send-completed")
}

// TestStopExactRun: A runs, B and C wait behind it. Stop on B's block
// cancels B only; Stop on A's block stops A only, and C starts; the
// cooperative Interrupt on C ends it interrupted.
func TestStopExactRun(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	sid := p.createSession("stops")

	p.send("long A")
	a := p.waitRuns(1)[0]
	p.waitStatus(a, "running")
	p.waitText("#send", "Send after current") // busy: Enter queues
	p.send("long B")
	p.send("long C")
	ids := p.waitRuns(3)
	b, c := ids[1], ids[2]
	p.waitStatus(b, "queued · 1st")
	p.waitStatus(c, "queued · 2nd")
	p.shot("stop-queued")

	p.click(runSel(b) + " button.stop")
	p.waitStatus(b, "cancelled by you")
	if s := p.status(a); s != "running" {
		t.Fatalf("after stopping B, A is %q", s)
	}
	if s := p.status(c); s != "queued · 1st" {
		t.Fatalf("after stopping B, C is %q", s)
	}
	runs := runsOf(t, e.srv.URL, "", sid)
	if runs[a].Status != "RUNNING" || runs[b].Status != "CANCELLED" || runs[c].Status != "QUEUED" {
		t.Fatalf("after stopping B the server has A %s, B %s, C %s", runs[a].Status, runs[b].Status, runs[c].Status)
	}

	p.click(runSel(a) + " button.stop")
	p.waitStatus(a, "stopped by you")
	p.waitStatus(c, "running")
	if s := p.status(b); s != "cancelled by you" {
		t.Fatalf("B became %q", s)
	}

	p.waitText(runSel(c)+" .tool", "sleep")
	p.click(runSel(c) + " button.interrupt")
	p.waitStatus(c, "interrupted by you")
	runs = runsOf(t, e.srv.URL, "", sid)
	if r := runs[c]; r.Status != "COMPLETED" || r.Reason == nil || *r.Reason != "interrupted" {
		t.Fatalf("C on the server: %+v", r)
	}
	if r := runs[a]; r.Status != "CANCELLED" {
		t.Fatalf("A on the server: %+v", r)
	}
	p.waitJS(`!document.querySelector("#chat .run:not(.ended) button.stop")`, "no Stop button left on ended runs")
	p.waitRunsTable(3)
	p.waitText("#session-state", "idle")
	p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(b)), "cancelled by you")
	p.shot("stop-done")
}

// TestRollbackFromMenu: "Replace" from the send menu rolls back the running
// run (its block says so) and the new message runs without its turn.
func TestRollbackFromMenu(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("rollback")
	p.send("long mistaken")
	a := p.waitRuns(1)[0]
	p.waitStatus(a, "running")

	p.typeIn("#message", "turns now")
	p.click("#send-menu-button")
	p.waitJS(`!document.querySelector("#send-menu").hidden`, "the send menu to open")
	p.shot("rollback-menu")
	p.click(`#send-menu [data-when="rollback"]`)
	ids := p.waitRuns(2)
	p.waitStatus(a, "rolled back")
	p.waitStatus(ids[1], "done")
	// Only the new message's turn reached the model.
	p.waitText(runSel(ids[1])+" .reply-text", "turns=[1]")

	// "Interrupt and send": the running run wraps up (interrupted, its turn
	// kept) and the new message runs next.
	p.send("long B")
	b := p.waitRuns(3)[2]
	p.waitText(runSel(b)+" .tool", "sleep")
	p.typeIn("#message", "turns again")
	p.click("#send-menu-button")
	p.click(`#send-menu [data-when="interrupt"]`)
	ids = p.waitRuns(4)
	p.waitStatus(b, "interrupted by you")
	p.waitStatus(ids[3], "done")
	p.waitText(runSel(ids[3])+" .reply-text", "turns=[3]")
	p.waitRunsTable(4)
	p.shot("rollback-done")
}

// TestNoteSeenInStep: a note to the running agent shows queued, then "seen
// in step 2" once the run's next step has read it.
func TestNoteSeenInStep(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("notes")
	p.send("nap for a moment")
	r := p.waitRuns(1)[0]
	p.waitText(runSel(r)+" .tool", "sleep")

	p.typeIn("#note", "use metric units"+kb.Enter)
	p.waitText("#chat .flow.note", "use metric units")
	p.waitText("#chat .flow.note .badge", "queued")
	p.shot("note-queued")
	p.waitText("#chat .flow.note .badge", "seen in step 2")
	p.waitStatus(r, "done")
	p.waitText(runSel(r), "hints=[use metric units]")
	p.waitText(runSel(r)+" .run-notes", "in step 2")
	p.shot("note-seen")
}

// TestApproveAndDeny: a call that needs confirmation shows a card; Allow
// runs it; Deny with a message gives the model that message.
func TestApproveAndDeny(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("approvals")

	p.send("note buy milk")
	r1 := p.waitRuns(1)[0]
	p.waitJS(`document.querySelector("#approvals:not([hidden]) .approval")`, "an approval card")
	p.waitText("#approvals .approval", "write_note")
	p.waitText("#approvals .approval", "note buy milk")
	p.waitText(runSel(r1)+" .tool", "awaiting approval")
	p.shot("approval-card")
	p.click("#approvals .approval button.allow")
	p.waitJS(`!document.querySelector("#approvals .approval")`, "the card to go")
	p.waitStatus(r1, "done")
	p.waitText(runSel(r1), "note result:")
	p.waitText(runSel(r1)+" .tool", "done")

	p.send("note sell milk")
	r2 := p.waitRuns(2)[1]
	p.waitJS(`document.querySelector("#approvals .approval")`, "a second card")
	p.typeIn("#approvals .approval .deny-message", "read-only please")
	p.click("#approvals .approval button.deny")
	p.waitJS(`!document.querySelector("#approvals .approval")`, "the card to go")
	p.waitStatus(r2, "done")
	p.waitText(runSel(r2)+" .final, "+runSel(r2)+" .step.is-final", "read-only please")
	p.waitText(runSel(r2)+" .tool", "denied")
	p.waitRunsTable(2)
	p.shot("approval-denied")
}

// TestApprovalAcrossRestart: a call is pending when the server shuts down;
// a new server opens the same SQLite file behind the same URL; after a
// reload the card is there, and allowing it finishes the run.
func TestApprovalAcrossRestart(t *testing.T) {
	chromium(t)
	path := filepath.Join(t.TempDir(), "rein.db")
	workspace := t.TempDir()

	st1, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url1, stop1 := serveGracefully(t, st1, workspace)
	px := newProxy(t, url1)
	p := openPage(t, px.url, 1280, 900)
	sid := p.createSession("restart")
	p.send("note across a restart")
	r := p.waitRuns(1)[0]
	p.waitJS(`document.querySelector("#approvals .approval")`, "an approval card")

	// SIGTERM-like shutdown: the waiting run stays waiting in the store.
	stop1()
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := reintest.NewServer(t, reintest.ServerOptions{Script: script, Store: st2, Configure: func(c *sessions.Config) { c.Workspace = workspace }})
	px.switchTo(srv2.URL)

	p.reload()
	p.waitJS(fmt.Sprintf(`window.reinConsole.sessionId === %s && window.reinConsole.connected`, js(sid)), "the session after the reload")
	p.waitJS(`document.querySelector("#approvals .approval")`, "the pending card after the restart")
	p.waitText("#approvals .approval", "note across a restart")
	p.shot("restart-card")
	p.click("#approvals .approval button.allow")
	p.waitStatus(r, "done")
	p.waitText(runSel(r), "note result:")
	notes, err := os.ReadFile(filepath.Join(workspace, "local", sid, "notes.md"))
	if err != nil || strings.Count(string(notes), "note across a restart") != 1 {
		t.Fatalf("the note was written %q (%v), want once", notes, err)
	}
}

// serveGracefully runs the real server on st with Serve, as `rein serve`
// does; stop is its graceful shutdown (what SIGTERM does).
func serveGracefully(t *testing.T, st store.Store, workspace string) (string, func()) {
	t.Helper()
	metrics, err := server.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, _, err := reintest.ServiceWithSubagents(script, st, func(c *sessions.Config) {
		c.Workspace, c.Observer = workspace, metrics
	}, subagent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Service: svc, Metrics: metrics, DrainTimeout: 2 * time.Second, ShutdownTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	stop := sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return after its shutdown")
		}
	})
	t.Cleanup(stop)
	return "http://" + ln.Addr().String(), stop
}

// TestStreamDropRecovers: the proxy cuts the page's event stream in the
// middle of a streamed reply and refuses new streams for a while; the page
// says it is disconnected and retrying, then resumes with Last-Event-ID and
// shows the reply exactly once: no duplicate, no gap.
func TestStreamDropRecovers(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("drop")
	p.send("stream through a cut")
	r := p.waitRuns(1)[0]
	step := runSel(r) + " .step .reply-text"
	p.waitJS(fmt.Sprintf(`(document.querySelector(%s)?.textContent || "").length >= 5`, js(step)), "the reply to start")

	e.proxy.refuseStreams(true)
	if n := e.proxy.cut(); n == 0 {
		t.Fatal("the proxy carried no event stream to cut")
	}
	p.waitText("#stream-state", "disconnected, retrying")
	cutAt := p.text(step)
	p.shot("drop-disconnected")
	time.Sleep(800 * time.Millisecond) // the run goes on meanwhile
	e.proxy.refuseStreams(false)

	p.waitStatus(r, "done")
	p.waitText("#stream-state", "live")
	want := "The quick brown fox jumps over the lazy dog; 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ."
	if got := p.text(step); got != want {
		t.Fatalf("after the reconnect the reply reads %q, want %q (cut at %q)", got, want, cutAt)
	}
	if n := eval[int](p, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(runSel(r)+" .step"))); n != 1 {
		t.Fatalf("%d steps shown, want 1", n)
	}
	resumed := false
	for _, id := range e.proxy.streamRequests()[1:] {
		if id != "" && id != "0" {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("no reconnect carried Last-Event-ID: %q", e.proxy.streamRequests())
	}
	p.shot("drop-recovered")
}

// TestNetworkFailureKeepsText: a message whose POST reached the server but
// whose answer was lost (the connection dropped) stays in the composer
// with a clear message, survives a reload, and sending it again starts no
// second run (the console's client_id).
func TestNetworkFailureKeepsText(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	sid := p.createSession("network failure")

	e.proxy.losePostAnswers(true)
	p.typeIn("#message", "echo me once"+kb.Enter)
	p.waitText("#send-error", "Could not reach the server, or its answer was lost")
	p.waitText("#send-error", "Your text is kept")
	if v := eval[string](p, `document.querySelector("#message").value`); v != "echo me once" {
		t.Fatalf("after the failure the composer holds %q", v)
	}
	p.shot("network-failure-kept")

	p.reload()
	p.waitJS(`window.reinConsole.connected`, "the session after the reload")
	if v := eval[string](p, `document.querySelector("#message").value`); v != "echo me once" {
		t.Fatalf("after a reload the composer holds %q", v)
	}

	e.proxy.losePostAnswers(false)
	eval[chromedp.Void](p, `document.querySelector("#message").focus()`)
	p.pressEnter(0)
	p.waitJS(`document.querySelector("#message").value === ""`, "the composer to clear once sent")
	r := p.waitRuns(1)[0]
	p.waitStatus(r, "done")
	p.waitText(runSel(r), "echo: echo me once")
	if runs := runsOf(t, e.srv.URL, "", sid); len(runs) != 1 {
		t.Fatalf("the server has %d runs, want 1: %+v", len(runs), runs)
	}
	if ids := p.runIDs(); len(ids) != 1 {
		t.Fatalf("the page shows %d runs", len(ids))
	}
}

// TestTokenMode: a server with tokens: the console asks for one; a wrong
// token gets a clear message and the question again; the right one works,
// and it is kept in sessionStorage, never in a URL.
func TestTokenMode(t *testing.T) {
	const good = "tok-alice-3f9c2a0d"
	e := newEnv(t, envOptions{tokens: map[string]string{good: "alice"}})
	p := e.page
	p.waitJS(`document.querySelector("#token-dialog").open`, "the token dialog")
	p.waitText("#token-message", "needs a token")
	p.shot("token-asked")

	p.typeIn("#token-input", "not-the-token"+kb.Enter)
	p.waitText("#token-message", "did not accept")
	p.waitJS(`document.querySelector("#token-dialog").open`, "the dialog to ask again")
	p.shot("token-wrong")

	p.typeIn("#token-input", good+kb.Enter)
	p.waitJS(`!document.querySelector("#token-dialog").open`, "the dialog to close")
	sid := p.createSession("with a token")
	p.send("hello alice")
	r := p.waitRuns(1)[0]
	p.waitStatus(r, "done")
	p.waitText(runSel(r), "echo: hello alice")

	if v := eval[string](p, `sessionStorage.getItem("rein.console.token") || ""`); v != good {
		t.Fatalf("sessionStorage holds %q", v)
	}
	if v := eval[string](p, `localStorage.length + ":" + document.cookie`); v != "0:" {
		t.Fatalf("the token went elsewhere too (localStorage length and cookies): %q", v)
	}
	for _, r := range e.proxy.allRequests() {
		if strings.Contains(r.URL.String(), good) || strings.Contains(r.Header.Get("Referer"), good) {
			t.Fatalf("the token is in a URL: %s", r.URL)
		}
	}
	var s map[string]any
	apiGet(t, e.srv.URL, good, "/api/sessions/"+sid, &s)

	// A reload keeps the token for this tab.
	p.reload()
	p.waitJS(`window.reinConsole.connected`, "the stream after the reload")
	if open := eval[bool](p, `document.querySelector("#token-dialog").open`); open {
		t.Fatal("the token was asked again after a reload")
	}
	p.shot("token-ok")
}

// TestModelHTMLIsText: a reply made of HTML tags is shown as text; its
// onerror handler and script never run.
func TestModelHTMLIsText(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("html")
	p.send("html please")
	r := p.waitRuns(1)[0]
	p.waitStatus(r, "done")
	p.waitText(runSel(r)+" .reply-text", `<img src=x onerror="window.__pwned=1">`)
	p.waitText(runSel(r)+" .reply-text", `<script>window.__pwned=2</script>`)
	time.Sleep(200 * time.Millisecond) // an image error would have fired by now
	if v := eval[string](p, `String(window.__pwned)`); v != "undefined" {
		t.Fatalf("model output ran in the page: window.__pwned = %s", v)
	}
	if n := eval[int](p, `document.querySelectorAll("#chat img, #chat script, #chat b").length`); n != 0 {
		t.Fatalf("model output became %d elements", n)
	}
	p.shot("html-as-text")
}

// TestSubagentsAndNarrowScreen: a run that delegates shows the child in the
// subagents list and nested under its parent in the session list; the link
// opens the child's own session. At 375 px nothing overflows sideways.
func TestSubagentsAndNarrowScreen(t *testing.T) {
	e := newEnv(t, envOptions{width: 375, height: 812})
	p := e.page
	parent := p.createSession("delegation")
	p.send("delegate this")
	r := p.waitRuns(1)[0]
	p.waitStatus(r, "done")
	p.waitText(runSel(r), `the researcher said: {"output":"echo: child task"`)
	p.waitText("#subagents", "researcher")
	p.waitText("#chat .flow.subagent", "researcher")
	p.waitJS(fmt.Sprintf(`document.querySelector('#session-list li[data-session-id=%s] ul.children a')`, js(parent)), "the child nested under its parent")
	if w := eval[int](p, `document.documentElement.scrollWidth`); w > 375 {
		t.Errorf("at 375 px wide the page is %d px wide", w)
	}
	p.shot("subagents-375px")

	p.click("#subagents a")
	p.waitJS(fmt.Sprintf(`window.reinConsole.sessionId !== %s && window.reinConsole.connected`, js(parent)), "the child session to open")
	p.waitText("#session-parent", "Subagent of")
	p.waitText("#session-title", "researcher (subagent")
	p.waitText("#chat", "echo: child task")
	if w := eval[int](p, `document.documentElement.scrollWidth`); w > 375 {
		t.Errorf("at 375 px wide the child's page is %d px wide", w)
	}
	p.shot("subagent-child-375px")
}

// TestResumedRunRendering: a log with a step restarted after instance loss
// and an in-doubt tool result (events a crash test produces; served here
// from a fixed log, since no scenario above loses an instance): the step
// shows only the new attempt's text, the run is marked resumed, and the
// in-doubt call is marked.
func TestResumedRunRendering(t *testing.T) {
	chromium(t)
	const sid = "ses_fixed"
	now := time.Now().UTC()
	at := func(i int) string { return now.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano) }
	type event struct {
		Seq       int            `json:"seq"`
		ID        string         `json:"id"`
		SessionID string         `json:"session_id"`
		RunID     *string        `json:"run_id"`
		Type      string         `json:"type"`
		Payload   map[string]any `json:"payload"`
		CreatedAt string         `json:"created_at"`
	}
	run := "run_resumed"
	var evs []event
	add := func(typ string, payload map[string]any) {
		n := len(evs) + 1
		evs = append(evs, event{Seq: n, ID: fmt.Sprintf("evt_%d", n), SessionID: sid, RunID: &run, Type: typ, Payload: payload, CreatedAt: at(n)})
	}
	add("user.message", map[string]any{"text": "survive a crash", "run_id": run})
	add("session.run_started", map[string]any{"run_id": run})
	add("agent.message.delta", map[string]any{"run_id": run, "step": 1, "text": "first attempt, lost"})
	add("agent.step_restarted", map[string]any{"run_id": run, "step": 1, "attempt": 2})
	add("agent.message.delta", map[string]any{"run_id": run, "step": 1, "text": "second attempt"})
	add("agent.tool_use", map[string]any{"run_id": run, "step": 1, "tool_use_id": "call_1", "name": "write_note", "input": map[string]any{"text": "x"}})
	add("agent.tool_result", map[string]any{"run_id": run, "tool_use_id": "call_1", "output": "in doubt: the call was executing when its server was lost", "is_error": true, "in_doubt": true})
	add("agent.message.delta", map[string]any{"run_id": run, "step": 2, "text": "checked"})
	add("agent.message", map[string]any{"run_id": run, "text": "checked", "reason": "stop"})
	add("session.run_completed", map[string]any{"run_id": run, "status": "COMPLETED", "reason": "stop"})

	ts := serveFixedLog(t, sid, evs, len(evs), []any{map[string]any{"run_id": run, "status": "COMPLETED", "reason": "stop", "created_at": at(1), "started_at": at(2), "ended_at": at(10)}})

	p := openPage(t, ts.URL, 1280, 900)
	p.do(chromedp.Navigate(ts.URL + "/#/s/" + sid))
	p.waitJS(`window.reinConsole.connected`, "the fixed session")
	p.waitStatus(run, "done")
	sel := runSel(run)
	p.waitText(sel+" .badge.st-resumed", "resumed after instance loss")
	if got := p.text(sel + ` .step[data-step="1"] .reply-text`); got != "second attempt" {
		t.Fatalf("step 1 shows %q, want only the new attempt's text", got)
	}
	p.waitText(sel+` .step[data-step="1"] .restarted`, "attempt 2")
	p.waitText(sel+" .tool.in-doubt", "in doubt")
	p.shot("resumed-in-doubt")
}

// serveFixedLog serves the console and a read-only API for one session
// whose log is evs (n events) and whose runs list is runs: a log a real run
// would take long or a crash to produce.
func serveFixedLog(t *testing.T, sid string, evs any, n int, runs []any) *httptest.Server {
	t.Helper()
	created := time.Now().UTC().Format(time.RFC3339Nano)
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", web.Handler())
	mux.Handle("GET /console/", web.Handler())
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	session := map[string]any{"id": sid, "created_at": created, "metadata": map[string]any{"title": "fixed log"}, "parent_session_id": nil, "agent": "default"}
	mux.HandleFunc("GET /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"sessions": []any{session}})
	})
	mux.HandleFunc("GET /api/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"id": sid, "created_at": created, "metadata": session["metadata"], "parent_session_id": nil, "agent": "default",
			"state": "idle", "current_run_id": nil, "queued_run_ids": []any{}, "last_seq": n, "pending_confirmations": []any{}})
	})
	mux.HandleFunc("GET /api/sessions/{id}/runs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"runs": runs})
	})
	mux.HandleFunc("GET /api/sessions/{id}/subagents", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"subagents": []any{}})
	})
	mux.HandleFunc("GET /api/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"events": evs, "last_seq": n})
	})
	mux.HandleFunc("GET /api/sessions/{id}/events/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}
