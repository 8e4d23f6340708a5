package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the program and checks everything it prints: the events of
// both runs in log order, the stop, and the outcomes. The scripted model
// makes it deterministic, token estimates included.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := strings.TrimPrefix(`
  1 user.message             "What's the weather in Paris?"
  2 session.run_started
  3 agent.message.delta      "Let me look that up."
  4 agent.model_request
  5 agent.tool_use           weather {"city":"Paris"}
  6 agent.tool_result        {"city":"Paris","temp":18,"sky":"sunny"}
  7 agent.message.delta      "Forecast: {\"city\":\"Paris\",\"temp\":18,\"sky\":\"sunny\"}"
  8 agent.model_request
  9 agent.message
 10 session.run_completed    COMPLETED stop
 11 user.message             "Please wait for me."
 12 session.run_started
 13 agent.message.delta      "Waiting."
 14 agent.model_request
 15 agent.tool_use           pause {"seconds":3600}
    stop accepted: true
 16 user.interrupt
 17 agent.tool_result        error "tool call did not complete: the run was stopped"
 18 session.run_completed    CANCELLED cancelled
run 1: COMPLETED stop reply="Forecast: {\"city\":\"Paris\",\"temp\":18,\"sky\":\"sunny\"}" tokens=48+22
run 2: CANCELLED cancelled reply="" tokens=52+7
`, "\n")
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

// TestTools checks the two tools apart from the model: the weather tool's
// units and refusal of an empty city, and that pause honours a stop.
func TestTools(t *testing.T) {
	f, err := weather(context.Background(), weatherInput{City: "Oslo", Units: "fahrenheit"})
	if err != nil || f != (forecast{City: "Oslo", Temp: 64, Sky: "sunny"}) {
		t.Fatalf("weather: %+v %v", f, err)
	}
	if _, err := weather(context.Background(), weatherInput{}); err == nil {
		t.Fatal("weather without a city")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pause(ctx, pauseInput{Seconds: 3600}); !errors.Is(err, context.Canceled) {
		t.Fatalf("pause after a stop: %v", err)
	}
}
