package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePeer is a framework in a few lines: a run is a goroutine that plays
// the script, stopped through its context.
type fakePeer struct {
	cfg Config
	// coop: Stop is supported (it cancels, like an interrupt would).
	coop bool
	// reply, when set, replaces the scripted reply.
	reply string
	// noTool skips the echo call.
	noTool bool
	// deaf: Cancel does nothing (a framework that cannot stop a run).
	deaf bool
	// failEvery: every failEvery-th started run ends FAILED after its
	// stop (0: none).
	failEvery int

	mu      sync.Mutex
	cancels []context.CancelFunc // every run's, for cleanup
}

// stopAll ends every run the peer started.
func (p *fakePeer) stopAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cancels {
		c()
	}
}

func (p *fakePeer) Run(ctx context.Context, input string) (string, error) {
	if p.reply != "" {
		return p.reply, nil
	}
	switch p.cfg.Model {
	case ModelInstant:
		return InstantReply, nil
	case ModelToolThenAnswer:
		if !p.noTool {
			p.cfg.Env.Echo(input)
		}
		return Answer(), nil
	}
	return "", fmt.Errorf("Run with model %d", p.cfg.Model)
}

type fakeHandle struct {
	p      *fakePeer
	cancel context.CancelFunc
	done   chan struct{}
	fails  bool
}

func (p *fakePeer) Start(ctx context.Context, input string) (Handle, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &fakeHandle{p: p, cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.cancels = append(p.cancels, cancel)
	h.fails = p.failEvery > 0 && len(p.cancels)%p.failEvery == 0
	p.mu.Unlock()
	go func() {
		defer close(h.done)
		if p.cfg.Model == ModelTicking {
			t := time.NewTicker(TickEvery)
			defer t.Stop()
			p.cfg.Env.Entered(input)
			for {
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		}
		p.cfg.Env.Entered(input)
		<-ctx.Done()
	}()
	return h, nil
}

func (h *fakeHandle) Cancel() {
	if !h.p.deaf {
		h.cancel()
	}
}

func (h *fakeHandle) Stop() error {
	if !h.p.coop {
		return fmt.Errorf("%w: no cooperative stop", ErrUnsupported)
	}
	h.cancel()
	return nil
}

func (h *fakeHandle) Wait(ctx context.Context) error {
	select {
	case <-h.done:
		if h.fails {
			return errors.New("ended FAILED")
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("did not end: %w", ctx.Err())
	}
}

func builder(p *fakePeer) Builder {
	return func(_ context.Context, cfg Config) (Peer, error) {
		p.cfg = cfg
		return p, nil
	}
}

func run(t *testing.T, o Options, p *fakePeer) (Result, error) {
	t.Helper()
	if o.Peer == "" {
		o.Peer = "fake"
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 10 * time.Second
	}
	return Run(context.Background(), o, builder(p))
}

func TestSequentialWorkloadsMeasureLatencyAndAllocs(t *testing.T) {
	for _, w := range []string{Instant, ToolStream, CancelStream, StopBlocked} {
		t.Run(w, func(t *testing.T) {
			res, err := run(t, Options{Workload: w, N: 20, Round: 2}, &fakePeer{coop: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Workload != w || res.N != 20 || res.Round != 2 || res.Peer != "fake" || res.Procs < 1 {
				t.Fatalf("result %+v", res)
			}
			p50, p99 := res.Metrics[MetricP50], res.Metrics[MetricP99]
			if p50 <= 0 || p99 < p50 {
				t.Fatalf("p50 %v p99 %v", p50, p99)
			}
			if _, ok := res.Metrics[MetricAllocs]; !ok {
				t.Fatalf("no %s in %v", MetricAllocs, res.Metrics)
			}
		})
	}
}

func TestCooperativeStopUnsupportedIsReportedNotFailed(t *testing.T) {
	res, err := run(t, Options{Workload: StopBlocked, N: 5}, &fakePeer{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Unsupported, "no cooperative stop") || res.Metrics != nil {
		t.Fatalf("result %+v", res)
	}
}

func TestWrongReplyFails(t *testing.T) {
	_, err := run(t, Options{Workload: Instant, N: 3}, &fakePeer{reply: "nope"})
	if err == nil || !strings.Contains(err.Error(), `reply "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestToolStreamChecksTheToolRan(t *testing.T) {
	_, err := run(t, Options{Workload: ToolStream, N: 3, Warmup: -1}, &fakePeer{noTool: true})
	if err == nil || !strings.Contains(err.Error(), "echo tool ran 0 times for 3 runs") {
		t.Fatalf("err = %v", err)
	}
}

func TestARunThatDoesNotStopFailsTheWorkload(t *testing.T) {
	p := &fakePeer{deaf: true}
	defer p.stopAll()
	_, err := run(t, Options{Workload: CancelStream, N: 1, Warmup: -1, WaitTimeout: 50 * time.Millisecond}, p)
	if err == nil || !strings.Contains(err.Error(), "after the stop") {
		t.Fatalf("err = %v", err)
	}
}

func TestBlockedCountsWhatEachRunHolds(t *testing.T) {
	res, err := run(t, Options{Workload: Blocked, N: 200}, &fakePeer{})
	if err != nil {
		t.Fatal(err)
	}
	// The fake holds exactly one goroutine per blocked run.
	if g := res.Metrics[MetricGoroutines]; g < 0.95 || g > 1.05 {
		t.Fatalf("goroutines per run %v, want 1", g)
	}
	if m := res.Metrics[MetricMem]; m <= 0 {
		t.Fatalf("heap+stack per run %v", m)
	}
	if res.Metrics[MetricStartUs] <= 0 {
		t.Fatalf("metrics %v", res.Metrics)
	}
}

// Runs of Blocked that end wrongly are counted beside the figures; a run
// that never ends fails the workload.
func TestBlockedReportsRunsThatEndWrongly(t *testing.T) {
	res, err := run(t, Options{Workload: Blocked, N: 20}, &fakePeer{failEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics[MetricWrongEnds] != 5 || res.Metrics[MetricMem] == 0 {
		t.Fatalf("metrics %v", res.Metrics)
	}
	if len(res.Notes) != 1 || !strings.HasPrefix(res.Notes[0], "5 of 20 runs did not end as the cancel asks (first: run ") {
		t.Fatalf("notes %q", res.Notes)
	}
	p := &fakePeer{deaf: true}
	defer p.stopAll()
	if _, err := run(t, Options{Workload: Blocked, N: 3, WaitTimeout: 50 * time.Millisecond}, p); err == nil || !strings.Contains(err.Error(), "did not end after the cancel") {
		t.Fatalf("err = %v", err)
	}
}

func TestDurableStreamNeedsADurableStreamer(t *testing.T) {
	res, err := run(t, Options{Workload: DurableStream, N: 3}, &fakePeer{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Unsupported, "no durable session store") || res.Metrics != nil {
		t.Fatalf("result %+v", res)
	}
}

// durablePeer streams stamps, two chunks per event (a runtime that
// coalesces), plus one other event per session; drop loses one chunk.
type durablePeer struct {
	fakePeer
	drop   bool
	opened []string
}

func (p *durablePeer) OpenSessions(_ context.Context, inputs []string) error {
	p.opened = inputs
	return nil
}

func (p *durablePeer) StreamSessions(_ context.Context, inputs []string, observe func(string)) error {
	if len(p.opened) != len(inputs) {
		return errors.New("sessions not opened")
	}
	var wg sync.WaitGroup
	for range inputs {
		wg.Go(func() {
			observe("")
			for i := 0; i < p.cfg.StampChunks; i += 2 {
				text := Stamp() + Stamp()
				if p.drop && i == 0 {
					text = Stamp()
				}
				observe(text)
			}
		})
	}
	wg.Wait()
	return nil
}

func TestDurableStreamCountsEventsAndChunks(t *testing.T) {
	p := &durablePeer{}
	res, err := Run(context.Background(), Options{Peer: "d", Workload: DurableStream, N: 10, StampChunks: 4},
		func(_ context.Context, cfg Config) (Peer, error) { p.cfg = cfg; return p, nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics[MetricEventsPerS] <= 0 || res.Metrics[MetricDeltaP99] < res.Metrics[MetricDeltaP50] {
		t.Fatalf("metrics %v", res.Metrics)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "30 events read") {
		t.Fatalf("notes %q", res.Notes)
	}

	p = &durablePeer{drop: true}
	_, err = Run(context.Background(), Options{Peer: "d", Workload: DurableStream, N: 10, StampChunks: 4},
		func(_ context.Context, cfg Config) (Peer, error) { p.cfg = cfg; return p, nil })
	if err == nil || !strings.Contains(err.Error(), "read 30 chunks back, want 40") {
		t.Fatalf("err = %v", err)
	}
}

func TestUnknownWorkload(t *testing.T) {
	if _, err := run(t, Options{Workload: "nap"}, &fakePeer{}); err == nil || !strings.Contains(err.Error(), `unknown workload "nap"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestBuilderUnsupported(t *testing.T) {
	res, err := Run(context.Background(), Options{Peer: "x", Workload: Instant},
		func(context.Context, Config) (Peer, error) {
			return nil, fmt.Errorf("%w: no instant model", ErrUnsupported)
		})
	if err != nil || !strings.Contains(res.Unsupported, "no instant model") {
		t.Fatalf("res %+v err %v", res, err)
	}
}

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 99, 4 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
	} {
		if got := Percentile(c.in, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.in, c.p, got, c.want)
		}
	}
}

func TestStampsRoundTrip(t *testing.T) {
	before := time.Now()
	ts, err := ParseStamps(Stamp() + Stamp())
	if err != nil || len(ts) != 2 || ts[0].Before(before.Add(-time.Millisecond)) || ts[1].Before(ts[0]) {
		t.Fatalf("ParseStamps = %v, %v", ts, err)
	}
	if _, err := ParseStamps("12;x;"); err == nil {
		t.Fatal("a bad stamp parsed")
	}
}

func TestScript(t *testing.T) {
	if a := Answer(); strings.Count(a, "tok") != AnswerChunks || !strings.HasPrefix(a, "tok00 ") || !strings.HasSuffix(a, "tok19 ") {
		t.Fatalf("Answer() = %q", a)
	}
	if got := EchoArgs(`say "hi"`); got != `{"text":"say \"hi\""}` {
		t.Fatalf("EchoArgs = %s", got)
	}
	for _, w := range Workloads {
		if _, err := ModelOf(w); err != nil || DefaultN[w] == 0 {
			t.Fatalf("workload %s: %v, default n %d", w, err, DefaultN[w])
		}
	}
}
