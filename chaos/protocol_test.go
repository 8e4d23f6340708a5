package chaos

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// v1Event is what a Managed Agents client reads of an event.
type v1Event struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Seq     int64  `json:"seq"`
	EventID string `json:"event_id"`
	IsError bool   `json:"is_error"`
	Event   struct {
		ID string `json:"id"`
	} `json:"event"`
	Delta struct {
		Content struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"delta"`
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// v1Screen is what a client of the protocol shows: previews as they
// stream, dropped when the span they belong to ends in error (the SDK's
// documented rule), replaced by their final agent.message.
type v1Screen struct {
	previews map[string]string // preview id → text so far
	open     []string          // previews of the current span
	dropped  []string
	messages []v1Event
	seen     []v1Event // every event but previews, in order
}

func (s *v1Screen) read(ev v1Event) {
	switch ev.Type {
	case "event_start":
		s.previews[ev.Event.ID] = ""
		s.open = append(s.open, ev.Event.ID)
		return
	case "event_delta":
		s.previews[ev.EventID] += ev.Delta.Content.Text
		return
	case "span.model_request_end":
		if ev.IsError {
			for _, id := range s.open {
				delete(s.previews, id)
				s.dropped = append(s.dropped, id)
			}
		}
		s.open = nil
	case "agent.message":
		s.messages = append(s.messages, ev)
		delete(s.previews, ev.ID)
	}
	s.seen = append(s.seen, ev)
}

// TestKillMidStreamV1 kills `rein serve` while a run streams to a client of
// the Managed Agents API (anthropic-sdk-go, previews on), restarts it on
// the same store, and resumes the client's stream after the last seq it
// read (Rein's ?after= extension): the resumed step's text is shown once —
// the cut request's preview is closed by an errored span and dropped, the
// redone request streams under a new preview that its agent.message
// replaces — and the events read before and after the kill are the
// session's history, with no gap and no duplicate.
func TestKillMidStreamV1(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.spec(t)
			p1 := startServe(ctxFor(t, startTimeout), t, "first", store)
			ctx := ctxFor(t, runTimeout+startTimeout)
			c1 := sdk.NewClient(option.WithBaseURL(p1.url), option.WithAPIKey("local"), option.WithMaxRetries(0))
			sess, err := c1.Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}})
			if err != nil {
				t.Fatal(err)
			}
			deltas := sdk.BetaSessionEventStreamParams{EventDeltas: []sdk.BetaManagedAgentsDeltaType{"agent.message"}}
			screen := &v1Screen{previews: map[string]string{}}
			var last int64
			stream := c1.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, deltas, option.WithQuery("after", "0"))
			if _, err := c1.Beta.Sessions.Events.Send(ctx, sess.ID, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{{
				OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion{{
					OfText: &sdk.BetaManagedAgentsTextBlockParam{Text: streamInput}}}},
			}}}); err != nil {
				t.Fatal(err)
			}
			read := func(ev v1Event) {
				if ev.Seq < last {
					t.Fatalf("seq %d after %d: %+v", ev.Seq, last, ev)
				}
				last = ev.Seq
				screen.read(ev)
			}
			n := 0
			for n < cutAfterDeltas && stream.Next() {
				var ev v1Event
				if err := json.Unmarshal([]byte(stream.Current().RawJSON()), &ev); err != nil {
					t.Fatal(err)
				}
				read(ev)
				if ev.Type == "event_delta" {
					n++
				}
			}
			if n < cutAfterDeltas {
				t.Fatalf("the stream ended before %d previews: %v", cutAfterDeltas, stream.Err())
			}
			if len(screen.messages) > 0 {
				t.Fatal("the run finished before the kill: the scenario did not cut the stream")
			}
			p1.kill()
			_ = stream.Close()

			p2 := startServe(ctxFor(t, startTimeout), t, "restarted", store)
			c2 := sdk.NewClient(option.WithBaseURL(p2.url), option.WithAPIKey("local"), option.WithMaxRetries(0))
			resumed := c2.Beta.Sessions.Events.StreamEvents(ctx, sess.ID, deltas, option.WithQuery("after", jsonInt(last)))
			defer resumed.Close()
			for resumed.Next() {
				var ev v1Event
				if err := json.Unmarshal([]byte(resumed.Current().RawJSON()), &ev); err != nil {
					t.Fatal(err)
				}
				read(ev)
				if ev.Type == "session.status_idle" {
					break
				}
			}
			if err := resumed.Err(); err != nil {
				t.Fatal(err)
			}
			if len(screen.messages) != 1 || screen.messages[0].Content[0].Text != streamText {
				t.Fatalf("messages shown: %+v, want one with the whole text", screen.messages)
			}
			if len(screen.dropped) == 0 {
				t.Fatal("no preview was dropped: the cut request's span did not end in error")
			}
			for id, text := range screen.previews {
				t.Fatalf("preview %s still on screen: %q", id, text)
			}
			// What the two connections showed is the session's history.
			var listed []string
			pager := c2.Beta.Sessions.Events.ListAutoPaging(ctx, sess.ID, sdk.BetaSessionEventListParams{Limit: sdk.Int(7)})
			for pager.Next() {
				listed = append(listed, pager.Current().Type+" "+pager.Current().ID)
			}
			if err := pager.Err(); err != nil {
				t.Fatal(err)
			}
			var streamed []string
			for _, ev := range screen.seen {
				streamed = append(streamed, ev.Type+" "+ev.ID)
			}
			if !slices.Equal(streamed, listed) {
				t.Fatalf("streamed across the kill:\n%q\nlisted:\n%q", streamed, listed)
			}
		})
	}
}

func jsonInt(n int64) string { return strconv.FormatInt(n, 10) }
