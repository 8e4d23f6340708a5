package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/reinhq/rein/model"
)

// Settings names what a user can change when a request fails, so that the
// error says which knob to turn rather than only what went wrong.
type Settings struct {
	// Provider is the provider's name ("openai", "ollama", "anthropic").
	Provider string
	// Model is the model name sent to the API.
	Model string
	// BaseURL is where requests go.
	BaseURL string
	// KeySetting names the API key setting, e.g. "OPENAI_API_KEY"; "" when
	// the server needs no key (Ollama).
	KeySetting string
	// BaseURLSetting names the base URL setting, e.g. "OPENAI_BASE_URL".
	BaseURLSetting string
	// NotFoundHint, when set, replaces the generic advice for a 404 (for
	// Ollama: pull the model).
	NotFoundHint string
	// UnreachableHint, when set, is added when the server cannot be reached.
	UnreachableHint string
}

// Classify turns a failed request attempt into a *model.Error. status is the
// HTTP status (0 when no response arrived); detail is the provider's own
// explanation from the error body, if any.
func (s Settings) Classify(status int, detail string, err error) *model.Error {
	e := &model.Error{Provider: s.Provider, Status: status, Err: err}
	what := ""
	if status != 0 {
		what = fmt.Sprintf("%d %s", status, http.StatusText(status))
		if detail != "" {
			what += " (" + detail + ")"
		}
	}
	modelFlag := "--model " + s.Provider + ":" + s.Model
	switch {
	case status == 0 && !isTransport(err):
		// Not the network and not the server: the SDK refused to send.
		e.Message = "the request failed: " + oneLine(fmt.Sprint(err))
	case status == 0:
		e.Retryable = true
		e.Message = fmt.Sprintf("cannot reach %s: %v", s.BaseURL, err)
		if s.UnreachableHint != "" {
			e.Message += "; " + s.UnreachableHint
		} else if s.BaseURLSetting != "" {
			e.Message += "; check " + s.BaseURLSetting
		}
	case status == http.StatusUnauthorized:
		e.Message = what + ": the API key was rejected"
		if s.KeySetting != "" {
			e.Message += "; set " + s.KeySetting + " to a valid key"
		}
	case status == http.StatusForbidden:
		e.Message = what + ": the API key may not use this model or endpoint"
		if s.KeySetting != "" {
			e.Message += "; check " + s.KeySetting + " and the key's permissions"
		}
	case status == http.StatusNotFound:
		e.Message = fmt.Sprintf("%s: model %q was not found at %s", what, s.Model, s.BaseURL)
		switch {
		case s.NotFoundHint != "":
			e.Message += "; " + s.NotFoundHint
		case s.BaseURLSetting != "":
			e.Message += "; check the model name (" + modelFlag + ") and " + s.BaseURLSetting
		default:
			e.Message += "; check the model name (" + modelFlag + ")"
		}
	case status == http.StatusTooManyRequests:
		e.Retryable = true
		e.Message = what + ": rate limited"
	case status >= 500:
		e.Retryable = true
		e.Message = what + ": the model server failed"
	case status >= 400:
		e.Message = what + ": the request was rejected"
	default:
		// A 1xx/2xx/3xx that still failed: the SDK could not use the answer.
		e.Message = fmt.Sprintf("%s: unexpected answer: %v", what, err)
	}
	return e
}

// StreamError is the error for a stream that broke after it started: the
// connection dropped, a line was not valid, or the server sent an error
// event (detail is then the server's explanation; "" uses err's text).
// Nothing is retried at that point (output may already have been shown),
// so the run fails with this.
func StreamError(provider, detail string, err error) *model.Error {
	if detail != "" {
		return &model.Error{Provider: provider, Streaming: true, Message: "the server reported an error mid-reply: " + oneLine(detail), Err: err}
	}
	what := "the reply stream broke: "
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		what += "a data line is not valid JSON: "
	}
	return &model.Error{Provider: provider, Streaming: true, Message: what + oneLine(err.Error()), Err: err}
}

// StreamEnded is the error for a stream that ended cleanly but before the
// provider said the reply was complete.
func StreamEnded(provider, what string) *model.Error {
	return &model.Error{Provider: provider, Streaming: true, Message: "the reply stream ended " + what + "; the reply is incomplete", Err: errIncomplete}
}

var errIncomplete = errors.New("incomplete reply")

// ErrClosed is what Recv returns after Close.
func ErrClosed(provider string) error {
	return fmt.Errorf("%s: stream closed: %w", provider, net.ErrClosed)
}

// isTransport reports whether err came from the HTTP client (no response:
// refused, reset, DNS, TLS, header timeout).
func isTransport(err error) bool {
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne)
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}
