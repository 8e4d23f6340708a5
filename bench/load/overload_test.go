package load_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/bench/load"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/sqlite"
)

// TestOverloadUnderLoad drives more sessions at once than a low
// MaxRunsInFlight admits, over SQLite, and checks what overload must look
// like: refusals are 503 unavailable (never 500), every admitted run ends
// with its whole life in the log, and no run in the store lacks its
// events. It takes a while, so it runs only when REIN_OVERLOAD_SESSIONS
// says how many sessions (e.g. 5000); REIN_OVERLOAD_MAX_RUNS sets the
// bound (default 200).
func TestOverloadUnderLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REIN_OVERLOAD_SESSIONS"))
	if n <= 0 {
		t.Skip("REIN_OVERLOAD_SESSIONS not set")
	}
	limit := 200
	if v, err := strconv.Atoi(os.Getenv("REIN_OVERLOAD_MAX_RUNS")); err == nil && v > 0 {
		limit = v
	}
	o := load.DefaultOptions()
	o.Sessions, o.Messages, o.IdleStreams = n, 1, -1
	o.Chunks, o.ChunkDelay = 20, 20*time.Millisecond

	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "rein.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := scripted.Parse("overload.yaml", o.Script())
	if err != nil {
		t.Fatal(err)
	}
	loop, err := agent.New(agent.Config{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessions.New(sessions.Config{Store: st, Agent: loop, MaxRunsInFlight: limit})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	timed := &answerTimes{byStatus: map[int][]time.Duration{}}
	hs := &http.Server{Handler: timed.wrap(srv), ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn)}
	go hs.Serve(ln)
	defer func() {
		svc.Close()
		srv.Close()
		hs.Close()
	}()

	o.URL = "http://" + ln.Addr().String()
	t0 := time.Now()
	rep, err := load.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, e := range rep.Errors {
		t.Logf("error %q × %d (e.g. %s)", e.Kind, e.Count, e.Example)
		switch {
		case strings.HasSuffix(e.Kind, ": unavailable"):
			refused += e.Count
		default:
			t.Errorf("error kind %q (%d): only 503 unavailable refusals are acceptable under overload", e.Kind, e.Count)
		}
	}
	t.Logf("%d sessions, MaxRunsInFlight %d, %s: admitted %d, completed %d, refused 503 %d, outcomes %v",
		n, limit, time.Since(t0).Round(time.Millisecond), rep.Runs.Admitted, rep.Runs.Completed, refused, rep.Runs.Outcomes)
	for _, l := range rep.Latencies {
		t.Logf("latency %s (n=%d): p50 %.1f ms, p99 %.1f ms, max %.1f ms", l.Name, l.Count, l.P50MS, l.P99MS, l.MaxMS)
	}
	for _, status := range []int{200, 500, 503} {
		p50, p99, mx, cnt := timed.quantiles(status)
		t.Logf("POST .../events answered %d: n=%d, p50 %s, p99 %s, max %s", status, cnt, p50, p99, mx)
	}
	if _, _, _, c := timed.quantiles(500); c != 0 {
		t.Errorf("%d POSTs answered 500", c)
	}
	if refused == 0 {
		t.Errorf("no refusal: %d sessions did not overload a bound of %d", n, limit)
	}
	if rep.Runs.Completed != rep.Runs.Admitted {
		t.Errorf("%d runs admitted, %d completed", rep.Runs.Admitted, rep.Runs.Completed)
	}
	for k, c := range rep.Runs.Outcomes {
		if k != "COMPLETED/stop" {
			t.Errorf("%d runs ended %s", c, k)
		}
	}

	// The store itself: every run has its user.message and its
	// session.run_completed, and nothing else is left.
	ctx := context.Background()
	list, err := svc.ListSessions(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, s := range list {
		rs, err := svc.ListRuns(ctx, s.Key())
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			continue
		}
		evs, _, err := svc.ReadEvents(ctx, s.Key(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			runs++
			var msg, done bool
			for _, e := range evs {
				if e.RunID == r.ID {
					msg = msg || e.Type == rein.EventUserMessage
					done = done || e.Type == rein.EventRunCompleted
				}
			}
			if !msg || !done || !r.Status.Terminal() {
				t.Errorf("run %s (%s/%s %q): user.message %v, run_completed %v", r.ID, r.Status, r.Reason, r.Error, msg, done)
			}
		}
	}
	if runs != rep.Runs.Admitted {
		t.Errorf("the store holds %d runs, the load admitted %d", runs, rep.Runs.Admitted)
	}
	t.Logf("store: %d sessions, %d runs, every run with its user.message and session.run_completed", len(list), runs)
}

// answerTimes records how long POST .../events took, by status.
type answerTimes struct {
	mu       sync.Mutex
	byStatus map[int][]time.Duration
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (a *answerTimes) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || !strings.HasSuffix(r.URL.Path, "/events") {
			h.ServeHTTP(w, r)
			return
		}
		t0 := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(sw, r)
		a.mu.Lock()
		a.byStatus[sw.status] = append(a.byStatus[sw.status], time.Since(t0))
		a.mu.Unlock()
	})
}

func (a *answerTimes) quantiles(status int) (p50, p99, mx time.Duration, n int) {
	a.mu.Lock()
	ds := slices.Clone(a.byStatus[status])
	a.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100], ds[len(ds)-1], len(ds)
}
