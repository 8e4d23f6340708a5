// Command embed is a Go program that embeds Rein instead of talking to
// `rein serve`: app.Open assembles the same runtime the server runs, here
// on the in-memory store, with a scripted model (so it runs offline) and
// two tools written as typed Go functions. It streams one session's
// events while two runs go by, stops the second one by its id, and prints
// both outcomes. docs/library.md walks through it.
//
//	go run ./examples/embed
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/app"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/scripted"
	"github.com/reinhq/rein/sessions"
	"github.com/reinhq/rein/tool"
)

// script stands in for a real model: asked about the weather it calls the
// weather tool and reports what it returned; asked to wait it calls pause
// for an hour — long enough to be stopped.
const script = `
rules:
  - match: "(?i)weather"
    steps:
      - text: "Let me look that up."
        tool_calls:
          - name: weather
            input: {city: "Paris"}
      - text: "Forecast: {{.ToolResult}}"
  - match: "(?i)wait"
    steps:
      - text: "Waiting."
        tool_calls:
          - name: pause
            input: {seconds: 3600}
      - text: "Done waiting."
`

// weatherInput is the weather tool's input; its JSON Schema (what the model
// is shown) is inferred from it.
type weatherInput struct {
	City  string `json:"city" jsonschema:"the city to report on"`
	Units string `json:"units,omitempty" jsonschema:"celsius (the default) or fahrenheit"`
}

type forecast struct {
	City string `json:"city"`
	Temp int    `json:"temp"`
	Sky  string `json:"sky"`
}

func weather(_ context.Context, in weatherInput) (forecast, error) {
	if in.City == "" {
		return forecast{}, fmt.Errorf("no city given")
	}
	temp := 18
	if in.Units == "fahrenheit" {
		temp = 64
	}
	return forecast{City: in.City, Temp: temp, Sky: "sunny"}, nil
}

type pauseInput struct {
	Seconds int `json:"seconds" jsonschema:"how long to wait"`
}

// pause waits, and honours its context: a stop ends it at once.
func pause(ctx context.Context, in pauseInput) (string, error) {
	select {
	case <-time.After(time.Duration(in.Seconds) * time.Second):
		return "waited", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// run is the whole program, writing what it shows to w.
func run(ctx context.Context, w io.Writer) error {
	// The model, by the name the agent is given: a script here, or
	// openai.New(...), anthropic.New(...); or a name Options.Model
	// resolves itself, such as "openai:gpt-4o".
	m, err := scripted.Parse("embed-script.yaml", []byte(script))
	if err != nil {
		return err
	}
	rt, err := app.Open(ctx, app.Options{
		Store:  "memory:",
		Models: map[string]model.Model{"embed": m},
		Model:  "embed",
		Tools: []tool.Tool{
			tool.Func("weather", "Today's weather in a city.", weather),
			tool.Func("pause", "Wait for a number of seconds.", pause),
		},
		System: "You are a helpful assistant.",
	})
	if err != nil {
		return err
	}
	// Close cancels whatever still runs, records its end, and closes the
	// store.
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		return err
	}
	svc := rt.Service()

	sess, err := svc.CreateSession(ctx, "demo-user", sessions.CreateSessionRequest{})
	if err != nil {
		return err
	}
	key := sess.Key()
	first, err := svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "What's the weather in Paris?"})
	if err != nil {
		return err
	}

	// Subscribing after the message was sent misses nothing: the
	// subscription replays the log from the cursor (0: the start), then
	// goes on live.
	var second sessions.MessageResult
	for e, err := range svc.Events(ctx, key, 0) {
		if err != nil {
			return err
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%3d %-24s %s", e.Seq, e.Type, detail(e)), " "))
		switch {
		case e.Type == rein.EventRunCompleted && e.RunID == first.RunID:
			// The first run is over: start a second one, to stop it.
			if second, err = svc.SendMessage(ctx, key, sessions.MessageRequest{Text: "Please wait for me."}); err != nil {
				return err
			}
		case e.Type == rein.EventToolUse && e.RunID == second.RunID:
			// It is inside its hour-long pause: stop exactly that run.
			res, err := svc.Interrupt(ctx, key, sessions.InterruptRequest{RunID: &second.RunID, Mode: rein.StopCancel})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "    stop accepted: %v\n", res.Accepted)
		}
		if e.Type == rein.EventRunCompleted && e.RunID == second.RunID {
			break
		}
	}

	for i, res := range []sessions.MessageResult{first, second} {
		out, err := res.Wait(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "run %d: %s %s reply=%q tokens=%d+%d\n", i+1, out.Status, out.Reason, out.Reply,
			out.Usage.InputTokens, out.Usage.OutputTokens)
	}
	return nil
}

// detail is a short summary of an event's payload (ids left out).
func detail(e rein.Event) string {
	switch e.Type {
	case rein.EventUserMessage:
		var p rein.UserMessagePayload
		if e.DecodePayload(&p) == nil {
			return fmt.Sprintf("%q", p.Text)
		}
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		if e.DecodePayload(&p) == nil {
			return fmt.Sprintf("%q", p.Text)
		}
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		if e.DecodePayload(&p) == nil {
			return fmt.Sprintf("%s %s", p.Name, p.Input)
		}
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		if e.DecodePayload(&p) == nil {
			if p.IsError {
				return fmt.Sprintf("error %q", p.Output)
			}
			return p.Output
		}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		if e.DecodePayload(&p) == nil {
			return fmt.Sprintf("%s %s", p.Status, p.Reason)
		}
	}
	return ""
}
