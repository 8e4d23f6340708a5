// Package webhook delivers the events of every session's log to the
// webhooks of the configuration, through the store's outbox
// (store.Outbox), so that a product hears of a run's end or of a call
// waiting for a person without a client polling.
//
// It exists apart from the run engine on purpose: a delivery is never on
// a run's path. Runs append to the log as always; a Dispatcher reads the
// log behind them (a cursor per destination and session), records what it
// owes as deliveries in the store, and makes them — in seq order per
// session and destination, at least once, retried with exponential
// backoff — from whichever instance claims them. A destination that is
// slow or down costs the runs nothing (docs/webhooks.md).
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/store"
)

// Defaults of Options and Destination.
const (
	DefaultRetryFor     = 24 * time.Hour
	DefaultTimeout      = 10 * time.Second
	DefaultClaimTTL     = 30 * time.Second
	DefaultPoll         = 200 * time.Millisecond
	DefaultConcurrency  = 16
	FirstRetry          = time.Second
	MaxRetryInterval    = 5 * time.Minute
	jitter              = 0.2
	maxResponseBodyRead = 64 << 10
)

// Destination is one configured webhook.
type Destination struct {
	// URL is where deliveries are POSTed (http or https); it also names
	// the destination in the store, so a webhook keeps its cursors and
	// deliveries across restarts as long as its URL stays.
	URL string
	// Events are event types or path.Match globs ("agent.*"); empty
	// matches every event.
	Events []string
	// Secret signs every attempt (Rein-Signature); nil sends no
	// signature.
	Secret []byte
	// RetryFor bounds the retries of a delivery, from its first attempt
	// (0: DefaultRetryFor).
	RetryFor time.Duration
}

// Matches reports whether an event of type typ is delivered to d.
func (d *Destination) Matches(typ rein.EventType) bool {
	if len(d.Events) == 0 {
		return true
	}
	for _, pat := range d.Events {
		if ok, _ := path.Match(pat, string(typ)); ok {
			return true
		}
	}
	return false
}

// ValidPattern reports whether pat is a usable event pattern: a type or a
// path.Match glob.
func ValidPattern(pat string) error {
	if pat == "" {
		return errors.New("empty event pattern")
	}
	_, err := path.Match(pat, "")
	return err
}

// Backend is what a Dispatcher needs of the store: the log to read and
// the outbox to keep.
type Backend interface {
	store.EventLog
	store.Outbox
}

// Options configures a Dispatcher.
type Options struct {
	Store        Backend
	Destinations []Destination
	// Instance names this instance in logs (never to receivers).
	Instance string
	// Client makes the POSTs; nil means a client of its own.
	Client *http.Client
	// Clock gives the signature's time; nil means the wall clock.
	Clock  rein.Clock
	Logger *slog.Logger
	// Timeout bounds one attempt (0: DefaultTimeout, 10 s).
	Timeout time.Duration
	// ClaimTTL is how long a claimed delivery is this instance's before
	// another may take it over (0: DefaultClaimTTL). It must exceed
	// Timeout, so a live instance's attempt ends before its claim does.
	ClaimTTL time.Duration
	// Poll is how often the log and the outbox are looked at when there
	// is nothing to do (0: DefaultPoll).
	Poll time.Duration
	// Concurrency bounds the attempts in flight per destination
	// (0: DefaultConcurrency).
	Concurrency int
	// FirstRetry is the wait after a first failed attempt, doubled after
	// each next one (0: FirstRetry, 1 s). Tests shorten it.
	FirstRetry time.Duration
}

// Dispatcher enqueues and delivers. Create it with New, run it with Run.
type Dispatcher struct {
	o     Options
	dests []*dest
}

type dest struct {
	Destination
	since time.Time // registration: earlier events are not this webhook's
	wake  chan struct{}
}

// New checks o and returns a Dispatcher.
func New(o Options) (*Dispatcher, error) {
	if o.Store == nil {
		return nil, errors.New("webhook: no store")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = DefaultClaimTTL
	}
	if o.ClaimTTL <= o.Timeout {
		return nil, fmt.Errorf("webhook: claim TTL %v must exceed the attempt timeout %v", o.ClaimTTL, o.Timeout)
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.FirstRetry <= 0 {
		o.FirstRetry = FirstRetry
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	d := &Dispatcher{o: o}
	seen := map[string]bool{}
	for _, dd := range o.Destinations {
		if seen[dd.URL] {
			return nil, fmt.Errorf("webhook: %s is configured twice", dd.URL)
		}
		seen[dd.URL] = true
		for _, p := range dd.Events {
			if err := ValidPattern(p); err != nil {
				return nil, fmt.Errorf("webhook %s: event pattern %q: %w", dd.URL, p, err)
			}
		}
		if dd.RetryFor <= 0 {
			dd.RetryFor = DefaultRetryFor
		}
		d.dests = append(d.dests, &dest{Destination: dd, wake: make(chan struct{}, 1)})
	}
	return d, nil
}

// Register records the destinations in the store now (Run does it
// otherwise): a webhook receives the events logged after it was first
// registered, so an assembly registers before it admits any run.
func (d *Dispatcher) Register(ctx context.Context) error {
	for _, ds := range d.dests {
		since, err := d.o.Store.RegisterDestination(ctx, ds.URL)
		if err != nil {
			return fmt.Errorf("webhook %s: %w", ds.URL, err)
		}
		ds.since = since
	}
	return nil
}

// Run registers the destinations not yet registered and delivers until
// ctx ends; it returns ctx's error.
func (d *Dispatcher) Run(ctx context.Context) error {
	for _, ds := range d.dests {
		for ds.since.IsZero() {
			since, err := d.o.Store.RegisterDestination(ctx, ds.URL)
			if err == nil {
				ds.since = since
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			d.o.Logger.Warn("webhook: registering a destination failed; retrying", "url", ds.URL, "err", err)
			if !sleep(ctx, time.Second) {
				return ctx.Err()
			}
		}
	}
	var wg sync.WaitGroup
	for _, ds := range d.dests {
		wg.Go(func() { d.enqueueLoop(ctx, ds) })
		wg.Go(func() { d.deliverLoop(ctx, ds) })
	}
	wg.Wait()
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ------------------------------------------------------------- enqueuing

// enqueueLoop turns the log's new events into deliveries: for each
// session past the destination's cursor, the events after the cursor,
// those that match, in one write with the cursor's move.
func (d *Dispatcher) enqueueLoop(ctx context.Context, ds *dest) {
	for ctx.Err() == nil {
		n, err := d.enqueueOnce(ctx, ds)
		if err != nil && ctx.Err() == nil {
			d.o.Logger.Warn("webhook: reading the log failed", "url", ds.URL, "err", err)
		}
		if n > 0 {
			select {
			case ds.wake <- struct{}{}:
			default:
			}
			continue
		}
		if !sleep(ctx, d.o.Poll) {
			return
		}
	}
}

// enqueueOnce enqueues what one look at the lag finds and returns how
// many deliveries it stored.
func (d *Dispatcher) enqueueOnce(ctx context.Context, ds *dest) (int, error) {
	lags, err := d.o.Store.OutboxLag(ctx, ds.URL, 256)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, l := range lags {
		n, err := d.enqueueSession(ctx, ds, l)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (d *Dispatcher) enqueueSession(ctx context.Context, ds *dest, l store.OutboxLag) (int, error) {
	total := 0
	cursor := l.Cursor
	for cursor < l.LastSeq {
		evs, _, err := d.o.Store.ReadEvents(ctx, l.Key, cursor, 500)
		if rein.CodeOf(err) == rein.CodeNotFound {
			return total, nil // deleted meanwhile: its cursor went with it
		}
		if err != nil {
			return total, err
		}
		if len(evs) == 0 {
			return total, nil
		}
		var out []*store.Delivery
		for _, e := range evs {
			if !ds.Matches(e.Type) || e.CreatedAt.Before(ds.since) {
				continue
			}
			body, err := Body(e, l.Key.Owner)
			if err != nil {
				return total, err
			}
			out = append(out, &store.Delivery{Seq: e.Seq, Type: e.Type, Body: body})
		}
		to := evs[len(evs)-1].Seq
		err = d.o.Store.EnqueueDeliveries(ctx, l.Key, ds.URL, cursor, to, out)
		switch rein.CodeOf(err) {
		case "":
		case rein.CodeConflict, rein.CodeNotFound:
			// Another instance enqueued these first, or the session is
			// gone: either way nothing is owed from here.
			return total, nil
		default:
			return total, err
		}
		total += len(out)
		cursor = to
	}
	return total, nil
}

// Body is what a delivery of e POSTs: the event's JSON, as the API
// returns it, with "owner" added.
func Body(e rein.Event, owner string) ([]byte, error) {
	b, err := e.AppendJSON(nil)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, " \n")
	if len(b) < 2 || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("webhook: event %d is not a JSON object", e.Seq)
	}
	o, err := json.Marshal(owner)
	if err != nil {
		return nil, err
	}
	out := append(b[:len(b)-1:len(b)-1], `,"owner":`...)
	out = append(out, o...)
	return append(out, '}'), nil
}

// ------------------------------------------------------------ delivering

// deliverLoop claims the heads of the destination's streams, as many as
// there are free slots, and makes each attempt on a goroutine of its own.
func (d *Dispatcher) deliverLoop(ctx context.Context, ds *dest) {
	var (
		wg       sync.WaitGroup
		inFlight = make(chan struct{}, d.o.Concurrency)
		done     = make(chan struct{}, d.o.Concurrency)
	)
	defer wg.Wait()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		free := cap(inFlight) - len(inFlight)
		claimed := 0
		if free > 0 {
			got, err := d.o.Store.ClaimDeliveries(ctx, ds.URL, d.o.Instance, d.o.ClaimTTL, free)
			if err != nil && ctx.Err() == nil {
				d.o.Logger.Warn("webhook: claiming deliveries failed", "url", ds.URL, "err", err)
			}
			claimed = len(got)
			for _, dl := range got {
				inFlight <- struct{}{}
				wg.Go(func() {
					defer func() {
						<-inFlight
						select {
						case done <- struct{}{}:
						default:
						}
					}()
					d.attempt(ctx, ds, dl)
				})
			}
		}
		if ctx.Err() != nil {
			return
		}
		if claimed > 0 && claimed == free {
			// Slots full: wait for one to free up.
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
			continue
		}
		if claimed > 0 {
			continue // there may be more heads now due
		}
		timer.Reset(d.o.Poll)
		select {
		case <-done: // a stream's next delivery may be its head now
		case <-ds.wake:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// attempt POSTs one delivery and records the result under its claim.
func (d *Dispatcher) attempt(ctx context.Context, ds *dest, dl *store.Delivery) {
	start := time.Now()
	err := d.post(ctx, ds, dl)
	if ctx.Err() != nil {
		if err == nil {
			// Delivered as we stop: worth recording, so it is not sent
			// again. A short write of its own, as a drain's.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = d.o.Store.RecordAttempt(rctx, dl.ID, dl.Claim, store.Attempt{Delivered: true})
		}
		// Otherwise the claim lapses and another instance (or this one,
		// restarted) makes the attempt again, with the same delivery id.
		return
	}
	var a store.Attempt
	if err == nil {
		a.Delivered = true
	} else {
		a.Error = err.Error()
		a.RetryIn = Backoff(d.o.FirstRetry, dl.Attempts+1, rand.Float64())
		// The store's own times say how long the delivery has been
		// retried; this attempt's length is added as this clock saw it.
		elapsed := dl.ClaimedAt.Sub(dl.FirstAttemptAt) + time.Since(start)
		if elapsed+a.RetryIn > ds.RetryFor {
			a.GiveUp = true
		}
	}
	if _, err := d.o.Store.RecordAttempt(ctx, dl.ID, dl.Claim, a); err != nil && ctx.Err() == nil {
		d.o.Logger.Warn("webhook: recording an attempt failed", "url", ds.URL, "delivery", dl.ID, "err", err)
	}
}

// Backoff is the wait after the n-th failed attempt (n ≥ 1): first
// doubled n-1 times, at most MaxRetryInterval, less up to 20 % (r is a
// uniform number in [0, 1)) so that many deliveries failed together do
// not come back together.
func Backoff(first time.Duration, n int, r float64) time.Duration {
	b := MaxRetryInterval
	if n < 20 {
		b = min(first<<(n-1), MaxRetryInterval)
	}
	return b - time.Duration(float64(b)*jitter*r)
}

// post makes one attempt: delivered on a 2xx answer within the timeout.
func (d *Dispatcher) post(ctx context.Context, ds *dest, dl *store.Delivery) error {
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ds.URL, bytes.NewReader(dl.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Rein-Webhook/1")
	req.Header.Set("Rein-Delivery-Id", dl.ID)
	if ds.Secret != nil {
		req.Header.Set("Rein-Signature", Sign(ds.Secret, d.o.Clock.Now(), dl.Body))
	}
	resp, err := d.o.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("no answer within %v", d.o.Timeout)
		}
		return fmt.Errorf("POST failed: %s", redactURLError(err))
	}
	// Reading a little of the body lets the connection be reused; an
	// answer cut by the timeout is a failed attempt, 2xx or not.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBodyRead))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	if rerr != nil && ctx.Err() != nil {
		return fmt.Errorf("no answer within %v", d.o.Timeout)
	}
	return nil
}

// redactURLError is err's text without the URL, which may carry a token
// in its query: the last error is shown to the webhook's owner through
// the API, and the URL is shown there already.
func redactURLError(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

// Sign returns the Rein-Signature header for body sent at t:
// "t=UNIX,v1=HEX", HEX the HMAC-SHA256 of "UNIX.body" with secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a Rein-Signature header against body and secret, and that
// its time is within tolerance of now (tolerance ≤ 0: not checked). It is
// what a Go receiver calls (docs/webhooks.md).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var (
		ts   string
		sigs [][]byte
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("webhook: signature has no valid t")
	}
	if tolerance > 0 {
		if skew := now.Sub(time.Unix(unix, 0)); skew > tolerance || skew < -tolerance {
			return errors.New("webhook: signature time outside the tolerance")
		}
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errors.New("webhook: no v1 signature matches")
}
