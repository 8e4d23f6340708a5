package server

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reinhq/rein"
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

	mu   sync.Mutex
	live func() sessions.Stats // set by New; nil until a server uses these metrics
}

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
	m := &Metrics{
		reg: reg,
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
	}
	var registerer prometheus.Registerer = reg
	if instance != "" {
		registerer = prometheus.WrapRegistererWith(prometheus.Labels{"rein_instance": instance}, reg)
	}
	for _, c := range []prometheus.Collector{
		m.runsStarted, m.runsEnded, m.admission, m.parked, m.stopLatency, m.appendSeconds,
		m.eventsAppended, m.sseSubscribers, m.httpRequests, m.httpDuration, m.modelRetries, liveCollector{m},
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
		"Runs waiting in session lanes on this instance.", nil, nil)
)

func (c liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- queueDesc
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
}
