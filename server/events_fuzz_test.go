package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/sessions"
)

// The fuzz targets of the HTTP API (docs/reliability.md). Each builds one
// server per target and drives it through ServeHTTP, so an iteration costs
// one request and no listener; what they check holds whatever state earlier
// iterations left behind.

const (
	fuzzToken = "tok-fuzz"
	fuzzOwner = "fuzzer"
)

// fuzzServer is a whole stack (scripted model, service, memory store)
// behind a server that fuzz iterations call in process.
type fuzzServer struct {
	*reintest.Server
}

func newFuzzServer(f *testing.F) *fuzzServer {
	f.Helper()
	return &fuzzServer{reintest.NewServer(f, reintest.ServerOptions{
		Script: "testdata/fuzz.yaml",
		Tokens: map[string]string{fuzzToken: fuzzOwner},
	})}
}

// newRequest is a request to the server as the fuzz owner, or nil when
// target is not a request-target a client could send.
func (fs *fuzzServer) newRequest(ctx context.Context, method, target string, body []byte) *http.Request {
	r, err := http.NewRequestWithContext(ctx, method, "http://rein.test"+target, bytes.NewReader(body))
	if err != nil {
		return nil
	}
	r.Header.Set("Authorization", "Bearer "+fuzzToken)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

// session creates a session of the fuzz owner.
func (fs *fuzzServer) session(t testing.TB) string {
	t.Helper()
	sess, err := fs.Service.CreateSession(context.Background(), fuzzOwner, sessions.CreateSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// errorJSON is the docs/api.md error body, with a batch's results.
type errorJSON struct {
	Error *struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Param     string `json:"param"`
		RunID     string `json:"run_id"`
		RequestID string `json:"request_id"`
	} `json:"error"`
	Results *[]json.RawMessage `json:"results"`
}

// codeOfStatus is the code each error status may carry (docs/api.md).
var codeOfStatus = map[int][]string{
	400: {"invalid_argument"},
	404: {"not_found"},
	409: {"session_busy", "conflict"},
	413: {"payload_too_large"},
}

// checkAnswer checks what every JSON answer must be: a JSON object, an
// error body on non-2xx with a code that fits the status and a message that
// neither repeats the code nor carries a stack trace, and never a 5xx. The
// request's own bytes (input) are excused from the trace check: an error
// may quote what the client sent.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, input []byte) errorJSON {
	t.Helper()
	body := rec.Body.Bytes()
	if rec.Code >= 500 {
		t.Fatalf("status %d: %s", rec.Code, body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("status %d with Content-Type %q: %s", rec.Code, ct, body)
	}
	checkNoTrace(t, body, input)
	var e errorJSON
	if err := json.Unmarshal(body, &e); err != nil || body[0] != '{' {
		t.Fatalf("status %d: the body is not a JSON object: %v\n%s", rec.Code, err, body)
	}
	if rec.Code < 300 {
		if e.Error != nil {
			t.Fatalf("status %d with an error: %s", rec.Code, body)
		}
		return e
	}
	codes, ok := codeOfStatus[rec.Code]
	if !ok {
		t.Fatalf("unexpected status %d: %s", rec.Code, body)
	}
	if e.Error == nil || !contains(codes, e.Error.Code) {
		t.Fatalf("status %d: error code is not one of %v: %s", rec.Code, codes, body)
	}
	if e.Error.Message == "" || strings.HasPrefix(e.Error.Message, e.Error.Code) {
		t.Fatalf("status %d: message %q", rec.Code, e.Error.Message)
	}
	if e.Error.RequestID == "" || e.Error.RequestID != rec.Header().Get("X-Request-Id") {
		t.Fatalf("status %d: request_id %q, X-Request-Id %q", rec.Code, e.Error.RequestID, rec.Header().Get("X-Request-Id"))
	}
	if e.Error.Code == "session_busy" && e.Error.RunID == "" {
		t.Fatalf("session_busy without run_id: %s", body)
	}
	return e
}

// traceMarks are what a Go stack trace or panic report looks like.
var traceMarks = []*regexp.Regexp{
	regexp.MustCompile(`goroutine \d+ \[`),
	regexp.MustCompile(`[\w/.-]+\.go:\d+`),
	regexp.MustCompile(`panic[:(]`),
	regexp.MustCompile(`runtime error`),
}

// checkNoTrace fails when body holds a stack trace or panic text that the
// request's own bytes do not explain.
func checkNoTrace(t testing.TB, body, input []byte) {
	t.Helper()
	for _, re := range traceMarks {
		for _, m := range re.FindAll(body, -1) {
			if !bytes.Contains(input, m) {
				t.Fatalf("the answer carries %q (a stack trace or panic):\n%s", m, body)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// batchParam is what a validation error's param may be: the events list,
// one event, its type, its payload or one payload field.
var batchParam = regexp.MustCompile(`^events(?:\[(\d+)\](?:\.type|\.payload(?:\.[A-Za-z_]+)?)?)?$`)

// resultKeys are the keys of each event type's result (docs/api.md).
var resultKeys = map[string][]string{
	"user.message":           {"run_id", "status"},
	"user.interrupt":         {"accepted", "run_id"},
	"user.supplement":        {"supplement_id", "status"},
	"user.tool_confirmation": {"tool_use_id", "allow"},
	"system.message":         {},
}

// batchView is what the fuzz target itself reads of a body: whether it is
// a JSON object, and the items of its events array (nil: none usable).
type batchView struct {
	object bool
	items  []json.RawMessage
	types  []string // types[i] is items[i]'s type, "" when not a string
}

func viewBatch(body []byte) batchView {
	var v batchView
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	var top map[string]json.RawMessage
	if !json.Valid(body) || len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(body, &top) != nil {
		return v
	}
	v.object = true
	raw := bytes.TrimLeft(top["events"], " \t\r\n")
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &v.items) != nil {
		v.items = nil
		return v
	}
	for _, it := range v.items {
		// The key "type" exactly, as the server reads it: a struct field
		// would also take "Type" or "tYpe" (encoding/json matches keys
		// without regard to case), which the server ignores as unknown.
		var ev map[string]json.RawMessage
		var s string
		if json.Unmarshal(it, &ev) == nil {
			_ = json.Unmarshal(ev["type"], &s)
		}
		v.types = append(v.types, s)
	}
	return v
}

// FuzzPostEvents: any bytes as the body of POST /api/sessions/{id}/events,
// on a fresh session. The answer is never a 5xx nor a stack trace; a 400
// names the offending field (param) whenever the body is a JSON object, and
// a field that exists; a 200 has one result per event, of the event type's
// shape; a failure while applying carries the results of the events before
// it.
func FuzzPostEvents(f *testing.F) {
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		sid := fs.session(t)
		req := fs.newRequest(context.Background(), "POST", "/api/sessions/"+sid+"/events", body)
		rec := httptest.NewRecorder()
		fs.Handler.ServeHTTP(rec, req)
		e := checkAnswer(t, rec, body)
		v := viewBatch(body)
		switch {
		case rec.Code == 200:
			if e.Results == nil || len(*e.Results) != len(v.items) || len(v.items) == 0 || len(v.items) > server.MaxBatchEvents {
				t.Fatalf("200 for a batch of %d events: %s", len(v.items), rec.Body)
			}
			for i, res := range *e.Results {
				keys, ok := resultKeys[v.types[i]]
				if !ok {
					t.Fatalf("event %d of type %q accepted: %s", i, v.types[i], rec.Body)
				}
				var got map[string]json.RawMessage
				if err := json.Unmarshal(res, &got); err != nil || len(got) != len(keys) {
					t.Fatalf("result %d of a %s is not %v: %s", i, v.types[i], keys, res)
				}
				for _, k := range keys {
					if _, ok := got[k]; !ok {
						t.Fatalf("result %d of a %s lacks %q: %s", i, v.types[i], k, res)
					}
				}
			}
		case e.Error.Code == "payload_too_large":
			if len(body) <= server.MaxBodyBytes {
				t.Fatalf("413 for a body of %d bytes", len(body))
			}
		case e.Results == nil:
			// Refused before anything was applied: only validation does that.
			if rec.Code != 400 {
				t.Fatalf("%d without results: %s", rec.Code, rec.Body)
			}
			checkBatchParam(t, e.Error.Param, v, rec.Body.Bytes())
		default:
			// Applying stopped at event len(results).
			n := len(*e.Results)
			if n >= len(v.items) {
				t.Fatalf("%d results and an error for %d events: %s", n, len(v.items), rec.Body)
			}
			if rec.Code == 400 && !strings.HasPrefix(e.Error.Param, fmt.Sprintf("events[%d]", n)) {
				t.Fatalf("event %d failed, but param is %q: %s", n, e.Error.Param, rec.Body)
			}
		}
	})
}

// checkBatchParam checks a validation error's param against the body.
func checkBatchParam(t *testing.T, param string, v batchView, body []byte) {
	t.Helper()
	if !v.object {
		if param != "" {
			t.Fatalf("a body that is not a JSON object has no field to name, got param %q: %s", param, body)
		}
		return
	}
	m := batchParam.FindStringSubmatch(param)
	if m == nil {
		t.Fatalf("param %q does not name a field of the batch: %s", param, body)
	}
	if m[1] == "" {
		if len(v.items) >= 1 && len(v.items) <= server.MaxBatchEvents {
			t.Fatalf("param %q, but events is an array of %d: %s", param, len(v.items), body)
		}
		return
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(v.items) {
		t.Fatalf("param %q names an event the batch (of %d) does not have: %s", param, len(v.items), body)
	}
}

// FuzzEventCursors: any query string and Last-Event-ID on GET .../events
// and GET .../events/stream of a session with a known log. A valid cursor
// returns exactly the events after it (at most limit of them on a page); an
// invalid after, limit or Last-Event-ID is a 400 naming it; nothing is a
// 5xx. The oracle reads numbers on its own (decimal digits with an optional
// sign, within int64), not with the server's parser.
func FuzzEventCursors(f *testing.F) {
	fs := newFuzzServer(f)
	sid := fs.session(f)
	const logLen = 25
	var batch []string
	for i := range logLen {
		batch = append(batch, fmt.Sprintf(`{"type":"system.message","payload":{"text":"%d"}}`, i))
	}
	rec := httptest.NewRecorder()
	fs.Handler.ServeHTTP(rec, fs.newRequest(context.Background(), "POST", "/api/sessions/"+sid+"/events", []byte(`{"events":[`+strings.Join(batch, ",")+`]}`)))
	if rec.Code != 200 {
		f.Fatalf("building the log: %d %s", rec.Code, rec.Body)
	}
	f.Fuzz(func(t *testing.T, query, lastEventID string) {
		req := fs.newRequest(context.Background(), "GET", "/api/sessions/"+sid+"/events?"+query, nil)
		if req == nil {
			return // not a URL a client can send
		}
		q := req.URL.Query()
		input := []byte(query + "\n" + lastEventID)

		// A page.
		rec := httptest.NewRecorder()
		fs.Handler.ServeHTTP(rec, req)
		e := checkAnswer(t, rec, input)
		after, afterOK := cursorParam(q, "after", 0)
		limit, limitOK := cursorParam(q, "limit", 100)
		switch {
		case !afterOK || after.Sign() < 0:
			wantInvalid(t, rec, e, "after")
		case !limitOK || limit.Sign() <= 0:
			wantInvalid(t, rec, e, "limit")
		default:
			if rec.Code != 200 {
				t.Fatalf("after=%v limit=%v: %d %s", after, limit, rec.Code, rec.Body)
			}
			var page struct {
				Events []struct {
					Seq int64 `json:"seq"`
				} `json:"events"`
				LastSeq int64 `json:"last_seq"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || page.Events == nil || page.LastSeq != logLen {
				t.Fatalf("page: %v %s", err, rec.Body)
			}
			first, n := expectedRange(after, min64(limit, 1000), logLen)
			if len(page.Events) != n {
				t.Fatalf("after=%v limit=%v: %d events, want %d", after, limit, len(page.Events), n)
			}
			for i, ev := range page.Events {
				if ev.Seq != first+int64(i) {
					t.Fatalf("after=%v limit=%v: event %d has seq %d, want %d", after, limit, i, ev.Seq, first+int64(i))
				}
			}
		}

		// The stream, with Last-Event-ID when it is a header value a client
		// can send.
		for _, c := range []byte(lastEventID) {
			if c < ' ' && c != '\t' || c == 0x7f {
				return
			}
		}
		fuzzStream(t, fs, sid, query, lastEventID, q, logLen, input)
	})
}

// fuzzStream opens the stream and reads what it replays; it ends the
// request once the last expected frame (or, with nothing to replay, the
// headers) has been flushed.
func fuzzStream(t *testing.T, fs *fuzzServer, sid, query, lastEventID string, q url.Values, logLen int64, input []byte) {
	t.Helper()
	param := "after"
	cursor, ok := cursorParam(q, "after", 0)
	if lastEventID != "" {
		// Last-Event-ID overrides after, valid or not.
		param = "Last-Event-ID"
		cursor, ok = parseDecimal(lastEventID)
	}
	valid := ok && cursor.Sign() >= 0
	first, n := int64(0), 0
	if valid {
		first, n = expectedRange(cursor, big.NewInt(logLen), logLen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req := fs.newRequest(ctx, "GET", "/api/sessions/"+sid+"/events/stream?"+query, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	rec := &streamRecorder{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	if n > 0 {
		rec.last = fmt.Sprintf("id: %d\n", first+int64(n)-1)
	}
	fs.Handler.ServeHTTP(rec, req)
	if !valid {
		wantInvalid(t, rec.ResponseRecorder, checkAnswer(t, rec.ResponseRecorder, input), param)
		return
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream after %v: %d %s", cursor, rec.Code, rec.Body)
	}
	if ctx.Err() == context.DeadlineExceeded {
		t.Fatalf("stream after %v: the replay never ended: %s", cursor, rec.Body)
	}
	ids := regexp.MustCompile(`(?m)^id: (\d+)$`).FindAllStringSubmatch(rec.Body.String(), -1)
	if len(ids) != n {
		t.Fatalf("stream after %v: %d frames, want %d:\n%s", cursor, len(ids), n, rec.Body)
	}
	for i, m := range ids {
		if m[1] != strconv.FormatInt(first+int64(i), 10) {
			t.Fatalf("stream after %v: frame %d has id %s, want %d", cursor, i, m[1], first+int64(i))
		}
	}
}

// streamRecorder records a stream and cancels its request once the frame
// last has been flushed, or, when last is "", once the headers have.
type streamRecorder struct {
	*httptest.ResponseRecorder
	last   string
	cancel context.CancelFunc
}

func (r *streamRecorder) Flush() {
	r.ResponseRecorder.Flush()
	if r.Code == 200 && (r.last == "" || strings.Contains(r.Body.String(), "\n\n"+r.last) || strings.HasPrefix(r.Body.String(), r.last)) {
		r.cancel()
	}
}

// wantInvalid checks a 400 invalid_argument naming param.
func wantInvalid(t *testing.T, rec *httptest.ResponseRecorder, e errorJSON, param string) {
	t.Helper()
	if rec.Code != 400 || e.Error == nil || e.Error.Code != "invalid_argument" || e.Error.Param != param {
		t.Fatalf("want 400 invalid_argument naming %s, got %d %s", param, rec.Code, rec.Body)
	}
}

// cursorParam reads an integer query parameter the way docs/api.md states
// it: absent is def; present, it must be a decimal integer, even when
// empty. ok is false when it is not one.
func cursorParam(q url.Values, name string, def int64) (*big.Int, bool) {
	vs, present := q[name]
	if !present {
		return big.NewInt(def), true
	}
	return parseDecimal(vs[0])
}

var decimal = regexp.MustCompile(`^[+-]?[0-9]+$`)

// parseDecimal reads a decimal integer that fits an int64.
func parseDecimal(s string) (*big.Int, bool) {
	if !decimal.MatchString(s) {
		return nil, false
	}
	n, ok := new(big.Int).SetString(strings.TrimPrefix(s, "+"), 10)
	if !ok || !n.IsInt64() {
		return nil, false
	}
	return n, true
}

// expectedRange is the seqs a read after cursor of at most limit events
// returns from a log of seqs 1..logLen: the first, and how many.
func expectedRange(cursor, limit *big.Int, logLen int64) (first int64, n int) {
	if cursor.Cmp(big.NewInt(logLen)) >= 0 {
		return 0, 0
	}
	c := cursor.Int64()
	return c + 1, int(min(logLen-c, limit.Int64()))
}

func min64(a *big.Int, b int64) *big.Int {
	if a.Cmp(big.NewInt(b)) > 0 {
		return big.NewInt(b)
	}
	return a
}
