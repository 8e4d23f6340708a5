// Package openai is Rein's model provider for the OpenAI Chat Completions
// API and for the many servers that speak it: Ollama, vLLM, llama.cpp's
// server, LM Studio. It is built on the official SDK
// (github.com/openai/openai-go/v3) for the wire format, and keeps for
// itself what Rein promises about a model request: retries only before
// the stream starts (429 and 5xx, honouring Retry-After), a stream that
// stops the moment its context is cancelled, and errors that name the
// setting to fix.
//
// Streaming: text deltas are passed on as they arrive; tool calls, whose
// arguments arrive in pieces and, for parallel calls, interleaved by index,
// are assembled and passed on when the model finishes; then usage (the
// request asks for it with stream_options.include_usage) and the finish
// reason. A stream that ends without a finish reason, breaks, or carries a
// line that is not valid is an error, never a short reply.
//
// See docs/models.md for configuration and model/internal/provider for the
// rules both HTTP providers share.
package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// OllamaBaseURL is where a local Ollama serves its OpenAI-compatible API.
const OllamaBaseURL = "http://127.0.0.1:11434/v1"

// Config configures a Model. Nothing is read from the environment: the
// caller (the catalog, for the command line) passes every setting in.
type Config struct {
	// Model is the model name the server knows, e.g. "gpt-4o" or
	// "llama3.2". Required.
	Model string
	// APIKey is sent as a bearer token. Required for the OpenAI API;
	// optional for other servers (local ones usually need none).
	APIKey string
	// BaseURL is the API root, e.g. "http://127.0.0.1:8000/v1" for vLLM.
	// Default DefaultBaseURL.
	BaseURL string
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
	// Provider names this model in Name(), logs and errors: "openai"
	// (default) or "ollama", which also changes the advice errors give.
	Provider string
}

// Model is a model.Model for a Chat Completions server.
type Model struct {
	cfg      Config
	svc      oai.ChatCompletionService
	policy   provider.Policy
	settings provider.Settings
	official bool
}

// New returns a Model for cfg.
func New(cfg Config) (*Model, error) {
	if cfg.Provider == "" {
		cfg.Provider = "openai"
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("%s: no model name (use --model %s:NAME)", cfg.Provider, cfg.Provider)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	official := cfg.BaseURL == DefaultBaseURL
	if official && cfg.APIKey == "" {
		return nil, fmt.Errorf("%s: no API key for %s: set OPENAI_API_KEY (or OPENAI_BASE_URL for a server that needs no key)", cfg.Provider, cfg.BaseURL)
	}
	m := &Model{cfg: cfg, official: official}
	m.settings = provider.Settings{Provider: cfg.Provider, Model: cfg.Model, BaseURL: cfg.BaseURL, KeySetting: "OPENAI_API_KEY", BaseURLSetting: "OPENAI_BASE_URL"}
	if cfg.Provider == "ollama" {
		m.settings.KeySetting, m.settings.BaseURLSetting = "", ""
		m.settings.NotFoundHint = fmt.Sprintf("pull it first: ollama pull %s", cfg.Model)
		m.settings.UnreachableHint = "is Ollama running? (ollama serve)"
	}
	m.policy = provider.NewPolicy(cfg.Provider, cfg.MaxRetries, cfg.RetryBaseDelay, cfg.MaxRetryWait, cfg.Logger, cfg.OnRetry)
	m.policy.Classify = m.classify
	opts := []option.RequestOption{
		// The service is built from explicit options only (no
		// oai.NewClient), so the SDK reads no environment variables.
		option.WithBaseURL(cfg.BaseURL + "/"),
		option.WithHTTPClient(provider.Client(cfg.HTTPClient)),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	m.svc = oai.NewChatCompletionService(opts...)
	return m, nil
}

// Name is "openai:MODEL" (or "ollama:MODEL").
func (m *Model) Name() string { return m.cfg.Provider + ":" + m.cfg.Model }

// Stream sends req and returns the reply stream once the server has
// answered with a success status. Failures before that (429, 5xx, no
// connection) are retried per Config; the error returned is a
// *model.Error, or wraps ctx's error when ctx ended first.
func (m *Model) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	p, err := params(m.cfg.Model, m.official, req)
	if err != nil {
		return nil, &model.Error{Provider: m.cfg.Provider, Message: "cannot build the request: " + err.Error(), Err: err}
	}
	var s *stream
	err = m.policy.Do(ctx, func(actx context.Context) error {
		sdk := m.svc.NewStreaming(actx, p)
		if err := sdk.Err(); err != nil {
			_ = sdk.Close()
			return err
		}
		s = newStream(actx, m.cfg.Provider, sdk)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// classify explains a failed attempt; status comes from the transport,
// the detail from the API's error body when the SDK could decode it.
func (m *Model) classify(status int, err error) *model.Error {
	var apiErr *oai.Error
	detail := ""
	if errors.As(err, &apiErr) {
		if status == 0 {
			status = apiErr.StatusCode
		}
		detail = apiErr.Message
	}
	return m.settings.Classify(status, detail, err)
}
