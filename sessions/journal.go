// A run's agent.Journal and agent.Confirmer over the store: every method one
// lifecycle write, fenced by the run's lease.

package sessions

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/tool"
)

// journal is a run's agent.Journal: every method one lifecycle write,
// fenced by the run's lease, after the run's streamed events.
type journal struct {
	s  *Service
	lr *liveRun
	// confirmTTL is how long the run's confirmations wait for an answer
	// before they expire (0: for ever): its agent's, else the service's.
	// Set before the loop runs.
	confirmTTL time.Duration
}

func (j *journal) Load(ctx context.Context) ([]rein.Message, error) {
	return j.s.loadTranscript(ctx, j.lr.key(), j.lr.id)
}

func (j *journal) SaveInput(ctx context.Context, m rein.Message) error {
	fence, err := j.lr.fence()
	if err != nil {
		return err
	}
	return j.s.life.saveInput(ctx, j.lr.key(), fence, m)
}

func (j *journal) Consume(ctx context.Context, step int) ([]rein.Message, error) {
	n, err := j.s.st.PendingSupplements(ctx, j.lr.key())
	if err != nil || n == 0 {
		return nil, err
	}
	fence, err := j.before(ctx)
	if err != nil {
		return nil, err
	}
	return j.s.life.consume(ctx, j.lr.key(), fence, j.lr.id, step)
}

func (j *journal) Pending(ctx context.Context) (int, error) {
	return j.s.st.PendingSupplements(ctx, j.lr.key())
}

func (j *journal) SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall, req *rein.ModelRequestPayload) error {
	fence, err := j.before(ctx)
	if err != nil {
		return err
	}
	if err := j.s.life.saveStep(ctx, j.lr.key(), fence, j.lr.id, step, asst, confirm, j.confirmTTL, req); err != nil {
		return err
	}
	if len(confirm) > 0 && j.confirmTTL > 0 {
		// This instance's timer covers the expiries it just wrote; the
		// others find them by their scan (expiry.go).
		j.s.expiry.due(j.s.now().Add(j.confirmTTL))
	}
	return nil
}

func (j *journal) SaveResult(ctx context.Context, res rein.Message) error {
	fence, err := j.before(ctx)
	if err != nil {
		return err
	}
	return j.s.life.saveResult(ctx, j.lr.key(), fence, res)
}

func (j *journal) Finish(_ context.Context, msgs []rein.Message, evs []rein.Event) error {
	j.lr.mu.Lock()
	if j.lr.closingMsgs == nil {
		// Finish is the loop's last call: what it hands over is not
		// touched again, and is kept as it is.
		j.lr.closingMsgs = msgs
	} else {
		j.lr.closingMsgs = append(j.lr.closingMsgs, msgs...)
	}
	switch {
	case j.lr.closingEvs == nil && cap(evs) > len(evs):
		// Room already for the session.run_completed the end appends.
		j.lr.closingEvs = evs
	default:
		j.lr.closingEvs = append(slices.Grow(j.lr.closingEvs, len(evs)+1), evs...)
	}
	j.lr.mu.Unlock()
	return nil
}

// before flushes the run's streamed events, so that what a journal write
// records comes after them in the log, and returns the run's fence.
func (j *journal) before(ctx context.Context) (store.Fence, error) {
	if err := j.lr.w.Flush(ctx); err != nil {
		return store.Fence{}, err
	}
	return j.lr.fence()
}

// loadTranscript is the session's history as the next model request of
// run self sees it: the turns of rolled-back runs are left out.
func (s *Service) loadTranscript(ctx context.Context, key rein.SessionKey, self string) ([]rein.Message, error) {
	hist, err := s.st.LoadHistory(ctx, key)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(hist, func(m rein.Message) bool { return m.RunID != "" && m.RunID != self }) {
		// No other run's turn to leave out (a session's first run): the
		// runs need not be read.
		return hist, nil
	}
	runs, err := s.st.ListRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	var rolled map[string]bool
	for _, r := range runs {
		if r.RolledBack {
			if rolled == nil {
				rolled = map[string]bool{}
			}
			rolled[r.ID] = true
		}
	}
	if rolled == nil {
		return hist, nil
	}
	out := hist[:0:0]
	for _, m := range hist {
		if m.RunID == "" || !rolled[m.RunID] {
			out = append(out, m)
		}
	}
	return out, nil
}

// confirmer waits for answers with the in-process gate, which ConfirmTool
// opens the moment the durable answer is stored; an answer stored while
// no one waited (before a restart) is read from the store. An allowed call
// is marked started in the store before it runs, so a lost instance's
// allowed call runs exactly once: never again once started (in doubt),
// once if it never started.
type confirmer struct {
	s  *Service
	lr *liveRun
}

func (c *confirmer) Open(req agent.ConfirmRequest) (agent.Pending, error) {
	p, err := c.s.gate.Open(req.Session, req.ToolUseID)
	if err != nil {
		return nil, err
	}
	return &pendingConfirmation{c: c, key: req.Session, id: req.ToolUseID, p: p}, nil
}

type pendingConfirmation struct {
	c   *confirmer
	key rein.SessionKey
	id  string
	p   *tool.Pending
}

func (pc *pendingConfirmation) Wait(ctx context.Context) (tool.Decision, error) {
	d, err := pc.decision(ctx)
	if err != nil || !d.Allow {
		return d, err
	}
	fence, err := pc.c.lr.fence()
	if err != nil {
		return tool.Decision{}, err
	}
	if err := pc.c.s.life.startCall(ctx, pc.key, fence, pc.id); err != nil {
		return tool.Decision{}, err
	}
	return d, nil
}

func (pc *pendingConfirmation) decision(ctx context.Context) (tool.Decision, error) {
	if c, err := pc.c.s.st.GetConfirmation(ctx, pc.key, pc.id); err == nil {
		switch c.State {
		case store.ConfirmationAllowed:
			return tool.Decision{Allow: true}, nil
		case store.ConfirmationDenied, store.ConfirmationExpired:
			return tool.Decision{Allow: false, DenyMessage: c.DenyMessage}, nil
		case store.ConfirmationClosed, store.ConfirmationStarted:
			return tool.Decision{}, rein.Errorf(rein.CodeConflict, "the confirmation is %s", c.State)
		}
	} else if !errors.Is(err, rein.ErrNotFound) {
		return tool.Decision{}, err
	}
	return pc.p.Wait(ctx)
}

// Close releases the in-process waiter; the durable confirmation is
// untouched (the run may park and open it again later).
func (pc *pendingConfirmation) Close() { pc.p.Release() }

// Answered implements agent.Answerable: whether the durable answer is there.
func (pc *pendingConfirmation) Answered(ctx context.Context) (bool, error) {
	c, err := pc.c.s.st.GetConfirmation(ctx, pc.key, pc.id)
	if err != nil {
		return false, err
	}
	return c.State != store.ConfirmationPending, nil
}
