package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reinhq/rein"
)

// hub wakes WaitEvents callers in this process. Appends made here notify it
// directly after commit; appends made by other processes reach it through
// the listener's NOTIFYs. It only holds sessions someone is waiting on.
type hub struct {
	mu      sync.Mutex
	watches map[rein.SessionKey]*watch
}

// watch is one session's waiters.
type watch struct {
	// ch is closed (and replaced) on every change: a broadcast.
	ch chan struct{}
	// seq is the largest last seq heard of, so a woken waiter can often
	// return without reading the database.
	seq  int64
	refs int
}

func newHub() *hub { return &hub{watches: map[rein.SessionKey]*watch{}} }

// watch registers interest in key; pair with unwatch.
func (h *hub) watch(key rein.SessionKey) *watch {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.watches[key]
	if w == nil {
		w = &watch{ch: make(chan struct{})}
		h.watches[key] = w
	}
	w.refs++
	return w
}

func (h *hub) unwatch(key rein.SessionKey, w *watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.refs--
	if w.refs == 0 {
		delete(h.watches, key)
	}
}

// state returns the channel to wait on and the last seq heard of. Taking
// the channel before reading the database is what makes a wake-up between
// the read and the wait impossible to miss.
func (h *hub) state(w *watch) (<-chan struct{}, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.ch, w.seq
}

// notify wakes key's waiters; seq is the session's new last seq, or 0 when
// unknown (the waiters then read it).
func (h *hub) notify(key rein.SessionKey, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.watches[key]; w != nil {
		w.seq = max(w.seq, seq)
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// notifyAll wakes every waiter: after the listener reconnects, when
// notifications may have been missed, so that each re-reads its session.
func (h *hub) notifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watches {
		close(w.ch)
		w.ch = make(chan struct{})
	}
}

// channelName is the NOTIFY channel for a schema. Channels are global to a
// database, so each schema gets its own: stores in different schemas (tests
// in parallel, tenants) neither wake each other nor see each other's keys.
func channelName(schema string) string {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("rein_events_%016x", h.Sum64())
}

// notifyPayload is what an appending transaction NOTIFYs: the session key
// and its new last seq, as a JSON array [owner, id, seq]. A payload that
// would exceed PostgreSQL's 8000-byte limit (absurdly long keys) is sent as
// "*", which wakes every waiter of the schema instead of failing the append.
func parseNotification(payload string) (key rein.SessionKey, seq int64, all bool) {
	var v [3]json.RawMessage
	if payload == "*" || json.Unmarshal([]byte(payload), &v) != nil ||
		json.Unmarshal(v[0], &key.Owner) != nil || json.Unmarshal(v[1], &key.ID) != nil ||
		json.Unmarshal(v[2], &seq) != nil {
		return rein.SessionKey{}, 0, true
	}
	return key, seq, false
}

// connectListener opens a dedicated connection and LISTENs on the schema's
// channel. It returns the channel name, derived from the schema the
// connection actually resolves to.
func (s *Store) connectListener(ctx context.Context, cc *pgx.ConnConfig) (*pgx.Conn, string, error) {
	octx, cancel := s.opContext(ctx)
	defer cancel()
	conn, err := pgx.ConnectConfig(octx, cc)
	if err != nil {
		return nil, "", classify(ctx, octx, "listen: connect", err)
	}
	var schema string
	if err := conn.QueryRow(octx, `SELECT coalesce(current_schema(), '')`).Scan(&schema); err != nil {
		closeConn(conn)
		return nil, "", classify(ctx, octx, "listen: read schema", err)
	}
	channel := channelName(schema)
	if _, err := conn.Exec(octx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, "", classify(ctx, octx, "listen", err)
	}
	if _, err := conn.Exec(octx, "LISTEN "+pgx.Identifier{messageChannel(channel)}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, "", classify(ctx, octx, "listen", err)
	}
	return conn, channel, nil
}

// Listener reconnect backoff: quick first retries (a blip, a failover),
// then no more than one attempt every few seconds while the database is down.
const (
	listenBackoffMin = 50 * time.Millisecond
	listenBackoffMax = 3 * time.Second
)

// runListener delivers NOTIFYs to the hub until Close. When the connection
// drops it reconnects with backoff, and after each reconnect wakes every
// waiter: notifications sent while it was away are lost for good, and a
// waiter that re-reads its session's last seq cannot miss an append.
func (s *Store) runListener(cc *pgx.ConnConfig, conn *pgx.Conn) {
	defer close(s.listenerDone)
	if s.hooks.listening != nil {
		s.hooks.listening()
	}
	backoff := listenBackoffMin
	for {
		err := s.receive(conn)
		closeConn(conn)
		if s.life.Err() != nil {
			return
		}
		// Waiters are not woken now: the database is likely unreachable
		// and there is nothing new to read; they sleep through the outage
		// (bounded by their contexts) and re-read once we are back.
		s.log.Warn("rein postgres store: notification listener lost its connection; reconnecting", "err", err)
		for {
			timer := time.NewTimer(backoff)
			select {
			case <-s.life.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			var channel string
			conn, channel, err = s.connectListener(s.life, cc)
			if err == nil && channel != s.channel {
				// The search_path now resolves elsewhere (the schema was
				// dropped and recreated?); listening on another channel
				// would silently miss this store's appends.
				closeConn(conn)
				err = fmt.Errorf("schema changed under the store (channel %s, want %s)", channel, s.channel)
			}
			if err == nil {
				break
			}
			if s.life.Err() != nil {
				return
			}
			s.log.Warn("rein postgres store: notification listener cannot reconnect", "err", err, "retry_in", backoff)
			backoff = min(2*backoff, listenBackoffMax)
		}
		backoff = listenBackoffMin
		s.log.Info("rein postgres store: notification listener reconnected")
		if s.hooks.listening != nil {
			s.hooks.listening()
		}
		s.hub.notifyAll()
	}
}

// listenProbe is how long the listener waits in silence before checking
// that its connection is still alive: a connection cut without a TCP reset
// (a network partition) would otherwise look like a quiet database until
// the kernel's keepalive gave up, minutes later.
const listenProbe = 30 * time.Second

// receive hands notifications to the hub until the connection fails or the
// store closes.
func (s *Store) receive(conn *pgx.Conn) error {
	for {
		ctx, cancel := context.WithTimeout(s.life, listenProbe)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			if s.life.Err() != nil || !pgconn.Timeout(err) {
				return err
			}
			// Quiet for a while: make sure it is the database that is
			// quiet, not the connection that is dead.
			pctx, cancel := context.WithTimeout(s.life, s.timeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		if n.Channel != s.channel {
			s.deliver(n.Payload)
			continue
		}
		key, seq, all := parseNotification(n.Payload)
		if all {
			s.hub.notifyAll()
		} else {
			s.hub.notify(key, seq)
		}
	}
}

// closeConn closes a connection without letting a dead peer hold us up.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// messageChannel is the channel of instance messages (store.Messenger) for
// a schema's event channel: the same listener hears both.
func messageChannel(events string) string { return "rein_msgs_" + events[len("rein_events_"):] }

// envelope is an instance message on the wire: its addressee ("" for every
// instance) and the message itself.
type envelope struct {
	To  string          `json:"to"`
	Msg json.RawMessage `json:"m"`
}

// listeners are the handlers of store.Messenger.Listen, by instance.
type listeners struct {
	mu sync.Mutex
	by map[string]map[int]func([]byte)
	n  int
}

// Send implements store.Messenger: one NOTIFY on the schema's message
// channel, delivered by PostgreSQL to every listening process.
func (s *Store) Send(ctx context.Context, to string, msg []byte) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if !json.Valid(msg) {
		return rein.InvalidArgument("msg", "an instance message must be JSON")
	}
	b, err := json.Marshal(envelope{To: to, Msg: msg})
	if err != nil {
		return err
	}
	if len(b) > 7900 {
		return rein.InvalidArgument("msg", "an instance message must stay under 7900 bytes")
	}
	octx, cancel := s.opContext(ctx)
	defer cancel()
	if _, err := s.pool.Exec(octx, `SELECT pg_notify($1, $2)`, messageChannel(s.channel), string(b)); err != nil {
		return s.fail(ctx, octx, "send instance message", err)
	}
	return nil
}

// Listen implements store.Messenger.
func (s *Store) Listen(instance string, handler func([]byte)) (stop func()) {
	l := &s.msgs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]map[int]func([]byte){}
	}
	if l.by[instance] == nil {
		l.by[instance] = map[int]func([]byte){}
	}
	l.n++
	id := l.n
	l.by[instance][id] = handler
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.by[instance], id)
		if len(l.by[instance]) == 0 {
			delete(l.by, instance)
		}
	}
}

// deliver hands one message to the handlers it is addressed to.
func (s *Store) deliver(payload string) {
	var env envelope
	if json.Unmarshal([]byte(payload), &env) != nil {
		return
	}
	l := &s.msgs
	l.mu.Lock()
	var hs []func([]byte)
	for inst, m := range l.by {
		if env.To != "" && env.To != inst {
			continue
		}
		for _, h := range m {
			hs = append(hs, h)
		}
	}
	l.mu.Unlock()
	for _, h := range hs {
		h(env.Msg)
	}
}
