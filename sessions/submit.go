package sessions

import (
	"context"
	"errors"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// MessageRequest is a user.message.
type MessageRequest struct {
	// Text is the user's input (non-empty).
	Text string
	// WhenBusy is reject (default), enqueue, interrupt or rollback.
	WhenBusy rein.WhenBusy
	// ClientID makes the call idempotent per session.
	ClientID string
	// Timeout, when positive, is the run's deadline, queue time included.
	Timeout time.Duration
	// Budget bounds what the run may spend (nil: none; CheckBudget). A
	// cost bound needs the session's agent's model to have a price.
	Budget *rein.Budget
}

// MessageResult is the answer to a user.message, and a handle on the run
// it names: Wait blocks until that run ends.
type MessageResult struct {
	// RunID is the run the message started, or for a repeat the run its
	// ClientID named.
	RunID string
	// Status is the run's status when SendMessage answered: RUNNING or
	// QUEUED, or for a repeat whatever the run has come to.
	Status rein.RunStatus
	// MessageID is the id of the user.message event that carries the
	// text ("" for a client_id repeat).
	MessageID string
	// Repeat is true when ClientID named an existing run: nothing started.
	Repeat bool

	// svc and key are where Wait reads the run's end (svc nil: the value
	// did not come from SendMessage).
	svc *Service
	key rein.SessionKey
	// after is a cursor no later than the run's first event (0: the
	// log's start, for a repeat).
	after int64
}

// SendMessage starts a run for a user message, or queues it, or rejects it
// with session_busy (docs/api.md user.message). The busy decision, the run and
// its events, and the run a when_busy interrupt or rollback stops, are one
// write (lifecycle.admit): the run stopped is always one that held the turn
// before this message, never the one it starts.
func (s *Service) SendMessage(ctx context.Context, key rein.SessionKey, req MessageRequest) (MessageResult, error) {
	if req.Text == "" {
		return MessageResult{}, rein.InvalidArgument("text", "text must be a non-empty string")
	}
	if req.WhenBusy == "" {
		req.WhenBusy = rein.WhenBusyReject
	}
	if !req.WhenBusy.Valid() {
		return MessageResult{}, rein.InvalidArgument("when_busy", "when_busy must be reject, enqueue, interrupt or rollback")
	}
	if req.Timeout < 0 {
		return MessageResult{}, rein.InvalidArgument("timeout_s", "timeout_s must be > 0")
	}
	if err := CheckBudget(req.Budget, "budget"); err != nil {
		return MessageResult{}, err
	}
	if req.Budget != nil && req.Budget.CostUSD > 0 {
		// Only a cost bound needs the session's agent: its model's price.
		sess, err := s.st.GetSession(ctx, key)
		if err != nil {
			return MessageResult{}, err
		}
		if err := s.checkPriced(req.Budget, sess.Agent, "budget"); err != nil {
			return MessageResult{}, err
		}
	}
	if req.ClientID == "" {
		// Refused before anything is asked of the store. A message with a
		// client_id is refused inside its admission, once it is known not
		// to be a repeat (a repeat is still answered while draining).
		if err := s.unavailableIfDraining(); err != nil {
			return MessageResult{}, err
		}
	}
	// Beyond the admission bounds the message is refused before anything
	// is written (admission.go); a client_id repeat too, as a repeat
	// retried later answers the same.
	release, err := s.reserveRun()
	if err != nil {
		return MessageResult{}, err
	}
	defer release()
	s.admitting(key)
	a, err := s.life.admit(ctx, key, req)
	if err != nil {
		s.admitDone(key)
		if errors.Is(err, rein.ErrSessionBusy) {
			s.cfg.Observer.AdmissionConflict()
		}
		return MessageResult{}, err
	}
	if a.repeat {
		s.admitDone(key)
		return MessageResult{RunID: a.rec.ID, Status: s.statusOf(ctx, a.rec), Repeat: true, svc: s, key: key}, nil
	}
	if a.stopped {
		// Ended by its own admission: nothing to hold or start.
		s.admitDone(key)
		s.cfg.Observer.RunEnded(a.rec.Status, a.rec.Reason)
		s.logEnd(a.rec, "")
		s.runEnded(key, a.rec.ID, a.rec.Status, a.rec.Reason, nil)
		return s.admitted(key, a), nil
	}
	_, err = s.trackAdmitted(ctx, a, req)
	s.admitDone(key)
	if err != nil {
		// The run is in the store: it is claimed like one left by a lost
		// instance.
		s.log.Error("hold admitted run", "session", key.String(), "run", a.rec.ID, "err", err)
		s.kick(key)
		return s.admitted(key, a), nil
	}
	if a.lease != nil {
		s.startClaimed(claim{rec: a.rec, lease: a.lease})
	} else {
		s.kick(key)
	}
	if a.target != "" {
		s.stopForMessage(key, a.target, req.WhenBusy)
	}
	return s.admitted(key, a), nil
}

// admitted is the answer to a message whose run a just admitted.
func (s *Service) admitted(key rein.SessionKey, a admission) MessageResult {
	return MessageResult{RunID: a.rec.ID, Status: a.rec.Status, MessageID: a.messageID, svc: s, key: key, after: a.messageSeq - 1}
}

// stopForMessage stops the run a when_busy interrupt or rollback chose. The
// stop is already recorded on the run in the store, so a run not executed
// here is stopped by whoever runs or resumes it.
func (s *Service) stopForMessage(key rein.SessionKey, target string, mode rein.WhenBusy) {
	lr := s.liveRun(target)
	if lr == nil {
		// Run elsewhere (or by no one): the instance that runs it applies
		// the stop recorded on it; the schedule here ends it if no one does.
		s.kick(key)
		s.broadcast(message{Kind: msgApply, Owner: key.Owner, Session: key.ID, Run: target})
		return
	}
	lr.mu.Lock()
	lr.stopApplied = true
	lr.mu.Unlock()
	// The mode is noted as the stop is applied, never after: a run the
	// stop reaches before its loop began ends as that mode says (an
	// interrupt: COMPLETED/interrupted), and it may end at once.
	if mode == rein.WhenBusyRollback {
		if lr.h.CancelAnnounced(func() { lr.noteStop(string(rein.StopCancel)) }) {
			s.stopped(lr)
		}
		return
	}
	if !lr.h.InterruptAnnounced("", func() { lr.noteStop(string(rein.StopInterrupt)) }) {
		return
	}
	if lr.state().held() {
		// Never began: the interrupt was a cancel, and it ends here.
		s.stopped(lr)
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(s.cfg.InterruptGrace)
		defer t.Stop()
		select {
		case <-lr.done:
		case <-t.C:
			lr.h.Cancel()
		case <-s.ctx.Done():
		}
	}()
}

// statusOf is a run's current status: QUEUED while this instance holds it
// waiting for its turn, RUNNING while it executes here (the record may
// already say more once its end is being written), else the stored one.
func (s *Service) statusOf(ctx context.Context, rec *store.RunRecord) rein.RunStatus {
	if lr := s.liveRun(rec.ID); lr != nil {
		if st := lr.state(); st == stClaimed || st == stExecuting {
			return rein.StatusRunning
		}
	}
	if cur, err := s.st.GetRun(ctx, rec.Key(), rec.ID); err == nil {
		return cur.Status
	}
	return rec.Status
}

// InterruptRequest is a user.interrupt.
type InterruptRequest struct {
	// RunID names the run to stop; nil stops the session's current run.
	RunID *string
	// ClientID, when set, names the run to stop by the client id of the
	// user.message that started it — or will start it: a stop for a
	// message that has not arrived is remembered (StopMemory), and the
	// message's run is created already ended. Not together with RunID.
	ClientID string
	// Mode is cancel (default) or interrupt.
	Mode rein.StopMode
	// Message is recorded on the event; never treated as input.
	Message *string
}

// StopMemory is how long a stop by client id waits for its user.message.
const StopMemory = 24 * time.Hour

// InterruptResult is the answer to a user.interrupt.
type InterruptResult struct {
	Accepted bool
	// RunID is the run the request targeted ("" when there was none: for
	// a stop by client id, the message has not arrived).
	RunID string
}

// Interrupt stops one run exactly (by id or by client id) or the
// session's current run (docs/api.md user.interrupt). It never touches
// another run: a run id that is terminal, unknown or of another session is
// answered accepted=false. The request is logged once, before the stopped
// run's end.
func (s *Service) Interrupt(ctx context.Context, key rein.SessionKey, req InterruptRequest) (InterruptResult, error) {
	if req.Mode == "" {
		req.Mode = rein.StopCancel
	}
	if !req.Mode.Valid() {
		return InterruptResult{}, rein.InvalidArgument("mode", "mode must be cancel or interrupt")
	}
	if req.RunID != nil && *req.RunID == "" {
		return InterruptResult{}, rein.InvalidArgument("run_id", "run_id must be a non-empty string when present")
	}
	if req.ClientID != "" {
		if req.RunID != nil {
			return InterruptResult{}, rein.InvalidArgument("client_id", "give run_id or client_id, not both")
		}
		return s.interruptByClientID(ctx, key, req)
	}
	target := ""
	if req.RunID != nil {
		target = *req.RunID
	}
	// A run of the session held here proves that the session exists: its
	// stop is not held back by reading the session first.
	if lr := s.liveRun(target); lr == nil || lr.key() != key {
		if _, err := s.st.GetSession(ctx, key); err != nil {
			return InterruptResult{}, err
		}
	}
	if req.RunID == nil {
		runs, err := s.st.ListRuns(ctx, key)
		if err != nil {
			return InterruptResult{}, err
		}
		for _, r := range runs {
			if r.Status == rein.StatusRunning {
				target = r.ID
				break
			}
		}
	}
	if target == "" {
		if err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
			_, err := tx.AppendEvents(interruptEvent("", "", req.Mode, req.Message, false))
			return err
		}); err != nil {
			return InterruptResult{}, err
		}
		return InterruptResult{}, nil
	}
	return s.stopRun(ctx, key, target, "", req)
}

// interruptByClientID is a stop by client id: one write finds the run of
// the message with that client id, or — none has arrived — remembers the
// stop and logs it (decision 0090). The message's admission reads the same
// two things in its own write, so whichever of the two commits second
// sees the other: a stop can never miss its message, nor a message its
// stop. A run found is stopped as by its run id.
func (s *Service) interruptByClientID(ctx context.Context, key rein.SessionKey, req InterruptRequest) (InterruptResult, error) {
	target := ""
	err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		target = ""
		r, err := tx.GetRunByClientID(req.ClientID)
		if err == nil {
			target = r.ID
			return errNothing
		} else if !errors.Is(err, rein.ErrNotFound) {
			return err
		}
		now := tx.Now()
		// The session's stops older than the memory are dropped here, in
		// the write that adds one, not by a sweeper.
		if err := tx.ForgetStops("", now.Add(-StopMemory)); err != nil {
			return err
		}
		if err := tx.RememberStop(&store.RememberedStop{Owner: key.Owner, SessionID: key.ID, ClientID: req.ClientID, Mode: string(req.Mode), CreatedAt: now}); err != nil {
			return err
		}
		_, err = tx.AppendEvents(interruptEvent("", req.ClientID, req.Mode, req.Message, true))
		return err
	})
	if err != nil && !errors.Is(err, errNothing) {
		return InterruptResult{}, err
	}
	if target == "" {
		return InterruptResult{Accepted: true}, nil
	}
	return s.stopRun(ctx, key, target, req.ClientID, req)
}

// stopRun stops target exactly: held here, by its handle; held by another
// instance, by asking it; else by recording the stop on the run in the
// store (a queued run is ended by that write).
func (s *Service) stopRun(ctx context.Context, key rein.SessionKey, target, clientID string, req InterruptRequest) (InterruptResult, error) {
	if accepted, handled, err := s.stopLocal(ctx, key, target, clientID, req.Mode, req.Message); handled {
		if err != nil {
			return InterruptResult{}, err
		}
		return InterruptResult{Accepted: accepted, RunID: target}, nil
	}
	if accepted, ok := s.askHolder(ctx, key, target, clientID, req.Mode, req.Message); ok {
		// The instance that runs it decided, and logged the request.
		return InterruptResult{Accepted: accepted, RunID: target}, nil
	}
	o, err := s.life.stopRemote(ctx, key, target, clientID, req.Mode, req.Message)
	if err != nil {
		return InterruptResult{}, err
	}
	if o.accepted {
		// Recorded on the run: whoever runs it, or takes it up, applies it;
		// the instances that share the store are told at once.
		s.kick(key)
		s.broadcast(message{Kind: msgApply, Owner: key.Owner, Session: key.ID, Run: target})
	}
	if o.ended {
		s.runEndedInStore(key, target)
	}
	return InterruptResult{Accepted: o.accepted, RunID: target}, nil
}

// stopLocal stops a run this instance executes or holds queued: the handle
// decides, and an accepted stop takes effect at once; its request is logged
// right after, and the run's end, which may be written meanwhile, waits for
// that append or makes it itself, ahead of the run's session.run_completed
// (stoplog.go). accepted is answered once the request is logged. handled is
// false when the run is not held here, or when the handle no longer takes
// stops (it is ending): the store decides then.
func (s *Service) stopLocal(ctx context.Context, key rein.SessionKey, target, clientID string, mode rein.StopMode, message *string) (accepted, handled bool, err error) {
	lr := s.liveRun(target)
	if lr == nil || lr.key() != key {
		return false, false, nil
	}
	var note *stopNote
	announce := func() {
		lr.noteStop(string(mode))
		note = lr.oweStop(mode, message, clientID)
	}
	msg := ""
	if message != nil {
		msg = *message
	}
	if mode == rein.StopInterrupt {
		accepted = lr.h.InterruptAnnounced(msg, announce)
	} else {
		accepted = lr.h.CancelAnnounced(announce)
	}
	// The log write must not be cut short by the requester going away.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if !accepted {
		if lr.state() == stFenced || !lr.h.StopSettled(mode == rein.StopInterrupt) {
			// Ending or parking: the store's record decides.
			return false, false, nil
		}
		// A repeated stop of a run that is already stopping (or committed
		// its reply): its record may still say RUNNING, so asking the store
		// would wrongly accept it.
		return false, true, s.life.logStop(actx, key, target, clientID, mode, message, false)
	}
	// A run still held ends now, its end writing the stop's event.
	s.stopped(lr)
	return true, true, s.logOwedStops(actx, lr, note)
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

// Supplement pushes a note into the session's inbox (docs/api.md). The
// supplement and its user.supplement event are one write, durable when this
// returns; a repeat with the same id writes nothing.
func (s *Service) Supplement(ctx context.Context, key rein.SessionKey, req SupplementRequest) (SupplementResult, error) {
	if req.Text == "" {
		return SupplementResult{}, rein.InvalidArgument("text", "text must be a non-empty string")
	}
	if req.Source == "" {
		req.Source = inbox.SourceUser
	}
	if req.ID == "" {
		req.ID = id.New(id.Supplement)
	}
	var res SupplementResult
	err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		sup, created, err := tx.PushSupplement(&store.Supplement{
			Owner: key.Owner, SessionID: key.ID, ID: req.ID, Text: req.Text, Source: req.Source,
			Status: store.SupplementQueued, CreatedAt: tx.Now(),
		})
		if err != nil {
			return err
		}
		res = SupplementResult{ID: sup.ID, Status: sup.Status, Created: created}
		if !created {
			return errNothing
		}
		if err := s.unavailableIfDraining(); err != nil {
			return err
		}
		_, err = tx.AppendEvents(rein.NewEvent(rein.EventUserSupplement, "", rein.SupplementPayload{SupplementID: req.ID, Text: req.Text, Source: req.Source}))
		return err
	})
	if err != nil && !errors.Is(err, errNothing) {
		return SupplementResult{}, err
	}
	return res, nil
}

// ConfirmRequest is a user.tool_confirmation.
type ConfirmRequest struct {
	ToolUseID   string
	Allow       bool
	DenyMessage *string
}

// ConfirmTool answers a pending tool confirmation (docs/tools.md): not_found for
// an unknown id, conflict when it is no longer pending. The answer and its
// user.tool_confirmation event are one write; then the waiting run is woken.
func (s *Service) ConfirmTool(ctx context.Context, key rein.SessionKey, req ConfirmRequest) (*store.Confirmation, error) {
	if req.ToolUseID == "" {
		return nil, rein.InvalidArgument("tool_use_id", "tool_use_id must be a non-empty string")
	}
	deny := ""
	if req.DenyMessage != nil {
		deny = *req.DenyMessage
	}
	var c *store.Confirmation
	err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
		var err error
		if c, err = tx.ResolveConfirmation(req.ToolUseID, req.Allow, deny); err != nil {
			return err
		}
		_, err = tx.AppendEvents(rein.NewEvent(rein.EventUserToolConfirmation, c.RunID, rein.UserToolConfirmationPayload{
			ToolUseID: req.ToolUseID, Allow: req.Allow, DenyMessage: req.DenyMessage}))
		return err
	})
	if err != nil {
		return nil, err
	}
	if !s.gate.Deliver(key, req.ToolUseID, tool.Decision{Allow: req.Allow, DenyMessage: deny}) {
		// No one waits here: the run is parked, or waits on another
		// instance. Its session's schedule takes it up (claimNext).
		s.kick(key)
	}
	return c, nil
}

// SetSystem replaces the session's system-prompt override for later runs
// (docs/api.md system.message); the current run is not changed. The
// override and its system.message are one write (lifecycle.setSystem).
func (s *Service) SetSystem(ctx context.Context, key rein.SessionKey, text string) error {
	return s.life.setSystem(ctx, key, text)
}
