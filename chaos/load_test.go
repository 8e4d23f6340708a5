package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The scenarios of this file are the kill -9 of chaos under load: many
// sessions at once, each with a client that streams its runs, sends
// supplements, queues a second message and answers (or leaves) tool
// confirmations, while the server (or one instance of two) is killed at a
// random moment. After the restart the clients retry what they were not
// answered and repeat what they were, the test waits for recovery, and
// then it counts, from every session's full log, its runs list and its
// notes file, what the contract says can never happen. Every count is
// defined on loadTally; each must be 0.
//
// "Acknowledged" is what a client was answered before the kill: a
// user.message that got its run id, a supplement that got its
// supplement_id, a confirmation answer that got 200, and every event a
// client read from its stream.
//
// The short version runs in CI; REIN_CHAOS_SOAK=1 (or -args -soak) runs
// the long one (docs/reliability.md has its figures):
//
//	REIN_CHAOS_SOAK=1 go test -race -count=1 -timeout 60m -run 'TestLoad' ./chaos/

var soakFlag = flag.Bool("soak", false, "run the long versions of the load scenarios (also REIN_CHAOS_SOAK=1)")

// soaking reports whether the long versions run.
func soaking() bool { return *soakFlag || os.Getenv("REIN_CHAOS_SOAK") == "1" }

// loadPlan is the size of one load scenario.
type loadPlan struct {
	// sessions is how many sessions (one client each) load the server at
	// once.
	sessions int
	// reps is how many times the scenario is repeated, each time with
	// fresh sessions on the same store: one kill (or outage) each.
	reps int
}

// plan is short in CI and long with REIN_CHAOS_SOAK=1.
func plan(short, long loadPlan) loadPlan {
	if soaking() {
		return long
	}
	return short
}

var (
	// killWindow is when the kill lands, counted from the start of the
	// load: uniformly at random in it, so that it falls on session
	// creation, admission, streaming, tool calls, parked confirmations
	// or answers, depending on the repetition.
	killWindow = [2]time.Duration{150 * time.Millisecond, 2500 * time.Millisecond}
	// settleBound bounds recovery after a restart: lease expiry, the
	// look for lost runs, and the resumed runs' own work, on a machine
	// that runs the whole load at once.
	settleBound = 60 * time.Second
)

// loadSeed is the seed of the random choices, REIN_CHAOS_SEED when set
// (to repeat a failure), else fresh and logged.
func loadSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("REIN_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("REIN_CHAOS_SEED=%q: %v", v, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// loadKind is what the client of a session does.
type loadKind int

const (
	// kindStream sends a load-stream run, a supplement while it streams,
	// a second run queued behind the first (when_busy enqueue) and
	// another supplement.
	kindStream loadKind = iota
	// kindTool does the same with load-tool runs of the agent "auto",
	// whose write_note calls run without confirmation.
	kindTool
	// kindNote sends a load-note run, which parks on a write_note that
	// needs confirmation, a supplement, and then allows it, denies it or
	// leaves it parked across the kill.
	kindNote
	nKinds
)

func (k loadKind) prefix() string { return [...]string{"load-stream", "load-tool", "load-note"}[k] }

func (k loadKind) agent() string {
	if k == kindTool {
		return "auto"
	}
	return ""
}

// loadConfig is the --config of the servers under load: the agent "auto".
func loadConfig(t testing.TB) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "load.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadMsg is a user.message a client sent.
type loadMsg struct {
	text, clientID string
	// runID is the run it was answered with ("" until acked).
	runID string
	acked bool
}

// loadSup is a supplement a client sent.
type loadSup struct {
	id, text string
	acked    bool
}

// loadAnswer is a confirmation answer a client was answered for.
type loadAnswer struct {
	toolUseID string
	allow     bool
}

// loadSession is one session of the load and what its client did and was
// told. The worker goroutine owns it until the load ends; the test reads
// it after that.
type loadSession struct {
	rep, idx int
	kind     loadKind
	// post is the server the client sends to, read the one whose
	// stream it follows (another instance, in a cluster).
	post, read *proc
	c          *client.Client
	sid        string
	msgs       []*loadMsg
	sups       []*loadSup
	answers    []loadAnswer
	stream     *sseReader
	// seen are the events the client read before the kill.
	seen []rein.Event
	// lastErr is the answer to the client's last request.
	lastErr error
}

// loadClients are clients of the servers under load that share one
// connection pool sized for it (the default keeps two idle connections per
// host, and a load of a hundred clients would open and close thousands).
type loadClients struct {
	tr *http.Transport
	mu sync.Mutex
	m  map[*proc]*client.Client
}

func newLoadClients(t testing.TB) *loadClients {
	lc := &loadClients{tr: &http.Transport{MaxIdleConnsPerHost: 256}, m: map[*proc]*client.Client{}}
	t.Cleanup(lc.tr.CloseIdleConnections)
	return lc
}

// of is the client of p.
func (lc *loadClients) of(p *proc) *client.Client {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	c, ok := lc.m[p]
	if !ok {
		c = client.New(p.url, client.WithHTTPClient(&http.Client{Transport: lc.tr}))
		lc.m[p] = c
	}
	return c
}

// run is the client of one session: it stops at its first failed request
// (the server is gone) or when ctx ends (the kill).
func (w *loadSession) run(ctx context.Context, rng *rand.Rand) {
	s, err := w.c.CreateSession(ctx, client.CreateSessionRequest{Agent: w.kind.agent()})
	if err != nil {
		return
	}
	w.sid = s.ID
	if w.stream, err = dialSSE(w.read, w.sid, 0); err != nil {
		return
	}
	switch w.kind {
	case kindStream, kindTool:
		if w.send(ctx, "") == "" || !w.frames(ctx, rng.IntN(25)) {
			return
		}
		w.supplement(ctx)
		if w.send(ctx, rein.WhenBusyEnqueue) == "" || !w.frames(ctx, rng.IntN(40)) {
			return
		}
		w.supplement(ctx)
	case kindNote:
		runID := w.send(ctx, "")
		if runID == "" {
			return
		}
		f, err := w.stream.wait(ctx, isType(rein.EventToolConfirmationRequested, runID))
		if err != nil {
			return
		}
		w.supplement(ctx)
		var req rein.ToolConfirmationRequestedPayload
		if json.Unmarshal(f.ev.Payload, &req) != nil {
			return
		}
		choice := rng.IntN(3)
		if choice == 0 {
			return // left parked across the kill
		}
		// A person answers after a while: a random moment, possibly after
		// the kill.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(rng.IntN(1500)) * time.Millisecond):
		}
		w.answer(ctx, req.ToolUseID, choice == 1)
	}
}

// send sends the session's next user.message (with a client_id, so that a
// retry is idempotent) and returns its run id, "" when it was not
// answered.
func (w *loadSession) send(ctx context.Context, wb rein.WhenBusy) string {
	return w.sendText(ctx, w.kind.prefix(), wb)
}

// sendText is send with a rule of its own (prefix) instead of the kind's.
func (w *loadSession) sendText(ctx context.Context, prefix string, wb rein.WhenBusy) string {
	n := len(w.msgs) + 1
	m := &loadMsg{
		text:     fmt.Sprintf("%s r%d s%d m%d", prefix, w.rep, w.idx, n),
		clientID: fmt.Sprintf("cid-r%d-s%d-m%d", w.rep, w.idx, n),
	}
	w.msgs = append(w.msgs, m)
	runID, _ := w.postMsg(ctx, m, wb)
	return runID
}

// postMsg sends m (again, for a retry: same text, same client_id) and
// returns the run id it was answered with.
func (w *loadSession) postMsg(ctx context.Context, m *loadMsg, wb rein.WhenBusy) (string, error) {
	res, err := w.c.SendMessage(ctx, w.sid, client.Message{Text: m.text, ClientID: m.clientID, WhenBusy: wb})
	w.lastErr = err
	if err != nil {
		return "", err
	}
	m.runID, m.acked = res.RunID, true
	return res.RunID, nil
}

// supplement sends the session's next supplement, with an id of the
// client's.
func (w *loadSession) supplement(ctx context.Context) {
	n := len(w.sups) + 1
	s := &loadSup{id: fmt.Sprintf("sup-r%d-s%d-%d", w.rep, w.idx, n), text: fmt.Sprintf("note %d of session %d", n, w.idx)}
	w.sups = append(w.sups, s)
	res, err := w.c.Supplement(ctx, w.sid, client.Supplement{ID: s.id, Text: s.text})
	w.lastErr = err
	s.acked = err == nil && res.SupplementID == s.id
}

// answer answers a confirmation.
func (w *loadSession) answer(ctx context.Context, toolUseID string, allow bool) bool {
	tc := client.ToolConfirmation{ToolUseID: toolUseID, Allow: allow}
	if !allow {
		tc.DenyMessage = "not now"
	}
	if _, err := w.c.ConfirmTool(ctx, w.sid, tc); err != nil {
		return false
	}
	w.answers = append(w.answers, loadAnswer{toolUseID, allow})
	return true
}

// frames waits until n more events have been read on the stream: the
// clients act at points of their runs' progress, not of the clock.
func (w *loadSession) frames(ctx context.Context, n int) bool {
	if n == 0 {
		return true
	}
	k := 0
	_, err := w.stream.wait(ctx, func(sseFrame) bool { k++; return k >= n })
	return err == nil
}

// stop closes the session's stream and keeps what it read.
func (w *loadSession) stop() {
	if w.stream != nil {
		w.stream.close()
		w.seen = events(w.stream.all())
	}
}

// load is the sessions of one repetition.
type load struct {
	rep      int
	sessions []*loadSession
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startLoad starts n clients, each on a fresh session, sending to the
// servers in turn and reading another server's stream (the same one for a
// single server).
func startLoad(t *testing.T, lc *loadClients, servers []*proc, rep, n int, seed uint64) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	l := &load{rep: rep, cancel: cancel}
	for i := range n {
		post, read := servers[i%len(servers)], servers[(i+1)%len(servers)]
		w := &loadSession{rep: rep, idx: i, kind: loadKind(i % int(nKinds)), post: post, read: read, c: lc.of(post)}
		l.sessions = append(l.sessions, w)
		rng := rand.New(rand.NewPCG(seed, uint64(rep)<<32|uint64(i)))
		l.wg.Go(func() { w.run(ctx, rng) })
	}
	return l
}

// stop ends the clients (after the kill) and waits for them.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
	for _, w := range l.sessions {
		w.stop()
	}
}

// killMoment is a random moment of killWindow.
func killMoment(rng *rand.Rand) time.Duration {
	return killWindow[0] + time.Duration(rng.Int64N(int64(killWindow[1]-killWindow[0])))
}

// waitMoment waits d from the start of the load, bounded by the test: it
// is when the kill lands.
func waitMoment(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
		t.Fatal("the test ended before the kill")
	}
}

// loadTally counts, over the sessions of a load, what must never happen
// (the violations: each must be 0) and what did happen (the figures of
// docs/reliability.md).
type loadTally struct {
	// eventsLost: events a client read from its stream before the kill
	// that are missing from the session's log afterwards, or there with
	// another id, type, run, payload or time at their seq.
	eventsLost int
	// runsLost: user.messages answered with a run id whose run is not in
	// the session's runs list or whose user.message is not logged exactly
	// once.
	runsLost int
	// clientIDRepeats: retries, after the restart, with the client_id of
	// an acknowledged message that were answered with another run id.
	clientIDRepeats int
	// supplementsLost: acknowledged supplements that are not logged
	// exactly once as user.supplement, whose repeat after the restart is
	// not answered with their id and a status (queued or consumed), or
	// that are still unconsumed once every run has ended (every session's
	// last run takes up what is queued).
	supplementsLost int
	// supplementsTwice: supplements with more than one
	// agent.supplement_consumed.
	supplementsTwice int
	// confirmationsLost: acknowledged answers not logged exactly once as
	// user.tool_confirmation or whose call is still pending after the
	// restart, and calls whose confirmation was requested more than once.
	confirmationsLost int
	// nonTerminal: runs still QUEUED or RUNNING once recovery has settled
	// (within settleBound of the restart), except runs parked on a
	// confirmation (the session's current run, with pending confirmations
	// of its own and nothing queued behind it); and runs not terminal at
	// the very end, after every confirmation was answered.
	nonTerminal int
	// toolTwice: write_note calls whose note is in the session's notes
	// file more than once (the call ran twice), and calls made more than
	// once (two agent.tool_use with the same input: the same run and
	// step).
	toolTwice int
	// toolEffects: write_note calls answered with a success whose note is
	// not in the notes file, and denied calls whose note is.
	toolEffects int
	// logBroken: sessions whose seqs are not 1..N, and runs without
	// exactly one session.run_completed as their last event, with more
	// than one session.run_started, or whose record's status is not the
	// one of their session.run_completed.
	logBroken int

	// The figures: sessions, runs and events in the logs, supplements and
	// answers acknowledged, runs found parked after the restart, in-doubt
	// tool results and agent.step_restarted events.
	sessions, runs, events, supplements, answers, parked, inDoubt, restarts int

	mu       sync.Mutex
	problems []string
}

// violations are the counts that must be 0, by name.
func (tl *loadTally) violations() []struct {
	name string
	n    int
} {
	return []struct {
		name string
		n    int
	}{
		{"acknowledged events lost", tl.eventsLost},
		{"acknowledged runs lost", tl.runsLost},
		{"client_id retries that started another run", tl.clientIDRepeats},
		{"acknowledged supplements lost", tl.supplementsLost},
		{"supplements consumed twice", tl.supplementsTwice},
		{"acknowledged confirmations lost or asked again", tl.confirmationsLost},
		{"runs left non-terminal (parked excepted)", tl.nonTerminal},
		{"tool calls run twice", tl.toolTwice},
		{"tool results that disagree with the side effect", tl.toolEffects},
		{"broken logs or runs", tl.logBroken},
	}
}

// add adds o's counts to tl's.
func (tl *loadTally) add(o *loadTally) {
	tl.eventsLost += o.eventsLost
	tl.runsLost += o.runsLost
	tl.clientIDRepeats += o.clientIDRepeats
	tl.supplementsLost += o.supplementsLost
	tl.supplementsTwice += o.supplementsTwice
	tl.confirmationsLost += o.confirmationsLost
	tl.nonTerminal += o.nonTerminal
	tl.toolTwice += o.toolTwice
	tl.toolEffects += o.toolEffects
	tl.logBroken += o.logBroken
	tl.sessions += o.sessions
	tl.runs += o.runs
	tl.events += o.events
	tl.supplements += o.supplements
	tl.answers += o.answers
	tl.parked += o.parked
	tl.inDoubt += o.inDoubt
	tl.restarts += o.restarts
	tl.problems = append(tl.problems, o.problems...)
}

// problem counts one violation (*n++) and keeps its description.
func (tl *loadTally) problem(n *int, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	*n++
	tl.problems = append(tl.problems, fmt.Sprintf(format, args...))
}

func (tl *loadTally) figures() string {
	return fmt.Sprintf("%d sessions, %d runs, %d events, %d supplements and %d confirmation answers acknowledged, %d runs parked across the kill, %d in-doubt tool results, %d step restarts",
		tl.sessions, tl.runs, tl.events, tl.supplements, tl.answers, tl.parked, tl.inDoubt, tl.restarts)
}

// check fails the test for every violation, with the first problems.
func (tl *loadTally) check(t *testing.T, what string) {
	t.Helper()
	var bad []string
	for _, v := range tl.violations() {
		if v.n != 0 {
			bad = append(bad, fmt.Sprintf("%s: %d", v.name, v.n))
		}
	}
	if len(bad) == 0 {
		return
	}
	shown := tl.problems
	if len(shown) > 30 {
		shown = shown[:30]
	}
	t.Errorf("%s: %s\nfirst problems:\n  %s", what, strings.Join(bad, ", "), strings.Join(shown, "\n  "))
}

// counts is the line of violation counts for the log.
func (tl *loadTally) counts() string {
	var parts []string
	for _, v := range tl.violations() {
		parts = append(parts, fmt.Sprintf("%s %d", v.name, v.n))
	}
	return strings.Join(parts, ", ")
}

// isParked reports whether the session is busy only with a run parked on
// confirmations: its current run has pending confirmations, and nothing
// else is pending or queued.
func isParked(s *client.Session) bool {
	if s.State != "busy" || s.CurrentRunID == "" || len(s.QueuedRunIDs) != 0 || len(s.PendingConfirmations) == 0 {
		return false
	}
	for _, c := range s.PendingConfirmations {
		if c.RunID != s.CurrentRunID {
			return false
		}
	}
	return true
}

// settle waits, bounded by ctx, until every session is idle (or, with
// parked, busy only with a run parked on confirmations), and returns the
// sessions' last views. Waiting on other processes, it polls.
func settle(ctx context.Context, c func(*loadSession) *client.Client, ws []*loadSession, parked bool) map[*loadSession]*client.Session {
	views := map[*loadSession]*client.Session{}
	var left []*loadSession
	for _, w := range ws {
		if w.sid != "" {
			left = append(left, w)
		}
	}
	for len(left) > 0 {
		next := left[:0]
		for _, w := range left {
			s, err := c(w).GetSession(ctx, w.sid)
			if err == nil {
				views[w] = s
				if s.State == "idle" || parked && isParked(s) {
					continue
				}
			}
			next = append(next, w)
		}
		left = next
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return views
		case <-time.After(50 * time.Millisecond):
		}
	}
	return views
}

// parallel runs f for every session that exists, at most 16 at a time.
func parallel(ws []*loadSession, f func(w *loadSession)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, w := range ws {
		if w.sid == "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(w)
		})
	}
	wg.Wait()
}

// recoverLoad is the clients' side of what follows a kill, against the
// servers now up (any instance serves any session): it retries what was
// not answered and repeats what was, waits for recovery, answers what is
// still parked, sends every session a last run, and counts. ws is the
// servers' --workspace (where write_note's notes are).
func recoverLoad(t *testing.T, lc *loadClients, servers []*proc, l *load, ws string) *loadTally {
	t.Helper()
	tl := &loadTally{}
	cl := func(w *loadSession) *client.Client { return lc.of(servers[w.idx%len(servers)]) }
	ctx := ctxFor(t, 5*settleBound) // each wait below has its own bound

	// The clients retry: every message with its client_id (queued behind
	// whatever holds the turn), every supplement with its id.
	parallel(l.sessions, func(w *loadSession) {
		c := cl(w)
		for _, m := range w.msgs {
			res, err := c.SendMessage(ctx, w.sid, client.Message{Text: m.text, ClientID: m.clientID, WhenBusy: rein.WhenBusyEnqueue})
			if err != nil {
				t.Errorf("session %s: retry of %q after the restart: %v", w.sid, m.text, err)
				continue
			}
			if m.acked && res.RunID != m.runID {
				tl.problem(&tl.clientIDRepeats, "session %s: %q was answered with run %s, its retry with %s", w.sid, m.text, m.runID, res.RunID)
			}
			if !m.acked {
				m.runID, m.acked = res.RunID, true
			}
		}
		for _, s := range w.sups {
			res, err := c.Supplement(ctx, w.sid, client.Supplement{ID: s.id, Text: s.text})
			if err != nil {
				t.Errorf("session %s: repeat of supplement %s after the restart: %v", w.sid, s.id, err)
				continue
			}
			if s.acked && (res.SupplementID != s.id || res.Status != "queued" && res.Status != "consumed") {
				tl.problem(&tl.supplementsLost, "session %s: the repeat of acknowledged supplement %s was answered %+v", w.sid, s.id, res)
			}
			s.acked = s.acked || res.SupplementID == s.id
		}
	})

	// Recovery: every session idle, or parked on a confirmation.
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, settleBound)
	views := settle(sctx, cl, l.sessions, true)
	cancel()
	t.Logf("rep %d: recovery settled %v after the retries", l.rep, time.Since(t0).Round(time.Millisecond))
	parallel(l.sessions, func(w *loadSession) {
		c := cl(w)
		v := views[w]
		parked := v != nil && isParked(v)
		runs, err := c.ListRuns(ctx, w.sid)
		if err != nil {
			t.Errorf("session %s: list runs: %v", w.sid, err)
			return
		}
		for _, r := range runs {
			switch {
			case r.Status.Terminal():
			case parked && r.RunID == v.CurrentRunID:
				tl.mu.Lock()
				tl.parked++
				tl.mu.Unlock()
			default:
				tl.problem(&tl.nonTerminal, "session %s: run %s is %s %v after the restart", w.sid, r.RunID, r.Status, settleBound)
			}
		}
		if !parked {
			return
		}
		// What waits is answered now (allowed); an answer the client was
		// given before the kill must not be waiting again.
		for _, pc := range v.PendingConfirmations {
			for _, a := range w.answers {
				if a.toolUseID == pc.ToolUseID {
					tl.problem(&tl.confirmationsLost, "session %s: call %s is pending after the restart although its answer (allow %v) was acknowledged", w.sid, pc.ToolUseID, a.allow)
				}
			}
			w.c = c
			if !w.answer(ctx, pc.ToolUseID, true) {
				t.Errorf("session %s: answering %s after the restart failed", w.sid, pc.ToolUseID)
			}
		}
	})
	sctx, cancel = context.WithTimeout(ctx, settleBound)
	settle(sctx, cl, l.sessions, false)
	cancel()

	// Each session's last run takes up the supplements still queued.
	parallel(l.sessions, func(w *loadSession) {
		w.c = cl(w)
		if w.sendText(ctx, "load-final", rein.WhenBusyEnqueue) == "" {
			t.Errorf("session %s: the last run was refused", w.sid)
		}
	})
	sctx, cancel = context.WithTimeout(ctx, settleBound)
	settle(sctx, cl, l.sessions, false)
	cancel()

	parallel(l.sessions, func(w *loadSession) {
		c := cl(w)
		log, err := listAll(ctx, &proc{name: "load", client: c}, w.sid)
		if err != nil {
			t.Errorf("session %s: read the log: %v", w.sid, err)
			return
		}
		runs, err := c.ListRuns(ctx, w.sid)
		if err != nil {
			t.Errorf("session %s: list runs: %v", w.sid, err)
			return
		}
		notes, err := os.ReadFile(filepath.Join(ws, localOwner, w.sid, "notes.md"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("session %s: notes: %v", w.sid, err)
		}
		tl.tallySession(w, log, runs, string(notes))
	})
	return tl
}

// tallySession counts one session's violations and figures from its
// final log, runs list and notes file.
func (tl *loadTally) tallySession(w *loadSession, log []rein.Event, runs []client.Run, notes string) {
	sid := w.sid
	tl.mu.Lock()
	tl.sessions++
	tl.runs += len(runs)
	tl.events += len(log)
	tl.mu.Unlock()

	for i, ev := range log {
		if ev.Seq != int64(i+1) {
			tl.problem(&tl.logBroken, "session %s: event #%d has seq %d", sid, i+1, ev.Seq)
			break
		}
	}
	at := func(seq int64) *rein.Event {
		if seq < 1 || seq > int64(len(log)) || log[seq-1].Seq != seq {
			return nil
		}
		return &log[seq-1]
	}
	for _, s := range w.seen {
		l := at(s.Seq)
		if l == nil {
			tl.problem(&tl.eventsLost, "session %s: event seq %d (%s) read before the kill is not in the log", sid, s.Seq, s.Type)
			continue
		}
		if l.ID != s.ID || l.Type != s.Type || l.RunID != s.RunID || l.SessionID != s.SessionID || !l.CreatedAt.Equal(s.CreatedAt) || !sameJSON(l.Payload, s.Payload) {
			tl.problem(&tl.eventsLost, "session %s: event seq %d changed across the kill: read %s, logged %s", sid, s.Seq, line(s), line(*l))
		}
	}

	// Runs: acknowledged ones exist; each is terminal with one end, last.
	known := map[string]client.Run{}
	for _, r := range runs {
		known[r.RunID] = r
	}
	userMsgs := map[string]int{}
	for _, ev := range log {
		if ev.Type == rein.EventUserMessage {
			userMsgs[ev.RunID]++
		}
	}
	for _, m := range w.msgs {
		if !m.acked {
			continue
		}
		if _, ok := known[m.runID]; !ok || userMsgs[m.runID] != 1 {
			tl.problem(&tl.runsLost, "session %s: acknowledged run %s (%q): in the runs list %v, user.message logged %d times", sid, m.runID, m.text, ok, userMsgs[m.runID])
		}
	}
	for _, r := range runs {
		if !r.Status.Terminal() {
			tl.problem(&tl.nonTerminal, "session %s: run %s is still %s at the end", sid, r.RunID, r.Status)
			continue
		}
		var ends, starts int
		var last rein.Event
		var end rein.RunCompletedPayload
		for _, ev := range log {
			if ev.RunID != r.RunID {
				continue
			}
			last = ev
			switch ev.Type {
			case rein.EventRunCompleted:
				ends++
				_ = ev.DecodePayload(&end)
			case rein.EventRunStarted:
				starts++
			}
		}
		if ends != 1 || last.Type != rein.EventRunCompleted || starts > 1 || end.Status != r.Status {
			tl.problem(&tl.logBroken, "session %s: run %s (%s): %d session.run_completed (status %s), %d session.run_started, last event %s", sid, r.RunID, r.Status, ends, end.Status, starts, last.Type)
		}
	}

	// Supplements: each acknowledged one logged once and consumed once.
	logged, consumed := map[string]int{}, map[string]int{}
	for _, ev := range log {
		switch ev.Type {
		case rein.EventUserSupplement:
			var p rein.SupplementPayload
			_ = ev.DecodePayload(&p)
			logged[p.SupplementID]++
		case rein.EventSupplementConsumed:
			var p rein.SupplementConsumedPayload
			_ = ev.DecodePayload(&p)
			consumed[p.SupplementID]++
		}
	}
	for _, s := range w.sups {
		if !s.acked {
			continue
		}
		tl.mu.Lock()
		tl.supplements++
		tl.mu.Unlock()
		if logged[s.id] != 1 || consumed[s.id] == 0 {
			tl.problem(&tl.supplementsLost, "session %s: acknowledged supplement %s logged %d times, consumed %d times", sid, s.id, logged[s.id], consumed[s.id])
		}
	}
	for id, n := range consumed {
		if n > 1 {
			tl.problem(&tl.supplementsTwice, "session %s: supplement %s consumed %d times", sid, id, n)
		}
	}

	// Confirmations: each call asked once; each acknowledged answer
	// logged once.
	requested, answered := map[string]int{}, map[string]int{}
	for _, ev := range log {
		switch ev.Type {
		case rein.EventToolConfirmationRequested:
			var p rein.ToolConfirmationRequestedPayload
			_ = ev.DecodePayload(&p)
			requested[p.ToolUseID]++
		case rein.EventUserToolConfirmation:
			var p rein.UserToolConfirmationPayload
			_ = ev.DecodePayload(&p)
			answered[p.ToolUseID]++
		}
	}
	denied := map[string]bool{}
	for _, a := range w.answers {
		tl.mu.Lock()
		tl.answers++
		tl.mu.Unlock()
		if answered[a.toolUseID] != 1 {
			tl.problem(&tl.confirmationsLost, "session %s: acknowledged answer to %s logged %d times", sid, a.toolUseID, answered[a.toolUseID])
		}
		if !a.allow {
			denied[a.toolUseID] = true
		}
	}
	for id, n := range requested {
		if n > 1 {
			tl.problem(&tl.confirmationsLost, "session %s: confirmation of %s requested %d times", sid, id, n)
		}
	}

	// Tools: every note in the file at most once; every write_note call
	// made once; its result agrees with the file.
	lines := map[string]int{}
	for l := range strings.SplitSeq(notes, "\n") {
		if l != "" {
			lines[l]++
		}
	}
	for l, n := range lines {
		if n > 1 {
			tl.problem(&tl.toolTwice, "session %s: note %q written %d times", sid, l, n)
		}
	}
	uses := map[string]string{} // tool_use_id → note text
	made := map[string]int{}    // note text → calls
	for _, ev := range log {
		if ev.Type != rein.EventToolUse {
			continue
		}
		var u rein.ToolUsePayload
		_ = ev.DecodePayload(&u)
		if u.Name != "write_note" {
			continue
		}
		var in struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(u.Input, &in)
		uses[u.ToolUseID] = in.Text
		made[in.Text]++
	}
	for text, n := range made {
		if n > 1 {
			tl.problem(&tl.toolTwice, "session %s: write_note of %q called %d times", sid, text, n)
		}
	}
	for _, ev := range log {
		switch ev.Type {
		case rein.EventStepRestarted:
			tl.mu.Lock()
			tl.restarts++
			tl.mu.Unlock()
		case rein.EventToolResult:
			var r rein.ToolResultPayload
			_ = ev.DecodePayload(&r)
			if r.InDoubt {
				tl.mu.Lock()
				tl.inDoubt++
				tl.mu.Unlock()
			}
			text, ok := uses[r.ToolUseID]
			if !ok {
				continue
			}
			switch {
			case !r.IsError && lines[text] != 1:
				tl.problem(&tl.toolEffects, "session %s: write_note %s answered %q but its note is in the file %d times", sid, r.ToolUseID, r.Output, lines[text])
			case denied[r.ToolUseID] && lines[text] != 0:
				tl.problem(&tl.toolEffects, "session %s: write_note %s was denied but its note is in the file", sid, r.ToolUseID)
			}
		}
	}
}

// vmRSS is the resident memory of process pid (VmRSS of
// /proc/PID/status), 0 where there is no /proc.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// mib formats a byte count.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// TestLoadKill kills `rein serve` (SQLite) with SIGKILL at a random moment
// of a load of concurrent sessions — streaming runs, queued runs, tool
// calls, supplements, parked and answered confirmations — restarts it on
// the same store, and counts the violations of loadTally, which must all
// be 0. Each repetition loads fresh sessions on the same store.
func TestLoadKill(t *testing.T) {
	t.Parallel()
	pl := plan(loadPlan{sessions: 20, reps: 2}, loadPlan{sessions: 100, reps: 20})
	seed := loadSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d (REIN_CHAOS_SEED), %d sessions × %d kills", seed, pl.sessions, pl.reps)
	store := "sqlite:" + filepath.Join(t.TempDir(), "rein.db")
	ws := filepath.Join(t.TempDir(), "workspace")
	opts := serveOptions{workspace: ws, config: loadConfig(t)}
	lc := newLoadClients(t)
	p := startServeWith(ctxFor(t, startTimeout), t, "first", store, opts)
	total := &loadTally{}
	var maxRSS int64
	seen := 0 // events the clients had read when the kills came
	for rep := 1; rep <= pl.reps; rep++ {
		l := startLoad(t, lc, []*proc{p}, rep, pl.sessions, seed)
		at := killMoment(rng)
		waitMoment(t, at)
		p.kill()
		l.stop()
		seen += countSeen(l)
		t.Logf("rep %d: killed %s %v into the load, %d events read by then", rep, p.name, at.Round(time.Millisecond), countSeen(l))
		p = startServeWith(ctxFor(t, startTimeout), t, fmt.Sprintf("restart-%d", rep), store, opts)
		tl := recoverLoad(t, lc, []*proc{p}, l, ws)
		rss := vmRSS(p.cmd.Process.Pid)
		maxRSS = max(maxRSS, rss)
		t.Logf("rep %d: %s; RSS %s; %s", rep, tl.figures(), mib(rss), tl.counts())
		tl.check(t, fmt.Sprintf("rep %d", rep))
		total.add(tl)
		if t.Failed() {
			break
		}
	}
	t.Logf("total: %d kills, %d events read by clients before them; %s; server RSS at most %s after recovery; %s", pl.reps, seen, total.figures(), mib(maxRSS), total.counts())
}

// TestLoadClusterKill is TestLoadKill on two instances sharing one
// PostgreSQL schema: each client sends to one instance and follows its
// stream on the other, and one instance, chosen at random, is killed; the
// other takes its runs over, and the killed one is started again.
func TestLoadClusterKill(t *testing.T) {
	t.Parallel()
	pl := plan(loadPlan{sessions: 20, reps: 2}, loadPlan{sessions: 100, reps: 20})
	seed := loadSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d (REIN_CHAOS_SEED), %d sessions × %d kills", seed, pl.sessions, pl.reps)
	store := pgSchema(t, pgDSN(t))
	ws := filepath.Join(t.TempDir(), "workspace")
	lc := newLoadClients(t)
	opts := func(name string) serveOptions {
		return serveOptions{workspace: ws, config: loadConfig(t), instance: "chaos-" + name}
	}
	servers := []*proc{
		startServeWith(ctxFor(t, startTimeout), t, "A", store, opts("A")),
		startServeWith(ctxFor(t, startTimeout), t, "B", store, opts("B")),
	}
	total := &loadTally{}
	var maxRSS int64
	seen := 0 // events the clients had read when the kills came
	for rep := 1; rep <= pl.reps; rep++ {
		l := startLoad(t, lc, servers, rep, pl.sessions, seed)
		victim := rng.IntN(len(servers))
		at := killMoment(rng)
		waitMoment(t, at)
		servers[victim].kill()
		l.stop()
		name := instanceNames[victim]
		seen += countSeen(l)
		t.Logf("rep %d: killed %s %v into the load, %d events read by then", rep, name, at.Round(time.Millisecond), countSeen(l))
		servers[victim] = startServeWith(ctxFor(t, startTimeout), t, name, store, opts(name))
		tl := recoverLoad(t, lc, servers, l, ws)
		var rss []string
		for _, p := range servers {
			r := vmRSS(p.cmd.Process.Pid)
			maxRSS = max(maxRSS, r)
			rss = append(rss, p.name+" "+mib(r))
		}
		t.Logf("rep %d: %s; RSS %s; %s", rep, tl.figures(), strings.Join(rss, ", "), tl.counts())
		tl.check(t, fmt.Sprintf("rep %d", rep))
		total.add(tl)
		if t.Failed() {
			break
		}
	}
	t.Logf("total: %d kills, %d events read by clients before them; %s; instance RSS at most %s after recovery; %s", pl.reps, seen, total.figures(), mib(maxRSS), total.counts())
}

// countSeen is how many events the clients had read.
func countSeen(l *load) int {
	n := 0
	for _, w := range l.sessions {
		n += len(w.seen)
	}
	return n
}
