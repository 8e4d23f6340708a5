// Command peers is the driver of Rein's peer comparison: it runs every
// workload of the harness (bench/peers/harness) against every peer —
// Eino, adk-go, LangGraph.js and Rein at its two levels — alternately
// (A B C … A B C …, a fresh process for every peer, workload and round),
// and prints Markdown tables: each peer's median and per-round range, and
// Rein ÷ peer ratios taken round by round.
//
// run.sh builds the peers and calls it; it only needs the standard
// library, so it never depends on a peer. It runs on demand, not in CI.
//
//	bench/peers/run.sh                 # build, run 3 rounds, print the report
//	go run . -rounds 1 -scale 0.1      # a quick look (from bench/peers, after a build)
//	go run . -in bin/results.jsonl     # the report of an earlier run
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one JSON line a peer prints (harness.Result).
type Result struct {
	Peer        string             `json:"peer"`
	Version     string             `json:"version"`
	Workload    string             `json:"workload"`
	N           int                `json:"n"`
	Round       int                `json:"round"`
	Runtime     string             `json:"runtime"`
	Procs       int                `json:"procs"`
	WallS       float64            `json:"wall_s"`
	Metrics     map[string]float64 `json:"metrics,omitempty"`
	Unsupported string             `json:"unsupported,omitempty"`
	Notes       []string           `json:"notes,omitempty"`

	// Set by the driver.
	Case   string `json:"case"`
	Failed string `json:"failed,omitempty"`
}

// Peer is how to start one peer's process.
type Peer struct {
	Name string
	// Rein marks Rein's own levels (the numerators of the ratios).
	Rein bool
	// Argv runs one workload when the harness flags are appended.
	Argv []string
}

// Case is one workload at one size.
type Case struct {
	Name     string
	Workload string
	N        int
	Title    string
	// Args are extra harness flags.
	Args []string
	// Only, when set, lists the peers the case applies to; Why says why
	// the others are left out.
	Only []string
	Why  string
	// Skip maps the peers left out unless -full to why: a full round of
	// them takes minutes on the shared machine.
	Skip map[string]string
	// Metrics shown, in order.
	Metrics []Metric
}

// Metric is one column of a case's table.
type Metric struct {
	Key   string
	Label string
	// Scale divides the raw value for display (1024 for KiB).
	Scale float64
}

var (
	latency = []Metric{{"p50_us", "p50 µs", 1}, {"p99_us", "p99 µs", 1}, {"allocs_per_op", "allocs/run", 1}}
	memory  = []Metric{{"heap_stack_per_run_b", "heap+stack KiB/run", 1024}, {"goroutines_per_run", "goroutines/run", 1},
		{"rss_per_run_b", "RSS KiB/run", 1024}, {"start_per_run_us", "start µs/run", 1}}
)

// cases are the workloads of issue 14, sized so one full run with three
// rounds stays near ten minutes on a shared 2-core machine.
func cases() []Case {
	return []Case{
		{Name: "instant", Workload: "instant", N: 300, Title: "(a) 1 step, no tools, instant model: one whole run, sequentially", Metrics: latency},
		{Name: "tool_stream", Workload: "tool_stream", N: 200, Title: "(b) a tool call, then a 20-chunk answer: one whole run, sequentially", Metrics: latency},
		{Name: "cancel_stream", Workload: "cancel_stream", N: 100, Title: "(c) immediate cancel while the model streams a chunk every 10 ms: stop → end seen by the caller", Metrics: latency},
		{Name: "stop_blocked", Workload: "stop_blocked", N: 30, Title: "(d) cooperative stop while the model is blocked: stop → end seen by the caller", Metrics: latency},
		{Name: "blocked_1k", Workload: "blocked", N: 1000, Title: "(e) 1,000 runs blocked in the model at once", Metrics: memory},
		{Name: "blocked_10k", Workload: "blocked", N: 10000, Title: "(e) 10,000 runs blocked in the model at once", Metrics: memory,
			Skip: map[string]string{
				"langgraph":   "langgraph is left out of the default run (-full includes it): its run starts take over 15 ms each here, minutes per round at 10,000",
				"rein-sqlite": "rein-sqlite is left out of the default run (-full includes it): 10,000 admissions on SQLite take about two minutes per round here",
			}},
		durable("durable_1k", 1000, false),
		durable("durable_10k", 10000, true),
	}
}

// durable is workload (f) with n sessions; full marks a size left out of
// the default run.
func durable(name string, n int, full bool) Case {
	c := Case{Name: name, Workload: "durable_stream", N: n, Args: []string{"-chunks", "10", "-chunk-every", "200ms"},
		Title:   fmt.Sprintf("(f) %d concurrent streaming sessions on SQLite, 10 chunks each 200 ms apart, every session's log followed by a reader of its own: events/s read back, chunk → reader latency", n),
		Metrics: []Metric{{"events_per_s", "events/s", 1}, {"delta_p50_us", "delta p50 ms", 1000}, {"delta_p99_us", "delta p99 ms", 1000}},
		Only:    []string{"rein-sqlite"},
		Why:     "Rein on SQLite only: Eino, adk-go and LangGraph.js have no durable session store with an event log a reader follows by cursor (adk-go's database session service and LangGraph's checkpointers store state, not a readable stream); rein-engine has no store and the memory store is not durable"}
	if full {
		c.Skip = map[string]string{"rein-sqlite": "left out of the default run (-full includes it): minutes per round here"}
	}
	return c
}

func peers(bin string) []Peer {
	return []Peer{
		{Name: "eino", Argv: []string{filepath.Join(bin, "eino")}},
		{Name: "adk", Argv: []string{filepath.Join(bin, "adk")}},
		{Name: "langgraph", Argv: []string{"node", "--expose-gc", "langgraph/main.mjs"}},
		{Name: "rein-engine", Rein: true, Argv: []string{filepath.Join(bin, "rein"), "-peer", "rein-engine"}},
		{Name: "rein-memory", Rein: true, Argv: []string{filepath.Join(bin, "rein"), "-peer", "rein-memory"}},
		{Name: "rein-sqlite", Rein: true, Argv: []string{filepath.Join(bin, "rein"), "-peer", "rein-sqlite"}},
	}
}

func main() {
	var (
		bin       = flag.String("bin", "bin", "directory of the built peers (run.sh builds them)")
		rounds    = flag.Int("rounds", 3, "rounds: every peer runs every workload once per round")
		only      = flag.String("peers", "", "comma-separated peers to run (default all)")
		workloads = flag.String("cases", "", "comma-separated cases to run (default all)")
		out       = flag.String("out", "", "write every JSON line here (default BIN/results.jsonl)")
		in        = flag.String("in", "", "print the report of these JSON lines instead of running")
		scale     = flag.Float64("scale", 1, "multiply every case's size (a quick look: 0.1)")
		full      = flag.Bool("full", false, "include the peers a case leaves out by default for time")
		timeout   = flag.Duration("timeout", 10*time.Minute, "bound of one peer process")
	)
	flag.Parse()
	if err := run(*bin, *rounds, *only, *workloads, *out, *in, *scale, *full, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func run(bin string, rounds int, only, workloads, out, in string, scale float64, full bool, timeout time.Duration) error {
	cs := cases()
	if in != "" {
		rs, err := readResults(in)
		if err != nil {
			return err
		}
		fmt.Print(Report(cs, peers(bin), rs))
		return nil
	}
	if rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	ps := pick(peers(bin), only, func(p Peer) string { return p.Name })
	cs = pick(cs, workloads, func(c Case) string { return c.Name })
	if len(ps) == 0 || len(cs) == 0 {
		return errors.New("no peer or no case selected")
	}
	if out == "" {
		out = filepath.Join(bin, "results.jsonl")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	machine, load0 := Machine(), LoadAvg()
	fmt.Fprintf(os.Stderr, "machine: %s; load %s\n", machine, load0)
	var rs []Result
	for _, c := range cs {
		n := max(1, int(math.Round(float64(c.N)*scale)))
		for r := 1; r <= rounds; r++ {
			for i := range ps {
				// Rotate the order every round so no peer always runs
				// first (or right after the heaviest one).
				p := ps[(i+r-1)%len(ps)]
				if !c.applies(p.Name, full) {
					continue
				}
				t0 := time.Now()
				res := runOne(p, c, n, r, timeout)
				status := "ok"
				switch {
				case res.Failed != "":
					status = "FAILED: " + firstLine(res.Failed)
				case res.Unsupported != "":
					status = "unsupported"
				}
				fmt.Fprintf(os.Stderr, "%-13s %-12s round %d  %6.1fs  %s\n", c.Name, p.Name, r, time.Since(t0).Seconds(), status)
				rs = append(rs, res)
				b, _ := json.Marshal(res)
				if _, err := f.Write(append(b, '\n')); err != nil {
					return err
				}
			}
		}
	}
	fmt.Fprintf(os.Stderr, "total %.0fs\n", time.Since(start).Seconds())
	fmt.Printf("Machine: %s. Load average (1/5/15 min) %s at the start, %s at the end. %d round(s), %.0f s in all.\n\n",
		machine, load0, LoadAvg(), rounds, time.Since(start).Seconds())
	fmt.Print(Report(cs, ps, rs))
	return nil
}

func (c Case) applies(peer string, full bool) bool {
	if len(c.Only) > 0 && !slices.Contains(c.Only, peer) {
		return false
	}
	_, skip := c.Skip[peer]
	return full || !skip
}

func pick[T any](all []T, list string, name func(T) string) []T {
	if list == "" {
		return all
	}
	var out []T
	for _, x := range all {
		if slices.Contains(strings.Split(list, ","), name(x)) {
			out = append(out, x)
		}
	}
	return out
}

// runOne runs one process and returns its result (Failed set when it
// failed).
func runOne(p Peer, c Case, n, round int, timeout time.Duration) Result {
	fail := Result{Peer: p.Name, Workload: c.Workload, N: n, Round: round, Case: c.Name}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append(append([]string(nil), p.Argv[1:]...), "-workload", c.Workload, "-n", strconv.Itoa(n),
		"-round", strconv.Itoa(round), "-wait-timeout", (timeout * 9 / 10).String())
	cmd := exec.CommandContext(ctx, p.Argv[0], append(args, c.Args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		fail.Failed = strings.TrimSpace(fmt.Sprintf("%v: %s", err, tail(stderr.String(), 600)))
		return fail
	}
	res, err := parseResult(stdout.Bytes())
	if err != nil {
		fail.Failed = err.Error()
		return fail
	}
	res.Case = c.Name
	return res
}

// parseResult takes the last JSON line of a peer's output.
func parseResult(out []byte) (Result, error) {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	var r Result
	if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
		return Result{}, fmt.Errorf("peer output is not a result line: %w: %q", err, tail(string(out), 300))
	}
	return r, nil
}

func readResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Stat is a median and the range over rounds.
type Stat struct {
	Median, Min, Max float64
	N                int
}

// Summarize returns the median, minimum and maximum of xs.
func Summarize(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// byRound returns peer's value of metric in case, by round.
func byRound(rs []Result, cs, peer, metric string) map[int]float64 {
	out := map[int]float64{}
	for _, r := range rs {
		if r.Case != cs || r.Peer != peer || r.Failed != "" || r.Unsupported != "" {
			continue
		}
		if v, ok := r.Metrics[metric]; ok {
			out[r.Round] = v
		}
	}
	return out
}

// Values is a peer's per-round values of a metric.
func Values(rs []Result, cs, peer, metric string) []float64 {
	m := byRound(rs, cs, peer, metric)
	var xs []float64
	for _, r := range sortedKeys(m) {
		xs = append(xs, m[r])
	}
	return xs
}

// Ratios is num ÷ den of a metric, round by round (rounds where both
// have a value; a zero denominator is skipped).
func Ratios(rs []Result, cs, num, den, metric string) []float64 {
	a, b := byRound(rs, cs, num, metric), byRound(rs, cs, den, metric)
	var xs []float64
	for _, r := range sortedKeys(a) {
		if d, ok := b[r]; ok && d != 0 {
			xs = append(xs, a[r]/d)
		}
	}
	return xs
}

func sortedKeys(m map[int]float64) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Report renders the Markdown report of rs.
func Report(cs []Case, ps []Peer, rs []Result) string {
	var b strings.Builder
	version := map[string]string{}
	for _, r := range rs {
		if r.Version != "" {
			version[r.Peer] = r.Version
		}
	}
	label := func(p string) string {
		if v := version[p]; v != "" {
			return p + " " + v
		}
		return p
	}
	for _, c := range cs {
		var here []Result
		for _, r := range rs {
			if r.Case == c.Name {
				here = append(here, r)
			}
		}
		if len(here) == 0 {
			continue
		}
		rounds := 0
		n := 0
		for _, r := range here {
			rounds = max(rounds, r.Round)
			n = max(n, r.N)
		}
		fmt.Fprintf(&b, "#### %s\n\n%s. Size %d, %d round(s); each cell: median (min–max over rounds).\n\n", c.Name, c.Title, n, rounds)
		b.WriteString("| peer |")
		for _, m := range c.Metrics {
			b.WriteString(" " + m.Label + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(c.Metrics)) + "\n")
		var notes []string
		for _, p := range ps {
			status, failures, ran := peerStatus(here, p.Name)
			if !ran {
				continue
			}
			for _, f := range failures {
				notes = append(notes, p.Name+" "+strings.ReplaceAll(f, "|", "/"))
			}
			fmt.Fprintf(&b, "| %s |", label(p.Name))
			if status != "" {
				fmt.Fprintf(&b, " %s |%s\n", status, strings.Repeat(" |", len(c.Metrics)-1))
				continue
			}
			for _, m := range c.Metrics {
				b.WriteString(" " + cell(Summarize(Values(here, c.Name, p.Name, m.Key)), m.Scale) + " |")
			}
			b.WriteString("\n")
			notes = append(notes, peerNotes(here, p.Name)...)
		}
		if c.Why != "" {
			notes = append(notes, c.Why)
		}
		for _, p := range ps {
			if why, ok := c.Skip[p.Name]; ok && !ran(here, p.Name) {
				notes = append(notes, why)
			}
		}
		b.WriteString("\n")
		if rt := ratioTable(here, c, ps); rt != "" {
			b.WriteString(rt + "\n")
		}
		for _, nt := range notes {
			b.WriteString("- " + nt + "\n")
		}
		if len(notes) > 0 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// peerNotes are peer's notes in a case: a note every round of the peer
// printed once, any other with the rounds that printed it.
func peerNotes(rs []Result, peer string) []string {
	var (
		order  []string
		rounds = map[string][]int{}
		all    = 0
	)
	for _, r := range rs {
		if r.Peer != peer || r.Failed != "" {
			continue
		}
		all++
		for _, nt := range r.Notes {
			if _, ok := rounds[nt]; !ok {
				order = append(order, nt)
			}
			rounds[nt] = append(rounds[nt], r.Round)
		}
	}
	out := make([]string, 0, len(order))
	for _, nt := range order {
		if len(rounds[nt]) == all {
			out = append(out, peer+": "+nt)
			continue
		}
		rs := make([]string, len(rounds[nt]))
		for i, r := range rounds[nt] {
			rs[i] = strconv.Itoa(r)
		}
		word := "round"
		if len(rs) > 1 {
			word = "rounds"
		}
		out = append(out, fmt.Sprintf("%s (%s %s): %s", peer, word, strings.Join(rs, ", "), nt))
	}
	return out
}

func ran(rs []Result, peer string) bool {
	for _, r := range rs {
		if r.Peer == peer {
			return true
		}
	}
	return false
}

// peerStatus says how peer fared in a case: ran is false if it did not
// run; status is non-empty when it has no numbers at all (unsupported, or
// every round failed); failures lists the rounds that failed.
func peerStatus(rs []Result, peer string) (status string, failures []string, ran bool) {
	var unsup string
	good := 0
	for _, r := range rs {
		if r.Peer != peer {
			continue
		}
		ran = true
		switch {
		case r.Failed != "":
			failures = append(failures, fmt.Sprintf("round %d failed: %s", r.Round, firstLine(r.Failed)))
		case r.Unsupported != "":
			unsup = r.Unsupported
		default:
			good++
		}
	}
	switch {
	case good > 0 || !ran:
		return "", failures, ran
	case unsup != "":
		return unsup, failures, true
	default:
		return "failed in every round", failures, true
	}
}

// ratioTable is Rein ÷ peer for every Rein level and other peer that both
// have numbers.
func ratioTable(rs []Result, c Case, ps []Peer) string {
	var b strings.Builder
	rows := 0
	for _, num := range ps {
		if !num.Rein {
			continue
		}
		for _, den := range ps {
			if den.Rein {
				continue
			}
			cells := make([]string, len(c.Metrics))
			any := false
			for i, m := range c.Metrics {
				s := Summarize(Ratios(rs, c.Name, num.Name, den.Name, m.Key))
				if s.N == 0 {
					cells[i] = "–"
					continue
				}
				any = true
				cells[i] = fmt.Sprintf("%s× (%s–%s)", ratio(s.Median), ratio(s.Min), ratio(s.Max))
			}
			if !any {
				continue
			}
			if rows == 0 {
				b.WriteString("| Rein ÷ peer (per round) |")
				for _, m := range c.Metrics {
					b.WriteString(" " + m.Label + " |")
				}
				b.WriteString("\n|---|" + strings.Repeat("---|", len(c.Metrics)) + "\n")
			}
			rows++
			fmt.Fprintf(&b, "| %s ÷ %s | %s |\n", num.Name, den.Name, strings.Join(cells, " | "))
		}
	}
	return b.String()
}

func cell(s Stat, scale float64) string {
	if s.N == 0 {
		return "–"
	}
	if scale == 0 {
		scale = 1
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median/scale), num(s.Min/scale), num(s.Max/scale))
}

// num prints three significant digits (whole numbers from 1000 up).
func num(x float64) string {
	a := math.Abs(x)
	switch {
	case a >= 1000:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(x, 'f', 2, 64)
	case a == 0:
		return "0"
	default:
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
}

// ratio prints a ratio: whole numbers from 10 up, two decimals down to
// 0.1, two significant digits below.
func ratio(x float64) string {
	switch {
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 0.1:
		return strconv.FormatFloat(x, 'f', 2, 64)
	default:
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
}

// Machine describes the machine the run is on.
func Machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				mem = fmt.Sprintf(", %.0f GiB", kb/1024/1024)
			}
		}
	}
	node := ""
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		node = ", node " + strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("%d CPUs (%s)%s, %s/%s, %s%s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), node)
}

// LoadAvg is the 1, 5 and 15 minute load averages ("?" where unknown).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
