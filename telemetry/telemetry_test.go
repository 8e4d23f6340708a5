package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/telemetry"
	"github.com/reinhq/rein/telemetry/spans"
)

// collector is a fake OTLP/HTTP receiver that keeps what it was sent.
type collector struct {
	mu   sync.Mutex
	reqs []received
	ts   *httptest.Server
}

type received struct {
	path, contentType, apiKey string
	body                      string
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.reqs = append(c.reqs, received{path: r.URL.Path, contentType: r.Header.Get("Content-Type"), apiKey: r.Header.Get("X-Api-Key"), body: string(b)})
		c.mu.Unlock()
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.ts.Close)
	return c
}

func (c *collector) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.reqs...)
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// emit makes one run span through tp and shuts the provider down, which
// flushes what it batched.
func emit(t *testing.T, env map[string]string) {
	t.Helper()
	ctx := context.Background()
	tp, shutdown, err := telemetry.FromEnv(ctx, envOf(env), "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	_, span := spans.StartRun(ctx, spans.Tracer(tp), spans.RunStart{Session: rein.SessionKey{Owner: "o", ID: "ses_1"}, RunID: "run_1", Attempt: 1})
	spans.EndRun(span, rein.StatusCompleted, rein.ReasonStop, "")
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOffWithoutAnEndpoint(t *testing.T) {
	tp, shutdown, err := telemetry.FromEnv(context.Background(), envOf(nil), "v1")
	if err != nil {
		t.Fatal(err)
	}
	if spans.Enabled(tp) {
		t.Fatal("tracing is on without an endpoint")
	}
	_, span := spans.Tracer(tp).Start(context.Background(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("the provider records spans")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestExportsToTheEndpoint(t *testing.T) {
	c := newCollector(t)
	emit(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": c.ts.URL + "/base/",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-api-key=abc%20def",
		"OTEL_SERVICE_NAME":           "rein-test",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=ci",
	})
	got := c.received()
	if len(got) != 1 {
		t.Fatalf("%d export requests, want 1", len(got))
	}
	r := got[0]
	if r.path != "/base/v1/traces" || r.contentType != "application/json" || r.apiKey != "abc def" {
		t.Errorf("export to %s (%s, key %q)", r.path, r.contentType, r.apiKey)
	}
	for _, want := range []string{`"rein.run"`, `"rein-test"`, `"v1.2.3"`, `"deployment.environment"`, `"run_1"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the export lacks %s: %s", want, r.body)
		}
	}
}

func TestTracesEndpointIsUsedAsItIs(t *testing.T) {
	c := newCollector(t)
	emit(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://127.0.0.1:1/not-this",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": c.ts.URL + "/custom/path",
	})
	got := c.received()
	if len(got) != 1 || got[0].path != "/custom/path" || got[0].contentType != "application/x-protobuf" {
		t.Fatalf("exports %+v, want one protobuf POST to /custom/path", got)
	}
}

func TestDisabledExportsNothing(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_SDK_DISABLED": "true"},
		{"OTEL_TRACES_EXPORTER": "none"},
		{"OTEL_TRACES_SAMPLER": "always_off"},
	} {
		c := newCollector(t)
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = c.ts.URL
		emit(t, env)
		if got := c.received(); len(got) != 0 {
			t.Errorf("%v: %d exports, want none", env, len(got))
		}
	}
}

func TestBadSettingsAreNamed(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4318: want an http:// or https:// URL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER=sometimes"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG=2"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT=soon"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER=zipkin"},
	} {
		_, _, err := telemetry.FromEnv(context.Background(), envOf(tc.env), "v1")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.env, err, tc.want)
		}
	}
}
