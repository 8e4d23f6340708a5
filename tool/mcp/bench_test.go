package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/reinhq/rein/tool"
)

// BenchmarkStdioCall is one tool call's round trip to the stdio test
// server (a separate process): tool.Tool.Call → JSON-RPC over the pipes →
// the server's handler → back. Compare with BenchmarkInProcessTool.
func BenchmarkStdioCall(b *testing.B) {
	m := newManager(b, Options{Logger: discard()}, stdio("bench"))
	benchCalls(b, toolNamed(b, m, "bench__echo"))
}

// BenchmarkHTTPCall is the same over streamable HTTP on loopback, to an
// in-process server.
func BenchmarkHTTPCall(b *testing.B) {
	h := newHTTPServer(b, "bench", nil)
	m := newManager(b, Options{Logger: discard()}, h.config())
	benchCalls(b, toolNamed(b, m, "bench__echo"))
}

// BenchmarkInProcessTool is a direct call of an in-process tool.Tool doing
// the same work (decode the input, answer its text).
func BenchmarkInProcessTool(b *testing.B) {
	benchCalls(b, echoTool{})
}

func benchCalls(b *testing.B, t tool.Tool) {
	ctx := context.Background()
	c := tool.Call{ID: "toolu_bench", Name: t.Spec().Name, Input: json.RawMessage(`{"text":"hello"}`)}
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		res, err := t.Call(ctx, c)
		lat = append(lat, time.Since(start))
		if err != nil || res.Output != "hello" {
			b.Fatalf("call = %+v, %v", res, err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

type echoTool struct{}

func (echoTool) Spec() tool.Spec {
	return tool.Spec{Name: "echo", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}
}

func (echoTool) Call(_ context.Context, c tool.Call) (tool.Result, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Output: in.Text}, nil
}
