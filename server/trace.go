package server

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein/telemetry/spans"
)

// One span per HTTP request (health checks and scrapes aside), in the HTTP
// semantic conventions, when the server has a TracerProvider. A caller's W3C traceparent header is
// honoured, so a request traced by a proxy or a client continues its trace.
// The span is in the request's context: a run the request admits links to
// it (its own span outlives the request).

// tracing is the server's tracer; nil when tracing is off.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider) *tracing {
	if !spans.Enabled(tp) {
		return nil
	}
	return &tracing{tracer: spans.Tracer(tp), prop: propagation.TraceContext{}}
}

// start begins the request's span; the route is not known yet (the span is
// named once it is).
func (t *tracing) start(r *http.Request) (*http.Request, trace.Span) {
	if t == nil {
		return r, nil
	}
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
		// Probes and scrapes every few seconds would bury the requests
		// that matter (their log lines are debug for the same reason).
		return r, nil
	}
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	ctx, span := t.tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("url.scheme", scheme),
	))
	return r.WithContext(ctx), span
}

// end names the span after its route pattern ("POST /api/sessions/{id}/events";
// the method alone when no route matched) and ends it with the status.
func (t *tracing) end(span trace.Span, method, route string, status int) {
	if span == nil {
		return
	}
	if strings.HasPrefix(route, "/") && !strings.Contains(route, " ") {
		span.SetName(method + " " + route)
		span.SetAttributes(attribute.String("http.route", route))
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		// A server span is an error only when the server failed; a 4xx is
		// the client's.
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// traceID is the trace id of the request's span for its log line ("" when
// tracing is off).
func traceID(span trace.Span) string { return spans.SpanTraceID(span) }
