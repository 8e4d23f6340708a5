// Package spans is where Rein's OpenTelemetry spans are shaped: the span
// of a run, and the spans of the agent loop's model requests and tool calls
// in the GenAI semantic conventions. The sessions service and the server
// start their spans through it, so the names and attributes an operator's
// trace backend sees are defined in this one file, and follow the
// conventions (still evolving) in one place.
//
// It imports only the OpenTelemetry API, never the SDK or an exporter:
// a program that embeds Rein pays for tracing only when it passes a real
// TracerProvider (package telemetry builds one from the environment). No
// global provider is used: every tracer comes from a provider passed in.
package spans

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
)

// TracerName is the instrumentation scope of every span Rein makes.
const TracerName = "github.com/reinhq/rein"

// Run is the name of a run's span.
const Run = "rein.run"

// Attribute keys of Rein's own (the rein.* namespace) and of the
// conventions it follows.
const (
	AttrSessionID  = attribute.Key("rein.session.id")
	AttrRunID      = attribute.Key("rein.run.id")
	AttrAgent      = attribute.Key("rein.agent")
	AttrStatus     = attribute.Key("rein.run.status")
	AttrReason     = attribute.Key("rein.run.reason")
	AttrAttempt    = attribute.Key("rein.run.attempt")
	AttrParked     = attribute.Key("rein.run.parked")
	AttrStep       = attribute.Key("rein.step")
	AttrStopped    = attribute.Key("rein.stopped")
	AttrOperation  = attribute.Key("gen_ai.operation.name")
	AttrProvider   = attribute.Key("gen_ai.provider.name")
	AttrModel      = attribute.Key("gen_ai.request.model")
	AttrFinish     = attribute.Key("gen_ai.response.finish_reasons")
	AttrInputToks  = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputToks = attribute.Key("gen_ai.usage.output_tokens")
	AttrToolName   = attribute.Key("gen_ai.tool.name")
	AttrToolCallID = attribute.Key("gen_ai.tool.call.id")
	AttrToolType   = attribute.Key("gen_ai.tool.type")
	AttrErrorType  = attribute.Key("error.type")
)

// Enabled reports whether tp can record spans: false for nil and for the
// OpenTelemetry no-op provider (what telemetry.FromEnv returns when tracing
// is off), so callers skip the work entirely.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	switch tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return false
	}
	return true
}

// Tracer returns Rein's tracer from tp; nil gives a no-op tracer.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// TraceID is the hex trace id of the span in ctx, "" when there is none
// (tracing off): the trace_id of log lines.
func TraceID(ctx context.Context) string {
	return SpanTraceID(trace.SpanFromContext(ctx))
}

// SpanTraceID is the hex trace id of span, "" when it has none.
func SpanTraceID(span trace.Span) string {
	if span == nil {
		return ""
	}
	sc := span.SpanContext()
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// RunStart describes a run that begins to execute.
type RunStart struct {
	Session rein.SessionKey
	RunID   string
	// Attempt is 1 for a run's first execution and 2, 3, … for resumes
	// after its instance was lost.
	Attempt int
	// Admitted is the span that admitted the run (the HTTP request that
	// sent its user.message), linked from the run's span; invalid for a run
	// taken up after a restart or by another instance.
	Admitted trace.SpanContext
}

// StartRun starts a run's span. It is the root of its own trace: a run
// outlives the request that admitted it, so it is linked to that request's
// span rather than made its child.
func StartRun(ctx context.Context, tr trace.Tracer, r RunStart) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			AttrSessionID.String(r.Session.ID),
			AttrRunID.String(r.RunID),
			AttrAttempt.Int(r.Attempt),
		),
	}
	if r.Admitted.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: r.Admitted}))
	}
	return tr.Start(ctx, Run, opts...)
}

// SetAgent records the configured agent a run runs with.
func SetAgent(span trace.Span, name string) {
	span.SetAttributes(AttrAgent.String(name))
}

// EndRun ends a run's span with how the run ended. errText is the error
// of a FAILED run (it becomes the span's error status).
func EndRun(span trace.Span, status rein.RunStatus, reason rein.Reason, errText string) {
	span.SetAttributes(AttrStatus.String(string(status)), AttrReason.String(string(reason)))
	if status == rein.StatusFailed {
		span.SetStatus(codes.Error, errText)
	}
	span.End()
}

// EndParked ends the span of a run's execution that parked waiting for
// confirmations: the run is not over (a later execution, with a span of
// its own, takes it up once an answer comes).
func EndParked(span trace.Span) {
	span.SetAttributes(AttrStatus.String(string(rein.StatusRunning)), AttrParked.Bool(true))
	span.End()
}

// EndUnrecorded ends the span of a run's execution whose end could not be
// written: the run stays RUNNING in the store, and whoever recovers it
// finishes it.
func EndUnrecorded(span trace.Span, err error) {
	span.SetAttributes(AttrStatus.String(string(rein.StatusRunning)))
	span.SetStatus(codes.Error, "the run's end was not recorded: "+err.Error())
	span.End()
}

// EndAbandoned ends the span of a run whose turn lease was lost: this
// instance stopped executing it, whoever holds the turn now takes it up.
func EndAbandoned(span trace.Span) {
	span.SetAttributes(AttrStatus.String(string(rein.StatusRunning)))
	span.SetStatus(codes.Error, "turn lease lost")
	span.End()
}

// Agent is an agent.Observer that makes the loop's spans, as children of
// the span in the run's context: one "chat {model}" span per model request
// and one "execute_tool {name}" span per tool execution, in the GenAI
// semantic conventions.
type Agent struct {
	Tracer trace.Tracer
}

var _ agent.Observer = Agent{}

// ModelRequestStarted implements agent.Observer.
func (a Agent) ModelRequestStarted(ctx context.Context, r agent.ModelRequest) context.Context {
	provider, name := SplitModel(r.Model)
	attrs := []attribute.KeyValue{
		AttrOperation.String("chat"),
		AttrModel.String(name),
		AttrStep.Int(r.Step),
	}
	if provider != "" {
		attrs = append(attrs, AttrProvider.String(provider))
	}
	ctx, _ = a.Tracer.Start(ctx, "chat "+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx
}

// ModelRequestEnded implements agent.Observer.
func (a Agent) ModelRequestEnded(ctx context.Context, r agent.ModelResponse) {
	span := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{
		AttrInputToks.Int64(r.Usage.InputTokens),
		AttrOutputToks.Int64(r.Usage.OutputTokens),
	}
	if r.Finish != "" {
		attrs = append(attrs, AttrFinish.StringSlice([]string{r.Finish}))
	}
	if r.Stopped {
		attrs = append(attrs, AttrStopped.Bool(true))
	}
	span.SetAttributes(attrs...)
	if r.Err != nil {
		span.SetAttributes(AttrErrorType.String("model_error"))
		span.SetStatus(codes.Error, r.Err.Error())
	}
	span.End()
}

// ToolCallStarted implements agent.Observer.
func (a Agent) ToolCallStarted(ctx context.Context, c agent.ToolCall) context.Context {
	ctx, _ = a.Tracer.Start(ctx, "execute_tool "+c.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		AttrOperation.String("execute_tool"),
		AttrToolName.String(c.Name),
		AttrToolCallID.String(c.ID),
		AttrToolType.String("function"),
		AttrStep.Int(c.Step),
	))
	return ctx
}

// ToolCallEnded implements agent.Observer. The span never carries the
// tool's input or output: they can hold anything the user or the model
// wrote.
func (a Agent) ToolCallEnded(ctx context.Context, r agent.ToolResult) {
	span := trace.SpanFromContext(ctx)
	if r.Stopped {
		span.SetAttributes(AttrStopped.Bool(true))
	}
	if r.IsError {
		span.SetAttributes(AttrErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "the tool call returned an error result")
	}
	span.End()
}

// SplitModel splits a configured model name ("openai:gpt-4o-mini") into
// the GenAI provider name and the model's own name ("gpt-4o-mini"). A
// model that is no provider's (scripted, demo) has no provider name and
// keeps its whole name.
func SplitModel(name string) (provider, model string) {
	p, m, ok := strings.Cut(name, ":")
	if !ok {
		return "", name
	}
	switch p {
	case "openai", "anthropic", "ollama":
		return p, m
	}
	return "", name
}
