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
	"bytes"
	"context"
	"encoding/json"
	"slices"
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
	Updater
	Deleter

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
	// Agent names the configured agent the session's runs use ("" means
	// the default agent).
	Agent string
	// Title names the session for people; nil until it has one: given at
	// creation, set by PATCH, or else taken from the first user.message
	// (Tx.SetDefaultTitle). An explicit "" is a title, and stays.
	Title *string
	// Subagent is the child's descriptor, nil for a root session.
	Subagent *SubagentDescriptor
	// Budget bounds what the session's runs may spend together (docs/api.md
	// "Budgets and usage"); nil: none.
	Budget *rein.Budget
	// CreatedAt is set by CreateSession when zero.
	CreatedAt time.Time
}

// Key returns the session's key.
func (s *Session) Key() rein.SessionKey { return rein.SessionKey{Owner: s.Owner, ID: s.ID} }

// Clone is a deep copy of s: stores hand out and keep records a caller may
// change.
func (s *Session) Clone() *Session {
	out := *s
	out.Metadata = bytes.Clone(s.Metadata)
	if s.System != nil {
		sys := *s.System
		out.System = &sys
	}
	if s.Title != nil {
		title := *s.Title
		out.Title = &title
	}
	if s.Budget != nil {
		b := *s.Budget
		out.Budget = &b
	}
	if s.Subagent != nil {
		d := *s.Subagent
		d.ToolFilter = slices.Clone(s.Subagent.ToolFilter)
		out.Subagent = &d
	}
	return &out
}

// SessionCursor is a position in an owner's list of sessions (newest
// first by CreatedAt, then ID descending): a page after it starts with the
// next older session. A position, not an offset, so sessions created after
// a page was read never shift the pages that follow.
type SessionCursor struct {
	CreatedAt time.Time
	ID        string
}

// IsZero reports whether c is the start of the list.
func (c SessionCursor) IsZero() bool { return c.ID == "" && c.CreatedAt.IsZero() }

// OlderThan reports whether s comes after c in the list's order (newest
// first by CreatedAt, then ID descending).
func OlderThan(s *Session, c SessionCursor) bool {
	if cmp := s.CreatedAt.Compare(c.CreatedAt); cmp != 0 {
		return cmp < 0
	}
	return s.ID < c.ID
}

// SessionPage asks for one page of ListSessionSummaries.
type SessionPage struct {
	// After is the last session of the previous page (zero: the first page).
	After SessionCursor
	// Limit is the most sessions returned (≤ 0: all).
	Limit int
}

// SessionSummary is a session as a list shows it.
type SessionSummary struct {
	Session *Session
	// Busy is true while a run of the session is running (parked ones
	// included) or queued.
	Busy bool
	// PendingConfirmations counts the calls waiting for an answer.
	PendingConfirmations int
	// LastEventAt is the CreatedAt of the session's last event; zero when
	// its log is empty.
	LastEventAt time.Time
}

// SubagentDescriptor is what a continuable subagent child needs to be
// resumed from storage (docs/api.md).
type SubagentDescriptor struct {
	Agent      string   `json:"agent"`
	Label      string   `json:"label"`
	Model      string   `json:"model"`
	System     string   `json:"system"`
	ToolFilter []string `json:"tool_filter"`
	Depth      int      `json:"depth"`
	// Continuable marks a child that can be followed up (startContinuable);
	// a one-shot child (start) belongs to the call that started it.
	Continuable bool `json:"continuable,omitempty"`
}

// Sessions stores session records.
type Sessions interface {
	// CreateSession stores s. Metadata nil is stored as {}; a zero
	// CreatedAt is set to now. On success s holds what GetSession will
	// read back (its Metadata as stored, its CreatedAt at the store's
	// precision), so a caller need not read it again. It MUST fail with rein.ErrConflict if
	// (Owner, ID) exists, and with rein.ErrNotFound if ParentID is set but
	// names no session of the same owner.
	CreateSession(ctx context.Context, s *Session) error
	// CreateSessionOnce is CreateSession for a caller-chosen id, which is
	// one across owners: if no session of any owner has s.ID it stores s
	// as CreateSession does and returns (s, true); if s.Owner has one, it
	// stores nothing and returns (that session, false); if another owner
	// has one, rein.ErrConflict, naming no owner. It is atomic with every
	// CreateSession and CreateSessionOnce of the same id, across
	// goroutines and processes: two owners racing for an id never both
	// get it.
	CreateSessionOnce(ctx context.Context, s *Session) (*Session, bool, error)
	// GetSession returns the session or rein.ErrNotFound. A session of
	// another owner MUST be reported exactly like a missing one.
	GetSession(ctx context.Context, key rein.SessionKey) (*Session, error)
	// ListSessions returns the owner's sessions newest first by CreatedAt,
	// then by ID descending. Never nil.
	ListSessions(ctx context.Context, owner string) ([]*Session, error)
	// ListSessionSummaries returns a page of the owner's sessions in the
	// order of ListSessions, each with what a list shows of its state,
	// read by a bounded number of queries whatever the page's length
	// (never one per session). It starts after page.After (the zero
	// cursor: from the newest) and returns at most page.Limit (≤ 0: all).
	// Never nil.
	ListSessionSummaries(ctx context.Context, owner string, page SessionPage) ([]*SessionSummary, error)
	// ListChildren returns the direct children of key (ParentID == key.ID,
	// same owner), in creation order. Never nil.
	ListChildren(ctx context.Context, key rein.SessionKey) ([]*Session, error)
	// SessionIDInUse reports whether a session of any owner has this id.
	// It is the one owner-blind read: a subagent operation from another
	// owner's session answers "unauthorized" rather than "no such child"
	// (and learns nothing else about it).
	SessionIDInUse(ctx context.Context, id string) (bool, error)
}

// ----------------------------------------------------------------- history

// History reads each session's transcript: the messages a model sees.
// It is written through Update (Tx.AppendHistory) only.
type History interface {
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
	// Instance is the instance that accepted, claimed or resumed the run
	// (the last of these). Never shown to clients.
	Instance string
	// Resumes counts how often the run was resumed after its instance was
	// lost (docs/api.md); a run is resumed at most the configured number of
	// times.
	Resumes int
	// Stop is a stop requested for the run and not yet applied by the
	// instance running it (StopNone when none). It is durable so that
	// whoever runs or resumes the run applies it.
	Stop Stop
	// RolledBack marks a run stopped by when_busy=rollback: its turn is left
	// out of every later model request.
	RolledBack bool
	// Usage is the sum of the run's model requests recorded so far (each
	// step's write adds its request's).
	Usage rein.Usage
	// Budget bounds the run's own usage (its user.message's budget); nil:
	// none.
	Budget    *rein.Budget
	CreatedAt time.Time
	StartedAt time.Time // zero until RUNNING
	EndedAt   time.Time // zero until terminal
}

// Key returns the run's session key.
func (r *RunRecord) Key() rein.SessionKey {
	return rein.SessionKey{Owner: r.Owner, ID: r.SessionID}
}

// Stop is the durable stop request of a run (RunRecord.Stop): a user's
// stop (rein.StopMode) or the stop of when_busy=rollback, which a user
// cannot send on its own. Stored as its string.
type Stop string

// The stops, weakest first (Outranks).
const (
	StopNone Stop = ""
	// StopInterrupt: the run still answers, with reason interrupted.
	StopInterrupt Stop = Stop(rein.StopInterrupt)
	// StopCancel: the run ends at once, CANCELLED.
	StopCancel Stop = Stop(rein.StopCancel)
	// StopRollback: cancelled, and its turn left out of every later model
	// request (RolledBack).
	StopRollback Stop = "rollback"
)

// StopOf is the durable stop of a user's stop mode; the empty mode is a
// cancel, as for user.interrupt.
func StopOf(m rein.StopMode) Stop {
	if m == rein.StopInterrupt {
		return StopInterrupt
	}
	return StopCancel
}

// Valid reports whether s is one of the stops (StopNone included).
func (s Stop) Valid() bool { return s.rank() >= 0 }

func (s Stop) rank() int {
	switch s {
	case StopNone:
		return 0
	case StopInterrupt:
		return 1
	case StopCancel:
		return 2
	case StopRollback:
		return 3
	}
	return -1
}

// Outranks reports whether s is stronger than cur, a stop already
// recorded on a run: rollback > cancel > interrupt > none. A later, weaker
// stop never replaces a stronger one on its way (a rolled-back run stays
// rolled back).
func (s Stop) Outranks(cur Stop) bool { return s.rank() > cur.rank() }

// RunUpdate changes a run record. Zero fields are left unchanged.
type RunUpdate struct {
	Status rein.RunStatus
	// Input replaces the run's input text (an edit of a queued run). Only
	// a QUEUED run's input may change: UpdateRun refuses it for a run in
	// any other status with rein.ErrConflict and the stored record,
	// writing nothing — a run never starts with one text and is then
	// shown with another (docs/api.md, the editable queue).
	Input      string
	Reason     rein.Reason
	Error      string
	QueueOrder *int64
	Instance   string
	Resumes    *int
	Stop       Stop
	RolledBack bool
	// Usage replaces the run's usage; AddUsage then adds to it (a model
	// request's usage, in the write that records the request).
	Usage     *rein.Usage
	AddUsage  *rein.Usage
	StartedAt time.Time
	EndedAt   time.Time
}

// Apply applies u to r, as every backend's Tx.UpdateRun does. norm rounds
// times to the backend's precision (nil: unchanged).
func (u RunUpdate) Apply(r *RunRecord, norm func(time.Time) time.Time) {
	if norm == nil {
		norm = func(t time.Time) time.Time { return t }
	}
	if u.Status != "" {
		r.Status = u.Status
	}
	if u.Input != "" {
		r.Input = u.Input
	}
	if u.Reason != "" {
		r.Reason = u.Reason
	}
	if u.Error != "" {
		r.Error = u.Error
	}
	if u.QueueOrder != nil {
		r.QueueOrder = *u.QueueOrder
	}
	if u.Instance != "" {
		r.Instance = u.Instance
	}
	if u.Resumes != nil {
		r.Resumes = *u.Resumes
	}
	if u.Stop != StopNone {
		r.Stop = u.Stop
	}
	if u.RolledBack {
		r.RolledBack = true
	}
	if u.Usage != nil {
		r.Usage = *u.Usage
	}
	if u.AddUsage != nil {
		r.Usage = r.Usage.Add(*u.AddUsage)
	}
	if !u.StartedAt.IsZero() {
		r.StartedAt = norm(u.StartedAt)
	}
	if !u.EndedAt.IsZero() {
		r.EndedAt = norm(u.EndedAt)
	}
}

// Runs reads run records. They are written through Update (Tx.CreateRun,
// Tx.UpdateRun) only.
type Runs interface {
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
	// ListEndedSince returns every run (all owners, all sessions) whose
	// EndedAt is at or after since, ordered by EndedAt then ID, ascending.
	// Never nil. Its cost MUST follow the number of runs it returns, not
	// the number stored: backends keep the ended runs ordered by end time
	// (an index), so catching up on recent ends after a restart stays
	// cheap however long the store has lived.
	ListEndedSince(ctx context.Context, since time.Time) ([]*RunRecord, error)
}

// ------------------------------------------------------------------- inbox

// SupplementStatus is what a client can see of a supplement.
type SupplementStatus string

// Supplement states.
const (
	SupplementQueued   SupplementStatus = "queued"
	SupplementConsumed SupplementStatus = "consumed"
)

// Supplement is a note in a session's inbox (docs/api.md), or a subagent notice
// delivered like one (docs/api.md).
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

// Inbox reads supplements. They are written through Update
// (Tx.PushSupplement, Tx.ConsumeSupplements) only: pushing is idempotent
// by id, consuming is exactly once.
type Inbox interface {
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
	// ConfirmationStarted: allowed, and handed to the tool. The answer may
	// come while no instance runs the run; only this state says the call
	// may have run, so that a lost instance's allowed call is run exactly
	// once: once if never started, never again (in doubt) if started.
	ConfirmationStarted ConfirmationState = "started"
	// ConfirmationExpired: no answer came before ExpiresAt; the call is
	// denied with the deny message rein.ConfirmationExpiredMessage
	// (Tx.ExpireConfirmation). Like every state but pending, final.
	ConfirmationExpired ConfirmationState = "expired"
)

// Confirmation is a tool call waiting for a human yes/no (docs/tools.md).
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
	// ExpiresAt is when an unanswered confirmation expires (the store's
	// clock); zero means never.
	ExpiresAt time.Time
}

// InboxStatus filters the approvals inbox (Confirmations.ListInbox): what
// a person sees of a confirmation.
type InboxStatus string

// Inbox statuses. A confirmation whose run ended before an answer (closed)
// is in none of them: it no longer waits, and no one answered it.
const (
	// InboxPending: waiting for an answer (ConfirmationPending).
	InboxPending InboxStatus = "pending"
	// InboxAnswered: allowed or denied by a person (ConfirmationAllowed,
	// ConfirmationDenied, ConfirmationStarted).
	InboxAnswered InboxStatus = "answered"
	// InboxExpired: denied by its expiry (ConfirmationExpired).
	InboxExpired InboxStatus = "expired"
)

// Valid reports whether s is one of the inbox statuses.
func (s InboxStatus) Valid() bool {
	return s == InboxPending || s == InboxAnswered || s == InboxExpired
}

// Has reports whether a confirmation in state st is in the inbox with
// status s.
func (s InboxStatus) Has(st ConfirmationState) bool {
	switch s {
	case InboxPending:
		return st == ConfirmationPending
	case InboxAnswered:
		return st == ConfirmationAllowed || st == ConfirmationDenied || st == ConfirmationStarted
	case InboxExpired:
		return st == ConfirmationExpired
	}
	return false
}

// InboxCursor is a position in an owner's approvals inbox (newest first by
// CreatedAt, then SessionID descending, then ToolUseID descending): a page
// after it starts with the next older confirmation. A position, not an
// offset: confirmations made after a page was read never shift the pages
// that follow.
type InboxCursor struct {
	CreatedAt time.Time
	SessionID string
	ToolUseID string
}

// IsZero reports whether c is the start of the inbox.
func (c InboxCursor) IsZero() bool {
	return c.CreatedAt.IsZero() && c.SessionID == "" && c.ToolUseID == ""
}

// After reports whether cf comes after c in the inbox's order.
func (c InboxCursor) After(cf *Confirmation) bool {
	if cmp := cf.CreatedAt.Compare(c.CreatedAt); cmp != 0 {
		return cmp < 0
	}
	if cf.SessionID != c.SessionID {
		return cf.SessionID < c.SessionID
	}
	return cf.ToolUseID < c.ToolUseID
}

// InboxCursorOf is the position of cf in the inbox.
func InboxCursorOf(cf *Confirmation) InboxCursor {
	return InboxCursor{CreatedAt: cf.CreatedAt, SessionID: cf.SessionID, ToolUseID: cf.ToolUseID}
}

// InboxPage asks for one page of Confirmations.ListInbox.
type InboxPage struct {
	// Status is the confirmations' status (required).
	Status InboxStatus
	// After is the last confirmation of the previous page (zero: the
	// first page).
	After InboxCursor
	// Limit is the most confirmations returned (≤ 0: all).
	Limit int
}

// InboxItem is a confirmation as the approvals inbox shows it.
type InboxItem struct {
	Confirmation *Confirmation
	// SessionTitle is its session's title, nil when the session has none.
	SessionTitle *string
}

// Confirmations reads tool confirmations. They are written through
// Update (Tx.CreateConfirmation, Tx.ResolveConfirmation, ...) only.
type Confirmations interface {
	// GetConfirmation returns one confirmation or rein.ErrNotFound.
	GetConfirmation(ctx context.Context, key rein.SessionKey, toolUseID string) (*Confirmation, error)
	// ListConfirmations returns the session's confirmations in a state
	// ("" = all), oldest first. Never nil.
	ListConfirmations(ctx context.Context, key rein.SessionKey, state ConfirmationState) ([]*Confirmation, error)
	// ListInbox returns a page of the owner's confirmations across all
	// the owner's sessions with page.Status, newest first (see
	// InboxCursor), each with its session's title, starting after
	// page.After and at most page.Limit (≤ 0: all). Its cost MUST follow
	// the page, not the owner's confirmations or sessions: backends keep
	// each status's confirmations ordered per owner (an index). Never nil.
	ListInbox(ctx context.Context, owner string, page InboxPage) ([]*InboxItem, error)
	// DueConfirmations returns pending confirmations (every owner, every
	// session) with an ExpiresAt at or before before (the zero time: any
	// ExpiresAt), soonest first (then by owner, session id and tool use
	// id), at most limit (≤ 0: all). Its cost MUST follow the number
	// returned (an index on the expiry of pending confirmations), so
	// asking for the next expiry (limit 1) is cheap however many wait.
	// Never nil.
	DueConfirmations(ctx context.Context, before time.Time, limit int) ([]*Confirmation, error)
}

// ------------------------------------------------------------------ leases

// Lease is a session's turn lease (docs/api.md): at most one run of a session
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

// Leases renews and reads turn leases. A lease is taken and dropped
// through Update (Tx.AcquireLease, Tx.ReleaseLease) only, in the same
// write as the run it gives the turn to or takes it from; a renewal
// changes nothing but the lease's expiry, so it is a call of its own.
type Leases interface {
	// RenewLease extends a lease still current (same token) and not yet
	// expired by the store's clock to now+ttl and returns it;
	// rein.ErrLeaseLost if the token is no longer current or the lease has
	// expired (a holder that let its lease lapse has lost it, even if no
	// one took it over yet).
	RenewLease(ctx context.Context, l *Lease, ttl time.Duration) (*Lease, error)
	// GetLease returns the session's current lease (expired or not) or
	// rein.ErrNotFound.
	GetLease(ctx context.Context, key rein.SessionKey) (*Lease, error)
}

// Exclusive is an optional capability (found by type assertion): a backend
// that no other process can share — the memory store, or SQLite, whose file
// lock admits one process — reports true, so the sessions service knows
// that a run it does not hold was left by a process that is gone and can
// be taken up at once.
type Exclusive interface {
	Exclusive() bool
}

// Messenger is an optional capability of a store several processes share
// (PostgreSQL: LISTEN/NOTIFY): it pushes small messages between the
// instances that share it, so that a stop, a wake-up or a released turn
// reaches the instance concerned in milliseconds, never by polling.
// Delivery is best effort (a listener that reconnects misses what was sent
// meanwhile): every use keeps a fallback that does not depend on it.
type Messenger interface {
	// Send delivers msg (at most a few KiB) to the instance named to, or
	// to every instance when to is "".
	Send(ctx context.Context, to string, msg []byte) error
	// Listen calls handler, on a goroutine of the store's, for each
	// message sent to instance or to every instance, until stop is called.
	// handler must be quick.
	Listen(instance string, handler func(msg []byte)) (stop func())
}

// Heartbeats is an optional capability: the store keeps a row per live
// instance so an operator can see who is up (PostgreSQL: the
// rein_instances view).
type Heartbeats interface {
	// Heartbeat records that instance is alive now, and for about ttl.
	Heartbeat(ctx context.Context, instance string, ttl time.Duration) error
	// Leave removes the instance's row (a clean shutdown).
	Leave(ctx context.Context, instance string) error
}

// ----------------------------------------------------------------- updates

// Updater applies one lifecycle transition of a session atomically
// (DESIGN.md rule 5: one logical transition is one atomic, fenced write).
type Updater interface {
	// Update runs fn inside one transaction on the session key and commits
	// what fn wrote through tx, all or nothing: if fn returns an error, or
	// the commit fails, nothing fn wrote is stored and Update returns that
	// error. It returns only once the transaction is durable.
	//
	// A non-zero fence MUST match the session's current lease token
	// (expired or not, as long as no one took it over), else Update fails
	// with rein.ErrLeaseLost before fn runs; the check holds until commit,
	// so no takeover can commit in between. rein.ErrNotFound if the session
	// does not exist.
	//
	// Update serialises with every other write to the same session (event
	// appends, other Updates, lease operations) across goroutines and, for
	// a shared database, processes: what fn reads through tx cannot change
	// before the commit. fn is called at most once (not at all if ctx ends
	// first) and never after Update has returned, so it may write its
	// caller's variables; it MUST NOT retain tx, and MUST be quick (no I/O
	// of its own): on SQLite it runs inside the single writer.
	Update(ctx context.Context, key rein.SessionKey, fence Fence, fn func(tx Tx) error) error
}

// Tx is the view of one session that an Update's function reads and
// writes. Every method acts on the Update's session only; every write is
// part of the Update's transaction. Methods fail as their Store
// counterparts do (rein.ErrNotFound, rein.ErrConflict, ...).
type Tx interface {
	// Now is the store's clock at this transaction: the time against which
	// leases expire (PostgreSQL: the database's now()).
	Now() time.Time
	// SetSystem replaces the session's system-prompt override (nil clears
	// it; a pointer to "" is an empty override, not none). Readers of the
	// session see it only once the transaction commits, so the override
	// and the system.message that announces it are one write.
	SetSystem(system *string) error
	// Lease returns the session's current lease, expired or not, or nil
	// when the session has none.
	Lease() (*Lease, error)
	// AcquireLease gives the session's turn to runID on holder for ttl and
	// returns the new lease with a fresh, larger token. If the session has
	// an unexpired lease — whoever holds it, the same run id included — it
	// MUST fail with an error matching rein.ErrSessionBusy whose
	// *rein.Error carries that lease's run id in RunID (and never the
	// holder). Expiry is judged by the store's clock (Now), never the
	// caller's. An expired lease is taken over. Writes after it in the
	// same transaction are fenced by the new token.
	AcquireLease(holder, runID string, ttl time.Duration) (*Lease, error)
	// ReleaseLease drops the session's lease if its token is token;
	// otherwise it does nothing and returns nil.
	ReleaseLease(token int64) error

	// Runs returns the session's runs in any of the statuses (all runs
	// when none is given), ordered by QueueOrder, then CreatedAt, then ID,
	// ascending. Never nil.
	Runs(statuses ...rein.RunStatus) ([]*RunRecord, error)
	// GetRun returns a run of the session or rein.ErrNotFound.
	GetRun(runID string) (*RunRecord, error)
	// GetRunByClientID returns the session's run with that client id or
	// rein.ErrNotFound.
	GetRunByClientID(clientID string) (*RunRecord, error)
	// CreateRun stores r (r.Owner and r.SessionID must name the Update's
	// session). A zero CreatedAt is set to Now; on success r holds what
	// GetRun will read back. rein.ErrConflict if the id exists, or if
	// r.ClientID is set and another run of the session has it (callers
	// then read that run with GetRunByClientID).
	CreateRun(r *RunRecord) error
	// UpdateRun applies u to the run and returns the record after the
	// update (the fence is the Update's). A terminal run MUST NOT change:
	// updating one returns the stored record, unchanged, with
	// rein.ErrConflict (first terminal wins, across processes). Likewise
	// an update with an Input of a run that is not QUEUED (RunUpdate.Input).
	UpdateRun(runID string, u RunUpdate) (*RunRecord, error)

	// History returns the session's whole transcript, in order (as
	// History.LoadHistory). Never nil.
	History() ([]rein.Message, error)
	// AppendHistory appends msgs to the transcript, in order (all or
	// none, with the rest of the transaction).
	AppendHistory(msgs ...rein.Message) error
	// AppendEvents appends evs to the log with consecutive seqs and returns
	// them as stored (as EventLog.AppendEvents). Readers see them only once
	// the transaction commits, and WaitEvents callers are woken then.
	AppendEvents(evs ...rein.Event) ([]rein.Event, error)

	// PushSupplement stores s as queued and returns (s as stored, true).
	// If the session already has a supplement with s.ID it stores nothing
	// and returns (that supplement as stored, false). An empty s.ID gets
	// a fresh "sup_" id.
	PushSupplement(s *Supplement) (*Supplement, bool, error)
	// QueuedSupplements returns the session's queued supplements in push
	// order. Never nil.
	QueuedSupplements() ([]*Supplement, error)
	// ConsumeSupplements marks each of ids consumed by (runID, step) at
	// Now. Every id MUST name a queued supplement of the session, else it
	// fails with rein.ErrConflict (rein.ErrNotFound for an unknown id) and,
	// like any failure, the Update writes nothing. Since Updates of a
	// session serialise, of concurrent consumers each supplement is
	// consumed by exactly one.
	ConsumeSupplements(ids []string, runID string, step int) error

	// CreateConfirmation stores c as pending (with c.ExpiresAt, zero for
	// none). rein.ErrConflict if the session already has one with that
	// ToolUseID.
	CreateConfirmation(c *Confirmation) error
	// ExpireConfirmation moves a pending confirmation whose ExpiresAt has
	// come (at or before Now) to expired, with the deny message
	// rein.ConfirmationExpiredMessage and ResolvedAt Now, and returns it.
	// rein.ErrNotFound if unknown; rein.ErrConflict if it is no longer
	// pending, has no ExpiresAt, or its ExpiresAt is after Now — so of an
	// expiry and an answer, or of several instances expiring it, exactly
	// one succeeds.
	ExpireConfirmation(toolUseID string) (*Confirmation, error)
	// ResolveConfirmation moves a pending confirmation to allowed or denied
	// and returns it. rein.ErrNotFound if unknown; rein.ErrConflict if it is
	// no longer pending (answered, or its run ended), so that of several
	// concurrent resolvers exactly one succeeds.
	ResolveConfirmation(toolUseID string, allow bool, denyMessage string) (*Confirmation, error)
	// CloseConfirmations moves every pending confirmation of the run to
	// closed.
	CloseConfirmations(runID string) error
	// StartConfirmation moves an allowed confirmation to started, just
	// before its call runs. rein.ErrNotFound if unknown; rein.ErrConflict
	// if it is not allowed (still pending, denied, closed, or already
	// started).
	StartConfirmation(toolUseID string) error
	// Confirmations returns the session's confirmations in a state ("" =
	// all), oldest first. Never nil.
	Confirmations(state ConfirmationState) ([]*Confirmation, error)

	// RememberStop stores a stop by client id whose user.message has not
	// arrived (docs/api.md user.interrupt), replacing the session's
	// remembered stop for that client id, if any.
	RememberStop(st *RememberedStop) error
	// RememberedStop returns the session's remembered stop for clientID,
	// or nil when there is none. It returns one however old: the caller
	// judges expiry against Now. It is an indexed read, and on a backend
	// with round trips it MAY ride on the GetRunByClientID of the same
	// client id just before it (the admission's pair of reads).
	RememberedStop(clientID string) (*RememberedStop, error)
	// ForgetStops deletes the session's remembered stop for clientID (""
	// for none) and every one of the session's remembered before before
	// (the zero time: none).
	ForgetStops(clientID string, before time.Time) error

	// UpdateSession changes the session's record as u says and returns it
	// as stored.
	UpdateSession(u SessionUpdate) (*Session, error)
	// Budget returns the session's budget, nil when it has none. It sits
	// on every user.message's admission: cheap (no read of the runs).
	Budget() (*rein.Budget, error)
	// SetDefaultTitle gives the session title if it has none (Title nil);
	// a session with a title, "" included, keeps it. Cheap when it has
	// one: it sits on every user.message's admission.
	SetDefaultTitle(title string) error
}

// RememberedStop is a stop by client id that came before the user.message
// with that client id: when the message arrives, its run is created
// already ended (docs/api.md).
type RememberedStop struct {
	Owner     string
	SessionID string
	ClientID  string
	// Mode is the stop's mode as asked ("cancel" or "interrupt"); a run
	// that never started ends cancelled either way.
	Mode string
	// CreatedAt is when the stop came (the store's clock, Tx.Now).
	CreatedAt time.Time
}

// SessionUpdate changes a session record. Nil fields are left unchanged.
type SessionUpdate struct {
	// Title replaces the title ("" is a title: the first message no
	// longer names the session).
	Title *string
	// Metadata replaces the metadata (a JSON object).
	Metadata json.RawMessage
	// SetBudget replaces the budget with Budget (nil: none).
	SetBudget bool
	Budget    *rein.Budget
}

// ConsumeQueued consumes every queued supplement of tx's session by
// (runID, step) and returns them as consumed, in push order: the consume
// of an agent step, for callers that need nothing else in its write.
// Never nil.
func ConsumeQueued(tx Tx, runID string, step int) ([]*Supplement, error) {
	sups, err := tx.QueuedSupplements()
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(sups))
	for i, s := range sups {
		ids[i] = s.ID
		s.Status, s.RunID, s.Step, s.ConsumedAt = SupplementConsumed, runID, step, tx.Now()
	}
	if err := tx.ConsumeSupplements(ids, runID, step); err != nil {
		return nil, err
	}
	return sups, nil
}

// ---------------------------------------------------------------- deletion

// TreeSession is one session of a tree that Deleter.DeleteSession is about
// to delete, as the deleting transaction sees it.
type TreeSession struct {
	Session *Session
	// Active are the session's QUEUED and RUNNING runs in queue order (as
	// Tx.Runs orders them). Never nil.
	Active []*RunRecord
	// Lease is the session's turn lease, expired or not; nil when none.
	Lease *Lease
	// LastActivity is the CreatedAt of the session's last event, or the
	// session's own CreatedAt when it has no event.
	LastActivity time.Time
}

// SessionActivity is a session and when it was last active (see
// TreeSession.LastActivity), for Deleter.ListInactive.
type SessionActivity struct {
	Key          rein.SessionKey
	LastActivity time.Time
}

// Deleter deletes sessions for good (docs/api.md: deleting a session, and
// the retention rule).
type Deleter interface {
	// DeleteSession deletes the session key and every session below it —
	// its children, their children, and so on (ParentID chains, same
	// owner) — with every row stored for any of them: events, history,
	// runs (client ids included), supplements, confirmations, the lease,
	// the event counter and the subagent descriptor. It is one
	// transaction: all of it or nothing.
	//
	// Before deleting anything it calls check, at most once, with the
	// store's clock at the transaction (as Tx.Now) and the tree: key's
	// session first, every parent before its children. If check returns
	// an error nothing is deleted and DeleteSession returns that error
	// unchanged. From before the tree is read until the commit, the
	// transaction holds every session of the tree as Update holds its
	// session, across goroutines and processes: no Update, append, lease
	// operation or other write to any of them commits in between, and no
	// child can be created under any of them. So what check saw (no active
	// run, say) is still true when the deletion commits, and a write that
	// waited for it finds the session gone (rein.ErrNotFound). check MUST
	// be quick and do no I/O, as Update's fn.
	//
	// It returns the deleted sessions in the order check saw them.
	// rein.ErrNotFound if key does not exist (another owner's session
	// included). Once it has returned, every read of a deleted session
	// answers rein.ErrNotFound, and WaitEvents callers waiting on one —
	// in any process sharing the store — return rein.ErrNotFound
	// promptly. A new session may later be created with a deleted key;
	// it starts empty.
	DeleteSession(ctx context.Context, key rein.SessionKey, check func(now time.Time, tree []*TreeSession) error) ([]*Session, error)
	// ListInactive returns root sessions (ParentID "", every owner) whose
	// own last activity (see TreeSession.LastActivity) is before before,
	// ordered by key (owner, then id, bytewise), starting after the key
	// after (the zero key: from the start), at most limit of them
	// (limit ≤ 0: all). It looks at the root only: DeleteSession's check
	// sees the whole tree. Never nil.
	ListInactive(ctx context.Context, before time.Time, after rein.SessionKey, limit int) ([]SessionActivity, error)
}

// ------------------------------------------------------------------- flush

// FlushListener makes a session's recent writes durable somewhere else
// (a replica, an archive). It returns when done.
type FlushListener func(ctx context.Context, key rein.SessionKey) error

// Flusher is the flush barrier of docs/api.md.
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

// ------------------------------------------------------------ approvals

// CompareInbox orders two confirmations as the approvals inbox lists
// them: newest first by CreatedAt, then SessionID and ToolUseID
// descending (negative when a comes first).
func CompareInbox(a, b *Confirmation) int {
	if cmp := b.CreatedAt.Compare(a.CreatedAt); cmp != 0 {
		return cmp
	}
	if a.SessionID != b.SessionID {
		if a.SessionID > b.SessionID {
			return -1
		}
		return 1
	}
	switch {
	case a.ToolUseID > b.ToolUseID:
		return -1
	case a.ToolUseID < b.ToolUseID:
		return 1
	}
	return 0
}

// CheckExpiry is the rule of Tx.ExpireConfirmation, for backends: nil
// when c may expire at now, else the conflict that says why not.
func CheckExpiry(c *Confirmation, now time.Time) error {
	switch {
	case c.State != ConfirmationPending:
		return rein.Errorf(rein.CodeConflict, "confirmation %q is no longer pending (%s)", c.ToolUseID, c.State)
	case c.ExpiresAt.IsZero():
		return rein.Errorf(rein.CodeConflict, "confirmation %q does not expire", c.ToolUseID)
	case c.ExpiresAt.After(now):
		return rein.Errorf(rein.CodeConflict, "confirmation %q expires at %s, not yet", c.ToolUseID, c.ExpiresAt.Format(time.RFC3339Nano))
	}
	return nil
}
