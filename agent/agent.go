// Package agent is Rein's ReAct loop: one model request per step, streamed
// text, tool calls dispatched (through the confirmation gate when a tool
// needs a human yes/no), tool results fed to the next step, until the model
// answers without tool calls or the step budget is spent.
//
// The loop is written for stopping. It runs as a run.Func: every blocking
// call takes the work context, so a cancel or an interrupt reaches the model
// stream and the tools at once rather than at the next chunk. On any ending
// the saved transcript stays valid input for the next request: every tool
// call gets a result (a synthetic error result when a stop cut it short),
// and partial output is kept marked partial or discarded, by policy. The
// loop knows nothing about HTTP or SQL: it writes through the Sink,
// Transcript, Inbox and Confirmer interfaces the runtime binds per run.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/model"
	"github.com/reinhq/rein/run"
	"github.com/reinhq/rein/tool"
)

// PartialPolicy says what happens to assistant text that a stop cut short.
type PartialPolicy int

const (
	// KeepPartial keeps it in the transcript, marked partial (the default:
	// the next request sees what the user saw).
	KeepPartial PartialPolicy = iota
	// DiscardPartial drops it from the transcript.
	DiscardPartial
)

// Sink receives the events a run streams while it works: the
// agent.message.delta events of a model request and agent.step_restarted.
// It MUST be safe for concurrent use and keep Emit order. An implementation
// may write asynchronously and coalesce consecutive deltas; it reports a
// write failure no later than the next Emit. Everything else a run records
// goes through its Journal, in atomic writes.
type Sink interface {
	Emit(ctx context.Context, evs ...rein.Event) error
}

// DeltaSink is optionally implemented by a Sink that takes streamed text
// as it is: EmitDelta(ctx, runID, step, text) is Emit of the
// agent.message.delta {run_id, step, text}, and the loop calls it instead,
// so a Sink that coalesces deltas encodes each merged event once rather
// than every chunk.
type DeltaSink interface {
	EmitDelta(ctx context.Context, runID string, step int, text string) error
}

// Journal is where a run's progress becomes durable. Each method is one
// lifecycle transition of the run (DESIGN.md rule 5): one atomic write, so
// a crash between two calls leaves the run at a step boundary it can be
// resumed from (docs/api.md). Events a method records come after every event
// emitted to the Sink before the call.
type Journal interface {
	// Load returns the transcript the run continues from: the session's
	// earlier turns (rolled-back runs left out), this run's input, and
	// whatever this run saved before (a resumed run). Messages of this run
	// carry its RunID.
	Load(ctx context.Context) ([]rein.Message, error)
	// SaveInput saves the run's input message. The loop calls it only when
	// Load shows no input of the run: a runtime that saves the input when
	// the run starts never sees it called.
	SaveInput(ctx context.Context, m rein.Message) error
	// Consume moves the session's queued supplements into step: their
	// consumed state, their hint messages in the transcript and their
	// agent.supplement_consumed events are one write (docs/api.md). It returns
	// the hint messages, in push order (none: nil).
	Consume(ctx context.Context, step int) ([]rein.Message, error)
	// Pending reports how many supplements are queued.
	Pending(ctx context.Context) (int, error)
	// SaveStep saves a step's assistant message once its model request has
	// ended. With tool calls, the same write records their agent.tool_use
	// events and, for the calls in confirm, the pending confirmations and
	// their session.tool_confirmation_requested events, in the model's
	// order (docs/tools.md). From then on the step's request is never made again.
	SaveStep(ctx context.Context, step int, asst rein.Message, confirm []rein.ToolCall) error
	// SaveResult saves one tool result and its agent.tool_result event in
	// one write, as soon as the call has finished: a call with a saved
	// result is never run again. Results may be saved in any order; Load
	// returns a step's results in the order of its calls.
	SaveResult(ctx context.Context, res rein.Message) error
	// Finish records the run's closing writes: transcript messages (the
	// final reply, a kept partial reply, synthetic results for calls a stop
	// cut short) and events (their agent.tool_result, the agent.message). A
	// runtime may hold them to write with the run's terminal record in the
	// same write. It is the loop's last call.
	Finish(ctx context.Context, msgs []rein.Message, evs []rein.Event) error
}

// ConfirmRequest asks whether a tool call may run.
type ConfirmRequest struct {
	Session   rein.SessionKey
	RunID     string
	Step      int
	ToolUseID string
	Name      string
	Input     json.RawMessage
}

// Confirmer holds tool calls until a human decides (docs/tools.md).
type Confirmer interface {
	// Open registers interest in the answer to req before the request is
	// recorded (Journal.SaveStep), so an answer given the moment it is
	// announced is not missed. A resumed run opens calls whose request was
	// recorded before: their answer may already be stored.
	Open(req ConfirmRequest) (Pending, error)
}

// Pending is one open confirmation (*tool.Pending satisfies it).
type Pending interface {
	// Wait blocks until the decision arrives or ctx is done.
	Wait(ctx context.Context) (tool.Decision, error)
	// Close releases the confirmation; idempotent.
	Close()
}

// Config is what every run of an Agent shares.
type Config struct {
	// Model is the default model (a Turn may override it).
	Model model.Model
	// Tools the model may call (a Turn may override them).
	Tools *tool.Registry
	// MaxSteps caps the model requests of a run that keeps calling tools
	// (default 20). The final-step supplement rule may add steps beyond it.
	MaxSteps int
	// Partial is the partial-output policy.
	Partial PartialPolicy
	// StopTimeout bounds the work done after a stop (saving the transcript
	// with synthetic results, the interrupted reply). Default 5 s.
	StopTimeout time.Duration
	// Logger logs failures that do not end the run (nil: discard).
	Logger *slog.Logger
}

// Agent runs the ReAct loop.
type Agent struct {
	cfg Config
	// specs caches the model's view of the last tool registry a run
	// offered: registries do not change, and most runs offer the same one.
	specs atomic.Pointer[toolSpecs]
}

// toolSpecs are reg's tools as a model.Request carries them.
type toolSpecs struct {
	reg   *tool.Registry
	specs []model.ToolSpec
}

// New returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 20
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg}, nil
}

// Turn binds one run to its session.
type Turn struct {
	Session rein.SessionKey
	RunID   string
	// Input is the user text that started the run.
	Input string
	// System is the system prompt for this run.
	System string
	// Model and Tools override the Agent's when set.
	Model model.Model
	Tools *tool.Registry
	// Workspace is the session's directory for tools that write files.
	Workspace string

	// Journal makes the run's progress durable (required).
	Journal Journal
	// Events receives streamed deltas (required).
	Events Sink
	// Confirm is optional: without one, a tool that needs confirmation is
	// denied.
	Confirm Confirmer
	// Park lets the loop end with ErrParked, writing nothing more, when its
	// step waits only for confirmation answers (the runtime keeps them
	// durable and takes the run up again when one comes); without it the
	// loop waits.
	Park bool
	// ParkOnStop, when set and true at the moment a stop reaches a step
	// that waits only for confirmation answers, parks the run instead of
	// stopping it (a server shutting down leaves such runs waiting).
	ParkOnStop func() bool
	// Attempt is 0 for a fresh run and 2, 3, … for a run resumed after its
	// instance was lost (docs/api.md): the loop continues from what Load shows,
	// and a step whose model request is made again is announced with
	// agent.step_restarted.
	Attempt int
	// InTools, with Attempt, says the lost attempt was cut in the tool
	// phase of the last saved step (some of its calls had no result when
	// the run was taken up): it never began the next model request, so that
	// request is no restart. Otherwise the next request may repeat one the
	// lost attempt had begun, and is announced.
	InTools bool
	// Observer, when set, watches the run's model requests and tool calls
	// (metrics, traces).
	Observer Observer
}

// Control is the part of a run's control the loop needs (run.Control
// satisfies it).
type Control interface {
	// RunContext survives an interrupt, not a cancel.
	RunContext() context.Context
	// Interrupted reports an interrupt and its message.
	Interrupted() (bool, string)
	// Commit declares the final reply; false if the run was cancelled.
	Commit() bool
}

// Tools returns the agent's own tools (nil when it has none): what a run
// is offered unless its Turn says otherwise.
func (a *Agent) Tools() *tool.Registry { return a.cfg.Tools }

// Run executes one run of the loop. ctx is the run's work context (see
// run.Func), and the Outcome it returns is what that Func reports: a
// runtime's Func can return it as it is.
func (a *Agent) Run(ctx context.Context, c Control, t *Turn) run.Outcome {
	l := &loop{a: a, c: c, t: t, model: t.Model, tools: t.Tools}
	if l.model == nil {
		l.model = a.cfg.Model
	}
	if l.tools == nil {
		l.tools = a.cfg.Tools
	}
	if l.model == nil {
		return run.Outcome{Reason: rein.ReasonError, Err: errors.New("agent: no model configured")}
	}
	if t.Journal == nil || t.Events == nil {
		return run.Outcome{Reason: rein.ReasonError, Err: errors.New("agent: a turn needs a Journal and an event Sink")}
	}
	l.openLive()
	defer l.closeLive()
	return l.run(ctx)
}

type loop struct {
	a     *Agent
	c     Control
	t     *Turn
	model model.Model
	tools *tool.Registry

	msgs  []rein.Message // the transcript as the next request sees it
	usage rein.Usage
	// open is the step whose tool calls are being answered: its assistant
	// message is saved, and every call without a saved result needs one
	// before the run may end (transcript validity).
	open     *stepState
	answered map[string]bool
	// opened holds the confirmations saveStep opened before recording
	// their requests, for runTools to wait on.
	opened map[string]Pending

	// live is the context of every store call made while the run is live
	// (stopCtx): one per run, not one per call. liveCancel releases it
	// when the run's loop returns.
	live       *liveCtx
	liveCancel context.CancelFunc
}

func (l *loop) emit(ctx context.Context, evs ...rein.Event) error {
	return l.t.Events.Emit(ctx, evs...)
}

// emitDelta streams one chunk of the step's text.
func (l *loop) emitDelta(ctx context.Context, step int, text string) error {
	if ds, ok := l.t.Events.(DeltaSink); ok {
		return ds.EmitDelta(ctx, l.t.RunID, step, text)
	}
	return l.emit(ctx, rein.NewEvent(rein.EventMessageDelta, l.t.RunID,
		rein.MessageDeltaPayload{RunID: l.t.RunID, Step: step, Text: text}))
}

// errStore marks a failure to record the run's progress: the run fails
// (reason error), it was not stopped.
type errStore struct{ err error }

func (e errStore) Error() string { return e.err.Error() }
func (e errStore) Unwrap() error { return e.err }

// fail ends the run with reason error. Calls of the open step that have no
// result get synthetic ones, so the transcript stays valid.
func (l *loop) fail(err error) run.Outcome {
	msgs, evs := l.closeOpenStep(rein.InterruptedToolOutput)
	if len(msgs) > 0 {
		sctx, cancel := l.stopCtx()
		if ferr := l.t.Journal.Finish(sctx, msgs, evs); ferr != nil {
			l.a.cfg.Logger.Error("record synthetic tool results", "session", l.t.Session.String(), "run", l.t.RunID, "err", ferr)
		}
		cancel()
	}
	return run.Outcome{Reason: rein.ReasonError, Err: err, Usage: l.usage}
}

func (l *loop) run(ctx context.Context) run.Outcome {
	hist, err := l.t.Journal.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return l.stopped(ctx, nil)
		}
		return l.fail(fmt.Errorf("load transcript: %w", err))
	}
	// This run's own messages are the tail of the transcript (one run of a
	// session at a time). Earlier turns are repaired if a lost run left
	// them invalid; this run's tail is taken as saved, since a resumed
	// run's open step may still be waiting for answers.
	i := len(hist)
	for i > 0 && hist[i-1].RunID == l.t.RunID {
		i--
	}
	l.msgs = append(rein.RepairTranscript(hist[:i]), rein.OrderToolResults(hist[i:])...)
	own := l.msgs[len(l.msgs)-(len(hist)-i):]
	hasInput := false
	last := 0 // the last step whose model request ended and was saved
	var openAsst *rein.Message
	for k := range own {
		m := &own[k]
		switch {
		case m.Role == rein.RoleUser && m.Hint == nil:
			hasInput = true
		case m.Role == rein.RoleAssistant && !m.Partial:
			last, openAsst = m.Step, nil
			if len(m.ToolCalls) > 0 {
				openAsst = m
			}
		case m.Role == rein.RoleTool:
			if l.answered == nil {
				l.answered = map[string]bool{}
			}
			l.answered[m.ToolCallID] = true
		}
	}
	if openAsst != nil && l.answered == nil {
		// Made only for a run with tool calls to answer (saveStep makes
		// one per step), not for every run.
		l.answered = map[string]bool{}
	}
	if !hasInput {
		user := rein.Message{Role: rein.RoleUser, Text: l.t.Input, RunID: l.t.RunID}
		sctx, cancel := l.stopCtx()
		err := l.t.Journal.SaveInput(sctx, user)
		cancel()
		if err != nil {
			return l.fail(fmt.Errorf("save transcript: %w", err))
		}
		l.msgs = append(l.msgs, user)
	}

	// A resumed run's next model request may repeat one its lost attempt
	// had begun, streaming deltas: so whenever that attempt had left the
	// last saved step's tool phase (no calls, or every call answered), as
	// it was then free to make the next request. The announcement tells
	// readers to drop what they hold of that step.
	restart := l.t.Attempt >= 2 && !l.t.InTools && (openAsst == nil || answeredAll(openAsst.ToolCalls, l.answered))
	var lastText string
	if openAsst != nil {
		// Resumed in the tool phase of step last: the calls still without a
		// result are waiting for answers (the runtime answered every other
		// one, in doubt if it may have run).
		st := &stepState{step: last, text: openAsst.Text, calls: openAsst.ToolCalls, toolsStarted: true}
		l.open = st
		lastText = st.text
		if out, ok := l.runTools(ctx, st); !ok {
			return out
		}
	}
	extra := false // this step exists only by the final-step rule
	for step := last + 1; ; step++ {
		if step > l.a.cfg.MaxSteps && !extra {
			return l.finish(ctx, rein.ReasonMaxSteps, step-1, lastText, nil)
		}
		extra = false
		if ctx.Err() != nil {
			return l.stopped(ctx, nil)
		}
		if err := l.readInbox(step); err != nil {
			return l.fail(err)
		}
		if restart {
			restart = false
			if err := l.emit(ctx, rein.NewEvent(rein.EventStepRestarted, l.t.RunID, rein.StepRestartedPayload{
				RunID: l.t.RunID, Step: step, Attempt: l.t.Attempt})); err != nil {
				return l.fail(errStore{err})
			}
		}
		st, err := l.request(ctx, step)
		if err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx, st)
			}
			return l.fail(err)
		}
		lastText = st.text
		asst := rein.Message{Role: rein.RoleAssistant, Text: st.text, ToolCalls: st.calls, RunID: l.t.RunID, Step: step}
		if len(st.calls) == 0 {
			// The final-step rule (docs/api.md): a supplement that arrived while
			// this request was in flight gets one more step in this run,
			// also past MaxSteps.
			n, err := l.pending(ctx)
			if err != nil && ctx.Err() != nil {
				return l.stopped(ctx, st)
			}
			if err == nil && n > 0 {
				sctx, cancel := l.stopCtx()
				err := l.t.Journal.SaveStep(sctx, step, asst, nil)
				cancel()
				if err != nil {
					return l.fail(fmt.Errorf("save transcript: %w", err))
				}
				l.msgs = append(l.msgs, asst)
				extra = true
				continue
			}
			return l.finish(ctx, rein.ReasonStop, step, st.text, &asst)
		}
		if out, ok := l.saveStep(ctx, st, asst); !ok {
			return out
		}
		if out, ok := l.runTools(ctx, st); !ok {
			return out
		}
	}
}

// answeredAll reports whether every call has a saved result.
func answeredAll(calls []rein.ToolCall, answered map[string]bool) bool {
	for _, c := range calls {
		if !answered[c.ID] {
			return false
		}
	}
	return true
}

func (l *loop) pending(ctx context.Context) (int, error) {
	return l.t.Journal.Pending(ctx)
}

// readInbox consumes queued supplements into this step's request. The
// write is not cut short by a stop arriving meanwhile: consumed is then
// consumed, and the hints are in the transcript of the next run.
func (l *loop) readInbox(step int) error {
	sctx, cancel := l.stopCtx()
	defer cancel()
	hints, err := l.t.Journal.Consume(sctx, step)
	if err != nil {
		return fmt.Errorf("read inbox: %w", err)
	}
	l.msgs = append(l.msgs, hints...)
	return nil
}

// stepState is what one model request produced so far.
type stepState struct {
	step  int
	text  string
	calls []rein.ToolCall
	// toolsStarted: the step's assistant message is saved and its calls
	// were dispatched.
	toolsStarted bool
	// For the Observer: the request's own usage, its finish reason and
	// when its first text arrived.
	usage     rein.Usage
	finish    string
	firstText time.Time
}

// request makes the step's model request, observed when the turn has an
// Observer.
func (l *loop) request(ctx context.Context, step int) (*stepState, error) {
	obs := l.t.Observer
	if obs == nil {
		return l.streamRequest(ctx, step)
	}
	info := ModelRequest{Session: l.t.Session, RunID: l.t.RunID, Step: step, Model: l.model.Name()}
	start := time.Now()
	rctx := obs.ModelRequestStarted(ctx, info)
	st, err := l.streamRequest(rctx, step)
	r := ModelResponse{ModelRequest: info, Duration: time.Since(start), Usage: st.usage, Finish: st.finish, ToolCalls: len(st.calls)}
	if !st.firstText.IsZero() {
		r.FirstDelta = st.firstText.Sub(start)
	}
	if err != nil {
		if ctx.Err() != nil {
			r.Stopped = true
		} else {
			r.Err = err
		}
	}
	obs.ModelRequestEnded(rctx, r)
	return st, err
}

func (l *loop) streamRequest(ctx context.Context, step int) (*stepState, error) {
	st := &stepState{step: step}
	req := &model.Request{
		System:   l.t.System,
		Messages: l.msgs,
		RunID:    l.t.RunID,
		Step:     step,
		Input:    l.t.Input,
	}
	req.Tools = l.toolSpecs()
	stream, err := l.model.Stream(ctx, req)
	if err != nil {
		return st, fmt.Errorf("model request: %w", err)
	}
	defer stream.Close()
	var seen map[string]bool
	var text strings.Builder
	defer func() { st.text = text.String() }()
	for {
		ch, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return st, nil
			}
			return st, fmt.Errorf("model stream: %w", err)
		}
		switch ch.Kind {
		case model.ChunkText:
			if ch.Text == "" {
				continue
			}
			if st.firstText.IsZero() && l.t.Observer != nil {
				st.firstText = time.Now()
			}
			text.WriteString(ch.Text)
			if err := l.emitDelta(ctx, step, ch.Text); err != nil {
				return st, errStore{err}
			}
		case model.ChunkToolCall:
			if ch.ToolCall == nil {
				continue
			}
			call := *ch.ToolCall
			if call.ID == "" || seen[call.ID] {
				call.ID = fmt.Sprintf("call_%s_%d_%d", l.t.RunID, step, len(st.calls)+1)
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[call.ID] = true
			if len(call.Input) == 0 {
				call.Input = json.RawMessage("{}")
			}
			st.calls = append(st.calls, call)
		case model.ChunkUsage:
			if ch.Usage != nil {
				l.usage = l.usage.Add(*ch.Usage)
				st.usage = st.usage.Add(*ch.Usage)
			}
		case model.ChunkFinish:
			// The stream ends with io.EOF next.
			st.finish = ch.Finish
		}
	}
}

// toolSpecs are the tools offered to the model: built once per registry
// and shared by the requests of every run that offers it (a model reads a
// request's Tools, never changes them).
func (l *loop) toolSpecs() []model.ToolSpec {
	if l.tools == nil {
		return nil
	}
	if c := l.a.specs.Load(); c != nil && c.reg == l.tools {
		return c.specs
	}
	specs := l.tools.ModelTools()
	if len(specs) == 0 {
		specs = nil
	}
	l.a.specs.Store(&toolSpecs{reg: l.tools, specs: specs})
	return specs
}

// needsConfirmation reports whether call c waits for a human.
func (l *loop) needsConfirmation(c rein.ToolCall) bool {
	if l.tools == nil || l.t.Confirm == nil {
		return false
	}
	_, known := l.tools.Lookup(c.Name)
	return known && l.tools.NeedsConfirmation(c.Name)
}

func (l *loop) confirmRequest(step int, c rein.ToolCall) ConfirmRequest {
	return ConfirmRequest{Session: l.t.Session, RunID: l.t.RunID, Step: step, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)}
}

// saveStep records the step's assistant message with its calls, and the
// confirmation requests of the calls that need one, in one write.
func (l *loop) saveStep(ctx context.Context, st *stepState, asst rein.Message) (run.Outcome, bool) {
	var confirm []rein.ToolCall
	for _, c := range st.calls {
		if l.needsConfirmation(c) {
			confirm = append(confirm, c)
		}
	}
	// Opened before the requests are recorded (and so announced), so an
	// answer given the moment they are seen finds them (Confirmer.Open).
	opened := make(map[string]Pending, len(confirm))
	for _, c := range confirm {
		p, err := l.t.Confirm.Open(l.confirmRequest(st.step, c))
		if err != nil {
			for _, p := range opened {
				p.Close()
			}
			return l.fail(fmt.Errorf("open confirmation: %w", err)), false
		}
		opened[c.ID] = p
	}
	sctx, cancel := l.stopCtx()
	err := l.t.Journal.SaveStep(sctx, st.step, asst, confirm)
	cancel()
	if err != nil {
		for _, p := range opened {
			p.Close()
		}
		return l.fail(fmt.Errorf("save transcript: %w", err)), false
	}
	l.opened = opened
	st.toolsStarted = true
	l.open = st
	l.answered = map[string]bool{}
	l.msgs = append(l.msgs, asst)
	return run.Outcome{}, true
}

// runTools answers the open step's calls that have no result yet: they run
// concurrently (those that need confirmation once allowed), and each result
// is saved the moment it is there. It returns ok once every call has its
// result; otherwise the run ends with the returned outcome. The tool
// goroutines are joined before it returns (bounded by StopTimeout for a
// tool that ignores its context), so nothing of the step is written after
// the run's end.
func (l *loop) runTools(ctx context.Context, st *stepState) (run.Outcome, bool) {
	type done struct {
		i   int
		m   rein.Message
		err error // the result could not be saved
		cut bool  // a stop cut the call short: the stop path answers it
	}
	// Confirmations are opened before anything can answer them.
	pend := make([]Pending, len(st.calls))
	defer func() {
		for _, p := range pend {
			if p != nil {
				p.Close()
			}
		}
	}()
	opened := l.opened
	l.opened = nil
	defer func() {
		for _, p := range opened { // not handed to a call (e.g. a failed Open below)
			p.Close()
		}
	}()
	for i, c := range st.calls {
		if p, ok := opened[c.ID]; ok {
			delete(opened, c.ID)
			if !l.answered[c.ID] {
				pend[i] = p
				continue
			}
			p.Close()
		}
		if !l.answered[c.ID] && l.needsConfirmation(c) {
			p, err := l.t.Confirm.Open(l.confirmRequest(st.step, c))
			if err != nil {
				return l.fail(fmt.Errorf("open confirmation: %w", err)), false
			}
			pend[i] = p
		}
	}
	// A failed save stops the step's other calls too: the run fails.
	tctx, tcancel := context.WithCancelCause(ctx)
	defer tcancel(nil)
	ch := make(chan done, len(st.calls))
	n := 0 // calls running
	start := func(i int) {
		c := st.calls[i]
		n++
		go func() {
			res := l.callTool(tctx, st.step, c, pend[i])
			if tctx.Err() != nil {
				ch <- done{i: i, cut: true}
				return
			}
			m := rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: res.Output, IsError: res.IsError, RunID: l.t.RunID, Step: st.step}
			sctx, cancel := l.stopCtx()
			err := l.t.Journal.SaveResult(sctx, m)
			cancel()
			ch <- done{i: i, m: m, err: err}
		}()
	}
	// With Park, a call whose confirmation has no answer yet is not waited
	// for in a goroutine: once nothing else runs, the run parks.
	var deferred []int
	for i, c := range st.calls {
		if l.answered[c.ID] {
			continue
		}
		if l.t.Park && pend[i] != nil && !l.hasAnswer(pend[i]) {
			deferred = append(deferred, i)
			continue
		}
		start(i)
	}
	var saveErr error
	receive := func(d done) {
		switch {
		case d.cut:
		case d.err != nil:
			if saveErr == nil {
				saveErr = d.err
				tcancel(d.err)
			}
		default:
			l.answered[st.calls[d.i].ID] = true
			l.msgs = append(l.msgs, d.m)
		}
	}
	stopped := false
	for {
		for ; n > 0 && !stopped && saveErr == nil; n-- {
			select {
			case d := <-ch:
				receive(d)
			case <-ctx.Done():
				stopped = true
				n++ // nothing received this round
			}
		}
		if stopped || saveErr != nil || len(deferred) == 0 {
			break
		}
		still := deferred[:0]
		for _, i := range deferred {
			if l.hasAnswer(pend[i]) {
				start(i)
			} else {
				still = append(still, i)
			}
		}
		deferred = still
		if n == 0 {
			// Only answers are awaited: park. The step stays open in the
			// journal; the runtime takes the run up again when an answer
			// comes (docs/tools.md: confirmations are durable). A stop that has
			// landed meanwhile is answered instead, unless the runtime says
			// a stop now parks (a shutdown leaves such runs waiting).
			if ctx.Err() != nil && (l.t.ParkOnStop == nil || !l.t.ParkOnStop()) {
				break
			}
			l.msgs = rein.OrderToolResults(l.msgs)
			return run.Outcome{Reason: rein.ReasonError, Err: ErrParked, Usage: l.usage}, false
		}
	}
	if n > 0 {
		t := time.NewTimer(l.a.cfg.StopTimeout)
	join:
		for ; n > 0; n-- {
			select {
			case d := <-ch:
				receive(d)
			case <-t.C:
				l.a.cfg.Logger.Warn("tool calls did not return after the stop", "session", l.t.Session.String(), "run", l.t.RunID, "calls", n)
				break join
			}
		}
		t.Stop()
	}
	// The next request sees the step's results in the model's order.
	l.msgs = rein.OrderToolResults(l.msgs)
	if saveErr != nil && ctx.Err() == nil {
		return l.fail(errStore{fmt.Errorf("save tool result: %w", saveErr)}), false
	}
	if ctx.Err() != nil {
		return l.stopped(ctx, st), false
	}
	l.open = nil
	return run.Outcome{}, true
}

// ErrParked is the error of a run that parked: its step waits only for
// confirmation answers, and the runtime (Turn.Park) keeps nothing of it
// running until one comes. The run is not over.
var ErrParked = errors.New("agent: run parked until its confirmations are answered")

// Answerable is optionally implemented by a Pending: it reports, without
// waiting, whether the answer is there. Parking needs it.
type Answerable interface {
	Answered(ctx context.Context) (bool, error)
}

// hasAnswer reports whether p's answer is there; without a way to know, or
// when asking fails, it says yes, so the call is waited for as usual.
func (l *loop) hasAnswer(p Pending) bool {
	a, ok := p.(Answerable)
	if !ok {
		return true
	}
	// Asked on a context a stop does not cut short: whether to park is
	// decided on what the store says, not on the stop.
	sctx, cancel := l.stopCtx()
	defer cancel()
	yes, err := a.Answered(sctx)
	return err != nil || yes
}

// DeniedOutput is the tool result for a call a human denied; it contains
// the deny message verbatim.
func DeniedOutput(msg string) string {
	if msg == "" {
		return "The user denied this tool call."
	}
	return "The user denied this tool call: " + msg
}

func (l *loop) callTool(ctx context.Context, step int, c rein.ToolCall, p Pending) tool.Result {
	if l.tools == nil {
		return tool.Result{Output: fmt.Sprintf("unknown tool %q: no tools are available", c.Name), IsError: true}
	}
	if _, known := l.tools.Lookup(c.Name); known && l.tools.NeedsConfirmation(c.Name) {
		if p == nil {
			return tool.Result{Output: DeniedOutput("no one can confirm tool calls in this runtime"), IsError: true}
		}
		d, err := p.Wait(ctx)
		if err != nil {
			return tool.Result{Output: rein.InterruptedToolOutput, IsError: true}
		}
		if !d.Allow {
			return tool.Result{Output: DeniedOutput(d.DenyMessage), IsError: true}
		}
	}
	call := tool.Call{ID: c.ID, Name: c.Name, Input: c.Input, Session: l.t.Session, RunID: l.t.RunID, Step: step, Workspace: l.t.Workspace}
	obs := l.t.Observer
	if obs == nil {
		return l.tools.Execute(ctx, call)
	}
	_, known := l.tools.Lookup(c.Name)
	info := ToolCall{Session: l.t.Session, RunID: l.t.RunID, Step: step, ID: c.ID, Name: c.Name, Known: known}
	start := time.Now()
	cctx := obs.ToolCallStarted(ctx, info)
	res := l.tools.Execute(cctx, call)
	obs.ToolCallEnded(cctx, ToolResult{ToolCall: info, Duration: time.Since(start), IsError: res.IsError, Stopped: ctx.Err() != nil})
	return res
}

// validJSON returns b if it is valid JSON, else b as a JSON string, so an
// event payload always marshals.
func validJSON(b json.RawMessage) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// stopCtx is the context of a store call the run must see through even
// though its work context may end meanwhile: a stop that lands during a
// write does not leave it half-known. While the run is live (not cancelled,
// not past its deadline, not interrupted) the call waits as long as the
// store needs — a store slow for a moment under load must not fail the run
// ("read inbox: context deadline exceeded"); the run's deadline, a cancel
// or a lost lease still end it, and StopTimeout bounds the call from then
// on. On a stopped run StopTimeout bounds it from the start.
//
// The live calls of a run share one context (openLive), so a call costs no
// context, timer or callback of its own; its cancel func does nothing.
func (l *loop) stopCtx() (context.Context, context.CancelFunc) {
	rctx := l.c.RunContext()
	if interrupted, _ := l.c.Interrupted(); interrupted || rctx.Err() != nil || l.live == nil {
		return context.WithTimeout(context.WithoutCancel(rctx), l.a.cfg.StopTimeout)
	}
	return l.live, noCancel
}

func noCancel() {}

// liveCtx is the run's shared store-call context (stopCtx). It outlives
// the run context by StopTimeout, counted from the moment the run context
// ends, so a call in flight when a stop lands still gets that long to
// finish. Only a call that can wait needs that watch: the watch (a callback
// on the run context, which runs on a goroutine of its own when the run is
// stopped) is set up the first time anyone asks for Done — a store that
// blocks, or a context derived from this one — and never for a run whose
// store calls only check Err, so such a run's stop costs no goroutine.
type liveCtx struct {
	context.Context // WithCancel(WithoutCancel(run context))
	l               *loop
	watch           sync.Once
}

func (c *liveCtx) Done() <-chan struct{} {
	c.watch.Do(c.l.watchLive)
	return c.Context.Done()
}

// openLive makes the run's shared store-call context.
func (l *loop) openLive() {
	ctx, cancel := context.WithCancel(context.WithoutCancel(l.c.RunContext()))
	l.live, l.liveCancel = &liveCtx{Context: ctx, l: l}, cancel
}

// watchLive ends the shared context StopTimeout after the run context
// ends (or when the loop returns first).
func (l *loop) watchLive() {
	stop := context.AfterFunc(l.c.RunContext(), func() {
		t := time.AfterFunc(l.a.cfg.StopTimeout, l.liveCancel)
		context.AfterFunc(l.live.Context, func() { t.Stop() })
	})
	context.AfterFunc(l.live.Context, func() { stop() })
}

// closeLive releases the shared context when the loop returns: nothing of
// the run calls the store on it after that.
func (l *loop) closeLive() { l.liveCancel() }

// finish ends the run with a final reply: asst (nil when the reply's
// message is already saved, as at max_steps) and the agent.message. step
// is the step that produced the reply: a reply whose commit loses to a stop
// is saved as that step's partial text.
func (l *loop) finish(ctx context.Context, reason rein.Reason, step int, text string, asst *rein.Message) run.Outcome {
	if !l.c.Commit() {
		return l.stopped(ctx, &stepState{step: step, text: text})
	}
	sctx, cancel := l.stopCtx()
	defer cancel()
	var msgs []rein.Message
	if asst != nil {
		msgs = append(msgs, *asst)
	}
	// Room for one more event: a runtime that holds the closing events
	// for the run's end appends its own after them without a copy. The
	// payload is encoded here, so it may point at the loop's usage.
	evs := make([]rein.Event, 1, 2)
	evs[0] = rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: text, Reason: reason, Usage: &l.usage})
	if err := l.t.Journal.Finish(sctx, msgs, evs); err != nil {
		return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("record reply: %w", err), Usage: l.usage}
	}
	return run.Outcome{Reason: reason, Reply: text, Usage: l.usage}
}

// closeOpenStep returns synthetic results, with their agent.tool_result
// events, for every call of the open step that has none.
func (l *loop) closeOpenStep(output string) ([]rein.Message, []rein.Event) {
	st := l.open
	if st == nil {
		return nil, nil
	}
	l.open = nil
	var msgs []rein.Message
	var evs []rein.Event
	for _, c := range st.calls {
		if l.answered[c.ID] {
			continue
		}
		msgs = append(msgs, rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: output, IsError: true, RunID: l.t.RunID, Step: st.step})
		evs = append(evs, rein.NewEvent(rein.EventToolResult, l.t.RunID, rein.ToolResultPayload{
			RunID: l.t.RunID, ToolUseID: c.ID, Output: output, IsError: true}))
	}
	return msgs, evs
}

// stopped is the path after a cancel, timeout or interrupt: it makes the
// transcript valid (synthetic error results for every unanswered call of
// the open step, partial text per policy) and for an interrupt produces the
// interrupted reply; all of it goes to Journal.Finish, so a runtime can
// write it with the run's end.
func (l *loop) stopped(ctx context.Context, st *stepState) run.Outcome {
	interrupted := errors.Is(context.Cause(ctx), rein.ErrInterrupted) && l.c.RunContext().Err() == nil
	sctx, cancel := l.stopCtx()
	defer cancel()

	save, evs := l.closeOpenStep(rein.InterruptedToolOutput)
	replyText := ""
	if st != nil {
		replyText = st.text
		if !st.toolsStarted && st.text != "" && l.a.cfg.Partial == KeepPartial {
			// Cut short mid-stream: tool calls not yet complete are dropped.
			save = append(save, rein.Message{Role: rein.RoleAssistant, Text: st.text, Partial: true, RunID: l.t.RunID, Step: st.step})
		}
	}
	if interrupted && l.c.Commit() {
		u := l.usage
		evs = append(evs, rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: replyText, Reason: rein.ReasonInterrupted, Usage: &u}))
		if err := l.t.Journal.Finish(sctx, save, evs); err != nil {
			return run.Outcome{Reason: rein.ReasonError, Err: fmt.Errorf("save transcript after interrupt: %w", err), Usage: l.usage}
		}
		return run.Outcome{Reason: rein.ReasonInterrupted, Reply: replyText, Usage: l.usage}
	}
	if len(save) > 0 || len(evs) > 0 {
		if err := l.t.Journal.Finish(sctx, save, evs); err != nil {
			l.a.cfg.Logger.Error("save transcript after stop", "session", l.t.Session.String(), "run", l.t.RunID, "err", err)
		}
	}
	if errors.Is(context.Cause(ctx), rein.ErrTimeout) || errors.Is(context.Cause(l.c.RunContext()), rein.ErrTimeout) {
		return run.Outcome{Reason: rein.ReasonTimeout, Err: rein.ErrTimeout, Usage: l.usage}
	}
	return run.Outcome{Reason: rein.ReasonCancelled, Err: rein.ErrCancelled, Usage: l.usage}
}
