package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// uiScreen is what an AI SDK chat shows of a stream: its text parts, as
// DefaultChatTransport and AbstractChat build them (a start resets the
// message on a resumed stream: resumeStreamIsReplay).
type uiScreen struct {
	parts    []string       // text parts, in order
	open     map[string]int // open text part id → index in parts
	restarts int
	finish   map[string]any
}

func (s *uiScreen) reset() { *s = uiScreen{open: map[string]int{}} }

func (s *uiScreen) read(t *testing.T, c map[string]any) {
	t.Helper()
	id, _ := c["id"].(string)
	switch c["type"] {
	case "text-start":
		s.open[id] = len(s.parts)
		s.parts = append(s.parts, "")
	case "text-delta":
		i, ok := s.open[id]
		if !ok {
			t.Fatalf("text-delta of a part not open: %v", c)
		}
		s.parts[i] += c["delta"].(string)
	case "text-end":
		if _, ok := s.open[id]; !ok {
			t.Fatalf("text-end of a part not open: %v", c)
		}
		delete(s.open, id)
	case "data-rein-step-restarted":
		s.restarts++
	case "finish":
		s.finish = c
	}
}

// uiChunks reads an open UI message stream, calling each for every chunk
// until it returns false or the stream ends ([DONE] or EOF).
func uiChunks(t *testing.T, resp *http.Response, each func(map[string]any) bool) {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if !each(c) {
			return
		}
	}
}

// TestKillMidStreamAISDK kills `rein serve` while a run streams to an AI
// SDK chat, restarts it on the same store, and resumes the chat as the
// SDK's resumeStream does (GET /ai-sdk/chat/{id}/stream, a replay that
// resets the message): the reply's text is shown once, in one part — the
// redone request's text is held back where it repeats what the cut one
// showed — and the run ends COMPLETED.
func TestKillMidStreamAISDK(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			p1 := startServe(ctxFor(t, startTimeout), t, "first", store)
			ctx := ctxFor(t, runTimeout+startTimeout)
			chat := "chat-kill-" + b.name
			body, _ := json.Marshal(map[string]any{"id": chat, "trigger": "submit-message", "messages": []any{map[string]any{
				"id": "m1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": streamInput}}}}})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p1.url+"/ai-sdk/chat", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("POST /ai-sdk/chat: %d", resp.StatusCode)
			}
			var screen uiScreen
			screen.reset()
			n := 0
			uiChunks(t, resp, func(c map[string]any) bool {
				screen.read(t, c)
				if c["type"] == "text-delta" {
					n++
				}
				return n < cutAfterDeltas
			})
			if n < cutAfterDeltas || screen.finish != nil {
				t.Fatalf("the stream ended before the kill (%d deltas, finish %v): the scenario did not cut it", n, screen.finish)
			}
			p1.kill()
			resp.Body.Close()

			p2 := startServe(ctxFor(t, startTimeout), t, "restarted", store)
			req, err = http.NewRequestWithContext(ctx, http.MethodGet, p2.url+"/ai-sdk/chat/"+chat+"/stream", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("resume after the restart: %d (the run should still be going, resumed by the restarted server)", resp.StatusCode)
			}
			first := true
			uiChunks(t, resp, func(c map[string]any) bool {
				if first && c["type"] == "start" {
					screen.reset() // resumeStreamIsReplay
				}
				first = false
				screen.read(t, c)
				return true
			})
			if len(screen.parts) != 1 || screen.parts[0] != streamText {
				t.Fatalf("text parts shown: %q, want one with the whole reply", screen.parts)
			}
			if screen.restarts != 1 {
				t.Fatalf("%d data-rein-step-restarted parts, want 1: the step was not redone", screen.restarts)
			}
			meta, _ := screen.finish["messageMetadata"].(map[string]any)
			if rein, _ := meta["rein"].(map[string]any); rein["status"] != "COMPLETED" {
				t.Fatalf("finish = %v", screen.finish)
			}
		})
	}
}
