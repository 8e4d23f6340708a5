package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
)

// DefaultTimeout bounds a tool call when RegistryOptions.Timeout is zero.
const DefaultTimeout = 10 * time.Minute

// DefaultGrace is how long Execute waits, after a call's context ends, for
// the tool to return before abandoning it (RegistryOptions.Grace).
const DefaultGrace = time.Second

// RegistryOptions configure a Registry. The zero value is ready to use.
type RegistryOptions struct {
	// Timeout bounds every call: 0 means DefaultTimeout, a negative value
	// means no limit.
	Timeout time.Duration
	// Timeouts overrides Timeout for the named tools (same meaning of
	// negative; 0 means "use Timeout"). Naming an unregistered tool is an
	// error.
	Timeouts map[string]time.Duration
	// Confirm, when not nil, replaces the default set of tools that need a
	// human's confirmation (those whose Spec.Confirm is true): docs/cli.md
	// --confirm. A pointer to an empty list confirms nothing. Naming an
	// unregistered tool is an error, so a typo cannot silently turn a
	// confirmation off.
	Confirm *[]string
	// Grace is how long Execute still waits for a tool that has not
	// returned when its call's context ends (cancel or timeout). A tool
	// that honours its context returns within microseconds, so this only
	// bounds the damage of one that does not: it is abandoned (its result
	// discarded, a warning logged) so a stop is never held hostage. 0 means
	// DefaultGrace; a negative value means do not wait at all.
	Grace time.Duration
	// Logger receives panics (with their stacks) and abandoned tools; nil
	// discards them (a library writes no log its user did not ask for).
	Logger *slog.Logger
}

// Registry is a set of tools with their compiled input schemas, timeouts
// and confirmation policy. It is immutable after NewRegistry and safe for
// concurrent use.
type Registry struct {
	entries map[string]*entry
	names   []string // sorted
	grace   time.Duration
	logger  *slog.Logger
}

type entry struct {
	tool    Tool
	spec    Spec
	schema  *jsonschema.Schema
	timeout time.Duration // <= 0: none
	confirm bool
}

// validName is what every provider accepts as a tool name.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// defaultSchema is the input schema of a tool that declares none.
var defaultSchema = json.RawMessage(`{"type":"object"}`)

// NewRegistry registers tools. It fails (invalid_argument) on a nil tool,
// a name providers would refuse, a duplicate name, an input schema that is
// not a valid JSON Schema object, or options naming unknown tools.
func NewRegistry(opts RegistryOptions, tools ...Tool) (*Registry, error) {
	r := &Registry{entries: make(map[string]*entry, len(tools)), grace: opts.Grace, logger: opts.Logger}
	if r.grace == 0 {
		r.grace = DefaultGrace
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	for i, t := range tools {
		if t == nil {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "tool %d is nil", i)
		}
		spec := t.Spec()
		if !validName.MatchString(spec.Name) {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "tool name %q: want 1 to 64 letters, digits, '_' or '-'", spec.Name)
		}
		if _, dup := r.entries[spec.Name]; dup {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "tool %q registered twice", spec.Name)
		}
		if len(bytes.TrimSpace(spec.InputSchema)) == 0 {
			spec.InputSchema = defaultSchema
		}
		sch, err := compileSchema(spec.Name, spec.InputSchema)
		if err != nil {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "tool %q: input schema: %w", spec.Name, err)
		}
		r.entries[spec.Name] = &entry{tool: t, spec: spec, schema: sch, timeout: timeout, confirm: spec.Confirm}
		r.names = append(r.names, spec.Name)
	}
	slices.Sort(r.names)
	for name, d := range opts.Timeouts {
		e, ok := r.entries[name]
		if !ok {
			return nil, rein.Errorf(rein.CodeInvalidArgument, "timeout for unknown tool %q (tools: %s)", name, r.list())
		}
		if d != 0 {
			e.timeout = d
		}
	}
	if opts.Confirm != nil {
		for _, e := range r.entries {
			e.confirm = false
		}
		for _, name := range *opts.Confirm {
			e, ok := r.entries[name]
			if !ok {
				return nil, rein.Errorf(rein.CodeInvalidArgument, "confirmation for unknown tool %q (tools: %s)", name, r.list())
			}
			e.confirm = true
		}
	}
	return r, nil
}

// noLoader refuses every external reference: a tool's schema must be
// self-contained, and compiling it must never read files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %s: external references are not allowed", url)
}

func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("must be a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	url := "mem:///tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

func (r *Registry) list() string {
	if len(r.names) == 0 {
		return "none"
	}
	return strings.Join(r.names, ", ")
}

// Specs describes the tools, sorted by name. Each Spec's InputSchema is
// the tool's own, or {"type":"object"} when it declared none.
func (r *Registry) Specs() []Spec {
	out := make([]Spec, len(r.names))
	for i, name := range r.names {
		out[i] = r.entries[name].spec
	}
	return out
}

// ModelTools describes the tools to a model (model.Request.Tools), sorted
// by name.
func (r *Registry) ModelTools() []model.ToolSpec {
	out := make([]model.ToolSpec, len(r.names))
	for i, name := range r.names {
		s := r.entries[name].spec
		out[i] = model.ToolSpec{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema}
	}
	return out
}

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (Tool, bool) {
	e, ok := r.entries[name]
	if !ok {
		return nil, false
	}
	return e.tool, true
}

// Len is the number of tools.
func (r *Registry) Len() int { return len(r.names) }

// Filter returns a registry holding only the named tools (a subagent's tool
// filter), with the same timeouts and confirmation policy. Names it does
// not hold are ignored; a nil or empty list gives an empty registry, so a
// caller whose "no filter" means "every tool" must say so by not calling
// Filter.
func (r *Registry) Filter(names []string) *Registry {
	sub := &Registry{entries: make(map[string]*entry, len(names)), grace: r.grace, logger: r.logger}
	for _, name := range names {
		if e, ok := r.entries[name]; ok {
			if _, dup := sub.entries[name]; !dup {
				sub.entries[name] = e
				sub.names = append(sub.names, name)
			}
		}
	}
	slices.Sort(sub.names)
	return sub
}

// NeedsConfirmation reports whether a call of the named tool must be
// confirmed by a human before it runs (docs/tools.md). Unknown names report
// false: Execute refuses them anyway.
func (r *Registry) NeedsConfirmation(name string) bool {
	e, ok := r.entries[name]
	return ok && e.confirm
}

// outcome is what a tool's goroutine reports.
type outcome struct {
	res      Result
	err      error
	panicked bool
	panicVal any
}

// Execute runs one call and always answers with a Result the model can
// read; it never panics and never blocks past its context (plus Grace).
//
//   - unknown tool → an error result naming it and listing the available ones;
//   - input that is not JSON, or fails the tool's schema → an error result
//     with the reason (an empty input counts as {});
//   - the per-call timeout → "tool X timed out after D";
//   - a panic → "tool X panicked: V" (the stack goes to the log only);
//   - the tool's error → an error result with the error's text;
//   - ctx ended by the caller → rein.InterruptedToolOutput, unless the tool
//     had already finished successfully (then its real result).
func (r *Registry) Execute(ctx context.Context, call Call) (res Result) {
	defer func() {
		// Only a bug in this function could get here; the model still gets
		// an answer and the run goes on.
		if v := recover(); v != nil {
			r.logger.Error("tool registry panicked", "tool", call.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res = errorResult("tool %s failed: internal error", call.Name)
		}
	}()
	e, ok := r.entries[call.Name]
	if !ok {
		if len(r.names) == 0 {
			return errorResult("unknown tool %q: no tools are available", call.Name)
		}
		return errorResult("unknown tool %q; available tools: %s", call.Name, r.list())
	}
	if ctx.Err() != nil {
		return Result{Output: rein.InterruptedToolOutput, IsError: true}
	}
	input := bytes.TrimSpace(call.Input)
	if len(input) == 0 {
		input = []byte("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return errorResult("invalid input for tool %s: not valid JSON: %v", call.Name, err)
	}
	if err := e.schema.Validate(doc); err != nil {
		return errorResult("invalid input for tool %s: %s", call.Name, validationMessage(err))
	}
	call.Input = json.RawMessage(input)

	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if e.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, e.timeout)
	}
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			if v := recover(); v != nil {
				o = outcome{panicked: true, panicVal: v}
				r.logger.Error("tool panicked", "tool", call.Name, "tool_use_id", call.ID,
					"session", call.Session.String(), "run_id", call.RunID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			done <- o
		}()
		o.res, o.err = e.tool.Call(callCtx, call)
	}()

	var o outcome
	select {
	case o = <-done:
	case <-callCtx.Done():
		if r.grace < 0 {
			select {
			case o = <-done:
			default:
				r.abandon(call, done)
				return r.stopped(ctx, call.Name, e.timeout)
			}
		} else {
			t := time.NewTimer(r.grace)
			defer t.Stop()
			select {
			case o = <-done:
			case <-t.C:
				r.abandon(call, done)
				return r.stopped(ctx, call.Name, e.timeout)
			}
		}
	}
	switch {
	case o.panicked:
		return errorResult("tool %s panicked: %v", call.Name, o.panicVal)
	case o.err == nil && !o.res.IsError:
		return o.res
	case callCtx.Err() != nil:
		return r.stopped(ctx, call.Name, e.timeout)
	case o.err != nil:
		msg := o.err.Error()
		if msg == "" {
			msg = "tool " + call.Name + " failed"
		}
		return Result{Output: msg, IsError: true}
	default:
		return o.res
	}
}

// stopped is the result of a call whose context ended: the caller's stop,
// or the per-call timeout.
func (r *Registry) stopped(ctx context.Context, name string, timeout time.Duration) Result {
	if ctx.Err() != nil {
		return Result{Output: rein.InterruptedToolOutput, IsError: true}
	}
	return errorResult("tool %s timed out after %v", name, timeout)
}

// abandon leaves a tool that ignores its context running; when it finally
// returns, that is logged too, so the log tells how long it overstayed.
func (r *Registry) abandon(call Call, done <-chan outcome) {
	r.logger.Warn("tool did not return after its call ended; abandoning it", "tool", call.Name,
		"tool_use_id", call.ID, "session", call.Session.String(), "run_id", call.RunID, "grace", r.grace)
	start := time.Now()
	go func() {
		<-done
		r.logger.Warn("abandoned tool returned; result discarded", "tool", call.Name,
			"tool_use_id", call.ID, "late_by", time.Since(start))
	}()
}

func errorResult(format string, args ...any) Result {
	return Result{Output: fmt.Sprintf(format, args...), IsError: true}
}

// validationMessage turns a schema failure into one short line for the
// model: the innermost reasons, at most three, with where they apply
// ("seconds: got string, want number"; "missing property 'seconds'").
func validationMessage(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	p := message.NewPrinter(language.English)
	var leaves []string
	var walk func(v *jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) == 0 {
			msg := v.ErrorKind.LocalizedString(p)
			if len(v.InstanceLocation) > 0 {
				msg = strings.Join(v.InstanceLocation, "/") + ": " + msg
			}
			leaves = append(leaves, msg)
			return
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	const maxReasons = 3
	if len(leaves) > maxReasons {
		leaves = append(leaves[:maxReasons], fmt.Sprintf("and %d more", len(leaves)-maxReasons))
	}
	return strings.Join(leaves, "; ")
}
