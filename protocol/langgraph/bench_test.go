package langgraph_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol"
	"github.com/reinhq/rein/protocol/langgraph"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/sqlite"
)

func benchServer(b *testing.B) *reintest.Server {
	st, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte("rules:\n  - match: \"\"\n    steps:\n      - text: \"echo: {{.Input}}\"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return reintest.NewServer(b, reintest.ServerOptions{
		Script: p, Store: st,
		Protocols: func(svc *sessions.Service) []protocol.Mount {
			return []protocol.Mount{langgraph.Mount(svc, langgraph.Options{})}
		},
	})
}

func benchDo(b *testing.B, srv *reintest.Server, method, path, body string) *http.Response {
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.HTTP.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, msg)
	}
	return resp
}

// BenchmarkFirstToken measures what a user of each API waits for: from
// sending a message (over loopback HTTP, to a fresh idle session) to the
// first streamed text reaching the reader — the native API's
// agent.message.delta on a stream opened before, and runs.stream's first
// messages-tuple part (one request that starts the run and streams it).
// Both run in one process on one SQLite store, taking turns, so their
// ratio is the adapter's cost. Reported: p50-ms and p99-ms per API, and
// the ratio of p50s.
func BenchmarkFirstToken(b *testing.B) {
	srv := benchServer(b)
	lat := map[string][]time.Duration{}
	read := func(body io.Reader, marker string) {
		rd := bufio.NewReader(body)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasPrefix(line, marker) {
				return
			}
		}
	}
	for i := range b.N {
		// native
		sid := fmt.Sprintf("bench-native-%d", i)
		benchDo(b, srv, "POST", "/api/sessions", `{"id":"`+sid+`"}`).Body.Close()
		st := benchDo(b, srv, "GET", "/api/sessions/"+sid+"/events/stream", "")
		t0 := time.Now()
		benchDo(b, srv, "POST", "/api/sessions/"+sid+"/events", `{"events":[{"type":"user.message","payload":{"text":"hi"}}]}`).Body.Close()
		read(st.Body, "event: agent.message.delta")
		lat["native"] = append(lat["native"], time.Since(t0))
		st.Body.Close()
		// langgraph
		tid := fmt.Sprintf("bench-lg-%d", i)
		benchDo(b, srv, "POST", "/langgraph/threads", `{"thread_id":"`+tid+`"}`).Body.Close()
		t0 = time.Now()
		st = benchDo(b, srv, "POST", "/langgraph/threads/"+tid+"/runs/stream",
			`{"assistant_id":"default","input":{"messages":[{"type":"human","content":"hi"}]},"stream_mode":["messages-tuple"]}`)
		read(st.Body, "event: messages")
		lat["langgraph"] = append(lat["langgraph"], time.Since(t0))
		st.Body.Close()
	}
	p50 := map[string]float64{}
	for name, l := range lat {
		slices.Sort(l)
		ms := func(q float64) float64 { return float64(l[int(q*float64(len(l)-1))]) / 1e6 }
		p50[name] = ms(0.5)
		b.ReportMetric(ms(0.5), name+"-p50-ms")
		b.ReportMetric(ms(0.99), name+"-p99-ms")
	}
	b.ReportMetric(p50["langgraph"]/p50["native"], "langgraph/native-p50")
}

// BenchmarkGetState measures threads.getState of a thread of 1,000
// messages (500 runs): the state is folded from the whole log on every
// read (decision 0115).
func BenchmarkGetState(b *testing.B) {
	srv := benchServer(b)
	ctx := context.Background()
	key := rein.SessionKey{Owner: "local", ID: "bench-state"}
	if _, err := srv.Service.CreateSession(ctx, "local", sessions.CreateSessionRequest{ID: key.ID}); err != nil {
		b.Fatal(err)
	}
	for i := range 500 {
		res, err := srv.Service.SendMessage(ctx, key, sessions.MessageRequest{Text: fmt.Sprintf("message %d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := srv.Service.WaitRun(ctx, key, res.RunID); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		resp := benchDo(b, srv, "GET", "/langgraph/threads/"+key.ID+"/state", "")
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		b.SetBytes(n)
	}
}
