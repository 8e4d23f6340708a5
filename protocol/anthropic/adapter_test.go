package anthropic_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store"
)

// call sends a raw request to srv and returns the status, headers and
// decoded JSON body.
func call(t *testing.T, srv *reintest.Server, method, path string, header map[string]string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, out
}

func alice(extra ...string) map[string]string {
	h := map[string]string{"Authorization": "Bearer tok-alice"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// errorOf checks an Anthropic error envelope and returns its error object.
func errorOf(t *testing.T, status, want int, body map[string]any) map[string]any {
	t.Helper()
	e, _ := body["error"].(map[string]any)
	if status != want || body["type"] != "error" || e == nil || e["message"] == "" {
		t.Fatalf("answer %d %v, want %d in the Anthropic error envelope", status, body, want)
	}
	return e
}

func newSession(t *testing.T, srv *reintest.Server) string {
	t.Helper()
	status, _, body := call(t, srv, "POST", "/v1/sessions", alice(), `{"agent":"default","environment_id":""}`)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	return body["id"].(string)
}

// TestAuthentication: the token comes as a bearer token or as x-api-key;
// none, or a wrong one, is the protocol's authentication_error.
func TestAuthentication(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	if status, _, body := call(t, srv, "GET", "/v1/sessions/"+id, map[string]string{"x-api-key": "tok-alice"}, ""); status != 200 || body["id"] != id {
		t.Fatalf("x-api-key: %d %v", status, body)
	}
	for _, h := range []map[string]string{nil, {"x-api-key": "nope"}, {"Authorization": "Bearer nope"}} {
		status, _, body := call(t, srv, "GET", "/v1/sessions/"+id, h, "")
		if e := errorOf(t, status, 401, body); e["type"] != "authentication_error" {
			t.Fatalf("%v: %v", h, body)
		}
	}
	// Another owner's session is not found, as a missing one is.
	status, _, body := call(t, srv, "GET", "/v1/sessions/"+id, map[string]string{"x-api-key": "tok-bob"}, "")
	if e := errorOf(t, status, 404, body); e["type"] != "not_found_error" {
		t.Fatalf("bob: %v", body)
	}
}

// TestBadInput: a malformed request is a 400 invalid_request_error naming
// the field, and nothing of it is applied (the log is unchanged).
func TestBadInput(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	msg := `{"type":"user.message","content":[{"type":"text","text":"hi"}]}`
	cases := map[string]struct{ body, param string }{
		"not JSON":        {`{"events":`, ""},
		"no events":       {`{}`, "events"},
		"empty events":    {`{"events":[]}`, "events"},
		"no type":         {`{"events":[{}]}`, "events[0].type"},
		"unknown type":    {`{"events":[` + msg + `,{"type":"user.define_outcome"}]}`, "events[1].type"},
		"image block":     {`{"events":[{"type":"user.message","content":[{"type":"image"}]}]}`, "events[0].content[0].type"},
		"no content":      {`{"events":[{"type":"user.message"}]}`, "events[0].content"},
		"bad when_busy":   {`{"events":[` + msg[:len(msg)-1] + `,"when_busy":"later"}]}`, "events[0].when_busy"},
		"empty run_id":    {`{"events":[` + msg + `,{"type":"user.interrupt","run_id":""}]}`, "events[1].run_id"},
		"bad mode":        {`{"events":[{"type":"user.interrupt","mode":"now"}]}`, "events[0].mode"},
		"empty client_id": {`{"events":[{"type":"user.interrupt","client_id":""}]}`, "events[0].client_id"},
		"run_id and client_id": {`{"events":[{"type":"user.interrupt","run_id":"run_1","client_id":"c1"}]}`,
			"events[0].client_id"},
		"no result": {`{"events":[{"type":"user.tool_confirmation","tool_use_id":"x"}]}`, "events[0].result"},
		"allow with deny_message": {`{"events":[{"type":"user.tool_confirmation","tool_use_id":"x","result":"allow","deny_message":"no"}]}`,
			"events[0].deny_message"},
		"empty note": {`{"events":[{"type":"user.supplement","text":""}]}`, "events[0].text"},
	}
	for name, c := range cases {
		status, _, body := call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(), c.body)
		e := errorOf(t, status, 400, body)
		if e["type"] != "invalid_request_error" || (c.param != "" && e["param"] != c.param) {
			t.Errorf("%s: %v, want param %q", name, body, c.param)
		}
	}
	evs, _, err := srv.Service.ReadEvents(context.Background(), rein.SessionKey{Owner: "alice", ID: id}, 0, 10)
	if err != nil || len(evs) != 0 {
		t.Fatalf("a refused batch logged %v (%v)", evs, err)
	}
	for name, c := range map[string]struct{ body, param string }{
		"no agent":            {`{"environment_id":""}`, "agent"},
		"metadata not string": {`{"agent":"default","metadata":{"a":1}}`, "metadata"},
		"budget":              {`{"agent":"default","budget":{"tokens":5}}`, "budget"},
		"bad initial event":   {`{"agent":"default","initial_events":[{"type":"nope"}]}`, "initial_events[0].type"},
	} {
		status, _, body := call(t, srv, "POST", "/v1/sessions", alice(), c.body)
		if e := errorOf(t, status, 400, body); e["param"] != c.param {
			t.Errorf("create, %s: %v", name, body)
		}
	}
	status, _, body := call(t, srv, "POST", "/v1/sessions", alice(), `{"agent":{"type":"agent","id":"nobody"}}`)
	if e := errorOf(t, status, 404, body); e["type"] != "not_found_error" || e["param"] != "agent" {
		t.Fatalf("unknown agent: %v", body)
	}
	list, err := srv.Service.ListSessions(context.Background(), "alice")
	if err != nil || len(list) != 1 {
		t.Fatalf("refused creates made sessions: %d (%v)", len(list), err)
	}
}

// TestStopByClientIDFirst: a user.interrupt naming a client_id whose
// message has not arrived is remembered; the message sent with that
// client_id afterwards starts a run that is already ended (CANCELLED,
// never started), and the stop's event names no run.
func TestStopByClientIDFirst(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	status, _, body := call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(),
		`{"events":[{"type":"user.interrupt","client_id":"msg-1","mode":"cancel"}]}`)
	if status != 200 {
		t.Fatalf("stop by client_id: %d %v", status, body)
	}
	status, _, body = call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(),
		`{"events":[{"type":"user.message","client_id":"msg-1","content":[{"type":"text","text":"never run"}]}]}`)
	if status != 200 {
		t.Fatalf("the message: %d %v", status, body)
	}
	key := rein.SessionKey{Owner: "alice", ID: id}
	evs, _, err := srv.Service.ReadEvents(context.Background(), key, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []rein.EventType
	for _, e := range evs {
		types = append(types, e.Type)
	}
	want := []rein.EventType{rein.EventUserInterrupt, rein.EventUserMessage, rein.EventRunCompleted}
	if !slices.Equal(types, want) {
		t.Fatalf("log %v, want %v", types, want)
	}
	var stop rein.UserInterruptPayload
	if err := evs[0].DecodePayload(&stop); err != nil || !stop.Accepted || stop.RunID != nil {
		t.Fatalf("user.interrupt %s: want accepted with no run yet", evs[0].Payload)
	}
	var end rein.RunCompletedPayload
	if err := evs[2].DecodePayload(&end); err != nil || end.Status != rein.StatusCancelled || end.RunID != evs[1].RunID {
		t.Fatalf("session.run_completed %s: want the message's run CANCELLED", evs[2].Payload)
	}
}

// TestBusyIsNotRetried: a message refused because the session is busy
// (when_busy reject) is a 409 the SDKs must not retry.
func TestBusyIsNotRetried(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	long := `{"events":[{"type":"user.message","content":[{"type":"text","text":"long wait"}]}]}`
	if status, _, body := call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(), long); status != 200 {
		t.Fatalf("send: %d %v", status, body)
	}
	status, h, body := call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(),
		`{"events":[{"type":"user.message","content":[{"type":"text","text":"now"}],"when_busy":"reject"}]}`)
	e := errorOf(t, status, 409, body)
	if h.Get("x-should-retry") != "false" || e["run_id"] == nil {
		t.Fatalf("busy: %v %v", h, body)
	}
	// The current run stops by the protocol's interrupt.
	status, _, body = call(t, srv, "POST", "/v1/sessions/"+id+"/events", alice(), `{"events":[{"type":"user.interrupt"}]}`)
	if data := body["data"].([]any); status != 200 || data[0].(map[string]any)["accepted"] != true {
		t.Fatalf("interrupt: %d %v", status, body)
	}
	if out, err := srv.Service.WaitRun(context.Background(), rein.SessionKey{Owner: "alice", ID: id}, e["run_id"].(string)); err != nil || out.Reason != rein.ReasonInterrupted {
		t.Fatalf("the interrupted run: %+v %v", out, err)
	}
}

// TestInitialEvents: sessions.create's initial_events are sent as
// events.send sends them, once the session exists.
func TestInitialEvents(t *testing.T) {
	srv := newServer(t)
	status, _, body := call(t, srv, "POST", "/v1/sessions", alice(),
		`{"agent":"default","metadata":{"k":"v"},"initial_events":[{"type":"user.message","content":[{"type":"text","text":"first"}]}]}`)
	if status != 200 || body["metadata"].(map[string]any)["k"] != "v" {
		t.Fatalf("create: %d %v", status, body)
	}
	key := rein.SessionKey{Owner: "alice", ID: body["id"].(string)}
	runs, err := srv.Service.ListRuns(context.Background(), key)
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	if out, err := srv.Service.WaitRun(context.Background(), key, runs[0].ID); err != nil || out.Status != rein.StatusCompleted {
		t.Fatalf("the initial message's run: %+v %v", out, err)
	}
}

// TestRestartedStepShownOnce: a step cut by the loss of its instance and
// made again (agent.step_restarted) closes the cut request's span in error
// — the client drops its preview — and its text is shown once, as the
// redone step says it.
func TestRestartedStepShownOnce(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	key := rein.SessionKey{Owner: "alice", ID: id}
	run := "run_restarted"
	logged := []rein.Event{
		rein.NewEvent(rein.EventUserMessage, run, rein.UserMessagePayload{Text: "hi", RunID: run}),
		rein.NewEvent(rein.EventRunStarted, run, rein.RunStartedPayload{RunID: run}),
		rein.NewEvent(rein.EventMessageDelta, run, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: "Hel"}),
		rein.NewEvent(rein.EventStepRestarted, run, rein.StepRestartedPayload{RunID: run, Step: 1, Attempt: 2}),
		rein.NewEvent(rein.EventMessageDelta, run, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: "Hello"}),
		rein.NewEvent(rein.EventMessageDelta, run, rein.MessageDeltaPayload{RunID: run, Step: 1, Text: " there"}),
		rein.NewEvent(rein.EventMessage, run, rein.MessagePayload{RunID: run, Text: "Hello there", Reason: rein.ReasonStop}),
		rein.NewEvent(rein.EventRunCompleted, run, rein.RunCompletedPayload{RunID: run, Status: rein.StatusCompleted, Reason: rein.ReasonStop}),
	}
	// Written straight to the store: the service logs a run's events only
	// as the run makes them.
	if _, err := srv.Store.AppendEvents(context.Background(), key, store.Fence{}, logged); err != nil {
		t.Fatal(err)
	}
	// The stream with previews, from the start: what a client that drops
	// the previews a span closed without their event shows.
	resp := openStream(t, srv, "/v1/sessions/"+id+"/events/stream?after=0&event_deltas[]=agent.message")
	defer resp.Body.Close()
	previews := map[string]string{}
	var shown []string
	cutSpans := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			EventID string `json:"event_id"`
			IsError bool   `json:"is_error"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Delta struct {
				Content struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"delta"`
			StartID string `json:"model_request_start_id"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "event_delta":
			previews[ev.EventID] += ev.Delta.Content.Text
		case "span.model_request_end":
			if ev.IsError {
				cutSpans++
			}
		case "agent.message":
			shown = append(shown, ev.Content[0].Text)
			if previews[ev.ID] != "Hello there" {
				t.Fatalf("the reply %s replaces the preview %q", ev.ID, previews[ev.ID])
			}
		}
		if ev.Type == "session.status_idle" {
			break
		}
	}
	if len(shown) != 1 || shown[0] != "Hello there" || cutSpans != 1 || len(previews) != 2 {
		t.Fatalf("shown %q, cut spans %d, previews %q", shown, cutSpans, previews)
	}
}

func openStream(t *testing.T, srv *reintest.Server, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok-alice")
	resp, err := srv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	return resp
}

// TestEventPagesDescending: events.list pages newest first with order=desc,
// the same events as ascending pages, reversed.
func TestEventPagesDescending(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	key := rein.SessionKey{Owner: "alice", ID: id}
	for _, text := range []string{"one", "two"} {
		res, err := srv.Service.SendMessage(context.Background(), key, sessions.MessageRequest{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := res.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	read := func(order string) []string {
		var ids []string
		page := ""
		for {
			_, _, body := call(t, srv, "GET", "/v1/sessions/"+id+"/events?limit=2&order="+order+page, alice(), "")
			for _, e := range body["data"].([]any) {
				ids = append(ids, e.(map[string]any)["id"].(string))
			}
			next, _ := body["next_page"].(string)
			if next == "" {
				return ids
			}
			page = "&page=" + next
		}
	}
	asc, desc := read("asc"), read("desc")
	if len(asc) < 10 || len(asc) != len(desc) {
		t.Fatalf("asc %d events, desc %d", len(asc), len(desc))
	}
	for i := range asc {
		if asc[i] != desc[len(desc)-1-i] {
			t.Fatalf("asc %q\ndesc %q", asc, desc)
		}
	}
}

// TestStreamLastEventIDAndTypes: a stream resumes after its Last-Event-ID
// header (the seq of its id: lines), and events.list keeps only the types
// asked for.
func TestStreamLastEventIDAndTypes(t *testing.T) {
	srv := newServer(t)
	id := newSession(t, srv)
	key := rein.SessionKey{Owner: "alice", ID: id}
	res, err := srv.Service.SendMessage(context.Background(), key, sessions.MessageRequest{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := res.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, body := call(t, srv, "GET", "/v1/sessions/"+id+"/events?types[]=agent.message&types[]=session.status_idle", alice(), "")
	data := body["data"].([]any)
	if len(data) != 2 || data[0].(map[string]any)["type"] != "agent.message" || data[1].(map[string]any)["type"] != "session.status_idle" {
		t.Fatalf("types filter: %v", body)
	}
	msg := data[0].(map[string]any)
	// Resumed after the reply's seq: what the run's end renders (the
	// span's end shares the reply's seq, so it is not repeated).
	req, err := http.NewRequest("GET", srv.URL+"/v1/sessions/"+id+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok-alice")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(int64(msg["seq"].(float64)), 10))
	resp, err := srv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			types = append(types, typ)
			if typ == "session.status_idle" {
				break
			}
		}
	}
	if strings.Join(types, " ") != "session.status_idle" {
		t.Fatalf("resumed after the reply: %q", types)
	}
	status, _, body := call(t, srv, "GET", "/v1/sessions/"+id+"/events/stream", alice("Last-Event-ID", "x"), "")
	if e := errorOf(t, status, 400, body); e["param"] != "Last-Event-ID" {
		t.Fatalf("bad Last-Event-ID: %v", body)
	}
}

// TestSessionPages: sessions.list pages the owner's root sessions newest
// first (oldest first with order=asc) by position, archived ones left out
// unless asked for, every session once.
func TestSessionPages(t *testing.T) {
	srv := newServer(t)
	var made []string
	for range 7 {
		made = append(made, newSession(t, srv))
	}
	if status, _, body := call(t, srv, "POST", "/v1/sessions/"+made[3]+"/archive", alice(), ""); status != 200 {
		t.Fatalf("archive: %d %v", status, body)
	}
	read := func(query string) []string {
		var ids []string
		page := ""
		for range 20 {
			status, _, body := call(t, srv, "GET", "/v1/sessions?limit=2"+query+page, alice(), "")
			if status != 200 {
				t.Fatalf("list: %d %v", status, body)
			}
			for _, s := range body["data"].([]any) {
				ids = append(ids, s.(map[string]any)["id"].(string))
			}
			next, _ := body["next_page"].(string)
			if next == "" {
				return ids
			}
			page = "&page=" + next
		}
		t.Fatal("paging does not end")
		return nil
	}
	newest := read("")
	want := slices.Clone(made)
	slices.Reverse(want)
	want = slices.DeleteFunc(want, func(id string) bool { return id == made[3] })
	if !slices.Equal(newest, want) {
		t.Fatalf("newest first: %q, want %q", newest, want)
	}
	if all := read("&order=asc&include_archived=true"); !slices.Equal(all, made) {
		t.Fatalf("oldest first with archived: %q, want %q", all, made)
	}
	status, _, body := call(t, srv, "GET", "/v1/sessions?page=garbage", alice(), "")
	if e := errorOf(t, status, 400, body); e["param"] != "page" {
		t.Fatalf("a bad page: %v", body)
	}
}
