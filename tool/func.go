package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	jsonschemago "github.com/google/jsonschema-go/jsonschema"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuncOption adjusts a tool made by Func.
type FuncOption func(*funcConfig)

type funcConfig struct {
	confirm bool
	edits   []func(*jsonschemago.Schema)
}

// RequireConfirmation marks the tool as one that needs a human's
// confirmation by default (Spec.Confirm): docs/tools.md.
func RequireConfirmation() FuncOption {
	return func(c *funcConfig) { c.confirm = true }
}

// EditSchema lets f adjust the input schema inferred from In before it is
// published and compiled: what Go types cannot say (an enum, a pattern, a
// minimum). Edits run in order.
func EditSchema(f func(s *jsonschemago.Schema)) FuncOption {
	return func(c *funcConfig) { c.edits = append(c.edits, f) }
}

// Func makes a Tool of a typed Go function, so a tool is written as the
// function it is rather than as JSON handling around it.
//
// The input schema is inferred from In (github.com/google/jsonschema-go):
// a struct's exported fields are its properties, named by their json tags;
// a field without omitempty or omitzero is required; a `jsonschema:"…"`
// tag is the property's description; a struct accepts no other properties.
// In must describe a JSON object — a struct, a pointer to one, or a map
// with string keys — because that is what models send as a tool's input;
// Func panics otherwise, or when In holds a type JSON cannot carry (a
// channel, a func), as regexp.MustCompile does for a bad pattern: the type
// is fixed when the program is written.
//
// A call's input is checked against that schema (an empty input counts as
// {}) and decoded into an In; input that is not JSON, fails the schema or
// does not decode is answered with an error result saying why, and fn is
// not called. fn's error becomes an error result with its text (through a
// Registry, a stop or a timeout is reported as such). Out is the result: a
// string is the output as it is, a Result is returned unchanged (a tool
// reporting its own failure), anything else is encoded as JSON.
//
// fn's context carries the Call (CallFromContext). Its ID is the
// tool_use_id, unique and logged with the call, so a tool with side
// effects can pass it on as the idempotency key of what it does.
func Func[In, Out any](name, description string, fn func(ctx context.Context, in In) (Out, error), opts ...FuncOption) Tool {
	if fn == nil {
		panic(fmt.Sprintf("tool.Func %s: fn is nil", name))
	}
	var cfg funcConfig
	for _, o := range opts {
		o(&cfg)
	}
	typ := reflect.TypeFor[In]()
	for typ.Kind() == reflect.Pointer {
		// The input itself is never null: infer the object's schema, and
		// let decoding allocate the pointer.
		typ = typ.Elem()
	}
	sch, err := jsonschemago.ForType(typ, nil)
	if err != nil {
		panic(fmt.Sprintf("tool.Func %s: no input schema for %s: %v", name, typ, err))
	}
	if sch.Type != "object" {
		panic(fmt.Sprintf("tool.Func %s: In is %s, want a struct or a map with string keys (a tool's input is a JSON object)", name, typ))
	}
	for _, edit := range cfg.edits {
		edit(sch)
	}
	raw, err := json.Marshal(sch)
	if err != nil {
		panic(fmt.Sprintf("tool.Func %s: encode the input schema: %v", name, err))
	}
	compiled, err := compileSchema(name, raw)
	if err != nil {
		panic(fmt.Sprintf("tool.Func %s: input schema: %v", name, err))
	}
	return &funcTool[In, Out]{
		spec:   Spec{Name: name, Description: description, InputSchema: raw, Confirm: cfg.confirm},
		schema: compiled,
		fn:     fn,
	}
}

type funcTool[In, Out any] struct {
	spec   Spec
	schema *jsonschema.Schema
	fn     func(context.Context, In) (Out, error)
}

func (t *funcTool[In, Out]) Spec() Spec { return t.spec }

// Call validates with the same compiled schema and messages a Registry
// uses, so a Func called directly (a test, a program's own dispatcher)
// refuses exactly what a Registry refuses.
func (t *funcTool[In, Out]) Call(ctx context.Context, call Call) (Result, error) {
	name := t.spec.Name
	input := bytes.TrimSpace(call.Input)
	if len(input) == 0 {
		input = []byte("{}")
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return errorResult("invalid input for tool %s: not valid JSON: %v", name, err), nil
	}
	if err := t.schema.Validate(doc); err != nil {
		return errorResult("invalid input for tool %s: %s", name, validationMessage(err)), nil
	}
	var in In
	if err := json.Unmarshal(input, &in); err != nil {
		// The schema admits what the Go type may still refuse (a number
		// too large for an int field).
		return errorResult("invalid input for tool %s: %v", name, err), nil
	}
	out, err := t.fn(context.WithValue(ctx, callKey{}, call), in)
	if err != nil {
		return Result{}, err
	}
	switch v := any(out).(type) {
	case string:
		return Result{Output: v}, nil
	case Result:
		return v, nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return Result{}, fmt.Errorf("tool %s: encode its result: %w", name, err)
	}
	return Result{Output: string(b)}, nil
}

type callKey struct{}

// CallFromContext returns the Call a tool made by Func is running for; ok
// is false for a context that carries none.
func CallFromContext(ctx context.Context) (call Call, ok bool) {
	call, ok = ctx.Value(callKey{}).(Call)
	return call, ok
}
