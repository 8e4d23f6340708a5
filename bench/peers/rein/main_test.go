package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinhq/rein/bench/peers/rein/harness"
	"github.com/reinhq/rein/store/memory"
	"github.com/reinhq/rein/store/sqlite"
)

// levels are the three Rein peers, as main offers them.
func levels() map[string]harness.Builder {
	return map[string]harness.Builder{
		"rein-engine": buildEngine,
		"rein-memory": func(ctx context.Context, cfg harness.Config) (harness.Peer, error) {
			return buildSessions(ctx, cfg, memory.New())
		},
		"rein-sqlite": func(ctx context.Context, cfg harness.Config) (harness.Peer, error) {
			st, err := sqlite.Open(ctx, filepath.Join(cfg.Dir, "rein.db"), sqlite.Options{})
			if err != nil {
				return nil, err
			}
			return buildSessions(ctx, cfg, st)
		},
	}
}

// Every level runs every workload of the harness to its checks (replies,
// tool calls, the stop's outcome: CANCELLED for a cancel, COMPLETED/
// interrupted for an interrupt), at small sizes.
func TestEveryLevelRunsEveryWorkload(t *testing.T) {
	for name, b := range levels() {
		for _, w := range harness.Workloads {
			t.Run(name+"/"+w, func(t *testing.T) {
				res, err := harness.Run(context.Background(), harness.Options{Peer: name, Workload: w, N: 8, Warmup: 2,
					StampChunks: 3, StampEvery: 5 * time.Millisecond, WaitTimeout: 30 * time.Second}, b)
				if err != nil {
					t.Fatal(err)
				}
				if w == harness.DurableStream && name == "rein-engine" {
					if res.Unsupported == "" {
						t.Fatalf("rein-engine ran %s: %+v", w, res)
					}
					return
				}
				if res.Unsupported != "" || len(res.Metrics) == 0 {
					t.Fatalf("result %+v", res)
				}
			})
		}
	}
}
