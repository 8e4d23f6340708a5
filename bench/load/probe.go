package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sample is one observation of the server under load.
type sample struct {
	at time.Time
	// cpu is the server process's CPU time (user + system) since it
	// started, in seconds.
	cpu float64
	// rss is its resident set; heap its live heap objects (garbage not
	// yet swept included, as go_memstats_heap_alloc_bytes); stacks the
	// memory of its goroutine stacks. Bytes.
	rss, heap, stacks int64
	// subscribers is the number of open event streams
	// (rein_sse_subscribers); appended the events the server appended
	// (rein_events_appended_total).
	subscribers, appended float64
	// missing names the measurements the server does not expose.
	missing []string
}

// The names of what a sample reads, as /metrics exposes them. The Go and
// process collectors provide the first four (rein serve registers them),
// the server's own metrics the last two.
const (
	metricCPU         = "process_cpu_seconds_total"
	metricRSS         = "process_resident_memory_bytes"
	metricHeap        = "go_memstats_heap_alloc_bytes"
	metricStacks      = "go_memstats_stack_inuse_bytes"
	metricSubscribers = "rein_sse_subscribers"
	metricAppended    = "rein_events_appended_total"
)

// unmeasured stands for a sample that could not be taken: every figure
// is missing, so none is shown as a measurement.
func unmeasured() sample {
	return sample{at: time.Now(), missing: []string{metricCPU, metricRSS, metricHeap, metricStacks, metricSubscribers, metricAppended}}
}

// probe observes a server.
type probe interface {
	// sample observes the server now. With settle, a probe that can
	// collects garbage first, so that heap figures are live memory and
	// two samples can be subtracted.
	sample(ctx context.Context, settle bool) (sample, error)
	// source says where the figures come from, for the report.
	source() string
}

// selfProbe observes this process, which runs the server: CPU and RSS
// from the kernel, the heap and stacks from runtime/metrics (no
// stop-the-world), and the server's counters from its registry.
type selfProbe struct {
	reg *prometheus.Registry
}

func (p *selfProbe) source() string { return "this process (runtime/metrics, /proc/self, getrusage)" }

// The runtime/metrics names matching go_memstats_heap_alloc_bytes and
// go_memstats_stack_inuse_bytes.
const (
	rtHeapObjects = "/memory/classes/heap/objects:bytes"
	rtStacks      = "/memory/classes/heap/stacks:bytes"
)

func (p *selfProbe) sample(_ context.Context, settle bool) (sample, error) {
	if settle {
		runtime.GC()
	}
	s := sample{at: time.Now()}
	rm := []metrics.Sample{{Name: rtHeapObjects}, {Name: rtStacks}}
	metrics.Read(rm)
	s.heap, s.stacks = int64(rm[0].Value.Uint64()), int64(rm[1].Value.Uint64())
	var err error
	if s.cpu, err = processCPU(); err != nil {
		s.missing = append(s.missing, metricCPU)
	}
	if s.rss, err = processRSS(); err != nil {
		s.missing = append(s.missing, metricRSS)
	}
	families, err := p.reg.Gather()
	if err != nil {
		return s, fmt.Errorf("rein bench: read the server's metrics: %w", err)
	}
	found := map[string]bool{}
	for _, f := range families {
		var v *float64
		switch f.GetName() {
		case metricSubscribers:
			v = &s.subscribers
		case metricAppended:
			v = &s.appended
		default:
			continue
		}
		found[f.GetName()] = true
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				*v += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				*v += m.GetCounter().GetValue()
			}
		}
	}
	for _, name := range []string{metricSubscribers, metricAppended} {
		if !found[name] {
			s.missing = append(s.missing, name)
		}
	}
	return s, nil
}

// scrapeProbe observes a remote server through its /metrics.
type scrapeProbe struct {
	url string
	hc  *http.Client
}

func (p *scrapeProbe) source() string { return p.url + "/metrics" }

// maxMetricsBody bounds a scrape: a Rein server's exposition is a few
// tens of KiB.
const maxMetricsBody = 16 << 20

func (p *scrapeProbe) sample(ctx context.Context, _ bool) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/metrics", nil)
	if err != nil {
		return sample{}, err
	}
	// The classic text format: every Prometheus client library answers it.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := p.hc.Do(req)
	if err != nil {
		return sample{}, fmt.Errorf("rein bench: GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("rein bench: GET /metrics: %s", resp.Status)
	}
	values, err := parseMetrics(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return sample{}, fmt.Errorf("rein bench: GET /metrics: %w", err)
	}
	s := sample{at: time.Now()}
	for _, m := range []struct {
		name string
		f    func(float64)
	}{
		{metricCPU, func(v float64) { s.cpu = v }},
		{metricRSS, func(v float64) { s.rss = int64(v) }},
		{metricHeap, func(v float64) { s.heap = int64(v) }},
		{metricStacks, func(v float64) { s.stacks = int64(v) }},
		{metricSubscribers, func(v float64) { s.subscribers = v }},
		{metricAppended, func(v float64) { s.appended = v }},
	} {
		v, ok := values[m.name]
		if !ok {
			s.missing = append(s.missing, m.name)
			continue
		}
		m.f(v)
	}
	return s, nil
}

// parseMetrics reads the Prometheus text exposition format and returns,
// per metric name, the sum of its samples over all label sets (a server
// with an instance label has one set; summing keeps the figure right if
// it had several).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var name, rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			// Label values may hold braces and spaces (route="/api/x/{id}"),
			// never an unescaped quote: skip the quoted strings to find
			// the closing brace.
			end := labelsEnd(line, i+1)
			if end < 0 {
				return nil, fmt.Errorf("malformed line %q", line)
			}
			name, rest = line[:i], line[end+1:]
		} else {
			var ok bool
			if name, rest, ok = strings.Cut(line, " "); !ok {
				return nil, fmt.Errorf("malformed line %q", line)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("malformed value in %q", line)
		}
		out[strings.TrimSpace(name)] += v
	}
	return out, sc.Err()
}

// labelsEnd returns the index of the '}' closing the label set that
// starts at i, or -1.
func labelsEnd(line string, i int) int {
	inQuote := false
	for ; i < len(line); i++ {
		switch c := line[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i
		}
	}
	return -1
}
