package sessions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// liveRun is a run this process holds a handle for.
type liveRun struct {
	rec *store.RunRecord
	h   *run.Run
	w   *writer

	mu       sync.Mutex
	lease    *store.Lease
	renew    context.CancelFunc
	renewed  chan struct{} // closed when the renewal loop exits
	started  bool          // admitted and recorded RUNNING
	drained  bool          // never executed: the service was draining
	stopAt   time.Time
	stopMode string
}

func (lr *liveRun) key() rein.SessionKey { return lr.rec.Key() }

func (lr *liveRun) fence() store.Fence {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.lease == nil {
		return store.Fence{}
	}
	return lr.lease.Fence()
}

// errDrained marks a queued run reached while draining: it is left QUEUED
// in the store for the next start.
var errDrained = errors.New("sessions: not started: draining")

// launch creates, registers and starts the handle for a stored run.
func (s *Service) launch(rec *store.RunRecord, front bool) (rein.RunStatus, error) {
	lr := &liveRun{rec: rec, w: newWriter(s.st, rec.Key(), s.cfg.Observer.EventsAppended)}
	h, err := s.engine.Prepare(func(ctx context.Context, c *run.Control) run.Outcome {
		return s.execute(ctx, c, lr)
	}, run.Options{
		ID:       rec.ID,
		Session:  rec.Key(),
		Deadline: rec.Deadline,
		Front:    front,
		Finish:   func(_ *run.Run, res run.Result) { s.finish(lr, res) },
	})
	if err != nil {
		return "", err
	}
	lr.h = h
	s.mu.Lock()
	s.live[rec.ID] = lr
	s.mu.Unlock()
	if err := s.registry.Register(h); err != nil {
		s.mu.Lock()
		delete(s.live, rec.ID)
		s.mu.Unlock()
		return "", err
	}
	h.OnTerminal(func(r *run.Run) {
		s.mu.Lock()
		if s.live[r.ID()] == lr {
			delete(s.live, r.ID())
		}
		s.mu.Unlock()
	})
	st, err := h.Start()
	if err != nil {
		return "", err
	}
	return st, nil
}

// abandon ends a run record that could not be announced.
func (s *Service) abandon(rec *store.RunRecord, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.st.UpdateRun(ctx, rec.Key(), store.Fence{}, rec.ID, store.RunUpdate{
		Status: rein.StatusFailed, Reason: rein.ReasonError, Error: "could not record the message: " + cause.Error(), EndedAt: s.now()})
	if err != nil {
		s.log.Error("abandon run", "session", rec.SessionID, "run", rec.ID, "err", err)
	}
}

// execute is the body of every run the service starts.
func (s *Service) execute(ctx context.Context, c *run.Control, lr *liveRun) run.Outcome {
	if s.draining.Load() {
		lr.mu.Lock()
		lr.drained = true
		lr.mu.Unlock()
		return run.Outcome{Reason: rein.ReasonError, Err: errDrained}
	}
	key := lr.key()
	lease, err := s.acquire(ctx, key, lr.rec.ID)
	if err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: err}
	}
	renewCtx, stopRenew := context.WithCancel(s.ctx)
	renewed := make(chan struct{})
	lr.mu.Lock()
	lr.lease, lr.renew, lr.renewed = lease, stopRenew, renewed
	lr.mu.Unlock()
	lr.w.setFence(lease.Fence())
	go s.renewLoop(renewCtx, lr, renewed)

	// The RUNNING record and session.run_started are written concurrently
	// so that a group-committing store makes them durable together (one
	// fsync instead of two on the path a user waits on).
	type updated struct {
		rec *store.RunRecord
		err error
	}
	upd := make(chan updated, 1)
	go func() {
		rec, err := s.st.UpdateRun(ctx, key, lease.Fence(), lr.rec.ID, store.RunUpdate{
			Status: rein.StatusRunning, StartedAt: s.now(), Instance: s.cfg.Instance})
		upd <- updated{rec, err}
	}()
	emitErr := lr.w.Emit(ctx, rein.NewEvent(rein.EventRunStarted, lr.rec.ID, rein.RunStartedPayload{RunID: lr.rec.ID}))
	u := <-upd
	if u.err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("record run start: %w", u.err)}
	}
	if emitErr != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: emitErr}
	}
	rec := u.rec
	lr.mu.Lock()
	lr.rec, lr.started = rec, true
	lr.mu.Unlock()
	s.cfg.Observer.RunStarted()
	sess, err := s.st.GetSession(ctx, key)
	if err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("load session: %w", err)}
	}
	system := s.cfg.System
	if sess.System != nil {
		system = *sess.System
	}
	turn := &agent.Turn{
		Session:    key,
		RunID:      rec.ID,
		Input:      rec.Input,
		System:     system,
		Workspace:  s.workspace(key),
		Transcript: &transcript{st: s.st, key: key, fence: lr.fence},
		Events:     lr.w,
		Inbox:      inbox.FromStore(s.st, key),
		Confirm:    &confirmer{s: s, lr: lr},
	}
	out := s.agent.Run(ctx, c, turn)
	return run.Outcome{Reason: out.Reason, Reply: out.Reply, Err: out.Err, Usage: out.Usage}
}

// acquire takes the session's turn lease for runID, waiting out a lease
// left by a lost instance, and then records that instance's runs as
// failed.
func (s *Service) acquire(ctx context.Context, key rein.SessionKey, runID string) (*store.Lease, error) {
	for {
		l, err := s.st.AcquireLease(ctx, key, s.cfg.Instance, runID, s.cfg.LeaseTTL)
		if err == nil {
			s.reapSession(ctx, key, l, runID)
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := s.cfg.LeaseTTL / 3
		if errors.Is(err, rein.ErrSessionBusy) {
			if cur, gerr := s.st.GetLease(ctx, key); gerr == nil {
				if d := cur.ExpiresAt.Sub(s.now()); d > 0 && d < wait {
					wait = d + time.Millisecond
				}
			}
		} else {
			s.log.Warn("acquire turn lease", "session", key.String(), "run", runID, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// renewLoop keeps the run's lease alive. Losing it (another instance took
// the turn after we failed to renew in time) cancels the run: its fenced
// writes would fail anyway.
func (s *Service) renewLoop(ctx context.Context, lr *liveRun, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lr.mu.Lock()
		l := lr.lease
		lr.mu.Unlock()
		nl, err := s.st.RenewLease(ctx, l, s.cfg.LeaseTTL)
		switch {
		case err == nil:
			lr.mu.Lock()
			lr.lease = nl
			lr.mu.Unlock()
		case errors.Is(err, rein.ErrLeaseLost):
			s.log.Error("turn lease lost; cancelling run", "session", lr.key().String(), "run", lr.rec.ID)
			lr.h.Cancel()
			return
		case ctx.Err() != nil:
			return
		default:
			s.log.Warn("renew turn lease", "session", lr.key().String(), "run", lr.rec.ID, "err", err)
		}
	}
}

// finish records a run's end: its events flushed, its record terminal,
// its session.run_completed as the last event of the run, its pending
// confirmations closed, and its lease released — before its lane admits
// the next run.
func (s *Service) finish(lr *liveRun, res run.Result) {
	lr.mu.Lock()
	drained, renew, renewed := lr.drained, lr.renew, lr.renewed
	lr.mu.Unlock()
	if drained {
		return
	}
	if renew != nil {
		renew()
		<-renewed
	}
	key := lr.key()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lr.w.Flush(ctx); err != nil {
		s.log.Error("run events not all recorded", "session", key.String(), "run", lr.rec.ID, "err", err)
	}
	fence := lr.fence()
	errText := ""
	if res.Status == rein.StatusFailed && res.Err != nil {
		errText = res.Err.Error()
	}
	usage := res.Usage
	_, uerr := s.st.UpdateRun(ctx, key, fence, lr.rec.ID, store.RunUpdate{
		Status: res.Status, Reason: res.Reason, Error: errText, EndedAt: s.now(), Usage: &usage})
	// Confirmations close before anyone can see run_completed.
	if err := s.st.CloseConfirmations(ctx, key, lr.rec.ID); err != nil {
		s.log.Warn("close confirmations", "session", key.String(), "run", lr.rec.ID, "err", err)
	}
	switch err := uerr; {
	case err == nil:
		ev := rein.NewEvent(rein.EventRunCompleted, lr.rec.ID, rein.RunCompletedPayload{RunID: lr.rec.ID, Status: res.Status, Reason: res.Reason, Error: errText})
		if _, err := s.appendEvents(ctx, key, fence, []rein.Event{ev}); err != nil {
			s.log.Error("record run completion", "session", key.String(), "run", lr.rec.ID, "err", err)
		}
	case errors.Is(err, rein.ErrConflict):
		// Already terminal in the store (another instance recorded it).
	default:
		s.log.Error("record run end", "session", key.String(), "run", lr.rec.ID, "err", err)
	}
	lr.mu.Lock()
	lease, stopAt, stopMode := lr.lease, lr.stopAt, lr.stopMode
	lr.mu.Unlock()
	if lease != nil {
		if err := s.st.ReleaseLease(ctx, lease); err != nil {
			s.log.Warn("release turn lease", "session", key.String(), "run", lr.rec.ID, "err", err)
		}
	}
	s.cfg.Observer.RunEnded(res.Status, res.Reason)
	if !stopAt.IsZero() {
		s.cfg.Observer.StopLatency(stopMode, time.Since(stopAt))
	}
}

// noteStop remembers when a stop was requested, for the latency metric.
func (s *Service) noteStop(runID, mode string) {
	s.mu.Lock()
	lr := s.live[runID]
	s.mu.Unlock()
	if lr == nil {
		return
	}
	lr.mu.Lock()
	if lr.stopAt.IsZero() {
		lr.stopAt, lr.stopMode = time.Now(), mode
	}
	lr.mu.Unlock()
}

// transcript binds a session's history to a run, fenced by its lease.
type transcript struct {
	st    store.History
	key   rein.SessionKey
	fence func() store.Fence
}

func (t *transcript) Load(ctx context.Context) ([]rein.Message, error) {
	return t.st.LoadHistory(ctx, t.key)
}

func (t *transcript) Append(ctx context.Context, msgs ...rein.Message) error {
	return t.st.AppendHistory(ctx, t.key, t.fence(), msgs)
}

// confirmer implements agent.Confirmer with a durable pending confirmation,
// the session.tool_confirmation_requested event, and the in-process gate
// that wakes the run when ConfirmTool stores the answer.
type confirmer struct {
	s  *Service
	lr *liveRun
}

func (c *confirmer) Confirm(ctx context.Context, req agent.ConfirmRequest) (tool.Decision, error) {
	p, err := c.s.gate.Open(req.Session, req.ToolUseID)
	if err != nil {
		return tool.Decision{}, err
	}
	defer p.Close()
	if err := c.s.st.CreateConfirmation(ctx, &store.Confirmation{
		Owner: req.Session.Owner, SessionID: req.Session.ID, RunID: req.RunID, ToolUseID: req.ToolUseID,
		Name: req.Name, Input: req.Input, State: store.ConfirmationPending, CreatedAt: c.s.now(),
	}); err != nil {
		return tool.Decision{}, err
	}
	if err := c.lr.w.Emit(ctx, rein.NewEvent(rein.EventToolConfirmationRequested, req.RunID, rein.ToolConfirmationRequestedPayload{
		RunID: req.RunID, ToolUseID: req.ToolUseID, Name: req.Name, Input: req.Input})); err != nil {
		return tool.Decision{}, err
	}
	return p.Wait(ctx)
}
