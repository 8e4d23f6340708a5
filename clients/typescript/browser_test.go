package typescript

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reinhq/rein/internal/browsertest"
)

// testBrowser loads the built client (dist/) into headless Chromium from
// a page on another origin than the server's, and runs
// testdata/browser.html's scenario there: CORS preflights with a bearer
// token, the event stream read over fetch, an approval, a busy session's
// error, an exact stop, an aborted call, a 401.
func testBrowser(ctx context.Context, t *testing.T, bin, dir string) {
	browsertest.Require(t)
	mux := http.NewServeMux()
	mux.Handle("GET /dist/", http.StripPrefix("/dist/", http.FileServer(http.Dir(filepath.Join(dir, "dist")))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, "testdata", "browser.html"))
	})
	page := httptest.NewServer(mux)
	defer page.Close()

	tokens := filepath.Join(t.TempDir(), "tokens")
	const token = "tok-browser-0123456789"
	if err := os.WriteFile(tokens, []byte(token+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := startServe(ctx, t, bin, dir, "--tokens", tokens, "--cors-origin", page.URL)

	actx, acancel := chromedp.NewExecAllocator(ctx, browsertest.Options(t.TempDir())...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(page.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	for {
		ready, err := chromedp.Run(bctx, chromedp.Evaluate[bool]("!!window.ready"))
		if err == nil && ready {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page did not load the client: %v (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	sctx, scancel := context.WithTimeout(bctx, 2*time.Minute)
	defer scancel()
	raw, err := chromedp.Run(sctx, chromedp.Evaluate[string](
		fmt.Sprintf("window.scenario(%q, %q)", server, token), chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the scenario failed in the browser: %v", err)
	}
	var got struct {
		Title    string  `json:"title"`
		Seqs     []int64 `json:"seqs"`
		Text     string  `json:"text"`
		Final    string  `json:"final"`
		Approved string  `json:"approved"`
		Busy     string  `json:"busy"`
		Stop     struct {
			Accepted bool `json:"accepted"`
		} `json:"stop"`
		Stopped         string `json:"stopped"`
		Abort           string `json:"abort"`
		Unauthenticated string `json:"unauthenticated"`
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatalf("the scenario's answer %s: %v", raw, err)
	}
	t.Logf("browser: %s", raw)
	for i, s := range got.Seqs {
		if s != int64(i+1) {
			t.Fatalf("the browser's stream delivered seqs %v, want 1..%d in order", got.Seqs, len(got.Seqs))
		}
	}
	want := "hi there, hello browser"
	if got.Title != "from a browser" || got.Final != want || got.Text != want || len(got.Seqs) == 0 ||
		got.Approved != "COMPLETED" || got.Busy != "409 session_busy true" || !got.Stop.Accepted ||
		got.Stopped != "CANCELLED" || got.Abort != "AbortError" || got.Unauthenticated != "401 unauthenticated" {
		t.Fatalf("the browser scenario answered %s; want title %q, deltas and final %q, approved COMPLETED, busy \"409 session_busy true\", stop accepted, CANCELLED, AbortError, \"401 unauthenticated\"", raw, "from a browser", want)
	}
}

// listening is rein serve's log line with its address.
var listening = regexp.MustCompile(`msg="rein serve listening"(?: \S+)*? url=(http://\S+)`)

// startServe starts `rein serve` with the tests' scripted model on a
// temporary SQLite store, with more flags args, and returns its URL once
// it answers /readyz. The process is killed when the test ends.
func startServe(ctx context.Context, t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	work := t.TempDir()
	cmd := exec.Command(bin, append([]string{"serve",
		"--addr", "127.0.0.1:0",
		"--store", "sqlite:" + filepath.Join(work, "rein.db"),
		"--model", "scripted:" + filepath.Join(dir, "testdata", "script.yaml"),
		"--workspace", filepath.Join(work, "workspace"),
	}, args...)...)
	cmd.Env = withoutRein(os.Environ())
	log := &logBuffer{grew: make(chan struct{})}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rein serve: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("rein serve's log:\n%s", log.String())
		}
	})
	var url string
	for url == "" {
		s, grew := log.snapshot()
		if m := listening.FindStringSubmatch(s); m != nil {
			url = m[1]
			break
		}
		select {
		case <-grew:
		case <-done:
			t.Fatalf("rein serve exited before listening:\n%s", log.String())
		case <-ctx.Done():
			t.Fatalf("rein serve did not listen: %v\n%s", ctx.Err(), log.String())
		}
	}
	for {
		res, err := http.Get(url + "/readyz")
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case <-done:
			t.Fatalf("rein serve exited before it was ready:\n%s", log.String())
		case <-ctx.Done():
			t.Fatalf("rein serve not ready: %v (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// logBuffer keeps a process's log and says when it grew.
type logBuffer struct {
	mu   sync.Mutex
	b    strings.Builder
	grew chan struct{}
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	close(l.grew)
	l.grew = make(chan struct{})
	return len(p), nil
}

// snapshot returns the log so far and a channel closed on its next write.
func (l *logBuffer) snapshot() (string, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String(), l.grew
}

func (l *logBuffer) String() string {
	s, _ := l.snapshot()
	return s
}

// withoutRein is env less its REIN_* variables, so that a developer's
// settings change no flag of the servers under test.
func withoutRein(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "REIN_") {
			out = append(out, kv)
		}
	}
	return out
}
