package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/internal/jsonx"
	"github.com/reinhq/rein/store"
)

// ------------------------------------------------------------------ history

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
//
// Nothing is allocated per event beyond the events themselves: the
// payloads are validated in place, then copied into one buffer, once for
// the log and once for the caller (copies in and out, as for every
// value), and the undo is a mark, not a closure.
func (t *tx) AppendEvents(evs ...rein.Event) ([]rein.Event, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	// Validate all before storing any: a bad payload must leave the log
	// untouched.
	size := 0
	for i, e := range evs {
		p, err := payloadOf(i, e.Payload)
		if err != nil {
			return nil, err
		}
		size += len(p)
	}
	// The log's copies in the first half, the caller's in the second.
	buf := make([]byte, 2*size)
	off := 0
	ss, n := t.ss, len(t.ss.events)
	out := make([]rein.Event, len(evs))
	for i, e := range evs {
		// Validated above; only an empty payload is replaced.
		p := e.Payload
		if len(bytes.TrimSpace(p)) == 0 {
			p = emptyPayload
		}
		e.Seq = int64(len(ss.events)) + 1
		e.SessionID = t.key.ID
		if e.ID == "" {
			e.ID = id.New(id.Event)
		}
		e.CreatedAt = norm(e.CreatedAt)
		if e.CreatedAt.IsZero() {
			e.CreatedAt = t.now
		}
		// Each payload a full slice expression of its own: appending to
		// one can never overwrite the next.
		end := off + len(p)
		copy(buf[off:end], p)
		copy(buf[size+off:size+end], p)
		e.Payload = buf[off:end:end]
		ss.events = append(ss.events, e)
		e.Payload = buf[size+off : size+end : size+end]
		out[i] = e
		off = end
	}
	if len(evs) > 0 {
		t.appended = true
		if !t.evMarked {
			t.evMarked, t.evFrom = true, n
		}
	}
	return out, nil
}

// emptyPayload is the payload of an event given none.
var emptyPayload = json.RawMessage("{}")

// payloadOf validates the payload of the i-th event to append (nil or
// blank means {}); the parameter an error names is only built for one.
func payloadOf(i int, b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return emptyPayload, nil
	}
	if !jsonx.Valid(b) {
		param := "events[" + strconv.Itoa(i) + "].payload"
		return nil, rein.InvalidArgument(param, "%s is not valid JSON", param)
	}
	return b, nil
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
	if after < 0 {
		after = 0
	}
	end := min(last, after+int64(max(limit, 0)))
	if after >= end {
		return []rein.Event{}, last, nil
	}
	page := ss.events[after:end]
	// The page's payloads are copied into one buffer: a copy per event
	// would be an allocation per event per reader.
	size := 0
	for i := range page {
		size += len(page[i].Payload)
	}
	buf := make([]byte, 0, size)
	out := make([]rein.Event, len(page))
	for i, e := range page {
		a := len(buf)
		buf = append(buf, e.Payload...)
		if e.Payload != nil {
			e.Payload = buf[a:len(buf):len(buf)]
		}
		out[i] = e
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
// channel, made by the first waiter and closed by the next committed
// append; Close wakes it through closedCh.
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
		if ss.wake == nil {
			ss.wake = make(chan struct{})
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
