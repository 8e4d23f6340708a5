package console_test

// The console's visible defects found trying it as a new user would: each
// scenario here failed on the console before its fix.

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRunsInTheOrderTheyRan: A runs and C waits behind it; "Replace" rolls
// A back and its replacement B runs at once, ahead of C. The conversation
// shows A, B, C — the order they ran or will run — not the order they were
// sent (A, C, B), and a reload shows the same.
func TestRunsInTheOrderTheyRan(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("order")
	p.send("long A")
	a := p.waitRuns(1)[0]
	p.waitStatus(a, "running")
	p.send("long C")
	c := p.waitRuns(2)[1]
	p.waitStatus(c, "queued · 1st")

	p.typeIn("#message", "turns B")
	p.click("#send-menu-button")
	p.click(`#send-menu [data-when="rollback"]`)
	p.waitStatus(a, "rolled back")
	p.waitJS(`document.querySelectorAll("#chat .run").length === 3`, "three run blocks")
	var b string
	for _, id := range p.runIDs() {
		if id != a && id != c {
			b = id
		}
	}
	p.waitStatus(b, "done")
	p.waitStatus(c, "running")
	want := []string{a, b, c}
	if got := p.runIDs(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("runs drawn %v, want A, B, C = %v", got, want)
	}
	p.waitRunsTable(3)
	table := strings.Join(eval[[]string](p, `[...document.querySelectorAll("#runs-table tbody tr")].map(n => n.dataset.runId)`), ",")
	if want := strings.Join([]string{c, b, a}, ","); table != want {
		t.Fatalf("runs table lists %s, want newest first in run order C, B, A = %s", table, want)
	}
	p.shot("order-after-replace")
	p.reload()
	p.waitJS(`window.reinConsole.connected`, "the stream after the reload")
	p.waitStatus(b, "done")
	if got := p.runIDs(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after a reload runs drawn %v, want A, B, C = %v", got, want)
	}
}

// TestQueuePositionAsText: queued runs say their place in the queue in
// their badge, and the places move up as a run ahead leaves the queue.
func TestQueuePositionAsText(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("queue places")
	p.send("long A")
	a := p.waitRuns(1)[0]
	p.waitStatus(a, "running")
	p.send("long B")
	p.send("long C")
	ids := p.waitRuns(3)
	b, c := ids[1], ids[2]
	p.waitStatus(b, "queued · 1st")
	p.waitStatus(c, "queued · 2nd")
	p.shot("queue-places")
	p.click(runSel(b) + " button.stop")
	p.waitStatus(b, "cancelled by you")
	p.waitStatus(c, "queued · 1st")
	p.click(runSel(a) + " button.stop")
	p.waitStatus(c, "running")
	p.click(runSel(c) + " button.stop")
	p.waitStatus(c, "stopped by you")
}

// TestStatusWords: a run the user stopped says so and its cut tool call is
// "stopped", not a red error; a normal finish is "done"; an interrupt is
// "interrupted by you" — in the block, its timeline and the runs table.
func TestStatusWords(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("words")

	p.send("long one")
	a := p.waitRuns(1)[0]
	p.waitText(runSel(a)+" .tool", "sleep")
	p.click(runSel(a) + " button.stop")
	p.waitStatus(a, "stopped by you")
	p.waitText(runSel(a)+" .tool .tool-state", "stopped")
	if n := eval[int](p, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(runSel(a)+" .tool .ts-error"))); n != 0 {
		t.Fatalf("the cut tool call of a stopped run is shown as an error")
	}
	p.waitText(runSel(a)+" .timeline", "stopped by you after")

	p.send("hello")
	r := p.waitRuns(2)[1]
	p.waitStatus(r, "done")
	p.waitText(runSel(r)+" .timeline", "done after")
	if txt := p.text(runSel(r)); strings.Contains(txt, "completed") || strings.Contains(txt, ": stop") {
		t.Fatalf("a normal finish reads %q", txt)
	}

	p.send("long two")
	i := p.waitRuns(3)[2]
	p.waitText(runSel(i)+" .tool", "sleep")
	p.click(runSel(i) + " button.interrupt")
	p.waitStatus(i, "interrupted by you")
	p.waitRunsTable(3)
	p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(a)), "stopped by you")
	p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(r)), "done")
	p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(i)), "interrupted by you")
	p.shot("status-words")
}

// TestWaitingForYou: a run held by a call waiting for an approval says
// "waiting for you", and "done" once allowed and finished.
func TestWaitingForYou(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("waiting")
	p.send("note wait for me")
	r := p.waitRuns(1)[0]
	p.waitJS(`document.querySelector("#approvals .approval")`, "an approval card")
	p.waitStatus(r, "waiting for you")
	p.shot("waiting-for-you")
	// A reload knows it too (from the log and the session's pending list).
	p.reload()
	p.waitJS(`window.reinConsole.connected`, "the stream after the reload")
	p.waitStatus(r, "waiting for you")
	p.click("#approvals .approval button.allow")
	p.waitStatus(r, "done")
}

// TestReconnectClearsErrors: while the server cannot be reached, the
// session list's refresh fails with an error box; once the stream is back,
// the box is gone.
func TestReconnectClearsErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	p.createSession("errors")
	p.send("hello before the outage")
	r := p.waitRuns(1)[0]
	p.waitEnded(r)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there: every request fails
	e.proxy.switchTo(dead)
	e.proxy.cut()
	p.waitText("#stream-state", "disconnected")
	p.click("#refresh-sessions")
	p.waitJS(`!document.querySelector("#sessions-error").hidden`, "the session list's error")
	p.shot("errors-outage")

	e.proxy.switchTo(e.srv.URL)
	p.waitText("#stream-state", "live")
	p.waitJS(`document.querySelector("#sessions-error").hidden && document.querySelector("#session-error").hidden`, "the outage's error boxes to go")
	p.shot("errors-after-reconnect")
}

// TestSessionListMarkers: the session list names each session by its title
// (an untitled one by its first message) and marks, from GET /api/sessions
// alone, the ones working and the calls waiting for a person.
func TestSessionListMarkers(t *testing.T) {
	e := newEnv(t, envOptions{})
	p := e.page
	a := p.createSession("")
	p.send("note from the first session")
	p.waitJS(`document.querySelector("#approvals .approval")`, "an approval card")
	item := fmt.Sprintf(`#session-list li[data-session-id=%s] > a`, js(a))
	p.waitText(item+" .session-name", "note from the first session")

	p.typeIn("#new-title", "second")
	p.click("#create-session")
	p.waitJS(fmt.Sprintf(`window.reinConsole.sessionId !== %s && window.reinConsole.connected`, js(a)), "the second session to open")
	opened := len(e.proxy.allRequests())
	p.waitText(item, "working")
	p.waitText(item, "1 waiting for you")
	p.shot("session-markers")
	for _, r := range e.proxy.allRequests()[opened:] {
		if strings.Contains(r.URL.Path, "/api/sessions/"+a) {
			t.Fatalf("the list asked about session %s itself: %s %s", a, r.Method, r.URL)
		}
	}

	// Back in the first session, allowing the call clears both marks.
	p.click(item)
	p.waitJS(fmt.Sprintf(`window.reinConsole.sessionId === %s && window.reinConsole.connected`, js(a)), "the first session to open")
	p.click("#approvals .approval button.allow")
	p.waitJS(fmt.Sprintf(`(() => { const t = document.querySelector(%s).textContent; return !t.includes("working") && !t.includes("waiting for you"); })()`, js(item)), "the marks to go")
}

// TestFoldAndStickyControls: a finished run folds to one line (its status,
// duration and the first line of its reply) once a later run exists, and
// unfolds on a click; the running run's Stop stays in view while its long
// reply scrolls past.
func TestFoldAndStickyControls(t *testing.T) {
	e := newEnv(t, envOptions{width: 1366, height: 700})
	p := e.page
	p.createSession("fold")
	p.send("hello fold")
	first := p.waitRuns(1)[0]
	p.waitEnded(first)

	p.send("tall run")
	tall := p.waitRuns(2)[1]
	p.waitText(runSel(tall)+" .tool", "sleep")
	p.waitJS(fmt.Sprintf(`document.querySelector(%s).classList.contains("folded")`, js(runSel(first))), "the finished run to fold")
	p.waitText(runSel(first)+" .fold-summary", "echo: hello fold")
	p.waitText(runSel(first)+" .run-head", "done")
	if h := eval[float64](p, fmt.Sprintf(`document.querySelector(%s).getBoundingClientRect().height`, js(runSel(first)))); h > 60 {
		t.Fatalf("a folded run is %.0f px tall, want one line", h)
	}

	// Scroll to the middle of the tall reply: its Stop is still in view.
	eval[bool](p, fmt.Sprintf(`(() => { const n = document.querySelector(%s); window.scrollTo(0, n.getBoundingClientRect().top + window.scrollY + 600); return true; })()`, js(runSel(tall)+" .step")))
	p.waitJS(fmt.Sprintf(`document.querySelector(%s).getBoundingClientRect().top < 0`, js(runSel(tall)+" .user-msg")), "the run's start scrolled out of view")
	p.shot("fold-sticky")
	in := eval[bool](p, fmt.Sprintf(`(() => { const r = document.querySelector(%s).getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0; })()`, js(runSel(tall)+" button.stop")))
	if !in {
		t.Fatal("the running run's Stop scrolled out of view")
	}

	p.click(runSel(first) + " .fold-toggle")
	p.waitJS(fmt.Sprintf(`!document.querySelector(%s).classList.contains("folded") && !document.querySelector(%s).hidden`, js(runSel(first)), js(runSel(first)+" .run-body")), "the run to unfold")
	p.click(runSel(tall) + " button.stop")
	p.waitEnded(tall)
	// The newest run stays open; the one unfolded by hand stays unfolded.
	if f := eval[bool](p, fmt.Sprintf(`document.querySelector(%s).classList.contains("folded") || document.querySelector(%s).classList.contains("folded")`, js(runSel(tall)), js(runSel(first)))); f {
		t.Fatal("a run folded against the person's choice, or the newest run folded")
	}
}

// TestLayoutNoClipping: at 1366 px and at 375 px the runs table fits its
// box (nothing cut or scrolled sideways), and at 1366 px the sidebar stays
// in view beside a conversation longer than the screen.
func TestLayoutNoClipping(t *testing.T) {
	for _, size := range []struct{ w, h int64 }{{1366, 700}, {375, 812}} {
		t.Run(fmt.Sprint(size.w), func(t *testing.T) {
			e := newEnv(t, envOptions{width: size.w, height: size.h})
			p := e.page
			sid := p.createSession("layout")
			p.send("hello layout")
			r := p.waitRuns(1)[0]
			p.waitEnded(r)
			p.send("long and then stopped")
			s := p.waitRuns(2)[1]
			p.waitText(runSel(s)+" .tool", "sleep")
			p.click(runSel(s) + " button.stop")
			p.waitEnded(s)
			p.send("tall and running")
			tall := p.waitRuns(3)[2]
			p.waitText(runSel(tall)+" .tool", "sleep")
			p.waitRunsTable(3)
			p.waitText(fmt.Sprintf(`#runs-table tr[data-run-id=%s]`, js(r)), "/")
			fits := eval[string](p, `(() => { const w = document.querySelector("#runs-box .table-wrap"); return w.scrollWidth + " " + w.clientWidth; })()`)
			var sw, cw int
			fmt.Sscan(fits, &sw, &cw)
			if sw > cw {
				t.Errorf("at %d px the runs table is %d px wide in a %d px box", size.w, sw, cw)
			}
			if w := eval[int](p, `document.documentElement.scrollWidth`); w > int(size.w) {
				t.Errorf("at %d px wide the page is %d px wide", size.w, w)
			}
			p.shot(fmt.Sprintf("layout-%dpx", size.w))
			if size.w < 720 {
				return
			}
			eval[bool](p, `(window.scrollTo(0, document.documentElement.scrollHeight), true)`)
			p.waitJS(`window.scrollY > 300`, "the page to scroll down")
			link := fmt.Sprintf(`#session-list a[data-session-id=%s]`, js(sid))
			in := eval[bool](p, fmt.Sprintf(`(() => { const r = document.querySelector(%s).getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; })()`, js(link)))
			p.shot("layout-1366px-scrolled")
			if !in {
				t.Error("scrolled down a long session, the sidebar is a blank column: the session list is out of view")
			}
			p.click(runSel(tall) + " button.stop")
			p.waitEnded(tall)
		})
	}
}

// waitEnded waits until the run's block shows it ended, whatever its words.
func (p *page) waitEnded(runID string) {
	p.t.Helper()
	p.waitJS(fmt.Sprintf(`document.querySelector(%s)`, js(runSel(runID)+".ended")), fmt.Sprintf("run %s to end", runID))
}

// TestEndWords: how runs end that no scripted scenario reaches quickly — a
// deadline, the step limit, the budget, an error, a cancel no person asked
// for, a queued run a person cancelled — each in plain words (served from
// a fixed log).
func TestEndWords(t *testing.T) {
	chromium(t)
	const sid = "ses_words"
	now := time.Now().UTC()
	at := func(i int) string { return now.Add(time.Duration(i) * time.Second).Format(time.RFC3339Nano) }
	var evs []map[string]any
	add := func(run, typ string, payload map[string]any) {
		n := len(evs) + 1
		payload["run_id"] = run
		evs = append(evs, map[string]any{"seq": n, "id": fmt.Sprintf("evt_%d", n), "session_id": sid, "run_id": run, "type": typ, "payload": payload, "created_at": at(n)})
	}
	ran := func(run, text string, end map[string]any) {
		add(run, "user.message", map[string]any{"text": text})
		add(run, "session.run_started", map[string]any{})
		add(run, "session.run_completed", end)
	}
	ran("run_timeout", "slow", map[string]any{"status": "CANCELLED", "reason": "timeout"})
	ran("run_steps", "many steps", map[string]any{"status": "COMPLETED", "reason": "max_steps"})
	ran("run_budget", "costly", map[string]any{"status": "COMPLETED", "reason": "budget"})
	ran("run_failed", "broken", map[string]any{"status": "FAILED", "reason": "error", "error": "model unavailable"})
	ran("run_cancelled", "cut by a shutdown", map[string]any{"status": "CANCELLED", "reason": "cancelled"})
	add("run_queued", "user.message", map[string]any{"text": "never ran"})
	add("run_queued", "session.run_queued", map[string]any{"position": 1})
	add("run_queued", "user.interrupt", map[string]any{"mode": "cancel", "accepted": true})
	add("run_queued", "session.run_completed", map[string]any{"status": "CANCELLED", "reason": "cancelled"})
	ts := serveFixedLog(t, sid, evs, len(evs), []any{})

	p := openPage(t, ts.URL, 1280, 900)
	p.do(chromedp.Navigate(ts.URL + "/#/s/" + sid))
	p.waitJS(`window.reinConsole.connected`, "the fixed session")
	for run, want := range map[string]string{
		"run_timeout":   "timed out",
		"run_steps":     "stopped at its step limit",
		"run_budget":    "stopped at its budget",
		"run_failed":    "failed",
		"run_cancelled": "stopped",
		"run_queued":    "cancelled by you",
	} {
		p.waitStatus(run, want)
	}
	p.waitText(runSel("run_failed")+" .run-msg", "model unavailable")
	p.shot("end-words")
}

// TestRunsTableFitsLongValues: long durations, large token counts and the
// longest status words still fit the runs table's box at 1366 and 375 px.
func TestRunsTableFitsLongValues(t *testing.T) {
	chromium(t)
	const sid = "ses_wide"
	now := time.Now().UTC()
	at := func(s int) string { return now.Add(time.Duration(s) * time.Second).Format(time.RFC3339Nano) }
	var evs []map[string]any
	add := func(run, typ string, payload map[string]any) {
		n := len(evs) + 1
		payload["run_id"] = run
		evs = append(evs, map[string]any{"seq": n, "id": fmt.Sprintf("evt_%d", n), "session_id": sid, "run_id": run, "type": typ, "payload": payload, "created_at": at(n * 1000)})
	}
	usage := map[string]any{"input_tokens": 12345678, "output_tokens": 1234567, "cost_usd": nil}
	var runs []any
	for i, end := range []map[string]any{
		{"status": "COMPLETED", "reason": "max_steps"},
		{"status": "CANCELLED", "reason": "cancelled"},
		{"status": "COMPLETED", "reason": "stop"},
	} {
		run := fmt.Sprintf("run_wide_%d", i)
		add(run, "user.message", map[string]any{"text": "a long one"})
		add(run, "session.run_started", map[string]any{})
		add(run, "agent.message", map[string]any{"text": "ok", "reason": end["reason"], "usage": usage})
		add(run, "session.run_completed", end)
		runs = append(runs, map[string]any{"run_id": run, "status": end["status"], "reason": end["reason"], "created_at": at(i * 4000),
			"started_at": at(i * 4000), "ended_at": at(i*4000 + 3725), "usage": usage})
	}
	ts := serveFixedLog(t, sid, evs, len(evs), runs)
	for _, w := range []int64{1366, 375} {
		p := openPage(t, ts.URL, w, 800)
		p.do(chromedp.Navigate(ts.URL + "/#/s/" + sid))
		p.waitJS(`window.reinConsole.connected`, "the fixed session")
		p.waitRunsTable(3)
		p.waitJS(`[...document.querySelectorAll("#runs-table tbody tr")].every(r => r.lastElementChild.textContent.includes("/"))`, "token counts in every row")
		p.waitText("#runs-table", "1 h 02 min")
		fits := eval[string](p, `(() => { const w = document.querySelector("#runs-box .table-wrap"); return w.scrollWidth + " " + w.clientWidth; })()`)
		var sw, cw int
		fmt.Sscan(fits, &sw, &cw)
		if sw > cw {
			t.Errorf("at %d px the runs table is %d px wide in a %d px box", w, sw, cw)
		}
		p.shot(fmt.Sprintf("runs-table-long-values-%dpx", w))
	}
}
