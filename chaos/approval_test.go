package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// The scenarios of this file are about docs/tools.md "Confirmations are
// durable": a run whose step waits only for confirmation answers is parked
// in the store (RUNNING, holding the session's turn, no goroutine), and it
// must survive a graceful shutdown, a kill -9 and the passing of its
// deadline while no server runs. The side effect counted is the built-in
// write_note tool, which needs confirmation by default and appends its
// text to notes.md in the session's workspace folder.

const (
	// termTimeout bounds a graceful shutdown: a parked run does not hold
	// up the drain, so the process exits well within it.
	termTimeout = 15 * time.Second
	// callTimeout bounds one HTTP request.
	callTimeout = 5 * time.Second

	// noteInput starts a run of the "note:" rule of testdata/chaos.yaml:
	// one write_note call of noteText, then "after the note: <result>".
	noteInput = "note: please"
	noteText  = "the approved note"
	// notesInput starts a run of the "notes:" rule: two write_note calls in
	// one step (firstNote, then secondNote), then "after the notes:
	// <last result>".
	notesInput = "notes: two of them"
	firstNote  = "first note"
	secondNote = "the second note"
	// denyMessage is what the user says when denying.
	denyMessage = "not in my notes, thank you"
	// localOwner is the owner of single-user mode (docs/api.md).
	localOwner = "local"
)

// TestApprovalSurvivesSIGTERM is scenario 1: a run waiting for a
// confirmation is not interrupted by a graceful shutdown (docs/api.md
// "Shutdown"). After the restart the session is still busy with it, the
// call is still pending and not asked again, a new message is refused, and
// an allow runs the tool exactly once and completes the run.
func TestApprovalSurvivesSIGTERM(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			ws := filepath.Join(t.TempDir(), "workspace")
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, serveOptions{workspace: ws})
			sid := newSession(t, p1)
			runID := send(t, p1, sid, noteInput)
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, requestedN(runID, 1))
			req := requestedOf(t, seen, runID)[0]
			checkRequest(t, req, runID, noteText)
			notes := notesPath(p1, localOwner, sid)

			p1.term(ctxFor(t, termTimeout), t)
			t.Logf("%s exited 0 after SIGTERM with run %s waiting for %s", p1.name, runID, req.ToolUseID)

			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, serveOptions{workspace: ws})
			checkParked(t, p2, "", sid, runID, req)
			checkNoNotes(t, notes)

			answer(t, p2.client, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: true})
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)
			checkAsked(t, run, req)
			checkAnswerLogged(t, run, runID, req.ToolUseID, true, nil)
			res := resultOf(t, run, req.ToolUseID)
			if res.IsError || res.InDoubt || res.Output == "" {
				t.Errorf("agent.tool_result of the allowed call = %+v, want a success", res)
			}
			checkNotRepeated(t, run)
			if want := "after the note: " + res.Output; finalMessage(t, run, runID).Text != want {
				t.Errorf("final reply = %q, want %q", finalMessage(t, run, runID).Text, want)
			}
			checkNotes(t, notes, noteText+"\n")
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)
			answerAgain(t, p2.client, sid, req.ToolUseID)

			followUp(t, p2, sid, "hello after the approval")
		})
	}
}

// TestApprovalSurvivesKillThenDeny is scenario 2: the same across a kill
// -9, answered with a deny. The tool never runs, and the model continues
// from the error result that carries the deny message.
func TestApprovalSurvivesKillThenDeny(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			ws := filepath.Join(t.TempDir(), "workspace")
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, serveOptions{workspace: ws})
			sid := newSession(t, p1)
			runID := send(t, p1, sid, noteInput)
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, requestedN(runID, 1))
			req := requestedOf(t, seen, runID)[0]
			checkRequest(t, req, runID, noteText)
			notes := notesPath(p1, localOwner, sid)

			p1.kill()
			t.Logf("killed %s with run %s waiting for %s", p1.name, runID, req.ToolUseID)

			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, serveOptions{workspace: ws})
			checkParked(t, p2, "", sid, runID, req)

			answer(t, p2.client, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: false, DenyMessage: denyMessage})
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)
			checkAsked(t, run, req)
			deny := denyMessage
			checkAnswerLogged(t, run, runID, req.ToolUseID, false, &deny)
			res := resultOf(t, run, req.ToolUseID)
			if !res.IsError || res.InDoubt || !strings.Contains(res.Output, denyMessage) {
				t.Errorf("agent.tool_result of the denied call = %+v, want an error result carrying %q", res, denyMessage)
			}
			checkNotRepeated(t, run)
			final := finalMessage(t, run, runID).Text
			if want := "after the note: " + res.Output; final != want || !strings.Contains(final, denyMessage) {
				t.Errorf("final reply = %q, want %q (carrying the deny message %q)", final, want, denyMessage)
			}
			checkNoNotes(t, notes)
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)
			answerAgain(t, p2.client, sid, req.ToolUseID)

			followUp(t, p2, sid, "hello after the denial")
		})
	}
}

// TestApprovalTwoCallsOutOfOrder is scenario 3: one step with two calls
// that need confirmation. Both are requested at once, in the model's
// order; the second is answered first, the server is killed, and the first
// is answered on the restarted server. Each note is written once, the
// answered call is not asked again, and the next model request carries the
// step's results in the model's order (its .ToolResult, the last result,
// is the second call's).
func TestApprovalTwoCallsOutOfOrder(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			ws := filepath.Join(t.TempDir(), "workspace")
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, serveOptions{workspace: ws})
			sid := newSession(t, p1)
			runID := send(t, p1, sid, notesInput)
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, requestedN(runID, 2))
			reqs := requestedOf(t, seen, runID)
			first, second := reqs[0], reqs[1]
			// requestedOf keeps log order: the first request logged must be
			// the model's first call.
			checkRequest(t, first, runID, firstNote)
			checkRequest(t, second, runID, secondNote)
			checkModelOrder(t, seen, runID, first.ToolUseID, second.ToolUseID)
			notes := notesPath(p1, localOwner, sid)
			checkParked(t, p1, "", sid, runID, first, second)

			// The second call first: it runs while the first still waits.
			answer(t, p1.client, sid, client.ToolConfirmation{ToolUseID: second.ToolUseID, Allow: true})
			seen = readUntil(ctxFor(t, cutTimeout), t, p1, sid, func(evs []rein.Event) bool {
				return hasResult(evs, second.ToolUseID)
			})
			if hasResult(seen, first.ToolUseID) {
				t.Fatalf("the first call has a result although only the second was answered\n%s", dump(seen))
			}
			checkNotes(t, notes, secondNote+"\n")

			p1.kill()
			t.Logf("killed %s with run %s: %s answered and run, %s waiting", p1.name, runID, second.ToolUseID, first.ToolUseID)

			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, serveOptions{workspace: ws})
			// Only the unanswered call is pending after the restart.
			checkParked(t, p2, "", sid, runID, first)
			checkNotes(t, notes, secondNote+"\n")

			answer(t, p2.client, sid, client.ToolConfirmation{ToolUseID: first.ToolUseID, Allow: true})
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)
			checkAsked(t, run, first, second)
			checkAnswerLogged(t, run, runID, first.ToolUseID, true, nil)
			checkAnswerLogged(t, run, runID, second.ToolUseID, true, nil)
			r1, r2 := resultOf(t, run, first.ToolUseID), resultOf(t, run, second.ToolUseID)
			for _, r := range []rein.ToolResultPayload{r1, r2} {
				if r.IsError || r.InDoubt || r.Output == "" {
					t.Errorf("agent.tool_result %+v, want a success", r)
				}
			}
			if r1.Output == r2.Output {
				t.Fatalf("both calls answered %q: the scenario cannot tell their results apart", r1.Output)
			}
			checkNotRepeated(t, run)
			// The next request's last tool result is the model's last call,
			// not the last one answered.
			final := finalMessage(t, run, runID).Text
			if want := "after the notes: " + r2.Output; final != want {
				t.Errorf("final reply = %q, want %q: step 2's request did not carry the results in the model's order (the first call's result is %q)", final, want, r1.Output)
			}
			// Each note once, in the order they were allowed.
			checkNotes(t, notes, secondNote+"\n"+firstNote+"\n")
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)
			answerAgain(t, p2.client, sid, first.ToolUseID)
			answerAgain(t, p2.client, sid, second.ToolUseID)

			followUp(t, p2, sid, "hello after two notes")
		})
	}
}

// TestApprovalOtherOwner is scenario 4: an answer from another owner is
// answered like an unknown id (404 not_found), before and after a restart;
// it changes nothing, and the session's owner can still answer.
func TestApprovalOtherOwner(t *testing.T) {
	const (
		aliceToken = "chaos-token-alice"
		bobToken   = "chaos-token-bob"
	)
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			dir := t.TempDir()
			ws := filepath.Join(dir, "workspace")
			tokens := filepath.Join(dir, "tokens")
			if err := os.WriteFile(tokens, []byte("# two owners\n"+aliceToken+" alice\n"+bobToken+" bob\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := serveOptions{workspace: ws, tokens: tokens, token: aliceToken}
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, opts)
			sid := newSession(t, p1)
			runID := send(t, p1, sid, noteInput)
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, requestedN(runID, 1))
			req := requestedOf(t, seen, runID)[0]
			checkRequest(t, req, runID, noteText)

			bob := newClient(p1, bobToken)
			bobSid := func() string {
				s, err := bob.CreateSession(ctxFor(t, callTimeout), client.CreateSessionRequest{})
				if err != nil {
					t.Fatalf("bob: create session: %v", err)
				}
				return s.ID
			}()
			otherOwner := func(p *proc, bob *client.Client) {
				t.Helper()
				for _, tc := range []struct {
					what string
					c    *client.Client
					sid  string
					id   string
				}{
					{"bob answers in alice's session", bob, sid, req.ToolUseID},
					{"bob answers alice's call in his own session", bob, bobSid, req.ToolUseID},
					{"alice answers an unknown id", p.client, sid, "toolu_unknown_" + req.ToolUseID},
				} {
					for _, allow := range []bool{true, false} {
						_, err := tc.c.ConfirmTool(ctxFor(t, callTimeout), tc.sid, client.ToolConfirmation{ToolUseID: tc.id, Allow: allow, DenyMessage: "from the wrong place"})
						checkError(t, err, http.StatusNotFound, rein.CodeNotFound, fmt.Sprintf("%s: %s (allow %v)", p.name, tc.what, allow))
					}
				}
				if _, err := bob.GetSession(ctxFor(t, callTimeout), sid); !errors.Is(err, rein.ErrNotFound) {
					t.Errorf("%s: bob reads alice's session: %v, want 404 not_found", p.name, err)
				}
				// Nothing of it reached alice's run, or bob's session.
				checkParked(t, p, aliceToken, sid, runID, req)
				log, err := listAll(ctxFor(t, callTimeout), p, sid)
				if err != nil {
					t.Fatalf("%s: list events: %v", p.name, err)
				}
				if evs := all(log, rein.EventUserToolConfirmation); len(evs) != 0 {
					t.Errorf("%s: a refused answer was logged in alice's session:\n%s", p.name, dump(evs))
				}
				evs, last, err := bob.ListEvents(ctxFor(t, callTimeout), bobSid, 0, 100)
				if err != nil || len(evs) != 0 || last != 0 {
					t.Errorf("%s: bob's session has events %v (last_seq %d, err %v), want none", p.name, evs, last, err)
				}
				checkNoNotes(t, notesPath(p, "alice", sid))
				checkNoNotes(t, notesPath(p, "bob", bobSid))
			}
			otherOwner(p1, bob)

			p1.term(ctxFor(t, termTimeout), t)
			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, opts)
			otherOwner(p2, newClient(p2, bobToken))

			answer(t, p2.client, sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: true})
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			checkCompletedOnce(t, run, runID)
			checkAsked(t, run, req)
			checkAnswerLogged(t, run, runID, req.ToolUseID, true, nil)
			if res := resultOf(t, run, req.ToolUseID); res.IsError || res.InDoubt {
				t.Errorf("agent.tool_result of the allowed call = %+v, want a success", res)
			}
			checkNotes(t, notesPath(p2, "alice", sid), noteText+"\n")
			checkNoNotes(t, notesPath(p2, "bob", bobSid))
			checkRun(t, p2, sid, runID, rein.StatusCompleted, rein.ReasonStop)
			// Once answered, the call is no longer pending for its owner;
			// for bob it stays unknown.
			answerAgain(t, p2.client, sid, req.ToolUseID)
			_, err := newClient(p2, bobToken).ConfirmTool(ctxFor(t, callTimeout), sid, client.ToolConfirmation{ToolUseID: req.ToolUseID, Allow: true})
			checkError(t, err, http.StatusNotFound, rein.CodeNotFound, "bob answers alice's answered call")
		})
	}
}

// TestApprovalDeadlineWhileDown is scenario 5: a parked run's deadline
// (timeout_s) applies also while no server runs. The server is killed
// before the deadline, started again after it, and the run ends
// CANCELLED/timeout without the tool running; the session is usable
// again.
func TestApprovalDeadlineWhileDown(t *testing.T) {
	const timeoutS = 2
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			ws := filepath.Join(t.TempDir(), "workspace")
			p1 := startServeWith(ctxFor(t, startTimeout), t, "first", store, serveOptions{workspace: ws})
			sid := newSession(t, p1)
			r, err := p1.client.SendMessage(ctxFor(t, callTimeout), sid, client.Message{Text: noteInput + " with a deadline", TimeoutS: timeoutS})
			if err != nil || r.RunID == "" {
				t.Fatalf("send with timeout_s %d: %+v, %v", timeoutS, r, err)
			}
			runID := r.RunID
			seen := readUntil(ctxFor(t, cutTimeout), t, p1, sid, requestedN(runID, 1))
			req := requestedOf(t, seen, runID)[0]
			checkRequest(t, req, runID, noteText)
			notes := notesPath(p1, localOwner, sid)
			rec, err := p1.client.GetRun(ctxFor(t, callTimeout), sid, runID)
			if err != nil {
				t.Fatalf("get run: %v", err)
			}
			// The deadline covers queue time: it counts from admission.
			deadline := rec.CreatedAt.Add(timeoutS * time.Second)

			p1.kill()
			if left := time.Until(deadline); left <= 0 {
				t.Fatalf("the deadline (%s) passed before the kill: the scenario did not kill a parked run in time", deadline.Format(time.RFC3339Nano))
			} else {
				t.Logf("killed %s with run %s parked, %v before its deadline", p1.name, runID, left.Round(time.Millisecond))
			}
			// The only wait on the wall clock: until the deadline has
			// passed (with a margin for the clock's granularity), bounded.
			waitPast(ctxFor(t, 2*timeoutS*time.Second+5*time.Second), t, deadline.Add(200*time.Millisecond))

			p2 := startServeWith(ctxFor(t, startTimeout), t, "restarted", store, serveOptions{workspace: ws})
			log := waitRunEnd(ctxFor(t, runTimeout), t, p2, sid, runID)
			checkLog(t, log)
			checkKept(t, seen, log)
			run := runEvents(log, runID)
			ends := all(run, rein.EventRunCompleted)
			if len(ends) != 1 {
				t.Fatalf("want exactly one session.run_completed of run %s, got %d\n%s", runID, len(ends), dump(run))
			}
			if run[len(run)-1].Seq != ends[0].Seq {
				t.Errorf("session.run_completed (seq %d) is not the run's last event (seq %d)", ends[0].Seq, run[len(run)-1].Seq)
			}
			var rc rein.RunCompletedPayload
			decode(t, ends[0], &rc)
			if rc.RunID != runID || rc.Status != rein.StatusCancelled || rc.Reason != rein.ReasonTimeout {
				t.Errorf("session.run_completed = %+v, want run %s CANCELLED/timeout", rc, runID)
			}
			if msgs := all(run, rein.EventMessage); len(msgs) != 0 {
				t.Errorf("a run that timed out has a final reply:\n%s", dump(msgs))
			}
			checkAsked(t, run, req)
			if evs := all(run, rein.EventUserToolConfirmation); len(evs) != 0 {
				t.Errorf("unanswered call has user.tool_confirmation events:\n%s", dump(evs))
			}
			// The call the deadline cut short has an error result (docs/api.md:
			// matching the synthetic result in the transcript), and the tool
			// never ran.
			if res := resultOf(t, run, req.ToolUseID); !res.IsError {
				t.Errorf("agent.tool_result of the timed-out call = %+v, want is_error", res)
			}
			checkNoNotes(t, notes)
			checkRun(t, p2, sid, runID, rein.StatusCancelled, rein.ReasonTimeout)
			answerAgain(t, p2.client, sid, req.ToolUseID)
			if v := getSessionView(t, p2, "", sid); len(v.PendingConfirmations) != 0 {
				t.Errorf("after the timeout pending_confirmations = %+v, want []", v.PendingConfirmations)
			}
			checkNoNotes(t, notes)

			followUp(t, p2, sid, "hello after the deadline")
		})
	}
}

// requestedN is a readUntil condition: n confirmation requests of run are
// in the log.
func requestedN(runID string, n int) func([]rein.Event) bool {
	return func(evs []rein.Event) bool {
		k := 0
		for _, ev := range evs {
			if ev.Type == rein.EventToolConfirmationRequested && ev.RunID == runID {
				k++
			}
		}
		return k >= n
	}
}

// request is one session.tool_confirmation_requested of the log.
type request struct {
	rein.ToolConfirmationRequestedPayload
	seq int64
}

// requestedOf returns run's confirmation requests in log order.
func requestedOf(t *testing.T, evs []rein.Event, runID string) []request {
	t.Helper()
	var out []request
	for _, ev := range evs {
		if ev.Type != rein.EventToolConfirmationRequested || ev.RunID != runID {
			continue
		}
		var p rein.ToolConfirmationRequestedPayload
		decode(t, ev, &p)
		out = append(out, request{p, ev.Seq})
	}
	return out
}

// checkRequest checks a request's payload: run's write_note call of text.
func checkRequest(t *testing.T, r request, runID, text string) {
	t.Helper()
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(r.Input, &in); err != nil || r.RunID != runID || r.Name != "write_note" || r.ToolUseID == "" || in.Text != text {
		t.Fatalf("session.tool_confirmation_requested (seq %d) = %+v input %s, want run %s's write_note of %q", r.seq, r.ToolConfirmationRequestedPayload, r.Input, runID, text)
	}
}

// checkModelOrder checks that run's agent.tool_use events name the calls in
// ids' order (the model's order) and that their confirmation requests are
// logged in that order too.
func checkModelOrder(t *testing.T, evs []rein.Event, runID string, ids ...string) {
	t.Helper()
	var uses, reqs []string
	for _, ev := range evs {
		if ev.RunID != runID {
			continue
		}
		switch ev.Type {
		case rein.EventToolUse:
			var u rein.ToolUsePayload
			decode(t, ev, &u)
			uses = append(uses, u.ToolUseID)
		case rein.EventToolConfirmationRequested:
			var r rein.ToolConfirmationRequestedPayload
			decode(t, ev, &r)
			reqs = append(reqs, r.ToolUseID)
		}
	}
	if !slices.Equal(uses, ids) || !slices.Equal(reqs, ids) {
		t.Fatalf("agent.tool_use order %v, confirmation request order %v, want both %v (the model's order)\n%s", uses, reqs, ids, dump(evs))
	}
}

// checkAsked checks that each of reqs was requested exactly once in the
// run (never again after a restart or an answer), and that the run asked
// for nothing else.
func checkAsked(t *testing.T, run []rein.Event, reqs ...request) {
	t.Helper()
	got := all(run, rein.EventToolConfirmationRequested)
	if len(got) != len(reqs) {
		t.Errorf("session.tool_confirmation_requested logged %d times, want %d (one per call, never again)\n%s", len(got), len(reqs), dump(got))
	}
	for _, r := range reqs {
		n := 0
		for _, ev := range got {
			var p rein.ToolConfirmationRequestedPayload
			decode(t, ev, &p)
			if p.ToolUseID == r.ToolUseID {
				n++
			}
		}
		if n != 1 {
			t.Errorf("call %s was requested %d times, want once", r.ToolUseID, n)
		}
	}
}

// checkAnswerLogged checks that the call's answer is logged exactly once,
// as given, with the waiting run on its envelope.
func checkAnswerLogged(t *testing.T, run []rein.Event, runID, toolUseID string, allow bool, deny *string) {
	t.Helper()
	var got []rein.UserToolConfirmationPayload
	for _, ev := range all(run, rein.EventUserToolConfirmation) {
		var p rein.UserToolConfirmationPayload
		decode(t, ev, &p)
		if p.ToolUseID == toolUseID {
			got = append(got, p)
		}
	}
	if len(got) != 1 {
		t.Errorf("user.tool_confirmation of %s in run %s logged %d times, want once", toolUseID, runID, len(got))
		return
	}
	p := got[0]
	if p.Allow != allow || (deny == nil) != (p.DenyMessage == nil) || deny != nil && *deny != *p.DenyMessage {
		t.Errorf("user.tool_confirmation of %s = allow %v deny_message %v, want allow %v deny_message %v", toolUseID, p.Allow, strPtr(p.DenyMessage), allow, strPtr(deny))
	}
}

func strPtr(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// resultOf returns the one agent.tool_result of the call.
func resultOf(t *testing.T, run []rein.Event, toolUseID string) rein.ToolResultPayload {
	t.Helper()
	var out []rein.ToolResultPayload
	for _, ev := range all(run, rein.EventToolResult) {
		var r rein.ToolResultPayload
		decode(t, ev, &r)
		if r.ToolUseID == toolUseID {
			out = append(out, r)
		}
	}
	if len(out) != 1 {
		t.Fatalf("want exactly one agent.tool_result for %s, got %d\n%s", toolUseID, len(out), dump(run))
	}
	return out[0]
}

// hasResult reports whether the events hold a result of the call.
func hasResult(evs []rein.Event, toolUseID string) bool {
	for _, ev := range evs {
		var r rein.ToolResultPayload
		if ev.Type == rein.EventToolResult && json.Unmarshal(ev.Payload, &r) == nil && r.ToolUseID == toolUseID {
			return true
		}
	}
	return false
}

// checkNotRepeated checks that the parked step was taken up where it
// stood: its model request was not made again and no call of it was
// answered in doubt.
func checkNotRepeated(t *testing.T, run []rein.Event) {
	t.Helper()
	if rs := all(run, rein.EventStepRestarted); len(rs) != 0 {
		t.Errorf("agent.step_restarted logged %d times, want none: the parked step's model request had ended\n%s", len(rs), dump(rs))
	}
	for _, ev := range all(run, rein.EventToolUse) {
		var u rein.ToolUsePayload
		decode(t, ev, &u)
		if u.Step != 1 {
			t.Errorf("agent.tool_use (seq %d) in step %d: only step 1 calls tools", ev.Seq, u.Step)
		}
	}
	for _, ev := range all(run, rein.EventToolResult) {
		var r rein.ToolResultPayload
		decode(t, ev, &r)
		if r.InDoubt {
			t.Errorf("agent.tool_result in doubt (seq %d): a parked call was not executing when the server stopped", ev.Seq)
		}
	}
}

// sessionView is GET /api/sessions/{id} (docs/api.md), with the
// pending_confirmations the client package does not decode.
type sessionView struct {
	ID                   string                `json:"id"`
	State                string                `json:"state"`
	CurrentRunID         *string               `json:"current_run_id"`
	QueuedRunIDs         []string              `json:"queued_run_ids"`
	LastSeq              int64                 `json:"last_seq"`
	PendingConfirmations []pendingConfirmation `json:"pending_confirmations"`
}

type pendingConfirmation struct {
	ToolUseID string          `json:"tool_use_id"`
	RunID     string          `json:"run_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	CreatedAt time.Time       `json:"created_at"`
}

// getSessionView reads the session over plain HTTP as the owner of token
// ("" in single-user mode).
func getSessionView(t *testing.T, p *proc, token, sid string) sessionView {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, callTimeout), http.MethodGet, p.url+"/api/sessions/"+sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: GET session %s: %v", p.name, sid, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: GET session %s: %d %s (%v)", p.name, sid, resp.StatusCode, body, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("%s: GET session %s: %v: %s", p.name, sid, err, body)
	}
	for _, k := range []string{"pending_confirmations", "queued_run_ids"} {
		if v, ok := raw[k]; !ok || string(v) == "null" {
			t.Errorf("%s: GET session %s: %q is %s, want an array: %s", p.name, sid, k, v, body)
		}
	}
	var v sessionView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s: GET session %s: %v: %s", p.name, sid, err, body)
	}
	return v
}

// checkParked checks what a parked run looks like from outside (docs/tools.md):
// the run is RUNNING, the session is busy with it and lists exactly the
// pending calls, and a new message is refused with session_busy naming it.
func checkParked(t *testing.T, p *proc, token, sid, runID string, pending ...request) {
	t.Helper()
	v := getSessionView(t, p, token, sid)
	cur := ""
	if v.CurrentRunID != nil {
		cur = *v.CurrentRunID
	}
	if v.State != "busy" || cur != runID || len(v.QueuedRunIDs) != 0 {
		t.Errorf("%s: session %s is %q with current run %q, queued %v; want busy with %s", p.name, sid, v.State, cur, v.QueuedRunIDs, runID)
	}
	var got, want []string
	for _, c := range v.PendingConfirmations {
		got = append(got, c.ToolUseID)
	}
	for _, r := range pending {
		want = append(want, r.ToolUseID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: pending_confirmations %v, want exactly %v", p.name, got, want)
	}
	for _, c := range v.PendingConfirmations {
		for _, r := range pending {
			if c.ToolUseID == r.ToolUseID && (c.RunID != runID || c.Name != r.Name || !sameJSON(c.Input, r.Input) || c.CreatedAt.IsZero()) {
				t.Errorf("%s: pending confirmation %+v (input %s), want run %s's %s with input %s", p.name, c, c.Input, runID, r.Name, r.Input)
			}
		}
	}
	rec, err := p.client.GetRun(ctxFor(t, callTimeout), sid, runID)
	if err != nil {
		t.Fatalf("%s: get run %s: %v", p.name, runID, err)
	}
	if rec.Status != rein.StatusRunning || rec.EndedAt != nil {
		t.Errorf("%s: parked run %s is %s/%s (ended %v), want RUNNING", p.name, runID, rec.Status, rec.Reason, rec.EndedAt)
	}
	_, err = p.client.SendMessage(ctxFor(t, callTimeout), sid, client.Message{Text: "a message while parked"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != rein.CodeSessionBusy || ce.RunID != runID {
		t.Errorf("%s: a new message while run %s is parked: %v, want 409 session_busy naming the run", p.name, runID, err)
	}
}

// answer submits a confirmation answer and checks its result.
func answer(t *testing.T, c *client.Client, sid string, tc client.ToolConfirmation) {
	t.Helper()
	r, err := c.ConfirmTool(ctxFor(t, callTimeout), sid, tc)
	if err != nil {
		t.Fatalf("answer %s (allow %v): %v", tc.ToolUseID, tc.Allow, err)
	}
	if r.ToolUseID != tc.ToolUseID || r.Allow != tc.Allow {
		t.Errorf("answer %s (allow %v) = %+v", tc.ToolUseID, tc.Allow, r)
	}
}

// answerAgain checks that a call no longer pending (answered, or its run
// ended) is refused with 409 conflict, whatever the answer.
func answerAgain(t *testing.T, c *client.Client, sid, toolUseID string) {
	t.Helper()
	for _, allow := range []bool{true, false} {
		_, err := c.ConfirmTool(ctxFor(t, callTimeout), sid, client.ToolConfirmation{ToolUseID: toolUseID, Allow: allow})
		checkError(t, err, http.StatusConflict, rein.CodeConflict, fmt.Sprintf("answering %s again (allow %v)", toolUseID, allow))
	}
}

// checkError checks that err is an answer with status and code.
func checkError(t *testing.T, err error, status int, code rein.Code, what string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != status || ce.Code != code {
		t.Errorf("%s: %v, want %d %s", what, err, status, code)
	}
}

// notesPath is write_note's file for the owner's session on p.
func notesPath(p *proc, owner, sid string) string {
	return filepath.Join(p.workspace, owner, sid, "notes.md")
}

func checkNotes(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("notes: %v, want %q", err, want)
		return
	}
	if string(b) != want {
		t.Errorf("notes.md = %q, want %q", b, want)
	}
}

func checkNoNotes(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("notes.md: %q (%v), want no file: a call that was not allowed ran", b, err)
	}
}

// waitPast waits until the wall clock is past at, bounded by ctx. It is
// the one wait on time in the package: a deadline has to pass.
func waitPast(ctx context.Context, t *testing.T, at time.Time) {
	t.Helper()
	for {
		d := time.Until(at)
		if d <= 0 {
			return
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			t.Fatalf("waiting for %s: %v", at.Format(time.RFC3339Nano), context.Cause(ctx))
		}
	}
}
