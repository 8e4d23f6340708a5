package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHarnessCopiesAreIdentical holds every Go peer to the one harness:
// a copy that drifted would measure that peer differently.
func TestHarnessCopiesAreIdentical(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("harness", "harness.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"eino", "adk", "rein"} {
		got, err := os.ReadFile(filepath.Join(p, "harness", "harness.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s/harness/harness.go differs from harness/harness.go: cp harness/harness.go %s/harness/", p, p)
		}
	}
}

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Stat
	}{
		{nil, Stat{}},
		{[]float64{3, 1, 2}, Stat{Median: 2, Min: 1, Max: 3, N: 3}},
		{[]float64{4, 1, 3, 2}, Stat{Median: 2.5, Min: 1, Max: 4, N: 4}},
	} {
		if got := Summarize(c.in); got != c.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func res(peer, cs string, round int, m map[string]float64) Result {
	return Result{Peer: peer, Case: cs, Workload: cs, Round: round, N: 10, Metrics: m}
}

// Ratios pair a Rein level with a peer round by round, skipping rounds
// where either has no number.
func TestRatiosPairRounds(t *testing.T) {
	rs := []Result{
		res("rein-engine", "instant", 1, map[string]float64{"p50_us": 10}),
		res("eino", "instant", 1, map[string]float64{"p50_us": 40}),
		res("rein-engine", "instant", 2, map[string]float64{"p50_us": 12}),
		{Peer: "eino", Case: "instant", Round: 2, Failed: "boom"},
		res("rein-engine", "instant", 3, map[string]float64{"p50_us": 30}),
		res("eino", "instant", 3, map[string]float64{"p50_us": 60}),
		res("eino", "tool_stream", 1, map[string]float64{"p50_us": 1}),
	}
	got := Ratios(rs, "instant", "rein-engine", "eino", "p50_us")
	if len(got) != 2 || got[0] != 0.25 || got[1] != 0.5 {
		t.Fatalf("Ratios = %v, want [0.25 0.5]", got)
	}
	if v := Values(rs, "instant", "eino", "p50_us"); len(v) != 2 || v[0] != 40 || v[1] != 60 {
		t.Fatalf("Values = %v", v)
	}
}

func TestReport(t *testing.T) {
	ps := peers("bin")
	cs := cases()
	rs := []Result{
		res("eino", "instant", 1, map[string]float64{"p50_us": 50, "p99_us": 100, "allocs_per_op": 1000}),
		res("eino", "instant", 2, map[string]float64{"p50_us": 70, "p99_us": 300, "allocs_per_op": 1100}),
		res("rein-engine", "instant", 1, map[string]float64{"p50_us": 10, "p99_us": 50, "allocs_per_op": 70}),
		res("rein-engine", "instant", 2, map[string]float64{"p50_us": 14, "p99_us": 30, "allocs_per_op": 71}),
		{Peer: "adk", Case: "instant", Round: 1, Failed: "exit status 1: adk instant: reply \"x\" | bad"},
		{Peer: "adk", Case: "stop_blocked", Round: 1, Unsupported: "not supported: adk-go has no cooperative stop"},
		res("eino", "stop_blocked", 1, map[string]float64{"p50_us": 100000}),
		res("rein-sqlite", "durable_1k", 1, map[string]float64{"events_per_s": 5000, "delta_p50_us": 2500, "delta_p99_us": 90000}),
	}
	rs[0].Version, rs[0].Notes = "v0.9.13", []string{"stop escalated", "3 retries"}
	rs[1].Notes = []string{"stop escalated"}
	out := Report(cs, ps, rs)
	for _, want := range []string{
		"#### instant",
		"| eino v0.9.13 | 60.0 (50.0–70.0) | 200 (100–300) | 1050 (1000–1100) |",
		"| rein-engine | 12.0 (10.0–14.0) |",
		"| rein-engine ÷ eino | 0.20× (0.20–0.20) | 0.30× (0.10–0.50) |",
		"| adk | failed in every round | | |",
		`adk round 1 failed: exit status 1: adk instant: reply "x" / bad`,
		"- eino: stop escalated\n",
		"- eino (round 1): 3 retries\n",
		"| adk | not supported: adk-go has no cooperative stop | | |",
		"#### durable_1k",
		"| rein-sqlite | 5000 (5000–5000) | 2.50 (2.50–2.50) | 90.0 (90.0–90.0) |",
		"- Rein on SQLite only",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// A case nobody ran is left out; so is a ratio with no pair.
	if strings.Contains(out, "#### tool_stream") || strings.Contains(out, "rein-memory ÷") {
		t.Errorf("report has an empty section:\n%s", out)
	}
}

func TestCasesApply(t *testing.T) {
	byName := map[string]Case{}
	for _, c := range cases() {
		byName[c.Name] = c
	}
	if d := byName["durable_1k"]; d.applies("eino", true) || d.applies("rein-memory", false) || !d.applies("rein-sqlite", false) {
		t.Error("durable_1k must apply to rein-sqlite only")
	}
	if d := byName["durable_10k"]; d.applies("rein-sqlite", false) || !d.applies("rein-sqlite", true) || d.applies("adk", true) {
		t.Error("durable_10k runs rein-sqlite with -full only")
	}
	if b := byName["blocked_10k"]; b.applies("langgraph", false) || !b.applies("langgraph", true) || !b.applies("adk", false) || b.applies("rein-sqlite", false) {
		t.Error("blocked_10k leaves langgraph and rein-sqlite out unless -full")
	}
	if len(byName) != 8 {
		t.Errorf("%d cases", len(byName))
	}
}

func TestParseResultTakesTheLastLine(t *testing.T) {
	r, err := parseResult([]byte("some log\n{\"peer\":\"eino\",\"workload\":\"instant\",\"metrics\":{\"p50_us\":3}}\n"))
	if err != nil || r.Peer != "eino" || r.Metrics["p50_us"] != 3 {
		t.Fatalf("parseResult = %+v, %v", r, err)
	}
	if _, err := parseResult([]byte("panic: oops\n")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestRatio(t *testing.T) {
	for x, want := range map[float64]string{0.00027: "0.00027", 0.05: "0.05", 0.25: "0.25", 3.14159: "3.14", 62.4: "62"} {
		if got := ratio(x); got != want {
			t.Errorf("ratio(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestNum(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 0.0123: "0.012", 3.14159: "3.14", 42.42: "42.4", 123.4: "123", 98765.4: "98765"} {
		if got := num(x); got != want {
			t.Errorf("num(%v) = %q, want %q", x, got, want)
		}
	}
}
