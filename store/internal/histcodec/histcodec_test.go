package histcodec

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/reinhq/rein"
)

// The bytes are the stored format: both backends have rows in it, so a
// change here is a schema change.
func TestEncodeIsTheStoredFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		m    rein.Message
		want string
	}{
		{"user", rein.Message{Role: rein.RoleUser, Text: "hi ✓", RunID: "run_1"},
			`{"role":"user","text":"hi ✓","run_id":"run_1"}`},
		{"every field", rein.Message{Role: rein.RoleUser, Text: "t", ToolCallID: "c", ToolName: "n", IsError: true, Partial: true,
			Hint: &rein.Hint{ID: "sup_1", Source: "user"}, RunID: "r", Step: 2},
			`{"role":"user","text":"t","tool_call_id":"c","tool_name":"n","is_error":true,"partial":true,"hint":{"id":"sup_1","source":"user"},"run_id":"r","step":2}`},
		{"tool calls", rein.Message{Role: rein.RoleAssistant, ToolCalls: []rein.ToolCall{
			{ID: "c1", Name: "search", Input: json.RawMessage(`{"q": "go"}`)},
			{ID: "c2", Name: "none"},
			{ID: "c3", Name: "broken", Input: json.RawMessage(`{"q`)},
			{ID: "c4", Name: "empty", Input: json.RawMessage{}},
		}},
			`{"role":"assistant","tool_calls":[{"id":"c1","name":"search","input":{"q":"go"}},{"id":"c2","name":"none"},` +
				`{"id":"c3","name":"broken","invalid":true,"raw_input":"eyJx"},{"id":"c4","name":"empty","invalid":true}]}`},
		{"no tool calls", rein.Message{Role: rein.RoleAssistant, ToolCalls: []rein.ToolCall{}}, `{"role":"assistant"}`},
	} {
		b, err := Encode(c.m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(b) != c.want {
			t.Fatalf("%s: Encode = %s\nwant            %s", c.name, b, c.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	in := rein.Message{Role: rein.RoleAssistant, Text: "x", Hint: &rein.Hint{ID: "h", Source: "parent"}, RunID: "r", Step: 1,
		ToolCalls: []rein.ToolCall{
			{ID: "c1", Name: "a", Input: json.RawMessage(`{"q":"go"}`)},
			{ID: "c2", Name: "b"},
			{ID: "c3", Name: "c", Input: json.RawMessage(`not json`)},
			{ID: "c4", Name: "d", Input: json.RawMessage{}},
		}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("Decode(Encode(m)) = %+v\nwant               %+v", out, in)
	}
}

// Rows the PostgreSQL backend wrote before this package kept invalid
// input in raw_input without the invalid flag.
func TestDecodesEarlierPostgresForm(t *testing.T) {
	m, err := Decode([]byte(`{"role":"assistant","tool_calls":[{"id":"c1","name":"broken","raw_input":"eyJx"},{"id":"c2","name":"ok","input":{"a":1}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ToolCalls) != 2 || string(m.ToolCalls[0].Input) != `{"q` || string(m.ToolCalls[1].Input) != `{"a":1}` {
		t.Fatalf("decoded %+v", m.ToolCalls)
	}
}

func TestDecodeRefusesNonJSON(t *testing.T) {
	if _, err := Decode([]byte(`{"role":`)); err == nil {
		t.Fatal("Decode of broken JSON succeeded")
	}
}
