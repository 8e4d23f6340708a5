package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/reinhq/rein"
)

// EventInput is one event of a POST /api/sessions/{id}/events batch.
type EventInput struct {
	// Type is the event type (user.message, user.interrupt, ...).
	Type rein.EventType `json:"type"`
	// Payload is marshalled as the event's payload; nil sends {}. Pass a
	// json.RawMessage to send exact bytes.
	Payload any `json:"payload"`
}

// PostEvents submits a batch of events as is and returns one raw result per
// event. The server validates the whole batch first (an invalid event
// applies nothing), then applies the events in order and stops at the first
// failure: then the error is an *Error and the returned results are those
// of the events applied before it.
//
// The typed helpers (SendMessage, Interrupt, ...) are easier to use; this
// is the whole protocol, for batches and for callers that build payloads
// themselves.
func (c *Client) PostEvents(ctx context.Context, sessionID string, events []EventInput) ([]json.RawMessage, error) {
	body := struct {
		Events []EventInput `json:"events"`
	}{Events: make([]EventInput, len(events))}
	for i, e := range events {
		if e.Payload == nil {
			e.Payload = struct{}{}
		}
		body.Events[i] = e
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	var partial []json.RawMessage
	if err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "events"), nil, body, &out, &partial); err != nil {
		return partial, err
	}
	if out.Results == nil {
		out.Results = []json.RawMessage{}
	}
	return out.Results, nil
}

// postOne submits a single event and decodes its result into out.
func (c *Client) postOne(ctx context.Context, sessionID string, t rein.EventType, payload, out any) error {
	res, err := c.PostEvents(ctx, sessionID, []EventInput{{Type: t, Payload: payload}})
	if err != nil {
		return err
	}
	if len(res) != 1 {
		return fmt.Errorf("rein client: %s: the server answered %d results for 1 event", t, len(res))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(res[0], out); err != nil {
		return fmt.Errorf("rein client: %s: decoding result: %w", t, err)
	}
	return nil
}

// Message is a user.message: it starts a run.
type Message struct {
	// Text is the user's input (non-empty).
	Text string `json:"text"`
	// WhenBusy says what to do when the session's turn is held:
	// rein.WhenBusyReject (default), rein.WhenBusyEnqueue,
	// rein.WhenBusyInterrupt or rein.WhenBusyRollback (the current run is
	// cancelled at once and its turn is left out of later model requests).
	WhenBusy rein.WhenBusy `json:"when_busy,omitempty"`
	// ClientID makes the call idempotent in the session: a repeat answers
	// the first run's id and current status and starts nothing.
	ClientID string `json:"client_id,omitempty"`
	// TimeoutS is the run's deadline in seconds, queue time included
	// (0: none).
	TimeoutS float64 `json:"timeout_s,omitempty"`
	// Budget bounds what the run may spend (nil: none): once reached it
	// ends with reason budget.
	Budget *rein.Budget `json:"budget,omitempty"`
}

// MessageResult is the answer to a user.message.
type MessageResult struct {
	// RunID is the run the message started (or, for a ClientID repeat,
	// started earlier).
	RunID string `json:"run_id"`
	// Status is RUNNING or QUEUED for a new run; for a repeat, that run's
	// current status.
	Status rein.RunStatus `json:"status"`
}

// SendMessage submits a user.message. A busy session with rein.WhenBusyReject
// answers an error matching rein.ErrSessionBusy whose RunID is the run
// holding the turn.
func (c *Client) SendMessage(ctx context.Context, sessionID string, m Message) (MessageResult, error) {
	var r MessageResult
	err := c.postOne(ctx, sessionID, rein.EventUserMessage, m, &r)
	return r, err
}

// Interrupt is a user.interrupt: a stop request.
type Interrupt struct {
	// RunID names the run to stop; only that run is ever touched. nil
	// stops the session's current (running) run, if any.
	RunID *string `json:"run_id,omitempty"`
	// ClientID names the run by the client id of the message that
	// started it — or will: a stop for a message that has not arrived is
	// remembered for 24 hours, and that message's run is created already
	// ended (CANCELLED). Not together with RunID.
	ClientID string `json:"client_id,omitempty"`
	// Mode is rein.StopCancel (default: the run ends CANCELLED without a
	// reply) or rein.StopInterrupt (cooperative: it ends COMPLETED with
	// reason interrupted and a reply).
	Mode rein.StopMode `json:"mode,omitempty"`
	// Message is recorded on the event; it is never treated as input.
	Message *string `json:"message,omitempty"`
}

// InterruptResult is the answer to a user.interrupt.
type InterruptResult struct {
	// Accepted is true when this request stopped the run; false when the
	// run was already terminal, unknown, of another session, or when
	// there was no current run.
	Accepted bool `json:"accepted"`
	// RunID is the run the request targeted ("" when there was none; for
	// a stop by client id, "" means the message has not arrived and the
	// stop is remembered).
	RunID string `json:"run_id"`
}

// Interrupt submits a user.interrupt.
func (c *Client) Interrupt(ctx context.Context, sessionID string, in Interrupt) (InterruptResult, error) {
	var r InterruptResult
	err := c.postOne(ctx, sessionID, rein.EventUserInterrupt, in, &r)
	return r, err
}

// StopRun stops exactly one run by its id, with mode rein.StopCancel or
// rein.StopInterrupt; it is Interrupt with RunID set.
func (c *Client) StopRun(ctx context.Context, sessionID, runID string, mode rein.StopMode) (InterruptResult, error) {
	return c.Interrupt(ctx, sessionID, Interrupt{RunID: &runID, Mode: mode})
}

// StopByClientID stops the run of the session's message with this client
// id (Message.ClientID), with mode rein.StopCancel or rein.StopInterrupt,
// whether or not that message has arrived yet: a stop button can be
// pressed before the message's answer named the run. It is Interrupt with
// ClientID set.
func (c *Client) StopByClientID(ctx context.Context, sessionID, clientID string, mode rein.StopMode) (InterruptResult, error) {
	return c.Interrupt(ctx, sessionID, Interrupt{ClientID: clientID, Mode: mode})
}

// Supplement is a user.supplement: a note for the running agent, read at
// the start of its next step.
type Supplement struct {
	// Text is the note (non-empty).
	Text string `json:"text"`
	// ID is an optional idempotency key; it becomes the supplement id.
	ID string `json:"id,omitempty"`
}

// SupplementResult is the answer to a user.supplement.
type SupplementResult struct {
	// SupplementID identifies the note in later events.
	SupplementID string `json:"supplement_id"`
	// Status is "queued" or "consumed".
	Status string `json:"status"`
}

// Supplement submits a user.supplement.
func (c *Client) Supplement(ctx context.Context, sessionID string, s Supplement) (SupplementResult, error) {
	var r SupplementResult
	err := c.postOne(ctx, sessionID, rein.EventUserSupplement, s, &r)
	return r, err
}

// ToolConfirmation is a user.tool_confirmation: the answer to a pending
// session.tool_confirmation_requested.
type ToolConfirmation struct {
	// ToolUseID is the pending call.
	ToolUseID string `json:"tool_use_id"`
	// Allow runs the tool; false denies it (the run continues).
	Allow bool `json:"allow"`
	// DenyMessage is the denied call's error text for the model.
	DenyMessage string `json:"deny_message,omitempty"`
}

// ToolConfirmationResult is the answer to a user.tool_confirmation.
type ToolConfirmationResult struct {
	ToolUseID string `json:"tool_use_id"`
	Allow     bool   `json:"allow"`
}

// ConfirmTool submits a user.tool_confirmation. An unknown id matches
// rein.ErrNotFound; one no longer pending matches rein.ErrConflict.
func (c *Client) ConfirmTool(ctx context.Context, sessionID string, tc ToolConfirmation) (ToolConfirmationResult, error) {
	var r ToolConfirmationResult
	err := c.postOne(ctx, sessionID, rein.EventUserToolConfirmation, tc, &r)
	return r, err
}

// SetSystem submits a system.message: it replaces the session's system
// prompt for later runs (the current run is not changed).
func (c *Client) SetSystem(ctx context.Context, sessionID, text string) error {
	return c.postOne(ctx, sessionID, rein.EventSystemMessage, rein.SystemMessagePayload{Text: text}, nil)
}

// ListEvents reads up to limit events with seq > after, ascending (limit
// ≤ 0: the server's default of 100; the server caps it at 1000). lastSeq
// is the session's last seq overall: lastSeq greater than the last
// returned event's seq means there are more.
func (c *Client) ListEvents(ctx context.Context, sessionID string, after int64, limit int) (events []rein.Event, lastSeq int64, err error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Events  []rein.Event `json:"events"`
		LastSeq int64        `json:"last_seq"`
	}
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "events"), q, nil, &out, nil); err != nil {
		return nil, 0, err
	}
	if out.Events == nil {
		out.Events = []rein.Event{}
	}
	return out.Events, out.LastSeq, nil
}
