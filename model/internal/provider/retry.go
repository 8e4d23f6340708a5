// Package provider holds what Rein's HTTP model providers (openai,
// anthropic) share and must agree on: the retry policy around the SDKs, the
// errors that tell a user which setting to fix, and the way Rein's
// transcript features without an API equivalent (supplements, partial
// replies, tool input the model got wrong) are rendered.
//
// It exists so that both providers behave the same where the product
// promises one behaviour, and so that that behaviour is tested once.
package provider

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reinhq/rein/model"
)

// Retry defaults. The SDKs' own retries are switched off; these apply
// instead, so that "nothing is retried after the first streamed byte" is
// ours to guarantee and to test.
const (
	DefaultMaxRetries   = 2
	DefaultBaseDelay    = 500 * time.Millisecond
	DefaultMaxRetryWait = 60 * time.Second
	// maxBackoff caps the exponential backoff when the server gave no
	// Retry-After; a server that wants a longer pause says so.
	maxBackoff = 8 * time.Second
)

// Policy is how a provider retries a request that failed before its stream
// started.
type Policy struct {
	// Provider names the provider in logs and RetryInfo.
	Provider string
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// BaseDelay is the first backoff before jitter; it doubles per retry.
	BaseDelay time.Duration
	// MaxWait caps every wait, a server's Retry-After included.
	MaxWait time.Duration
	// Logger receives one warning per retry.
	Logger *slog.Logger
	// OnRetry, when set, is called before each retry's wait.
	OnRetry func(model.RetryInfo)
	// Classify turns a failed attempt into the error to retry or return.
	// status is the HTTP status of the attempt's response, 0 if none came.
	Classify func(status int, err error) *model.Error
}

// NewPolicy fills a Policy from a provider's configuration: maxRetries 0
// means DefaultMaxRetries and a negative value means none; zero durations
// mean the defaults; a nil logger discards.
func NewPolicy(provider string, maxRetries int, baseDelay, maxWait time.Duration, logger *slog.Logger, onRetry func(model.RetryInfo)) Policy {
	switch {
	case maxRetries == 0:
		maxRetries = DefaultMaxRetries
	case maxRetries < 0:
		maxRetries = 0
	}
	if baseDelay <= 0 {
		baseDelay = DefaultBaseDelay
	}
	if maxWait <= 0 {
		maxWait = DefaultMaxRetryWait
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return Policy{Provider: provider, MaxRetries: maxRetries, BaseDelay: baseDelay, MaxWait: maxWait, Logger: logger, OnRetry: onRetry}
}

// Attempt records what the transport saw of one HTTP attempt. The SDKs
// turn some failures (an error body that is not JSON, say) into errors
// without the status; the transport sees the status either way.
type Attempt struct {
	Status int
	Header http.Header
}

type attemptKey struct{}

// Do runs try until it succeeds, fails with an error that is not retryable,
// or runs out of retries. try gets a context that its HTTP request must use
// (so the Transport can record the attempt). A cancelled ctx ends Do at
// once, during a wait too, with an error wrapping ctx's error.
func (p Policy) Do(ctx context.Context, try func(ctx context.Context) error) error {
	for retry := 0; ; retry++ {
		var at Attempt
		err := try(context.WithValue(ctx, attemptKey{}, &at))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return CtxErr(ctx, p.Provider)
		}
		merr := p.Classify(at.Status, err)
		if !merr.Retryable || retry >= p.MaxRetries {
			if merr.Retryable && retry > 0 {
				merr.Message += fmt.Sprintf(" (gave up after %d retries)", retry)
			}
			return merr
		}
		info := model.RetryInfo{Provider: p.Provider, Attempt: retry + 1, Status: at.Status, Wait: p.wait(retry+1, at.Header, time.Now()), Err: merr}
		p.Logger.Warn("model request failed; retrying",
			"provider", p.Provider, "attempt", info.Attempt, "max_retries", p.MaxRetries,
			"status", info.Status, "wait", info.Wait, "error", merr.Error())
		if p.OnRetry != nil {
			p.OnRetry(info)
		}
		t := time.NewTimer(info.Wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return CtxErr(ctx, p.Provider)
		case <-t.C:
		}
	}
}

// wait is how long to pause before retry number n (from 1): the server's
// Retry-After when it sent a usable one, else exponential backoff with
// equal jitter (half fixed, half random) so that many clients throttled at
// once do not come back at once. Both are capped by MaxWait.
func (p Policy) wait(n int, h http.Header, now time.Time) time.Duration {
	if d, ok := RetryAfter(h, now); ok {
		return min(d, p.MaxWait)
	}
	d := p.BaseDelay
	for i := 1; i < n && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, maxBackoff, p.MaxWait)
	half := d / 2
	return half + rand.N(d-half+1)
}

// RetryAfter reads how long the server asked the client to wait:
// "retry-after-ms" (milliseconds, sent by OpenAI and Anthropic) wins over
// the standard "Retry-After" (seconds, or an HTTP date relative to now).
// Negative or unparsable values count as absent.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s > 1e9 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Client returns an HTTP client for a provider's SDK: c (or a default
// client when nil) with a transport that records each attempt's status for
// Policy.Do. The caller's client is not modified.
func Client(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// A server that accepts the connection and never answers must not
		// hang a run forever; a local model loading its weights can take
		// minutes before the first header, hence the generous bound.
		t.ResponseHeaderTimeout = 10 * time.Minute
		out.Transport = t
	}
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = recordingTransport{next: next}
	return &out
}

type recordingTransport struct{ next http.RoundTripper }

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if at, ok := req.Context().Value(attemptKey{}).(*Attempt); ok && res != nil {
		at.Status, at.Header = res.StatusCode, res.Header.Clone()
	}
	return res, err
}

// CtxErr is the error a request stopped by its context returns: it wraps
// ctx's error (context.Canceled or context.DeadlineExceeded) and, when the
// context was cancelled with a different cause (an interrupt, say), the
// cause too, so errors.Is finds either.
func CtxErr(ctx context.Context, provider string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%s: request stopped: %w (%w)", provider, err, cause)
	}
	return fmt.Errorf("%s: request stopped: %w", provider, err)
}
