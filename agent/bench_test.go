package agent_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/run"
)

type nopSink struct{}

func (nopSink) Emit(context.Context, ...rein.Event) error { return nil }

// nopHistory keeps nothing: the benchmark measures the engine and the loop,
// not storage.
type nopHistory struct{}

func (nopHistory) Load(context.Context) ([]rein.Message, error)  { return nil, nil }
func (nopHistory) Append(context.Context, ...rein.Message) error { return nil }

func benchAgent(b *testing.B, script string) (*agent.Agent, model.Model) {
	b.Helper()
	m, err := scripted.Parse("bench.yaml", []byte(script))
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{Model: m})
	if err != nil {
		b.Fatal(err)
	}
	return a, m
}

// BenchmarkRunOverhead is the per-run cost of the engine plus the agent
// loop with an instant scripted model: one step, no tools, one delta.
func BenchmarkRunOverhead(b *testing.B) {
	a, _ := benchAgent(b, "rules:\n  - steps:\n      - text: \"ok\"\n")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := rein.SessionKey{Owner: "o", ID: "s"}
		turn := &agent.Turn{Session: key, RunID: "r", Input: "hi", Journal: agent.NewJournal("r", nopHistory{}, nopSink{}, nil), Events: nopSink{}}
		r := run.New(run.Options{ID: "r"})
		if res, _ := r.Execute(ctx, func(ctx context.Context, c *run.Control) run.Outcome {
			return a.Run(ctx, c, turn)
		}); res.Status != rein.StatusCompleted {
			b.Fatalf("%+v", res)
		}
	}
}

// BenchmarkCancelLatency measures Cancel → terminal (Done closed) for a run
// blocked in a model stream, as p50/p99.
func BenchmarkCancelLatency(b *testing.B) {
	stopLatency(b, func(r *execution) { r.Cancel() }, rein.StatusCancelled)
}

// BenchmarkInterruptLatency measures Interrupt → terminal for a run whose
// model is blocked mid-stream (one delta sent, the next never comes).
func BenchmarkInterruptLatency(b *testing.B) {
	stopLatency(b, func(r *execution) { r.Interrupt("") }, rein.StatusCompleted)
}

func stopLatency(b *testing.B, stop func(*execution), want rein.RunStatus) {
	a, _ := benchAgent(b, "rules:\n  - steps:\n      - text: \"ok\"\n")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := rein.SessionKey{Owner: "o", ID: fmt.Sprint(i % 64)}
		inStream := make(chan struct{})
		m := blockedModel{entered: inStream}
		turn := &agent.Turn{Session: key, RunID: "r", Input: "hi", Model: m, Journal: agent.NewJournal("r", nopHistory{}, nopSink{}, nil), Events: nopSink{}}
		r := goRun(fmt.Sprint("r", i), func(ctx context.Context, c *run.Control) run.Outcome {
			return a.Run(ctx, c, turn)
		})
		<-inStream
		t0 := time.Now()
		stop(r)
		<-r.Done()
		lat = append(lat, time.Since(t0))
		if res, _ := r.Result(); res.Status != want {
			b.Fatalf("%+v", res)
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// blockedModel streams one delta and then blocks until its context ends,
// like a provider stalled mid-stream.
type blockedModel struct{ entered chan struct{} }

func (blockedModel) Name() string { return "blocked" }

func (m blockedModel) Stream(ctx context.Context, req *model.Request) (model.Stream, error) {
	return &blockedStream{ctx: ctx, entered: m.entered}, nil
}

type blockedStream struct {
	ctx     context.Context
	entered chan struct{}
	sent    bool
}

func (s *blockedStream) Recv() (model.Chunk, error) {
	if !s.sent {
		s.sent = true
		return model.Chunk{Kind: model.ChunkText, Text: "partial"}, nil
	}
	close(s.entered)
	<-s.ctx.Done()
	return model.Chunk{}, s.ctx.Err()
}

func (s *blockedStream) Close() error { return nil }
