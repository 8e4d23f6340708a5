package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// Instances that share a store (store.Messenger: PostgreSQL) push each
// other what they would otherwise find out only at a lease's expiry: a
// stop for a run the other executes (answered, so `accepted` is the
// truth of the instance that decides), a stop recorded on a run, and a
// session's turn released. Every message has a fallback that does not
// depend on its delivery: a stop is recorded on the run (applied at the
// holder's next renewal, or by whoever takes the run up), and a waiting
// schedule looks again at the lease's expiry.

// Kinds of instance messages.
const (
	msgKick    = "kick"    // a session's turn was released, or its queue changed
	msgStop    = "stop"    // stop this run if you execute it, and answer
	msgStopped = "stopped" // the answer to msgStop
	msgApply   = "apply"   // apply the stop recorded on this run
)

// message is an instance message on the wire.
type message struct {
	Kind    string  `json:"k"`
	From    string  `json:"f,omitempty"`
	Owner   string  `json:"o,omitempty"`
	Session string  `json:"s,omitempty"`
	Run     string  `json:"r,omitempty"`
	Mode    string  `json:"m,omitempty"`
	Text    *string `json:"t,omitempty"`
	Req     string  `json:"q,omitempty"`
	// ClientID is the client id a stop named (logged on its event).
	ClientID string `json:"c,omitempty"`
	Accepted bool   `json:"a,omitempty"`
	// Here: the addressee executes the run (its answer is the truth).
	Here bool `json:"h,omitempty"`
}

func (m message) key() rein.SessionKey { return rein.SessionKey{Owner: m.Owner, ID: m.Session} }

// askTimeout bounds how long a stop waits for the instance that runs the
// run; past it the stop is recorded on the run instead.
const askTimeout = time.Second

// replies are the answers awaited by askHolder, by request id.
type replies struct {
	mu sync.Mutex
	m  map[string]chan message
}

func (s *Service) send(to string, m message) {
	if s.msgr == nil {
		return
	}
	m.From = s.cfg.Instance
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := s.msgr.Send(ctx, to, b); err != nil && s.ctx.Err() == nil {
		s.log.Warn("send instance message", "kind", m.Kind, "to", to, "err", err)
	}
}

func (s *Service) broadcast(m message) { s.send("", m) }

// releasedTurn tells the instances sharing the store that key's turn is
// free, so one with a run waiting for it claims it now.
func (s *Service) releasedTurn(key rein.SessionKey) {
	if s.msgr == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.broadcast(message{Kind: msgKick, Owner: key.Owner, Session: key.ID})
	}()
}

// askHolder asks the instance executing target (the holder of the
// session's lease) to stop it, and waits for its answer. ok is false when
// no other instance holds it, or none answered in time.
func (s *Service) askHolder(ctx context.Context, key rein.SessionKey, target, clientID string, mode rein.StopMode, text *string) (accepted, ok bool) {
	if s.msgr == nil {
		return false, false
	}
	l, err := s.st.GetLease(ctx, key)
	if err != nil || l.RunID != target || l.Holder == s.cfg.Instance || !l.ExpiresAt.After(s.now()) {
		return false, false
	}
	req := id.New("req_")
	ch := make(chan message, 1)
	s.replies.mu.Lock()
	if s.replies.m == nil {
		s.replies.m = map[string]chan message{}
	}
	s.replies.m[req] = ch
	s.replies.mu.Unlock()
	defer func() {
		s.replies.mu.Lock()
		delete(s.replies.m, req)
		s.replies.mu.Unlock()
	}()
	s.send(l.Holder, message{Kind: msgStop, Owner: key.Owner, Session: key.ID, Run: target, Mode: string(mode), Text: text, Req: req, ClientID: clientID})
	t := time.NewTimer(askTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if !r.Here {
			return false, false
		}
		return r.Accepted, true
	case <-t.C:
		return false, false
	case <-ctx.Done():
		return false, false
	}
}

// onMessage handles an instance message (on the store's goroutine: the
// work goes to one of ours).
func (s *Service) onMessage(b []byte) {
	var m message
	if json.Unmarshal(b, &m) != nil || m.From == s.cfg.Instance && m.Kind != msgStopped {
		return
	}
	switch m.Kind {
	case msgStopped:
		s.replies.mu.Lock()
		ch := s.replies.m[m.Req]
		s.replies.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
		return
	case msgKick:
		if s.holdsWork(m.key()) {
			s.kick(m.key())
		}
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		switch m.Kind {
		case msgStop:
			ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
			defer cancel()
			accepted, here, err := s.stopLocal(ctx, m.key(), m.Run, m.ClientID, rein.StopMode(m.Mode), m.Text)
			if err != nil {
				s.log.Warn("stop asked by another instance", "run", m.Run, "err", err)
			}
			s.send(m.From, message{Kind: msgStopped, Req: m.Req, Accepted: accepted, Here: here})
		case msgApply:
			s.applyRecordedStop(m.Run)
		}
	}()
}

// applyRecordedStop applies the stop recorded on a run this instance
// executes (when_busy interrupt or rollback, or a stop that reached the
// store while this instance did not answer).
func (s *Service) applyRecordedStop(runID string) {
	lr := s.liveRun(runID)
	if lr == nil {
		return
	}
	lr.mu.Lock()
	running, applied := lr.st == stClaimed || lr.st == stExecuting, lr.stopApplied
	lr.mu.Unlock()
	if !running || applied {
		return
	}
	rec, err := s.st.GetRun(s.ctx, lr.key(), runID)
	if err != nil || rec.Stop == store.StopNone || rec.Status.Terminal() {
		return
	}
	lr.mu.Lock()
	lr.stopApplied = true
	lr.mu.Unlock()
	switch rec.Stop {
	case store.StopInterrupt:
		s.stopForMessage(lr.key(), runID, rein.WhenBusyInterrupt)
	default:
		lr.noteStop(string(rein.StopCancel))
		lr.h.Cancel()
	}
}

// listen starts handling instance messages and heartbeats, when the store
// offers them.
func (s *Service) listen() {
	if s.msgr != nil {
		s.stopListen = s.msgr.Listen(s.cfg.Instance, s.onMessage)
	}
}

// heartbeat records this instance as alive, when the store keeps such rows.
func (s *Service) heartbeat() {
	hb, ok := s.st.(store.Heartbeats)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := hb.Heartbeat(ctx, s.cfg.Instance, s.cfg.LeaseTTL); err != nil && !errors.Is(err, context.Canceled) && s.ctx.Err() == nil {
		s.log.Warn("heartbeat", "err", err)
	}
}

// leave removes this instance's heartbeat row and stops listening.
func (s *Service) leave() {
	if s.stopListen != nil {
		s.stopListen()
	}
	if hb, ok := s.st.(store.Heartbeats); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hb.Leave(ctx, s.cfg.Instance)
	}
}
