package openai_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/modeltest"
	"github.com/reinhq/rein/model/openai"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newModel(t *testing.T, o modeltest.Options) model.Model {
	t.Helper()
	m, err := openai.New(openai.Config{
		Model: o.Model, APIKey: o.APIKey, BaseURL: o.BaseURL + "/v1", HTTPClient: o.HTTPClient,
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
		Name:           "openai",
		New:            newModel,
		Wires:          wires,
		Path:           "/v1/chat/completions",
		KeySetting:     "OPENAI_API_KEY",
		BaseURLSetting: "OPENAI_BASE_URL",
	})
}
