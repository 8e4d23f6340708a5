package memory

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/store"
)

// ------------------------------------------------------------------ history

// AppendHistory implements store.History.
func (s *Store) AppendHistory(ctx context.Context, key rein.SessionKey, fence store.Fence, msgs []rein.Message) error {
	return s.update(ctx, key, fence, func(t *tx) error { return t.AppendHistory(msgs...) })
}

// AppendHistory implements store.Tx.
func (t *tx) AppendHistory(msgs ...rein.Message) error {
	if err := t.check(); err != nil {
		return err
	}
	ss, n := t.ss, len(t.ss.history)
	for _, m := range msgs {
		ss.history = append(ss.history, cloneMessage(m))
	}
	t.onUndo(func() {
		clear(ss.history[n:])
		ss.history = ss.history[:n]
	})
	return nil
}

// LoadHistory implements store.History.
func (s *Store) LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, err
	}
	return ss.loadHistory(), nil
}

// History implements store.Tx.
func (t *tx) History() ([]rein.Message, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.ss.loadHistory(), nil
}

func (ss *session) loadHistory() []rein.Message {
	out := make([]rein.Message, len(ss.history))
	for i, m := range ss.history {
		out[i] = cloneMessage(m)
	}
	return out
}

// ---------------------------------------------------------------- event log

// AppendEvents implements store.EventLog.
func (s *Store) AppendEvents(ctx context.Context, key rein.SessionKey, fence store.Fence, evs []rein.Event) ([]rein.Event, error) {
	var out []rein.Event
	err := s.update(ctx, key, fence, func(t *tx) error {
		var err error
		out, err = t.AppendEvents(evs...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendEvents implements store.Tx. Waiters are woken when the
// transaction commits (see update).
func (t *tx) AppendEvents(evs ...rein.Event) ([]rein.Event, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	// Validate all before storing any: a bad payload must leave the log
	// untouched.
	payloads := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		p, err := jsonOrEmpty("events["+strconv.Itoa(i)+"].payload", e.Payload)
		if err != nil {
			return nil, err
		}
		payloads[i] = p
	}
	ss, n := t.ss, len(t.ss.events)
	out := make([]rein.Event, len(evs))
	for i, e := range evs {
		e.Seq = int64(len(ss.events)) + 1
		e.SessionID = t.key.ID
		if e.ID == "" {
			e.ID = id.New(id.Event)
		}
		e.CreatedAt = norm(e.CreatedAt)
		if e.CreatedAt.IsZero() {
			e.CreatedAt = t.now
		}
		e.Payload = payloads[i]
		ss.events = append(ss.events, e)
		out[i] = cloneEvent(e)
	}
	if len(evs) > 0 {
		t.appended = true
		t.onUndo(func() {
			clear(ss.events[n:])
			ss.events = ss.events[:n]
		})
	}
	return out, nil
}

// ReadEvents implements store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	if err := s.lock(ctx); err != nil {
		return nil, 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return nil, 0, err
	}
	last := int64(len(ss.events))
	out := []rein.Event{}
	if after < 0 {
		after = 0
	}
	for i := after; i < last && len(out) < limit; i++ {
		out = append(out, cloneEvent(ss.events[i]))
	}
	return out, last, nil
}

// LastSeq implements store.EventLog.
func (s *Store) LastSeq(ctx context.Context, key rein.SessionKey) (int64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	ss, err := s.get(key)
	if err != nil {
		return 0, err
	}
	return int64(len(ss.events)), nil
}

// WaitEvents implements store.EventLog. It blocks on the session's wake
// channel, which every committed append closes; Close wakes it through
// closedCh.
func (s *Store) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	for {
		if err := s.lock(ctx); err != nil {
			return err
		}
		ss, err := s.get(key)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if int64(len(ss.events)) > after {
			s.mu.Unlock()
			return nil
		}
		wake := ss.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closedCh:
			return errClosed
		}
	}
}
