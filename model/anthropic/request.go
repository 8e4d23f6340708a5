package anthropic

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// toolIDPattern is what the Messages API accepts as a tool_use id. Ids made
// by other providers (after a model switch) or by a scripted model may not
// match; see provider.ShortID.
var toolIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// params maps a Rein request to Messages API parameters.
//
// The Messages API wants: the system prompt beside the messages; tool
// results as tool_result blocks in the user message right after the
// assistant message whose tool_use blocks they answer, before any other
// content of that message; and no empty text blocks. The mapping:
//   - Request.System → system;
//   - tool results → tool_result blocks (is_error when the result is an
//     error; no content block when the output is empty);
//   - hints (supplements, notices) → text blocks with the
//     provider.UserText wrapper;
//   - consecutive same-role messages merged into one message, so that
//     tool results and a supplement that follows them share the user
//     message (results first, as rein.ValidateTranscript orders them);
//   - a partial assistant message → its text plus provider.PartialMarker;
//     assistant messages with neither text nor tool calls are dropped;
//   - tool input → a JSON object (provider.ObjectInput); tool ids the API
//     would reject → a stable hash, the same for a call and its result.
func params(modelName string, maxTokens int, req *model.Request) (sdk.MessageNewParams, error) {
	if req.MaxTokens > 0 {
		maxTokens = req.MaxTokens
	}
	p := sdk.MessageNewParams{
		Model:     sdk.Model(modelName),
		MaxTokens: int64(maxTokens),
		Messages:  messages(req.Messages),
	}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	for i, t := range req.Tools {
		schema, err := schemaJSON(t.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): input schema: %w", i, t.Name, err)
		}
		tp := sdk.ToolParam{Name: t.Name, InputSchema: param.Override[sdk.ToolInputSchemaParam](schema)}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: &tp})
	}
	return p, nil
}

type turn struct {
	user   bool
	blocks []sdk.ContentBlockParamUnion
}

func messages(msgs []rein.Message) []sdk.MessageParam {
	var turns []turn
	add := func(user bool, blocks ...sdk.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(turns); n > 0 && turns[n-1].user == user {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			return
		}
		turns = append(turns, turn{user: user, blocks: blocks})
	}
	for _, m := range msgs {
		switch m.Role {
		case rein.RoleUser:
			if t := provider.UserText(m); t != "" {
				add(true, sdk.NewTextBlock(t))
			}
		case rein.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if t := provider.AssistantText(m); t != "" {
				blocks = append(blocks, sdk.NewTextBlock(t))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(toolID(c.ID), provider.ObjectInput(c.Input), c.Name))
			}
			add(false, blocks...)
		case rein.RoleTool:
			r := sdk.ToolResultBlockParam{ToolUseID: toolID(m.ToolCallID)}
			if m.Text != "" {
				r.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: m.Text}}}
			}
			if m.IsError {
				r.IsError = param.NewOpt(true)
			}
			add(true, sdk.ContentBlockParamUnion{OfToolResult: &r})
		}
	}
	out := make([]sdk.MessageParam, 0, len(turns))
	for _, t := range turns {
		if t.user {
			out = append(out, sdk.NewUserMessage(t.blocks...))
		} else {
			out = append(out, sdk.NewAssistantMessage(t.blocks...))
		}
	}
	return out
}

func toolID(id string) string {
	return provider.ShortID(id, "toolu_", toolIDPattern.MatchString)
}

// schemaJSON checks a tool's JSON Schema is an object; an empty schema
// means a tool without parameters.
func schemaJSON(raw json.RawMessage) (json.RawMessage, error) {
	if strings.TrimSpace(string(raw)) == "" {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return raw, nil
}
