package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/reinhq/rein"
)

// Session is a session as the server describes it (docs/api.md "Sessions").
type Session struct {
	// ID is the session id.
	ID string `json:"id"`
	// Title names the session for people ("" while it has none: the
	// first message's first line names an untitled session).
	Title string `json:"title"`
	// CreatedAt is when the session was created (UTC).
	CreatedAt time.Time `json:"created_at"`
	// Metadata is the client's JSON object ({} when none was given).
	Metadata json.RawMessage `json:"metadata"`
	// ParentSessionID is the parent of a subagent child, "" for a root
	// session.
	ParentSessionID string `json:"parent_session_id"`
	// Agent is the configured agent the session's runs use.
	Agent string `json:"agent"`

	// The fields below are filled by GetSession only.

	// State is "idle" or "busy" (a run is running or queued).
	State string `json:"state,omitempty"`
	// CurrentRunID is the run running now, "" when none.
	CurrentRunID string `json:"current_run_id,omitempty"`
	// QueuedRunIDs are the queued runs, next to run first.
	QueuedRunIDs []string `json:"queued_run_ids,omitempty"`
	// LastSeq is the seq of the session's last event (0 when it has none).
	LastSeq int64 `json:"last_seq,omitempty"`
	// PendingConfirmations are the tool calls waiting for an answer,
	// oldest first. They survive restarts: an approval asked yesterday can
	// be answered today.
	PendingConfirmations []PendingConfirmation `json:"pending_confirmations,omitempty"`
	// Budget bounds what the session's runs may spend together (nil:
	// none).
	Budget *rein.Budget `json:"budget,omitempty"`
	// Usage is what the session's runs have spent together.
	Usage *rein.Usage `json:"usage,omitempty"`
}

// PendingConfirmation is a tool call waiting for a human's answer.
type PendingConfirmation struct {
	ToolUseID string          `json:"tool_use_id"`
	RunID     string          `json:"run_id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	CreatedAt time.Time       `json:"created_at"`
}

// CreateSessionRequest is the body of POST /api/sessions.
type CreateSessionRequest struct {
	// ID is the caller's id for the session ("": the server makes one):
	// 1 to 128 characters of A-Z a-z 0-9 . _ : -. Creating an id the
	// caller already has returns that session unchanged, so a retried
	// create is safe; an id another owner has fails with conflict.
	ID string `json:"id,omitempty"`
	// Title names the session (at most 200 characters; "": the first
	// message's first line names it).
	Title string `json:"title,omitempty"`
	// Metadata is any JSON object the caller wants kept with the session
	// (nil: {}).
	Metadata any `json:"metadata,omitempty"`
	// System overrides the system prompt for the session's runs (nil:
	// the server's default).
	System *string `json:"system,omitempty"`
	// Agent names a configured agent ("": the server's default).
	Agent string `json:"agent,omitempty"`
	// Budget bounds what the session's runs may spend together (nil:
	// none). A session over it refuses new messages (conflict) until it
	// is raised. A cost bound needs the agent's model to have a price.
	Budget *rein.Budget `json:"budget,omitempty"`
}

// CreateSession creates a session of the caller's owner (or, for an ID the
// caller already has, returns that session unchanged).
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPost, "/api/sessions", nil, req, &s, nil); err != nil {
		return nil, err
	}
	return &s, nil
}

// UpdateSessionRequest is the body of PATCH /api/sessions/{id}; nil fields
// are left as they are.
type UpdateSessionRequest struct {
	// Title replaces the title (at most 200 characters; "" leaves the
	// session untitled for good).
	Title *string `json:"title,omitempty"`
	// Metadata replaces the metadata (a JSON object).
	Metadata any `json:"metadata,omitempty"`
	// Budget replaces the session's budget; with ClearBudget the budget
	// is removed (sent as null).
	Budget      *rein.Budget `json:"-"`
	ClearBudget bool         `json:"-"`
}

// MarshalJSON writes the PATCH body: budget is null to clear it.
func (r UpdateSessionRequest) MarshalJSON() ([]byte, error) {
	body := map[string]any{}
	if r.Title != nil {
		body["title"] = *r.Title
	}
	if r.Metadata != nil {
		body["metadata"] = r.Metadata
	}
	switch {
	case r.ClearBudget:
		body["budget"] = nil
	case r.Budget != nil:
		body["budget"] = r.Budget
	}
	return json.Marshal(body)
}

// UpdateSession changes a session's title or metadata and returns the
// session with its live state, as GetSession does.
func (c *Client) UpdateSession(ctx context.Context, sessionID string, req UpdateSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPatch, sessionPath(sessionID), nil, req, &s, nil); err != nil {
		return nil, err
	}
	if s.QueuedRunIDs == nil {
		s.QueuedRunIDs = []string{}
	}
	return &s, nil
}

// SessionSummary is a session in a list: what a list shows of its state,
// without a request per session.
type SessionSummary struct {
	ID              string          `json:"id"`
	Title           string          `json:"title"`
	CreatedAt       time.Time       `json:"created_at"`
	Metadata        json.RawMessage `json:"metadata"`
	ParentSessionID string          `json:"parent_session_id"`
	Agent           string          `json:"agent"`
	// State is "idle" or "busy" (a run is running or queued).
	State string `json:"state"`
	// PendingConfirmations counts the tool calls waiting for an answer.
	PendingConfirmations int `json:"pending_confirmations"`
	// LastEventAt is when the session's last event was logged (nil: it
	// has none).
	LastEventAt *time.Time `json:"last_event_at"`
}

// SessionList is one page of ListSessionsPage.
type SessionList struct {
	Sessions []SessionSummary `json:"sessions"`
	// Next is the cursor of the following page ("": this is the last).
	Next string `json:"next"`
}

// ListOptions pages a list.
type ListOptions struct {
	// Limit is the page's size (0: the server's default, 100; at most
	// 1000).
	Limit int
	// After is the previous page's Next ("": the first page).
	After string
}

// ListSessionsPage returns one page of the caller's sessions, newest
// first. The cursor is a position: sessions created meanwhile never shift
// the pages that follow.
func (c *Client) ListSessionsPage(ctx context.Context, opts ListOptions) (*SessionList, error) {
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.After != "" {
		q.Set("after", opts.After)
	}
	var out SessionList
	if err := c.do(ctx, http.MethodGet, "/api/sessions", q, nil, &out, nil); err != nil {
		return nil, err
	}
	if out.Sessions == nil {
		out.Sessions = []SessionSummary{}
	}
	return &out, nil
}

// ListSessions lists all the caller's sessions, newest first (subagent
// children included, with ParentSessionID set), reading every page.
func (c *Client) ListSessions(ctx context.Context) ([]SessionSummary, error) {
	out := []SessionSummary{}
	opts := ListOptions{Limit: 1000}
	for {
		page, err := c.ListSessionsPage(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Sessions...)
		if page.Next == "" {
			return out, nil
		}
		opts.After = page.Next
	}
}

// GetSession returns a session with its live state. Another owner's session
// is not_found, exactly like a missing one.
func (c *Client) GetSession(ctx context.Context, sessionID string) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID), nil, nil, &s, nil); err != nil {
		return nil, err
	}
	if s.QueuedRunIDs == nil {
		s.QueuedRunIDs = []string{}
	}
	return &s, nil
}

// DeleteSession deletes a session for good, with every session below it
// (its subagent children, theirs, ...), their events, runs and workspaces.
// It fails with session_busy (errors.Is(err, rein.ErrSessionBusy); the
// *Error's RunID names the run) while a run of any of them is queued or
// running, and with not_found for a missing session or another owner's.
func (c *Client) DeleteSession(ctx context.Context, sessionID string) error {
	return c.do(ctx, http.MethodDelete, sessionPath(sessionID), nil, nil, nil, nil)
}

// Run is a run as the server describes it.
type Run struct {
	// RunID is the run id.
	RunID string `json:"run_id"`
	// Status is the run's lifecycle state.
	Status rein.RunStatus `json:"status"`
	// Reason says why a terminal run ended ("" until it has).
	Reason rein.Reason `json:"reason"`
	// CreatedAt is when the run was created.
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when it started running (nil if it never did).
	StartedAt *time.Time `json:"started_at"`
	// EndedAt is when it reached its terminal state (nil until then).
	EndedAt *time.Time `json:"ended_at"`
	// Input is the text that started the run, as last edited.
	Input string `json:"input"`
	// ClientID is the client_id its user.message carried ("" for none).
	ClientID string `json:"client_id"`
	// Position is a queued run's place in the queue (1 = next), 0 for a
	// run that is not queued.
	Position int `json:"position"`
	// Usage is summed over the run's model requests so far (CostUSD nil
	// when its model has no price).
	Usage rein.Usage `json:"usage"`
}

// EditRunRequest edits a queued run. Nil fields are left as they are.
type EditRunRequest struct {
	// Text replaces the run's input (non-empty).
	Text *string `json:"text,omitempty"`
	// Position moves it in the queue: 1 = next; beyond the end, last.
	Position *int `json:"position,omitempty"`
}

// EditRun replaces a queued run's input and/or moves it in the queue, and
// returns the run as edited. A run that has left the queue answers a
// conflict (errors.Is(err, rein.ErrConflict)) whose *Error carries the
// run's RunID and RunStatus, e.g. RUNNING: it already started, with its
// text as it was.
func (c *Client) EditRun(ctx context.Context, sessionID, runID string, req EditRunRequest) (*Run, error) {
	var r Run
	if err := c.do(ctx, http.MethodPatch, sessionPath(sessionID, "runs", url.PathEscape(runID)), nil, req, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// PromoteRun sends a queued run now: the session's current run is stopped
// as a user.message with when_busy mode would stop it (rein.WhenBusyInterrupt,
// the default for "", or rein.WhenBusyRollback) and this run runs next. It
// returns the run (Position 1). A run no longer queued answers a conflict
// as for EditRun.
func (c *Client) PromoteRun(ctx context.Context, sessionID, runID string, mode rein.WhenBusy) (*Run, error) {
	body := struct {
		Mode rein.WhenBusy `json:"mode,omitempty"`
	}{mode}
	var r Run
	if err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "runs", url.PathEscape(runID), "promote"), nil, body, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// ListRuns lists a session's runs, newest first.
func (c *Client) ListRuns(ctx context.Context, sessionID string) ([]Run, error) {
	var out struct {
		Runs []Run `json:"runs"`
	}
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "runs"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	if out.Runs == nil {
		out.Runs = []Run{}
	}
	return out.Runs, nil
}

// GetRun returns one run of a session.
func (c *Client) GetRun(ctx context.Context, sessionID, runID string) (*Run, error) {
	var r Run
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "runs", url.PathEscape(runID)), nil, nil, &r, nil); err != nil {
		return nil, err
	}
	return &r, nil
}

// Subagent is a direct subagent child of a session (docs/api.md).
type Subagent struct {
	// ID is the child's id, which is its session id.
	ID string `json:"id"`
	// Label is the child's label.
	Label string `json:"label"`
	// State is "running" or "idle".
	State string `json:"state"`
	// ParentSessionID is the session that spawned it.
	ParentSessionID string `json:"parent_session_id"`
	// CurrentRunID is the child's running activation, "" when none.
	CurrentRunID string `json:"current_run_id"`
}

// ListSubagents lists a session's direct subagent children.
func (c *Client) ListSubagents(ctx context.Context, sessionID string) ([]Subagent, error) {
	var out struct {
		Subagents []Subagent `json:"subagents"`
	}
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "subagents"), nil, nil, &out, nil); err != nil {
		return nil, err
	}
	if out.Subagents == nil {
		out.Subagents = []Subagent{}
	}
	return out.Subagents, nil
}
