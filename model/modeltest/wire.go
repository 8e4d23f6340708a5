package modeltest

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Wire is what a server said (and, optionally, what it was asked) in one
// scenario, recorded by hand from the provider's documented format.
//
// On disk a scenario is DIR/SCENARIO.http: one or more HTTP/1.1 responses
// (status line, headers, blank line, body), separated by a line that is
// exactly ResponseSeparator; the server answers the n-th request with the
// n-th response and repeats the last. An optional DIR/SCENARIO.request.json
// is the request body the provider must send, compared as JSON.
type Wire struct {
	Responses []Response
	// Request, when set, is the JSON body the provider must send.
	Request []byte
	// File is where the wire came from, for messages.
	File string
}

// Response is one recorded HTTP response.
type Response struct {
	Status int
	Header http.Header
	// Body is sent as recorded. An event-stream body is sent one event
	// (a block ending in a blank line) at a time, flushed, as a server
	// streams it.
	Body []byte
}

// ResponseSeparator separates responses in a .http file.
const ResponseSeparator = "### next response ###"

// LoadWires reads every DIR/*.http (and matching *.request.json) into a map
// keyed by scenario. A file named after no known scenario is an error, so a
// typo cannot silently leave a scenario unrecorded.
func LoadWires(dir string) (map[Scenario]Wire, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.http"))
	if err != nil {
		return nil, err
	}
	known := map[Scenario]bool{}
	for _, s := range Scenarios() {
		known[s] = true
	}
	out := map[Scenario]Wire{}
	for _, f := range files {
		sc := Scenario(strings.TrimSuffix(filepath.Base(f), ".http"))
		if !known[sc] {
			return nil, fmt.Errorf("%s: no scenario %q (known: %v)", f, sc, Scenarios())
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		w, err := ParseWire(f, data)
		if err != nil {
			return nil, err
		}
		req := strings.TrimSuffix(f, ".http") + ".request.json"
		if b, err := os.ReadFile(req); err == nil {
			w.Request = b
		} else if !os.IsNotExist(err) {
			return nil, err
		}
		out[sc] = w
	}
	return out, nil
}

// ParseWire parses the .http format described on Wire.
func ParseWire(file string, data []byte) (Wire, error) {
	w := Wire{File: file}
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	for i, part := range bytes.Split(data, []byte("\n"+ResponseSeparator+"\n")) {
		r, err := parseResponse(part)
		if err != nil {
			return w, fmt.Errorf("%s: response %d: %w", file, i+1, err)
		}
		w.Responses = append(w.Responses, r)
	}
	return w, nil
}

func parseResponse(b []byte) (Response, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return Response{}, fmt.Errorf("status line: %w", err)
	}
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/") {
		return Response{}, fmt.Errorf("status line %q: want HTTP/1.1 CODE REASON", line)
	}
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if err != nil || status < 100 || status > 599 {
		return Response{}, fmt.Errorf("status line %q: bad status", line)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return Response{}, fmt.Errorf("headers: %w", err)
	}
	var body bytes.Buffer
	if _, err := br.WriteTo(&body); err != nil {
		return Response{}, err
	}
	return Response{Status: status, Header: http.Header(h), Body: body.Bytes()}, nil
}

// events splits an event-stream body into the pieces a server would
// flush: each event with its terminating blank line.
func events(body []byte) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		i := bytes.Index(body, []byte("\n\n"))
		if i < 0 {
			out = append(out, body)
			break
		}
		out = append(out, body[:i+2])
		body = body[i+2:]
	}
	return out
}
