package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/reinhq/rein"
)

// openAPI is docs/openapi.yaml, loaded for checking the server against
// it. Its schemas are JSON Schema 2020-12 (OpenAPI 3.1), so the project's
// JSON Schema validator checks real answers against them directly.
type openAPI struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
}

const openAPIURL = "https://rein.invalid/openapi.json"

func loadOpenAPI(t *testing.T) *openAPI {
	t.Helper()
	raw, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var y any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	// Through JSON: the validator wants JSON values (json.Number).
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("openapi.yaml is not JSON-compatible: %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	doc := v.(map[string]any)
	if ver, _ := doc["openapi"].(string); !strings.HasPrefix(ver, "3.1.") {
		t.Fatalf("openapi version %q, want 3.1.x", ver)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(openAPIURL, doc); err != nil {
		t.Fatal(err)
	}
	return &openAPI{doc: doc, compiler: c}
}

var httpMethods = []string{"get", "post", "put", "patch", "delete", "head", "options"}

// operations lists "METHOD /path" of every documented operation.
func (o *openAPI) operations() []string {
	var ops []string
	for path, item := range o.doc["paths"].(map[string]any) {
		for _, m := range httpMethods {
			if _, ok := item.(map[string]any)[m]; ok {
				ops = append(ops, strings.ToUpper(m)+" "+path)
			}
		}
	}
	slices.Sort(ops)
	return ops
}

// pointer escapes a JSON pointer token.
func pointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// response returns the JSON pointer of the documented response of an
// operation for a status, following a $ref to components/responses, and
// whether it is documented at all.
func (o *openAPI) response(method, path string, status int) (string, map[string]any, bool) {
	op := o.doc["paths"].(map[string]any)[path].(map[string]any)[strings.ToLower(method)].(map[string]any)
	resp, ok := op["responses"].(map[string]any)[fmt.Sprint(status)].(map[string]any)
	if !ok {
		return "", nil, false
	}
	ptr := "#/paths/" + pointer(path) + "/" + strings.ToLower(method) + "/responses/" + fmt.Sprint(status)
	if ref, ok := resp["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		resp = o.doc["components"].(map[string]any)["responses"].(map[string]any)[name].(map[string]any)
		ptr = ref
	}
	return ptr, resp, true
}

// check validates a real answer against the document: its status must be
// documented for the operation, its content type too, and a JSON body
// must match the schema.
func (o *openAPI) check(t *testing.T, method, path string, r reply) {
	t.Helper()
	ptr, resp, ok := o.response(method, path, r.status)
	if !ok {
		t.Fatalf("%s %s answered %d, which openapi.yaml does not document: %s", method, path, r.status, r.body)
	}
	content, _ := resp["content"].(map[string]any)
	ct := r.header.Get("Content-Type")
	mt := strings.TrimSpace(strings.Split(ct, ";")[0])
	if _, ok := content[mt]; !ok {
		t.Fatalf("%s %s %d: Content-Type %q is not documented", method, path, r.status, ct)
	}
	if mt != "application/json" {
		return
	}
	sch, err := o.compiler.Compile(openAPIURL + ptr + "/content/application~1json/schema")
	if err != nil {
		t.Fatalf("schema of %s %s %d: %v", method, path, r.status, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("%s %s %d: body is not JSON: %v", method, path, r.status, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Fatalf("%s %s %d: body does not match openapi.yaml:\n%s\n%v", method, path, r.status, r.body, err)
	}
}

// schema compiles a component schema.
func (o *openAPI) schema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	sch, err := o.compiler.Compile(openAPIURL + "#/components/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// TestOpenAPIMatchesServer: every documented operation is a route of the
// server and every route is documented; and real answers — successes and
// errors — match the documented statuses, content types and schemas.
func TestOpenAPIMatchesServer(t *testing.T) {
	t.Parallel()
	api := loadOpenAPI(t)
	s := newStack(t, options{tokens: map[string]string{"tok": "alice"}})

	var routes []string
	for _, r := range s.srv.Routes() {
		routes = append(routes, r.Method+" "+r.Path)
	}
	slices.Sort(routes)
	if doc := api.operations(); !slices.Equal(doc, routes) {
		t.Fatalf("openapi.yaml documents\n  %s\nthe server routes\n  %s", strings.Join(doc, "\n  "), strings.Join(routes, "\n  "))
	}

	// A session with a finished run, a running one and a queued one.
	created := s.do("POST", "/api/sessions", "tok", `{"metadata":{"k":"v"},"system":"s"}`)
	api.check(t, "POST", "/api/sessions", created)
	sid := created.json(t)["id"].(string)
	done := s.send("tok", sid, "hello", nil)["run_id"].(string)
	s.completion("tok", sid, done)
	running := s.send("tok", sid, "long A", afterRun)["run_id"].(string)
	s.waitEvent("tok", sid, is(rein.EventToolUse, running))

	type call struct {
		method, pattern, path string
		body                  any
		want                  int
	}
	sess := "/api/sessions/" + sid
	calls := []call{
		{"GET", "/healthz", "/healthz", nil, 200},
		{"GET", "/readyz", "/readyz", nil, 200},
		{"GET", "/metrics", "/metrics", nil, 200},
		{"POST", "/api/sessions", "/api/sessions", nil, 201},
		{"POST", "/api/sessions", "/api/sessions", `{"metadata":[]}`, 400},
		{"POST", "/api/sessions", "/api/sessions", `{"budget":{"tokens":100000}}`, 201},
		{"POST", "/api/sessions", "/api/sessions", `{"budget":{"tokens":0}}`, 400},
		{"PATCH", "/api/sessions/{id}", sess, `{"budget":{"tokens":100000}}`, 200},
		{"PATCH", "/api/sessions/{id}", sess, `{"budget":null}`, 200},
		{"PATCH", "/api/sessions/{id}", sess, `{"budget":{"cost_usd":1}}`, 400},
		{"GET", "/api/sessions", "/api/sessions", nil, 200},
		{"GET", "/api/sessions/{id}", sess, nil, 200},
		{"GET", "/api/sessions/{id}", "/api/sessions/ses_missing", nil, 404},
		{"GET", "/api/sessions/{id}/subagents", sess + "/subagents", nil, 200},
		{"GET", "/api/sessions/{id}/subagents", "/api/sessions/ses_missing/subagents", nil, 404},
		{"GET", "/api/sessions/{id}/runs", sess + "/runs", nil, 200},
		{"GET", "/api/sessions/{id}/runs/{run_id}", sess + "/runs/" + done, nil, 200},
		{"GET", "/api/sessions/{id}/runs/{run_id}", sess + "/runs/" + running, nil, 200},
		{"GET", "/api/sessions/{id}/runs/{run_id}", sess + "/runs/run_missing", nil, 404},
		{"GET", "/api/sessions/{id}/events", sess + "/events", nil, 200},
		{"GET", "/api/sessions/{id}/events", sess + "/events?limit=0", nil, 400},
		{"POST", "/api/sessions/{id}/events", sess + "/events", map[string]any{"events": []any{
			ev("user.message", map[string]any{"text": "queued", "when_busy": "enqueue", "client_id": "c"}),
			ev("user.supplement", map[string]any{"text": "note"}),
			ev("system.message", map[string]any{"text": "sys"}),
			ev("user.interrupt", map[string]any{"run_id": "run_gone"}),
			ev("user.interrupt", map[string]any{"mode": "interrupt"}),
		}}, 200},
		{"POST", "/api/sessions/{id}/events", sess + "/events", `{"events":[{"type":"user.interrupt","payload":{"run_id":null}}]}`, 400},
		{"POST", "/api/sessions/{id}/events", sess + "/events", map[string]any{"events": []any{
			ev("user.supplement", map[string]any{"text": "first"}),
			ev("user.tool_confirmation", map[string]any{"tool_use_id": "call_nope", "allow": true}),
		}}, 404},
		{"POST", "/api/sessions/{id}/events", sess + "/events", `{"events":[` + strings.Repeat(" ", 1<<20) + `]}`, 413},
		{"GET", "/api/sessions", "/api/sessions", nil, 401},
	}
	for _, c := range calls {
		tok := "tok"
		if c.want == 401 {
			tok = ""
		}
		r := s.do(c.method, c.path, tok, c.body)
		if r.status != c.want {
			t.Fatalf("%s %s: %d, want %d: %s", c.method, c.path, r.status, c.want, r.body)
		}
		api.check(t, c.method, c.pattern, r)
	}

	// The editable queue: the batch above queued a run behind the running
	// one; edits and promotes answer the documented shapes, the conflict
	// of a run that is no longer queued included.
	running = s.send("tok", sid, "long C", afterRun)["run_id"].(string)
	s.waitEvent("tok", sid, is(rein.EventToolUse, running))
	q := s.send("tok", sid, "queued behind C", map[string]any{"when_busy": "enqueue", "client_id": "c2"})
	if q["status"] != "QUEUED" {
		t.Fatalf("the queued run: %v", q)
	}
	queuedID := q["run_id"].(string)
	queued := sess + "/runs/" + queuedID
	for _, c := range []call{
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", queued, `{"text":"queued, edited","position":1}`, 200},
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", queued, `{}`, 200},
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", queued, `{"position":0}`, 400},
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", queued, `{"text":""}`, 400},
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", sess + "/runs/" + running, `{"text":"too late"}`, 409},
		{"PATCH", "/api/sessions/{id}/runs/{run_id}", sess + "/runs/run_missing", `{"text":"x"}`, 404},
		{"POST", "/api/sessions/{id}/runs/{run_id}/promote", queued + "/promote", `{"mode":"sideways"}`, 400},
		{"POST", "/api/sessions/{id}/runs/{run_id}/promote", sess + "/runs/run_missing/promote", nil, 404},
		{"POST", "/api/sessions/{id}/runs/{run_id}/promote", sess + "/runs/" + done + "/promote", nil, 409},
		{"POST", "/api/sessions/{id}/runs/{run_id}/promote", queued + "/promote", `{"mode":"rollback"}`, 200},
	} {
		r := s.do(c.method, c.path, "tok", c.body)
		if r.status != c.want {
			t.Fatalf("%s %s %v: %d, want %d: %s", c.method, c.path, c.body, r.status, c.want, r.body)
		}
		api.check(t, c.method, c.pattern, r)
		if c.want == 409 {
			e := r.json(t)["error"].(map[string]any)
			if e["code"] != "conflict" || e["run_id"] == nil || e["status"] == nil {
				t.Fatalf("the conflict of a run no longer queued: %s", r.body)
			}
		}
	}
	s.completion("tok", sid, queuedID)

	// session_busy carries run_id in the documented shape.
	s.results("tok", sid, ev("user.interrupt", map[string]any{"mode": "cancel"}))
	other := s.createSession("tok")
	s.send("tok", other, "long B", nil)
	busy := s.post("tok", other, ev("user.message", map[string]any{"text": "again"}))
	if busy.status != 409 {
		t.Fatalf("busy: %d %s", busy.status, busy.body)
	}
	api.check(t, "POST", "/api/sessions/{id}/events", busy)
	// A rollback replaces the busy session's run; its run_completed says
	// rolled_back, in the documented payload shape (checked below).
	instead := s.post("tok", other, ev("user.message", map[string]any{"text": "instead", "when_busy": "rollback"}))
	if instead.status != 200 {
		t.Fatalf("rollback: %d %s", instead.status, instead.body)
	}
	api.check(t, "POST", "/api/sessions/{id}/events", instead)
	s.completion("tok", other, instead.json(t)["results"].([]any)[0].(map[string]any)["run_id"].(string))

	// The stream answers text/event-stream.
	resp, cancel := s.openStream("tok", sid, "", "")
	resp.Body.Close()
	cancel()
	api.check(t, "GET", "/api/sessions/{id}/events/stream", reply{status: resp.StatusCode, header: resp.Header})
	bad, cancel := s.openStream("tok", sid, "after=x", "")
	b, _ := io.ReadAll(bad.Body)
	bad.Body.Close()
	cancel()
	api.check(t, "GET", "/api/sessions/{id}/events/stream", reply{status: bad.StatusCode, header: bad.Header, body: b})

	// Every event the logs hold matches the Event schema.
	evSchema := api.schema(t, "Event")
	for _, e := range append(s.events("tok", sid), s.events("tok", other)...) {
		j, _ := e.MarshalJSON()
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err := evSchema.Validate(v); err != nil {
			t.Fatalf("event %s does not match the Event schema: %v", j, err)
		}
	}
	if _, err := find(s.events("tok", other), func(e rein.Event) bool {
		return e.Type == rein.EventRunCompleted && payloadOf(t, e)["rolled_back"] == true
	}); err != nil {
		t.Fatal("no rolled-back run_completed in the log")
	}
	// The payload schemas bite: a resume's events as documented pass, and
	// payloads off the documented shape fail.
	for _, c := range []struct {
		typ     rein.EventType
		payload string
		ok      bool
	}{
		{rein.EventStepRestarted, `{"run_id":"run_1","step":2,"attempt":2}`, true},
		{rein.EventToolResult, `{"run_id":"run_1","tool_use_id":"call_1","output":"in doubt: x","is_error":true,"in_doubt":true}`, true},
		{rein.EventStepRestarted, `{"run_id":"run_1","step":2,"attempt":1}`, false},
		{rein.EventStepRestarted, `{"run_id":"run_1","step":2}`, false},
		{rein.EventToolResult, `{"run_id":"run_1","tool_use_id":"call_1","output":"x","is_error":false,"in_doubt":false}`, false},
		{rein.EventRunCompleted, `{"run_id":"run_1","status":"CANCELLED","reason":"cancelled","rolled_back":false}`, false},
		{rein.EventRunCompleted, `{"run_id":"run_1","status":"RUNNING","reason":"stop"}`, false},
		{rein.EventQueueChanged, `{"queued":["run_1","run_2"]}`, true},
		{rein.EventQueueChanged, `{"queued":null}`, false},
		{rein.EventRunEdited, `{"run_id":"run_1","text":"new"}`, true},
		{rein.EventRunEdited, `{"run_id":"run_1"}`, false},
		{rein.EventRunCompleted, `{"run_id":"run_1","status":"COMPLETED","reason":"budget"}`, true},
		{rein.EventModelRequest, `{"run_id":"run_1","step":1,"model":"m","usage":{"input_tokens":3,"output_tokens":4,"cost_usd":null},"duration_ms":12,"outcome":"ok"}`, true},
		{rein.EventModelRequest, `{"run_id":"run_1","step":1,"model":"m","usage":{"input_tokens":3,"output_tokens":4,"cost_usd":0.01},"duration_ms":12,"outcome":"stopped"}`, true},
		{rein.EventModelRequest, `{"run_id":"run_1","step":1,"model":"m","usage":{"input_tokens":3,"output_tokens":4},"duration_ms":12,"outcome":"ok"}`, false},
		{rein.EventModelRequest, `{"run_id":"run_1","step":1,"model":"m","usage":{"input_tokens":3,"output_tokens":4,"cost_usd":null},"duration_ms":12,"outcome":"done"}`, false},
	} {
		e := rein.Event{Seq: 1, ID: "evt_1", SessionID: "ses_1", RunID: "run_1", Type: c.typ, Payload: json.RawMessage(c.payload), CreatedAt: time.Now()}
		j, _ := e.MarshalJSON()
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err := evSchema.Validate(v); (err == nil) != c.ok {
			t.Errorf("%s %s: valid=%v, want %v (%v)", c.typ, c.payload, err == nil, c.ok, err)
		}
	}
}

// TestOpenAPIRequestSchema: the documented request schema agrees with the
// server's validator on typical batches, valid and invalid.
func TestOpenAPIRequestSchema(t *testing.T) {
	t.Parallel()
	api := loadOpenAPI(t)
	batch := api.schema(t, "EventBatch")
	s := newStack(t, options{})
	sid := s.createSession("")
	for _, body := range []string{
		`{"events":[{"type":"user.supplement","payload":{"text":"x","id":"a"}}]}`,
		`{"events":[{"type":"user.interrupt","payload":{"run_id":"run_x","mode":"interrupt","message":"m"}}]}`,
		`{"events":[{"type":"user.interrupt"}]}`,
		`{"events":[{"type":"system.message","payload":{"text":""}}]}`,
		`{"events":[{"type":"user.interrupt","payload":{"run_id":""}}]}`,
		`{"events":[{"type":"user.interrupt","payload":{"run_id":null}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":""}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"x","timeout_s":0}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"x","when_busy":"never"}}]}`,
		`{"events":[{"type":"user.message","payload":{"text":"x","when_busy":"rollback"}}]}`,
		`{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c","allow":"yes"}}]}`,
		`{"events":[{"type":"agent.message","payload":{}}]}`,
		`{"events":[]}`,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		docOK := batch.Validate(v) == nil
		r := s.do("POST", "/api/sessions/"+sid+"/events", "", body)
		serverOK := r.status != http.StatusBadRequest
		if docOK != serverOK {
			t.Errorf("%s: openapi.yaml says valid=%v, the server answered %d %s", body, docOK, r.status, r.body)
		}
	}
}
