package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
)

// A frame is id, event, one data line of the event's JSON, a blank line —
// whichever way the JSON was encoded — and frames append one after another.
func TestWriteFrame(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 5000, time.UTC)
	evs := []rein.Event{
		{Seq: 1, ID: "evt_1", SessionID: "ses_1", RunID: "run_1", Type: rein.EventMessageDelta, Payload: json.RawMessage(`{"text":"a b"}`), CreatedAt: at},
		{Seq: 2, ID: "evt_2", SessionID: "ses_1", Type: rein.EventSystemMessage, Payload: json.RawMessage(`{ "text" : "<b>\n</b>" }`), CreatedAt: at},
		{Seq: 3, ID: "evt_3", SessionID: "ses_1", Type: rein.EventSystemMessage, CreatedAt: at},
	}
	var buf, want bytes.Buffer
	buf.WriteString("earlier")
	want.WriteString("earlier")
	for _, e := range evs {
		if err := writeFrame(&buf, e); err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		want.WriteString("id: " + string(rune('0'+e.Seq)) + "\nevent: " + string(e.Type) + "\ndata: " + string(data) + "\n\n")
	}
	if buf.String() != want.String() {
		t.Fatalf("frames:\n%q\nwant\n%q", buf.String(), want.String())
	}
	bad := rein.Event{Seq: 4, Type: rein.EventSystemMessage, Payload: json.RawMessage(`{"text":`)}
	n := buf.Len()
	if err := writeFrame(&buf, bad); err == nil || buf.Len() != n {
		t.Fatalf("an event that does not encode: err %v, %d bytes written", err, buf.Len()-n)
	}
}

// A page of the log is written byte for byte as writeJSON writes the map
// it stands for, whichever way each event's JSON is made.
func TestEventPageIsWriteJSONs(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 5000, time.FixedZone("X", 7200))
	check := func(evs []rein.Event, last int64) {
		t.Helper()
		got, want := httptest.NewRecorder(), httptest.NewRecorder()
		writeEventPage(got, evs, last)
		page := evs
		if page == nil {
			page = []rein.Event{}
		}
		writeJSON(want, http.StatusOK, map[string]any{"events": page, "last_seq": last})
		if got.Code != want.Code || got.Body.String() != want.Body.String() ||
			got.Header().Get("Content-Type") != want.Header().Get("Content-Type") ||
			got.Header().Get("X-Content-Type-Options") != want.Header().Get("X-Content-Type-Options") {
			t.Fatalf("page %d %q %v\nwant %d %q %v", got.Code, got.Body, got.Header(), want.Code, want.Body, want.Header())
		}
	}
	check(nil, 0)
	check([]rein.Event{}, 7)
	check([]rein.Event{
		{Seq: 1, ID: "evt_1", SessionID: "ses_1", RunID: "run_1", Type: rein.EventMessageDelta, Payload: json.RawMessage(`{"text":"a b"}`), CreatedAt: at},
		{Seq: 2, ID: "evt_<2>", SessionID: "ses_1", Type: rein.EventSystemMessage, Payload: json.RawMessage(`{ "text" : "<b>\n</b> & \u2028" }`), CreatedAt: at},
		{Seq: 3, ID: "evt_3", SessionID: "ses_1", Type: rein.EventSystemMessage, CreatedAt: at},
		{Seq: 4, ID: "evt_4", SessionID: "ses_é", RunID: "run_\"", Type: "x", Payload: json.RawMessage(`[1,2]`), CreatedAt: at},
	}, 9)
}

// A payload nested to encoding/json's depth limit is served, as the event
// stream serves it: encoding/json's check of the event it encoded (one
// level more) refused it with a 500.
func TestEventPageServesADeepPayload(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	e := rein.Event{Seq: 1, ID: "evt_1", SessionID: "ses_1", Type: rein.EventSystemMessage, Payload: json.RawMessage(deep)}
	rec := httptest.NewRecorder()
	writeEventPage(rec, []rein.Event{e}, 1)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"payload":`+deep+`,`) {
		t.Fatalf("deep payload: %d, %.80s…", rec.Code, rec.Body)
	}
	old := httptest.NewRecorder()
	writeJSON(old, http.StatusOK, map[string]any{"events": []rein.Event{e}, "last_seq": 1})
	if old.Code != http.StatusInternalServerError {
		t.Fatalf("encoding/json now answers %d for the deep page: the difference documented at writeEventPage is gone", old.Code)
	}
}

func FuzzEventPage(f *testing.F) {
	f.Add("evt_1", "run_1", `{"text":"hi"}`, int64(3))
	f.Add("evt_<", "", ` {"a": "<&>\u2029"} `, int64(0))
	f.Fuzz(func(t *testing.T, id, run, payload string, last int64) {
		if strings.Count(payload, "[")+strings.Count(payload, "{") >= 10000 {
			// At encoding/json's depth limit the old encoding refused the
			// page; this one serves it (by design).
			t.Skip()
		}
		evs := []rein.Event{{Seq: 1, ID: id, SessionID: "ses_f", RunID: run, Type: rein.EventSystemMessage, Payload: json.RawMessage(payload), CreatedAt: time.Unix(0, last)},
			{Seq: 2, ID: "evt_2", SessionID: "ses_f", Type: rein.EventMessage, Payload: json.RawMessage(`{}`)}}
		got, want := httptest.NewRecorder(), httptest.NewRecorder()
		writeEventPage(got, evs, last)
		writeJSON(want, http.StatusOK, map[string]any{"events": evs, "last_seq": last})
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Fatalf("page %d %q\nwant %d %q", got.Code, got.Body, want.Code, want.Body)
		}
	})
}
