package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/tool"
)

// searchArgs exercises what inference reads: json names, omitempty as
// optional, jsonschema descriptions, nested structs and slices, and fields
// that are not part of the input.
type searchArgs struct {
	Query   string   `json:"query" jsonschema:"what to look for"`
	Limit   int      `json:"limit,omitempty" jsonschema:"at most this many hits"`
	Tags    []string `json:"tags,omitempty"`
	Options struct {
		Exact bool `json:"exact"`
	} `json:"options"`
	Ignored string `json:"-"`
	hidden  int    // unexported: no property
}

type searchHit struct {
	Title string `json:"title"`
	Score int    `json:"score"`
}

func search(_ context.Context, in searchArgs) ([]searchHit, error) {
	if in.Query == "fail" {
		return nil, errors.New("the index is offline")
	}
	n := max(in.Limit, 1+in.hidden)
	hits := make([]searchHit, 0, n)
	for i := range n {
		hits = append(hits, searchHit{Title: in.Query, Score: 100 - i})
	}
	return hits, nil
}

// TestFuncSchemaSnapshot pins the schema a struct with json tags infers to:
// it is what every model is shown, so a change must be deliberate.
func TestFuncSchemaSnapshot(t *testing.T) {
	spec := tool.Func("search", "Search the index.", search).Spec()
	const want = `{"type":"object","properties":{` +
		`"query":{"type":"string","description":"what to look for"},` +
		`"limit":{"type":"integer","description":"at most this many hits"},` +
		`"tags":{"type":["null","array"],"items":{"type":"string"}},` +
		`"options":{"type":"object","properties":{"exact":{"type":"boolean"}},"required":["exact"],"additionalProperties":false}},` +
		`"required":["query","options"],"additionalProperties":false}`
	if got := string(spec.InputSchema); got != want {
		t.Fatalf("schema\n got %s\nwant %s", got, want)
	}
	if spec.Name != "search" || spec.Description != "Search the index." || spec.Confirm {
		t.Fatalf("spec %+v", spec)
	}
}

func TestFuncOptions(t *testing.T) {
	spec := tool.Func("search", "d", search, tool.RequireConfirmation(), tool.EditSchema(func(s *jsonschema.Schema) {
		s.Properties["limit"].Minimum = jsonschema.Ptr(1.0)
	})).Spec()
	if !spec.Confirm {
		t.Fatal("RequireConfirmation did not mark the spec")
	}
	if !strings.Contains(string(spec.InputSchema), `"limit":{"type":"integer","description":"at most this many hits","minimum":1}`) {
		t.Fatalf("edited schema %s", spec.InputSchema)
	}
	// The edit is enforced, not only shown.
	res, err := tool.Func("search", "d", search, tool.EditSchema(func(s *jsonschema.Schema) {
		s.Properties["limit"].Minimum = jsonschema.Ptr(1.0)
	})).Call(context.Background(), tool.Call{Input: json.RawMessage(`{"query":"q","options":{"exact":true},"limit":0}`)})
	if err != nil || !res.IsError || !strings.Contains(res.Output, "limit") {
		t.Fatalf("limit 0 against minimum 1: %+v, %v", res, err)
	}
}

// TestFuncCall calls a Func directly, as a program's own dispatcher would:
// bad input is refused with a readable error result before fn runs.
func TestFuncCall(t *testing.T) {
	called := 0
	f := tool.Func("search", "d", func(ctx context.Context, in searchArgs) ([]searchHit, error) {
		called++
		return search(ctx, in)
	})
	cases := []struct {
		name, input string
		isError     bool
		want        string // substring of the output
	}{
		{"ok", `{"query":"go","limit":2,"options":{"exact":false}}`, false, `[{"title":"go","score":100},{"title":"go","score":99}]`},
		{"not json", `{"query":`, true, "invalid input for tool search: not valid JSON"},
		{"missing required", `{"query":"go"}`, true, "invalid input for tool search: missing property 'options'"},
		{"wrong type", `{"query":7,"options":{"exact":true}}`, true, "invalid input for tool search: query: got number, want string"},
		{"unknown property", `{"query":"go","options":{"exact":true},"colour":"red"}`, true, "invalid input for tool search: additional properties 'colour' not allowed"},
		{"empty is {}", ``, true, "missing properties 'query', 'options'"},
		{"too large for int", `{"query":"go","options":{"exact":true},"limit":1e30}`, true, "invalid input for tool search: json: cannot unmarshal number 1e30"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := called
			res, err := f.Call(context.Background(), tool.Call{ID: "toolu_1", Name: "search", Input: json.RawMessage(c.input)})
			if err != nil {
				t.Fatalf("Call returned error %v; bad input must be a result", err)
			}
			if res.IsError != c.isError || !strings.Contains(res.Output, c.want) {
				t.Fatalf("got %+v, want isError=%v containing %q", res, c.isError, c.want)
			}
			if c.isError && called != before {
				t.Fatal("fn ran on bad input")
			}
		})
	}
	// fn's error is the tool's error.
	_, err := f.Call(context.Background(), tool.Call{Input: json.RawMessage(`{"query":"fail","options":{"exact":true}}`)})
	if err == nil || err.Error() != "the index is offline" {
		t.Fatalf("fn error: %v", err)
	}
}

func TestFuncOutputs(t *testing.T) {
	type empty struct{}
	ctx := context.Background()
	text := tool.Func("text", "d", func(context.Context, empty) (string, error) { return "plain \"text\"", nil })
	if res, _ := text.Call(ctx, tool.Call{}); res.Output != `plain "text"` || res.IsError {
		t.Fatalf("string Out: %+v", res)
	}
	own := tool.Func("own", "d", func(context.Context, empty) (tool.Result, error) {
		return tool.Result{Output: "no such file", IsError: true}, nil
	})
	if res, _ := own.Call(ctx, tool.Call{}); res.Output != "no such file" || !res.IsError {
		t.Fatalf("Result Out: %+v", res)
	}
	bad := tool.Func("bad", "d", func(context.Context, empty) (func(), error) { return func() {}, nil })
	if _, err := bad.Call(ctx, tool.Call{}); err == nil || !strings.Contains(err.Error(), "tool bad: encode its result") {
		t.Fatalf("unencodable Out: %v", err)
	}
	// A pointer In is decoded into a fresh value; a map In takes any object.
	ptr := tool.Func("ptr", "d", func(_ context.Context, in *searchArgs) (int, error) { return len(in.Query), nil })
	if string(ptr.Spec().InputSchema) != string(tool.Func("v", "d", search).Spec().InputSchema) {
		t.Fatalf("*T and T infer differently: %s", ptr.Spec().InputSchema)
	}
	if res, _ := ptr.Call(ctx, tool.Call{Input: json.RawMessage(`{"query":"four","options":{"exact":true}}`)}); res.Output != "4" {
		t.Fatalf("pointer In: %+v", res)
	}
	m := tool.Func("map", "d", func(_ context.Context, in map[string]any) (int, error) { return len(in), nil })
	if res, _ := m.Call(ctx, tool.Call{Input: json.RawMessage(`{"a":1,"b":[2]}`)}); res.Output != "2" {
		t.Fatalf("map In: %+v", res)
	}
}

// TestFuncCallFromContext: fn sees its Call, whose ID is the idempotency key
// of a side effect.
func TestFuncCallFromContext(t *testing.T) {
	var seen tool.Call
	f := tool.Func("charge", "d", func(ctx context.Context, in struct {
		Cents int `json:"cents"`
	}) (string, error) {
		c, ok := tool.CallFromContext(ctx)
		if !ok {
			return "", errors.New("no call in context")
		}
		seen = c
		return "charged", nil
	})
	call := tool.Call{ID: "toolu_42", Name: "charge", Input: json.RawMessage(`{"cents":100}`),
		Session: rein.SessionKey{Owner: "o", ID: "s"}, RunID: "run_1", Step: 2}
	if res, err := f.Call(context.Background(), call); err != nil || res.Output != "charged" {
		t.Fatalf("%+v %v", res, err)
	}
	if seen.ID != "toolu_42" || seen.RunID != "run_1" || seen.Step != 2 || seen.Session.ID != "s" {
		t.Fatalf("call in context %+v", seen)
	}
	if _, ok := tool.CallFromContext(context.Background()); ok {
		t.Fatal("a bare context carries a call")
	}
}

// TestFuncThroughRegistry runs a Func the way the agent loop does.
func TestFuncThroughRegistry(t *testing.T) {
	reg, err := tool.NewRegistry(tool.RegistryOptions{}, tool.Func("search", "Search the index.", search))
	if err != nil {
		t.Fatal(err)
	}
	specs := reg.ModelTools()
	if len(specs) != 1 || specs[0].Name != "search" || !strings.Contains(string(specs[0].InputSchema), `"required":["query","options"]`) {
		t.Fatalf("model tools %+v", specs)
	}
	ctx := context.Background()
	if res := reg.Execute(ctx, tool.Call{ID: "t1", Name: "search", Input: json.RawMessage(`{"query":"x","options":{"exact":true}}`)}); res.IsError || res.Output != `[{"title":"x","score":100}]` {
		t.Fatalf("good call %+v", res)
	}
	if res := reg.Execute(ctx, tool.Call{ID: "t2", Name: "search", Input: json.RawMessage(`{"options":{"exact":true}}`)}); !res.IsError || res.Output != "invalid input for tool search: missing property 'query'" {
		t.Fatalf("missing query %+v", res)
	}
	if res := reg.Execute(ctx, tool.Call{ID: "t3", Name: "search", Input: json.RawMessage(`{"query":"fail","options":{"exact":true}}`)}); !res.IsError || res.Output != "the index is offline" {
		t.Fatalf("fn error %+v", res)
	}
	// A stop reaches fn through its context, and the registry reports it.
	block := tool.Func("block", "d", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	reg, err = tool.NewRegistry(tool.RegistryOptions{}, block)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if res := reg.Execute(cctx, tool.Call{ID: "t4", Name: "block"}); !res.IsError || res.Output != rein.InterruptedToolOutput {
		t.Fatalf("cancelled call %+v", res)
	}
}

func TestFuncPanicsOnInputThatIsNoObject(t *testing.T) {
	for name, mk := range map[string]func(){
		"string": func() {
			tool.Func("s", "d", func(context.Context, string) (string, error) { return "", nil })
		},
		"slice": func() {
			tool.Func("s", "d", func(context.Context, []int) (string, error) { return "", nil })
		},
		"channel field": func() {
			tool.Func("s", "d", func(context.Context, struct{ C chan int }) (string, error) { return "", nil })
		},
		"nil fn": func() { tool.Func[struct{}, string]("s", "d", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				v := recover()
				if v == nil {
					t.Fatal("no panic")
				}
				if msg, _ := v.(string); !strings.HasPrefix(msg, "tool.Func s: ") {
					t.Fatalf("panic %v", v)
				}
			}()
			mk()
		})
	}
}
