package mcp

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzResult: any bytes as the result of a tools/call, decoded by the SDK
// as the client does. What decodes maps to a tool result without panicking;
// isError carries over; every text content's text is in the output
// verbatim and in order — exactly the texts joined by "\n" when all the
// contents are text —, every other content is one line of JSON, structured
// content stands in, as JSON, for absent content, and the output is valid
// UTF-8 (what providers accept in a transcript).
func FuzzResult(f *testing.F) {
	s := &server{cfg: Server{Name: "fz"}}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var res sdk.CallToolResult
		if err := json.Unmarshal(wire, &res); err != nil {
			return // the SDK refuses it before Rein sees it
		}
		got := s.result("tool", &res)
		if got.IsError != res.IsError {
			t.Fatalf("isError %v became %v", res.IsError, got.IsError)
		}
		if !utf8.ValidString(got.Output) {
			t.Fatalf("output is not UTF-8: %q", got.Output)
		}
		if res.IsError && got.Output == "" {
			t.Fatal("an error result without a word")
		}
		var texts []string
		allText := true
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				texts = append(texts, tc.Text)
			} else {
				allText = false
			}
		}
		switch {
		case len(res.Content) == 0 && res.StructuredContent != nil:
			want, err := json.Marshal(res.StructuredContent)
			if err == nil && got.Output != string(want) {
				t.Fatalf("structured content %s became %q", want, got.Output)
			}
		case len(res.Content) == 0:
			if !res.IsError && got.Output != "" {
				t.Fatalf("no content became %q", got.Output)
			}
		case allText:
			if want := strings.Join(texts, "\n"); got.Output != want && !(res.IsError && want == "") {
				t.Fatalf("texts %q became %q", texts, got.Output)
			}
		default:
			rest := got.Output
			for _, text := range texts {
				i := strings.Index(rest, text)
				if i < 0 {
					t.Fatalf("text %q is not in the output (in order): %q", text, got.Output)
				}
				rest = rest[i+len(text):]
			}
			if len(texts) == 0 {
				lines := strings.Split(got.Output, "\n")
				if len(lines) != len(res.Content) {
					t.Fatalf("%d contents on %d lines: %q", len(res.Content), len(lines), got.Output)
				}
				for _, l := range lines {
					if !json.Valid([]byte(l)) {
						t.Fatalf("content shown as %q, not JSON", l)
					}
				}
			}
		}
	})
}
