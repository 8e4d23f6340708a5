package modeltest

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/model"
)

// Suite retry settings: tiny backoff so retries cost no time, a wait cap
// that still shows whether the server's Retry-After was read.
const (
	suiteRetries   = 2
	suiteBaseDelay = time.Millisecond
	suiteMaxWait   = 80 * time.Millisecond
)

func runWire(t *testing.T, p Provider, sc Scenario, w Wire) {
	how := serve
	switch sc {
	case StallAfterHeaders, StallMidStream:
		how = stallAfter
	case CancelBeforeHeaders:
		how = stallBefore
	case Drop:
		how = drop
	case CancelDuringRetryWait:
		w = Wire{Responses: []Response{{
			Status: http.StatusServiceUnavailable,
			Header: http.Header{"Content-Type": {"text/plain"}, "Retry-After": {"60"}},
			Body:   []byte("upstream unavailable\n"),
		}}}
	}
	srv := newServer(t, w, how)
	rt := newRetries()
	o := Options{
		BaseURL: srv.URL, Model: TestModel, APIKey: TestAPIKey, HTTPClient: srv.Client(),
		MaxRetries: suiteRetries, RetryBaseDelay: suiteBaseDelay, MaxRetryWait: suiteMaxWait, OnRetry: rt.on,
	}
	if sc == CancelDuringRetryWait {
		o.MaxRetryWait = time.Hour // the wait must be long enough to cancel in
	}
	m := p.New(t, o)

	switch sc {
	case CancelBeforeHeaders, CancelDuringRetryWait:
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type res struct {
			s   model.Stream
			err error
		}
		ch := make(chan res, 1)
		go func() {
			s, err := m.Stream(ctx, Request(sc))
			ch <- res{s, err}
		}()
		// Cancel only once the provider is certainly waiting: the server
		// has the request, or the provider reported its retry wait.
		if sc == CancelBeforeHeaders {
			<-srv.arrived
		} else {
			info := <-rt.ch
			if info.Status != http.StatusServiceUnavailable || info.Wait < time.Minute {
				t.Errorf("retry info %+v: want status 503 and the server's 60s Retry-After", info)
			}
		}
		start := time.Now()
		cancel()
		r := awaitWithin(t, "Stream", start, ch)
		if r.err == nil {
			_ = r.s.Close()
			t.Fatalf("Stream after cancel succeeded, want an error")
		}
		wantCancelled(t, "Stream", r.err)
		return

	case StallAfterHeaders, StallMidStream:
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := m.Stream(ctx, Request(sc))
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		if sc == StallMidStream {
			c, err := s.Recv()
			if err != nil || c.Kind != model.ChunkText || c.Text == "" {
				t.Fatalf("first Recv = %+v, %v; want the text delta sent before the stall", c, err)
			}
		}
		cancelRecv(t, s, cancel)
		checkRequests(t, p, sc, w, srv, 1)
		return
	}

	s, err := stream(t, m, sc)
	switch sc {
	case ServerError, Unauthorized, Forbidden, NotFound:
		if err == nil {
			r := drain(t, s)
			t.Fatalf("Stream succeeded (%+v), want an error", r.chunks)
		}
		checkStatusError(t, p, sc, err, rt, srv)
		return
	}
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	r := drain(t, s)
	checkOutcome(t, sc, r)

	wantRequests := 1
	if sc == RateLimited {
		wantRequests = 2
		infos := rt.all()
		if len(infos) != 1 {
			t.Fatalf("retries = %+v, want exactly one", infos)
		}
		wantWait := min(retryAfter(t, w.Responses[0].Header), suiteMaxWait)
		if i := infos[0]; i.Attempt != 1 || i.Status != http.StatusTooManyRequests || i.Wait != wantWait || i.Provider == "" {
			t.Errorf("retry = %+v, want attempt 1, status 429, wait %v (the server's Retry-After, capped)", i, wantWait)
		}
	} else if infos := rt.all(); len(infos) != 0 {
		t.Errorf("retries %+v, want none", infos)
	}
	checkRequests(t, p, sc, w, srv, wantRequests)
}

func checkStatusError(t *testing.T, p Provider, sc Scenario, err error, rt *retries, srv *server) {
	t.Helper()
	var me *model.Error
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *model.Error", err, err)
	}
	want := map[Scenario]int{ServerError: 500, Unauthorized: 401, Forbidden: 403, NotFound: 404}[sc]
	if me.Status != want || me.Streaming {
		t.Errorf("error status %d streaming %v, want %d before the stream", me.Status, me.Streaming, want)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	infos := rt.all()
	switch sc {
	case ServerError:
		if !me.Retryable {
			t.Errorf("500 is not marked retryable: %v", err)
		}
		if len(infos) != suiteRetries {
			t.Errorf("%d retries, want %d: %+v", len(infos), suiteRetries, infos)
		}
		for i, info := range infos {
			if info.Attempt != i+1 || info.Status != 500 || info.Err == nil || info.Wait > suiteMaxWait {
				t.Errorf("retry %d = %+v", i, info)
			}
		}
		checkRequests(t, p, sc, Wire{}, srv, suiteRetries+1)
		return
	case Unauthorized, Forbidden:
		if p.KeySetting != "" && !strings.Contains(msg, p.KeySetting) {
			t.Errorf("error %q does not name %s", msg, p.KeySetting)
		}
	case NotFound:
		if !strings.Contains(msg, TestModel) {
			t.Errorf("error %q does not name the model %q", msg, TestModel)
		}
		if p.BaseURLSetting != "" && !strings.Contains(msg, p.BaseURLSetting) {
			t.Errorf("error %q does not name %s", msg, p.BaseURLSetting)
		}
	}
	if me.Retryable || len(infos) != 0 {
		t.Errorf("status %d retried or marked retryable (retries %+v)", want, infos)
	}
	checkRequests(t, p, sc, Wire{}, srv, 1)
}

// checkRequests checks what reached the server: the count, the path, the
// API key, and the body against the recording's .request.json.
func checkRequests(t *testing.T, p Provider, sc Scenario, w Wire, srv *server, n int) {
	t.Helper()
	reqs := srv.received()
	if len(reqs) != n {
		t.Fatalf("server got %d requests, want %d", len(reqs), n)
	}
	for _, r := range reqs {
		if r.Method != http.MethodPost || (p.Path != "" && r.Path != p.Path) {
			t.Errorf("request %s %s, want POST %s", r.Method, r.Path, p.Path)
		}
		if !headerHas(r.Header, TestAPIKey) {
			t.Errorf("the API key reached the server in no header")
		}
	}
	if (sc == Text || sc == ToolCalls || sc == ToolResult) && w.Request == nil {
		t.Errorf("no %s.request.json: the request mapping of this scenario must be pinned", sc)
	}
	if w.Request != nil && !jsonEqual(reqs[0].Body, w.Request) {
		t.Errorf("request body differs from %s.request.json\n got: %s\nwant: %s", sc, prettyJSON(reqs[0].Body), prettyJSON(w.Request))
	}
}

// retryAfter reads the wait a recorded response asks for: retry-after-ms,
// else Retry-After in seconds (the recordings use no dates).
func retryAfter(t *testing.T, h http.Header) time.Duration {
	t.Helper()
	if v := h.Get("Retry-After-Ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("recording: retry-after-ms %q", v)
		}
		return time.Duration(ms) * time.Millisecond
	}
	s, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil {
		t.Fatalf("recording: the 429 has no usable Retry-After (%q)", h.Get("Retry-After"))
	}
	return time.Duration(s) * time.Second
}

// runScripted plays a scenario on a model without HTTP.
func runScripted(t *testing.T, sc Scenario, m model.Model) {
	switch sc {
	case StallAfterHeaders, StallMidStream:
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := m.Stream(ctx, Request(sc))
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		if sc == StallMidStream {
			c, err := s.Recv()
			if err != nil || c.Kind != model.ChunkText {
				t.Fatalf("first Recv = %+v, %v; want a text delta", c, err)
			}
		}
		cancelRecv(t, s, cancel)
		return
	}
	s, err := stream(t, m, sc)
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	checkOutcome(t, sc, drain(t, s))
}
