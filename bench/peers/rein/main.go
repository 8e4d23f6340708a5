// Command rein is Rein's side of the peer comparison (bench/peers), at two
// levels: rein-engine drives the run engine and the agent loop directly
// (run.Run + agent, nothing stored: what a library user embeds), and
// rein-memory / rein-sqlite drive the sessions service over the memory and
// the SQLite store (admission, turn lease, every lifecycle write and the
// event log: what `rein serve` runs behind its HTTP API).
//
// It is its own module so the harness copy and this adapter build against
// the working tree (replace ../../..) without the main module knowing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/bench/peers/rein/harness"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/tool"
)

func main() {
	harness.Main("(this tree)", map[string]harness.Builder{
		"rein-engine": buildEngine,
		"rein-memory": func(ctx context.Context, cfg harness.Config) (harness.Peer, error) {
			return buildSessions(ctx, cfg, memory.New())
		},
		"rein-sqlite": func(ctx context.Context, cfg harness.Config) (harness.Peer, error) {
			st, err := sqlite.Open(ctx, filepath.Join(cfg.Dir, "rein.db"), sqlite.Options{})
			if err != nil {
				return nil, err
			}
			return buildSessions(ctx, cfg, st)
		},
	})
}

// durableStopTimeout replaces the agent's StopTimeout (default 5 s) in
// DurableStream. The loop bounds its step-boundary writes (reading the
// inbox, saving the end) by it; with 10,000 sessions starting at once on a
// CPU-starved machine, SQLite's single writer can queue a write for longer
// than 5 s, and the run then fails instead of finishing late. The workload
// measures throughput and latency, so it lets such a write wait.
const durableStopTimeout = 2 * time.Minute

// newAgent is the one agent loop both levels run: the fake model and the
// echo tool, with the defaults of agent.Config.
func newAgent(cfg harness.Config) (*agent.Agent, error) {
	tools, err := tool.NewRegistry(tool.RegistryOptions{}, echoTool{env: cfg.Env})
	if err != nil {
		return nil, err
	}
	ac := agent.Config{Model: &fakeModel{cfg: cfg}, Tools: tools}
	if cfg.Workload == harness.DurableStream {
		ac.StopTimeout = durableStopTimeout
	}
	return agent.New(ac)
}

// engine is the rein-engine peer.
type engine struct {
	a   *agent.Agent
	seq atomic.Int64
}

func buildEngine(_ context.Context, cfg harness.Config) (harness.Peer, error) {
	a, err := newAgent(cfg)
	if err != nil {
		return nil, err
	}
	return &engine{a: a}, nil
}

// execution is one run executing on a goroutine of its own: its handle
// (the stop wire) and its result once decided.
type execution struct {
	r    *run.Run
	done chan struct{}
	res  run.Result
}

func (x *execution) wait(ctx context.Context) (run.Result, error) {
	select {
	case <-x.done:
		return x.res, x.res.Err
	case <-ctx.Done():
		return run.Result{}, ctx.Err()
	}
}

// start starts one run on a goroutine of its own; its deltas go to the
// returned collector, its transcript to a slice.
func (p *engine) start(input string) (*execution, *collector, error) {
	id := fmt.Sprint("run_", p.seq.Add(1))
	key := rein.SessionKey{Owner: "bench", ID: id}
	col := &collector{}
	turn := &agent.Turn{Session: key, RunID: id, Input: input,
		Journal: agent.NewJournal(id, &transcript{}, col, nil), Events: col}
	x := &execution{r: run.New(run.Options{ID: id}), done: make(chan struct{})}
	go func() {
		x.res, _ = x.r.Execute(context.Background(), func(ctx context.Context, c *run.Control) run.Outcome {
			return p.a.Run(ctx, c, turn)
		})
		close(x.done)
	}()
	return x, col, nil
}

func (p *engine) Run(ctx context.Context, input string) (string, error) {
	r, col, err := p.start(input)
	if err != nil {
		return "", err
	}
	res, err := r.wait(ctx)
	if err != nil {
		return "", err
	}
	if res.Status != rein.StatusCompleted {
		return "", fmt.Errorf("run ended %s/%s", res.Status, res.Reason)
	}
	return col.text()
}

func (p *engine) Start(_ context.Context, input string) (harness.Handle, error) {
	r, _, err := p.start(input)
	if err != nil {
		return nil, err
	}
	return &engineHandle{r: r}, nil
}

type engineHandle struct {
	r         *execution
	interrupt atomic.Bool
}

func (h *engineHandle) Cancel() { h.r.r.Cancel() }

func (h *engineHandle) Stop() error {
	h.interrupt.Store(true)
	if !h.r.r.Interrupt("") {
		return errors.New("interrupt not accepted")
	}
	return nil
}

func (h *engineHandle) Wait(ctx context.Context) error {
	res, err := h.r.wait(ctx)
	if ctx.Err() != nil {
		return err
	}
	errText := ""
	if res.Err != nil {
		errText = res.Err.Error()
	}
	return checkEnd(res.Status, res.Reason, errText, h.interrupt.Load())
}

// checkEnd says whether a stopped run ended as its stop asks: a cancel
// ends it CANCELLED, an interrupt COMPLETED with reason interrupted.
func checkEnd(st rein.RunStatus, reason rein.Reason, errText string, interrupted bool) error {
	want := "cancelled"
	ok := st == rein.StatusCancelled
	if interrupted {
		want, ok = "interrupted", st == rein.StatusCompleted && reason == rein.ReasonInterrupted
	}
	if ok {
		return nil
	}
	if errText != "" {
		return fmt.Errorf("%s run ended %s/%s: %s", want, st, reason, errText)
	}
	return fmt.Errorf("%s run ended %s/%s", want, st, reason)
}

// collector is the Sink of a rein-engine run: the caller's end of the
// stream, assembling the reply from agent.message.delta events.
type collector struct {
	mu  sync.Mutex
	b   strings.Builder
	err error
}

func (c *collector) Emit(_ context.Context, evs ...rein.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range evs {
		if e.Type != rein.EventMessageDelta {
			continue
		}
		var p rein.MessageDeltaPayload
		if err := json.Unmarshal(e.Payload, &p); err != nil && c.err == nil {
			c.err = err
		}
		c.b.WriteString(p.Text)
	}
	return nil
}

// EmitDelta implements agent.DeltaSink, the engine's streaming path: a
// delta's text without its event encoding (the sessions service's writer
// takes deltas the same way).
func (c *collector) EmitDelta(_ context.Context, _ string, _ int, text string) error {
	c.mu.Lock()
	c.b.WriteString(text)
	c.mu.Unlock()
	return nil
}

func (c *collector) text() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String(), c.err
}

// transcript is a run's history in memory (one run per conversation).
type transcript struct {
	mu   sync.Mutex
	msgs []rein.Message
}

func (t *transcript) Load(context.Context) ([]rein.Message, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]rein.Message(nil), t.msgs...), nil
}

func (t *transcript) Append(_ context.Context, msgs ...rein.Message) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.msgs = append(t.msgs, msgs...)
	return nil
}

// service is the rein-memory and rein-sqlite peer.
type service struct {
	svc *sessions.Service
	st  store.Store
	// opened maps DurableStream's inputs to their sessions.
	opened map[string]rein.SessionKey
	// retries counts requests refused as overloaded and sent again.
	retries atomic.Int64
	lifted  bool
}

func buildSessions(ctx context.Context, cfg harness.Config, st store.Store) (harness.Peer, error) {
	a, err := newAgent(cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	sc := sessions.Config{Store: st, Agent: a}
	// Blocked holds every run in the model at once, up to 10,000: beyond
	// the default bound of runs in flight (4096) the service refuses new
	// ones, and a refused run is retried only once another ends, which
	// never happens here. The workload measures what such runs hold, so it
	// lifts the bound; everything else runs with the defaults.
	lifted := cfg.Workload == harness.Blocked
	if lifted {
		sc.MaxRunsInFlight = -1
	}
	svc, err := sessions.New(sc)
	if err != nil {
		st.Close()
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return &service{svc: svc, st: st, lifted: lifted}, nil
}

// Notes implements harness.Noter.
func (p *service) Notes() []string {
	var notes []string
	if p.lifted {
		notes = append(notes, "sessions.Config.MaxRunsInFlight lifted (default 4096 runs in flight per instance)")
	}
	if n := p.retries.Load(); n > 0 {
		notes = append(notes, fmt.Sprintf("%d requests were refused as overloaded (unavailable, Retry-After) and sent again after the delay asked", n))
	}
	return notes
}

// retry calls f until it is not refused as overloaded, waiting the delay
// each refusal asks for, as a client honouring Retry-After does.
func (p *service) retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		var oe *sessions.OverloadError
		if !errors.As(err, &oe) {
			return err
		}
		p.retries.Add(1)
		t := time.NewTimer(oe.RetryAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (p *service) Close() error {
	p.svc.Close()
	return p.st.Close()
}

// create creates a session.
func (p *service) create(ctx context.Context) (rein.SessionKey, error) {
	var sess *store.Session
	err := p.retry(ctx, func() (err error) {
		sess, err = p.svc.CreateSession(ctx, "bench", sessions.CreateSessionRequest{})
		return err
	})
	if err != nil {
		return rein.SessionKey{}, err
	}
	return sess.Key(), nil
}

// message sends input to the session and returns the run id.
func (p *service) message(ctx context.Context, key rein.SessionKey, input string) (string, error) {
	var res sessions.MessageResult
	err := p.retry(ctx, func() (err error) {
		res, err = p.svc.SendMessage(ctx, key, sessions.MessageRequest{Text: input})
		return err
	})
	return res.RunID, err
}

// send creates a session and sends input as its first message.
func (p *service) send(ctx context.Context, input string) (rein.SessionKey, string, error) {
	key, err := p.create(ctx)
	if err != nil {
		return rein.SessionKey{}, "", err
	}
	runID, err := p.message(ctx, key, input)
	if err != nil {
		return rein.SessionKey{}, "", err
	}
	return key, runID, nil
}

// follow reads the session's log from the start until runID's
// session.run_completed, calling observe for each event of the run, and
// returns the completion.
func (p *service) follow(ctx context.Context, key rein.SessionKey, runID string, observe func(rein.Event)) (rein.RunCompletedPayload, error) {
	after := int64(0)
	for {
		evs, _, err := p.svc.ReadEvents(ctx, key, after, 1000)
		if err != nil {
			return rein.RunCompletedPayload{}, err
		}
		for _, e := range evs {
			after = e.Seq
			if e.RunID != runID {
				continue
			}
			if observe != nil {
				observe(e)
			}
			if e.Type == rein.EventRunCompleted {
				var c rein.RunCompletedPayload
				err := json.Unmarshal(e.Payload, &c)
				return c, err
			}
		}
		if len(evs) == 0 {
			if err := p.svc.WaitEvents(ctx, key, after); err != nil {
				return rein.RunCompletedPayload{}, err
			}
		}
	}
}

func (p *service) Run(ctx context.Context, input string) (string, error) {
	key, runID, err := p.send(ctx, input)
	if err != nil {
		return "", err
	}
	var (
		b      strings.Builder
		decErr error
	)
	end, err := p.follow(ctx, key, runID, func(e rein.Event) {
		if e.Type != rein.EventMessageDelta {
			return
		}
		var d rein.MessageDeltaPayload
		if err := json.Unmarshal(e.Payload, &d); err != nil && decErr == nil {
			decErr = err
		}
		b.WriteString(d.Text)
	})
	if err != nil {
		return "", err
	}
	if end.Status != rein.StatusCompleted {
		return "", fmt.Errorf("run ended %s/%s %s", end.Status, end.Reason, end.Error)
	}
	return b.String(), decErr
}

func (p *service) Start(ctx context.Context, input string) (harness.Handle, error) {
	key, runID, err := p.send(ctx, input)
	if err != nil {
		return nil, err
	}
	return &serviceHandle{p: p, key: key, runID: runID}, nil
}

// serviceHandle stops a run the way a client does (user.interrupt by run
// id) and sees its end in the log, as a client reading the event stream
// would; nothing reads the log before Wait.
type serviceHandle struct {
	p         *service
	key       rein.SessionKey
	runID     string
	interrupt atomic.Bool

	mu      sync.Mutex
	stopErr error // a Cancel that failed, reported by Wait
}

func (h *serviceHandle) stop(mode rein.StopMode) error {
	res, err := h.p.svc.Interrupt(context.Background(), h.key, sessions.InterruptRequest{RunID: &h.runID, Mode: mode})
	if err != nil {
		return err
	}
	if !res.Accepted {
		return fmt.Errorf("%s not accepted", mode)
	}
	return nil
}

func (h *serviceHandle) Cancel() {
	if err := h.stop(rein.StopCancel); err != nil {
		h.mu.Lock()
		if h.stopErr == nil {
			h.stopErr = err
		}
		h.mu.Unlock()
	}
}

func (h *serviceHandle) Stop() error {
	h.interrupt.Store(true)
	return h.stop(rein.StopInterrupt)
}

func (h *serviceHandle) Wait(ctx context.Context) error {
	h.mu.Lock()
	err := h.stopErr
	h.mu.Unlock()
	if err != nil {
		return err
	}
	end, err := h.p.follow(ctx, h.key, h.runID, nil)
	if err != nil {
		return err
	}
	return checkEnd(end.Status, end.Reason, end.Error, h.interrupt.Load())
}

// senders is how many goroutines send the sessions' messages in
// DurableStream, as many clients would; the store batches their writes.
const senders = 256

// OpenSessions implements harness.DurableStreamer.
func (p *service) OpenSessions(ctx context.Context, inputs []string) error {
	keys := make([]rein.SessionKey, len(inputs))
	err := pool(len(inputs), func(i int) (err error) {
		keys[i], err = p.create(ctx)
		return err
	})
	p.opened = map[string]rein.SessionKey{}
	for i, in := range inputs {
		p.opened[in] = keys[i]
	}
	return err
}

// StreamSessions implements harness.DurableStreamer: the messages are sent
// from a pool of senders, and each session is read by a reader of its own
// from its first event.
func (p *service) StreamSessions(ctx context.Context, inputs []string, observe func(string)) error {
	var (
		readers sync.WaitGroup
		mu      sync.Mutex
		first   error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	err := pool(len(inputs), func(i int) error {
		key := p.opened[inputs[i]]
		runID, err := p.message(ctx, key, inputs[i])
		if err != nil {
			return err
		}
		readers.Go(func() {
			end, err := p.follow(ctx, key, runID, func(e rein.Event) {
				if e.Type != rein.EventMessageDelta {
					observe("")
					return
				}
				var d rein.MessageDeltaPayload
				if err := json.Unmarshal(e.Payload, &d); err != nil {
					fail(err)
					return
				}
				observe(d.Text)
			})
			if err == nil && end.Status != rein.StatusCompleted {
				err = fmt.Errorf("run ended %s/%s %s", end.Status, end.Reason, end.Error)
			}
			if err != nil {
				fail(err)
			}
		})
		return nil
	})
	readers.Wait()
	if err != nil {
		return err
	}
	return first
}

// pool calls f(0) … f(n-1) from senders goroutines and returns the first
// error.
func pool(n int, f func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range min(senders, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
