package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reinhq/rein/client"
)

// idleWorkers bounds the sessions created and streams opened at once for
// the idle measurement: enough to be quick, few enough not to be a burst
// the server must queue.
const idleWorkers = 16

// idleSettle bounds the wait for the server to count the opened (or
// closed) streams in rein_sse_subscribers.
const idleSettle = 30 * time.Second

// measureIdle measures the server memory one idle open event stream
// costs: it creates k sessions, samples the server, opens one stream to
// each, waits until the server counts them all, samples again, and divides
// the difference by the streams opened. The streams are raw connections
// that read nothing past the response headers, so that in-process the
// figure carries almost none of the client's own memory (no reader
// buffers, no goroutine). They are closed before the load starts.
func (r *runner) measureIdle(ctx context.Context, k int) IdleStreams {
	out := IdleStreams{Streams: k}
	ids := r.idleSessions(ctx, k)
	if len(ids) == 0 {
		return out
	}
	before, err := r.t.probe.sample(ctx, true)
	if err != nil {
		r.errs.add("server metrics", err)
		return out
	}
	conns := r.openIdle(ctx, ids)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		// Wait for the server to let them go, so they do not weigh on
		// the load that follows.
		if _, err := r.waitSubscribers(ctx, func(n float64) bool { return n <= before.subscribers }); err != nil {
			r.errs.add("idle streams: close", err)
		}
	}()
	out.Opened = len(conns)
	if out.Opened == 0 {
		return out
	}
	want := before.subscribers + float64(out.Opened)
	if _, err := r.waitSubscribers(ctx, func(n float64) bool { return n >= want }); err != nil {
		r.errs.add("idle streams: open", err)
		return out
	}
	after, err := r.t.probe.sample(ctx, true)
	if err != nil {
		r.errs.add("server metrics", err)
		return out
	}
	n := float64(out.Opened)
	out.RSSPerStreamBytes = float64(after.rss-before.rss) / n
	out.HeapPerStreamBytes = float64(after.heap-before.heap) / n
	out.StacksPerStreamBytes = float64(after.stacks-before.stacks) / n
	out.Measured = true
	return out
}

// idleSessions creates k sessions for the idle streams.
func (r *runner) idleSessions(ctx context.Context, k int) []string {
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	next := make(chan struct{})
	for range min(idleWorkers, k) {
		wg.Go(func() {
			for range next {
				s, err := r.c.CreateSession(ctx, client.CreateSessionRequest{Metadata: map[string]any{"rein_bench": "idle"}})
				if err != nil {
					r.errs.add("idle streams: create session: "+errorClass(ctx, err), err)
					continue
				}
				mu.Lock()
				ids = append(ids, s.ID)
				mu.Unlock()
			}
		})
	}
	for range k {
		if ctx.Err() != nil {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return ids
}

// openIdle opens one idle stream to each session and returns the
// connections that answered 200 with an event stream.
func (r *runner) openIdle(ctx context.Context, ids []string) []net.Conn {
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	next := make(chan string)
	for range min(idleWorkers, len(ids)) {
		wg.Go(func() {
			for id := range next {
				c, err := r.dialStream(ctx, id)
				if err != nil {
					r.errs.add("idle streams: open: "+errorClass(ctx, err), err)
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		next <- id
	}
	close(next)
	wg.Wait()
	return conns
}

// dialStream opens GET /api/sessions/{id}/events/stream on a connection of
// its own and reads the response headers only.
func (r *runner) dialStream(ctx context.Context, sessionID string) (net.Conn, error) {
	u, err := url.Parse(r.t.url)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: u.Hostname()})
		if err := tc.HandshakeContext(dctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)
	path := strings.TrimRight(u.Path, "/") + "/api/sessions/" + url.PathEscape(sessionID) + "/events/stream"
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n", path, u.Host)
	if r.o.Token != "" {
		req += "Authorization: Bearer " + r.o.Token + "\r\n"
	}
	req += "\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		conn.Close()
		return nil, err
	}
	// The reader is dropped after the headers: what the server sends
	// next (heartbeats) waits in the kernel's socket buffer.
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 1024), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		conn.Close()
		return nil, fmt.Errorf("rein bench: idle stream of session %s: %s (%s)", sessionID, resp.Status, resp.Header.Get("Content-Type"))
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// waitSubscribers polls the server's open-stream count until ok says so
// or idleSettle passes. The server is another party (possibly another
// process): its gauge is the only signal of when it has done its part.
func (r *runner) waitSubscribers(ctx context.Context, ok func(float64) bool) (float64, error) {
	deadline := time.Now().Add(idleSettle)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := r.t.probe.sample(ctx, false)
		if err != nil {
			return 0, err
		}
		if slices.Contains(s.missing, metricSubscribers) {
			return 0, fmt.Errorf("rein bench: the server does not expose %s", metricSubscribers)
		}
		if ok(s.subscribers) {
			return s.subscribers, nil
		}
		if time.Now().After(deadline) {
			return s.subscribers, fmt.Errorf("rein bench: the server counts %v open streams after %s", s.subscribers, idleSettle)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return s.subscribers, context.Cause(ctx)
		}
	}
}
