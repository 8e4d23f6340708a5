package main

import (
	"context"
	"testing"
	"time"

	"github.com/reinhq/rein/bench/peers/adk/harness"
)

// The adapter runs every workload to the harness's checks (replies, tool
// calls, context.Canceled after a cancel), at small sizes; it has no
// cooperative stop and no durable log.
func TestEveryWorkload(t *testing.T) {
	for _, w := range harness.Workloads {
		t.Run(w, func(t *testing.T) {
			res, err := harness.Run(context.Background(), harness.Options{Peer: "adk", Workload: w, N: 8, Warmup: 2,
				WaitTimeout: 30 * time.Second}, build)
			if err != nil {
				t.Fatal(err)
			}
			unsupported := w == harness.StopBlocked || w == harness.DurableStream
			if unsupported != (res.Unsupported != "") || !unsupported && len(res.Metrics) == 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}
