package rein

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// referenceJSON is the event JSON as encoding/json writes it: what
// AppendJSON must write, byte for byte.
func referenceJSON(e Event) ([]byte, error) {
	p := e.Payload
	if len(bytes.TrimSpace(p)) == 0 {
		p = json.RawMessage("{}")
	}
	j := eventJSON{Seq: e.Seq, ID: e.ID, SessionID: e.SessionID, Type: e.Type, Payload: p, CreatedAt: FormatTime(e.CreatedAt)}
	if e.RunID != "" {
		j.RunID = &e.RunID
	}
	return json.Marshal(j)
}

func checkEventJSON(t *testing.T, e Event) {
	t.Helper()
	want, werr := referenceJSON(e)
	got, gerr := e.AppendJSON([]byte("prefix"))
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%+v: AppendJSON error %v, encoding/json's %v", e, gerr, werr)
	}
	if werr != nil {
		return
	}
	if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
		t.Fatalf("%+v:\nAppendJSON    %s\nencoding/json prefix%s", e, got, want)
	}
}

func TestEventJSONIsEncodingJSONs(t *testing.T) {
	at := time.Date(2026, 12, 1, 19, 0, 0, 123456000, time.FixedZone("X", 3600))
	base := Event{Seq: 42, ID: "evt_01", SessionID: "ses_01", RunID: "run_01", Type: EventMessageDelta, CreatedAt: at}
	for _, c := range []struct {
		name string
		edit func(*Event)
	}{
		{"plain", func(e *Event) { e.Payload = json.RawMessage(`{"run_id":"run_01","step":1,"text":"token "}`) }},
		{"no run", func(e *Event) { e.RunID, e.Payload = "", json.RawMessage(`{"text":"x"}`) }},
		{"empty payload", func(e *Event) { e.Payload = nil }},
		{"blank payload", func(e *Event) { e.Payload = json.RawMessage(" \n") }},
		{"spaced payload", func(e *Event) { e.Payload = json.RawMessage(`{ "a" : [1, 2] }`) }},
		{"html in payload", func(e *Event) { e.Payload = json.RawMessage(`{"t":"<b>&</b>"}`) }},
		{"line separator", func(e *Event) { e.Payload = json.RawMessage("{\"t\":\"a\u2028b\"}") }},
		{"escaped quote", func(e *Event) { e.Payload = json.RawMessage(`{"t":"say \"hi\" \\ ok","u":"\n"}`) }},
		{"unicode", func(e *Event) { e.Payload = json.RawMessage(`{"t":"déjà vu ✓"}`) }},
		{"invalid payload", func(e *Event) { e.Payload = json.RawMessage(`{"t":`) }},
		{"odd id", func(e *Event) { e.ID = `evt_"<x>"` }},
		{"non-ascii session", func(e *Event) { e.SessionID = "ses_é" }},
		{"zero time", func(e *Event) { e.CreatedAt = time.Time{}; e.Payload = json.RawMessage(`{}`) }},
		{"negative seq", func(e *Event) { e.Seq = -1; e.Payload = json.RawMessage(`{}`) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := base
			c.edit(&e)
			checkEventJSON(t, e)
		})
	}
}

func FuzzEventJSON(f *testing.F) {
	f.Add(int64(1), "evt_1", "ses_1", "run_1", "agent.message", `{"text":"hi"}`, int64(1700000000123456789))
	f.Add(int64(7), "", "", "", "", ``, int64(0))
	f.Add(int64(3), "evt_<", "ses_&", "run_\"", "x\ny", `{ "a":"<\u2028>" }`, int64(-5))
	f.Add(int64(9), "evt_9", "ses_9", "", "t", "[1,\"\\\"\",{\"k\":null}]", int64(99))
	f.Fuzz(func(t *testing.T, seq int64, id, sid, rid, typ, payload string, nanos int64) {
		checkEventJSON(t, Event{Seq: seq, ID: id, SessionID: sid, RunID: rid, Type: EventType(typ),
			Payload: json.RawMessage(payload), CreatedAt: time.Unix(0, nanos)})
	})
}

func BenchmarkEventJSON(b *testing.B) {
	e := Event{Seq: 42, ID: "evt_01KB0000000000000000000000", SessionID: "ses_01KB0000000000000000000000", RunID: "run_01KB0000000000000000000000",
		Type: EventMessageDelta, Payload: json.RawMessage(`{"run_id":"run_01KB0000000000000000000000","step":1,"text":"token "}`), CreatedAt: time.Now()}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = e.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = referenceJSON(e)
		}
	})
}

// checkPayload: NewEvent writes p as encoding/json does, byte for byte.
func checkPayload(t *testing.T, p any) {
	t.Helper()
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := appendPayload(nil, p); !ok {
		t.Fatalf("%T: no direct encoding", p)
	}
	if got := NewEvent(EventMessage, "run_1", p).Payload; !bytes.Equal(got, want) {
		t.Fatalf("%#v:\nNewEvent      %s\nencoding/json %s", p, got, want)
	}
}

func TestPayloadJSONIsEncodingJSONs(t *testing.T) {
	for _, s := range []string{"", "plain", "<&> \"q\" \\ \n\t\x01", "é \u2028 \xff"} {
		checkPayload(t, UserMessagePayload{Text: s, RunID: s})
		checkPayload(t, RunStartedPayload{RunID: s})
		checkPayload(t, MessageDeltaPayload{RunID: s, Step: -3, Text: s})
		checkPayload(t, MessagePayload{RunID: s, Text: s, Reason: Reason(s)})
		checkPayload(t, MessagePayload{RunID: s, Text: s, Reason: ReasonInterrupted, Usage: &Usage{InputTokens: -1, OutputTokens: 1 << 40}})
		for _, c := range []float64{0, 1e-7, 0.3, 12.5, 1e21} {
			checkPayload(t, MessagePayload{RunID: s, Text: s, Reason: ReasonBudget, Usage: &Usage{InputTokens: 3, OutputTokens: 4, CostUSD: &c}})
		}
		checkPayload(t, RunCompletedPayload{RunID: s, Status: RunStatus(s), Reason: Reason(s), Error: s, RolledBack: true})
		checkPayload(t, RunCompletedPayload{RunID: s, Status: StatusCompleted, Reason: ReasonStop})
	}
	// Anything else goes through encoding/json.
	if _, ok := appendPayload(nil, &RunStartedPayload{RunID: "r"}); ok {
		t.Fatal("a pointer payload was encoded directly")
	}
	if got := string(NewEvent(EventRunQueued, "r", RunQueuedPayload{RunID: "r", Position: 2}).Payload); got != `{"run_id":"r","position":2}` {
		t.Fatalf("RunQueuedPayload: %s", got)
	}
}

func FuzzPayloadJSON(f *testing.F) {
	f.Add("run_1", "hello", "stop", "", int64(3), false, true)
	f.Add("run_<", "a\u2028b\xff", "", "boom \"x\"", int64(-1), true, false)
	f.Fuzz(func(t *testing.T, run, text, reason, errText string, n int64, rolled, usage bool) {
		checkPayload(t, UserMessagePayload{Text: text, RunID: run})
		checkPayload(t, RunStartedPayload{RunID: run})
		checkPayload(t, MessageDeltaPayload{RunID: run, Step: int(n), Text: text})
		mp := MessagePayload{RunID: run, Text: text, Reason: Reason(reason)}
		if usage {
			mp.Usage = &Usage{InputTokens: n, OutputTokens: -n}
		}
		checkPayload(t, mp)
		checkPayload(t, RunCompletedPayload{RunID: run, Status: RunStatus(reason), Reason: Reason(reason), Error: errText, RolledBack: rolled})
	})
}

func BenchmarkNewEvent(b *testing.B) {
	p := MessageDeltaPayload{RunID: "run_01KB0000000000000000000000", Step: 1, Text: "token "}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = NewEvent(EventMessageDelta, p.RunID, p)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A payload written directly must carry every field encoding/json writes,
// a field added later included: each directly written type is filled
// field by field, whatever its fields are, with values no field leaves
// out (omitempty), and must come out as encoding/json writes it.
func TestDirectPayloadsWriteEveryField(t *testing.T) {
	for _, p := range []any{UserMessagePayload{}, RunStartedPayload{}, MessageDeltaPayload{}, MessagePayload{}, RunCompletedPayload{}} {
		v := reflect.New(reflect.TypeOf(p)).Elem()
		fill(t, v)
		checkPayload(t, v.Interface())
	}
}

// fill sets every field of v, recursively, to a value that is not its
// zero value.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x<\u2028" + v.Type().Name())
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Float64:
		v.SetFloat(0.00125)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	default:
		t.Fatalf("%s: a %s field; teach fill (and appendPayload) about it", v.Type(), v.Kind())
	}
}
