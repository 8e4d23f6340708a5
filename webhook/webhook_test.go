package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/postgres"
	"github.com/reinhq/rein/store/sqlite"
	"github.com/reinhq/rein/webhook"
)

var secret = []byte("s3cret")

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"seq":1}`)
	at := time.Unix(1_800_000_000, 0)
	h := webhook.Sign(secret, at, body)
	if want := "t=1800000000,v1="; h[:len(want)] != want {
		t.Fatalf("header %q", h)
	}
	if err := webhook.Verify(secret, h, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   []byte
		now    time.Time
	}{
		"tampered body": {secret, h, []byte(`{"seq":2}`), at},
		"wrong secret":  {[]byte("other"), h, body, at},
		"too old":       {secret, h, body, at.Add(10 * time.Minute)},
		"no time":       {secret, h[len("t=1800000000,"):], body, at},
		"no signature":  {secret, "t=1800000000", body, at},
	} {
		if err := webhook.Verify(c.secret, c.header, c.body, c.now, 5*time.Minute); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		n        int
		r        float64
		min, max time.Duration
	}{
		{1, 0, time.Second, time.Second},
		{1, 0.999, 800 * time.Millisecond, time.Second},
		{2, 0, 2 * time.Second, 2 * time.Second},
		{5, 0.5, 14400 * time.Millisecond, 16 * time.Second},
		{9, 0, 256 * time.Second, 256 * time.Second},
		{10, 0, 5 * time.Minute, 5 * time.Minute},
		{40, 0.999, 4 * time.Minute, 5 * time.Minute},
	} {
		if got := webhook.Backoff(time.Second, c.n, c.r); got < c.min || got > c.max {
			t.Errorf("Backoff(%d, %v) = %v, want in [%v, %v]", c.n, c.r, got, c.min, c.max)
		}
	}
}

func TestBody(t *testing.T) {
	e := rein.Event{Seq: 7, ID: "evt_1", SessionID: "ses_1", RunID: "run_1", Type: "agent.message",
		Payload: json.RawMessage(`{"run_id":"run_1","text":"hi","reason":"stop"}`), CreatedAt: time.Unix(1, 0).UTC()}
	b, err := webhook.Body(e, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	if got["owner"] != "alice" || got["seq"] != 7.0 || got["type"] != "agent.message" || got["session_id"] != "ses_1" || got["run_id"] != "run_1" {
		t.Fatalf("body = %s", b)
	}
}

// receiver is a local webhook receiver that records what it accepted and
// misbehaves as its script says.
type receiver struct {
	t *testing.T
	// behave is called for each request before it is answered: it
	// returns the status to answer, or 0 to stall until the request is
	// cut. n counts the request's attempts of that delivery id (1 first).
	behave func(seq int64, n int) (status int, delay time.Duration)

	mu       sync.Mutex
	attempts map[string]int            // delivery id → POSTs seen
	ids      map[string]string         // session/seq → delivery id
	got      map[string][]int64        // session → seqs accepted, in order
	from     map[string]map[string]int // instance header → accepted
	changed  chan struct{}             // signalled on every accepted delivery
	bad      []string
}

func newReceiver(t *testing.T, behave func(seq int64, n int) (int, time.Duration)) (*receiver, *httptest.Server) {
	r := &receiver{t: t, behave: behave, attempts: map[string]int{}, ids: map[string]string{}, got: map[string][]int64{},
		from: map[string]map[string]int{}, changed: make(chan struct{}, 1)}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	var e struct {
		Seq       int64  `json:"seq"`
		SessionID string `json:"session_id"`
		Owner     string `json:"owner"`
	}
	did := req.Header.Get("Rein-Delivery-Id")
	r.mu.Lock()
	if err := json.Unmarshal(body, &e); err != nil || e.Owner == "" {
		r.bad = append(r.bad, fmt.Sprintf("body %s", body))
	}
	if err := webhook.Verify(secret, req.Header.Get("Rein-Signature"), body, time.Now(), time.Minute); err != nil {
		r.bad = append(r.bad, fmt.Sprintf("signature of %s: %v", did, err))
	}
	key := fmt.Sprintf("%s/%d", e.SessionID, e.Seq)
	if prev, ok := r.ids[key]; ok && prev != did {
		r.bad = append(r.bad, fmt.Sprintf("%s sent as %s and as %s", key, prev, did))
	}
	r.ids[key] = did
	r.attempts[did]++
	n := r.attempts[did]
	r.mu.Unlock()

	status, delay := r.behave(e.Seq, n)
	if status == 0 {
		<-req.Context().Done() // stall until the sender gives up
		return
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-req.Context().Done():
			return
		}
	}
	if status >= 200 && status < 300 {
		r.mu.Lock()
		seqs := r.got[e.SessionID]
		if len(seqs) == 0 || seqs[len(seqs)-1] != e.Seq { // a duplicate after a lost ack is allowed
			r.got[e.SessionID] = append(seqs, e.Seq)
		}
		inst := req.Header.Get("X-Test-Instance")
		if r.from[inst] == nil {
			r.from[inst] = map[string]int{}
		}
		r.from[inst][key]++
		r.mu.Unlock()
		select {
		case r.changed <- struct{}{}:
		default:
		}
	}
	w.WriteHeader(status)
}

// waitFor waits until cond holds (checked after every accepted delivery),
// failing after limit.
func (r *receiver) waitFor(limit time.Duration, cond func() bool) {
	r.t.Helper()
	deadline := time.After(limit)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			r.t.Fatalf("not delivered within %v: got %v", limit, r.got)
		}
	}
}

func (r *receiver) check(sessions map[string]int64) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		r.t.Error(b)
	}
	for sid, last := range sessions {
		seqs := r.got[sid]
		if int64(len(seqs)) != last {
			r.t.Errorf("session %s: accepted %v, want 1..%d", sid, seqs, last)
			continue
		}
		for i, s := range seqs {
			if s != int64(i+1) {
				r.t.Errorf("session %s: accepted %v, not in seq order", sid, seqs)
				break
			}
		}
	}
}

// taggedClient marks its requests with the instance that sent them.
func taggedClient(instance string) *http.Client {
	return &http.Client{Transport: roundTrip(func(req *http.Request) (*http.Response, error) {
		req = req.Clone(req.Context())
		req.Header.Set("X-Test-Instance", instance)
		return http.DefaultTransport.RoundTrip(req)
	})}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func fill(t testing.TB, s store.Store, owner string, sessions, events int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	for i := range sessions {
		sess := &store.Session{Owner: owner, ID: fmt.Sprintf("ses_%s_%d", owner, i)}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		for j := range events {
			if _, err := s.AppendEvents(ctx, sess.Key(), store.Fence{}, []rein.Event{{Type: "user.supplement",
				Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))}}); err != nil {
				t.Fatal(err)
			}
		}
		out[sess.ID] = int64(events)
	}
	return out
}

// start runs a dispatcher until the test ends (or stop). Its
// destinations are registered first, so that every event the test logs
// after start is theirs (events older than a destination are not).
func start(t *testing.T, o webhook.Options) (stop func()) {
	t.Helper()
	for _, d := range o.Destinations {
		if _, err := o.Store.RegisterDestination(context.Background(), d.URL); err != nil {
			t.Fatal(err)
		}
	}
	d, err := webhook.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestDeliveredInOrderDespiteFailuresStallsAndSlowness runs a receiver
// that fails the first attempt of every third event, stalls past the
// timeout on the first attempt of every fifth, and answers others slowly:
// every event is delivered, in seq order per session, with one delivery
// id across its attempts, each signed.
func TestDeliveredInOrderDespiteFailuresStallsAndSlowness(t *testing.T) {
	s := memory.New()
	r, srv := newReceiver(t, func(seq int64, n int) (int, time.Duration) {
		switch {
		case n == 1 && seq%5 == 0:
			return 0, 0
		case n == 1 && seq%3 == 0:
			return http.StatusInternalServerError, 0
		case seq%4 == 0:
			return http.StatusOK, 30 * time.Millisecond
		case seq%7 == 0:
			return http.StatusNoContent, 0
		}
		return http.StatusOK, 0
	})
	start(t, webhook.Options{Store: s, Destinations: []webhook.Destination{{URL: srv.URL, Secret: secret}},
		Timeout: 150 * time.Millisecond, ClaimTTL: time.Second, Poll: 10 * time.Millisecond, FirstRetry: 20 * time.Millisecond})
	want := fill(t, s, "alice", 3, 12)
	for k, v := range fill(t, s, "bob", 2, 12) {
		want[k] = v
	}
	r.waitFor(30*time.Second, func() bool {
		for sid, last := range want {
			if int64(len(r.got[sid])) < last {
				return false
			}
		}
		return true
	})
	r.check(want)
	// A retried delivery kept its id: each failing first attempt was
	// followed by a second POST of the same id.
	r.mu.Lock()
	retried := 0
	for _, n := range r.attempts {
		if n >= 2 {
			retried++
		}
	}
	r.mu.Unlock()
	if retried == 0 {
		t.Fatal("no delivery was retried: the receiver's failures were not exercised")
	}
	// The receiver counts a delivery before it answers: the store records
	// it once the answer is back.
	eventually(t, func() bool {
		ds, err := s.ListDeliveries(context.Background(), "alice", store.DeliveryQuery{Status: store.DeliveryDelivered})
		return err == nil && len(ds) == 36
	}, "alice's 36 deliveries recorded as delivered")
}

// eventually waits for cond, looking every few milliseconds, and fails
// after 10 s.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// TestEventsFilterAndHistory: only matching events are delivered, and a
// webhook does not receive the events logged before it was first seen.
func TestEventsFilterAndHistory(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond) // every reading later than the last
		return now
	}
	s := memory.New(memory.WithClock(clock))
	ctx := context.Background()
	old := fill(t, s, "alice", 1, 3)
	r, srv := newReceiver(t, func(int64, int) (int, time.Duration) { return 200, 0 })
	d := webhook.Destination{URL: srv.URL, Secret: secret, Events: []string{"session.run_*", "agent.message"}}
	if _, err := s.RegisterDestination(ctx, srv.URL); err != nil {
		t.Fatal(err)
	}
	start(t, webhook.Options{Store: s, Destinations: []webhook.Destination{d}, Poll: 10 * time.Millisecond})
	var sid string
	for k := range old {
		sid = k
	}
	key := rein.SessionKey{Owner: "alice", ID: sid}
	for _, typ := range []rein.EventType{"agent.message.delta", "session.run_started", "agent.message", "user.supplement", "session.run_completed"} {
		if _, err := s.AppendEvents(ctx, key, store.Fence{}, []rein.Event{{Type: typ, Payload: json.RawMessage(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	r.waitFor(10*time.Second, func() bool { return len(r.got[sid]) >= 3 })
	if ds, err := s.ListDeliveries(ctx, "alice", store.DeliveryQuery{}); err != nil || len(ds) != 3 {
		t.Fatalf("%d deliveries (%v), want 3", len(ds), err)
	}
	r.mu.Lock()
	got := append([]int64(nil), r.got[sid]...)
	r.mu.Unlock()
	if fmt.Sprint(got) != "[5 6 8]" {
		t.Fatalf("delivered seqs %v, want [5 6 8] (run_started, agent.message, run_completed; not seqs 1-3 from before the webhook)", got)
	}
}

// TestDestinationDownFailsAndLaterOnesGoOn: past retry_for a delivery is
// failed and the session's next one is delivered; a retry by hand makes
// it pending and delivers it.
func TestDestinationDownFailsAndLaterOnesGoOn(t *testing.T) {
	s := memory.New()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		down = true
	)
	r, srv := newReceiver(t, func(seq int64, n int) (int, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if down && seq == 1 {
			return http.StatusServiceUnavailable, 0
		}
		return http.StatusOK, 0
	})
	start(t, webhook.Options{Store: s, Destinations: []webhook.Destination{{URL: srv.URL, Secret: secret, RetryFor: 100 * time.Millisecond}},
		Poll: 10 * time.Millisecond, FirstRetry: 20 * time.Millisecond})
	want := fill(t, s, "alice", 1, 2)
	var sid string
	for k := range want {
		sid = k
	}
	r.waitFor(10*time.Second, func() bool { return len(r.got[sid]) >= 1 })
	failed, err := s.ListDeliveries(ctx, "alice", store.DeliveryQuery{Status: store.DeliveryFailed})
	if err != nil || len(failed) != 1 || failed[0].Seq != 1 || failed[0].Attempts < 2 || failed[0].LastError != "answered 503 Service Unavailable" {
		t.Fatalf("failed deliveries = %+v, %v", failed, err)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	if _, err := s.RetryDelivery(ctx, "alice", failed[0].ID); err != nil {
		t.Fatal(err)
	}
	r.waitFor(10*time.Second, func() bool { return len(r.got[sid]) >= 2 })
	r.mu.Lock()
	got := fmt.Sprint(r.got[sid])
	r.mu.Unlock()
	if got != "[2 1]" {
		t.Fatalf("accepted %s, want [2 1]: seq 2 went on after seq 1 failed, then the retry", got)
	}
}

// TestTakeoverAfterAnInstanceDiesMidDelivery runs two dispatchers on one
// PostgreSQL database. The receiver stalls the first attempt it sees;
// the instance making it is then stopped in the middle of it (as a kill:
// nothing is recorded), and the other takes the delivery over once the
// claim lapses — same delivery id — and every session's events arrive in
// order.
func TestTakeoverAfterAnInstanceDiesMidDelivery(t *testing.T) {
	dsn := os.Getenv("REIN_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("REIN_TEST_POSTGRES_DSN not set: skipping the PostgreSQL test")
	}
	schema := fmt.Sprintf("rein_test_webhook_%d", time.Now().UnixNano())
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})

	var once sync.Once
	r, srv := newReceiver(t, func(seq int64, n int) (int, time.Duration) {
		first := false
		once.Do(func() { first = true })
		if first {
			return 0, 0
		}
		return http.StatusOK, 0
	})
	// Only A runs at first, so A takes the stalled attempt.
	opts := func(s webhook.Backend, inst string) webhook.Options {
		return webhook.Options{Store: s, Destinations: []webhook.Destination{{URL: srv.URL, Secret: secret}}, Instance: inst,
			Client: taggedClient(inst), Timeout: 5 * time.Second, ClaimTTL: 6 * time.Second, Poll: 20 * time.Millisecond,
			FirstRetry: 20 * time.Millisecond}
	}
	// One session: while its first delivery is stalled nothing else of
	// it may be claimed, so the stalled one is the only one sent twice.
	if _, err := a.RegisterDestination(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	want := fill(t, a, "alice", 1, 5)
	stopA := start(t, opts(a, "A"))
	// Wait for A's stalled attempt: the receiver has seen one POST.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		n := len(r.attempts)
		r.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A made no attempt")
		}
		<-time.After(10 * time.Millisecond)
	}
	stopA() // killed mid-delivery: its claim stays until it lapses
	start(t, opts(b, "B"))
	r.waitFor(60*time.Second, func() bool {
		for sid, last := range want {
			if int64(len(r.got[sid])) < last {
				return false
			}
		}
		return true
	})
	r.check(want)
	r.mu.Lock()
	defer r.mu.Unlock()
	var twice int
	for _, n := range r.attempts {
		if n >= 2 {
			twice++
		}
	}
	if twice != 1 {
		t.Fatalf("%d deliveries were POSTed more than once, want exactly the stalled one (same id)", twice)
	}
	if len(r.from["A"]) != 0 || len(r.from["B"]) != 5 {
		t.Fatalf("accepted from A %v, from B %v: want everything from B, which took over", r.from["A"], r.from["B"])
	}
}

// BenchmarkOutboxThroughput measures deliveries per second from an SQLite
// store to a local receiver: b.N events over 16 sessions, logged first,
// then delivered.
func BenchmarkOutboxThroughput(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "rein.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var (
		mu   sync.Mutex
		got  int
		done = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got++
		if got == b.N {
			close(done)
		}
		mu.Unlock()
	}))
	defer srv.Close()
	const sessions = 16
	per := (b.N + sessions - 1) / sessions
	ctx := context.Background()
	d, err := webhook.New(webhook.Options{Store: s, Destinations: []webhook.Destination{{URL: srv.URL, Secret: secret}}, Poll: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Register(ctx); err != nil { // before the events, which are then its own
		b.Fatal(err)
	}
	n := 0
	for i := 0; i < sessions && n < b.N; i++ {
		sess := &store.Session{Owner: "alice", ID: fmt.Sprintf("ses_%d", i)}
		if err := s.CreateSession(ctx, sess); err != nil {
			b.Fatal(err)
		}
		evs := make([]rein.Event, 0, per)
		for j := 0; j < per && n < b.N; j++ {
			evs = append(evs, rein.Event{Type: "agent.message", Payload: json.RawMessage(`{"run_id":"run_1","text":"hi","reason":"stop"}`)})
			n++
		}
		if _, err := s.AppendEvents(ctx, sess.Key(), store.Fence{}, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() { d.Run(rctx); close(finished) }()
	<-done
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-finished
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
}

// The dispatcher's goroutines end with Run: none outlives a test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
