package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/reinhq/rein"
)

// aguiScreen is what an AG-UI front end shows of a thread: the text of
// each message, by the order its TEXT_MESSAGE_START came. A frame Rein
// marks metadata.reinReopened restates a message the client already has
// (a stream resumed inside a run) and is dropped, as docs/protocols.md
// tells clients that kept the earlier frames.
type aguiScreen struct {
	order    []string
	text     map[string]string
	finished map[string]any
}

func (s *aguiScreen) read(t *testing.T, ev map[string]any) {
	t.Helper()
	id, _ := ev["messageId"].(string)
	switch ev["type"] {
	case "TEXT_MESSAGE_START":
		if _, known := s.text[id]; known {
			if md, _ := ev["metadata"].(map[string]any); md["reinReopened"] == true {
				return
			}
			t.Fatalf("TEXT_MESSAGE_START of message %s, shown already: %v", id, ev)
		}
		s.order = append(s.order, id)
		s.text[id] = ""
	case "TEXT_MESSAGE_CONTENT":
		if _, known := s.text[id]; !known {
			t.Fatalf("TEXT_MESSAGE_CONTENT of a message not started: %v", ev)
		}
		s.text[id] += ev["delta"].(string)
	case "RUN_FINISHED", "RUN_ERROR":
		s.finished = ev
	}
}

// shown is every message's text, in order.
func (s *aguiScreen) shown() []string {
	out := make([]string, len(s.order))
	for i, id := range s.order {
		out[i] = s.text[id]
	}
	return out
}

// aguiFrames reads an AG-UI event stream, calling each with every event
// and its SSE id until it returns false or the stream ends.
func aguiFrames(t *testing.T, resp *http.Response, each func(id string, ev map[string]any) bool) {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var id string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		if !each(id, ev) {
			return
		}
	}
}

// TestKillMidStreamAGUI kills `rein serve` while a run streams to an AG-UI
// client, restarts it on the same store, and resumes from the last frame
// the client saw, by its id (Last-Event-ID on the thread's stream): the
// reply's text is shown once, in one message — the redone request's text
// is held back where it repeats what the cut one showed — and the run
// finishes with outcome success.
func TestKillMidStreamAGUI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			p1 := startServe(ctxFor(t, startTimeout), t, "first", store)
			ctx := ctxFor(t, runTimeout+startTimeout)
			thread := "thread-kill-" + b.name
			body, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "r1", "state": map[string]any{}, "tools": []any{}, "context": []any{},
				"messages": []any{map[string]any{"id": "m1", "role": "user", "content": streamInput}}})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p1.url+"/ag-ui/default", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("POST /ag-ui/default: %d", resp.StatusCode)
			}
			screen := aguiScreen{text: map[string]string{}}
			n, last := 0, ""
			aguiFrames(t, resp, func(id string, ev map[string]any) bool {
				screen.read(t, ev)
				last = id
				if ev["type"] == "TEXT_MESSAGE_CONTENT" {
					n++
				}
				return n < cutAfterDeltas
			})
			if n < cutAfterDeltas || screen.finished != nil || last == "" {
				t.Fatalf("the stream ended before the kill (%d deltas, finished %v, last id %q): the scenario did not cut it", n, screen.finished, last)
			}
			p1.kill()
			resp.Body.Close()

			p2 := startServe(ctxFor(t, startTimeout), t, "restarted", store)
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, p2.url+"/ag-ui/default/threads/"+thread+"/stream", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Last-Event-ID", last)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the thread's stream after the restart: %d", resp.StatusCode)
			}
			aguiFrames(t, resp, func(_ string, ev map[string]any) bool {
				screen.read(t, ev)
				return screen.finished == nil
			})
			if got := screen.shown(); len(got) != 1 || got[0] != streamText {
				t.Fatalf("messages shown: %q, want one with the whole reply %q", got, streamText)
			}
			evs, _, err := newClient(p2, "").ListEvents(ctx, thread, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			restarts := 0
			for _, e := range evs {
				if e.Type == rein.EventStepRestarted {
					restarts++
				}
			}
			if restarts != 1 {
				t.Fatalf("%d agent.step_restarted in the log, want 1: the kill did not cut the step", restarts)
			}
			if outcome, _ := screen.finished["outcome"].(map[string]any); screen.finished["type"] != "RUN_FINISHED" || outcome["type"] != "success" {
				t.Fatalf("the run finished with %v, want RUN_FINISHED with outcome success", screen.finished)
			}
		})
	}
}
