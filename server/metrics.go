package server

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/sessions"
)

// Metrics holds one server's Prometheus collectors. It implements
// sessions.Observer, so the sessions service reports run, admission, stop
// and append measurements into the same registry the server exposes on
// /metrics.
//
// Because the service needs its observer when it is created and the server
// needs the service, the order is: NewMetrics, then sessions.New with the
// Metrics as Config.Observer, then New with Config.Metrics. Every Metrics
// registers into its own registry, never the process-wide default, so any
// number of servers can live in one process.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted    prometheus.Counter
	runsEnded      *prometheus.CounterVec
	admission      prometheus.Counter
	parked         prometheus.Counter
	stopLatency    *prometheus.HistogramVec
	appendSeconds  prometheus.Histogram
	eventsAppended prometheus.Counter
	sseSubscribers prometheus.Gauge
	httpRequests   *prometheus.CounterVec
	httpDuration   *prometheus.HistogramVec
	modelRetries   *prometheus.CounterVec
	unparked       prometheus.Counter
	queueWait      prometheus.Histogram
	modelDuration  *prometheus.HistogramVec
	modelFirst     *prometheus.HistogramVec
	modelTokens    *prometheus.CounterVec
	modelErrors    *prometheus.CounterVec
	toolDuration   *prometheus.HistogramVec
	toolErrors     *prometheus.CounterVec

	// The series of each model and tool, looked up once: the observer
	// methods run on every step and must not allocate label slices.
	seriesMu sync.RWMutex
	models   map[string]*modelSeries
	tools    map[string]*toolSeries

	mu   sync.Mutex
	live func() sessions.Stats // set by New; nil until a server uses these metrics
}

type modelSeries struct {
	duration, firstDelta prometheus.Observer
	input, output        prometheus.Counter
	errors               prometheus.Counter
}

type toolSeries struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// unknownTool is the tool label of calls to a tool the run does not have
// (a model can name anything: the label set stays bounded).
const unknownTool = "(unknown)"

var _ sessions.Observer = (*Metrics)(nil)

// NewMetrics creates a server's collectors and registers them in reg (a
// fresh registry when nil).
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	return NewInstanceMetrics(reg, "")
}

// NewInstanceMetrics is NewMetrics with every series labelled
// rein_instance=instance (none when ""), so a dashboard over several
// instances sharing one PostgreSQL tells them apart. ("instance" itself is
// the label Prometheus gives the scrape target.)
func NewInstanceMetrics(reg *prometheus.Registry, instance string) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// Latencies here span microseconds (an in-process cancel, an append to
	// memory) to seconds (a cooperative interrupt waiting for a tool).
	fine := prometheus.ExponentialBuckets(50e-6, 2.5, 14) // 50 µs … ≈ 7.5 s
	// Model requests take from tens of milliseconds to minutes; tools and
	// queue waits from microseconds (a lookup) to minutes (a build).
	slow := prometheus.ExponentialBuckets(0.01, 2, 15) // 10 ms … ≈ 164 s
	wide := prometheus.ExponentialBuckets(1e-4, 3, 15) // 100 µs … ≈ 478 s
	m := &Metrics{
		reg:    reg,
		models: map[string]*modelSeries{},
		tools:  map[string]*toolSeries{},
		runsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rein_runs_started_total",
			Help: "Runs admitted to execution (recorded RUNNING) by this instance.",
		}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_runs_ended_total",
			Help: "Runs that reached a terminal status on this instance, by status and reason.",
		}, []string{"status", "reason"}),
		admission: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rein_admission_conflicts_total",
			Help: "user.message requests rejected with session_busy because the session's turn was held.",
		}),
		parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rein_runs_parked_total",
			Help: "Runs that parked waiting for tool confirmations (no goroutine while they wait).",
		}),
		stopLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rein_stop_latency_seconds",
			Help:    "Time from a cancel or interrupt request to the run's terminal status, by mode.",
			Buckets: fine,
		}, []string{"mode"}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rein_event_append_seconds",
			Help:    "Duration of one durable append to a session's event log.",
			Buckets: fine,
		}),
		eventsAppended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rein_events_appended_total",
			Help: "Events appended to session logs by this instance.",
		}),
		sseSubscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rein_sse_subscribers",
			Help: "Open Server-Sent Events streams.",
		}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_http_requests_total",
			Help: "HTTP requests answered, by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rein_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request (SSE streams excluded), by route pattern.",
			Buckets: fine,
		}, []string{"route"}),
		modelRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_model_retries_total",
			Help: "Model requests retried before their first streamed byte, by provider and the failed attempt's HTTP status (0: no response).",
		}, []string{"provider", "status"}),
		unparked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rein_runs_unparked_total",
			Help: "Parked runs this instance took up again: an answer came, or a deadline or a stop ended them.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rein_queue_wait_seconds",
			Help:    "Time from a run's admission to its start (RUNNING), for runs started on this instance.",
			Buckets: wide,
		}),
		modelDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rein_model_request_duration_seconds",
			Help:    "Time from sending a model request to the end of its stream, for requests that finished (not failed, not cut by a stop), by model.",
			Buckets: slow,
		}, []string{"model"}),
		modelFirst: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rein_model_first_delta_seconds",
			Help:    "Time from sending a model request to its first streamed text, by model.",
			Buckets: slow,
		}, []string{"model"}),
		modelTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_model_tokens_total",
			Help: "Tokens of model requests as the provider reported them, by model and direction (input, output).",
		}, []string{"model", "direction"}),
		modelErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_model_request_errors_total",
			Help: "Model requests that failed (after their retries; not those cut by a stop), by model.",
		}, []string{"model"}),
		toolDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rein_tool_call_duration_seconds",
			Help:    "Execution time of tool calls not cut by a stop (a confirmation's wait excluded), by tool.",
			Buckets: wide,
		}, []string{"tool"}),
		toolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rein_tool_call_errors_total",
			Help: "Tool calls whose result is an error (failed, timed out, unknown tool; not those cut by a stop), by tool.",
		}, []string{"tool"}),
	}
	var registerer prometheus.Registerer = reg
	if instance != "" {
		registerer = prometheus.WrapRegistererWith(prometheus.Labels{"rein_instance": instance}, reg)
	}
	for _, c := range []prometheus.Collector{
		m.runsStarted, m.runsEnded, m.admission, m.parked, m.stopLatency, m.appendSeconds,
		m.eventsAppended, m.sseSubscribers, m.httpRequests, m.httpDuration, m.modelRetries, m.unparked,
		m.queueWait, m.modelDuration, m.modelFirst, m.modelTokens, m.modelErrors, m.toolDuration, m.toolErrors,
		liveCollector{m},
	} {
		if err := registerer.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ModelRetry counts one retry of a model request; pass it as the model
// catalog's OnRetry.
func (m *Metrics) ModelRetry(info model.RetryInfo) {
	m.modelRetries.WithLabelValues(info.Provider, strconv.Itoa(info.Status)).Inc()
}

// Registry returns the registry the metrics are registered in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// bind makes the live gauges read from src. A Metrics serves one server.
func (m *Metrics) bind(src func() sessions.Stats) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live != nil {
		return errors.New("server: these Metrics already serve another server")
	}
	m.live = src
	return nil
}

// RunEnded implements sessions.Observer.
func (m *Metrics) RunEnded(status rein.RunStatus, reason rein.Reason) {
	m.runsEnded.WithLabelValues(string(status), string(reason)).Inc()
}

// RunStarted implements sessions.Observer.
func (m *Metrics) RunStarted() { m.runsStarted.Inc() }

// AdmissionConflict implements sessions.Observer.
func (m *Metrics) AdmissionConflict() { m.admission.Inc() }

// RunParked implements sessions.Observer.
func (m *Metrics) RunParked() { m.parked.Inc() }

// RunUnparked implements sessions.Observer.
func (m *Metrics) RunUnparked() { m.unparked.Inc() }

// QueueWait implements sessions.Observer.
func (m *Metrics) QueueWait(d time.Duration) { m.queueWait.Observe(d.Seconds()) }

// ModelRequest implements sessions.Observer.
func (m *Metrics) ModelRequest(r agent.ModelResponse) {
	ms := m.model(r.Model)
	if r.Usage.InputTokens > 0 {
		ms.input.Add(float64(r.Usage.InputTokens))
	}
	if r.Usage.OutputTokens > 0 {
		ms.output.Add(float64(r.Usage.OutputTokens))
	}
	if r.FirstDelta > 0 {
		ms.firstDelta.Observe(r.FirstDelta.Seconds())
	}
	switch {
	case r.Stopped:
	case r.Err != nil:
		ms.errors.Inc()
	default:
		ms.duration.Observe(r.Duration.Seconds())
	}
}

// ToolCall implements sessions.Observer.
func (m *Metrics) ToolCall(r agent.ToolResult) {
	if r.Stopped {
		return
	}
	name := r.Name
	if !r.Known {
		name = unknownTool
	}
	ts := m.tool(name)
	ts.duration.Observe(r.Duration.Seconds())
	if r.IsError {
		ts.errors.Inc()
	}
}

func (m *Metrics) model(name string) *modelSeries {
	m.seriesMu.RLock()
	ms := m.models[name]
	m.seriesMu.RUnlock()
	if ms != nil {
		return ms
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if ms = m.models[name]; ms == nil {
		ms = &modelSeries{
			duration:   m.modelDuration.WithLabelValues(name),
			firstDelta: m.modelFirst.WithLabelValues(name),
			input:      m.modelTokens.WithLabelValues(name, "input"),
			output:     m.modelTokens.WithLabelValues(name, "output"),
			errors:     m.modelErrors.WithLabelValues(name),
		}
		m.models[name] = ms
	}
	return ms
}

func (m *Metrics) tool(name string) *toolSeries {
	m.seriesMu.RLock()
	ts := m.tools[name]
	m.seriesMu.RUnlock()
	if ts != nil {
		return ts
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	if ts = m.tools[name]; ts == nil {
		ts = &toolSeries{duration: m.toolDuration.WithLabelValues(name), errors: m.toolErrors.WithLabelValues(name)}
		m.tools[name] = ts
	}
	return ts
}

// StopLatency implements sessions.Observer.
func (m *Metrics) StopLatency(mode string, d time.Duration) {
	m.stopLatency.WithLabelValues(mode).Observe(d.Seconds())
}

// EventsAppended implements sessions.Observer.
func (m *Metrics) EventsAppended(d time.Duration, n int) {
	m.appendSeconds.Observe(d.Seconds())
	m.eventsAppended.Add(float64(n))
}

func (m *Metrics) observeRequest(method, route string, code int, d time.Duration, stream bool) {
	m.httpRequests.WithLabelValues(method, route, strconv.Itoa(code)).Inc()
	if !stream {
		m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
	}
}

// liveCollector reports the gauges that are read, not counted: runs by
// live status and queue depth, from the service at scrape time, so they
// can never drift from the truth.
type liveCollector struct{ m *Metrics }

var (
	runsDesc = prometheus.NewDesc("rein_runs",
		"Runs this instance holds live, by status (RUNNING, QUEUED).", []string{"status"}, nil)
	queueDesc = prometheus.NewDesc("rein_queue_depth",
		"Runs held on this instance waiting for their session's turn.", nil, nil)
	parkedDesc = prometheus.NewDesc("rein_runs_parked",
		"Runs this instance last ran that are parked waiting for tool confirmations (RUNNING, executed by no one), as of its last look at the store.", nil, nil)
)

func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- queueDesc
	ch <- parkedDesc
}

func (c liveCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	src := c.m.live
	c.m.mu.Unlock()
	var st sessions.Stats
	if src != nil {
		st = src()
	}
	ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(st.Running), string(rein.StatusRunning))
	ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(st.Queued), string(rein.StatusQueued))
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(st.Parked))
}
