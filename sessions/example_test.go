package sessions_test

import (
	"context"
	"fmt"
	"log"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/tool"
)

// The scripted model answers "add…" by calling the add tool, then reports
// its result; a real program configures an OpenAI or Anthropic model here.
const exampleScript = `
rules:
  - match: "^add"
    steps:
      - text: "adding"
        tool_calls:
          - name: add
            input: {a: 2, b: 3}
      - text: "the sum is {{.ToolResult}}"
`

type addInput struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}

func add(_ context.Context, in addInput) (int, error) { return in.A + in.B, nil }

// A Go program embeds Rein: a model, a typed tool, the agent loop and the
// sessions service on the in-memory store. It sends a message, waits for
// the run's outcome and reads the session's log.
func Example() {
	ctx := context.Background()
	model, err := scripted.Parse("example", []byte(exampleScript))
	if err != nil {
		log.Fatal(err)
	}
	tools, err := tool.NewRegistry(tool.RegistryOptions{}, tool.Func("add", "Add two integers.", add))
	if err != nil {
		log.Fatal(err)
	}
	loop, err := agent.New(agent.Config{Model: model, Tools: tools})
	if err != nil {
		log.Fatal(err)
	}
	svc, err := sessions.New(sessions.Config{Store: memory.New(), Agent: loop})
	if err != nil {
		log.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer svc.Close()

	sess, err := svc.CreateSession(ctx, "alice", sessions.CreateSessionRequest{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := svc.SendMessage(ctx, sess.Key(), sessions.MessageRequest{Text: "add 2 and 3"})
	if err != nil {
		log.Fatal(err)
	}
	out, err := res.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Status, out.Reason, out.Reply)

	// The log from the start: replayed, and it would go on live.
	for e, err := range svc.Events(ctx, sess.Key(), 0) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Seq, e.Type)
		if e.Type == rein.EventRunCompleted && e.RunID == res.RunID {
			break
		}
	}
	// Output:
	// COMPLETED stop the sum is 5
	// 1 user.message
	// 2 session.run_started
	// 3 agent.message.delta
	// 4 agent.model_request
	// 5 agent.tool_use
	// 6 agent.tool_result
	// 7 agent.message.delta
	// 8 agent.model_request
	// 9 agent.message
	// 10 session.run_completed
}
