// Package browsertest starts the headless Chromium that Rein's browser
// checks drive (the console, the TypeScript client, the protocol pages):
// one place that knows where the browser is, which flags keep it offline
// and quiet, and when a missing browser is a skip and when a failure.
package browsertest

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path is Debian's chromium, which .ci/run installs.
const Path = "/usr/bin/chromium"

// InCI reports whether the tests run under CI (CI set to a true value),
// where a browser check must run rather than skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

// Require skips t when Chromium is missing, or fails it under CI.
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		if InCI() {
			t.Fatalf("CI is set but %s is missing (%v): .ci/run installs Debian's chromium package; the browser checks must run in CI", Path, err)
		}
		t.Skipf("skipping a browser check: %s is missing (apt-get install chromium)", Path)
	}
}

// Options are the allocator options of a headless Chromium with its
// profile in dir: no sandbox (containers), no GPU, and none of the
// background traffic (updates, sync, QUIC) a machine without internet
// would wait on.
func Options(dir string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 900),
	}
}

// New starts a Chromium for t (after Require) and returns its context;
// t's cleanup closes it.
func New(t testing.TB) context.Context {
	t.Helper()
	Require(t)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), Options(t.TempDir())...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", Path, err)
	}
	return ctx
}
