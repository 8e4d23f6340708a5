package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The scenario of this file is about readers that cost the server nothing
// while they do nothing: a client that opened an event stream and never
// reads it, and thousands of streams open on idle sessions. Neither may
// slow the runs of other sessions or the other readers of the same
// session, and neither may make the server hold memory in proportion to
// what it cannot send.

const (
	// idleStreams is how many idle event streams are open at once.
	idleStreams = 5000
	// idleSessions is how many idle sessions they follow.
	idleSessions = 50
	// slowNotes × slowNoteSize is what the session of the slow reader
	// receives while it reads nothing: several times what the kernel's
	// socket buffers can hold (the reader's receive buffer is made tiny,
	// the server's send buffer is at most net.ipv4.tcp_wmem's maximum,
	// 4 MiB by default).
	slowNotes    = 48
	slowNoteSize = 256 << 10
	// roundRuns runs (one per session) make a round, roundsPerPhase
	// rounds a phase: the figure compared is the median of a phase.
	roundRuns      = 8
	roundsPerPhase = 3
)

// roundTimings runs rounds of short streamed runs ("burst": 30 deltas, 5 ms
// apart), one per session, all at once, each followed on its session's
// stream, and returns how long each took from its user.message to its
// session.run_completed read on the stream. Every stream read must be
// gap-free.
func roundTimings(t *testing.T, c *client.Client, p *proc, sids []string, rounds int) []time.Duration {
	t.Helper()
	readers := make([]*sseReader, len(sids))
	for i, sid := range sids {
		r, err := dialSSE(p, sid, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		readers[i] = r
	}
	var mu sync.Mutex
	var out []time.Duration
	for round := range rounds {
		var wg sync.WaitGroup
		for i, sid := range sids {
			wg.Go(func() {
				ctx := ctxFor(t, runTimeout)
				t0 := time.Now()
				res, err := c.SendMessage(ctx, sid, client.Message{Text: fmt.Sprintf("burst %d of %s", round, sid)})
				if err != nil {
					t.Errorf("session %s: send: %v", sid, err)
					return
				}
				if _, err := readers[i].wait(ctx, isType(rein.EventRunCompleted, res.RunID)); err != nil {
					t.Errorf("session %s: run %s did not end within %v: %v", sid, res.RunID, runTimeout, err)
					return
				}
				mu.Lock()
				out = append(out, time.Since(t0))
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	for _, r := range readers {
		frames := r.all()
		for i, f := range frames {
			if f.id != int64(i+1) {
				t.Fatalf("%s: frame #%d has id %d: the stream has a gap or a duplicate", r.name, i+1, f.id)
			}
		}
	}
	return out
}

// dialSlow opens sid's event stream with a receive buffer as small as the
// kernel allows and never reads from it: the server's writes to it block
// as soon as the socket buffers are full.
func dialSlow(t *testing.T, p *proc, sid string) net.Conn {
	t.Helper()
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Timeout: callTimeout, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		t.Fatalf("dial %s: %v", u.Host, err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET /api/sessions/%s/events/stream HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", sid, u.Host); err != nil {
		t.Fatalf("slow reader: request: %v", err)
	}
	return conn
}

// openIdle opens n event streams spread over sids, each on a connection of
// its own: it reads each answer's header (200, text/event-stream) and then
// nothing more. It returns the connections.
func openIdle(t *testing.T, p *proc, sids []string, n int) []net.Conn {
	t.Helper()
	u, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				c, err := net.DialTimeout("tcp", u.Host, callTimeout)
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
				_ = c.SetDeadline(time.Now().Add(2 * callTimeout))
				if _, err := fmt.Fprintf(c, "GET /api/sessions/%s/events/stream HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", sids[i%len(sids)], u.Host); err != nil {
					errs <- err
					return
				}
				resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
				if err != nil {
					errs <- fmt.Errorf("stream %d: %v", i, err)
					return
				}
				if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					errs <- fmt.Errorf("stream %d: %s %s", i, resp.Status, resp.Header.Get("Content-Type"))
					return
				}
				_ = c.SetDeadline(time.Time{})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("opening %d idle streams: %v", n, err)
	}
	return conns
}

var sseSubscribers = regexp.MustCompile(`(?m)^rein_sse_subscribers(?:\{[^}]*\})? ([0-9.e+]+)$`)

// subscribers is the server's rein_sse_subscribers (open event streams).
func subscribers(t *testing.T, p *proc) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, callTimeout), http.MethodGet, p.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	m := sseSubscribers.FindStringSubmatch(b.String())
	if m == nil {
		t.Fatalf("no rein_sse_subscribers in /metrics")
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(f)
}

// waitSubscribers polls /metrics until the server counts want open
// streams (at most, with atMost), bounded by ctx.
func waitSubscribers(ctx context.Context, t *testing.T, p *proc, want int, atMost bool) int {
	t.Helper()
	for {
		n := subscribers(t, p)
		if n == want || atMost && n <= want {
			return n
		}
		select {
		case <-ctx.Done():
			return n
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// TestSSESlowAndIdleStreams opens, next to the runs of a few sessions, an
// event stream that is never read (on a session that then receives
// 12 MiB of supplements) and 5,000 streams on idle sessions. The runs are
// not slowed (their median time, from message to session.run_completed on
// their stream, stays within twice the one measured before, plus a
// margin), the other reader of the slow reader's session reads everything
// as it comes, the server does not hold what the slow reader cannot take
// (its memory grows by much less than that), an idle stream costs a few
// KiB, and every stream's slot is free again once its client is gone.
func TestSSESlowAndIdleStreams(t *testing.T) {
	t.Parallel()
	p := startServeWith(ctxFor(t, startTimeout), t, "server", "sqlite:"+t.TempDir()+"/rein.db",
		serveOptions{args: []string{"--max-streams-per-owner", "-1"}})
	c := newLoadClients(t).of(p)
	pid := p.cmd.Process.Pid
	session := func() string {
		s, err := c.CreateSession(ctxFor(t, callTimeout), client.CreateSessionRequest{})
		if err != nil {
			t.Fatalf("create session: %v", err)
		}
		return s.ID
	}
	var runSids []string
	for range roundRuns {
		runSids = append(runSids, session())
	}

	// Before: the runs alone (a first round warms the server up).
	roundTimings(t, c, p, runSids, 1)
	before := roundTimings(t, c, p, runSids, roundsPerPhase)
	rss0 := vmRSS(pid)

	// The same traffic — big supplements — to a session with one reader,
	// then to a session whose other reader never reads: the reader that
	// reads must see no difference, and the server must not hold what
	// the other cannot take (its memory grows by no more than in the
	// first phase, where caches and buffers reach their size).
	flood := func(sid string) (lag, worst time.Duration, grew int64) {
		t.Helper()
		r, err := dialSSE(p, sid, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		rss := vmRSS(pid)
		note := strings.Repeat("n", slowNoteSize)
		lastID := ""
		for i := range slowNotes {
			lastID = fmt.Sprintf("%s-%d", sid, i)
			t0 := time.Now()
			if _, err := c.Supplement(ctxFor(t, callTimeout), sid, client.Supplement{ID: lastID, Text: note}); err != nil {
				t.Fatalf("supplement %d to %s: %v", i, sid, err)
			}
			worst = max(worst, time.Since(t0))
		}
		tLast := time.Now()
		f, err := r.wait(ctxFor(t, runTimeout), func(f sseFrame) bool {
			var sp rein.SupplementPayload
			return f.ev.Type == rein.EventUserSupplement && f.ev.DecodePayload(&sp) == nil && sp.SupplementID == lastID
		})
		if err != nil {
			t.Fatalf("the reader of %s did not read the last supplement: %v", sid, err)
		}
		if n := len(r.all()); n != slowNotes {
			t.Errorf("the reader of %s read %d events, want %d", sid, n, slowNotes)
		}
		return f.at.Sub(tLast), worst, vmRSS(pid) - rss
	}
	sent := int64(slowNotes * slowNoteSize)
	lagAlone, postAlone, grewAlone := flood(session())
	slowSid := session()
	slow := dialSlow(t, p, slowSid)
	lagSlow, postSlow, grewSlow := flood(slowSid)
	rssSlow := vmRSS(pid)

	// 5,000 idle streams.
	var idleSids []string
	for range idleSessions {
		idleSids = append(idleSids, session())
	}
	t0 := time.Now()
	idle := openIdle(t, p, idleSids, idleStreams)
	opened := time.Since(t0)
	open := idleStreams + 1 // and the slow reader
	if n := waitSubscribers(ctxFor(t, 10*time.Second), t, p, open, false); n != open {
		t.Fatalf("the server counts %d open streams, want %d", n, open)
	}
	rssIdle := vmRSS(pid)

	// The same runs with all of them open.
	during := roundTimings(t, c, p, runSids, roundsPerPhase)
	rssEnd := vmRSS(pid)

	perStream := (rssIdle - rssSlow) / idleStreams
	t.Logf("runs (message → session.run_completed read): median %v before, %v with a slow reader and %d idle streams open (%d runs each)",
		median(before).Round(time.Millisecond), median(during).Round(time.Millisecond), idleStreams, len(before))
	t.Logf("%s of supplements to a session: its reader read the last one %v after it was sent alone, %v next to a reader that read nothing; each POST within %v and %v; server RSS grew by %s and %s",
		mib(sent), lagAlone.Round(time.Millisecond), lagSlow.Round(time.Millisecond), postAlone.Round(time.Millisecond), postSlow.Round(time.Millisecond), mib(grewAlone), mib(grewSlow))
	t.Logf("server RSS: %s before, %s after the supplements, %s with %d idle streams (opened in %v; %.1f KiB each), %s after the runs",
		mib(rss0), mib(rssSlow), mib(rssIdle), idleStreams, opened.Round(time.Millisecond), float64(perStream)/1024, mib(rssEnd))

	// The bounds leave room for a machine shared with other work; what
	// they catch is of another order: a server that woke every stream on
	// every append, or let a blocked write hold up a session's other
	// readers (until the write timeout, 30 s), is many times slower.
	if limit := 3*median(before) + 500*time.Millisecond; median(during) > limit {
		t.Errorf("runs took %v (median) with the slow and idle streams open, want at most %v (three times the %v before, plus 500 ms)", median(during), limit, median(before))
	}
	if limit := 3*lagAlone + 2*time.Second; lagSlow > limit {
		t.Errorf("next to a reader that read nothing, the other reader read the last supplement %v after it was sent, want at most %v (three times the %v alone, plus 2 s)", lagSlow, limit, lagAlone)
	}
	if grewSlow > grewAlone+sent/4 {
		t.Errorf("the server's RSS grew by %s while a reader took nothing of %s (by %s for the same traffic without it): it holds what it cannot send", mib(grewSlow), mib(sent), mib(grewAlone))
	}
	if perStream > 64<<10 {
		t.Errorf("an idle stream costs the server %.1f KiB of RSS, want at most 64 KiB", float64(perStream)/1024)
	}

	// Gone clients free their slots.
	for _, conn := range idle {
		conn.Close()
	}
	slow.Close()
	if n := waitSubscribers(ctxFor(t, 10*time.Second), t, p, 0, true); n != 0 {
		t.Errorf("%d streams still counted open 10 s after every client went", n)
	}
}
