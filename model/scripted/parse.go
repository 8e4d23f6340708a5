package scripted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"

	"go.yaml.in/yaml/v3"
)

// ParseError is a problem in a script, located by file, line and the path
// of the offending field. Its text reads like a compiler's:
//
//	testdata/x.yaml:12: rules[1].steps[0].chunk_delay: invalid duration "1x"
type ParseError struct {
	File string
	Line int    // 1-based; 0 when the parser could not tell
	Path string // e.g. "rules[1].steps[0].chunk_delay"; "" for the whole file
	Msg  string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// templateFields are the fields a step's templates may use (docs/models.md).
var templateFields = []string{"Input", "Step", "Hints", "ToolResult", "System", "Turns"}

// parser walks the YAML node tree, which keeps line numbers (JSON is parsed
// by the same parser: YAML is a superset of it).
type parser struct {
	file string
	// open are the input mappings and lists being read: the current one
	// and those it is inside. An alias to one of them would make an
	// endless input.
	open map[*yaml.Node]bool
	// inputValues counts the values of tool-call inputs read so far:
	// aliases let a few lines expand to exponentially many.
	inputValues int
}

// maxInputValues bounds the values of all tool-call inputs of a script,
// aliases expanded: far above what a script writes, far below what would
// exhaust memory or make every request slow to render.
const maxInputValues = 1 << 16

func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) error {
	e := &ParseError{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

var yamlLineErr = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// splitYAMLError takes yaml's "yaml: line N: msg" apart; line is 0 when
// the message has none.
func splitYAMLError(err error) (line int, msg string) {
	if m := yamlLineErr.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		return line, m[2]
	}
	return 0, strings.TrimPrefix(err.Error(), "yaml: ")
}

// syntaxError locates a YAML syntax error. The parser reports the line
// where the enclosing construct began (or none at all), which for a
// mis-indented key deep in a rule is the script's first line; so find the
// shortest prefix of the script, in whole lines, that fails with the same
// message: its last line is where the problem is.
func (p *parser) syntaxError(data []byte, err error) error {
	line, msg := splitYAMLError(err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(k int) bool {
		e := decodeAll(bytes.Join(lines[:k], nil))
		if e == nil {
			return false
		}
		_, m := splitYAMLError(e)
		return m == msg
	}
	if k := sort.Search(len(lines), func(i int) bool { return fails(i + 1) }); k < len(lines) {
		line = k + 1
	}
	return &ParseError{File: p.file, Line: max(line, 1), Msg: "syntax error: " + msg}
}

func decodeAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func parseScript(file string, data []byte) ([]rule, error) {
	p := &parser{file: file}
	if strings.EqualFold(filepath.Ext(file), ".json") {
		// The YAML parser accepts JSON but also things JSON forbids and
		// reports JSON mistakes in YAML terms; check JSON syntax first.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			line := 1
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line = 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			}
			return nil, &ParseError{File: file, Line: line, Msg: "invalid JSON: " + err.Error()}
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ParseError{File: file, Line: 1, Path: "rules", Msg: "the script is empty: it needs at least one rule"}
		}
		return nil, p.syntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errorf(&extra, "", "a script is one document; found another one")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.syntaxError(data, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if r := resolve(root); r.Kind != yaml.MappingNode {
		// Most likely not a script at all (a README, say): name what the
		// file holds, never its content.
		return nil, p.errorf(r, "", "not a valid script: a script is a mapping with a rules list, and this file holds %s", kind(r))
	}
	fields, err := p.mapping(resolve(root), "", "rules")
	if err != nil {
		return nil, err
	}
	rulesNode, ok := fields["rules"]
	if !ok {
		return nil, p.errorf(root, "rules", "missing: a script needs at least one rule")
	}
	items, err := p.sequence(rulesNode, "rules")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, p.errorf(rulesNode, "rules", "empty: a script needs at least one rule")
	}
	rules := make([]rule, 0, len(items))
	for i, item := range items {
		r, err := p.rule(item, fmt.Sprintf("rules[%d]", i))
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func (p *parser) rule(n *yaml.Node, path string) (rule, error) {
	var r rule
	fields, err := p.mapping(n, path, "match", "steps")
	if err != nil {
		return r, err
	}
	if m, ok := fields["match"]; ok {
		expr, err := p.scalar(m, path+".match")
		if err != nil {
			return r, err
		}
		if r.match, err = regexp.Compile(expr); err != nil {
			return r, p.errorf(m, path+".match", "invalid regexp: %v", err)
		}
	}
	stepsNode, ok := fields["steps"]
	if !ok {
		return r, p.errorf(n, path+".steps", "missing: a rule needs at least one step")
	}
	items, err := p.sequence(stepsNode, path+".steps")
	if err != nil {
		return r, err
	}
	if len(items) == 0 {
		return r, p.errorf(stepsNode, path+".steps", "empty: a rule needs at least one step")
	}
	for i, item := range items {
		st, err := p.step(item, fmt.Sprintf("%s.steps[%d]", path, i))
		if err != nil {
			return r, err
		}
		r.steps = append(r.steps, st)
	}
	return r, nil
}

func (p *parser) step(n *yaml.Node, path string) (step, error) {
	st := step{path: path, chunks: 1}
	fields, err := p.mapping(n, path, "text", "chunks", "chunk_delay", "tool_calls", "error", "usage")
	if err != nil {
		return st, err
	}
	if v, ok := fields["text"]; ok {
		src, err := p.scalar(v, path+".text")
		if err != nil {
			return st, err
		}
		if st.text, err = p.template(v, path+".text", src); err != nil {
			return st, err
		}
		if plainText(st.text, src) {
			st.literal = &src
		}
	}
	if v, ok := fields["chunks"]; ok {
		var c int
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&c) != nil {
			return st, p.errorf(v, path+".chunks", "must be a whole number, got %s", describe(v))
		}
		if c < 1 {
			return st, p.errorf(v, path+".chunks", "must be at least 1, got %d", c)
		}
		st.chunks = c
	}
	if v, ok := fields["chunk_delay"]; ok {
		s, err := p.scalar(v, path+".chunk_delay")
		if err != nil {
			return st, err
		}
		d, err := time.ParseDuration(s)
		if err != nil && s == "0" {
			d, err = 0, nil
		}
		if err != nil {
			return st, p.errorf(v, path+".chunk_delay", "invalid duration %q (use a Go duration such as 100ms or 2s)", s)
		}
		if d < 0 {
			return st, p.errorf(v, path+".chunk_delay", "must not be negative, got %s", s)
		}
		st.chunkDelay = d
	}
	if v, ok := fields["error"]; ok {
		msg, err := p.scalar(v, path+".error")
		if err != nil {
			return st, err
		}
		if msg == "" {
			return st, p.errorf(v, path+".error", "must not be empty")
		}
		st.err = msg
	}
	if v, ok := fields["usage"]; ok {
		u, err := p.usage(v, path+".usage")
		if err != nil {
			return st, err
		}
		st.usage = u
	}
	if v, ok := fields["tool_calls"]; ok {
		if st.err != "" {
			return st, p.errorf(v, path+".tool_calls", "a step with error makes no tool calls")
		}
		items, err := p.sequence(v, path+".tool_calls")
		if err != nil {
			return st, err
		}
		for i, item := range items {
			tc, err := p.toolCall(item, fmt.Sprintf("%s.tool_calls[%d]", path, i))
			if err != nil {
				return st, err
			}
			st.toolCalls = append(st.toolCalls, tc)
		}
	}
	return st, nil
}

// usage reads a step's stated token usage: {input_tokens, output_tokens},
// each a whole number ≥ 0; one left out keeps its estimate.
func (p *parser) usage(n *yaml.Node, path string) (*stepUsage, error) {
	fields, err := p.mapping(n, path, "input_tokens", "output_tokens")
	if err != nil {
		return nil, err
	}
	u := &stepUsage{}
	for _, k := range []string{"input_tokens", "output_tokens"} {
		v, ok := fields[k]
		if !ok {
			continue
		}
		var c int64
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&c) != nil {
			return nil, p.errorf(v, path+"."+k, "must be a whole number, got %s", describe(v))
		}
		if c < 0 {
			return nil, p.errorf(v, path+"."+k, "must not be negative, got %d", c)
		}
		if k == "input_tokens" {
			u.input = &c
		} else {
			u.output = &c
		}
	}
	return u, nil
}

func (p *parser) toolCall(n *yaml.Node, path string) (toolCall, error) {
	var tc toolCall
	fields, err := p.mapping(n, path, "name", "input")
	if err != nil {
		return tc, err
	}
	nameNode, ok := fields["name"]
	if !ok {
		return tc, p.errorf(n, path+".name", "missing: a tool call needs the tool's name")
	}
	if tc.name, err = p.scalar(nameNode, path+".name"); err != nil {
		return tc, err
	}
	if tc.name == "" {
		return tc, p.errorf(nameNode, path+".name", "must not be empty")
	}
	in, ok := fields["input"]
	if !ok {
		tc.input = &inputValue{kind: inputObject}
		return tc, nil
	}
	if in.Kind != yaml.MappingNode {
		return tc, p.errorf(in, path+".input", "must be an object (a mapping), got %s", describe(in))
	}
	tc.input, err = p.inputValue(in, path+".input")
	return tc, err
}

// mapping checks that n is a mapping whose keys are all in known, without
// duplicates, and returns the values by key. Null values count as absent,
// so "text:" with nothing after it means no text.
func (p *parser) mapping(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, path, "must be a mapping with keys %s, got %s", strings.Join(known, ", "), describe(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		kp := joinPath(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			return nil, p.errorf(k, path, "keys must be plain names, got %s", describe(k))
		}
		if !slices.Contains(known, k.Value) {
			return nil, p.errorf(k, joinPath(path, shorten(k.Value)), "unknown field %s (known fields: %s)", describe(k), strings.Join(known, ", "))
		}
		if seen[k.Value] {
			return nil, p.errorf(k, kp, "duplicate field")
		}
		seen[k.Value] = true
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			continue
		}
		out[k.Value] = v
	}
	return out, nil
}

func (p *parser) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "must be a list, got %s", describe(n))
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = resolve(c)
	}
	return out, nil
}

// scalar returns a scalar's text; numbers and booleans are accepted as
// their spelling, since `text: 42` plainly means the text "42".
func (p *parser) scalar(n *yaml.Node, path string) (string, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return "", p.errorf(n, path, "must be a string, got %s", describe(n))
	}
	return n.Value, nil
}

func (p *parser) template(n *yaml.Node, path, src string) (*template.Template, error) {
	t, err := template.New("text").Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, p.errorf(n, path, "invalid template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	if err := checkFields(t); err != nil {
		return nil, p.errorf(n, path, "invalid template: %v", err)
	}
	return t, nil
}

// plainText reports whether t, parsed from src, is src's text alone: no
// actions, and nothing the parser left out (a comment).
func plainText(t *template.Template, src string) bool {
	if t.Tree == nil || t.Tree.Root == nil {
		return false
	}
	var text strings.Builder
	for _, n := range t.Tree.Root.Nodes {
		tn, ok := n.(*parse.TextNode)
		if !ok {
			return false
		}
		text.Write(tn.Text)
	}
	return text.String() == src
}

// checkFields rejects field names the template data does not have at load
// time rather than on the first request that reaches the step. Every field
// of the data is a string or an int, so any field access must be one of
// templateFields applied directly to the data (".Input", "$.Input").
func checkFields(t *template.Template) error {
	var walk func(n parse.Node) error
	check := func(idents []string) error {
		if len(idents) == 0 {
			return nil
		}
		if !slices.Contains(templateFields, idents[0]) {
			return fmt.Errorf("unknown field .%s (fields: .%s)", idents[0], strings.Join(templateFields, " ."))
		}
		if len(idents) > 1 {
			return fmt.Errorf(".%s has no field %s", idents[0], idents[1])
		}
		return nil
	}
	walk = func(n parse.Node) error {
		switch n := n.(type) {
		case nil:
			return nil
		case *parse.ListNode:
			if n == nil {
				return nil
			}
			for _, c := range n.Nodes {
				if err := walk(c); err != nil {
					return err
				}
			}
		case *parse.ActionNode:
			return walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return nil
			}
			for _, c := range n.Cmds {
				if err := walk(c); err != nil {
					return err
				}
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				if err := walk(a); err != nil {
					return err
				}
			}
		case *parse.FieldNode:
			return check(n.Ident)
		case *parse.VariableNode:
			if len(n.Ident) > 1 && n.Ident[0] == "$" {
				return check(n.Ident[1:])
			}
		case *parse.ChainNode:
			if err := walk(n.Node); err != nil {
				return err
			}
			if len(n.Field) > 0 {
				return fmt.Errorf("values have no field %s", n.Field[0])
			}
		case *parse.IfNode:
			return walkBranch(walk, &n.BranchNode)
		case *parse.RangeNode:
			return walkBranch(walk, &n.BranchNode)
		case *parse.WithNode:
			return walkBranch(walk, &n.BranchNode)
		case *parse.TemplateNode:
			return walk(n.Pipe)
		}
		return nil
	}
	for _, tt := range t.Templates() {
		if tt.Tree == nil {
			continue
		}
		if err := walk(tt.Root); err != nil {
			return err
		}
	}
	return nil
}

func walkBranch(walk func(parse.Node) error, b *parse.BranchNode) error {
	if err := walk(b.Pipe); err != nil {
		return err
	}
	if err := walk(b.List); err != nil {
		return err
	}
	return walk(b.ElseList)
}

// inputValue is a tool call's input: JSON whose string values may be
// templates. It is rendered at request time, in the author's key order.
type inputValue struct {
	kind    inputKind
	keys    []string      // inputObject
	items   []*inputValue // inputObject (values, parallel to keys), inputArray
	literal []byte        // inputLiteral: JSON text
	tmpl    *template.Template
}

type inputKind int

const (
	inputLiteral inputKind = iota
	inputObject
	inputArray
	inputTemplate
)

func (p *parser) inputValue(n *yaml.Node, path string) (*inputValue, error) {
	n = resolve(n)
	if p.open[n] {
		return nil, p.errorf(n, path, "an alias here includes the value it is in: the input would never end")
	}
	if p.inputValues++; p.inputValues > maxInputValues {
		return nil, p.errorf(n, path, "tool call inputs hold more than %d values (an alias counts its value each time it is used)", maxInputValues)
	}
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		if p.open == nil {
			p.open = map[*yaml.Node]bool{}
		}
		p.open[n] = true
		defer delete(p.open, n)
	}
	switch n.Kind {
	case yaml.MappingNode:
		v := &inputValue{kind: inputObject}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, p.errorf(k, path, "object keys must be plain strings, got %s", describe(k))
			}
			if seen[k.Value] {
				return nil, p.errorf(k, joinPath(path, k.Value), "duplicate key")
			}
			seen[k.Value] = true
			item, err := p.inputValue(n.Content[i+1], joinPath(path, k.Value))
			if err != nil {
				return nil, err
			}
			v.keys = append(v.keys, k.Value)
			v.items = append(v.items, item)
		}
		return v, nil
	case yaml.SequenceNode:
		v := &inputValue{kind: inputArray}
		for i, c := range n.Content {
			item, err := p.inputValue(c, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			v.items = append(v.items, item)
		}
		return v, nil
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			if strings.Contains(n.Value, "{{") {
				t, err := p.template(n, path, n.Value)
				if err != nil {
					return nil, err
				}
				return &inputValue{kind: inputTemplate, tmpl: t}, nil
			}
			b, _ := json.Marshal(n.Value)
			return &inputValue{kind: inputLiteral, literal: b}, nil
		}
		var x any
		if err := n.Decode(&x); err != nil {
			return nil, p.errorf(n, path, "invalid value %s: %v", describe(n), err)
		}
		b, err := json.Marshal(x)
		if err != nil {
			return nil, p.errorf(n, path, "value %s cannot be written as JSON", describe(n))
		}
		return &inputValue{kind: inputLiteral, literal: b}, nil
	}
	return nil, p.errorf(n, path, "unsupported value %s", describe(n))
}

func (v *inputValue) render(w *bytes.Buffer, data templateData) error {
	switch v.kind {
	case inputObject:
		w.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				w.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			w.Write(kb)
			w.WriteByte(':')
			if err := v.items[i].render(w, data); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	case inputArray:
		w.WriteByte('[')
		for i, item := range v.items {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := item.render(w, data); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case inputTemplate:
		var s strings.Builder
		if err := v.tmpl.Execute(&s, data); err != nil {
			return err
		}
		b, _ := json.Marshal(s.String())
		w.Write(b)
	default:
		w.Write(v.literal)
	}
	return nil
}

// resolve follows YAML aliases (*anchor) to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// shorten cuts a key read from the file for a path in a message.
func shorten(s string) string {
	if r := []rune(s); len(r) > maxQuoted {
		return string(r[:maxQuoted]) + "…"
	}
	return s
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names a node for error messages: a short scalar by its value,
// anything else by its kind, so that an error never quotes a long text.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		if v := n.Value; len([]rune(v)) <= maxQuoted && !strings.ContainsAny(v, "\r\n") {
			if n.ShortTag() == "!!str" {
				return strconv.Quote(v)
			}
			return v
		}
	}
	return kind(n)
}

// maxQuoted is the longest value an error message quotes.
const maxQuoted = 40

// kind names a node's kind.
func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return "a value"
	case yaml.DocumentNode:
		return "a document"
	}
	return "an unsupported value"
}
