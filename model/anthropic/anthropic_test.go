package anthropic_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/anthropic"
	"github.com/reinhq/rein/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newModel(t *testing.T, o modeltest.Options) model.Model {
	t.Helper()
	m, err := anthropic.New(anthropic.Config{
		Model: o.Model, APIKey: o.APIKey, BaseURL: o.BaseURL, HTTPClient: o.HTTPClient,
		MaxRetries: o.MaxRetries, RetryBaseDelay: o.RetryBaseDelay, MaxRetryWait: o.MaxRetryWait, OnRetry: o.OnRetry,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConformance(t *testing.T) {
	wires, err := modeltest.LoadWires("testdata")
	if err != nil {
		t.Fatal(err)
	}
	modeltest.Run(t, modeltest.Provider{
		Name:           "anthropic",
		New:            newModel,
		Wires:          wires,
		Path:           "/v1/messages",
		KeySetting:     "ANTHROPIC_API_KEY",
		BaseURLSetting: "ANTHROPIC_BASE_URL",
	})
}
