package rein_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
)

func call(id string) rein.ToolCall {
	return rein.ToolCall{ID: id, Name: "t", Input: json.RawMessage(`{}`)}
}

func TestValidateTranscript(t *testing.T) {
	u := rein.Message{Role: rein.RoleUser, Text: "hi"}
	a := func(ids ...string) rein.Message {
		m := rein.Message{Role: rein.RoleAssistant, Text: "x"}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, call(id))
		}
		return m
	}
	r := func(id string) rein.Message { return rein.Message{Role: rein.RoleTool, ToolCallID: id, Text: "ok"} }
	cases := []struct {
		name string
		msgs []rein.Message
		bad  string
	}{
		{"empty", nil, ""},
		{"plain", []rein.Message{u, a()}, ""},
		{"answered", []rein.Message{u, a("1", "2"), r("2"), r("1"), a()}, ""},
		{"ends open", []rein.Message{u, a("1")}, "unanswered"},
		{"user while open", []rein.Message{u, a("1"), u}, "unanswered"},
		{"unknown result", []rein.Message{u, a("1"), r("9")}, "unknown call"},
		{"double result", []rein.Message{u, a("1"), r("1"), r("1")}, "second tool result"},
		{"dup id", []rein.Message{u, a("1", "1")}, "duplicate"},
		{"partial with calls", []rein.Message{u, {Role: rein.RoleAssistant, Partial: true, ToolCalls: []rein.ToolCall{call("1")}}}, "partial"},
		{"bad role", []rein.Message{{Role: "system"}}, "unknown role"},
	}
	for _, c := range cases {
		err := rein.ValidateTranscript(c.msgs)
		if c.bad == "" && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.bad)
		}
	}
}

func TestRepairTranscript(t *testing.T) {
	msgs := []rein.Message{
		{Role: rein.RoleUser, Text: "hi"},
		{Role: rein.RoleAssistant, ToolCalls: []rein.ToolCall{call("1"), call("2")}},
		{Role: rein.RoleTool, ToolCallID: "1", Text: "ok"},
		{Role: rein.RoleTool, ToolCallID: "9", Text: "stray"},
		{Role: rein.RoleUser, Text: "again"},
	}
	got := rein.RepairTranscript(msgs)
	if err := rein.ValidateTranscript(got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[3].ToolCallID != "2" || !got[3].IsError || got[3].Text != rein.InterruptedToolOutput {
		t.Fatalf("%+v", got)
	}
	valid := []rein.Message{{Role: rein.RoleUser, Text: "hi"}}
	if out := rein.RepairTranscript(valid); &out[0] != &valid[0] {
		t.Fatal("a valid transcript was copied")
	}
}

func TestEventJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 123456000, time.UTC)
	e := rein.NewEvent(rein.EventUserInterrupt, "", rein.UserInterruptPayload{Mode: "cancel"})
	e.Seq, e.ID, e.SessionID, e.CreatedAt = 3, "evt_1", "ses_1", at
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":3,"id":"evt_1","session_id":"ses_1","run_id":null,"type":"user.interrupt","payload":{"run_id":null,"mode":"cancel","accepted":false},"created_at":"2026-11-29T10:00:00.123456Z"}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back rein.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seq != 3 || back.RunID != "" || !back.CreatedAt.Equal(at) || back.Type != rein.EventUserInterrupt {
		t.Fatalf("%+v", back)
	}
	e.RunID = "run_1"
	b, _ = json.Marshal(e)
	if !strings.Contains(string(b), `"run_id":"run_1"`) {
		t.Fatal(string(b))
	}
	// Nullable payload keys are written as null, never omitted.
	b, _ = json.Marshal(rein.SubagentCompletedPayload{ChildID: "c"})
	if !strings.Contains(string(b), `"output":null`) {
		t.Fatal(string(b))
	}
	b, _ = json.Marshal(rein.UserToolConfirmationPayload{ToolUseID: "x"})
	if !strings.Contains(string(b), `"deny_message":null`) {
		t.Fatal(string(b))
	}
}

func TestErrorCodes(t *testing.T) {
	err := error(&rein.Error{Code: rein.CodeSessionBusy, Message: "busy", RunID: "run_1"})
	if !errors.Is(err, rein.ErrSessionBusy) || errors.Is(err, rein.ErrConflict) {
		t.Fatal("Is by code")
	}
	wrapped := errors.Join(errors.New("ctx"), rein.Errorf(rein.CodeNotFound, "no session %q", "x"))
	if rein.CodeOf(wrapped) != rein.CodeNotFound || rein.CodeOf(errors.New("x")) != rein.CodeInternal {
		t.Fatal("CodeOf")
	}
	for code, status := range map[rein.Code]int{rein.CodeUnauthenticated: 401, rein.CodeNotFound: 404, rein.CodeInvalidArgument: 400,
		rein.CodeSessionBusy: 409, rein.CodeConflict: 409, rein.CodeUnavailable: 503, rein.CodeTooLarge: 413, rein.CodeTooManyRequests: 429, rein.CodeInternal: 500} {
		if code.HTTPStatus() != status {
			t.Errorf("%s → %d", code, code.HTTPStatus())
		}
	}
	if rein.ReasonTimeout.Status() != rein.StatusCancelled || !rein.ReasonMaxSteps.HasReply() || rein.ReasonError.HasReply() {
		t.Fatal("reasons")
	}
}
