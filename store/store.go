// Package store defines what Rein persists and the contracts every storage
// backend meets: sessions, transcripts (history), the per-session event log,
// run records, inbox supplements, tool confirmations and turn leases.
//
// The interfaces live here, apart from any database, so that the run engine
// and the server depend on promises rather than on SQL, and so that one
// conformance suite (storetest) can hold the in-memory, SQLite and PostgreSQL
// backends to the same behaviour — the database/sql model of "one interface,
// many drivers, conformance by use".
//
// Every method takes a context and MUST return promptly with ctx.Err() (or
// an error wrapping it) once the context is done. Errors carry rein codes:
// rein.ErrNotFound for a missing row, rein.ErrConflict for a uniqueness or
// state violation, rein.ErrUnavailable when the database cannot be reached
// (so the server can answer 503 and recover when it returns).
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/reinhq/rein"
)

// Store is a complete backend.
type Store interface {
	Sessions
	History
	EventLog
	Runs
	Inbox
	Confirmations
	Leases
	Flusher

	// Ping reports whether the backend is reachable (used by /readyz).
	Ping(ctx context.Context) error
	// Close releases the backend's resources. Waiters in WaitEvents return.
	Close() error
}

// Fence is a fencing token from a turn lease. A write that carries a
// non-zero Fence MUST fail with rein.ErrLeaseLost, writing nothing, unless
// that token is still the session's current lease token (even if the lease
// has expired but was not yet taken over). The zero Fence is unfenced:
// writes from request handlers (a user.message, a supplement) carry none.
type Fence struct {
	Token int64
}

// ---------------------------------------------------------------- sessions

// Session is a conversation's durable record.
type Session struct {
	Owner string
	ID    string
	// ParentID is the parent session of a subagent child, "" for a root.
	ParentID string
	// Metadata is the client's JSON object; never nil once stored ({}).
	Metadata json.RawMessage
	// System is the session's system-prompt override; nil means none.
	System *string
	// Subagent is the child's descriptor, nil for a root session.
	Subagent *SubagentDescriptor
	// CreatedAt is set by CreateSession when zero.
	CreatedAt time.Time
}

// Key returns the session's key.
func (s *Session) Key() rein.SessionKey { return rein.SessionKey{Owner: s.Owner, ID: s.ID} }

// SubagentDescriptor is what a continuable subagent child needs to be
// resumed from storage (SPEC §7).
type SubagentDescriptor struct {
	Agent      string   `json:"agent"`
	Label      string   `json:"label"`
	Model      string   `json:"model"`
	System     string   `json:"system"`
	ToolFilter []string `json:"tool_filter"`
	Depth      int      `json:"depth"`
}

// Sessions stores session records.
type Sessions interface {
	// CreateSession stores s. Metadata nil is stored as {}; a zero
	// CreatedAt is set to now. It MUST fail with rein.ErrConflict if
	// (Owner, ID) exists, and with rein.ErrNotFound if ParentID is set but
	// names no session of the same owner.
	CreateSession(ctx context.Context, s *Session) error
	// GetSession returns the session or rein.ErrNotFound. A session of
	// another owner MUST be reported exactly like a missing one.
	GetSession(ctx context.Context, key rein.SessionKey) (*Session, error)
	// ListSessions returns the owner's sessions newest first by CreatedAt,
	// then by ID descending. Never nil.
	ListSessions(ctx context.Context, owner string) ([]*Session, error)
	// ListChildren returns the direct children of key (ParentID == key.ID,
	// same owner), in creation order. Never nil.
	ListChildren(ctx context.Context, key rein.SessionKey) ([]*Session, error)
	// SetSystem replaces the session's system override (nil clears it).
	SetSystem(ctx context.Context, key rein.SessionKey, system *string) error
}

// ----------------------------------------------------------------- history

// History stores each session's transcript: the messages a model sees.
type History interface {
	// AppendHistory appends msgs atomically (all or none), in order.
	// A non-zero fence is checked as for events.
	AppendHistory(ctx context.Context, key rein.SessionKey, fence Fence, msgs []rein.Message) error
	// LoadHistory returns the whole transcript in order. Never nil.
	// rein.ErrNotFound if the session does not exist.
	LoadHistory(ctx context.Context, key rein.SessionKey) ([]rein.Message, error)
}

// --------------------------------------------------------------- event log

// EventLog is the per-session append-only log every client reads (DESIGN
// rule 1: one event path).
type EventLog interface {
	// AppendEvents appends evs to the session's log atomically: either all
	// are stored with consecutive seqs following the session's last one, or
	// none is. It fills in Seq, SessionID, and — when empty — ID ("evt_"
	// ULID) and CreatedAt, and returns the stored events. It MUST return only
	// once the events are durable (a crash after return loses none), and
	// seqs MUST stay gap-free and unique under concurrent appends from
	// several goroutines and several processes. rein.ErrNotFound if the
	// session does not exist.
	AppendEvents(ctx context.Context, key rein.SessionKey, fence Fence, evs []rein.Event) ([]rein.Event, error)
	// ReadEvents returns up to limit events with seq > after, ascending, and
	// the session's last seq overall. Never nil. rein.ErrNotFound if the
	// session does not exist.
	ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error)
	// LastSeq returns the session's last seq (0 for an empty log).
	LastSeq(ctx context.Context, key rein.SessionKey) (int64, error)
	// WaitEvents blocks until the session's last seq is > after (returning
	// nil at once if it already is), ctx is done (ctx's error), or the store
	// closes. It MUST wake promptly when another goroutine — and, for a
	// shared database, another process — appends, and MUST NOT poll in a hot
	// loop.
	WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error
}

// -------------------------------------------------------------------- runs

// RunRecord is a run's durable record.
type RunRecord struct {
	Owner     string
	SessionID string
	ID        string
	Status    rein.RunStatus
	// Reason is "" until the run ends.
	Reason rein.Reason
	// Error is the failure message of a FAILED run.
	Error string
	// Input is the user text that started the run.
	Input string
	// ClientID is the client's idempotency key, "" for none. Unique per
	// session among runs that have one.
	ClientID string
	// QueueOrder orders a session's QUEUED runs: lower runs first. The
	// sessions service assigns it (after the last for enqueue, before the
	// first for when_busy=interrupt).
	QueueOrder int64
	// Deadline covers queue time plus execution; zero means none.
	Deadline time.Time
	// Instance is the instance that runs (or ran) the run.
	Instance  string
	Usage     rein.Usage
	CreatedAt time.Time
	StartedAt time.Time // zero until RUNNING
	EndedAt   time.Time // zero until terminal
}

// Key returns the run's session key.
func (r *RunRecord) Key() rein.SessionKey {
	return rein.SessionKey{Owner: r.Owner, ID: r.SessionID}
}

// RunUpdate changes a run record. Zero fields are left unchanged.
type RunUpdate struct {
	Status     rein.RunStatus
	Reason     rein.Reason
	Error      string
	QueueOrder *int64
	Instance   string
	Usage      *rein.Usage
	StartedAt  time.Time
	EndedAt    time.Time
}

// Runs stores run records.
type Runs interface {
	// CreateRun stores r. rein.ErrConflict if the id exists, or if
	// r.ClientID is set and another run of the session has it (callers
	// then read that run with GetRunByClientID). rein.ErrNotFound if the
	// session does not exist.
	CreateRun(ctx context.Context, r *RunRecord) error
	// UpdateRun applies u to the run and returns the record after the
	// update. A terminal run MUST NOT change: updating one returns
	// rein.ErrConflict and the stored record unchanged (first terminal
	// wins, across processes). A non-zero fence is checked.
	UpdateRun(ctx context.Context, key rein.SessionKey, fence Fence, runID string, u RunUpdate) (*RunRecord, error)
	// GetRun returns a run of the session or rein.ErrNotFound.
	GetRun(ctx context.Context, key rein.SessionKey, runID string) (*RunRecord, error)
	// GetRunByClientID returns the session's run with that client id or
	// rein.ErrNotFound.
	GetRunByClientID(ctx context.Context, key rein.SessionKey, clientID string) (*RunRecord, error)
	// ListRuns returns the session's runs newest first by CreatedAt, then
	// ID descending. Never nil.
	ListRuns(ctx context.Context, key rein.SessionKey) ([]*RunRecord, error)
	// ListRunsByStatus returns every run (all owners, all sessions) in one of
	// the statuses, oldest first by CreatedAt then ID; for QUEUED runs of
	// one session that is not necessarily queue order (see QueueOrder).
	// Used at startup to find queued and orphaned runs.
	ListRunsByStatus(ctx context.Context, statuses ...rein.RunStatus) ([]*RunRecord, error)
}

// ------------------------------------------------------------------- inbox

// SupplementStatus is what a client can see of a supplement.
type SupplementStatus string

// Supplement states.
const (
	SupplementQueued   SupplementStatus = "queued"
	SupplementConsumed SupplementStatus = "consumed"
)

// Supplement is a note in a session's inbox (SPEC §5), or a subagent notice
// delivered like one (SPEC §7).
type Supplement struct {
	Owner     string
	SessionID string
	// ID is the supplement_id: client-chosen (idempotency key) or "sup_" ULID.
	ID     string
	Text   string
	Source string // "user", "parent", "subagent": a label
	Status SupplementStatus
	// RunID and Step say which model request consumed it.
	RunID      string
	Step       int
	CreatedAt  time.Time
	ConsumedAt time.Time
}

// Inbox stores supplements. Pushing is idempotent by id; consuming is
// exactly once.
type Inbox interface {
	// PushSupplement stores s as queued and returns (s, true). If the
	// session already has a supplement with s.ID it stores nothing and
	// returns (that supplement as stored, false). Durable on return.
	// rein.ErrNotFound if the session does not exist.
	PushSupplement(ctx context.Context, s *Supplement) (*Supplement, bool, error)
	// ConsumeSupplements atomically marks every queued supplement of the
	// session consumed by (runID, step) and returns them in push order.
	// Under concurrent consumers (goroutines or processes) each supplement
	// MUST be returned to exactly one of them. Never nil.
	ConsumeSupplements(ctx context.Context, key rein.SessionKey, runID string, step int) ([]*Supplement, error)
	// PendingSupplements reports how many supplements are queued.
	PendingSupplements(ctx context.Context, key rein.SessionKey) (int, error)
	// GetSupplement returns one supplement or rein.ErrNotFound.
	GetSupplement(ctx context.Context, key rein.SessionKey, id string) (*Supplement, error)
}

// ----------------------------------------------------------- confirmations

// ConfirmationState is where a tool confirmation stands.
type ConfirmationState string

// Confirmation states. Only pending may change, and only once.
const (
	ConfirmationPending ConfirmationState = "pending"
	ConfirmationAllowed ConfirmationState = "allowed"
	ConfirmationDenied  ConfirmationState = "denied"
	// ConfirmationClosed: the waiting run ended before an answer.
	ConfirmationClosed ConfirmationState = "closed"
)

// Confirmation is a tool call waiting for a human yes/no (SPEC §6).
type Confirmation struct {
	Owner       string
	SessionID   string
	RunID       string
	ToolUseID   string
	Name        string
	Input       json.RawMessage
	State       ConfirmationState
	DenyMessage string
	CreatedAt   time.Time
	ResolvedAt  time.Time
}

// Confirmations stores pending tool confirmations.
type Confirmations interface {
	// CreateConfirmation stores c as pending. rein.ErrConflict if the
	// session already has one with that ToolUseID.
	CreateConfirmation(ctx context.Context, c *Confirmation) error
	// ResolveConfirmation moves a pending confirmation to allowed or denied
	// and returns it. rein.ErrNotFound if unknown; rein.ErrConflict if it is
	// no longer pending (answered, or its run ended). Exactly one of several
	// concurrent resolvers succeeds.
	ResolveConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string, allow bool, denyMessage string) (*Confirmation, error)
	// CloseConfirmations moves every pending confirmation of the run to
	// closed.
	CloseConfirmations(ctx context.Context, key rein.SessionKey, runID string) error
	// GetConfirmation returns one confirmation or rein.ErrNotFound.
	GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*Confirmation, error)
	// ListConfirmations returns the session's confirmations in a state
	// ("" = all), oldest first. Never nil.
	ListConfirmations(ctx context.Context, key rein.SessionKey, state ConfirmationState) ([]*Confirmation, error)
}

// ------------------------------------------------------------------ leases

// Lease is a session's turn lease (SPEC §4): at most one run of a session
// holds it at a time, across every instance sharing the store.
type Lease struct {
	Owner     string
	SessionID string
	// RunID is the run holding the turn.
	RunID string
	// Holder is the instance that holds it.
	Holder string
	// Token is the fencing token: it strictly increases with every
	// acquisition of the session's lease, never reused.
	Token     int64
	ExpiresAt time.Time
}

// Key returns the lease's session key.
func (l *Lease) Key() rein.SessionKey { return rein.SessionKey{Owner: l.Owner, ID: l.SessionID} }

// Fence returns the lease's fencing token as a Fence.
func (l *Lease) Fence() Fence { return Fence{Token: l.Token} }

// Leases stores turn leases.
type Leases interface {
	// AcquireLease gives the session's turn to runID on holder for ttl and
	// returns the new lease with a fresh, larger token. If an unexpired
	// lease is held by another run it MUST fail with an error matching
	// rein.ErrSessionBusy whose *rein.Error carries that run's id in RunID
	// (and never the holder). An expired lease is taken over.
	AcquireLease(ctx context.Context, key rein.SessionKey, holder, runID string, ttl time.Duration) (*Lease, error)
	// RenewLease extends a lease still current (same token) to now+ttl and
	// returns it; rein.ErrLeaseLost if the token is no longer current or
	// the lease expired and was taken.
	RenewLease(ctx context.Context, l *Lease, ttl time.Duration) (*Lease, error)
	// ReleaseLease drops the lease if its token is still current; otherwise
	// it does nothing and returns nil.
	ReleaseLease(ctx context.Context, l *Lease) error
	// GetLease returns the session's current lease (expired or not) or
	// rein.ErrNotFound.
	GetLease(ctx context.Context, key rein.SessionKey) (*Lease, error)
	// ListExpiredLeases returns leases that expired before now.
	ListExpiredLeases(ctx context.Context, now time.Time) ([]*Lease, error)
}

// ------------------------------------------------------------------- flush

// FlushListener makes a session's recent writes durable somewhere else
// (a replica, an archive). It returns when done.
type FlushListener func(ctx context.Context, key rein.SessionKey) error

// Flusher is the flush barrier of SPEC §7.
type Flusher interface {
	// AddFlushListener registers l and returns a function that removes it.
	AddFlushListener(l FlushListener) (remove func())
	// Flush calls every registered listener for key concurrently and waits
	// for all of them to settle. It returns true when at least one listener
	// took part successfully, false when there are none; the error is the
	// earliest-registered failing listener's error, reported only after
	// every listener has settled.
	Flush(ctx context.Context, key rein.SessionKey) (bool, error)
}
