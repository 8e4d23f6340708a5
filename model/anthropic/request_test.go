package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/modeltest"
)

// wireBlock and wireMessage are the Messages API content as sent.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   *bool           `json:"is_error"`
	Content   []wireBlock     `json:"content"`
}

type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireRequest struct {
	MaxTokens int           `json:"max_tokens"`
	System    []wireBlock   `json:"system"`
	Messages  []wireMessage `json:"messages"`
}

func wire(t *testing.T, req *model.Request) wireRequest {
	t.Helper()
	p, err := params("m", DefaultMaxTokens, req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var w wireRequest
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// checkMessagesRules checks what the Messages API requires: roles
// alternate starting with user; no empty message or text block; every
// tool_use is answered by a tool_result in the very next message, whose
// tool_result blocks come before anything else; tool_use ids match the
// API's pattern and are unique; tool input is an object.
func checkMessagesRules(msgs []wireMessage) error {
	seen := map[string]bool{}
	var open map[string]bool
	for i, m := range msgs {
		want := []string{"user", "assistant"}[i%2]
		if m.Role != want {
			return fmt.Errorf("message %d: role %s, want %s (roles must alternate, starting with user)", i, m.Role, want)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("message %d: no content", i)
		}
		results := true // still in the leading run of tool_result blocks
		answered := map[string]bool{}
		for j, b := range m.Content {
			where := fmt.Sprintf("message %d block %d", i, j)
			switch b.Type {
			case "text":
				if b.Text == nil || *b.Text == "" {
					return fmt.Errorf("%s: empty text block", where)
				}
				results = false
			case "tool_use":
				if m.Role != "assistant" {
					return fmt.Errorf("%s: tool_use in a %s message", where, m.Role)
				}
				if !toolIDPattern.MatchString(b.ID) || seen[b.ID] {
					return fmt.Errorf("%s: tool_use id %q invalid or repeated", where, b.ID)
				}
				seen[b.ID] = true
				var obj map[string]any
				if json.Unmarshal(b.Input, &obj) != nil || obj == nil {
					return fmt.Errorf("%s: tool_use input %s is not an object", where, b.Input)
				}
			case "tool_result":
				if m.Role != "user" || !results {
					return fmt.Errorf("%s: tool_result not at the start of a user message", where)
				}
				if !open[b.ToolUseID] || answered[b.ToolUseID] {
					return fmt.Errorf("%s: tool_result for %q answers no tool_use of the message before", where, b.ToolUseID)
				}
				answered[b.ToolUseID] = true
				for _, c := range b.Content {
					if c.Type != "text" || c.Text == nil || *c.Text == "" {
						return fmt.Errorf("%s: tool_result content %+v", where, c)
					}
				}
			default:
				return fmt.Errorf("%s: block type %q", where, b.Type)
			}
		}
		if len(open) != len(answered) {
			return fmt.Errorf("message %d: answers %d of %d tool_use blocks of the message before", i, len(answered), len(open))
		}
		open = map[string]bool{}
		for _, b := range m.Content {
			if b.Type == "tool_use" {
				open[b.ID] = true
			}
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("the last message's tool_use blocks are unanswered")
	}
	return nil
}

func TestMappingOfValidTranscriptsMeetsTheAPIRules(t *testing.T) {
	for i, msgs := range modeltest.Transcripts(2, 500) {
		got := wire(t, &model.Request{Messages: msgs})
		if err := checkMessagesRules(got.Messages); err != nil {
			in, _ := json.MarshalIndent(msgs, "", "  ")
			out, _ := json.MarshalIndent(got.Messages, "", "  ")
			t.Fatalf("transcript %d: %v\ntranscript: %s\nsent: %s", i, err, in, out)
		}
	}
}

func TestMappingDetails(t *testing.T) {
	msgs := []rein.Message{
		{Role: rein.RoleUser, Text: "go"},
		{Role: rein.RoleAssistant, Text: "", ToolCalls: []rein.ToolCall{
			{ID: "scripted:1.a", Name: "t", Input: json.RawMessage(`"{\"a\": 1"`)},
			{ID: "toolu_ok", Name: "u", Input: nil},
		}},
		{Role: rein.RoleTool, ToolCallID: "toolu_ok", Text: ""},
		{Role: rein.RoleTool, ToolCallID: "scripted:1.a", Text: "input is not an object", IsError: true},
		{Role: rein.RoleUser, Text: "done yet?", Hint: &rein.Hint{Source: "parent"}},
		{Role: rein.RoleUser, Text: "and this"},
	}
	w := wire(t, &model.Request{System: "sys", Messages: msgs})
	if w.MaxTokens != DefaultMaxTokens || len(w.System) != 1 || *w.System[0].Text != "sys" {
		t.Errorf("max_tokens %d, system %+v", w.MaxTokens, w.System)
	}
	if len(w.Messages) != 3 {
		t.Fatalf("messages: %+v", w.Messages)
	}
	uses := w.Messages[1].Content
	if len(uses) != 2 || uses[0].Type != "tool_use" || !toolIDPattern.MatchString(uses[0].ID) || uses[1].ID != "toolu_ok" {
		t.Fatalf("assistant content: %+v", uses)
	}
	if string(uses[0].Input) != `{"_raw_input":"{\"a\": 1"}` || string(uses[1].Input) != `{}` {
		t.Errorf("inputs %s, %s", uses[0].Input, uses[1].Input)
	}
	last := w.Messages[2].Content
	if len(last) != 4 {
		t.Fatalf("merged user content: %+v", last)
	}
	if last[0].ToolUseID != "toolu_ok" || last[0].Content != nil || last[0].IsError != nil {
		t.Errorf("empty result → %+v (want no content block, no is_error)", last[0])
	}
	if last[1].ToolUseID != uses[0].ID || last[1].IsError == nil || !*last[1].IsError {
		t.Errorf("error result → %+v", last[1])
	}
	if *last[2].Text != `<supplement source="parent">done yet?</supplement>` || *last[3].Text != "and this" {
		t.Errorf("texts %q %q", *last[2].Text, *last[3].Text)
	}
	if w := wire(t, &model.Request{Messages: msgs[:1], MaxTokens: 99}); w.MaxTokens != 99 {
		t.Errorf("Request.MaxTokens ignored: %d", w.MaxTokens)
	}
}

func TestToolSchemas(t *testing.T) {
	req := &model.Request{Messages: []rein.Message{{Role: rein.RoleUser, Text: "x"}}, Tools: []model.ToolSpec{{Name: "none"}}}
	p, err := params("m", 10, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p.Tools)
	if !strings.Contains(string(b), `"input_schema":{"type":"object","properties":{}}`) {
		t.Errorf("a tool without schema → %s", b)
	}
	req.Tools = []model.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(`"x"`)}}
	if _, err := params("m", 10, req); err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("a schema that is not an object: err = %v", err)
	}
}
