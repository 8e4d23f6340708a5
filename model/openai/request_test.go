package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/modeltest"
)

// wireMessage is a Chat Completions message as sent.
type wireMessage struct {
	Role       string  `json:"role"`
	Content    *string `json:"content"`
	ToolCallID string  `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func wire(t *testing.T, official bool, req *model.Request) []wireMessage {
	t.Helper()
	p, err := params("m", official, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []wireMessage `json:"messages"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	return body.Messages
}

// checkChatRules checks what the Chat Completions API (and the compatible
// servers' chat templates) require of a message list.
func checkChatRules(msgs []wireMessage, system bool) error {
	if system && (len(msgs) == 0 || msgs[0].Role != "system") {
		return fmt.Errorf("system prompt is not the first message")
	}
	var open map[string]bool // calls of the last assistant message still unanswered
	for i, m := range msgs {
		if m.Role != "tool" && len(open) > 0 {
			return fmt.Errorf("message %d (%s): %d tool call(s) of the assistant message before are unanswered", i, m.Role, len(open))
		}
		switch m.Role {
		case "system":
			if i != 0 {
				return fmt.Errorf("message %d: system message not first", i)
			}
		case "user":
			if m.Content == nil || *m.Content == "" {
				return fmt.Errorf("message %d: user message without content", i)
			}
			if i > 0 && msgs[i-1].Role == "user" {
				return fmt.Errorf("message %d: two user messages in a row", i)
			}
		case "assistant":
			if (m.Content == nil || *m.Content == "") && len(m.ToolCalls) == 0 {
				return fmt.Errorf("message %d: assistant message with neither content nor tool calls", i)
			}
			open = map[string]bool{}
			for _, c := range m.ToolCalls {
				if c.ID == "" || len(c.ID) > maxToolCallID {
					return fmt.Errorf("message %d: tool call id %q is empty or longer than %d", i, c.ID, maxToolCallID)
				}
				if open[c.ID] {
					return fmt.Errorf("message %d: duplicate tool call id %q", i, c.ID)
				}
				if c.Type != "function" || c.Function.Name == "" {
					return fmt.Errorf("message %d: tool call %+v", i, c)
				}
				open[c.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				return fmt.Errorf("message %d: tool result for %q does not follow the assistant message that made the call", i, m.ToolCallID)
			}
			if m.Content == nil {
				return fmt.Errorf("message %d: tool message without content", i)
			}
			delete(open, m.ToolCallID)
		default:
			return fmt.Errorf("message %d: role %q", i, m.Role)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("transcript ends with unanswered tool calls")
	}
	return nil
}

func TestMappingOfValidTranscriptsMeetsTheAPIRules(t *testing.T) {
	for i, msgs := range modeltest.Transcripts(1, 500) {
		req := &model.Request{System: []string{"", "be brief"}[i%2], Messages: msgs}
		got := wire(t, i%3 == 0, req)
		if err := checkChatRules(got, req.System != ""); err != nil {
			in, _ := json.MarshalIndent(msgs, "", "  ")
			out, _ := json.MarshalIndent(got, "", "  ")
			t.Fatalf("transcript %d: %v\ntranscript: %s\nsent: %s", i, err, in, out)
		}
	}
}

func TestMappingDetails(t *testing.T) {
	longID := "call_" + strings.Repeat("x", 60)
	msgs := []rein.Message{
		{Role: rein.RoleUser, Text: "do it"},
		{Role: rein.RoleUser, Text: "note", Hint: &rein.Hint{Source: "subagent"}},
		{Role: rein.RoleAssistant, Text: "", ToolCalls: []rein.ToolCall{
			{ID: longID, Name: "t", Input: json.RawMessage(`"{\"a\": 1"`)},
			{ID: "scripted:1", Name: "u", Input: nil},
		}},
		{Role: rein.RoleTool, ToolCallID: "scripted:1", Text: "", IsError: true},
		{Role: rein.RoleTool, ToolCallID: longID, Text: "bad input"},
		{Role: rein.RoleAssistant, Text: ""}, // an empty reply: dropped
		{Role: rein.RoleUser, Text: "again"},
	}
	got := wire(t, false, &model.Request{Messages: msgs})
	if len(got) != 5 {
		t.Fatalf("messages: %+v", got)
	}
	if *got[0].Content != "do it\n\n<supplement source=\"subagent\">note</supplement>" {
		t.Errorf("merged user message = %q", *got[0].Content)
	}
	a := got[1]
	if a.Content != nil || len(a.ToolCalls) != 2 {
		t.Fatalf("assistant = %+v", a)
	}
	// The long id is shortened the same way in the call and its result;
	// the broken arguments go back as the text the model wrote.
	if id := a.ToolCalls[0].ID; len(id) > maxToolCallID || id != got[3].ToolCallID {
		t.Errorf("long id → %q, result answers %q", id, got[3].ToolCallID)
	}
	if a.ToolCalls[0].Function.Arguments != `{"a": 1` || a.ToolCalls[1].Function.Arguments != `{}` {
		t.Errorf("arguments %q, %q", a.ToolCalls[0].Function.Arguments, a.ToolCalls[1].Function.Arguments)
	}
	if a.ToolCalls[1].ID != "scripted:1" || got[2].ToolCallID != "scripted:1" {
		t.Errorf("short ids must pass unchanged: %q %q", a.ToolCalls[1].ID, got[2].ToolCallID)
	}
	if got[4].Role != "user" || *got[4].Content != "again" {
		t.Errorf("last = %+v", got[4])
	}
}

func TestMaxTokensParameter(t *testing.T) {
	req := &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}, MaxTokens: 100}
	for _, c := range []struct {
		official bool
		key      string
	}{{true, `"max_completion_tokens":100`}, {false, `"max_tokens":100`}} {
		p, err := params("m", c.official, req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(p)
		if !strings.Contains(string(b), c.key) {
			t.Errorf("official=%v: %s lacks %s", c.official, b, c.key)
		}
	}
	p, _ := params("m", true, &model.Request{Messages: req.Messages})
	if b, _ := json.Marshal(p); strings.Contains(string(b), "max_") {
		t.Errorf("MaxTokens 0 sent a cap: %s", b)
	}
}

func TestToolSchemas(t *testing.T) {
	req := &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}, Tools: []model.ToolSpec{{Name: "none"}}}
	p, err := params("m", true, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p.Tools)
	if !strings.Contains(string(b), `"parameters":{"properties":{},"type":"object"}`) {
		t.Errorf("a tool without schema → %s", b)
	}
	req.Tools = []model.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(`[1]`)}}
	if _, err := params("m", true, req); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("a schema that is not an object: err = %v", err)
	}
}
