// Package anthropic is Rein's model provider for Anthropic's Messages API,
// built on the official SDK (github.com/anthropics/anthropic-sdk-go/v2)
// for the wire format. Like the openai provider it keeps for itself what
// Rein promises about a model request: retries only before the stream
// starts (429, 5xx including 529 "overloaded", honouring Retry-After), a
// stream that stops the moment its context is cancelled, and errors that
// name the setting to fix.
//
// Streaming: text_delta events are passed on as they arrive; a tool_use
// block's input, streamed as pieces of JSON, is assembled and passed on
// when the block stops; usage (input from message_start, output from the
// last message_delta, whose counts are cumulative) and the stop reason
// come last, at message_stop. A stream that ends before message_stop,
// breaks, carries a line that is not valid, or reports an error event is
// an error, never a short reply.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// DefaultBaseURL is the Anthropic API.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is the reply cap sent when neither the request nor
// Config sets one: the Messages API requires max_tokens.
const DefaultMaxTokens = 4096

// Config configures a Model. Nothing is read from the environment: the
// caller (the catalog, for the command line) passes every setting in.
type Config struct {
	// Model is the model name, e.g. "claude-sonnet-4-5". Required.
	Model string
	// APIKey authenticates the requests (SDK v2 sends it as a bearer
	// token). Required.
	APIKey string
	// BaseURL is the API root. Default DefaultBaseURL.
	BaseURL string
	// MaxTokens is the reply cap when a request sets none. Default
	// DefaultMaxTokens.
	MaxTokens int
	// HTTPClient makes the requests. Its transport must honour request
	// contexts (every net/http transport does); cancellation relies on it.
	// Default: a client of its own with a 10-minute response-header bound.
	HTTPClient *http.Client
	// MaxRetries is how many times a request failing before its stream
	// starts (429, 5xx, no connection) is retried: 0 means 2, a negative
	// value means never.
	MaxRetries int
	// RetryBaseDelay is the first backoff when the server gives no
	// Retry-After (doubling, jittered, at most 8 s). Default 500 ms.
	RetryBaseDelay time.Duration
	// MaxRetryWait caps any wait between attempts, a server's Retry-After
	// included. Default 60 s.
	MaxRetryWait time.Duration
	// Logger receives a warning per retry. Default: discard.
	Logger *slog.Logger
	// OnRetry, when set, is called before each retry (for metrics).
	OnRetry func(model.RetryInfo)
}

// Model is a model.Model for the Messages API.
type Model struct {
	cfg      Config
	svc      sdk.MessageService
	policy   provider.Policy
	settings provider.Settings
}

const name = "anthropic"

// New returns a Model for cfg.
func New(cfg Config) (*Model, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("%s: no model name (use --model anthropic:NAME)", name)
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%s: no API key: set ANTHROPIC_API_KEY", name)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	m := &Model{cfg: cfg}
	m.settings = provider.Settings{Provider: name, Model: cfg.Model, BaseURL: cfg.BaseURL, KeySetting: "ANTHROPIC_API_KEY", BaseURLSetting: "ANTHROPIC_BASE_URL"}
	m.policy = provider.NewPolicy(name, cfg.MaxRetries, cfg.RetryBaseDelay, cfg.MaxRetryWait, cfg.Logger, cfg.OnRetry)
	m.policy.Classify = m.classify
	// The service is built from explicit options only (no sdk.NewClient),
	// so the SDK reads no environment variables or credential files.
	m.svc = sdk.NewMessageService(
		option.WithBaseURL(cfg.BaseURL+"/"),
		option.WithHTTPClient(provider.Client(cfg.HTTPClient)),
		option.WithMaxRetries(0),
		option.WithAPIKey(cfg.APIKey),
		// The SDK sends the key as a bearer token; the Messages API's
		// documented header is x-api-key, which proxies and compatible
		// servers check. Send both.
		option.WithHeader("x-api-key", cfg.APIKey),
	)
	return m, nil
}

// Name is "anthropic:MODEL".
func (m *Model) Name() string { return name + ":" + m.cfg.Model }

// Stream sends req and returns the reply stream once the server has
// answered with a success status. Failures before that (429, 5xx, no
// connection) are retried per Config; the error returned is a
// *model.Error, or wraps ctx's error when ctx ended first.
func (m *Model) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	p, err := params(m.cfg.Model, m.cfg.MaxTokens, req)
	if err != nil {
		return nil, &model.Error{Provider: name, Message: "cannot build the request: " + err.Error(), Err: err}
	}
	var s *stream
	err = m.policy.Do(ctx, func(actx context.Context) error {
		st := m.svc.NewStreaming(actx, p)
		if err := st.Err(); err != nil {
			_ = st.Close()
			return err
		}
		s = newStream(actx, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (m *Model) classify(status int, err error) *model.Error {
	var apiErr *sdk.Error
	detail := ""
	if errors.As(err, &apiErr) {
		if status == 0 {
			status = apiErr.StatusCode
		}
		detail = apiErr.Message
		if t := string(apiErr.Type()); t != "" && detail != "" {
			detail = t + ": " + detail
		}
	}
	return m.settings.Classify(status, detail, err)
}
