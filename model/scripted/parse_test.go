package scripted

import (
	"errors"
	"testing"
)

func TestParseErrorsNameFileAndLine(t *testing.T) {
	tests := []struct {
		name string
		file string
		src  string
		want string // the whole error text
	}{
		{"unknown top-level field", "testdata/x.yaml", "rules: []\nmodel: gpt\n",
			`testdata/x.yaml:2: model: unknown field "model" (known fields: rules)`},
		{"empty rules", "x.yaml", "# nothing yet\nrules: []\n",
			`x.yaml:2: rules: empty: a script needs at least one rule`},
		{"missing rules", "x.yaml", "\n\n{}\n",
			`x.yaml:3: rules: missing: a script needs at least one rule`},
		{"empty file", "x.yaml", "",
			`x.yaml:1: rules: the script is empty: it needs at least one rule`},
		{"script is a list", "x.yaml", "- a\n- b\n",
			`x.yaml:1: not a valid script: a script is a mapping with a rules list, and this file holds a list`},
		{"unknown rule field", "x.yaml", "rules:\n  - match: a\n    step: []\n",
			`x.yaml:3: rules[0].step: unknown field "step" (known fields: match, steps)`},
		{"rule without steps", "x.yaml", "rules:\n  - match: a\n    steps: [{text: a}]\n  - match: b\n",
			`x.yaml:4: rules[1].steps: missing: a rule needs at least one step`},
		{"rule with empty steps", "x.yaml", "rules:\n  - match: a\n    steps: []\n",
			`x.yaml:3: rules[0].steps: empty: a rule needs at least one step`},
		{"bad regexp", "x.yaml", "rules:\n  - match: \"(unclosed\"\n    steps: [{text: a}]\n",
			"x.yaml:2: rules[0].match: invalid regexp: error parsing regexp: missing closing ): `(unclosed`"},
		{"bad template", "x.yaml", "rules:\n  - steps:\n      - text: a\n      - text: \"{{.Input\"\n",
			`x.yaml:4: rules[0].steps[1].text: invalid template: text:1: unclosed action`},
		{"unknown template field", "x.yaml", "rules:\n  - steps:\n      - text: \"hi {{.Inptu}}\"\n",
			`x.yaml:3: rules[0].steps[0].text: invalid template: unknown field .Inptu (fields: .Input .Step .Hints .ToolResult .System .Turns)`},
		{"field of a field", "x.yaml", "rules:\n  - steps:\n      - text: \"{{if .Hints}}{{$.Input.Len}}{{end}}\"\n",
			`x.yaml:3: rules[0].steps[0].text: invalid template: .Input has no field Len`},
		{"unknown function", "x.yaml", "rules:\n  - steps:\n      - text: \"{{upper .Input}}\"\n",
			`x.yaml:3: rules[0].steps[0].text: invalid template: text:1: function "upper" not defined`},
		{"bad duration", "testdata/x.yaml", "rules:\n  - match: a\n    steps:\n      - text: a\n  - match: b\n    steps:\n      - text: b\n        chunk_delay: 1x\n",
			`testdata/x.yaml:8: rules[1].steps[0].chunk_delay: invalid duration "1x" (use a Go duration such as 100ms or 2s)`},
		{"duration without unit", "x.yaml", "rules:\n  - steps: [{text: a, chunk_delay: 100}]\n",
			`x.yaml:2: rules[0].steps[0].chunk_delay: invalid duration "100" (use a Go duration such as 100ms or 2s)`},
		{"negative duration", "x.yaml", "rules:\n  - steps: [{text: a, chunk_delay: -1s}]\n",
			`x.yaml:2: rules[0].steps[0].chunk_delay: must not be negative, got -1s`},
		{"zero chunks", "x.yaml", "rules:\n  - steps:\n      - text: a\n        chunks: 0\n",
			`x.yaml:4: rules[0].steps[0].chunks: must be at least 1, got 0`},
		{"negative chunks", "x.yaml", "rules:\n  - steps:\n      - text: a\n        chunks: -3\n",
			`x.yaml:4: rules[0].steps[0].chunks: must be at least 1, got -3`},
		{"chunks not a number", "x.yaml", "rules:\n  - steps:\n      - text: a\n        chunks: many\n",
			`x.yaml:4: rules[0].steps[0].chunks: must be a whole number, got "many"`},
		{"chunks a fraction", "x.yaml", "rules:\n  - steps:\n      - text: a\n        chunks: 2.5\n",
			`x.yaml:4: rules[0].steps[0].chunks: must be a whole number, got 2.5`},
		{"unknown step field", "x.yaml", "rules:\n  - steps:\n      - text: a\n        delay: 1s\n",
			`x.yaml:4: rules[0].steps[0].delay: unknown field "delay" (known fields: text, chunks, chunk_delay, tool_calls, error, usage)`},
		{"duplicate field", "x.yaml", "rules:\n  - steps:\n      - text: a\n        text: b\n",
			`x.yaml:4: rules[0].steps[0].text: duplicate field`},
		{"text is a list", "x.yaml", "rules:\n  - steps:\n      - text: [a]\n",
			`x.yaml:3: rules[0].steps[0].text: must be a string, got a list`},
		{"tool call without name", "x.yaml", "rules:\n  - steps:\n      - text: a\n        tool_calls:\n          - input: {seconds: 1}\n",
			`x.yaml:5: rules[0].steps[0].tool_calls[0].name: missing: a tool call needs the tool's name`},
		{"tool call with empty name", "x.yaml", "rules:\n  - steps:\n      - tool_calls:\n          - name: \"\"\n",
			`x.yaml:4: rules[0].steps[0].tool_calls[0].name: must not be empty`},
		{"tool input not an object", "x.yaml", "rules:\n  - steps:\n      - tool_calls:\n          - name: sleep\n            input: 5\n",
			`x.yaml:5: rules[0].steps[0].tool_calls[0].input: must be an object (a mapping), got 5`},
		{"bad template in tool input", "x.yaml", "rules:\n  - steps:\n      - tool_calls:\n          - name: write_note\n            input:\n              text: \"{{.Nope}}\"\n",
			`x.yaml:6: rules[0].steps[0].tool_calls[0].input.text: invalid template: unknown field .Nope (fields: .Input .Step .Hints .ToolResult .System .Turns)`},
		{"tool input not JSON-able", "x.yaml", "rules:\n  - steps:\n      - tool_calls:\n          - name: sleep\n            input: {seconds: .nan}\n",
			`x.yaml:5: rules[0].steps[0].tool_calls[0].input.seconds: value .nan cannot be written as JSON`},
		{"unknown tool call field", "x.yaml", "rules:\n  - steps:\n      - tool_calls:\n          - name: sleep\n            args: {}\n",
			`x.yaml:5: rules[0].steps[0].tool_calls[0].args: unknown field "args" (known fields: name, input)`},
		{"empty error", "x.yaml", "rules:\n  - steps:\n      - error: \"\"\n",
			`x.yaml:3: rules[0].steps[0].error: must not be empty`},
		{"error with tool calls", "x.yaml", "rules:\n  - steps:\n      - error: boom\n        tool_calls: [{name: sleep}]\n",
			`x.yaml:4: rules[0].steps[0].tool_calls: a step with error makes no tool calls`},
		{"yaml syntax", "x.yaml", "rules:\n  - steps:\n      - text: a\n     bad indent: [\n",
			`x.yaml:4: syntax error: did not find expected key`},
		{"two documents", "x.yaml", "rules:\n  - steps: [{text: a}]\n---\nrules: []\n",
			`x.yaml:3: a script is one document; found another one`},
		{"unclosed flow list", "x.yaml", "rules:\n  - match: a\n    steps: [{text: a}\n  - match: b\n",
			`x.yaml:3: syntax error: did not find expected ',' or ']'`},
		{"mapping in a plain scalar", "x.yaml", "rules:\n  - match: a\n    steps:\n      - text: a: b\n",
			`x.yaml:4: syntax error: mapping values are not allowed in this context`},
		{"tab indentation", "x.yaml", "rules:\n  - match: a\n\tsteps: []\n",
			`x.yaml:3: syntax error: found a tab character that violates indentation`},
		{"unknown anchor", "x.yaml", "rules:\n  - match: a\n    steps: *nope\n",
			`x.yaml:3: syntax error: unknown anchor 'nope' referenced`},
		{"json syntax", "testdata/x.json", "{\n  \"rules\": [\n    {\"steps\": [{\"text\": \"a\"}],}\n  ]\n}\n",
			`testdata/x.json:3: invalid JSON: invalid character '}' looking for beginning of object key string`},
		{"json unknown field", "testdata/x.json", "{\n  \"rules\": [\n    {\"steps\": [\n      {\"text\": \"a\", \"chunks\": 0}\n    ]}\n  ]\n}\n",
			`testdata/x.json:4: rules[0].steps[0].chunks: must be at least 1, got 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.file, []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tt.src)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ParseError", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tt.want)
			}
			if pe.File != tt.file || pe.Line < 1 {
				t.Errorf("File %q Line %d", pe.File, pe.Line)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := []struct{ name, src string }{
		{"json in a yaml file", `{"rules": [{"match": "a", "steps": [{"text": "a"}]}]}`},
		{"null fields are absent", "rules:\n  - match:\n    steps:\n      - text:\n        tool_calls:\n"},
		{"numbers as text", "rules:\n  - steps: [{text: 42}]\n"},
		{"zero delay", "rules:\n  - steps: [{text: a, chunk_delay: 0}]\n"},
		{"aliases", "rules:\n  - match: a\n    steps: [&s {text: shared, chunks: 2}]\n  - steps: [*s]\n"},
		{"error only", "rules:\n  - steps: [{error: boom}]\n"},
		{"text with a with-block", "rules:\n  - steps: [{text: \"{{with .Hints}}notes: {{.}}{{end}}{{range $i, $c := .Input}}{{end}}\"}]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse("x.yaml", []byte(tt.src)); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}
