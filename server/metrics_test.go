package server_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/server"
)

func TestModelRetriesAreCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := server.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ModelRetry(model.RetryInfo{Provider: "openai", Attempt: 1, Status: 429})
	m.ModelRetry(model.RetryInfo{Provider: "openai", Attempt: 2, Status: 429})
	m.ModelRetry(model.RetryInfo{Provider: "anthropic", Attempt: 1})
	want := `
# HELP rein_model_retries_total Model requests retried before their first streamed byte, by provider and the failed attempt's HTTP status (0: no response).
# TYPE rein_model_retries_total counter
rein_model_retries_total{provider="anthropic",status="0"} 1
rein_model_retries_total{provider="openai",status="429"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "rein_model_retries_total"); err != nil {
		t.Fatal(err)
	}
}
