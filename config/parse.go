package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The keys each level of the file may have (docs/tools.md).
var (
	topKeys    = []string{"agents", "mcp_servers", "models", "webhooks"}
	modelKeys  = []string{"price", "context_tokens"}
	priceKeys  = []string{"input_per_mtok", "output_per_mtok"}
	agentKeys  = []string{"model", "system", "tools", "confirm", "confirm_ttl", "max_steps", "delegates"}
	serverKeys = []string{"command", "env", "url", "headers"}
)

// parser walks the YAML node tree, which keeps line numbers, and collects
// every problem instead of stopping at the first.
type parser struct {
	file string
	opts Options
	errs Errors
	// servers are the names declared under mcp_servers, valid or not (an
	// invalid name is reported once, not again by every tools entry that
	// uses it).
	servers map[string]bool
	// agents are the names declared under agents, in file order.
	agents []string
	// merged are the entries each merge source gave at a path, read once:
	// aliases let a few lines merge the same mapping exponentially many
	// times (a "billion laughs"), which must cost no more than once.
	merged map[mergeKey][]entry
}

type mergeKey struct {
	src  *yaml.Node
	path string
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	line := 1
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Reason: oneLine(fmt.Sprintf(format, args...))})
}

func (p *parser) parse(data []byte) *Config {
	c := &Config{Agents: map[string]*Agent{}, MCPServers: map[string]*MCPServer{}}
	root, ok := p.document(data)
	if !ok {
		return c
	}
	top, _ := p.mapping(root, "", "the configuration", topKeys)
	var agents, servers *entry
	for i := range top {
		switch top[i].name {
		case "agents":
			agents = &top[i]
		case "mcp_servers":
			servers = &top[i]
		case "webhooks":
			c.Webhooks = p.webhooks(&top[i])
		case "models":
			list, _ := p.mapping(top[i].value, "models", "", nil)
			for _, e := range list {
				if m := p.model(e); m != nil {
					if c.Models == nil {
						c.Models = map[string]*Model{}
					}
					c.Models[m.Name] = m
				}
			}
		}
	}
	// Servers first, wherever they are in the file: tools entries are
	// checked against their names.
	p.servers = map[string]bool{}
	if servers != nil {
		list, _ := p.mapping(servers.value, "mcp_servers", "", nil)
		for _, e := range list {
			p.servers[e.name] = true
		}
		for _, e := range list {
			if s := p.server(e); s != nil {
				c.MCPServers[s.Name] = s
				c.MCPServerNames = append(c.MCPServerNames, s.Name)
			}
		}
	}
	if agents != nil {
		list, _ := p.mapping(agents.value, "agents", "", nil)
		// Every name first: delegates entries are checked against them.
		// A file without a default agent gets one from the flags, which
		// may be named too.
		p.agents = p.agents[:0]
		for _, e := range list {
			p.agents = append(p.agents, e.name)
		}
		if !slices.Contains(p.agents, DefaultAgent) {
			p.agents = append([]string{DefaultAgent}, p.agents...)
		}
		for _, e := range list {
			if a := p.agent(e); a != nil {
				c.Agents[a.Name] = a
				c.AgentNames = append(c.AgentNames, a.Name)
			}
		}
	}
	return c
}

// document decodes data into its root node; ok is false when there is no
// usable one (an empty file is a valid, empty configuration: root nil).
func (p *parser) document(data []byte) (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		p.syntaxError(data, err)
		return nil, false
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "a configuration file is one YAML document; another one starts here")
		return nil, false
	} else if !errors.Is(err, io.EOF) {
		p.syntaxError(data, err)
		return nil, false
	}
	root = &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return root, true
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

// syntaxError locates a YAML syntax error. The parser often reports the
// line where the enclosing construct began, or none at all, so find the
// shortest prefix of the file, in whole lines, that fails with the same
// message: its last line is where the problem is (as model/scripted does).
func (p *parser) syntaxError(data []byte, err error) {
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
	p.errs = append(p.errs, &Error{File: p.file, Line: max(line, 1), Reason: oneLine("syntax error: " + msg)})
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

// entry is one key of a mapping with its (alias-resolved) value.
type entry struct {
	key   *yaml.Node
	name  string
	path  string // e.g. "agents.default"
	value *yaml.Node
}

// mapping returns the entries of the mapping n in file order, with YAML
// merge keys (<<: *anchor) applied: keys written in n win over merged ones,
// and earlier merges over later ones. A null n is an empty mapping, since
// every key is optional. Keys that are not names, duplicates and, when
// known is not nil, keys not in known are reported and left out. ok is
// false when n is not a mapping at all; what names n in that error ("" for
// "path: must be a mapping").
func (p *parser) mapping(n *yaml.Node, path, what string, known []string) (out []entry, ok bool) {
	return p.mappingIn(n, path, what, known, map[*yaml.Node]bool{})
}

func (p *parser) mappingIn(n *yaml.Node, path, what string, known []string, visiting map[*yaml.Node]bool) ([]entry, bool) {
	n = resolve(n)
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		subject := path + ": must"
		if what != "" {
			subject = what + " must"
		}
		if known != nil {
			p.errorf(n, "%s be a mapping with the keys %s, got %s", subject, strings.Join(known, ", "), describe(n))
		} else {
			p.errorf(n, "%s be a mapping of names, got %s", subject, describe(n))
		}
		return nil, false
	}
	visiting[n] = true
	defer delete(visiting, n)
	var out []entry
	have := map[string]int{} // name → line of its key
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		rk := resolve(k)
		if rk.Kind == yaml.ScalarNode && rk.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if rk.Kind != yaml.ScalarNode || isNull(rk) || rk.Value == "" {
			p.errorf(k, "%s: keys must be names, got %s", orTop(path), describe(rk))
			continue
		}
		kp := joinPath(path, rk.Value)
		if known != nil && !slices.Contains(known, rk.Value) {
			p.errorf(k, "%s: unknown key %q (known keys: %s)", kp, rk.Value, strings.Join(known, ", "))
			continue
		}
		if first, dup := have[rk.Value]; dup {
			p.errorf(k, "%s: duplicate key (first at line %d)", kp, first)
			continue
		}
		have[rk.Value] = k.Line
		out = append(out, entry{key: k, name: rk.Value, path: kp, value: resolve(v)})
	}
	for _, m := range merges {
		rm := resolve(m)
		sources := []*yaml.Node{rm}
		if rm.Kind == yaml.SequenceNode {
			sources = rm.Content
		}
		for _, src := range sources {
			src = resolve(src)
			if src.Kind != yaml.MappingNode {
				p.errorf(src, "%s: a merge (<<) takes a mapping or a list of mappings, got %s", orTop(path), describe(src))
				continue
			}
			if visiting[src] {
				p.errorf(src, "%s: a merge (<<) includes the mapping it is in", orTop(path))
				continue
			}
			k := mergeKey{src, path}
			merged, done := p.merged[k]
			if !done {
				merged, _ = p.mappingIn(src, path, what, known, visiting)
				if p.merged == nil {
					p.merged = map[mergeKey][]entry{}
				}
				p.merged[k] = merged
			}
			for _, e := range merged {
				if _, dup := have[e.name]; !dup {
					have[e.name] = e.key.Line
					out = append(out, e)
				}
			}
		}
	}
	return out, true
}

func (p *parser) agent(e entry) *Agent {
	a := &Agent{Name: e.name, Line: e.key.Line, MaxSteps: p.opts.maxSteps(), Model: p.opts.DefaultModel}
	fields, ok := p.mapping(e.value, e.path, "", agentKeys)
	if !ok {
		return nil
	}
	confirmSet := false
	for _, f := range fields {
		switch f.name {
		case "model":
			if isNull(f.value) {
				continue
			}
			s, ok := p.str(f.value, f.path)
			if !ok {
				continue
			}
			if strings.TrimSpace(s) == "" {
				p.errorf(f.value, "%s: empty (leave it out to use --model)", f.path)
				continue
			}
			if p.opts.CheckModel != nil {
				if err := p.opts.CheckModel(s); err != nil {
					p.errorf(f.value, "%s: %v", f.path, err)
					p.errs[len(p.errs)-1].Err = err
					continue
				}
			}
			a.Model = s
		case "system":
			if isNull(f.value) {
				continue
			}
			if s, ok := p.str(f.value, f.path); ok {
				a.System = s
			}
		case "tools":
			if isNull(f.value) {
				continue // absent: every tool
			}
			a.Tools = p.toolList(f.value, f.path)
		case "confirm":
			if isNull(f.value) {
				continue // absent: the default set
			}
			a.Confirm = p.toolList(f.value, f.path)
			confirmSet = true
		case "confirm_ttl":
			if isNull(f.value) {
				continue // absent: --confirmation-ttl
			}
			if d, ok := p.duration(f.value, f.path); ok {
				a.ConfirmTTL = d
			}
		case "max_steps":
			if isNull(f.value) {
				continue
			}
			n, ok := p.integer(f.value, f.path)
			if !ok {
				continue
			}
			if n < 1 {
				p.errorf(f.value, "%s: must be at least 1, got %d", f.path, n)
				continue
			}
			a.MaxSteps = n
		case "delegates":
			if isNull(f.value) {
				continue // absent: every agent
			}
			a.Delegates = p.agentList(f.value, f.path)
		}
	}
	if !confirmSet {
		a.Confirm = slices.Clone(p.opts.DefaultConfirm)
	}
	return a
}

// agentList reads a delegates list: names of agents of the file. The
// result is never nil (an empty list is an explicit "none but its own").
func (p *parser) agentList(n *yaml.Node, path string) []string {
	items, nodes := p.strList(n, path, "agent names")
	out := make([]string, 0, len(items))
	for i, name := range items {
		if !slices.Contains(p.agents, name) {
			p.errorf(nodes[i], "%s[%d]: unknown agent %q (the agents of this file: %s)", path, i, name, strings.Join(p.agents, ", "))
			continue
		}
		out = append(out, name)
	}
	return out
}

// toolList reads a tools or confirm list: names or globs, each of which
// must be able to match a tool. The result is never nil (an empty list is
// an explicit "none").
func (p *parser) toolList(n *yaml.Node, path string) []string {
	items, nodes := p.strList(n, path, "tool names or globs")
	out := make([]string, 0, len(items))
	for i, pattern := range items {
		if reason := p.checkToolPattern(pattern); reason != "" {
			p.errorf(nodes[i], "%s[%d]: %s", path, i, reason)
		}
		out = append(out, pattern)
	}
	return out
}

// serverName is the rule of tool/mcp's Server.Validate, checked here so
// that a bad name is reported with its line: letters, digits and -, with
// single _ between them (so the first __ of SERVER__TOOL ends the server's
// name), at most maxServerName long (leaving room for the tool's name in
// the 64 characters providers accept).
var serverName = regexp.MustCompile(`^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$`)

const maxServerName = 48

func (p *parser) server(e entry) *MCPServer {
	s := &MCPServer{Name: e.name, Line: e.key.Line}
	if !serverName.MatchString(e.name) || len(e.name) > maxServerName {
		p.errorf(e.key, "%s: the name %q cannot be used in tool names (SERVER__TOOL): use letters, digits, - and single _ between them, at most %d characters", e.path, e.name, maxServerName)
	}
	if isNull(e.value) {
		p.errorf(e.key, "%s: needs command (a stdio server) or url (a streamable HTTP server)", e.path)
		return nil
	}
	fields, ok := p.mapping(e.value, e.path, "", serverKeys)
	if !ok {
		return nil
	}
	var command, endpoint, env, headers *entry
	for i := range fields {
		f := &fields[i]
		if isNull(f.value) {
			continue
		}
		switch f.name {
		case "command":
			command = f
			s.Command = p.command(f)
		case "url":
			endpoint = f
			s.URL = p.url(f)
		case "env":
			env = f
			s.Env = p.strMap(f, checkEnvName, checkEnvValue)
		case "headers":
			headers = f
			s.Headers = p.strMap(f, checkHeaderName, checkHeaderValue)
		}
	}
	switch {
	case command != nil && endpoint != nil:
		p.errorf(e.key, "%s: has both command (line %d) and url (line %d): a server is either stdio (command) or streamable HTTP (url)", e.path, command.key.Line, endpoint.key.Line)
	case command == nil && endpoint == nil:
		p.errorf(e.key, "%s: needs command (a stdio server) or url (a streamable HTTP server)", e.path)
	case endpoint != nil && env != nil:
		p.errorf(env.key, "%s: only a stdio server (command) has an environment; an HTTP server takes headers", env.path)
	case command != nil && headers != nil:
		p.errorf(headers.key, "%s: only an HTTP server (url) is sent headers; a stdio server takes env", headers.path)
	}
	return s
}

func (p *parser) command(f *entry) []string {
	if f.value.Kind == yaml.ScalarNode {
		p.errorf(f.value, "%s: must be a list: the program and its arguments, e.g. [\"/usr/local/bin/calc-mcp\", \"--precise\"], got %s", f.path, describe(f.value))
		return nil
	}
	items, nodes := p.strList(f.value, f.path, "strings (the program and its arguments)")
	if len(items) == 0 && f.value.Kind == yaml.SequenceNode && len(f.value.Content) == 0 {
		p.errorf(f.value, "%s: empty: give the program and its arguments", f.path)
		return nil
	}
	if len(items) > 0 && strings.TrimSpace(items[0]) == "" {
		p.errorf(nodes[0], "%s[0]: the program's name is empty", f.path)
	}
	for i, s := range items {
		if strings.ContainsRune(s, 0) {
			p.errorf(nodes[i], "%s[%d]: contains a NUL byte", f.path, i)
		}
	}
	return items
}

func (p *parser) url(f *entry) string {
	s, ok := p.str(f.value, f.path)
	if !ok {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		p.errorf(f.value, "%s: %q is not a URL: %v", f.path, s, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		p.errorf(f.value, "%s: %q is not an http or https URL", f.path, s)
	case u.Host == "":
		p.errorf(f.value, "%s: %q has no host", f.path, s)
	default:
		return s
	}
	return ""
}

// strMap reads a mapping of names to strings (env, headers); the checks
// return a reason for a bad name or value, or "".
func (p *parser) strMap(f *entry, checkName, checkValue func(string) string) map[string]string {
	fields, ok := p.mapping(f.value, f.path, "", nil)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(fields))
	for _, e := range fields {
		if r := checkName(e.name); r != "" {
			p.errorf(e.key, "%s: %s", e.path, r)
		}
		v, ok := p.str(e.value, e.path)
		if !ok {
			continue
		}
		if r := checkValue(v); r != "" {
			p.errorf(e.value, "%s: %s", e.path, r)
		}
		out[e.name] = v
	}
	return out
}

func checkEnvName(s string) string {
	if strings.ContainsAny(s, "=\x00") {
		return fmt.Sprintf("%q is not a variable name (no = or NUL)", s)
	}
	return ""
}

func checkEnvValue(s string) string {
	if strings.ContainsRune(s, 0) {
		return "the value contains a NUL byte"
	}
	return ""
}

// checkHeaderName accepts an RFC 9110 token.
func checkHeaderName(s string) string {
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return fmt.Sprintf("%q is not a header name", s)
		}
	}
	return ""
}

func checkHeaderValue(s string) string {
	if strings.ContainsAny(s, "\r\n\x00") {
		return "the value contains a line break or NUL byte"
	}
	return ""
}

// str reads a string. Any plain scalar is one, written as in the file
// (port: 8080 reads as "8080", in a command too); null, lists, mappings
// and values with other tags (!env X, !!binary) are not.
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float", "!!bool", "!!timestamp":
			return n.Value, true
		}
	}
	p.errorf(n, "%s: must be a string, got %s", path, describe(n))
	return "", false
}

// strList reads a list of strings; a bad item is reported and left out
// (nodes holds the kept items' nodes, for their lines).
func (p *parser) strList(n *yaml.Node, path, of string) (items []string, nodes []*yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: must be a list of %s, got %s", path, of, describe(n))
		return nil, nil
	}
	for i, it := range n.Content {
		it = resolve(it)
		if s, ok := p.str(it, fmt.Sprintf("%s[%d]", path, i)); ok {
			items = append(items, s)
			nodes = append(nodes, it)
		}
	}
	return items, nodes
}

// model reads one entry of the top-level models map: a model's price and
// context budget (docs/models.md "Prices").
func (p *parser) model(e entry) *Model {
	m := &Model{Name: e.name, Line: e.key.Line}
	fields, ok := p.mapping(e.value, e.path, "", modelKeys)
	if !ok {
		return nil
	}
	for _, f := range fields {
		if isNull(f.value) {
			continue
		}
		switch f.name {
		case "price":
			pf, ok := p.mapping(f.value, f.path, "", priceKeys)
			if !ok {
				continue
			}
			price := &Price{}
			have := map[string]bool{}
			for _, k := range pf {
				v, ok := p.number(k.value, k.path)
				if !ok {
					continue
				}
				if v < 0 {
					p.errorf(k.value, "%s: must not be negative, got %v", k.path, v)
					continue
				}
				have[k.name] = true
				if k.name == "input_per_mtok" {
					price.InputPerMTok = v
				} else {
					price.OutputPerMTok = v
				}
			}
			if !have["input_per_mtok"] || !have["output_per_mtok"] {
				p.errorf(f.value, "%s: needs input_per_mtok and output_per_mtok (USD per million tokens)", f.path)
				continue
			}
			m.Price = price
		case "context_tokens":
			n, ok := p.integer(f.value, f.path)
			if !ok {
				continue
			}
			if n < 1 {
				p.errorf(f.value, "%s: must be at least 1, got %d", f.path, n)
				continue
			}
			m.ContextTokens = n
		}
	}
	return m
}

// number reads a finite number (a whole number is one too).
func (p *parser) number(n *yaml.Node, path string) (float64, bool) {
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.errorf(n, "%s: must be a number, got %s", path, describe(n))
		return 0, false
	}
	return v, true
}

func (p *parser) integer(n *yaml.Node, path string) (int, bool) {
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s: must be a whole number, got %s", path, describe(n))
		return 0, false
	}
	return v, true
}

// duration reads a positive duration written as Go writes one ("90s",
// "1h30m").
func (p *parser) duration(n *yaml.Node, path string) (time.Duration, bool) {
	var s string
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" || n.Decode(&s) != nil {
		p.errorf(n, "%s: must be a duration such as 1h or 90s, got %s", path, describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		p.errorf(n, "%s: must be a positive duration such as 1h or 90s, got %q", path, s)
		return 0, false
	}
	return d, true
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return "null"
		case "!!str":
			return strconv.Quote(n.Value)
		case "!!int", "!!float", "!!bool", "!!timestamp":
			return strconv.Quote(n.Value) + " (" + strings.TrimPrefix(tag, "!!") + ")"
		default:
			return "a value tagged " + strconv.Quote(tag)
		}
	case yaml.AliasNode:
		return "an unresolved alias"
	}
	return "nothing"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "the configuration"
	}
	return path
}
