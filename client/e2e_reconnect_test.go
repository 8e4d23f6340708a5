package client_test

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// cutProxy is a TCP proxy in front of a server that kills connections in
// the middle of an SSE frame: connection i is cut right after the start of
// its (cuts[i]+1)-th frame, having forwarded cuts[i] whole frames and a
// few bytes of the next. Connections beyond len(cuts) are left alone. It
// is a real network drop as far as the client can tell: the TCP
// connection closes mid-response.
type cutProxy struct {
	ln      net.Listener
	backend string
	cuts    []int

	mu    sync.Mutex
	n     int
	conns map[net.Conn]struct{}
	cut   int // connections cut so far
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, backendURL string, cuts ...int) *cutProxy {
	t.Helper()
	u, err := url.Parse(backendURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, backend: u.Host, cuts: cuts, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		i := p.n
		p.n++
		p.mu.Unlock()
		limit := -1
		if i < len(p.cuts) {
			limit = p.cuts[i]
		}
		p.wg.Go(func() { p.pipe(c, limit) })
	}
}

// pipe forwards one connection, cutting it after limit frames (< 0: never).
func (p *cutProxy) pipe(c net.Conn, limit int) {
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		c.Close()
		return
	}
	p.track(c)
	p.track(b)
	defer c.Close()
	defer b.Close()
	p.wg.Go(func() {
		_, _ = io.Copy(b, c)
		b.Close()
	})
	// Frames start with "id: " at the beginning of a line; the pattern
	// has no repeated characters, so a match state is a simple count.
	const pat = "\nid: "
	state, frames := 0, 0
	buf := make([]byte, 32<<10)
	for {
		n, err := b.Read(buf)
		data := buf[:n]
		if limit >= 0 {
			for i, ch := range data {
				switch {
				case ch == pat[state]:
					state++
				case ch == '\n':
					state = 1
				default:
					state = 0
				}
				if state == len(pat) {
					state = 0
					if frames++; frames > limit {
						// Forward a few bytes of this frame, then drop.
						_, _ = c.Write(data[:min(i+8, len(data))])
						p.mu.Lock()
						p.cut++
						p.mu.Unlock()
						return
					}
				}
			}
		}
		if n > 0 {
			if _, werr := c.Write(data); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// TestE2EStreamReconnectsMidRun cuts the event stream three times in the
// middle of a streaming run (mid-frame, at the TCP level). The client
// resumes each time with Last-Event-ID, and what it yields is exactly the
// log as GET /events reads it: no gap, no duplicate.
func TestE2EStreamReconnectsMidRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	c := s.client("")
	sid := newSession(t, c)

	// The stream alone goes through the proxy; its first connections are
	// cut after 3, 5 and 4 frames.
	proxy := newCutProxy(t, s.url, 3, 5, 4)
	sc := client.New(proxy.url(), client.WithBackoff(client.Backoff{Initial: 1, Max: 2}))
	st := sc.Stream(ctxT(t), sid, 0)
	defer st.Close()

	r := send(t, c, sid, client.Message{Text: "stream please"})
	var got []rein.Event
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatalf("stream: %v after %d events", err, len(got))
		}
		got = append(got, e)
		if e.Type == rein.EventRunCompleted && e.RunID == r.RunID {
			break
		}
	}
	if n := proxy.cutCount(); n != 3 {
		t.Fatalf("%d connections cut, want 3 (the run streamed too few events)", n)
	}
	sameEvents(t, got, allEvents(t, c, sid, 0))

	deltas := 0
	for _, e := range got {
		if e.Type == rein.EventMessageDelta {
			deltas++
		}
	}
	// The cuts fell inside the run: more deltas came after the last cut.
	if deltas < 12 {
		t.Fatalf("only %d deltas: the cuts did not fall mid-run", deltas)
	}

	// Each reconnection resumed exactly after the last event received
	// whole: 3, then 3+5, then 3+5+4.
	var resumes []string
	for _, req := range s.requests("/events/stream") {
		resumes = append(resumes, req.Header.Get("Last-Event-ID"))
	}
	want := []string{"", "3", "8", "12"}
	if len(resumes) != len(want) {
		t.Fatalf("stream requests with Last-Event-ID %q, want %q", resumes, want)
	}
	for i := range want {
		if resumes[i] != want[i] {
			t.Fatalf("stream requests with Last-Event-ID %q, want %q", resumes, want)
		}
	}
	if got := s.requests("/events/stream")[3].URL.Query().Get("after"); got != strconv.Itoa(12) {
		t.Fatalf("after=%s on the last reconnection", got)
	}
}
