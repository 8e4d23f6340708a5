package load

import (
	"fmt"
	"strings"
)

// chunkText is one streamed delta's text. Six runes each, so the scripted
// model's rune split gives exactly Chunks deltas of it.
const chunkText = "token "

// finalText is the one-delta reply of the step after the tool calls.
const finalText = "done"

// Script returns the scripted-model file (YAML) the in-process server runs
// for these options: every input streams Chunks deltas ChunkDelay apart,
// then makes ToolCalls sleep(0) calls; a run with tool calls ends with a
// second step that streams finalText as one delta. To load a remote
// server with the same workload, start it with
// `rein serve --model scripted:FILE` on this file.
func (o Options) Script() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# rein bench: %d deltas %s apart, %d tool call(s) per run\n", o.Chunks, o.ChunkDelay, o.ToolCalls)
	b.WriteString("rules:\n  - match: \".*\"\n    steps:\n")
	fmt.Fprintf(&b, "      - text: %q\n        chunks: %d\n        chunk_delay: %s\n", strings.Repeat(chunkText, o.Chunks), o.Chunks, o.ChunkDelay)
	if o.ToolCalls > 0 {
		b.WriteString("        tool_calls:\n")
		for range o.ToolCalls {
			b.WriteString("          - name: sleep\n            input: {seconds: 0}\n")
		}
		fmt.Fprintf(&b, "      - text: %q\n", finalText)
	}
	return []byte(b.String())
}

// expectedReply is the final agent.message text of a run that was not
// stopped, under Script.
func (o Options) expectedReply() string {
	if o.ToolCalls > 0 {
		return finalText
	}
	return strings.Repeat(chunkText, o.Chunks)
}
