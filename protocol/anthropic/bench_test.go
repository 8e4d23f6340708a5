package anthropic_test

import (
	"bufio"
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
	"github.com/reinhq/rein/protocol/anthropic"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/sqlite"
)

// BenchmarkFirstText measures what a user of each API waits for: from
// sending a message (over loopback HTTP, to a fresh idle session whose
// stream is open) to the first streamed text reaching the reader — the
// native API's agent.message.delta, /v1's event_delta preview. Both run
// in one process on one SQLite store, so their ratio is the adapter's
// cost. Reported: p50-ms and p99-ms per API, and the ratio of p50s.
func BenchmarkFirstText(b *testing.B) {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := reintest.NewServer(b, reintest.ServerOptions{
		Script: writeBenchScript(b),
		Store:  st,
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{})}
		},
	})
	apis := []struct {
		name                 string
		create               func() string
		send, stream, marker string
	}{
		{"native", func() string { return createNative(b, srv) }, "/api/sessions/%s/events", "/api/sessions/%s/events/stream", "event: agent.message.delta"},
		{"v1", func() string { return createV1(b, srv) }, "/v1/sessions/%s/events", "/v1/sessions/%s/events/stream?event_deltas[]=agent.message", "event: event_delta"},
	}
	bodies := map[string]string{
		"native": `{"events":[{"type":"user.message","payload":{"text":"hi"}}]}`,
		"v1":     `{"events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`,
	}
	// The two APIs take turns, so a slower stretch of a shared machine
	// (or a store that grew) weighs on both alike.
	lat := map[string][]time.Duration{}
	for range b.N {
		for _, api := range apis {
			sid := api.create()
			resp := get(b, srv, strings.Replace(api.stream, "%s", sid, 1))
			rd := bufio.NewReader(resp.Body)
			t0 := time.Now()
			post(b, srv, strings.Replace(api.send, "%s", sid, 1), bodies[api.name])
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, api.marker) {
					break
				}
			}
			lat[api.name] = append(lat[api.name], time.Since(t0))
			resp.Body.Close()
		}
	}
	p50 := map[string]float64{}
	for name, l := range lat {
		slices.Sort(l)
		ms := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))]) / 1e6 }
		p50[name] = ms(0.5)
		b.ReportMetric(ms(0.5), name+"-p50-ms")
		b.ReportMetric(ms(0.99), name+"-p99-ms")
	}
	b.ReportMetric(p50["v1"]/p50["native"], "v1/native-p50")
}

func writeBenchScript(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "script.yaml")
	if err := writeFile(p, "rules:\n  - match: \"\"\n    steps:\n      - text: \"echo: {{.Input}}\"\n"); err != nil {
		b.Fatal(err)
	}
	return p
}

func createNative(b *testing.B, srv *reintest.Server) string {
	return idOf(b, post(b, srv, "/api/sessions", `{}`))
}

func createV1(b *testing.B, srv *reintest.Server) string {
	return idOf(b, post(b, srv, "/v1/sessions", `{"agent":"default","environment_id":""}`))
}

func idOf(b *testing.B, body string) string {
	i := strings.Index(body, `"id":"`)
	if i < 0 {
		b.Fatalf("no id in %s", body)
	}
	rest := body[i+6:]
	return rest[:strings.IndexByte(rest, '"')]
}

func post(b *testing.B, srv *reintest.Server, path, body string) string {
	resp, err := srv.HTTP.Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&sb); err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		b.Fatalf("POST %s: %d %s", path, resp.StatusCode, sb.String())
	}
	return sb.String()
}

func get(b *testing.B, srv *reintest.Server, path string) *http.Response {
	resp, err := srv.HTTP.Get(srv.URL + path)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	return resp
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

// BenchmarkStreamCPU measures the server's CPU per streamed chunk: a run
// streams 200 model chunks to one reader of each API in turn (the native
// stream's agent.message.delta frames, /v1's event_delta previews; the log
// coalesces chunks into fewer delta events), and the process's CPU time over
// the run is divided by the chunks. The run's own work is the same for
// both, so the difference is what rendering costs. Reported:
// native-cpu-us/chunk, v1-cpu-us/chunk and their ratio.
func BenchmarkStreamCPU(b *testing.B) {
	p := filepath.Join(b.TempDir(), "script.yaml")
	if err := writeFile(p, "rules:\n  - match: \"\"\n    steps:\n      - text: \""+strings.Repeat("x", 400)+"\"\n        chunks: 200\n"); err != nil {
		b.Fatal(err)
	}
	srv := reintest.NewServer(b, reintest.ServerOptions{
		Script: p,
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{anthropic.Mount(svc, anthropic.Options{})}
		},
	})
	apis := []struct{ name, create, stream, send, body, end string }{
		{"native", "/api/sessions", "/api/sessions/%s/events/stream", "/api/sessions/%s/events",
			`{"events":[{"type":"user.message","payload":{"text":"go"}}]}`, "event: session.run_completed"},
		{"v1", "/v1/sessions", "/v1/sessions/%s/events/stream?event_deltas[]=agent.message", "/v1/sessions/%s/events",
			`{"events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}]}`, "event: session.status_idle"},
	}
	cpu := map[string]time.Duration{}
	for range b.N {
		for _, api := range apis {
			body := `{}`
			if api.name == "v1" {
				body = `{"agent":"default","environment_id":""}`
			}
			sid := idOf(b, post(b, srv, api.create, body))
			resp := get(b, srv, strings.Replace(api.stream, "%s", sid, 1))
			rd := bufio.NewReader(resp.Body)
			t0 := processCPU(b)
			post(b, srv, strings.Replace(api.send, "%s", sid, 1), api.body)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, api.end) {
					break
				}
			}
			cpu[api.name] += processCPU(b) - t0
			resp.Body.Close()
		}
	}
	per := func(name string) float64 { return float64(cpu[name]) / float64(b.N) / 200 / 1e3 }
	b.ReportMetric(per("native"), "native-cpu-us/chunk")
	b.ReportMetric(per("v1"), "v1-cpu-us/chunk")
	b.ReportMetric(per("v1")/per("native"), "v1/native-cpu")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
