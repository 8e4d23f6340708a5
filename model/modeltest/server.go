package modeltest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// behaviour is what the test server does after (or instead of) the
// recorded response.
type behaviour int

const (
	serve       behaviour = iota // send the response and end it
	stallBefore                  // read the request, send nothing, hold on
	stallAfter                   // send the response, then hold the connection open
	drop                         // send the response, then cut the connection mid-body
)

// request is what the server received.
type request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// server is an httptest server that plays a Wire.
type server struct {
	*httptest.Server
	wire Wire
	how  behaviour

	mu       sync.Mutex
	requests []request
	arrived  chan struct{} // one value per request received
	release  chan struct{} // closed at cleanup: stalled handlers return
}

func newServer(t *testing.T, w Wire, how behaviour) *server {
	s := &server{wire: w, how: how, arrived: make(chan struct{}, 16), release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	// Cleanups run last-in first-out: release stalled handlers first, so
	// that Close (which waits for handlers) does not wait forever.
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release); s.Client().CloseIdleConnections() })
	return s
}

func (s *server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	select {
	case s.arrived <- struct{}{}:
	default:
	}
	if s.how == stallBefore {
		s.hold(r)
		return
	}
	res := s.wire.Responses[min(n, len(s.wire.Responses)-1)]
	if s.how == drop {
		s.cut(w, res)
		return
	}
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.Status)
	flusher := w.(http.Flusher)
	flusher.Flush()
	for _, ev := range events(res.Body) {
		_, _ = w.Write(ev)
		flusher.Flush()
	}
	if s.how == stallAfter {
		s.hold(r)
	}
}

func (s *server) hold(r *http.Request) {
	select {
	case <-r.Context().Done(): // the client went away
	case <-s.release:
	}
}

// cut writes the response by hand on the raw connection, chunked, and
// closes the connection without the final zero-length chunk: the client
// sees the body end in the middle, as when a connection drops.
func (s *server) cut(w http.ResponseWriter, res Response) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", res.Status, http.StatusText(res.Status))
	for k, vs := range res.Header {
		for _, v := range vs {
			fmt.Fprintf(buf, "%s: %s\r\n", k, v)
		}
	}
	buf.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	for _, ev := range events(res.Body) {
		writeChunk(buf, ev)
	}
	_ = buf.Flush()
}

func writeChunk(buf *bufio.ReadWriter, b []byte) {
	fmt.Fprintf(buf, "%x\r\n", len(b))
	buf.Write(b)
	buf.WriteString("\r\n")
}

func (s *server) received() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

// headerHas reports whether any header value contains v.
func headerHas(h http.Header, v string) bool {
	for _, vs := range h {
		for _, x := range vs {
			if strings.Contains(x, v) {
				return true
			}
		}
	}
	return false
}
