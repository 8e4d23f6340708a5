package spans_test

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/reinhq/rein/telemetry/spans"
)

func TestSplitModel(t *testing.T) {
	for _, tc := range []struct{ name, provider, model string }{
		{"openai:gpt-4o-mini", "openai", "gpt-4o-mini"},
		{"anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"},
		{"ollama:llama3.2", "ollama", "llama3.2"},
		{"scripted:testdata/x.yaml", "", "scripted:testdata/x.yaml"},
		{"demo", "", "demo"},
	} {
		if p, m := spans.SplitModel(tc.name); p != tc.provider || m != tc.model {
			t.Errorf("SplitModel(%q) = %q, %q; want %q, %q", tc.name, p, m, tc.provider, tc.model)
		}
	}
}

func TestEnabled(t *testing.T) {
	if spans.Enabled(nil) || spans.Enabled(noop.NewTracerProvider()) {
		t.Error("nil or no-op provider counted as tracing")
	}
	if !spans.Enabled(sdktrace.NewTracerProvider()) {
		t.Error("an SDK provider not counted as tracing")
	}
	if spans.TraceID(t.Context()) != "" {
		t.Error("a trace id without a span")
	}
}
