package server

import (
	"bytes"
	"encoding/json"
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
