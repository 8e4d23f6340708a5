package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/internal/provider"
)

// maxToolCallID is the longest tool call id the Chat Completions API
// accepts ("Expected a string with maximum length 40"). Ids from other
// providers (or a scripted model) can be longer; see provider.ShortID.
const maxToolCallID = 40

// params maps a Rein request to Chat Completions parameters.
//
// The transcript satisfies rein.ValidateTranscript, which is what this API
// needs for tool messages: each tool result comes right after the
// assistant message that made the call (or after its sibling results).
// Beyond that the mapping:
//   - puts Request.System first as a system message;
//   - renders hints (supplements, notices) as user messages with the
//     provider.UserText wrapper, and merges consecutive user-role messages
//     into one (joined by a blank line), because several OpenAI-compatible
//     servers apply chat templates that insist on alternating roles;
//   - sends a partial assistant message as its text plus
//     provider.PartialMarker, and drops assistant messages with neither
//     text nor tool calls (an empty reply carries nothing for the model);
//   - sends tool arguments as the text the model produced
//     (provider.ArgumentsText), and tool call ids longer than the API
//     allows as a stable hash (the same for a call and its result);
//   - maps an error tool result to its text: the API has no error flag,
//     and Rein's error outputs say what went wrong.
func params(modelName string, officialAPI bool, req *model.Request) (oai.ChatCompletionNewParams, error) {
	p := oai.ChatCompletionNewParams{
		Model:         shared.ChatModel(modelName),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.MaxTokens > 0 {
		// OpenAI's reasoning models reject max_tokens and every current
		// OpenAI model takes max_completion_tokens, while compatible
		// servers (Ollama, vLLM, llama.cpp) reliably know only max_tokens.
		if officialAPI {
			p.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			p.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	if req.System != "" {
		p.Messages = append(p.Messages, oai.SystemMessage(req.System))
	}
	p.Messages = append(p.Messages, messages(req.Messages)...)
	for i, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		schema, err := schemaObject(t.InputSchema)
		if err != nil {
			return p, fmt.Errorf("tools[%d] (%s): input schema: %w", i, t.Name, err)
		}
		fn.Parameters = schema
		p.Tools = append(p.Tools, oai.ChatCompletionToolUnionParam{OfFunction: &oai.ChatCompletionFunctionToolParam{Function: fn}})
	}
	return p, nil
}

func messages(msgs []rein.Message) []oai.ChatCompletionMessageParamUnion {
	var out []oai.ChatCompletionMessageParamUnion
	var user []string // pending user-role texts, merged into one message
	flush := func() {
		if len(user) > 0 {
			out = append(out, oai.UserMessage(strings.Join(user, "\n\n")))
			user = nil
		}
	}
	for _, m := range msgs {
		switch m.Role {
		case rein.RoleUser:
			user = append(user, provider.UserText(m))
		case rein.RoleAssistant:
			text := provider.AssistantText(m)
			if text == "" && len(m.ToolCalls) == 0 {
				continue
			}
			flush()
			a := oai.ChatCompletionAssistantMessageParam{}
			if text != "" {
				a.Content.OfString = param.NewOpt(text)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
						ID: callID(c.ID),
						Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: provider.ArgumentsText(c.Input),
						},
					},
				})
			}
			out = append(out, oai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case rein.RoleTool:
			flush()
			out = append(out, oai.ToolMessage(m.Text, callID(m.ToolCallID)))
		}
	}
	flush()
	return out
}

func callID(id string) string {
	return provider.ShortID(id, "call_", func(s string) bool { return s != "" && len(s) <= maxToolCallID })
}

// schemaObject decodes a tool's JSON Schema; an empty schema means a tool
// without parameters.
func schemaObject(raw json.RawMessage) (shared.FunctionParameters, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}
