package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// runner carries one load run.
type runner struct {
	o    Options
	t    *target
	c    *client.Client
	errs *errorLog

	sessions []*sessionResult

	// Live counters for the progress line.
	sessionsDone atomic.Int64
	runsDone     atomic.Int64
	received     atomic.Int64

	// peak memory seen by the sampler.
	peakMu         sync.Mutex
	peakRSS, peakH int64
}

// sessionResult is what one session's driver saw.
type sessionResult struct {
	index int
	id    string
	// streamed are the events its stream delivered, in order.
	streamed []streamedEvent
	runs     []*runResult
	// finished is true when every planned run reached its
	// session.run_completed on the stream.
	finished bool
}

// streamedEvent identifies one event read from a stream.
type streamedEvent struct {
	seq int64
	id  string
}

// runResult is one run's timeline, as the client saw it.
type runResult struct {
	index int
	id    string
	// stop: the workload stops this run at its first delta.
	stop bool
	// stopAccepted: the stop was accepted; stopLate: it was answered
	// not accepted because the run had already ended.
	stopAccepted, stopLate bool
	// stopLogged: the stop's user.interrupt arrived on the stream. A late
	// stop's is logged after the run's session.run_completed (the request
	// came after the end); its answer came once it was logged, so it is
	// on its way, and the run is followed until it arrives.
	stopLogged bool
	// t0 is just before the user.message was sent; admitted when its
	// answer came; the others when the event arrived on the stream.
	t0, admitted, started, firstDelta, stopSent, completed time.Time
	status                                                 rein.RunStatus
	reason                                                 rein.Reason
}

// timedEvent is an event (or the stream's end) and when it arrived.
type timedEvent struct {
	ev  rein.Event
	err error
	at  time.Time
}

func newRunner(o Options, t *target) *runner {
	opts := []client.Option{client.WithHTTPClient(t.hc)}
	if o.Token != "" {
		opts = append(opts, client.WithToken(o.Token))
	}
	return &runner{o: o, t: t, c: client.New(t.url, opts...), errs: newErrorLog()}
}

// run performs the phases: the idle-stream measurement, the load with its
// sampler, the verification of every log, and the report.
func (r *runner) run(ctx context.Context) (*Report, error) {
	rep := newReport(r.o, r.t)
	if r.o.IdleStreams > 0 {
		rep.IdleStreams = r.measureIdle(ctx, r.o.IdleStreams)
	}

	before, err := r.t.probe.sample(ctx, true)
	if err != nil {
		r.errs.add("server metrics", err)
		before = unmeasured()
	}
	r.notePeak(before)

	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(samplerDone)
		r.sampler(ctx, start, stopSampler)
	}()
	r.drive(ctx)
	duration := time.Since(start)
	close(stopSampler)
	<-samplerDone

	// The last sample is taken even when ctx was cancelled: a partial
	// report still shows what the server used.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	after, err := r.t.probe.sample(sctx, true)
	cancel()
	if err != nil {
		r.errs.add("server metrics", err)
		after = unmeasured()
	}
	r.notePeak(after)

	// An interrupted run is not verified: its cut-short sessions are
	// already reported, and reading every log would delay the answer to
	// the interruption.
	checked := verified{outcomes: map[string]int{}}
	if ctx.Err() == nil {
		checked = r.verify(ctx)
	}
	rep.fill(r, before, after, duration, checked)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	return rep, nil
}

// drive runs every session's driver, Concurrency at a time.
func (r *runner) drive(ctx context.Context) {
	r.sessions = make([]*sessionResult, r.o.Sessions)
	next := make(chan *sessionResult)
	var wg sync.WaitGroup
	for range r.o.Concurrency {
		wg.Go(func() {
			for sr := range next {
				r.session(ctx, sr)
				r.sessionsDone.Add(1)
			}
		})
	}
	start := time.Now()
	for i := range r.sessions {
		sr := &sessionResult{index: i}
		r.sessions[i] = sr
		if r.o.Ramp > 0 {
			r.waitUntil(ctx, start.Add(r.o.Ramp*time.Duration(i)/time.Duration(r.o.Sessions)))
		}
		if ctx.Err() != nil {
			// Not started: its runs count as skipped.
			continue
		}
		select {
		case next <- sr:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
}

// waitUntil paces the ramp: it returns at t or when ctx is done.
func (r *runner) waitUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
}

// stopAt says whether the run with this global index gets a stop: the
// stops are spread evenly, floor(total × StopFraction) of them.
func (r *runner) stopAt(index int) bool {
	f := r.o.StopFraction
	return int(float64(index+1)*f) > int(float64(index)*f)
}

// session drives one session: create it, follow its stream, then send its
// messages one after the other.
func (r *runner) session(ctx context.Context, sr *sessionResult) {
	s, err := r.c.CreateSession(ctx, client.CreateSessionRequest{Metadata: map[string]any{"rein_bench": true}})
	if err != nil {
		r.errs.add("create session: "+errorClass(ctx, err), err)
		return
	}
	sr.id = s.ID

	sctx, cancel := context.WithCancel(ctx)
	stream := r.c.Stream(sctx, s.ID, 0)
	// Events are stamped by a reader of their own, so that an event that
	// arrives while the driver waits for an answer (run_started often
	// comes before the user.message's 200) is timed when it arrived.
	evc := make(chan timedEvent, 1024)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			ev, err := stream.Next()
			te := timedEvent{ev: ev, err: err, at: time.Now()}
			if err == nil {
				r.received.Add(1)
			}
			select {
			case evc <- te:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		stream.Close()
		cancel()
		<-readerDone
	}()

	for m := range r.o.Messages {
		rr := &runResult{index: sr.index*r.o.Messages + m}
		rr.stop = r.stopAt(rr.index)
		sr.runs = append(sr.runs, rr)
		if !r.runOne(ctx, sr, rr, evc) {
			return
		}
		r.runsDone.Add(1)
	}
	sr.finished = true
}

// runOne sends one message and follows its run to session.run_completed,
// stopping it at its first delta when rr.stop. It reports whether the
// session can go on.
func (r *runner) runOne(ctx context.Context, sr *sessionResult, rr *runResult, evc <-chan timedEvent) bool {
	rr.t0 = time.Now()
	res, err := r.c.SendMessage(ctx, sr.id, client.Message{Text: fmt.Sprintf("bench session %d message %d", sr.index, rr.index%r.o.Messages)})
	rr.admitted = time.Now()
	if err != nil {
		r.errs.add("send message: "+errorClass(ctx, err), err)
		return false
	}
	rr.id = res.RunID
	timer := time.NewTimer(r.o.RunTimeout)
	defer timer.Stop()
	for {
		select {
		case te := <-evc:
			if te.err != nil {
				r.errs.add("event stream: "+errorClass(ctx, te.err), te.err)
				return false
			}
			ev := te.ev
			sr.streamed = append(sr.streamed, streamedEvent{seq: ev.Seq, id: ev.ID})
			if ev.RunID != rr.id {
				continue
			}
			switch ev.Type {
			case rein.EventUserInterrupt:
				rr.stopLogged = true
				if !rr.completed.IsZero() {
					return true
				}
			case rein.EventRunStarted:
				if rr.started.IsZero() {
					rr.started = te.at
				}
			case rein.EventMessageDelta:
				if rr.firstDelta.IsZero() {
					rr.firstDelta = te.at
					if rr.stop {
						r.stopRun(ctx, sr, rr)
					}
				}
			case rein.EventRunCompleted:
				rr.completed = te.at
				var p rein.RunCompletedPayload
				if err := json.Unmarshal(ev.Payload, &p); err != nil {
					r.errs.add("malformed session.run_completed", err)
				}
				rr.status, rr.reason = p.Status, p.Reason
				if !rr.stopLate || rr.stopLogged {
					return true
				}
			}
		case <-timer.C:
			r.errs.add("run timeout", fmt.Errorf("run %s of session %s: no session.run_completed within %s", rr.id, sr.id, r.o.RunTimeout))
			return false
		case <-ctx.Done():
			r.errs.add("interrupted", context.Cause(ctx))
			return false
		}
	}
}

// stopRun sends the run's stop by run id.
func (r *runner) stopRun(ctx context.Context, sr *sessionResult, rr *runResult) {
	rr.stopSent = time.Now()
	res, err := r.c.StopRun(ctx, sr.id, rr.id, r.o.StopMode)
	if err != nil {
		rr.stopSent = time.Time{}
		r.errs.add("stop: "+errorClass(ctx, err), err)
		return
	}
	rr.stopAccepted = res.Accepted
	rr.stopLate = !res.Accepted
}

// errorClass names the kind of a request's failure: the server's error
// code, a timeout, the run's cancellation, or a transport failure.
func errorClass(ctx context.Context, err error) string {
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return string(ce.Code)
	case ctx.Err() != nil:
		return "interrupted"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "transport"
}

// sampler writes the progress line and samples the server's memory for
// its peak, every SampleInterval until stop.
func (r *runner) sampler(ctx context.Context, start time.Time, stop <-chan struct{}) {
	tick := time.NewTicker(r.o.SampleInterval)
	defer tick.Stop()
	var width int
	lastAt, lastRecv := start, int64(0)
	for {
		select {
		case <-stop:
			if r.o.Progress != nil {
				line := r.progressLine(time.Since(start), -1)
				fmt.Fprintf(r.o.Progress, "\r%-*s\n", width, line)
			}
			return
		case now := <-tick.C:
			if s, err := r.t.probe.sample(ctx, false); err == nil {
				r.notePeak(s)
			}
			if r.o.Progress == nil {
				continue
			}
			recv := r.received.Load()
			rate := float64(recv-lastRecv) / now.Sub(lastAt).Seconds()
			lastAt, lastRecv = now, recv
			line := r.progressLine(now.Sub(start), rate)
			fmt.Fprintf(r.o.Progress, "\r%-*s", width, line)
			width = max(width, len(line))
		}
	}
}

// progressLine is one line of live progress; rate is the events per
// second since the last line (negative: none, for the last line).
func (r *runner) progressLine(elapsed time.Duration, rate float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rein bench %6.1fs  sessions %d/%d  runs %d/%d  events %d",
		elapsed.Seconds(), r.sessionsDone.Load(), r.o.Sessions, r.runsDone.Load(), r.o.Sessions*r.o.Messages, r.received.Load())
	if rate >= 0 {
		fmt.Fprintf(&b, " (%.0f/s)", rate)
	}
	fmt.Fprintf(&b, "  errors %d", r.errs.total())
	r.peakMu.Lock()
	if r.peakRSS > 0 {
		fmt.Fprintf(&b, "  peak RSS %s", formatBytes(float64(r.peakRSS)))
	}
	r.peakMu.Unlock()
	return b.String()
}

func (r *runner) notePeak(s sample) {
	r.peakMu.Lock()
	defer r.peakMu.Unlock()
	r.peakRSS = max(r.peakRSS, s.rss)
	r.peakH = max(r.peakH, s.heap)
}

// errorLog counts errors by kind, keeping the first message of each.
type errorLog struct {
	mu      sync.Mutex
	counts  map[string]int
	example map[string]string
}

func newErrorLog() *errorLog {
	return &errorLog{counts: map[string]int{}, example: map[string]string{}}
}

func (l *errorLog) add(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[kind]++
	if _, ok := l.example[kind]; !ok && err != nil {
		l.example[kind] = err.Error()
	}
}

func (l *errorLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.counts {
		n += c
	}
	return n
}
