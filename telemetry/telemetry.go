// Package telemetry sets up Rein's OpenTelemetry tracing from the standard
// OTEL_* environment variables, so an operator turns traces on the way
// every OpenTelemetry program does: point OTEL_EXPORTER_OTLP_ENDPOINT at a
// collector. Without one, tracing is off and costs nothing.
//
// FromEnv returns a TracerProvider to pass to the sessions service and the
// server (their Config.TracerProvider); it never installs a process-wide
// provider, so several servers in one process (tests) keep theirs apart.
// The spans themselves are shaped in telemetry/spans, which needs only the
// OpenTelemetry API: this package is the one that links the SDK and the
// OTLP exporter.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is the service.name of Rein's spans unless
// OTEL_SERVICE_NAME says otherwise.
const DefaultServiceName = "rein"

// FromEnv builds the tracer provider that the environment asks for, read
// through lookupEnv (os.LookupEnv in `rein serve`):
//
//   - tracing is on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the full URL
//     spans are posted to) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, to
//     which /v1/traces is appended) is set, unless OTEL_SDK_DISABLED=true or
//     OTEL_TRACES_EXPORTER=none;
//   - spans go by OTLP over HTTP (OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL
//     http/protobuf, the default, or http/json), with
//     OTEL_EXPORTER_OTLP[_TRACES]_HEADERS, _TIMEOUT (milliseconds) and
//     _COMPRESSION (gzip or none), in batches;
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler
//     (default parentbased_always_on);
//   - the resource is service.name (OTEL_SERVICE_NAME, default "rein"),
//     service.version (version) and OTEL_RESOURCE_ATTRIBUTES.
//
// When tracing is off it returns a no-op provider and a no-op shutdown.
// The shutdown function flushes the spans still batched and stops the
// exporter; call it after the server has drained. A value it cannot use
// (an unsupported protocol or sampler, a malformed URL) is an error that
// names the variable.
func FromEnv(ctx context.Context, lookupEnv func(string) (string, bool), version string) (trace.TracerProvider, func(context.Context) error, error) {
	env := func(k string) string {
		v, _ := lookupEnv(k)
		return strings.TrimSpace(v)
	}
	off := func(context.Context) error { return nil }
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return noop.NewTracerProvider(), off, nil
	}
	switch exp := strings.ToLower(env("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return noop.NewTracerProvider(), off, nil
	default:
		return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: only otlp (or none) is supported", exp)
	}
	endpoint, err := tracesEndpoint(env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), env("OTEL_EXPORTER_OTLP_ENDPOINT"))
	if err != nil {
		return nil, nil, err
	}
	if endpoint == "" {
		return noop.NewTracerProvider(), off, nil
	}

	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(endpoint)}
	protocol, name := signalValue(env, "PROTOCOL")
	switch protocol {
	case "", "http/protobuf":
		opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf))
	case "http/json":
		opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	default:
		return nil, nil, fmt.Errorf("%s=%s: Rein exports spans by OTLP over HTTP: use http/protobuf or http/json", name, protocol)
	}
	headers, err := parseList(env("OTEL_EXPORTER_OTLP_HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS")
	if err != nil {
		return nil, nil, err
	}
	traceHeaders, err := parseList(env("OTEL_EXPORTER_OTLP_TRACES_HEADERS"), "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
	if err != nil {
		return nil, nil, err
	}
	headers = append(headers, traceHeaders...)
	if len(headers) > 0 {
		h := make(map[string]string, len(headers))
		for _, kv := range headers {
			h[kv[0]] = kv[1] // the traces-specific value, listed later, wins
		}
		opts = append(opts, otlptracehttp.WithHeaders(h))
	}
	if v, name := signalValue(env, "TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, nil, fmt.Errorf("%s=%s: want a positive number of milliseconds", name, v)
		}
		opts = append(opts, otlptracehttp.WithTimeout(time.Duration(ms)*time.Millisecond))
	}
	switch v, name := signalValue(env, "COMPRESSION"); v {
	case "", "none":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	case "gzip":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	default:
		return nil, nil, fmt.Errorf("%s=%s: want gzip or none", name, v)
	}
	sampler, err := samplerFrom(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return nil, nil, err
	}
	res, err := resourceFrom(ctx, env, version)
	if err != nil {
		return nil, nil, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter for %s: %w", endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
	)
	return tp, tp.Shutdown, nil
}

// tracesEndpoint is the URL spans are posted to: the traces endpoint as it
// is, or the base endpoint with /v1/traces appended ("" when neither is
// set).
func tracesEndpoint(traces, base string) (string, error) {
	name, raw := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces
	if raw == "" {
		name, raw = "OTEL_EXPORTER_OTLP_ENDPOINT", base
	}
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%s: want an http:// or https:// URL", name, raw)
	}
	if traces == "" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// signalValue is OTEL_EXPORTER_OTLP_TRACES_<key>, else
// OTEL_EXPORTER_OTLP_<key>, lower-cased, and the name of the variable it
// came from (for errors).
func signalValue(env func(string) string, key string) (string, string) {
	name := "OTEL_EXPORTER_OTLP_TRACES_" + key
	if v := env(name); v != "" {
		return strings.ToLower(v), name
	}
	name = "OTEL_EXPORTER_OTLP_" + key
	return strings.ToLower(env(name)), name
}

// parseList parses the key=value,key=value lists of OTEL_*_HEADERS and
// OTEL_RESOURCE_ATTRIBUTES (values percent-encoded), in order.
func parseList(s, name string) ([][2]string, error) {
	var out [][2]string
	if s == "" {
		return nil, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", name, item)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%s: the value of %q: %v", name, k, err)
		}
		out = append(out, [2]string{k, dv})
	}
	return out, nil
}

// samplerFrom is the sampler OTEL_TRACES_SAMPLER names.
func samplerFrom(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: want a ratio between 0 and 1", arg)
		}
		return r, nil
	}
	switch strings.ToLower(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.TraceIDRatioBased(r), nil
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%s: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// resourceFrom describes this process to the trace backend. It reads
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES through env, not the
// SDK's own environment detector, so FromEnv's caller decides what the
// environment is.
func resourceFrom(ctx context.Context, env func(string) string, version string) (*resource.Resource, error) {
	extra, err := parseList(env("OTEL_RESOURCE_ATTRIBUTES"), "OTEL_RESOURCE_ATTRIBUTES")
	if err != nil {
		return nil, err
	}
	attrs := make([]attribute.KeyValue, 0, len(extra)+2)
	for _, kv := range extra {
		attrs = append(attrs, attribute.String(kv[0], kv[1]))
	}
	service := DefaultServiceName
	if v := env("OTEL_SERVICE_NAME"); v != "" {
		service = v
	} else {
		for _, kv := range extra {
			if kv[0] == "service.name" {
				service = kv[1]
			}
		}
	}
	attrs = append(attrs, attribute.String("service.name", service))
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	return resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
}
