package protocoltest

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/sqlite"
)

// The adapters' benchmarks: the same three measures through every
// protocol and through the native API in one run, the APIs taking turns
// so that a slower stretch of a shared machine weighs on all alike — the
// ratio to the native API is the adapter's cost.

// BenchScript is the scripted model of the benchmarks: "cpu" streams 400
// characters in 200 chunks, "long" streams a line and then sleeps in a
// tool for an hour (a run to stop), anything else is echoed in one chunk.
var BenchScript = `rules:
  - match: "^cpu"
    steps:
      - text: "` + strings.Repeat("x", 400) + `"
        chunks: 200
  - match: "^long"
    steps:
      - text: "sleeping for an hour"
        tool_calls:
          - name: sleep
            input: {seconds: 3600}
      - text: "woke up"
  - match: ""
    steps:
      - text: "echo: {{.Input}}"
`

// BenchAPI is one way to send a message and read its run's stream.
type BenchAPI struct {
	// Name labels the API's metrics ("native", "ai-sdk", …).
	Name string
	// Open prepares a new session (and opens its stream, for an API whose
	// stream is not the answer to the message).
	Open func(b *testing.B) BenchSession
	// Text reports whether a line of the stream carries streamed text; End
	// whether it is the run's end.
	Text, End func(line string) bool
}

// BenchSession is a session opened by a BenchAPI.
type BenchSession struct {
	// Send sends a message and returns the stream its run's events come on
	// (closing it ends this run's reading only).
	Send func(text string) io.ReadCloser
	// Stop stops the session's running run (nil: the API has none to
	// measure).
	Stop func()
	// Close closes what Open opened (nil: nothing).
	Close func()
}

// Prefix is a line test: the line starts with p.
func Prefix(p string) func(string) bool {
	return func(line string) bool { return strings.HasPrefix(line, p) }
}

// BenchFirstText measures message → first streamed text on each API.
// Reported per API: p50-ms and p99-ms, and each p50 over the first API's.
func BenchFirstText(b *testing.B, apis ...BenchAPI) {
	lat := map[string][]time.Duration{}
	for range b.N {
		for _, api := range apis {
			ses := warm(b, api)
			t0 := time.Now()
			stream := ses.Send("hi")
			readUntil(b, stream, api.Text)
			lat[api.Name] = append(lat[api.Name], time.Since(t0))
			readUntil(b, stream, api.End)
			stream.Close()
			ses.close()
		}
	}
	report(b, "", apis, lat)
}

// BenchStopToEnd measures a stop of a running run (asleep in a tool) to
// its end on the stream, on each API that has a stop.
func BenchStopToEnd(b *testing.B, apis ...BenchAPI) {
	lat := map[string][]time.Duration{}
	for range b.N {
		for _, api := range apis {
			ses := warm(b, api)
			if ses.Stop == nil {
				ses.close()
				continue
			}
			stream := ses.Send("long")
			readUntil(b, stream, api.Text)
			t0 := time.Now()
			ses.Stop()
			readUntil(b, stream, api.End)
			lat[api.Name] = append(lat[api.Name], time.Since(t0))
			stream.Close()
			ses.close()
		}
	}
	report(b, "stop-", apis, lat)
}

// BenchStreamCPU measures the process's CPU per model chunk of a run that
// streams 200 chunks to one reader, on each API: the run's own work is
// the same on all, so the difference is what rendering costs.
func BenchStreamCPU(b *testing.B, apis ...BenchAPI) {
	cpu := map[string]time.Duration{}
	for range b.N {
		for _, api := range apis {
			ses := warm(b, api)
			t0 := processCPU(b)
			stream := ses.Send("cpu")
			readUntil(b, stream, api.End)
			cpu[api.Name] += processCPU(b) - t0
			stream.Close()
			ses.close()
		}
	}
	per := func(name string) float64 { return float64(cpu[name]) / float64(b.N) / 200 / 1e3 }
	for _, api := range apis {
		b.ReportMetric(per(api.Name), api.Name+"-cpu-us/chunk")
		if api.Name != apis[0].Name {
			b.ReportMetric(per(api.Name)/per(apis[0].Name), api.Name+"/"+apis[0].Name+"-cpu")
		}
	}
}

// warm opens a session on api and runs a first message in it to its end:
// what is measured is then a message to a session that exists (a protocol
// that creates its session with the first message pays that once, as the
// native API's create does, outside the measure).
func warm(b *testing.B, api BenchAPI) BenchSession {
	ses := api.Open(b)
	stream := ses.Send("warm up")
	readUntil(b, stream, api.End)
	stream.Close()
	return ses
}

func (s BenchSession) close() {
	if s.Close != nil {
		s.Close()
	}
}

func report(b *testing.B, prefix string, apis []BenchAPI, lat map[string][]time.Duration) {
	p50 := map[string]float64{}
	for _, api := range apis {
		l := lat[api.Name]
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		ms := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))]) / 1e6 }
		p50[api.Name] = ms(0.5)
		b.ReportMetric(ms(0.5), prefix+api.Name+"-p50-ms")
		b.ReportMetric(ms(0.99), prefix+api.Name+"-p99-ms")
	}
	base := apis[0].Name
	for _, api := range apis[1:] {
		if p, ok := p50[api.Name]; ok && p50[base] > 0 {
			b.ReportMetric(p/p50[base], prefix+api.Name+"/"+base+"-p50")
		}
	}
}

// readUntil reads lines until one passes the test.
func readUntil(b *testing.B, stream io.ReadCloser, until func(string) bool) {
	b.Helper()
	rd, ok := stream.(*lineReader)
	if !ok {
		b.Fatal("protocoltest: a BenchAPI's stream must come from BenchStream")
	}
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			b.Fatalf("the stream ended before the line the benchmark waits for: %v", err)
		}
		if until(line) {
			return
		}
	}
}

// lineReader is a response body read by lines.
type lineReader struct {
	*bufio.Reader
	io.Closer
}

// BenchStream wraps a streaming response for a BenchAPI's send; a status other
// than 200 fails b.
func BenchStream(b *testing.B, resp *http.Response, err error) io.ReadCloser {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		b.Fatalf("%s %s: %d %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, body)
	}
	return &lineReader{bufio.NewReader(resp.Body), resp.Body}
}

// Call sends a request with a JSON body and returns the answer's body; a
// status of 300 or more fails b.
func Call(b *testing.B, c *http.Client, method, url, body string) string {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), method, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		b.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, out)
	}
	return string(out)
}

// NativeAPI is the native API of the server at base: a session created,
// its event stream opened, the message sent; the stop is a cancel of the
// session's current run.
func NativeAPI(c *http.Client, base string) BenchAPI {
	return BenchAPI{
		Name: "native",
		Open: func(b *testing.B) BenchSession {
			sid := idOf(b, Call(b, c, http.MethodPost, base+"/api/sessions", `{}`))
			req, err := http.NewRequestWithContext(b.Context(), http.MethodGet, base+"/api/sessions/"+sid+"/events/stream", nil)
			if err != nil {
				b.Fatal(err)
			}
			resp, err := c.Do(req)
			stream := BenchStream(b, resp, err).(*lineReader)
			events := base + "/api/sessions/" + sid + "/events"
			return BenchSession{
				Send: func(text string) io.ReadCloser {
					Call(b, c, http.MethodPost, events, `{"events":[{"type":"user.message","payload":{"text":"`+text+`"}}]}`)
					return &lineReader{stream.Reader, io.NopCloser(nil)}
				},
				Stop: func() {
					Call(b, c, http.MethodPost, events, `{"events":[{"type":"user.interrupt","payload":{"mode":"cancel"}}]}`)
				},
				Close: func() { stream.Close() },
			}
		},
		Text: Prefix("event: agent.message.delta"),
		End:  Prefix("event: session.run_completed"),
	}
}

func idOf(b *testing.B, body string) string {
	i := strings.Index(body, `"id":"`)
	if i < 0 {
		b.Fatalf("no id in %s", body)
	}
	rest := body[i+6:]
	return rest[:strings.IndexByte(rest, '"')]
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchServer is the server the adapters' benchmarks run: the scripted
// model of BenchScript, one SQLite store, the native API and the
// adapters mounts builds.
func BenchServer(b *testing.B, mounts func(*sessions.Service) []protocol.Mount) *reintest.Server {
	b.Helper()
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	script := filepath.Join(b.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(BenchScript), 0o600); err != nil {
		b.Fatal(err)
	}
	return reintest.NewServer(b, reintest.ServerOptions{Script: script, Store: st, Protocols: mounts})
}

// Contains is a line test: the line holds s.
func Contains(s string) func(string) bool {
	return func(line string) bool { return strings.Contains(line, s) }
}
