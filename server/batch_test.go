package server

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

var batchSeeds = []string{
	`{"events":[{"type":"user.message","payload":{"text":"hi"}}]}`,
	`{"events":[{"type":"user.message","payload":{"text":"hi","when_busy":"enqueue","client_id":"c1","timeout_s":2.5}}]}`,
	`{"events":[{"type":"user.message","payload":{"text":"hi","when_busy":"rollback"}}]}`,
	`{"events":[{"type":"user.interrupt","payload":{}}]}`,
	`{"events":[{"type":"user.interrupt","payload":{"run_id":"run_1","mode":"interrupt","message":"stop"}}]}`,
	`{"events":[{"type":"user.interrupt","payload":{"run_id":""}}]}`,
	`{"events":[{"type":"user.interrupt","payload":{"run_id":null}}]}`,
	`{"events":[{"type":"user.interrupt","payload":{"run_id":5}}]}`,
	`{"events":[{"type":"user.supplement","payload":{"text":"note","id":"s1"}}]}`,
	`{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c","allow":false,"denyMessage":"no"}}]}`,
	`{"events":[{"type":"user.tool_confirmation","payload":{"tool_use_id":"c","allow":true,"deny_message":null}}]}`,
	`{"events":[{"type":"system.message","payload":{"text":""}}]}`,
	`{"events":[{"type":"nope"}]}`,
	`{"events":[]}`,
	`{"events":[1]}`,
	`{}`,
	`[]`,
	`{"events":[{"type":"user.message","payload":{"text":"\u00e9\ud83d\ude00","timeout_s":1e-12}}]}`,
	`{"events":[{"type":"user.message","payload":{"text":"x","timeout_s":-0}}]}`,
	"{\"events\":[{\"type\":\"user.message\",\"payload\":{\"text\":\"a\"}}]}\n",
	`{"events":[{"type":"user.message","payload":{"text":"a"}}]} trailing`,
}

// FuzzDecodeBatch: whatever the body, decodeBatch never panics; it either
// refuses with invalid_argument naming a field inside the body, or returns
// 1 to 100 commands that satisfy every rule the sessions service relies
// on; and what it accepts survives a round trip through its own JSON.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range batchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cmds, err := decodeBatch(body)
		if err != nil {
			var re *rein.Error
			if !errors.As(err, &re) || re.Code != rein.CodeInvalidArgument {
				t.Fatalf("error %v is not invalid_argument", err)
			}
			if re.Param != "" && !strings.HasPrefix(re.Param, "events") {
				t.Fatalf("param %q does not name a field of the batch", re.Param)
			}
			if cmds != nil {
				t.Fatal("commands returned with an error")
			}
			return
		}
		if len(cmds) < 1 || len(cmds) > MaxBatchEvents {
			t.Fatalf("%d commands accepted", len(cmds))
		}
		for i, c := range cmds {
			checkCommand(t, i, c)
		}
		again, err := decodeBatch(encodeBatch(t, cmds))
		if err != nil {
			t.Fatalf("re-encoded batch refused: %v", err)
		}
		for i := range cmds {
			// Seconds as float64 and back may move a timeout by a few
			// nanoseconds; anything more is a bug.
			a, b := cmds[i].message.Timeout, again[i].message.Timeout
			if diff := math.Abs(float64(a - b)); diff > 2000+math.Abs(float64(a))*1e-12 {
				t.Fatalf("event %d: timeout %v became %v", i, a, b)
			}
			again[i].message.Timeout = a
		}
		if !reflect.DeepEqual(cmds, again) {
			t.Fatalf("round trip changed the batch:\n%+v\n%+v", cmds, again)
		}
	})
}

func checkCommand(t *testing.T, i int, c command) {
	t.Helper()
	switch c.typ {
	case rein.EventUserMessage:
		m := c.message
		if m.Text == "" || m.Timeout < 0 || !oneOf(m.WhenBusy, "", rein.WhenBusyReject, rein.WhenBusyEnqueue, rein.WhenBusyInterrupt, rein.WhenBusyRollback) {
			t.Fatalf("event %d: bad message accepted: %+v", i, m)
		}
	case rein.EventUserInterrupt:
		in := c.interrupt
		if (in.RunID != nil && *in.RunID == "") || !oneOf(in.Mode, rein.StopCancel, rein.StopInterrupt) {
			t.Fatalf("event %d: bad interrupt accepted: %+v", i, in)
		}
	case rein.EventUserSupplement:
		if c.supplement.Text == "" {
			t.Fatalf("event %d: empty supplement accepted", i)
		}
	case rein.EventUserToolConfirmation:
		if c.confirm.ToolUseID == "" {
			t.Fatalf("event %d: confirmation without tool_use_id accepted", i)
		}
	case rein.EventSystemMessage:
	default:
		t.Fatalf("event %d: type %q accepted", i, c.typ)
	}
}

func oneOf[T comparable](v T, set ...T) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

// encodeBatch writes commands back as a request body.
func encodeBatch(t *testing.T, cmds []command) []byte {
	t.Helper()
	var events []map[string]any
	for _, c := range cmds {
		p := map[string]any{}
		switch c.typ {
		case rein.EventUserMessage:
			p["text"] = c.message.Text
			if c.message.WhenBusy != "" {
				p["when_busy"] = c.message.WhenBusy
			}
			if c.message.ClientID != "" {
				p["client_id"] = c.message.ClientID
			}
			if c.message.Timeout > 0 {
				p["timeout_s"] = json.Number(strconv.FormatFloat(c.message.Timeout.Seconds(), 'g', -1, 64))
			}
		case rein.EventUserInterrupt:
			if c.interrupt.RunID != nil {
				p["run_id"] = *c.interrupt.RunID
			}
			p["mode"] = c.interrupt.Mode
			if c.interrupt.Message != nil {
				p["message"] = *c.interrupt.Message
			}
		case rein.EventUserSupplement:
			p["text"] = c.supplement.Text
			if c.supplement.ID != "" {
				p["id"] = c.supplement.ID
			}
		case rein.EventUserToolConfirmation:
			p["tool_use_id"] = c.confirm.ToolUseID
			p["allow"] = c.confirm.Allow
			if c.confirm.DenyMessage != nil {
				p["deny_message"] = *c.confirm.DenyMessage
			}
		case rein.EventSystemMessage:
			p["text"] = c.system
		}
		events = append(events, map[string]any{"type": string(c.typ), "payload": p})
	}
	b, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeBatchResults(t *testing.T) {
	t.Parallel()
	if _, err := decodeBatch([]byte(`{"events":[{"type":"user.message","payload":{"text":"ok"}},{"type":"system.message"}]}`)); err == nil {
		t.Fatal("system.message without text accepted")
	}
	cmds, err := decodeBatch([]byte(`{"events":[
		{"type":"user.message","payload":{"text":"hi","when_busy":"interrupt","client_id":"","timeout_s":1.5}},
		{"type":"user.interrupt","payload":{"run_id":"run_x"}},
		{"type":"user.tool_confirmation","payload":{"tool_use_id":"c1","allow":false,"deny_message":"no","denyMessage":"no"}},
		{"type":"system.message","payload":{"text":""}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := cmds[0].message; m.Text != "hi" || m.WhenBusy != "interrupt" || m.ClientID != "" || m.Timeout.Seconds() != 1.5 {
		t.Fatalf("message %+v", m)
	}
	if in := cmds[1].interrupt; in.RunID == nil || *in.RunID != "run_x" || in.Mode != rein.StopCancel || in.Message != nil {
		t.Fatalf("interrupt %+v", in)
	}
	if c := cmds[2].confirm; c.ToolUseID != "c1" || c.Allow || c.DenyMessage == nil || *c.DenyMessage != "no" {
		t.Fatalf("confirmation %+v", c)
	}
	if cmds[3].typ != rein.EventSystemMessage || cmds[3].system != "" {
		t.Fatalf("system %+v", cmds[3])
	}
}

func TestAuthenticator(t *testing.T) {
	t.Parallel()
	a, err := newAuthenticator(map[string]string{"secret-1": "alice", "s2": "bob"})
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]string{
		"Bearer secret-1":   "alice",
		"bearer s2":         "bob",
		"BEARER  s2 ":       "bob",
		"Bearer secret-":    "",
		"Bearer secret-12":  "",
		"Bearer ":           "",
		"Bearer":            "",
		"secret-1":          "",
		"Basic secret-1":    "",
		"Bearer S2":         "",
		"Token secret-1 xx": "",
	} {
		got, ok := a.owner(header)
		if got != want || ok != (want != "") {
			t.Errorf("%q → %q %v, want %q", header, got, ok, want)
		}
	}
	if _, err := newAuthenticator(map[string]string{"": "x"}); err == nil {
		t.Error("empty token accepted")
	}
	if _, err := newAuthenticator(map[string]string{"t": ""}); err == nil {
		t.Error("empty owner accepted")
	}
	single, _ := newAuthenticator(nil)
	if o, ok := single.owner(""); !ok || o != LocalOwner {
		t.Errorf("single-user mode: %q %v", o, ok)
	}
}
