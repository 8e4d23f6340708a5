package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// When a user.message finds the session's turn held (SPEC §3).
const (
	WhenBusyReject    = "reject"
	WhenBusyEnqueue   = "enqueue"
	WhenBusyInterrupt = "interrupt"
)

// Stop modes of user.interrupt.
const (
	ModeCancel    = "cancel"
	ModeInterrupt = "interrupt"
)

// MessageRequest is a user.message.
type MessageRequest struct {
	// Text is the user's input (non-empty).
	Text string
	// WhenBusy is reject (default), enqueue or interrupt.
	WhenBusy string
	// ClientID makes the call idempotent per session.
	ClientID string
	// Timeout, when positive, is the run's deadline, queue time included.
	Timeout time.Duration
}

// MessageResult is the answer to a user.message.
type MessageResult struct {
	RunID  string
	Status rein.RunStatus
	// Repeat is true when ClientID named an existing run: nothing started.
	Repeat bool
}

// SendMessage starts a run for a user message, or queues it, or rejects it
// with session_busy (SPEC §3 user.message).
func (s *Service) SendMessage(ctx context.Context, key rein.SessionKey, req MessageRequest) (MessageResult, error) {
	if req.Text == "" {
		return MessageResult{}, rein.InvalidArgument("text", "text must be a non-empty string")
	}
	switch req.WhenBusy {
	case "":
		req.WhenBusy = WhenBusyReject
	case WhenBusyReject, WhenBusyEnqueue, WhenBusyInterrupt:
	default:
		return MessageResult{}, rein.InvalidArgument("when_busy", "when_busy must be reject, enqueue or interrupt")
	}
	if req.Timeout < 0 {
		return MessageResult{}, rein.InvalidArgument("timeout_s", "timeout_s must be > 0")
	}
	unlock := s.lock(key)
	defer unlock()
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return MessageResult{}, err
	}
	if req.ClientID != "" {
		if prev, err := s.st.GetRunByClientID(ctx, key, req.ClientID); err == nil {
			return MessageResult{RunID: prev.ID, Status: s.statusOf(prev), Repeat: true}, nil
		} else if !errors.Is(err, rein.ErrNotFound) {
			return MessageResult{}, err
		}
	}
	if err := s.unavailableIfDraining(); err != nil {
		return MessageResult{}, err
	}
	holder, queued, err := s.turn(ctx, key)
	if err != nil {
		return MessageResult{}, err
	}
	busy := holder != "" || queued > 0
	if busy && req.WhenBusy == WhenBusyReject {
		s.cfg.Observer.AdmissionConflict()
		if holder == "" {
			holder = s.firstQueued(key)
		}
		return MessageResult{}, &rein.Error{Code: rein.CodeSessionBusy, Message: "the session is busy with another run", RunID: holder}
	}
	now := s.now()
	rec := &store.RunRecord{
		Owner: key.Owner, SessionID: key.ID, ID: id.New(id.Run), Status: rein.StatusQueued,
		Input: req.Text, ClientID: req.ClientID, QueueOrder: now.UnixNano(), CreatedAt: now,
	}
	front := busy && req.WhenBusy == WhenBusyInterrupt
	if front {
		rec.QueueOrder = -now.UnixNano()
	}
	if req.Timeout > 0 {
		rec.Deadline = now.Add(req.Timeout)
	}
	if err := s.st.CreateRun(ctx, rec); err != nil {
		if errors.Is(err, rein.ErrConflict) && req.ClientID != "" {
			if prev, gerr := s.st.GetRunByClientID(ctx, key, req.ClientID); gerr == nil {
				return MessageResult{RunID: prev.ID, Status: s.statusOf(prev), Repeat: true}, nil
			}
		}
		return MessageResult{}, err
	}
	evs := []rein.Event{rein.NewEvent(rein.EventUserMessage, rec.ID, rein.UserMessagePayload{Text: req.Text, RunID: rec.ID})}
	if busy {
		pos := queued + 1
		if front {
			pos = 1
		}
		evs = append(evs, rein.NewEvent(rein.EventRunQueued, rec.ID, rein.RunQueuedPayload{RunID: rec.ID, Position: pos}))
	}
	if _, err := s.appendEvents(ctx, key, store.Fence{}, evs); err != nil {
		// The run record exists but nobody was told: end it so the session
		// is not left busy.
		s.abandon(rec, err)
		return MessageResult{}, err
	}
	st, err := s.launch(rec, front)
	if err != nil {
		return MessageResult{}, err
	}
	if front {
		s.interruptCurrent(key)
		st = rein.StatusQueued
	}
	return MessageResult{RunID: rec.ID, Status: st}, nil
}

// turn returns the run holding the session's turn ("" if none) and how
// many runs are queued, from this process's lanes and the store's lease.
func (s *Service) turn(ctx context.Context, key rein.SessionKey) (holder string, queued int, err error) {
	running, q, err := s.lane(ctx, key)
	if err != nil {
		return "", 0, err
	}
	if running != nil {
		holder = running.ID()
	}
	queued = len(q)
	if holder == "" {
		l, err := s.st.GetLease(ctx, key)
		switch {
		case err == nil:
			if l.ExpiresAt.After(s.now()) {
				holder = l.RunID
			}
		case !errors.Is(err, rein.ErrNotFound):
			return "", 0, err
		}
	}
	return holder, queued, nil
}

// statusOf is a run's current status: the live handle's while this process
// runs it (the record says QUEUED until the admitted run has taken its
// lease and recorded RUNNING), else — and once its outcome is decided and
// being recorded — the stored one.
func (s *Service) statusOf(rec *store.RunRecord) rein.RunStatus {
	s.mu.Lock()
	lr := s.live[rec.ID]
	s.mu.Unlock()
	if lr != nil && !lr.h.Decided() {
		return lr.h.Status()
	}
	return rec.Status
}

// lane returns the session's running run in this process (nil if none)
// and its queued runs. A run whose outcome is decided (it is recording its
// end, so its run_completed may already be visible, or it just turned
// terminal and its lane has not moved on yet) is no longer the session's
// current run: lane waits the moment until the lane moves on.
func (s *Service) lane(ctx context.Context, key rein.SessionKey) (running *run.Run, queued []*run.Run, err error) {
	running, queued = s.engine.Lane(key)
	for running != nil && running.Decided() {
		select {
		case <-running.Done():
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		running, queued = s.engine.Lane(key)
	}
	return running, queued, nil
}

func (s *Service) firstQueued(key rein.SessionKey) string {
	if _, q := s.engine.Lane(key); len(q) > 0 {
		return q[0].ID()
	}
	return ""
}

// interruptCurrent interrupts the session's running run for
// when_busy=interrupt and cancels it if it has not ended after the grace
// period.
func (s *Service) interruptCurrent(key rein.SessionKey) {
	running, _ := s.engine.Lane(key)
	if running == nil || !running.Interrupt("") {
		return
	}
	s.noteStop(running.ID(), ModeInterrupt)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(s.cfg.InterruptGrace)
		defer t.Stop()
		select {
		case <-running.Done():
		case <-t.C:
			running.Cancel()
		case <-s.ctx.Done():
		}
	}()
}

// InterruptRequest is a user.interrupt.
type InterruptRequest struct {
	// RunID names the run to stop; nil stops the session's current run.
	RunID *string
	// Mode is cancel (default) or interrupt.
	Mode string
	// Message is recorded on the event; never treated as input.
	Message *string
}

// InterruptResult is the answer to a user.interrupt.
type InterruptResult struct {
	Accepted bool
	// RunID is the run the request targeted ("" when there was none).
	RunID string
}

// Interrupt stops one run exactly (by id) or the session's current run
// (SPEC §3 user.interrupt). It never touches another run: a run id that is
// terminal, unknown or of another session is answered accepted=false.
func (s *Service) Interrupt(ctx context.Context, key rein.SessionKey, req InterruptRequest) (InterruptResult, error) {
	switch req.Mode {
	case "":
		req.Mode = ModeCancel
	case ModeCancel, ModeInterrupt:
	default:
		return InterruptResult{}, rein.InvalidArgument("mode", "mode must be cancel or interrupt")
	}
	if req.RunID != nil && *req.RunID == "" {
		return InterruptResult{}, rein.InvalidArgument("run_id", "run_id must be a non-empty string when present")
	}
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return InterruptResult{}, err
	}
	target := ""
	if req.RunID != nil {
		target = *req.RunID
	} else {
		running, _, err := s.lane(ctx, key)
		if err != nil {
			return InterruptResult{}, err
		}
		if running != nil {
			target = running.ID()
		}
	}
	msg := ""
	if req.Message != nil {
		msg = *req.Message
	}
	event := func(accepted bool) rein.Event {
		p := rein.UserInterruptPayload{Mode: req.Mode, Accepted: accepted, Message: req.Message}
		if target != "" {
			p.RunID = &target
		}
		return rein.NewEvent(rein.EventUserInterrupt, target, p)
	}
	// An accepted stop is logged before it takes effect, so the stopped
	// run's session.run_completed comes after the user.interrupt that
	// caused it. The append must not be cut short by the requester going
	// away: the stop happens regardless.
	var logErr error
	announce := func() {
		s.noteStop(target, req.Mode)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, logErr = s.appendEvents(actx, key, store.Fence{}, []rein.Event{event(true)})
	}
	accepted := false
	if target != "" {
		if h, ok := s.registry.Find(key, target); ok {
			if req.Mode == ModeInterrupt {
				accepted = h.InterruptAnnounced(msg, announce)
			} else {
				accepted = h.CancelAnnounced(announce)
			}
		}
	}
	if accepted {
		if logErr != nil {
			return InterruptResult{}, logErr
		}
	} else if _, err := s.appendEvents(ctx, key, store.Fence{}, []rein.Event{event(false)}); err != nil {
		return InterruptResult{}, err
	}
	return InterruptResult{Accepted: accepted, RunID: target}, nil
}

// SupplementRequest is a user.supplement.
type SupplementRequest struct {
	Text string
	// ID is the client's idempotency key ("" → generated).
	ID string
	// Source labels the note ("" → user).
	Source string
}

// SupplementResult is the answer to a user.supplement.
type SupplementResult struct {
	ID      string
	Status  store.SupplementStatus
	Created bool
}

// Supplement pushes a note into the session's inbox (SPEC §5). It is
// durable when this returns.
func (s *Service) Supplement(ctx context.Context, key rein.SessionKey, req SupplementRequest) (SupplementResult, error) {
	if req.Text == "" {
		return SupplementResult{}, rein.InvalidArgument("text", "text must be a non-empty string")
	}
	if req.Source == "" {
		req.Source = "user"
	}
	unlock := s.lock(key)
	defer unlock()
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return SupplementResult{}, err
	}
	if req.ID != "" {
		if prev, err := s.st.GetSupplement(ctx, key, req.ID); err == nil {
			return SupplementResult{ID: prev.ID, Status: prev.Status}, nil
		} else if !errors.Is(err, rein.ErrNotFound) {
			return SupplementResult{}, err
		}
	} else {
		req.ID = id.New(id.Supplement)
	}
	if err := s.unavailableIfDraining(); err != nil {
		return SupplementResult{}, err
	}
	// The event goes first so that the log shows the note before any
	// agent.supplement_consumed for it.
	ev := rein.NewEvent(rein.EventUserSupplement, "", rein.SupplementPayload{SupplementID: req.ID, Text: req.Text, Source: req.Source})
	if _, err := s.appendEvents(ctx, key, store.Fence{}, []rein.Event{ev}); err != nil {
		return SupplementResult{}, err
	}
	sup, created, err := s.st.PushSupplement(ctx, &store.Supplement{
		Owner: key.Owner, SessionID: key.ID, ID: req.ID, Text: req.Text, Source: req.Source,
		Status: store.SupplementQueued, CreatedAt: s.now(),
	})
	if err != nil {
		return SupplementResult{}, err
	}
	return SupplementResult{ID: sup.ID, Status: sup.Status, Created: created}, nil
}

// ConfirmRequest is a user.tool_confirmation.
type ConfirmRequest struct {
	ToolUseID   string
	Allow       bool
	DenyMessage *string
}

// ConfirmTool answers a pending tool confirmation (SPEC §6): not_found for
// an unknown id, conflict when it is no longer pending.
func (s *Service) ConfirmTool(ctx context.Context, key rein.SessionKey, req ConfirmRequest) (*store.Confirmation, error) {
	if req.ToolUseID == "" {
		return nil, rein.InvalidArgument("tool_use_id", "tool_use_id must be a non-empty string")
	}
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return nil, err
	}
	deny := ""
	if req.DenyMessage != nil {
		deny = *req.DenyMessage
	}
	c, err := s.st.ResolveConfirmation(ctx, key, req.ToolUseID, req.Allow, deny)
	if err != nil {
		return nil, err
	}
	ev := rein.NewEvent(rein.EventUserToolConfirmation, c.RunID, rein.UserToolConfirmationPayload{ToolUseID: req.ToolUseID, Allow: req.Allow, DenyMessage: req.DenyMessage})
	_, aerr := s.appendEvents(ctx, key, store.Fence{}, []rein.Event{ev})
	// The decision is stored: wake the run even if the event failed.
	s.gate.Deliver(key, req.ToolUseID, tool.Decision{Allow: req.Allow, DenyMessage: deny})
	if aerr != nil {
		return nil, aerr
	}
	return c, nil
}

// SetSystem replaces the session's system-prompt override for later runs
// (SPEC §3 system.message); the current run is not changed.
func (s *Service) SetSystem(ctx context.Context, key rein.SessionKey, text string) error {
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return err
	}
	// An empty text is an explicit empty override, not "back to default".
	if err := s.st.SetSystem(ctx, key, &text); err != nil {
		return err
	}
	_, err := s.appendEvents(ctx, key, store.Fence{}, []rein.Event{rein.NewEvent(rein.EventSystemMessage, "", rein.SystemMessagePayload{Text: text})})
	return err
}

func (s *Service) appendEvents(ctx context.Context, key rein.SessionKey, f store.Fence, evs []rein.Event) ([]rein.Event, error) {
	t0 := time.Now()
	out, err := s.st.AppendEvents(ctx, key, f, evs)
	s.cfg.Observer.EventsAppended(time.Since(t0), len(evs))
	return out, err
}
