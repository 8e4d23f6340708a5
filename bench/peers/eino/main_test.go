package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/bench/peers/eino/harness"
)

// The adapter runs every workload to the harness's checks (replies, tool
// calls, a CancelError after each stop), at small sizes.
func TestEveryWorkload(t *testing.T) {
	for _, w := range harness.Workloads {
		t.Run(w, func(t *testing.T) {
			res, err := harness.Run(context.Background(), harness.Options{Peer: "eino", Workload: w, N: 8, Warmup: 2,
				StopTimeout: 20 * time.Millisecond, WaitTimeout: 30 * time.Second}, build)
			if err != nil {
				t.Fatal(err)
			}
			switch w {
			case harness.DurableStream:
				if res.Unsupported == "" {
					t.Fatalf("eino ran %s: %+v", w, res)
				}
			case harness.StopBlocked:
				// A blocked model never reaches Eino's safe point: every
				// cooperative stop ends by escalating on the timeout.
				if len(res.Notes) != 2 || !strings.Contains(res.Notes[1], "10 of 10 stops escalated") {
					t.Fatalf("notes %q", res.Notes)
				}
				if res.Metrics[harness.MetricP50] < 20e3 {
					t.Fatalf("p50 %v µs, below the 20 ms timeout", res.Metrics[harness.MetricP50])
				}
			default:
				if res.Unsupported != "" || len(res.Metrics) == 0 {
					t.Fatalf("result %+v", res)
				}
			}
		})
	}
}
