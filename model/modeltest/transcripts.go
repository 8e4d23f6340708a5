package modeltest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/reinhq/rein"
)

// Transcripts returns n random transcripts that satisfy
// rein.ValidateTranscript and start with a user message, as a run's
// requests do, generated from seed. They mix what a provider's mapping has
// to get right: user turns, supplements and notices, assistant text with
// and without tool calls, several calls per message, results that are
// errors or empty, partial and empty replies, tool inputs that are not
// objects or not JSON, and tool call ids from other providers (long, or
// with characters some APIs reject). Providers map each one and check the
// result against their API's own rules.
func Transcripts(seed uint64, n int) [][]rein.Message {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([][]rein.Message, 0, n)
	for len(out) < n {
		msgs := rein.RepairTranscript(randomMessages(r, len(out)))
		if rein.ValidateTranscript(msgs) != nil {
			panic("modeltest: RepairTranscript returned an invalid transcript")
		}
		out = append(out, msgs)
	}
	return out
}

func randomMessages(r *rand.Rand, k int) []rein.Message {
	texts := []string{"", "hello", "two\nlines", "with <tags> & \"quotes\"", "ünïcödé ✓", strings.Repeat("long ", 50)}
	text := func() string { return texts[r.IntN(len(texts))] }
	nonEmpty := func() string {
		for {
			if t := text(); t != "" {
				return t
			}
		}
	}
	inputs := []json.RawMessage{
		json.RawMessage(`{"city":"Paris"}`), json.RawMessage(`{}`), json.RawMessage(`{"n":1,"deep":{"a":[1,2]}}`),
		json.RawMessage(`"{\"city\": \"Par"`), // broken arguments kept as a string
		json.RawMessage(`[1,2]`), json.RawMessage(`null`),
	}
	idStyles := []func(int) string{
		func(i int) string { return fmt.Sprintf("call_%d_%d", k, i) },
		func(i int) string { return fmt.Sprintf("toolu_01%dX%d", k, i) },
		func(i int) string { return fmt.Sprintf("scripted:%d.%d/call", k, i) },
		func(i int) string { return fmt.Sprintf("call_%d_%d_%s", k, i, strings.Repeat("x", 60)) },
	}
	msgs := []rein.Message{{Role: rein.RoleUser, Text: nonEmpty()}}
	next := 0
	for range 1 + r.IntN(12) {
		switch r.IntN(6) {
		case 0:
			msgs = append(msgs, rein.Message{Role: rein.RoleUser, Text: nonEmpty()})
		case 1:
			src := []string{"user", "parent", "subagent", ""}[r.IntN(4)]
			msgs = append(msgs, rein.Message{Role: rein.RoleUser, Text: nonEmpty(), Hint: &rein.Hint{ID: fmt.Sprintf("sup_%d", next), Source: src}})
			next++
		case 2:
			msgs = append(msgs, rein.Message{Role: rein.RoleAssistant, Text: text(), Partial: r.IntN(3) == 0})
		default:
			m := rein.Message{Role: rein.RoleAssistant, Text: text()}
			for range 1 + r.IntN(3) {
				m.ToolCalls = append(m.ToolCalls, rein.ToolCall{
					ID: idStyles[r.IntN(len(idStyles))](next), Name: []string{"get_weather", "sleep", "write_note"}[r.IntN(3)],
					Input: inputs[r.IntN(len(inputs))],
				})
				next++
			}
			msgs = append(msgs, m)
			// Answer the calls in a random order; sometimes leave one
			// unanswered for RepairTranscript to close.
			order := r.Perm(len(m.ToolCalls))
			for _, i := range order {
				if r.IntN(8) == 0 {
					continue
				}
				c := m.ToolCalls[i]
				msgs = append(msgs, rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: text(), IsError: r.IntN(4) == 0})
			}
		}
	}
	return msgs
}
