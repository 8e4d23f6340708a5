// Package sessions is the sessions service: the one place that turns
// requests ("send this message", "stop that run", "here is a note") into
// runs and events. The HTTP server, the CLI and Go programs all go through
// it, so every way in gets the same admission rules, the same event log and
// the same stop semantics.
//
// It ties the pieces together: the store (durable sessions, runs, events,
// inbox, confirmations, leases), each run's stop wire (package run) and the
// agent loop. A run held here has one state on this instance (live.go),
// each change of it paired with one durable transition (lifecycle.go). Runs it starts belong to it, never to the request
// that caused them (DESIGN.md rule 3): a client that goes away stops
// nothing. Everything a client can see is appended to the session's log
// first (rule 1).
package sessions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/agent"
	"github.com/reinhq/rein/internal/id"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/store"
	"github.com/reinhq/rein/telemetry/spans"
	"github.com/reinhq/rein/tool"
)

// Config configures a Service.
type Config struct {
	// Store is the backend (required).
	Store store.Store
	// Agent runs the ReAct loop (required).
	Agent *agent.Agent
	// Instance names this process among instances sharing the store
	// (default: a fresh id). It is never shown to clients.
	Instance string
	// LeaseTTL is the turn lease's time to live (default 15 s); a run's
	// lease is renewed every TTL/3.
	LeaseTTL time.Duration
	// ResumeAttempts is how often a run whose instance was lost is resumed
	// (docs/api.md) before it ends FAILED "instance lost". Negative means none;
	// zero means the default, 2.
	ResumeAttempts int
	// InterruptGrace is how long when_busy=interrupt waits for the
	// interrupted run before cancelling it (default 3 s).
	InterruptGrace time.Duration
	// Workspace is the root directory for session workspaces (tools that
	// write files); "" gives tools no workspace.
	Workspace string
	// Retention, when positive, deletes root sessions, with the sessions
	// below them, once they have been idle longer than this (see
	// SweepRetention); each instance sweeps at Start and then every
	// Retention/10, at least 1 s and at most 1 minute apart. 0, the
	// default, keeps sessions until they are deleted and runs no sweeper.
	Retention time.Duration
	// ConfirmTTL, when positive, is how long a tool confirmation waits for
	// an answer before it expires: the call is denied with the message
	// "expired" and session.confirmation_expired is logged, by whichever
	// instance sharing the store is up (expiry.go). 0, the default: never.
	// An agent's own ConfirmTTL wins.
	ConfirmTTL time.Duration
	// Logger (nil: discard).
	Logger *slog.Logger
	// Clock (nil: wall clock).
	Clock rein.Clock
	// Observer receives measurements (nil: none).
	Observer Observer
	// TracerProvider makes the spans of runs, model requests and tool
	// calls (nil: no tracing). It is used as given, never installed
	// globally; package telemetry builds one from the environment.
	TracerProvider trace.TracerProvider
	// System is the system prompt of sessions without an override.
	System string
	// OnRunEnd, when set, is called (on a goroutine of its own) after a
	// run's end is recorded, by the instance that recorded it — the hook
	// subagent settlement hangs on. A crash can skip it; its user catches
	// up after a restart (subagent.Manager.Reconcile).
	OnRunEnd func(ctx context.Context, end RunEnd)
	// Agents are the configured agents by name (docs/tools.md); each session
	// runs with one (CreateSessionRequest.Agent, default DefaultAgent).
	// Nil means one agent, DefaultAgent, made of Agent and System.
	Agents map[string]*Agent
	// Models opens a model by name (an Agent.Model value, e.g.
	// "openai:gpt-4o-mini"): a subagent child whose descriptor names a
	// model other than its agent's runs with it. Nil: children run with
	// their agent's model only.
	Models func(name string) (model.Model, error)
	// MaxRunsInFlight bounds the runs this instance holds (running, or
	// queued for their session's turn): a user.message beyond it is
	// refused at once with an *OverloadError (unavailable, Retry-After),
	// writing nothing. 0 means DefaultMaxRunsInFlight; negative, no bound.
	MaxRunsInFlight int
	// Prices looks up a model's price by name (an Agent.Model value): the
	// cost of its requests, and what a cost budget needs (docs/api.md
	// "Budgets and usage"). Nil: no model has a price.
	Prices model.Prices
	// MaxPendingWrites bounds the writes waiting in the store's writer
	// queue (for stores with the store.Backlog capability): at or beyond
	// it, new runs and new sessions are refused like MaxRunsInFlight. 0
	// means the queue's capacity (refuse once writers would block);
	// negative, no bound.
	MaxPendingWrites int
}

// DefaultAgent is the agent of sessions created without one.
const DefaultAgent = "default"

// Agent is one configured agent.
type Agent struct {
	// Loop runs the ReAct loop with the agent's model and step budget
	// (required).
	Loop *agent.Agent
	// System is the default system prompt of its sessions ("" falls back
	// to Config.System).
	System string
	// Tools returns the tools a run of the agent is offered, with the
	// agent's confirmation set; nil means the loop's own. It is called once
	// per run, so tools that appear later (an MCP server that came up) are
	// offered from the next run on.
	Tools func() *tool.Registry
	// Model names the loop's model (as Config.Models would open it); a
	// child's descriptor records it, so a reader knows what ran.
	Model string
	// ConfirmTTL, when positive, is how long a tool confirmation of the
	// agent's runs waits for an answer before it expires (denied with the
	// message "expired"); 0 means Config.ConfirmTTL.
	ConfirmTTL time.Duration
}

// Observer receives the service's measurements, for metrics. Methods are
// called synchronously and must be fast and safe for concurrent use; the
// model and tool methods sit on every step, so they should not allocate.
// Embed NopObserver to implement only some of them (and keep compiling
// when methods are added).
type Observer interface {
	// RunEnded counts a run reaching a terminal status.
	RunEnded(status rein.RunStatus, reason rein.Reason)
	// RunStarted counts a run admitted to execution.
	RunStarted()
	// AdmissionConflict counts a user.message rejected with session_busy.
	AdmissionConflict()
	// StopLatency observes the time from a cancel or interrupt request
	// ("cancel", "interrupt") to the run's terminal status.
	StopLatency(mode string, d time.Duration)
	// EventsAppended observes one append of n events that took d.
	EventsAppended(d time.Duration, n int)
	// RunParked counts a run that parked waiting for confirmations.
	RunParked()
	// RunUnparked counts a parked run taken up again by this instance
	// (an answer came, or its deadline or a stop ends it).
	RunUnparked()
	// QueueWait observes the time from a run's admission to its start
	// (RUNNING), for runs that start.
	QueueWait(d time.Duration)
	// ModelRequest observes one model request of a run, once its stream
	// has ended.
	ModelRequest(r agent.ModelResponse)
	// ToolCall observes one tool execution of a run.
	ToolCall(r agent.ToolResult)
}

// Service is the sessions service. Create it with New, call Start, and
// Drain before exit.
type Service struct {
	cfg   Config
	st    store.Store
	agent *agent.Agent
	gate  *tool.Gate
	log   *slog.Logger
	ctx   context.Context // parent of every run; cancelled by Close
	stop  context.CancelFunc

	life *lifecycle

	// tracer makes the run spans when tracing is on (tracing); probe
	// observes every run's model requests and tool calls.
	tracer  trace.Tracer
	tracing bool
	probe   agent.Observer
	// parked counts the runs this instance parked that no one has taken up
	// again (see Stats.Parked), as of the last look at the store.
	parked atomic.Int64

	draining atomic.Bool
	closing  atomic.Bool    // Close, not Drain: runs are cancelled
	wg       sync.WaitGroup // background loops

	// parkOnStop is draining.Load as a func value, made once (each run's
	// agent.Turn.ParkOnStop).
	parkOnStop func() bool

	// models caches Config.Models by name (guarded by modelsMu).
	modelsMu sync.Mutex
	models   map[string]model.Model

	mu    sync.Mutex
	live  map[string]*liveRun          // run id → run held here
	local map[rein.SessionKey]*liveRun // the same, by session: a list through liveRun.nextLocal
	pumps map[rein.SessionKey]*pump
	// admits counts admissions in flight per session (see claimNext).
	admits map[rein.SessionKey]int
	// drained counts the runs a shutdown stopped, by how, once they are
	// let go (not parked): the drain's summary.
	drained [drainCancelled + 1]int
	// overload is the admission control of MaxRunsInFlight (admission.go).
	overload admissionGate

	// msgr carries messages between instances sharing the store (nil: the
	// store has no such capability).
	msgr       store.Messenger
	stopListen func()
	replies    replies

	// expiry wakes the sweep of due confirmations (expiry.go).
	expiry expiry
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("sessions: Config.Store is required")
	}
	if cfg.Agents == nil {
		if cfg.Agent == nil {
			return nil, errors.New("sessions: Config.Agent or Config.Agents is required")
		}
		cfg.Agents = map[string]*Agent{DefaultAgent: {Loop: cfg.Agent}}
	}
	if cfg.Agents[DefaultAgent] == nil {
		return nil, fmt.Errorf("sessions: Config.Agents has no %q agent", DefaultAgent)
	}
	for name, a := range cfg.Agents {
		if a == nil || a.Loop == nil {
			return nil, fmt.Errorf("sessions: agent %q has no loop", name)
		}
	}
	if cfg.Agent == nil {
		cfg.Agent = cfg.Agents[DefaultAgent].Loop
	}
	if cfg.Instance == "" {
		cfg.Instance = id.New("ins_")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = 3 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	switch {
	case cfg.ResumeAttempts == 0:
		cfg.ResumeAttempts = 2
	case cfg.ResumeAttempts < 0:
		cfg.ResumeAttempts = 0
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Service{
		cfg:     cfg,
		st:      cfg.Store,
		agent:   cfg.Agent,
		gate:    tool.NewGate(),
		log:     cfg.Logger,
		ctx:     ctx,
		stop:    stop,
		live:    map[string]*liveRun{},
		local:   map[rein.SessionKey]*liveRun{},
		pumps:   map[rein.SessionKey]*pump{},
		admits:  map[rein.SessionKey]int{},
		tracer:  spans.Tracer(cfg.TracerProvider),
		tracing: spans.Enabled(cfg.TracerProvider),
	}
	s.probe = &probe{s: s, spans: spans.Agent{Tracer: s.tracer}}
	s.parkOnStop = s.draining.Load
	excl := false
	if e, ok := cfg.Store.(store.Exclusive); ok {
		excl = e.Exclusive()
	}
	if m, ok := cfg.Store.(store.Messenger); ok && !excl {
		s.msgr = m
	}
	s.life = &lifecycle{st: cfg.Store, instance: cfg.Instance, ttl: cfg.LeaseTTL, resumeAttempts: cfg.ResumeAttempts,
		exclusive: excl, observe: cfg.Observer.EventsAppended, refuseNew: s.unavailableIfDraining}
	return s, nil
}

// NopObserver is an Observer that does nothing: embed it to implement
// only the methods you need.
type NopObserver struct{}

// RunEnded implements Observer.
func (NopObserver) RunEnded(rein.RunStatus, rein.Reason) {}

// RunStarted implements Observer.
func (NopObserver) RunStarted() {}

// AdmissionConflict implements Observer.
func (NopObserver) AdmissionConflict() {}

// StopLatency implements Observer.
func (NopObserver) StopLatency(string, time.Duration) {}

// EventsAppended implements Observer.
func (NopObserver) EventsAppended(time.Duration, int) {}

// RunParked implements Observer.
func (NopObserver) RunParked() {}

// RunUnparked implements Observer.
func (NopObserver) RunUnparked() {}

// QueueWait implements Observer.
func (NopObserver) QueueWait(time.Duration) {}

// ModelRequest implements Observer.
func (NopObserver) ModelRequest(agent.ModelResponse) {}

// ToolCall implements Observer.
func (NopObserver) ToolCall(agent.ToolResult) {}

func (s *Service) now() time.Time { return s.cfg.Clock.Now() }

// agentNames lists the configured agents, sorted.
func (s *Service) agentNames() []string {
	names := make([]string, 0, len(s.cfg.Agents))
	for n := range s.cfg.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AgentNames lists the configured agents, sorted (for clients that offer
// a choice).
func (s *Service) AgentNames() []string { return s.agentNames() }

func (s *Service) unavailableIfDraining() error {
	if s.draining.Load() {
		return rein.Errorf(rein.CodeUnavailable, "the server is shutting down")
	}
	return nil
}

// ------------------------------------------------------------- sessions

// CreateSessionRequest creates a session.
type CreateSessionRequest struct {
	// ID is the caller's id for the session ("": the server makes one,
	// "ses_…"): 1 to 128 characters of A-Z a-z 0-9 . _ : - (ValidSessionID).
	// It is one across owners: creating an id the owner already has
	// returns that session unchanged; an id another owner has is a
	// conflict.
	ID string
	// Title names the session for people (at most MaxTitleLen
	// characters; nil or "": the first user.message's first line names
	// it).
	Title *string
	// Metadata is a JSON object (nil: {}).
	Metadata json.RawMessage
	// System is the session's system-prompt override (nil: none).
	System *string
	// Agent names the configured agent its runs use ("": DefaultAgent).
	Agent string
	// Budget bounds what the session's runs may spend together (nil:
	// none; CheckBudget). A cost bound needs the agent's model to have a
	// price.
	Budget *rein.Budget
}

// Limits of caller-given session fields (docs/api.md).
const (
	// MaxSessionIDLen is the longest caller-chosen session id.
	MaxSessionIDLen = 128
	// MaxTitleLen is the longest title, in characters.
	MaxTitleLen = 200
	// defaultTitleLen is the longest title a first message gives.
	defaultTitleLen = 80
)

// ValidSessionID reports whether id can be a caller-chosen session id: 1
// to MaxSessionIDLen characters of A-Z a-z 0-9 . _ : -.
func ValidSessionID(id string) bool {
	if id == "" || len(id) > MaxSessionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

func checkTitle(title *string) error {
	if title != nil && utf8.RuneCountInString(*title) > MaxTitleLen {
		return rein.InvalidArgument("title", "title must be at most %d characters", MaxTitleLen)
	}
	return nil
}

// defaultTitle is the title a first message gives an untitled session: its
// first line with text, trimmed, cut to defaultTitleLen characters.
func defaultTitle(text string) string {
	line := ""
	for l := range strings.Lines(text) {
		if line = strings.TrimSpace(l); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= defaultTitleLen {
		return line
	}
	n := 0
	for i := range line {
		if n == defaultTitleLen {
			return strings.TrimSpace(line[:i])
		}
		n++
	}
	return line
}

// CreateSession creates a root session for owner; a caller-chosen id the
// owner already has returns that session unchanged (see
// CreateOrGetSession).
func (s *Service) CreateSession(ctx context.Context, owner string, req CreateSessionRequest) (*store.Session, error) {
	sess, _, err := s.CreateOrGetSession(ctx, owner, req)
	return sess, err
}

// CreateOrGetSession creates a root session for owner and reports created.
// With a caller-chosen id the owner already has, it returns that session,
// unchanged, and created false (an idempotent create: the request's other
// fields are not compared); an id another owner has is rein.ErrConflict,
// which says nothing about that session.
func (s *Service) CreateOrGetSession(ctx context.Context, owner string, req CreateSessionRequest) (sess *store.Session, created bool, err error) {
	if req.ID != "" && !ValidSessionID(req.ID) {
		return nil, false, rein.InvalidArgument("id", "id must be 1 to %d characters of A-Z a-z 0-9 . _ : -", MaxSessionIDLen)
	}
	if err := checkTitle(req.Title); err != nil {
		return nil, false, err
	}
	if req.Title != nil && *req.Title == "" {
		req.Title = nil // no title: the first message gives one
	}
	md := req.Metadata
	if len(md) == 0 {
		md = json.RawMessage("{}")
	}
	name := req.Agent
	if name == "" {
		name = DefaultAgent
	}
	if s.cfg.Agents[name] == nil {
		return nil, false, rein.InvalidArgument("agent", "unknown agent %q (configured: %s)", name, strings.Join(s.agentNames(), ", "))
	}
	if err := CheckBudget(req.Budget, "budget"); err != nil {
		return nil, false, err
	}
	if err := s.checkPriced(req.Budget, name, "budget"); err != nil {
		return nil, false, err
	}
	if err := s.unavailableIfDraining(); err != nil {
		return nil, false, err
	}
	if err := s.admitWrites(); err != nil {
		return nil, false, err
	}
	sess = &store.Session{Owner: owner, ID: req.ID, Metadata: md, System: req.System, Agent: name, Title: req.Title, Budget: req.Budget, CreatedAt: s.now()}
	if req.ID == "" {
		sess.ID = id.New(id.Session)
		if err := s.st.CreateSession(ctx, sess); err != nil {
			return nil, false, err
		}
		// The store left in sess what it stored: no read back.
		return sess, true, nil
	}
	return s.st.CreateSessionOnce(ctx, sess)
}

// UpdateSessionRequest changes a session (PATCH); nil fields stay.
type UpdateSessionRequest struct {
	// Title replaces the title (at most MaxTitleLen characters; "" is a
	// title: the session stays untitled for good).
	Title *string
	// Metadata replaces the metadata (a JSON object).
	Metadata json.RawMessage
	// SetBudget replaces the session's budget with Budget (nil clears it;
	// CheckBudget). Raising it lets a session over its budget take
	// messages again.
	SetBudget bool
	Budget    *rein.Budget
}

// UpdateSession changes a session's title, metadata or budget in one write
// and returns the session as GetSession does. It logs no event.
func (s *Service) UpdateSession(ctx context.Context, key rein.SessionKey, req UpdateSessionRequest) (*SessionInfo, error) {
	if err := checkTitle(req.Title); err != nil {
		return nil, err
	}
	if req.SetBudget {
		if err := CheckBudget(req.Budget, "budget"); err != nil {
			return nil, err
		}
		if req.Budget != nil && req.Budget.CostUSD > 0 {
			sess, err := s.st.GetSession(ctx, key)
			if err != nil {
				return nil, err
			}
			if err := s.checkPriced(req.Budget, sess.Agent, "budget"); err != nil {
				return nil, err
			}
		}
	}
	if req.Title != nil || req.Metadata != nil || req.SetBudget {
		if err := s.life.update(ctx, key, store.Fence{}, func(tx store.Tx) error {
			_, err := tx.UpdateSession(store.SessionUpdate{Title: req.Title, Metadata: req.Metadata, SetBudget: req.SetBudget, Budget: req.Budget})
			return err
		}); err != nil {
			return nil, err
		}
	}
	return s.GetSession(ctx, key)
}

// SessionInfo is a session with its live state.
type SessionInfo struct {
	*store.Session
	// Busy is true while a run of the session is running or queued.
	Busy         bool
	CurrentRunID string
	QueuedRunIDs []string
	LastSeq      int64
	// PendingConfirmations are the calls waiting for an answer, oldest
	// first (they survive restarts: docs/tools.md).
	PendingConfirmations []*store.Confirmation
	// Usage is the session's total: its runs' usage summed.
	Usage rein.Usage
}

// GetSession returns a session and its state.
func (s *Service) GetSession(ctx context.Context, key rein.SessionKey) (*SessionInfo, error) {
	sess, err := s.st.GetSession(ctx, key)
	if err != nil {
		return nil, err
	}
	info := &SessionInfo{Session: sess, QueuedRunIDs: []string{}}
	runs, err := s.st.ListRuns(ctx, key)
	if err != nil {
		return nil, err
	}
	info.Usage = sessionUsage(runs, "")
	var queued []*store.RunRecord
	for _, r := range runs {
		switch r.Status {
		case rein.StatusRunning:
			info.CurrentRunID = r.ID
		case rein.StatusQueued:
			queued = append(queued, r)
		}
	}
	sortQueue(queued)
	for _, r := range queued {
		info.QueuedRunIDs = append(info.QueuedRunIDs, r.ID)
	}
	info.Busy = info.CurrentRunID != "" || len(queued) > 0
	if info.LastSeq, err = s.st.LastSeq(ctx, key); err != nil {
		return nil, err
	}
	if info.PendingConfirmations, err = s.st.ListConfirmations(ctx, key, store.ConfirmationPending); err != nil {
		return nil, err
	}
	return info, nil
}

func sortQueue(q []*store.RunRecord) {
	sort.SliceStable(q, func(i, j int) bool {
		if q[i].QueueOrder != q[j].QueueOrder {
			return q[i].QueueOrder < q[j].QueueOrder
		}
		return q[i].CreatedAt.Before(q[j].CreatedAt)
	})
}

// ListSessions returns the owner's sessions, newest first.
func (s *Service) ListSessions(ctx context.Context, owner string) ([]*store.Session, error) {
	return s.st.ListSessions(ctx, owner)
}

// Page sizes of ListSessionPage (docs/api.md).
const (
	DefaultSessionPage = 100
	MaxSessionPage     = 1000
)

// SessionPageRequest asks for a page of the owner's sessions.
type SessionPageRequest struct {
	// Limit is the page's size (0: DefaultSessionPage; above
	// MaxSessionPage: MaxSessionPage; negative: invalid).
	Limit int
	// After is the previous page's Next ("": the first page).
	After string
}

// SessionPage is a page of sessions, newest first by creation time then
// id.
type SessionPage struct {
	Sessions []*store.SessionSummary
	// Next is the cursor of the following page, "" when this is the last.
	Next string
}

// ListSessionPage returns a page of the owner's sessions with their state
// (busy, pending confirmations, last event), read in one store query
// whatever the page's size. Its cursor is a position (the last session's
// creation time and id), not an offset: sessions created since never shift
// the pages that follow.
func (s *Service) ListSessionPage(ctx context.Context, owner string, req SessionPageRequest) (SessionPage, error) {
	limit := req.Limit
	switch {
	case limit < 0:
		return SessionPage{}, rein.InvalidArgument("limit", "limit must be a positive number")
	case limit == 0:
		limit = DefaultSessionPage
	case limit > MaxSessionPage:
		limit = MaxSessionPage
	}
	after, err := decodeSessionCursor(req.After)
	if err != nil {
		return SessionPage{}, err
	}
	list, err := s.st.ListSessionSummaries(ctx, owner, store.SessionPage{After: after, Limit: limit + 1})
	if err != nil {
		return SessionPage{}, err
	}
	page := SessionPage{Sessions: list}
	if len(list) > limit {
		page.Sessions = list[:limit]
		last := list[limit-1].Session
		page.Next = encodeSessionCursor(store.SessionCursor{CreatedAt: last.CreatedAt, ID: last.ID})
	}
	return page, nil
}

// A session cursor is the base64url of "<created_at µs>:<id>": opaque to
// clients, a position to the store.
func encodeSessionCursor(c store.SessionCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + ":" + c.ID))
}

func decodeSessionCursor(s string) (store.SessionCursor, error) {
	if s == "" {
		return store.SessionCursor{}, nil
	}
	bad := rein.InvalidArgument("after", "after must be a cursor from a previous page's next")
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.SessionCursor{}, bad
	}
	us, sid, ok := strings.Cut(string(raw), ":")
	micros, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || sid == "" {
		return store.SessionCursor{}, bad
	}
	return store.SessionCursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: sid}, nil
}

// ListRuns returns the session's runs, newest first.
func (s *Service) ListRuns(ctx context.Context, key rein.SessionKey) ([]*store.RunRecord, error) {
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return nil, err
	}
	return s.st.ListRuns(ctx, key)
}

// GetRun returns one run of the session.
func (s *Service) GetRun(ctx context.Context, key rein.SessionKey, runID string) (*store.RunRecord, error) {
	if _, err := s.st.GetSession(ctx, key); err != nil {
		return nil, err
	}
	return s.st.GetRun(ctx, key, runID)
}

// ReadEvents returns up to limit events after the cursor and the session's
// last seq.
func (s *Service) ReadEvents(ctx context.Context, key rein.SessionKey, after int64, limit int) ([]rein.Event, int64, error) {
	return s.st.ReadEvents(ctx, key, after, limit)
}

// WaitEvents blocks until the session has an event after the cursor.
func (s *Service) WaitEvents(ctx context.Context, key rein.SessionKey, after int64) error {
	return s.st.WaitEvents(ctx, key, after)
}

// Ready reports whether the service accepts work: the store answers and it
// is not draining.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.unavailableIfDraining(); err != nil {
		return err
	}
	if err := s.st.Ping(ctx); err != nil {
		// The cause names the database (a host, a file): it is for the
		// log, never for the message a client reads.
		return &rein.Error{Code: rein.CodeUnavailable, Message: "the store is unreachable; retry later", Err: err}
	}
	return nil
}

// Draining reports whether Drain has begun.
func (s *Service) Draining() bool { return s.draining.Load() }

// workspace returns the session's workspace directory ("" for none).
func (s *Service) workspace(key rein.SessionKey) string {
	if s.cfg.Workspace == "" {
		return ""
	}
	return filepath.Join(s.cfg.Workspace, safeName(key.Owner), sessionDir(key.ID))
}

// sessionDir is the folder name of a session's workspace. Server-made ids
// are safe as they are; a caller-chosen id may hold ':' or be "." or "..",
// which are written as %3A and %2E: '%' is in no session id, so two ids
// never share a folder ("a:b" is not "a_b"'s).
func sessionDir(id string) string {
	if id == "." || id == ".." {
		return strings.Repeat("%2E", len(id))
	}
	if strings.Contains(id, ":") && ValidSessionID(id) {
		return strings.ReplaceAll(id, ":", "%3A")
	}
	return safeName(id)
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "_" + string(b)
	}
	return string(b)
}
