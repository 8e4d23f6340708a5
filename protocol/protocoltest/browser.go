package protocoltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/browsertest"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
)

// The browser checks: a page per protocol, built from the official
// front-end packages at pinned versions (a committed lockfile), served
// beside the adapter and driven in headless Chromium (internal/browsertest).
// Without node or Chromium they skip, except under CI, where they fail:
// .ci/run installs both.

// browserWait bounds every wait for a page to show something.
const browserWait = 20 * time.Second

// BuildPage installs dir's lockfile and runs its `npm run build`, whose
// output is dir/dist; it returns a handler serving dir/index.html at "/"
// and the build's files beside it. It skips as RunNode does.
func BuildPage(t *testing.T, dir string) http.Handler {
	t.Helper()
	_, npm := nodeTools(t)
	abs := npmCI(t, npm, dir)
	build := exec.Command(npm, "run", "build")
	build.Dir = abs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build: %v\n%s", err, out)
	}
	index, err := os.ReadFile(filepath.Join(abs, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(filepath.Join(abs, "dist")))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write(index)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// Page is one tab of a headless Chromium that the test owns.
type Page struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// OpenPage starts a Chromium for t (closed by t's cleanup) and opens url
// in it; ready is a JavaScript expression that is true once the page has
// loaded. Uncaught exceptions and console errors of the page fail t.
func OpenPage(t *testing.T, url, ready string) *Page {
	t.Helper()
	ctx := browsertest.New(t)
	p := &Page{t: t, ctx: ctx}
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
	p.do(chromedp.Navigate(url))
	p.WaitJS(ready, "the page to load")
	return p
}

// checkConsole fails the test on an uncaught exception or a console.error
// of the page's own code; the browser's network log entries are logged.
func (p *Page) checkConsole() {
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

func (p *Page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("browser action: %v", err)
	}
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// WaitJS waits until the expression is truthy: the page's state is read
// until it shows what the test waits for, within a bound.
func (p *Page) WaitJS(expr, what string) {
	p.t.Helper()
	deadline := time.Now().Add(browserWait)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, browserWait)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waited %v for %s (%s); last error: %v; page text: %q", browserWait, what, expr, err, p.Text("body"))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Text is the text of the elements matching sel, joined.
func (p *Page) Text(sel string) string {
	p.t.Helper()
	return Eval[string](p, fmt.Sprintf(`Array.from(document.querySelectorAll(%s)).map((n) => n.textContent).join("")`, JS(sel)))
}

// Click clicks the first element matching sel (a DOM click, which the
// page's handlers see as a person's; not chromedp's Click, whose node cache
// races the DOM updates of a React page).
func (p *Page) Click(sel string) {
	p.t.Helper()
	Eval[chromedp.Void](p, fmt.Sprintf(`document.querySelector(%s).click()`, JS(sel)))
}

// Type types text into the field sel and submits its form, as a person
// pressing Enter does. The text is inserted as typed input (the page's
// input handlers see it), not through chromedp's SendKeys, whose node
// cache races the DOM updates a React page makes while it is typed into.
func (p *Page) Type(sel, text string) {
	p.t.Helper()
	Eval[chromedp.Void](p, fmt.Sprintf(`document.querySelector(%s).focus()`, JS(sel)))
	p.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: text})
		return err
	}))
	p.WaitJS(fmt.Sprintf(`document.querySelector(%s).value === %s`, JS(sel), JS(text)), "the typed text in "+sel)
	Eval[chromedp.Void](p, fmt.Sprintf(`document.querySelector(%s).form.requestSubmit()`, JS(sel)))
}

// Reload reloads the page and waits for ready.
func (p *Page) Reload(ready string) {
	p.t.Helper()
	p.do(chromedp.Reload())
	p.WaitJS(ready, "the page to load again")
}

// JS quotes s as a JavaScript string literal.
func JS(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// WithPage serves page under /page/ beside the server's handler h (one
// origin, as a front end behind the same host as Rein), and calls seen
// with each request h answers and its status, once the status is sent (an
// event stream's, while it is still open).
func WithPage(page http.Handler, seen func(r *http.Request, status int)) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		pageFiles := http.StripPrefix("/page", page)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/page/") {
				pageFiles.ServeHTTP(w, r)
				return
			}
			rec := &statusRecorder{ResponseWriter: w, seen: func(status int) {
				if seen != nil {
					seen(r, status)
				}
			}}
			h.ServeHTTP(rec, r)
			rec.sent(http.StatusOK)
		})
	}
}

// statusRecorder reports a response's status when it is sent; it passes
// flushes through (event streams) and unwraps for http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	seen func(int)
	done bool
}

func (r *statusRecorder) sent(code int) {
	if !r.done {
		r.done = true
		r.seen(code)
	}
}

func (r *statusRecorder) WriteHeader(code int) {
	r.sent(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.sent(http.StatusOK)
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	r.sent(http.StatusOK)
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// StreamedText is what the session's runs streamed, read from its log:
// the text of every agent.message.delta, in order, each once (for a run
// without restarted steps, what a client must show), and the run of the
// last user.message.
func StreamedText(ctx context.Context, t *testing.T, svc *sessions.Service, key rein.SessionKey) (run, text string) {
	t.Helper()
	var b strings.Builder
	var after int64
	for {
		evs, last, err := svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			switch e.Type {
			case rein.EventUserMessage:
				run = e.RunID
			case rein.EventMessageDelta:
				var d struct{ Text string }
				if err := json.Unmarshal(e.Payload, &d); err != nil {
					t.Fatal(err)
				}
				b.WriteString(d.Text)
			}
			after = e.Seq
		}
		if len(evs) == 0 || after >= last {
			return run, b.String()
		}
	}
}

// WaitEvent reads the session's log until an event matches.
func WaitEvent(ctx context.Context, t *testing.T, svc *sessions.Service, key rein.SessionKey, match func(rein.Event) bool) {
	t.Helper()
	var after int64
	for {
		evs, _, err := svc.ReadEvents(ctx, key, after, 100)
		if err != nil {
			t.Fatalf("waiting for an event: %v", err)
		}
		for _, e := range evs {
			if match(e) {
				return
			}
			after = e.Seq
		}
		if err := svc.WaitEvents(ctx, key, after); err != nil {
			t.Fatalf("waiting for an event: %v", err)
		}
	}
}

// PageServer is a server for a browser check: the scripted model of
// script, alice's token tok-alice, the adapters mounts builds, and page
// (BuildPage) under /page/. Streams counts the event streams (GET …/stream)
// it answered 200: the page's resumes.
type PageServer struct {
	*reintest.Server
	mu      sync.Mutex
	streams int
}

// NewPageServer starts a PageServer.
func NewPageServer(t *testing.T, script string, page http.Handler, mounts func(*sessions.Service) []protocol.Mount) *PageServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ps := &PageServer{}
	ps.Server = reintest.NewServer(t, reintest.ServerOptions{
		Script:    path,
		Tokens:    map[string]string{"tok-alice": "alice"},
		Protocols: mounts,
		Wrap: WithPage(page, func(r *http.Request, status int) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/stream") && status == http.StatusOK {
				ps.mu.Lock()
				ps.streams++
				ps.mu.Unlock()
			}
		}),
	})
	return ps
}

// Streams is how many event streams the server answered 200 so far.
func (ps *PageServer) Streams() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.streams
}
