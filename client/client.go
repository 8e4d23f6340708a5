// Package client is a Go client of Rein's HTTP API (docs/api.md): sessions,
// runs, submitting events, reading them page by page, and following them
// live over Server-Sent Events.
//
// It exists so that programs talking to a Rein server — the rein CLI's
// chat, send and events commands, the web console's tests, and users' own
// code — share one faithful implementation of the wire contract instead of
// each hand-rolling JSON and, above all, SSE reconnection. The event stream
// (see [Client.Stream]) is the part that is easy to get wrong: it resumes
// after a dropped connection with Last-Event-ID, and it never yields an
// event twice nor skips one.
//
// Every error the server answers with is a [*Error]; it matches the rein
// sentinels with errors.Is (errors.Is(err, rein.ErrNotFound)) and
// rein.CodeOf reports its code.
//
// A Client is safe for concurrent use. It owns no goroutine: everything
// it starts ends when the call or stream that started it ends.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/reinhq/rein"
)

// Client talks to one Rein server. Create it with New.
type Client struct {
	base    string
	token   string
	hc      *http.Client
	backoff Backoff
	idle    time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken authenticates every request with "Authorization: Bearer token".
// A server in single-user mode needs none.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sets the HTTP client (default: a client without a
// timeout, since event streams are long-lived; use contexts for deadlines).
// A client with Timeout set cuts every event stream after that time; the
// stream then reconnects, so it still works, only less efficiently.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// Backoff bounds how an event stream waits between reconnection attempts:
// the first wait is Initial, each failed attempt doubles it up to Max, and
// a connection that delivered anything resets it. Each wait is jittered
// into [d/2, d] so that many clients dropped by one server restart do not
// come back in lock step.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// The reconnection backoff of a Client without WithBackoff.
const (
	DefaultBackoffInitial = 200 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// WithBackoff sets the event streams' reconnection backoff. Zero fields
// take the defaults (DefaultBackoffInitial, DefaultBackoffMax).
func WithBackoff(b Backoff) Option { return func(c *Client) { c.backoff = b } }

// DefaultIdleTimeout is how long an event stream waits without receiving
// a single byte before it treats the connection as dead and reconnects.
// The server sends a comment at least every 15 s (docs/api.md), so silence for
// four times that means a half-open connection, not a quiet session.
const DefaultIdleTimeout = 60 * time.Second

// WithIdleTimeout sets how long an event stream tolerates silence before
// reconnecting (default DefaultIdleTimeout; ≤ 0 disables the check).
func WithIdleTimeout(d time.Duration) Option { return func(c *Client) { c.idle = d } }

// New returns a client of the server at baseURL, the server's root (for
// example "http://127.0.0.1:8080"; the /api prefix is added by the
// client). A malformed baseURL is reported by the first call.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: &http.Client{}, idle: DefaultIdleTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.backoff.Initial <= 0 {
		c.backoff.Initial = DefaultBackoffInitial
	}
	if c.backoff.Max <= 0 {
		c.backoff.Max = DefaultBackoffMax
	}
	if c.backoff.Max < c.backoff.Initial {
		c.backoff.Max = c.backoff.Initial
	}
	return c
}

// BaseURL returns the server root the client talks to.
func (c *Client) BaseURL() string { return c.base }

// Error is a non-2xx answer of the server (docs/api.md "Errors"). It matches
// the rein sentinels of its code: errors.Is(err, rein.ErrSessionBusy).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the error code from the body, or one derived from Status
	// when the body was not a Rein error (a proxy's HTML page, say).
	Code rein.Code
	// Message is the server's human-readable message.
	Message string
	// Param names the offending field of an invalid_argument error
	// (e.g. "events[0].payload.text").
	Param string
	// RunID is the run holding the session's turn, for session_busy; for
	// the conflict of an edit or promote of a run no longer queued, that
	// run, with its status in RunStatus.
	RunID     string
	RunStatus rein.RunStatus
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("rein: %d %s", e.Status, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Param != "" {
		msg += " (" + e.Param + ")"
	}
	if e.RunID != "" && e.RunStatus != "" {
		msg += " (run " + e.RunID + " is " + string(e.RunStatus) + ")"
	} else if e.RunID != "" {
		msg += " (run " + e.RunID + ")"
	}
	return msg
}

// Unwrap returns the error as a *rein.Error, so that errors.Is against the
// rein sentinels, errors.As into *rein.Error and rein.CodeOf all work on a
// client error the way they do on the server's own errors.
func (e *Error) Unwrap() error {
	return &rein.Error{Code: e.Code, Message: e.Message, Param: e.Param, RunID: e.RunID, RunStatus: e.RunStatus}
}

// errorBody is the JSON shape of every non-2xx answer.
type errorBody struct {
	Error *struct {
		Code    rein.Code      `json:"code"`
		Message string         `json:"message"`
		Param   string         `json:"param"`
		RunID   string         `json:"run_id"`
		Status  rein.RunStatus `json:"status"`
	} `json:"error"`
	// Results are the results of the events applied before the one that
	// failed (POST events only).
	Results []json.RawMessage `json:"results"`
}

// codeForStatus guesses a code for an answer whose body is not a Rein
// error, so that callers can still branch on errors.Is.
func codeForStatus(status int) rein.Code {
	switch status {
	case http.StatusUnauthorized:
		return rein.CodeUnauthenticated
	case http.StatusNotFound:
		return rein.CodeNotFound
	case http.StatusBadRequest:
		return rein.CodeInvalidArgument
	case http.StatusConflict:
		return rein.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return rein.CodeTooLarge
	case http.StatusServiceUnavailable:
		return rein.CodeUnavailable
	}
	return rein.CodeInternal
}

// maxErrorBody bounds how much of an error answer is read: a Rein error is
// small, and a misbehaving proxy must not make the client buffer megabytes.
const maxErrorBody = 64 << 10

// readError turns a non-2xx answer into an *Error (and the results of a
// partially applied batch, if the body carries them).
func readError(resp *http.Response) (*Error, []json.RawMessage) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &Error{Status: resp.StatusCode}
	var body errorBody
	if err := json.Unmarshal(b, &body); err == nil && body.Error != nil && body.Error.Code != "" {
		e.Code, e.Message, e.Param, e.RunID, e.RunStatus = body.Error.Code, body.Error.Message, body.Error.Param, body.Error.RunID, body.Error.Status
		return e, body.Results
	}
	e.Code = codeForStatus(resp.StatusCode)
	e.Message = http.StatusText(resp.StatusCode)
	if s := strings.TrimSpace(string(b)); s != "" {
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		e.Message += ": " + s
	}
	return e, nil
}

// newRequest builds a request to path (which starts with "/") with an
// optional JSON body.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("rein client: encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("rein client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends a request and decodes a 2xx JSON answer into out (nil: ignore
// the body). A non-2xx answer is an *Error; its partial results, if any,
// are decoded into partial.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, partial *[]json.RawMessage) error {
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("rein client: %s %s: %w", method, path, err)
	}
	defer func() {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e, results := readError(resp)
		if partial != nil {
			*partial = results
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("rein client: %s %s: decoding answer: %w", method, path, err)
	}
	return nil
}

// sessionPath is /api/sessions/{id} plus an optional suffix, with the id
// escaped so that no id can address another route.
func sessionPath(id string, suffix ...string) string {
	p := "/api/sessions/" + url.PathEscape(id)
	for _, s := range suffix {
		p += "/" + s
	}
	return p
}

// Health reports whether the server process is up (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, nil)
}

// Ready reports whether the server accepts work (GET /readyz): nil when
// ready, an *Error (typically unavailable while draining) otherwise.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil, nil)
}
