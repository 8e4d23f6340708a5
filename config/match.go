package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// checkToolPattern returns why a tools or confirm entry could match no
// tool, or "" when it can match one. A built-in tool's name is known now,
// so the entry must match it; an MCP server's tools are only known once
// the server is connected, so an entry whose literal prefix (the text
// before its first glob metacharacter) is SERVER__ for a configured server
// is accepted: calc__add, calc__*, calc__[ab]*. Decision 0070 says why this
// rule and not a more clever one.
func (p *parser) checkToolPattern(pattern string) string {
	if pattern == "" {
		return "empty: write a tool's name or a glob such as calc__*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob (%v)", pattern, err)
	}
	for _, t := range p.opts.KnownTools {
		if matchAny([]string{pattern}, t) {
			return ""
		}
	}
	prefix, literal := literalPrefix(pattern)
	server, rest, hasSep := strings.Cut(prefix, ToolSeparator)
	if hasSep && p.servers[server] {
		if !literal || rest != "" {
			return ""
		}
		return fmt.Sprintf("%q names no tool of MCP server %q: write %s__TOOL or %s__*", pattern, server, server, server)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%q matches no tool", pattern)
	servers := make([]string, 0, len(p.servers))
	for s := range p.servers {
		servers = append(servers, s)
	}
	slices.Sort(servers)
	if hasSep {
		fmt.Fprintf(&b, ": no MCP server %q is configured", server)
	}
	if near := nearest(pattern, p.opts.KnownTools, servers); near != "" {
		fmt.Fprintf(&b, " (did you mean %q?)", near)
	}
	if len(p.opts.KnownTools) > 0 {
		fmt.Fprintf(&b, "; built-in tools: %s", strings.Join(p.opts.KnownTools, ", "))
	} else {
		b.WriteString("; there are no built-in tools")
	}
	if len(servers) > 0 {
		fmt.Fprintf(&b, "; MCP tools are SERVER__TOOL for a configured server (%s)", strings.Join(servers, ", "))
	} else {
		b.WriteString("; no MCP servers are configured")
	}
	return b.String()
}

// literalPrefix returns the text pattern matches literally before its first
// metacharacter (*, ? or [), with \ escapes removed; literal reports
// whether the whole pattern is literal. pattern is a valid glob.
func literalPrefix(pattern string) (prefix string, literal bool) {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*', '?', '[':
			return b.String(), false
		case '\\':
			if i+1 < len(pattern) {
				i++
				b.WriteByte(pattern[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// nearest suggests what a mistyped entry probably meant: the built-in tool,
// or the SERVER__ prefix, closest to it by at most two edits.
func nearest(pattern string, tools, servers []string) string {
	best, bestD := "", 3
	try := func(cand, shown string) {
		if d := editDistance(pattern, cand, bestD); d < bestD && d < len(cand) {
			best, bestD = shown, d
		}
	}
	for _, t := range tools {
		try(t, t)
	}
	// calx__add → calc__add: only when the server part is written plainly.
	if s, _, ok := strings.Cut(pattern, ToolSeparator); ok && !strings.ContainsAny(s, `*?[\`) {
		for _, srv := range servers {
			if d := editDistance(s, srv, bestD); d < bestD && d < len(srv) {
				best, bestD = srv+pattern[len(s):], d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b in bytes, or limit
// when it is at least limit (tool names are short ASCII).
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}
