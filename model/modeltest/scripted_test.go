package modeltest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/model/modeltest"
	"github.com/reinhq/rein/model/scripted"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script builds a scripted model from YAML; each scenario's script answers
// the scenario's request (modeltest.Request) the way the recordings do.
func script(src string) func(t *testing.T) model.Model {
	return func(t *testing.T) model.Model {
		t.Helper()
		m, err := scripted.Parse(t.Name()+".yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
}

// TestScripted holds the scripted model to the scenarios that make sense
// without a wire: streamed text, tool calls, and cancellation while it
// waits to stream.
func TestScripted(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name: "scripted",
		Scripts: map[modeltest.Scenario]func(t *testing.T) model.Model{
			modeltest.Text: script(`
rules:
  - steps:
      - text: "` + modeltest.TextReply + `"
        chunks: 9
`),
			modeltest.ToolCalls: script(`
rules:
  - steps:
      - text: "` + modeltest.ToolCallsText + `"
        chunks: 3
        tool_calls:
          - name: get_weather
            input: {city: Paris}
          - name: get_weather
            input: {city: Tokyo, unit: celsius}
`),
			modeltest.StallAfterHeaders: script(`
rules:
  - steps:
      - text: "never shown"
        chunk_delay: 1h
`),
		},
	})
}
