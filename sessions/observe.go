package sessions

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/telemetry/spans"
)

// What an operator sees of a run: one log line per lifecycle step (the
// keys are listed in docs/operations.md), its spans when a TracerProvider
// is configured, and its measurements through Config.Observer. Nothing
// here logs a message's text or a tool's input or output: only ids,
// names, counts and durations.

// probe is every run's agent.Observer: it feeds the service's Observer
// (metrics) and, with tracing on, makes the loop's GenAI spans. One value
// serves all runs: what differs per run travels in the context.
type probe struct {
	s     *Service
	spans spans.Agent
}

func (p *probe) ModelRequestStarted(ctx context.Context, r agent.ModelRequest) context.Context {
	if p.s.tracing {
		return p.spans.ModelRequestStarted(ctx, r)
	}
	return ctx
}

func (p *probe) ModelRequestEnded(ctx context.Context, r agent.ModelResponse) {
	p.s.cfg.Observer.ModelRequest(r)
	if p.s.tracing {
		p.spans.ModelRequestEnded(ctx, r)
	}
	if p.s.log.Enabled(ctx, slog.LevelDebug) {
		p.s.runLog(slog.LevelDebug, "model request", r.Session, r.RunID, spans.TraceID(ctx),
			slog.String("model", r.Model), slog.Int("step", r.Step), slog.Duration("duration", r.Duration),
			slog.Duration("first_delta", r.FirstDelta), slog.Int64("input_tokens", r.Usage.InputTokens),
			slog.Int64("output_tokens", r.Usage.OutputTokens), slog.String("finish", r.Finish),
			slog.Int("tool_calls", r.ToolCalls), slog.Bool("failed", r.Err != nil), slog.Bool("stopped", r.Stopped))
	}
}

func (p *probe) ToolCallStarted(ctx context.Context, c agent.ToolCall) context.Context {
	if p.s.tracing {
		return p.spans.ToolCallStarted(ctx, c)
	}
	return ctx
}

func (p *probe) ToolCallEnded(ctx context.Context, r agent.ToolResult) {
	p.s.cfg.Observer.ToolCall(r)
	if p.s.tracing {
		p.spans.ToolCallEnded(ctx, r)
	}
	if p.s.log.Enabled(ctx, slog.LevelDebug) {
		p.s.runLog(slog.LevelDebug, "tool call", r.Session, r.RunID, spans.TraceID(ctx),
			slog.String("tool", r.Name), slog.String("tool_use_id", r.ID), slog.Int("step", r.Step),
			slog.Duration("duration", r.Duration), slog.Bool("is_error", r.IsError), slog.Bool("stopped", r.Stopped))
	}
}

// runLog logs one line about a run: its session and id first, then its
// trace id when it has one, then attrs.
func (s *Service) runLog(level slog.Level, msg string, key rein.SessionKey, runID, traceID string, attrs ...slog.Attr) {
	ctx := context.Background()
	if !s.log.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, 3+len(attrs))
	all = append(all, slog.String("session", key.String()), slog.String("run", runID))
	if traceID != "" {
		all = append(all, slog.String("trace_id", traceID))
	}
	s.log.LogAttrs(ctx, level, msg, append(all, attrs...)...)
}

// logAdmitted logs an admission; its trace id is the admitting request's.
func (s *Service) logAdmitted(ctx context.Context, a admission, req MessageRequest) {
	attrs := []slog.Attr{slog.String("status", string(a.rec.Status)), slog.String("when_busy", string(req.WhenBusy))}
	if a.target != "" {
		attrs = append(attrs, slog.String("stops", a.target))
	}
	if req.Timeout > 0 {
		attrs = append(attrs, slog.Duration("timeout", req.Timeout))
	}
	s.runLog(slog.LevelInfo, "run admitted", a.rec.Key(), a.rec.ID, spans.TraceID(ctx), attrs...)
}

// runStarted begins a run's execution here: its span (with tracing on),
// returned in ctx so the loop's spans are its children, its log line —
// started, resumed after an instance was lost, or unparked — and, for a
// first start, its queue wait.
func (s *Service) runStarted(ctx context.Context, lr *liveRun, rec *store.RunRecord, attempt int) context.Context {
	lr.mu.Lock()
	link, unparked := lr.link, lr.unparked
	lr.mu.Unlock()
	n := max(attempt, 1)
	if unparked {
		n = rec.Resumes + 1
	}
	traceID := ""
	if s.tracing {
		var span trace.Span
		ctx, span = spans.StartRun(ctx, s.tracer, spans.RunStart{Session: rec.Key(), RunID: rec.ID, Attempt: n, Admitted: link})
		traceID = spans.SpanTraceID(span)
		lr.mu.Lock()
		lr.span, lr.traceID = span, traceID
		lr.mu.Unlock()
	}
	switch {
	case unparked:
		s.runLog(slog.LevelInfo, "run unparked", rec.Key(), rec.ID, traceID, slog.Int("attempt", n))
	case attempt >= 2:
		s.runLog(slog.LevelInfo, "run resumed", rec.Key(), rec.ID, traceID, slog.Int("attempt", n))
	default:
		wait := max(rec.StartedAt.Sub(rec.CreatedAt), 0)
		s.cfg.Observer.QueueWait(wait)
		s.runLog(slog.LevelInfo, "run started", rec.Key(), rec.ID, traceID, slog.Int("attempt", n), slog.Duration("queue_wait", wait))
	}
	return ctx
}

// logEnd logs a run's recorded end (rec is its terminal record): "run
// failed" at level error with the error, else "run ended".
func (s *Service) logEnd(rec *store.RunRecord, traceID string) {
	attrs := []slog.Attr{
		slog.String("status", string(rec.Status)), slog.String("reason", string(rec.Reason)),
		slog.Duration("duration", max(rec.EndedAt.Sub(rec.CreatedAt), 0)),
		slog.Int64("input_tokens", rec.Usage.InputTokens), slog.Int64("output_tokens", rec.Usage.OutputTokens),
	}
	if rec.RolledBack {
		attrs = append(attrs, slog.Bool("rolled_back", true))
	}
	if rec.Status == rein.StatusFailed {
		attrs = append(attrs, slog.String("error", rec.Error))
		s.runLog(slog.LevelError, "run failed", rec.Key(), rec.ID, traceID, attrs...)
		return
	}
	s.runLog(slog.LevelInfo, "run ended", rec.Key(), rec.ID, traceID, attrs...)
}

// observeClaim reports what a schedule write did besides starting a run:
// tool calls it answered in doubt, and a parked run taken up or ended.
func (s *Service) observeClaim(key rein.SessionKey, c claim) {
	for _, call := range c.inDoubt {
		s.runLog(slog.LevelWarn, "tool call in doubt", key, c.inDoubtRun, "",
			slog.String("tool", call.Name), slog.String("tool_use_id", call.ID))
	}
	if !c.unparked {
		return
	}
	s.cfg.Observer.RunUnparked()
	if c.from == s.cfg.Instance {
		for {
			n := s.parked.Load()
			if n <= 0 || s.parked.CompareAndSwap(n, n-1) {
				break
			}
		}
	}
}

// endSpan ends the run's span with end, once: later calls do nothing.
func (lr *liveRun) endSpan(end func(trace.Span)) {
	lr.mu.Lock()
	span := lr.span
	lr.span = nil
	lr.mu.Unlock()
	if span != nil {
		end(span)
	}
}

// countParked counts, among active (the store's RUNNING and QUEUED runs),
// those this instance ran last that no one executes now: runs it parked
// waiting for confirmations (and, for a moment, runs whose execution here
// ended without its end recorded, until they are recovered). It reads
// nothing more, so the reaper can afford it on every look.
func (s *Service) countParked(active []*store.RunRecord) int {
	return len(s.unexecuted(active))
}

func (s *Service) unexecuted(active []*store.RunRecord) []*store.RunRecord {
	var out []*store.RunRecord
	for _, r := range active {
		if r.Status != rein.StatusRunning || r.Instance != s.cfg.Instance {
			continue
		}
		if s.liveRun(r.ID) != nil || s.isAdmitting(r.Key()) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// waitingForAnswers counts exactly the runs of active that this instance
// left parked: unexecuted, with a confirmation still open (pending, or
// allowed and not yet started). One read per candidate: for a drain's
// summary, not for every look.
func (s *Service) waitingForAnswers(ctx context.Context, active []*store.RunRecord) int {
	n := 0
	for _, r := range s.unexecuted(active) {
		confs, err := s.st.ListConfirmations(ctx, r.Key(), "")
		if err != nil {
			continue
		}
		for _, c := range confs {
			if c.RunID == r.ID && (c.State == store.ConfirmationPending || c.State == store.ConfirmationAllowed) {
				n++
				break
			}
		}
	}
	return n
}

// drainStats is what a drain did, for its summary line.
type drainStats struct {
	interrupted, cancelled, parked, queued int
	took                                   time.Duration
}

func (s *Service) logDrain(d drainStats) {
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "drain finished",
		slog.Int("interrupted", d.interrupted), slog.Int("cancelled", d.cancelled),
		slog.Int("parked", d.parked), slog.Int("queued", d.queued), slog.Duration("duration", d.took))
}
