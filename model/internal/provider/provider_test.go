package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"http date", http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second, true},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"ms wins over seconds", http.Header{"Retry-After": {"9"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond, true},
		{"bad ms falls back to seconds", http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"soon"}}, 2 * time.Second, true},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"whenever"}}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := RetryAfter(c.header, now)
			if got != c.want || ok != c.ok {
				t.Fatalf("RetryAfter = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestWaitBackoffIsJitteredAndCapped(t *testing.T) {
	p := NewPolicy("x", 0, 100*time.Millisecond, 60*time.Second, nil, nil)
	now := time.Now()
	for n := 1; n <= 8; n++ {
		full := min(100*time.Millisecond<<(n-1), maxBackoff)
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.wait(n, http.Header{}, now)
			if d < full/2 || d > full {
				t.Fatalf("retry %d: wait %v outside [%v, %v]", n, d, full/2, full)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Fatalf("retry %d: only %d distinct waits in 200: not jittered", n, len(seen))
		}
	}
	// The server's Retry-After is used as given, capped by MaxWait.
	p.MaxWait = 5 * time.Second
	if d := p.wait(1, http.Header{"Retry-After": {"2"}}, now); d != 2*time.Second {
		t.Fatalf("Retry-After 2 → wait %v", d)
	}
	if d := p.wait(1, http.Header{"Retry-After": {"120"}}, now); d != 5*time.Second {
		t.Fatalf("Retry-After 120 with cap 5s → wait %v", d)
	}
	// A cap below the backoff caps it too.
	p.MaxWait = 10 * time.Millisecond
	if d := p.wait(6, http.Header{}, now); d > 10*time.Millisecond {
		t.Fatalf("backoff %v above the cap", d)
	}
}

func TestNewPolicyDefaults(t *testing.T) {
	p := NewPolicy("x", 0, 0, 0, nil, nil)
	if p.MaxRetries != DefaultMaxRetries || p.BaseDelay != DefaultBaseDelay || p.MaxWait != DefaultMaxRetryWait || p.Logger == nil {
		t.Fatalf("defaults: %+v", p)
	}
	if p := NewPolicy("x", -1, 0, 0, nil, nil); p.MaxRetries != 0 {
		t.Fatalf("negative MaxRetries → %d retries, want none", p.MaxRetries)
	}
}

// statusErr makes try fail as if the transport had seen status.
func statusErr(ctx context.Context, status int, h http.Header) error {
	at := ctx.Value(attemptKey{}).(*Attempt)
	at.Status, at.Header = status, h
	return fmt.Errorf("status %d", status)
}

func testPolicy(retries int, onRetry func(model.RetryInfo)) Policy {
	p := NewPolicy("test", retries, time.Microsecond, time.Second, nil, onRetry)
	p.Classify = func(status int, err error) *model.Error {
		return Settings{Provider: "test", Model: "m", BaseURL: "http://x", KeySetting: "KEY", BaseURLSetting: "URL"}.Classify(status, "", err)
	}
	return p
}

func TestDoRetriesTransientFailuresThenSucceeds(t *testing.T) {
	var infos []model.RetryInfo
	p := testPolicy(3, func(i model.RetryInfo) { infos = append(infos, i) })
	calls := 0
	err := p.Do(context.Background(), func(ctx context.Context) error {
		calls++
		switch calls {
		case 1:
			return statusErr(ctx, 503, http.Header{})
		case 2:
			return statusErr(ctx, 429, http.Header{"Retry-After-Ms": {"3"}})
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want success after 3", err, calls)
	}
	if len(infos) != 2 || infos[0].Attempt != 1 || infos[0].Status != 503 || infos[1].Attempt != 2 || infos[1].Status != 429 || infos[1].Wait != 3*time.Millisecond {
		t.Fatalf("retries = %+v", infos)
	}
	var me *model.Error
	if !errors.As(infos[0].Err, &me) || !me.Retryable {
		t.Fatalf("retry error %v is not a retryable *model.Error", infos[0].Err)
	}
}

func TestDoGivesUpAfterMaxRetries(t *testing.T) {
	calls := 0
	err := testPolicy(2, nil).Do(context.Background(), func(ctx context.Context) error {
		calls++
		return statusErr(ctx, 502, http.Header{})
	})
	var me *model.Error
	if !errors.As(err, &me) || me.Status != 502 || !me.Retryable || calls != 3 {
		t.Fatalf("Do = %v after %d calls; want the 502 after 3", err, calls)
	}
}

func TestDoDoesNotRetryClientErrors(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 422} {
		calls := 0
		err := testPolicy(5, nil).Do(context.Background(), func(ctx context.Context) error {
			calls++
			return statusErr(ctx, status, http.Header{})
		})
		var me *model.Error
		if !errors.As(err, &me) || me.Status != status || me.Retryable || calls != 1 {
			t.Fatalf("status %d: Do = %v after %d calls; want it at once", status, err, calls)
		}
	}
}

func TestDoRetriesConnectionFailures(t *testing.T) {
	calls := 0
	err := testPolicy(1, nil).Do(context.Background(), func(ctx context.Context) error {
		calls++
		return &url.Error{Op: "Post", URL: "http://x", Err: errors.New("connection refused")}
	})
	var me *model.Error
	if !errors.As(err, &me) || me.Status != 0 || !me.Retryable || calls != 2 || !strings.Contains(err.Error(), "cannot reach http://x") {
		t.Fatalf("Do = %v after %d calls", err, calls)
	}
	// An error that is neither HTTP nor network (the SDK refused to send)
	// is not retried.
	calls = 0
	err = testPolicy(3, nil).Do(context.Background(), func(ctx context.Context) error {
		calls++
		return errors.New("cannot marshal")
	})
	if !errors.As(err, &me) || me.Retryable || calls != 1 {
		t.Fatalf("Do = %v after %d calls", err, calls)
	}
}

func TestDoStopsAtOnceWhenCancelledDuringTheWait(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	interrupted := errors.New("interrupted")
	p := testPolicy(3, func(model.RetryInfo) { cancel(interrupted) })
	p.MaxWait = time.Hour
	start := time.Now()
	err := p.Do(ctx, func(ctx context.Context) error {
		return statusErr(ctx, 429, http.Header{"Retry-After": {"3600"}})
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, interrupted) {
		t.Fatalf("Do = %v, want it to wrap context.Canceled and the cause", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Do took %v after cancel", d)
	}
}

func TestClassifyNamesTheSettingToFix(t *testing.T) {
	s := Settings{Provider: "openai", Model: "gpt-x", BaseURL: "https://api.example/v1", KeySetting: "OPENAI_API_KEY", BaseURLSetting: "OPENAI_BASE_URL"}
	cases := []struct {
		status    int
		detail    string
		retryable bool
		want      []string
	}{
		{401, "Incorrect API key provided", false, []string{"401 Unauthorized", "Incorrect API key provided", "OPENAI_API_KEY"}},
		{403, "", false, []string{"403 Forbidden", "OPENAI_API_KEY"}},
		{404, "", false, []string{"404 Not Found", `"gpt-x"`, "https://api.example/v1", "--model openai:gpt-x", "OPENAI_BASE_URL"}},
		{429, "slow down", true, []string{"429", "slow down", "rate limited"}},
		{500, "", true, []string{"500 Internal Server Error"}},
		{529, "overloaded_error: Overloaded", true, []string{"529", "Overloaded"}},
		{400, "messages: bad", false, []string{"400 Bad Request", "messages: bad", "rejected"}},
	}
	for _, c := range cases {
		e := s.Classify(c.status, c.detail, errors.New("sdk error"))
		if e.Status != c.status || e.Retryable != c.retryable || e.Streaming {
			t.Errorf("%d: %+v", c.status, e)
		}
		for _, w := range c.want {
			if !strings.Contains(e.Error(), w) {
				t.Errorf("%d: %q does not contain %q", c.status, e.Error(), w)
			}
		}
		if !strings.HasPrefix(e.Error(), "openai: ") {
			t.Errorf("%q does not start with the provider", e.Error())
		}
	}
	ollama := Settings{Provider: "ollama", Model: "llama3.2", BaseURL: "http://127.0.0.1:11434/v1", NotFoundHint: "pull it first: ollama pull llama3.2", UnreachableHint: "is Ollama running? (ollama serve)"}
	if e := ollama.Classify(404, "", nil); !strings.Contains(e.Error(), "ollama pull llama3.2") {
		t.Errorf("ollama 404: %v", e)
	}
	if e := ollama.Classify(0, "", &url.Error{Op: "Post", URL: "u", Err: errors.New("refused")}); !strings.Contains(e.Error(), "ollama serve") {
		t.Errorf("ollama unreachable: %v", e)
	}
}

func TestUserTextWrapsHints(t *testing.T) {
	cases := []struct {
		m    rein.Message
		want string
	}{
		{rein.Message{Role: rein.RoleUser, Text: "plain"}, "plain"},
		{rein.Message{Role: rein.RoleUser, Text: "use metric", Hint: &rein.Hint{ID: "sup_1", Source: "user"}}, `<supplement source="user">use metric</supplement>`},
		{rein.Message{Role: rein.RoleUser, Text: "child done", Hint: &rein.Hint{ID: "ntc_1", Source: "subagent"}}, `<supplement source="subagent">child done</supplement>`},
		{rein.Message{Role: rein.RoleUser, Text: "x", Hint: &rein.Hint{}}, `<supplement source="user">x</supplement>`},
		{rein.Message{Role: rein.RoleUser, Text: "x", Hint: &rein.Hint{Source: `a"b<c`}}, `<supplement source="a&#34;b&lt;c">x</supplement>`},
	}
	for _, c := range cases {
		if got := UserText(c.m); got != c.want {
			t.Errorf("UserText(%+v) = %q, want %q", c.m, got, c.want)
		}
	}
}

func TestAssistantTextMarksPartialReplies(t *testing.T) {
	if got := AssistantText(rein.Message{Text: "done"}); got != "done" {
		t.Errorf("complete: %q", got)
	}
	if got := AssistantText(rein.Message{Text: "half", Partial: true}); got != "half\n\n"+PartialMarker {
		t.Errorf("partial: %q", got)
	}
	if got := AssistantText(rein.Message{Partial: true}); got != PartialMarker {
		t.Errorf("empty partial: %q", got)
	}
}

func TestToolInputRoundTrips(t *testing.T) {
	cases := []struct {
		raw       string
		input     string // ToolInput
		arguments string // ArgumentsText(input)
		object    string // ObjectInput(input)
	}{
		{`{"city": "Paris"}`, `{"city": "Paris"}`, `{"city": "Paris"}`, `{"city": "Paris"}`},
		{``, `{}`, `{}`, `{}`},
		{"  \n", `{}`, `{}`, `{}`},
		{`{"city": "Par`, `"{\"city\": \"Par"`, `{"city": "Par`, `{"_raw_input":"{\"city\": \"Par"}`},
		{`[1,2]`, `[1,2]`, `[1,2]`, `{"_raw_input":[1,2]}`},
	}
	for _, c := range cases {
		in := ToolInput(c.raw)
		if string(in) != c.input || !json.Valid(in) {
			t.Errorf("ToolInput(%q) = %s, want %s", c.raw, in, c.input)
		}
		if got := ArgumentsText(in); got != c.arguments {
			t.Errorf("ArgumentsText(%s) = %q, want %q", in, got, c.arguments)
		}
		if got := ObjectInput(in); string(got) != c.object {
			t.Errorf("ObjectInput(%s) = %s, want %s", in, got, c.object)
		}
	}
}

func TestShortID(t *testing.T) {
	short := func(s string) bool { return len(s) <= 10 }
	if got := ShortID("call_1", "p_", short); got != "call_1" {
		t.Errorf("acceptable id changed: %q", got)
	}
	a, b := ShortID("a-very-long-id-1", "p_", short), ShortID("a-very-long-id-2", "p_", short)
	if a == b || !strings.HasPrefix(a, "p_") || a != ShortID("a-very-long-id-1", "p_", short) {
		t.Errorf("ShortID: %q %q", a, b)
	}
}

func TestCtxErrWrapsErrorAndCause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := CtxErr(ctx, "p"); !errors.Is(err, context.Canceled) {
		t.Fatalf("CtxErr = %v", err)
	}
	ctx, stop := context.WithTimeoutCause(context.Background(), 0, rein.ErrTimeout)
	defer stop()
	<-ctx.Done()
	if err := CtxErr(ctx, "p"); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rein.ErrTimeout) {
		t.Fatalf("CtxErr = %v", err)
	}
	if CtxErr(context.Background(), "p") != nil {
		t.Fatal("CtxErr of a live context is not nil")
	}
}

func TestEachRetryIsLogged(t *testing.T) {
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	p := NewPolicy("openai", 2, time.Microsecond, time.Second, logger, nil)
	p.Classify = func(status int, err error) *model.Error {
		return Settings{Provider: "openai", Model: "m", BaseURL: "http://x"}.Classify(status, "", err)
	}
	_ = p.Do(context.Background(), func(ctx context.Context) error {
		return statusErr(ctx, 500, http.Header{})
	})
	out := buf.String()
	if n := strings.Count(out, "model request failed; retrying"); n != 2 {
		t.Fatalf("%d retry log lines, want 2:\n%s", n, out)
	}
	for _, w := range []string{"level=WARN", "provider=openai", "attempt=1", "attempt=2", "status=500", "wait="} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
}
