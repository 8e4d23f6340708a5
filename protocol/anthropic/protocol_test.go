package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/reinhq/rein/internal/reintest"
	"github.com/reinhq/rein/protocol/protocoltest"
)

// TestScenarios runs the scenarios every adapter passes, through the
// official Go SDK.
func TestScenarios(t *testing.T) {
	srv := newServer(t)
	protocoltest.Run(t, protocoltest.Env{
		Driver:  &driver{srv: srv, tokens: map[string]string{"alice": "tok-alice", "bob": "tok-bob"}},
		Service: srv.Service,
		Owners:  [2]string{"alice", "bob"},
	})
}

// driver is protocoltest.Driver through anthropic-sdk-go.
type driver struct {
	srv    *reintest.Server
	tokens map[string]string
}

func (d *driver) client(owner string) *sdk.Client {
	c := client(d.srv, d.tokens[owner])
	return &c
}

func textParam(s string) []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion {
	return []sdk.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &sdk.BetaManagedAgentsTextBlockParam{Text: s}}}
}

func (d *driver) CreateSession(ctx context.Context, owner string) (string, error) {
	s, err := d.client(owner).Beta.Sessions.New(ctx, sdk.BetaSessionNewParams{Agent: sdk.BetaSessionNewParamsAgentUnion{OfString: sdk.String("default")}})
	if err != nil {
		return "", err
	}
	return s.ID, nil
}

func (d *driver) send(ctx context.Context, owner, session string, ev sdk.BetaManagedAgentsEventParamsUnion, opts ...option.RequestOption) (*sdk.BetaManagedAgentsSendSessionEvents, error) {
	return d.client(owner).Beta.Sessions.Events.Send(ctx, session, sdk.BetaSessionEventSendParams{Events: []sdk.BetaManagedAgentsEventParamsUnion{ev}}, opts...)
}

func (d *driver) Send(ctx context.Context, owner, session, text string) (string, error) {
	res, err := d.send(ctx, owner, session, sdk.BetaManagedAgentsEventParamsUnion{OfUserMessage: &sdk.BetaManagedAgentsUserMessageEventParams{Content: textParam(text)}})
	if err != nil {
		return "", err
	}
	var sent struct {
		RunID string `json:"run_id"`
	}
	if len(res.Data) != 1 {
		return "", errors.New("send answered " + res.RawJSON())
	}
	err = json.Unmarshal([]byte(res.Data[0].RawJSON()), &sent)
	return sent.RunID, err
}

// Stop is a user.interrupt with Rein's run_id extension.
func (d *driver) Stop(ctx context.Context, owner, session, runID string) error {
	ev := &sdk.BetaManagedAgentsUserInterruptEventParams{}
	ev.SetExtraFields(map[string]any{"run_id": runID})
	_, err := d.send(ctx, owner, session, sdk.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: ev})
	return err
}

// Note is Rein's user.supplement extension: a user.message's shape with
// another type.
func (d *driver) Note(ctx context.Context, owner, session, text string) error {
	ev := &sdk.BetaManagedAgentsUserMessageEventParams{Content: textParam(text)}
	ev.SetExtraFields(map[string]any{"type": "user.supplement"})
	_, err := d.send(ctx, owner, session, sdk.BetaManagedAgentsEventParamsUnion{OfUserMessage: ev})
	return err
}

func (d *driver) Answer(ctx context.Context, owner, session, ref string, allow bool, denyMessage string) error {
	ev := &sdk.BetaManagedAgentsUserToolConfirmationEventParams{ToolUseID: ref, Result: sdk.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow}
	if !allow {
		ev.Result, ev.DenyMessage = sdk.BetaManagedAgentsUserToolConfirmationEventParamsResultDeny, sdk.String(denyMessage)
	}
	_, err := d.send(ctx, owner, session, sdk.BetaManagedAgentsEventParamsUnion{OfUserToolConfirmation: ev})
	return err
}

func (d *driver) Stream(ctx context.Context, owner, session, cursor string, previews bool) (protocoltest.Stream, error) {
	if cursor == "" {
		cursor = "0"
	}
	var params sdk.BetaSessionEventStreamParams
	if previews {
		params.EventDeltas = []sdk.BetaManagedAgentsDeltaType{"agent.message"}
	}
	st := d.client(owner).Beta.Sessions.Events.StreamEvents(ctx, session, params, option.WithQuery("after", cursor))
	if err := st.Err(); err != nil {
		return nil, err
	}
	return &stream{st: st}, nil
}

type stream struct {
	st *ssestream.Stream[sdk.BetaManagedAgentsStreamSessionEventsUnion]
}

func (s *stream) Next() (protocoltest.Item, error) {
	for s.st.Next() {
		if it, ok := item(s.st.Current().RawJSON()); ok {
			return it, nil
		}
	}
	if err := s.st.Err(); err != nil {
		return protocoltest.Item{}, err
	}
	return protocoltest.Item{}, io.EOF
}

func (s *stream) Close() error { return s.st.Close() }

// item reads one protocol event as the scenarios see it (false: an
// event_start, which carries nothing the scenarios compare).
func item(raw string) (protocoltest.Item, bool) {
	var ev struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Seq     json.Number     `json:"seq"`
		Content json.RawMessage `json:"content"`
		Delta   struct {
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"delta"`
		StopReason struct {
			Type     string   `json:"type"`
			EventIDs []string `json:"event_ids"`
		} `json:"stop_reason"`
	}
	_ = json.Unmarshal([]byte(raw), &ev)
	it := protocoltest.Item{ID: ev.ID, Cursor: ev.Seq.String(), Kind: protocoltest.KindOther}
	switch {
	case ev.Type == "event_start":
		return it, false
	case ev.Type == "event_delta":
		it.Kind, it.Text = protocoltest.KindPreview, ev.Delta.Content.Text
	case strings.HasPrefix(ev.Type, "user."):
		it.Kind = protocoltest.KindUser
	case ev.Type == "session.status_running":
		it.Kind = protocoltest.KindRunning
	case ev.Type == "agent.message":
		var m sdk.BetaManagedAgentsAgentMessageEvent
		_ = json.Unmarshal([]byte(raw), &m)
		it.Kind = protocoltest.KindText
		for _, b := range m.Content {
			it.Text += b.Text
		}
	case ev.Type == "session.status_idle" && ev.StopReason.Type == "requires_action":
		it.Kind, it.Refs = protocoltest.KindApproval, ev.StopReason.EventIDs
	case ev.Type == "session.status_idle":
		it.Kind = protocoltest.KindIdle
	}
	return it, true
}

// History lists the session's events in small pages, so paging is
// exercised too.
func (d *driver) History(ctx context.Context, owner, session string) ([]protocoltest.Item, error) {
	pager := d.client(owner).Beta.Sessions.Events.ListAutoPaging(ctx, session, sdk.BetaSessionEventListParams{Limit: sdk.Int(3)})
	var out []protocoltest.Item
	for pager.Next() {
		if it, ok := item(pager.Current().RawJSON()); ok {
			out = append(out, it)
		}
	}
	return out, pager.Err()
}

func (d *driver) Get(ctx context.Context, owner, session string) error {
	_, err := d.client(owner).Beta.Sessions.Get(ctx, session, sdk.BetaSessionGetParams{})
	return err
}

func (d *driver) NotFound(err error) bool {
	var e *sdk.Error
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound && strings.Contains(e.RawJSON(), "not_found_error")
}
