// Package catalog turns a model name from the command line or a config
// file (`--model openai:gpt-4o`) into a model.Model. It is the one place
// that knows the accepted forms and which environment settings each
// provider reads, so that `rein serve`, `rein chat` and tests resolve a
// name the same way and fail with the same helpful message.
//
// The environment is passed in (Env.Getenv), never read from the process,
// so tests and embedders decide what a provider sees.
package catalog

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/anthropic"
	"github.com/reinhq/rein/model/openai"
	"github.com/reinhq/rein/model/scripted"
)

// Env is what a provider may read from its surroundings.
type Env struct {
	// Getenv looks up an environment variable ("" when unset). Nil means
	// every variable is unset.
	Getenv func(string) string
	// Logger receives the providers' retry warnings. Nil discards.
	Logger *slog.Logger
	// OnRetry is called on every retry of a model request (for metrics).
	OnRetry func(model.RetryInfo)
	// HTTPClient, when set, makes the HTTP providers' requests.
	HTTPClient *http.Client
}

func (e Env) get(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return strings.TrimSpace(e.Getenv(k))
}

// Forms lists the accepted model names, for help texts and errors.
const Forms = `demo | scripted:PATH | openai:NAME | ollama:NAME | anthropic:NAME`

// Open resolves spec:
//
//	demo            the offline demo model (scripted.Demo)
//	scripted:PATH   a script file (docs/models.md)
//	openai:NAME     OpenAI Chat Completions, or any compatible server:
//	                OPENAI_API_KEY (needed unless OPENAI_BASE_URL is set),
//	                OPENAI_BASE_URL (default https://api.openai.com/v1)
//	ollama:NAME     a local Ollama at http://127.0.0.1:11434/v1, no key
//	anthropic:NAME  Anthropic Messages: ANTHROPIC_API_KEY (required),
//	                ANTHROPIC_BASE_URL (default https://api.anthropic.com)
//
// An error says what to fix in one message, which is its whole text: it is
// an invalid_argument error (rein.CodeOf, errors.As into a *rein.Error
// with that message), and an unknown form also matches
// model.ErrUnknownModel and lists the accepted forms.
func Open(spec string, env Env) (model.Model, error) {
	spec = strings.TrimSpace(spec)
	if spec == "demo" {
		return scripted.Demo(), nil
	}
	kind, name, ok := strings.Cut(spec, ":")
	if !ok {
		return nil, unknown(spec)
	}
	if strings.TrimSpace(name) == "" {
		return nil, nameErrorf(false, "model %q: missing the name after %q (accepted forms: %s)", spec, kind+":", Forms)
	}
	switch kind {
	case "scripted":
		m, err := scripted.Open(name)
		if err != nil {
			return nil, err
		}
		return m, nil
	case "openai":
		key, base := env.get("OPENAI_API_KEY"), env.get("OPENAI_BASE_URL")
		if key == "" && base == "" {
			return nil, nameErrorf(false, "model %q: OPENAI_API_KEY is not set (set it to your OpenAI key, or set OPENAI_BASE_URL to an OpenAI-compatible server such as vLLM or llama.cpp that needs no key; for Ollama use --model ollama:%s)", spec, name)
		}
		return openai.New(openai.Config{
			Model: name, APIKey: key, BaseURL: base,
			HTTPClient: env.HTTPClient, Logger: env.Logger, OnRetry: env.OnRetry,
		})
	case "ollama":
		return openai.New(openai.Config{
			Model: name, BaseURL: openai.OllamaBaseURL, Provider: "ollama",
			HTTPClient: env.HTTPClient, Logger: env.Logger, OnRetry: env.OnRetry,
		})
	case "anthropic":
		key := env.get("ANTHROPIC_API_KEY")
		if key == "" {
			return nil, nameErrorf(false, "model %q: ANTHROPIC_API_KEY is not set (set it to your Anthropic key)", spec)
		}
		return anthropic.New(anthropic.Config{
			Model: name, APIKey: key, BaseURL: env.get("ANTHROPIC_BASE_URL"),
			HTTPClient: env.HTTPClient, Logger: env.Logger, OnRetry: env.OnRetry,
		})
	}
	return nil, unknown(spec)
}

func unknown(spec string) error {
	if spec == "" {
		return nameErrorf(true, "no model named: accepted forms are %s", Forms)
	}
	hint := ""
	if !strings.Contains(spec, ":") && !strings.ContainsAny(spec, " /\\") {
		// A bare provider model name: say how to ask for it.
		hint = fmt.Sprintf(" (for a provider's model say which: openai:%s, ollama:%s or anthropic:%s)", spec, spec, spec)
	}
	return nameErrorf(true, "unknown model %q: accepted forms are %s%s", spec, Forms, hint)
}

// nameError is a model name Open cannot use. Its text is the one message
// for people; it unwraps to an invalid_argument *rein.Error with that same
// message (for rein.CodeOf, errors.Is and the HTTP error body), and an
// unknown form to model.ErrUnknownModel too. Wrapping the sentinel with
// rein.Errorf instead would print its text again after the message.
type nameError struct {
	msg     string
	unknown bool
}

func nameErrorf(unknown bool, format string, args ...any) error {
	return &nameError{msg: fmt.Sprintf(format, args...), unknown: unknown}
}

func (e *nameError) Error() string { return e.msg }

func (e *nameError) Unwrap() []error {
	errs := []error{&rein.Error{Code: rein.CodeInvalidArgument, Message: e.msg}}
	if e.unknown {
		errs = append(errs, model.ErrUnknownModel)
	}
	return errs
}

// knownPrices are list prices of common models, in USD per million tokens
// (input, output), as their providers publish them. A configuration's
// `models` map overrides them; a model missing here has no price unless the
// configuration gives one.
var knownPrices = map[string]model.Price{
	"openai:gpt-4o":                     {InputPerMTok: 2.5, OutputPerMTok: 10},
	"openai:gpt-4o-mini":                {InputPerMTok: 0.15, OutputPerMTok: 0.6},
	"openai:gpt-4.1":                    {InputPerMTok: 2, OutputPerMTok: 8},
	"openai:gpt-4.1-mini":               {InputPerMTok: 0.4, OutputPerMTok: 1.6},
	"openai:gpt-4.1-nano":               {InputPerMTok: 0.1, OutputPerMTok: 0.4},
	"anthropic:claude-sonnet-4-5":       {InputPerMTok: 3, OutputPerMTok: 15},
	"anthropic:claude-haiku-4-5":        {InputPerMTok: 1, OutputPerMTok: 5},
	"anthropic:claude-opus-4-1":         {InputPerMTok: 15, OutputPerMTok: 75},
	"anthropic:claude-3-5-haiku-latest": {InputPerMTok: 0.8, OutputPerMTok: 4},
}

// Price is the built-in price of the model named spec (an Open name), if
// the catalog knows one. Local models (ollama:, scripted:, demo) have none.
func Price(spec string) (model.Price, bool) {
	p, ok := knownPrices[strings.TrimSpace(spec)]
	return p, ok
}
