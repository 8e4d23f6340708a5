package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/config"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/catalog"
)

// builtins are the tools Rein has before any MCP server is connected
// (docs/api.md, §8, §10); cmd/rein passes the registry's names.
var builtins = []string{
	"sleep", "write_note", "list_files", "read_file", "write_file",
	"spawn_agent", "send_message", "list_agents", "interrupt_agent",
}

// checkModel accepts the forms of model/catalog without opening anything,
// so these tests need no API keys.
func checkModel(name string) error {
	if name == "demo" {
		return nil
	}
	kind, rest, ok := strings.Cut(name, ":")
	if ok && rest != "" && slices.Contains([]string{"scripted", "openai", "ollama", "anthropic"}, kind) {
		return nil
	}
	return fmt.Errorf("%w %q: accepted forms are %s", model.ErrUnknownModel, name, catalog.Forms)
}

func options() config.Options {
	return config.Options{
		DefaultModel:    "demo",
		DefaultConfirm:  []string{"write_note", "write_file"},
		DefaultMaxSteps: 25,
		KnownTools:      builtins,
		CheckModel:      checkModel,
	}
}

func load(t *testing.T, file string) *config.Config {
	t.Helper()
	c, err := config.Load(file, options())
	if err != nil {
		t.Fatalf("Load(%s): %v", file, err)
	}
	return c
}

func TestSpecExample(t *testing.T) {
	c := load(t, "testdata/spec.yaml")
	want := &config.Config{
		File: "testdata/spec.yaml",
		Agents: map[string]*config.Agent{
			"default": {
				Name: "default", Model: "openai:gpt-4o-mini", System: "You are a careful assistant.",
				Tools:   []string{"sleep", "write_note", "calc__*"},
				Confirm: []string{"write_note", "calc__divide"}, MaxSteps: 25, Line: 2,
			},
			"researcher": {
				Name: "researcher", Model: "anthropic:claude-sonnet-4-5", System: "You research; you never write.",
				Confirm: []string{"write_note", "write_file"}, MaxSteps: 25, Line: 8,
			},
		},
		AgentNames: []string{"default", "researcher"},
		MCPServers: map[string]*config.MCPServer{
			"calc": {
				Name: "calc", Command: []string{"/usr/local/bin/calc-mcp", "--precise"},
				Env: map[string]string{"CALC_MODE": "fast"}, Line: 12,
			},
			"search": {
				Name: "search", URL: "http://127.0.0.1:9000/mcp",
				Headers: map[string]string{"Authorization": "Bearer s3cret"}, Line: 15,
			},
		},
		MCPServerNames: []string{"calc", "search"},
	}
	diff(t, c, want)
	if !c.MCPServers["calc"].Stdio() || c.MCPServers["search"].Stdio() {
		t.Errorf("Stdio: calc %v, search %v", c.MCPServers["calc"].Stdio(), c.MCPServers["search"].Stdio())
	}
	if got := c.MCPServers["calc"].ToolPrefix(); got != "calc__" {
		t.Errorf("ToolPrefix = %q", got)
	}
}

// diff compares configurations field by field, so a failure says which.
func diff(t *testing.T, got, want *config.Config) {
	t.Helper()
	if got.File != want.File || !slices.Equal(got.AgentNames, want.AgentNames) || !slices.Equal(got.MCPServerNames, want.MCPServerNames) {
		t.Errorf("File/AgentNames/MCPServerNames = %q %q %q, want %q %q %q",
			got.File, got.AgentNames, got.MCPServerNames, want.File, want.AgentNames, want.MCPServerNames)
	}
	for _, m := range []struct {
		what      string
		got, want any
	}{{"Agents", got.Agents, want.Agents}, {"MCPServers", got.MCPServers, want.MCPServers}} {
		g, w := reflect.ValueOf(m.got), reflect.ValueOf(m.want)
		for _, k := range w.MapKeys() {
			if gv := g.MapIndex(k); !gv.IsValid() {
				t.Errorf("%s[%v] missing", m.what, k)
			} else if !reflect.DeepEqual(gv.Interface(), w.MapIndex(k).Interface()) {
				t.Errorf("%s[%v] =\n  %+v\nwant\n  %+v", m.what, k, gv.Elem().Interface(), w.MapIndex(k).Elem().Interface())
			}
		}
		for _, k := range g.MapKeys() {
			if !w.MapIndex(k).IsValid() {
				t.Errorf("%s[%v] unexpected: %+v", m.what, k, g.MapIndex(k).Elem().Interface())
			}
		}
	}
}

func TestDefaultsApplied(t *testing.T) {
	c := load(t, "testdata/defaults.yaml")
	want := &config.Config{
		File: "testdata/defaults.yaml",
		Agents: map[string]*config.Agent{
			// Not in the file: added from the options, first.
			"default": {Name: "default", Model: "demo", Confirm: []string{"write_note", "write_file"}, MaxSteps: 25},
			"quiet":   {Name: "quiet", Model: "demo", Tools: []string{}, Confirm: []string{}, MaxSteps: 25, Line: 6},
			"bare":    {Name: "bare", Model: "demo", Confirm: []string{"write_note", "write_file"}, MaxSteps: 25, Line: 9},
			"helper": {
				Name: "helper", Model: "demo", System: "Two lines\nof prompt.\n",
				Tools: []string{"files__*", "*"}, Confirm: []string{"write_note", "write_file"}, MaxSteps: 16, Line: 10,
			},
		},
		AgentNames: []string{"default", "quiet", "bare", "helper"},
		MCPServers: map[string]*config.MCPServer{
			// Plain scalars in a command are strings, as written.
			"files": {Name: "files", Command: []string{"files-mcp", "--port", "8080", "--verbose", "true"}, Line: 3},
		},
		MCPServerNames: []string{"files"},
	}
	diff(t, c, want)

	// tools: [] allows nothing; an absent tools allows everything.
	if c.Agents["quiet"].Allows("sleep") || !c.Agents["bare"].Allows("anything__at_all") {
		t.Error("empty tools list must allow nothing, absent tools everything")
	}
	if c.Agents["quiet"].NeedsConfirmation("write_note") || !c.Agents["bare"].NeedsConfirmation("write_note") {
		t.Error("confirm: [] must confirm nothing, absent confirm the default set")
	}
}

func TestEmptyFilesAndDefault(t *testing.T) {
	opts := options()
	opts.DefaultModel = "ollama:qwen"
	opts.DefaultMaxSteps = 0 // means 25
	want := &config.Agent{Name: "default", Model: "ollama:qwen", Confirm: []string{"write_note", "write_file"}, MaxSteps: 25}
	for _, data := range []string{"", "# nothing\n", "~\n", "agents:\nmcp_servers:\n", "agents: {}\n", "---\n"} {
		c, err := config.Parse("e.yaml", []byte(data), opts)
		if err != nil {
			t.Errorf("Parse(%q): %v", data, err)
			continue
		}
		if !slices.Equal(c.AgentNames, []string{"default"}) || len(c.Agents) != 1 || len(c.MCPServers) != 0 || c.MCPServerNames != nil {
			t.Errorf("Parse(%q) = %+v", data, c)
		}
		if !reflect.DeepEqual(c.Agents["default"], want) {
			t.Errorf("Parse(%q) default = %+v, want %+v", data, c.Agents["default"], want)
		}
	}
	d := config.Default(opts)
	if d.File != "" || !slices.Equal(d.AgentNames, []string{"default"}) || !reflect.DeepEqual(d.Agents["default"], want) || len(d.MCPServers) != 0 {
		t.Errorf("Default = %+v (default %+v)", d, d.Agents["default"])
	}
	// The options' confirm set is copied: changing an agent's does not
	// change the next configuration's.
	d.Agents["default"].Confirm[0] = "changed"
	if opts.DefaultConfirm[0] != "write_note" {
		t.Error("Default shares Options.DefaultConfirm")
	}
	opts.DefaultConfirm = nil
	if got := config.Default(opts).Agents["default"]; got.NeedsConfirmation("write_note") {
		t.Error("nil DefaultConfirm must confirm nothing")
	}
}

func TestMergeKeysAndAliases(t *testing.T) {
	c := load(t, "testdata/merge.yaml")
	auth := map[string]string{"Authorization": "Bearer x", "X-Trace": "1"}
	want := &config.Config{
		File: "testdata/merge.yaml",
		Agents: map[string]*config.Agent{
			"default": {Name: "default", Model: "ollama:llama3.2", System: "Base prompt.", Tools: []string{"sleep", "search__*"},
				Confirm: []string{"write_note", "write_file"}, MaxSteps: 25, Line: 2},
			"writer": {Name: "writer", Model: "ollama:llama3.2", System: "You write.", Tools: []string{"write_note", "write_file"},
				Confirm: []string{"write_note", "write_file"}, MaxSteps: 25, Line: 6},
			"copy": {Name: "copy", Model: "ollama:llama3.2", System: "Base prompt.", Tools: []string{"sleep", "search__*"},
				Confirm: []string{"write_note", "write_file"}, MaxSteps: 25, Line: 10},
		},
		AgentNames: []string{"default", "writer", "copy"},
		MCPServers: map[string]*config.MCPServer{
			"search":  {Name: "search", URL: "https://search.example/mcp", Headers: auth, Line: 13},
			"search2": {Name: "search2", URL: "https://search2.example/mcp", Headers: auth, Line: 16},
		},
		MCPServerNames: []string{"search", "search2"},
	}
	diff(t, c, want)
}

// rejections are the files of testdata/invalid, each with one mistake:
// where it must be reported, and a substring of the reason.
var rejections = []struct {
	file   string
	line   int
	reason string
}{
	{"unknown_top_key.yaml", 2, `version: unknown key "version" (known keys: agents, mcp_servers, models, webhooks)`},
	{"unknown_agent_key.yaml", 4, `agents.default.prompt: unknown key "prompt"`},
	{"unknown_server_key.yaml", 4, `mcp_servers.calc.args: unknown key "args" (known keys: command, env, url, headers)`},
	{"tools_not_list.yaml", 3, `agents.default.tools: must be a list of tool names or globs, got "sleep"`},
	{"tools_item_not_string.yaml", 5, `agents.default.tools[1]: must be a string, got a mapping`},
	{"tools_null_entry.yaml", 3, `agents.default.tools[1]: must be a string, got null`},
	{"max_steps_string.yaml", 3, `agents.default.max_steps: must be a whole number, got "25"`},
	{"max_steps_float.yaml", 3, `agents.default.max_steps: must be a whole number, got "2.5" (float)`},
	{"max_steps_zero.yaml", 3, `agents.researcher.max_steps: must be at least 1, got 0`},
	{"max_steps_overflow.yaml", 3, `agents.researcher.max_steps: must be a whole number`},
	{"unknown_model.yaml", 4, `agents.default.model: unknown model "gpt-4o": accepted forms are demo | scripted:PATH`},
	{"empty_model.yaml", 3, `agents.default.model: empty (leave it out to use --model)`},
	{"tagged_model.yaml", 3, `agents.default.model: must be a string, got a value tagged "!env"`},
	{"system_list.yaml", 3, `agents.default.system: must be a string, got a list`},
	{"delegates_unknown.yaml", 3, `agents.default.delegates[1]: unknown agent "writer" (the agents of this file: default, researcher)`},
	{"delegates_not_list.yaml", 3, `agents.default.delegates: must be a list of agent names, got "researcher"`},
	{"agents_list.yaml", 2, `agents: must be a mapping of names, got a list`},
	{"agent_scalar.yaml", 2, `agents.default: must be a mapping with the keys model, system, tools, confirm, confirm_ttl, max_steps, delegates, got "demo"`},
	{"confirm_ttl_word.yaml", 3, `agents.default.confirm_ttl: must be a positive duration such as 1h or 90s, got "soon"`},
	{"confirm_ttl_number.yaml", 3, `agents.default.confirm_ttl: must be a duration such as 1h or 90s, got "3600" (int)`},
	{"confirm_ttl_negative.yaml", 3, `agents.default.confirm_ttl: must be a positive duration such as 1h or 90s, got "-1h"`},
	{"top_list.yaml", 1, `the configuration must be a mapping with the keys agents, mcp_servers, models, webhooks, got a list`},
	{"null_key.yaml", 2, `agents: keys must be names, got null`},
	{"both_command_url.yaml", 4, `mcp_servers.calc: has both command (line 5) and url (line 6)`},
	{"neither_command_url.yaml", 2, `mcp_servers.calc: needs command (a stdio server) or url (a streamable HTTP server)`},
	{"null_server.yaml", 2, `mcp_servers.calc: needs command`},
	{"empty_command.yaml", 3, `mcp_servers.calc.command: empty: give the program and its arguments`},
	{"command_string.yaml", 3, `mcp_servers.calc.command: must be a list: the program and its arguments`},
	{"command_empty_program.yaml", 3, `mcp_servers.calc.command[0]: the program's name is empty`},
	{"url_not_http.yaml", 3, `mcp_servers.search.url: "ftp://127.0.0.1/mcp" is not an http or https URL`},
	{"url_no_host.yaml", 3, `mcp_servers.search.url: "http:///mcp" has no host`},
	{"url_garbage.yaml", 3, `mcp_servers.search.url: "http://[::1/mcp" is not a URL`},
	{"server_name_dot.yaml", 2, `mcp_servers.my.calc: the name "my.calc" cannot be used in tool names`},
	{"server_name_double_underscore.yaml", 2, `the name "my__calc" cannot be used in tool names (SERVER__TOOL)`},
	{"server_name_trailing_underscore.yaml", 2, `the name "calc_" cannot be used in tool names`},
	{"server_name_leading_underscore.yaml", 2, `the name "_calc" cannot be used in tool names`},
	{"server_name_too_long.yaml", 2, `cannot be used in tool names (SERVER__TOOL): use letters, digits, - and single _ between them, at most 48 characters`},
	{"env_with_url.yaml", 4, `mcp_servers.search.env: only a stdio server (command) has an environment`},
	{"headers_with_command.yaml", 4, `mcp_servers.calc.headers: only an HTTP server (url) is sent headers`},
	{"env_value_list.yaml", 5, `mcp_servers.calc.env.MODE: must be a string, got a list`},
	{"env_name_equals.yaml", 5, `mcp_servers.calc.env.MODE=x: "MODE=x" is not a variable name`},
	{"header_name_invalid.yaml", 5, `"Bad Header" is not a header name`},
	{"tools_no_match.yaml", 5, `agents.default.tools[1]: "sleeep" matches no tool (did you mean "sleep"?); built-in tools: sleep, write_note,`},
	{"tools_unknown_server.yaml", 6, `agents.default.tools[0]: "calx__add" matches no tool: no MCP server "calx" is configured (did you mean "calc__add"?)`},
	{"tools_no_servers.yaml", 3, `"calc__*" matches no tool: no MCP server "calc" is configured; built-in tools: sleep,`},
	{"tools_server_prefix_only.yaml", 6, `"calc__" names no tool of MCP server "calc": write calc__TOOL or calc__*`},
	{"tools_glob_before_separator.yaml", 6, `"*__add" matches no tool; built-in tools: sleep, write_note, list_files, read_file, write_file, spawn_agent, send_message, list_agents, interrupt_agent; MCP tools are SERVER__TOOL for a configured server (calc)`},
	{"tools_bad_glob.yaml", 6, `agents.default.tools[0]: "calc__[a" is not a valid glob (syntax error in pattern)`},
	{"tools_empty_entry.yaml", 3, `agents.default.tools[0]: empty: write a tool's name or a glob`},
	{"confirm_no_match.yaml", 3, `agents.default.confirm[0]: "write_nte" matches no tool (did you mean "write_note"?)`},
	{"confirm_bad_glob.yaml", 3, `agents.default.confirm[0]: "write_[note" is not a valid glob`},
	{"duplicate_agent.yaml", 4, `agents.default: duplicate key (first at line 2)`},
	{"duplicate_key.yaml", 4, `agents.default.model: duplicate key (first at line 3)`},
	{"two_documents.yaml", 2, `a configuration file is one YAML document; another one starts here`},
	{"syntax_error.yaml", 4, `syntax error: did not find expected ',' or ']'`},
	{"bad_indent.yaml", 4, `syntax error: `},
	{"merge_not_mapping.yaml", 3, `agents.default: a merge (<<) takes a mapping or a list of mappings, got "1" (int)`},
	{"merge_self.yaml", 2, `agents.default: a merge (<<) includes the mapping it is in`},
}

// TestRejections checks that every kind of mistake is reported on the
// right line of the right file.
func TestRejections(t *testing.T) {
	for _, c := range rejections {
		t.Run(strings.TrimSuffix(c.file, ".yaml"), func(t *testing.T) {
			file := filepath.Join("testdata", "invalid", c.file)
			cfg, err := config.Load(file, options())
			if err == nil {
				t.Fatalf("Load succeeded: %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("Load returned a Config with its error")
			}
			var es config.Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not config.Errors: %v", err, err)
			}
			if len(es) != 1 {
				t.Fatalf("want exactly one problem, got %d:\n%v", len(es), err)
			}
			prefix := fmt.Sprintf("%s:%d: ", file, c.line)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, c.reason) {
				t.Errorf("error\n  %s\nwant prefix %q and reason containing\n  %s", msg, prefix, c.reason)
			}
			var e *config.Error
			if !errors.As(err, &e) || e.File != file || e.Line != c.line || e.Error() != err.Error() {
				t.Errorf("errors.As(*config.Error) = %+v", e)
			}
		})
	}
}

func TestEveryInvalidFileHasACase(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range rejections {
		seen[c.file] = true
	}
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/invalid files")
	}
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no case in TestRejections", f)
		}
	}
}

// TestSeveralProblems checks that all problems are reported at once, one
// per line and in file order, though servers are checked before agents.
func TestSeveralProblems(t *testing.T) {
	_, err := config.Load("testdata/several.yaml", options())
	if err == nil {
		t.Fatal("Load succeeded")
	}
	want := []string{
		`testdata/several.yaml:3: agents.default.model: unknown model "gpt-4o": accepted forms are ` + catalog.Forms,
		`testdata/several.yaml:4: agents.default.tools[0]: "sleeep" matches no tool (did you mean "sleep"?); built-in tools: ` +
			strings.Join(builtins, ", ") + `; MCP tools are SERVER__TOOL for a configured server (both, calc, search)`,
		`testdata/several.yaml:5: agents.default.max_steps: must be a whole number, got "many"`,
		`testdata/several.yaml:7: agents.researcher.prompt: unknown key "prompt" (known keys: model, system, tools, confirm, confirm_ttl, max_steps, delegates)`,
		`testdata/several.yaml:10: mcp_servers.calc.command: empty: give the program and its arguments`,
		`testdata/several.yaml:12: mcp_servers.search.url: "ftp://127.0.0.1/mcp" is not an http or https URL`,
		`testdata/several.yaml:13: mcp_servers.both: has both command (line 14) and url (line 15): a server is either stdio (command) or streamable HTTP (url)`,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	var es config.Errors
	if !errors.As(err, &es) || len(es) != len(want) {
		t.Fatalf("config.Errors = %v", es)
	}
	for i, e := range es {
		if e.Error() != want[i] {
			t.Errorf("Errors[%d] = %q", i, e)
		}
	}
}

func TestAllowsAndNeedsConfirmation(t *testing.T) {
	a := &config.Agent{
		Tools:   []string{"sleep", "calc__*", "search__get_?", "*_file", `lit\*`},
		Confirm: []string{"write_*", "calc__divide", "[bad"},
	}
	cases := []struct {
		tool            string
		allowed, needed bool
	}{
		{"sleep", true, false},
		{"sleeps", false, false},
		{"calc__add", true, false},
		{"calc__divide", true, true},
		{"calc_add", false, false},
		{"search__get_x", true, false},
		{"search__get_xy", false, false},
		{"read_file", true, false},
		{"write_file", true, true},
		{"write_note", false, true},
		{"lit*", true, false},
		{"litx", false, false},
		{"[bad", false, true}, // a malformed glob still matches its own text
		{"bad", false, false},
	}
	for _, c := range cases {
		if got := a.Allows(c.tool); got != c.allowed {
			t.Errorf("Allows(%q) = %v", c.tool, got)
		}
		if got := a.NeedsConfirmation(c.tool); got != c.needed {
			t.Errorf("NeedsConfirmation(%q) = %v", c.tool, got)
		}
	}
	all := &config.Agent{}
	if !all.Allows("anything") || all.NeedsConfirmation("anything") {
		t.Error("nil Tools must allow all, nil Confirm confirm nothing")
	}
	none := &config.Agent{Tools: []string{}}
	if none.Allows("sleep") {
		t.Error("empty Tools must allow nothing")
	}
}

// TestMayDelegate: an agent may always give a child its own agent; nil
// Delegates allow every agent, an empty list none other.
func TestMayDelegate(t *testing.T) {
	c, err := config.Parse("rein.yaml", []byte("agents:\n  default:\n    delegates: [researcher]\n  researcher:\n    delegates: []\n  writer: {}\n"), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		agent, child string
		ok           bool
	}{
		{"default", "default", true},
		{"default", "researcher", true},
		{"default", "writer", false},
		{"researcher", "researcher", true},
		{"researcher", "default", false},
		{"writer", "default", true},
		{"writer", "researcher", true},
	}
	for _, tc := range cases {
		if got := c.Agents[tc.agent].MayDelegate(tc.child); got != tc.ok {
			t.Errorf("%s.MayDelegate(%q) = %v, want %v", tc.agent, tc.child, got, tc.ok)
		}
	}
	// The default agent a file leaves out is there all the same.
	c2, err := config.Parse("rein.yaml", []byte("agents:\n  planner:\n    delegates: [default]\n"), config.Options{})
	if err != nil || !c2.Agents["planner"].MayDelegate("default") {
		t.Fatalf("delegates: [default] without a default agent in the file: %v", err)
	}
	if d := c.Agents["researcher"].Delegates; d == nil || len(d) != 0 {
		t.Errorf("delegates: [] read as %#v, want an empty, non-nil list", d)
	}
}

// TestGlobsAcceptedForMCPTools checks which entries may name tools not
// known until their server is connected.
func TestGlobsAcceptedForMCPTools(t *testing.T) {
	const head = "mcp_servers:\n  calc:\n    command: [calc]\n  web-search:\n    url: http://x/mcp\nagents:\n  default:\n    tools: "
	cases := []struct {
		entry string
		ok    bool
	}{
		{`calc__add`, true},
		{`calc__*`, true},
		{`calc__[ad]*`, true},
		{`calc__?`, true},
		{`web-search__query`, true},
		{`calc\_\_add`, true}, // escapes are literal text
		{`*`, true},           // matches built-ins
		{`write_*`, true},
		{`?leep`, true},
		{`calc__`, false},
		{`calc_*`, false}, // could match calc__x, but the prefix is not calc__
		{`ca*`, false},
		{`*__*`, false},
		{`Calc__add`, false},
		{`search__query`, false},
		{`nosuch`, false},
	}
	for _, c := range cases {
		_, err := config.Parse("g.yaml", []byte(head+fmt.Sprintf("[%q]\n", c.entry)), options())
		if (err == nil) != c.ok {
			t.Errorf("tools: [%q]: err = %v, want ok = %v", c.entry, err, c.ok)
		} else if err != nil && !strings.HasPrefix(err.Error(), "g.yaml:8: agents.default.tools[0]: ") {
			t.Errorf("tools: [%q]: %v", c.entry, err)
		}
	}
}

func TestNoCheckModelAcceptsAnyName(t *testing.T) {
	opts := options()
	opts.CheckModel = nil
	c, err := config.Parse("m.yaml", []byte("agents:\n  default:\n    model: whatever\n"), opts)
	if err != nil || c.Agents["default"].Model != "whatever" {
		t.Fatalf("Parse = %v, %v", c, err)
	}
}

// TestCatalogAsCheckModel shows the wiring cmd/rein uses: model/catalog's
// own errors become the reason.
func TestCatalogAsCheckModel(t *testing.T) {
	opts := options()
	env := catalog.Env{Getenv: func(k string) string { return map[string]string{"OPENAI_API_KEY": "sk-test"}[k] }}
	opts.CheckModel = func(name string) error { _, err := catalog.Open(name, env); return err }
	data := "agents:\n  default:\n    model: openai:gpt-4o\n  b:\n    model: gpt-4o\n  c:\n    model: anthropic:claude\n"
	_, err := config.Parse("c.yaml", []byte(data), opts)
	var es config.Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("err = %v", err)
	}
	if es[0].Line != 5 || !strings.Contains(es[0].Reason, "unknown model") || !errors.Is(es[0], model.ErrUnknownModel) {
		t.Errorf("first = %v", es[0])
	}
	if es[1].Line != 7 || !strings.Contains(es[1].Reason, "ANTHROPIC_API_KEY is not set") {
		t.Errorf("second = %v", es[1])
	}
}

// TestExampleFile loads the sample configuration at the repository root.
func TestExampleFile(t *testing.T) {
	c := load(t, "../rein.example.yaml")
	if !slices.Equal(c.AgentNames, []string{"default", "researcher"}) || !slices.Equal(c.MCPServerNames, []string{"everything", "search"}) {
		t.Fatalf("agents %q, servers %q", c.AgentNames, c.MCPServerNames)
	}
	d, r := c.Agents["default"], c.Agents["researcher"]
	if d.Model != "demo" || !d.Allows("write_file") || !d.Allows("everything__add") || d.Allows("search__query") || !d.NeedsConfirmation("write_file") ||
		!d.Allows("spawn_agent") || !slices.Equal(d.Delegates, []string{"researcher"}) || d.ConfirmTTL != time.Hour {
		t.Errorf("default = %+v", d)
	}
	if r.Model != "ollama:llama3.2" || r.MaxSteps != 40 || r.Allows("write_file") || !r.Allows("search__query") || !strings.HasPrefix(r.System, "You research") {
		t.Errorf("researcher = %+v", r)
	}
	if s := c.MCPServers["everything"]; !s.Stdio() || s.Env["NODE_ENV"] != "production" {
		t.Errorf("everything = %+v", s)
	}
	if s := c.MCPServers["search"]; s.Stdio() || s.URL == "" || s.Headers["Authorization"] == "" {
		t.Errorf("search = %+v", s)
	}
}

// TestValuesAreNotExpanded pins decision 0070: ${VAR} is text.
func TestValuesAreNotExpanded(t *testing.T) {
	t.Setenv("REIN_TEST_TOKEN", "secret")
	data := "mcp_servers:\n  s:\n    url: http://x/mcp\n    headers: {Authorization: \"Bearer ${REIN_TEST_TOKEN}\"}\n"
	c, err := config.Parse("x.yaml", []byte(data), options())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.MCPServers["s"].Headers["Authorization"]; got != "Bearer ${REIN_TEST_TOKEN}" {
		t.Errorf("header = %q", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load("testdata/does-not-exist.yaml", options())
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "testdata/does-not-exist.yaml") {
		t.Errorf("err = %v", err)
	}
}

var located = regexp.MustCompile(`^fuzz\.yaml:[1-9][0-9]*: \S`)

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/invalid/*.yaml")
	for _, file := range append(append(seeds, more...), "../rein.example.yaml") {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data, options())
		if err != nil {
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error %T is not a non-empty config.Errors: %v", err, err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(es) {
				t.Fatalf("%d problems on %d lines:\n%s", len(es), len(lines), err)
			}
			for i, l := range lines {
				if !located.MatchString(l) {
					t.Fatalf("not FILE:LINE: reason: %q", l)
				}
				if i > 0 && es[i].Line < es[i-1].Line {
					t.Fatalf("not in file order:\n%s", err)
				}
			}
			return
		}
		d := c.Agents["default"]
		if d == nil || len(c.AgentNames) != len(c.Agents) || len(c.MCPServerNames) != len(c.MCPServers) {
			t.Fatalf("inconsistent config: %+v", c)
		}
		for _, name := range c.AgentNames {
			a := c.Agents[name]
			if a == nil || a.Name != name || a.MaxSteps < 1 {
				t.Fatalf("agent %q = %+v", name, a)
			}
		}
		for _, name := range c.MCPServerNames {
			s := c.MCPServers[name]
			if s == nil || s.Name != name || (len(s.Command) == 0) == (s.URL == "") {
				t.Fatalf("server %q = %+v", name, s)
			}
		}
	})
}
