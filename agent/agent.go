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
	"time"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/inbox"
	"github.com/reinhq/rein/model"
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

// Sink appends events to the session's log, in the order Emit is called.
// It MUST be safe for concurrent use. An implementation may write
// asynchronously and coalesce consecutive deltas; it reports a write
// failure no later than the next Emit.
type Sink interface {
	Emit(ctx context.Context, evs ...rein.Event) error
}

// Transcript is one session's history as the agent sees it.
type Transcript interface {
	// Load returns the history.
	Load(ctx context.Context) ([]rein.Message, error)
	// Append adds messages atomically.
	Append(ctx context.Context, msgs ...rein.Message) error
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

// Confirmer holds a tool call until a human decides (SPEC §6). Confirm
// announces the request (the session.tool_confirmation_requested event) and
// blocks until a decision arrives or ctx is done.
type Confirmer interface {
	Confirm(ctx context.Context, req ConfirmRequest) (tool.Decision, error)
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

	Transcript Transcript
	Events     Sink
	// Inbox is optional: without one no supplement is read.
	Inbox inbox.Session
	// Confirm is optional: without one, a tool that needs confirmation is
	// denied.
	Confirm Confirmer
}

// Outcome is how the loop ended, as run.Func reports it.
type Outcome struct {
	Reason rein.Reason
	Reply  string
	Err    error
	Usage  rein.Usage
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

// Run executes one run of the loop. ctx is the run's work context (see
// run.Func).
func (a *Agent) Run(ctx context.Context, c Control, t *Turn) Outcome {
	l := &loop{a: a, c: c, t: t, model: t.Model, tools: t.Tools}
	if l.model == nil {
		l.model = a.cfg.Model
	}
	if l.tools == nil {
		l.tools = a.cfg.Tools
	}
	if l.model == nil {
		return Outcome{Reason: rein.ReasonError, Err: errors.New("agent: no model configured")}
	}
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
}

func (l *loop) emit(ctx context.Context, evs ...rein.Event) error {
	return l.t.Events.Emit(ctx, evs...)
}

func (l *loop) fail(err error) Outcome {
	return Outcome{Reason: rein.ReasonError, Err: err, Usage: l.usage}
}

func (l *loop) run(ctx context.Context) Outcome {
	hist, err := l.t.Transcript.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return l.stopped(ctx, nil, nil)
		}
		return l.fail(fmt.Errorf("load transcript: %w", err))
	}
	l.msgs = rein.RepairTranscript(hist)
	user := rein.Message{Role: rein.RoleUser, Text: l.t.Input, RunID: l.t.RunID}
	if err := l.t.Transcript.Append(ctx, user); err != nil {
		if ctx.Err() != nil {
			return l.stopped(ctx, nil, nil)
		}
		return l.fail(fmt.Errorf("save transcript: %w", err))
	}
	l.msgs = append(l.msgs, user)

	var lastText string
	for step := 1; ; step++ {
		if step > l.a.cfg.MaxSteps {
			return l.finish(ctx, rein.ReasonMaxSteps, lastText)
		}
		if err := l.readInbox(ctx, step); err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx, nil, nil)
			}
			return l.fail(err)
		}
		st, err := l.request(ctx, step)
		if err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx, st, nil)
			}
			return l.fail(err)
		}
		lastText = st.text
		asst := rein.Message{Role: rein.RoleAssistant, Text: st.text, ToolCalls: st.calls, RunID: l.t.RunID, Step: step}
		if len(st.calls) == 0 {
			// The final-step rule (SPEC §5): a supplement that arrived while
			// this request was in flight gets one more step in this run.
			if n, err := l.pending(ctx); err == nil && n > 0 {
				if err := l.t.Transcript.Append(ctx, asst); err != nil {
					if ctx.Err() != nil {
						return l.stopped(ctx, st, nil)
					}
					return l.fail(fmt.Errorf("save transcript: %w", err))
				}
				l.msgs = append(l.msgs, asst)
				continue
			} else if err != nil && ctx.Err() != nil {
				return l.stopped(ctx, st, nil)
			}
			return l.finishWith(ctx, rein.ReasonStop, st.text, asst)
		}
		st.toolsStarted = true
		results, ok := l.runTools(ctx, step, st.calls)
		if !ok {
			return l.stopped(ctx, st, results)
		}
		batch := append([]rein.Message{asst}, results...)
		if err := l.t.Transcript.Append(ctx, batch...); err != nil {
			if ctx.Err() != nil {
				return l.stopped(ctx, st, results)
			}
			return l.fail(fmt.Errorf("save transcript: %w", err))
		}
		l.msgs = append(l.msgs, batch...)
	}
}

func (l *loop) pending(ctx context.Context) (int, error) {
	if l.t.Inbox == nil {
		return 0, nil
	}
	return l.t.Inbox.Pending(ctx)
}

// readInbox consumes queued supplements into this step's request, saves
// them in the transcript and records their consumption.
func (l *loop) readInbox(ctx context.Context, step int) error {
	if l.t.Inbox == nil {
		return nil
	}
	sups, err := l.t.Inbox.Consume(ctx, l.t.RunID, step)
	if err != nil {
		return fmt.Errorf("read inbox: %w", err)
	}
	if len(sups) == 0 {
		return nil
	}
	hints := make([]rein.Message, len(sups))
	evs := make([]rein.Event, len(sups))
	for i, s := range sups {
		hints[i] = inbox.Message(s)
		evs[i] = rein.NewEvent(rein.EventSupplementConsumed, l.t.RunID,
			rein.SupplementConsumedPayload{SupplementID: s.ID, RunID: l.t.RunID, Step: step})
	}
	// The hints are in the transcript before the request that includes them
	// is made, so a crash cannot lose a consumed supplement from history.
	// Saving uses a context that survives a stop arriving right now.
	sctx, cancel := l.stopCtx()
	defer cancel()
	if err := l.t.Transcript.Append(sctx, hints...); err != nil {
		return fmt.Errorf("save transcript: %w", err)
	}
	l.msgs = append(l.msgs, hints...)
	return l.emit(sctx, evs...)
}

// stepState is what one model request produced so far.
type stepState struct {
	step  int
	text  string
	calls []rein.ToolCall
	// toolsStarted: the request completed and its calls were dispatched.
	toolsStarted bool
}

func (l *loop) request(ctx context.Context, step int) (*stepState, error) {
	st := &stepState{step: step}
	req := &model.Request{
		System:   l.t.System,
		Messages: l.msgs,
		RunID:    l.t.RunID,
		Step:     step,
		Input:    l.t.Input,
	}
	if l.tools != nil {
		for _, s := range l.tools.Specs() {
			req.Tools = append(req.Tools, model.ToolSpec{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema})
		}
	}
	stream, err := l.model.Stream(ctx, req)
	if err != nil {
		return st, fmt.Errorf("model request: %w", err)
	}
	defer stream.Close()
	var seen map[string]bool
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
			st.text += ch.Text
			if err := l.emit(ctx, rein.NewEvent(rein.EventMessageDelta, l.t.RunID,
				rein.MessageDeltaPayload{RunID: l.t.RunID, Step: step, Text: ch.Text})); err != nil {
				return st, err
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
			}
		case model.ChunkFinish:
			// The stream ends with io.EOF next.
		}
	}
}

// runTools runs the step's tool calls concurrently and returns their
// results in call order. ok is false when a stop cut the step short; the
// results then hold only what finished before the stop.
func (l *loop) runTools(ctx context.Context, step int, calls []rein.ToolCall) ([]rein.Message, bool) {
	uses := make([]rein.Event, len(calls))
	for i, c := range calls {
		uses[i] = rein.NewEvent(rein.EventToolUse, l.t.RunID, rein.ToolUsePayload{
			RunID: l.t.RunID, Step: step, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)})
	}
	if err := l.emit(ctx, uses...); err != nil {
		return nil, false
	}
	type done struct {
		i   int
		res tool.Result
	}
	ch := make(chan done, len(calls))
	for i, c := range calls {
		go func() { ch <- done{i, l.callTool(ctx, step, c)} }()
	}
	got := make([]*rein.Message, len(calls))
	for range calls {
		select {
		case d := <-ch:
			if ctx.Err() != nil {
				// Finished as the stop landed: the stop path answers it.
				return collect(got), false
			}
			c := calls[d.i]
			m := rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: d.res.Output, IsError: d.res.IsError, RunID: l.t.RunID, Step: step}
			got[d.i] = &m
			if err := l.emit(ctx, rein.NewEvent(rein.EventToolResult, l.t.RunID, rein.ToolResultPayload{
				RunID: l.t.RunID, ToolUseID: c.ID, Output: m.Text, IsError: m.IsError})); err != nil {
				return collect(got), false
			}
		case <-ctx.Done():
			return collect(got), false
		}
	}
	out := make([]rein.Message, len(calls))
	for i, m := range got {
		out[i] = *m
	}
	return out, true
}

func collect(got []*rein.Message) []rein.Message {
	var out []rein.Message
	for _, m := range got {
		if m != nil {
			out = append(out, *m)
		}
	}
	return out
}

// DeniedOutput is the tool result for a call a human denied; it contains
// the deny message verbatim.
func DeniedOutput(msg string) string {
	if msg == "" {
		return "The user denied this tool call."
	}
	return "The user denied this tool call: " + msg
}

func (l *loop) callTool(ctx context.Context, step int, c rein.ToolCall) tool.Result {
	if l.tools == nil {
		return tool.Result{Output: fmt.Sprintf("unknown tool %q: no tools are available", c.Name), IsError: true}
	}
	if _, known := l.tools.Lookup(c.Name); known && l.tools.NeedsConfirmation(c.Name) {
		if l.t.Confirm == nil {
			return tool.Result{Output: DeniedOutput("no one can confirm tool calls in this runtime"), IsError: true}
		}
		d, err := l.t.Confirm.Confirm(ctx, ConfirmRequest{Session: l.t.Session, RunID: l.t.RunID, Step: step, ToolUseID: c.ID, Name: c.Name, Input: validJSON(c.Input)})
		if err != nil {
			return tool.Result{Output: rein.InterruptedToolOutput, IsError: true}
		}
		if !d.Allow {
			return tool.Result{Output: DeniedOutput(d.DenyMessage), IsError: true}
		}
	}
	return l.tools.Execute(ctx, tool.Call{ID: c.ID, Name: c.Name, Input: c.Input, Session: l.t.Session, RunID: l.t.RunID, Step: step, Workspace: l.t.Workspace})
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

// stopCtx is a short context for work that must happen even though the
// run's work context is done; it still ends on a cancel when the run
// context is live (interrupt path) — see stopped.
func (l *loop) stopCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(l.c.RunContext()), l.a.cfg.StopTimeout)
}

// finishWith saves the final assistant message and records the reply.
func (l *loop) finishWith(ctx context.Context, reason rein.Reason, text string, asst rein.Message) Outcome {
	if !l.c.Commit() {
		return l.stopped(ctx, &stepState{text: text}, nil)
	}
	sctx, cancel := l.stopCtx()
	defer cancel()
	if err := l.t.Transcript.Append(sctx, asst); err != nil {
		return l.fail(fmt.Errorf("save transcript: %w", err))
	}
	return l.reply(sctx, reason, text)
}

func (l *loop) finish(ctx context.Context, reason rein.Reason, text string) Outcome {
	if !l.c.Commit() {
		return l.stopped(ctx, nil, nil)
	}
	sctx, cancel := l.stopCtx()
	defer cancel()
	return l.reply(sctx, reason, text)
}

func (l *loop) reply(ctx context.Context, reason rein.Reason, text string) Outcome {
	u := l.usage
	if err := l.emit(ctx, rein.NewEvent(rein.EventMessage, l.t.RunID, rein.MessagePayload{RunID: l.t.RunID, Text: text, Reason: reason, Usage: &u})); err != nil {
		return l.fail(fmt.Errorf("record reply: %w", err))
	}
	return Outcome{Reason: reason, Reply: text, Usage: l.usage}
}

// stopped is the path after a cancel, timeout or interrupt: it makes the
// transcript valid (synthetic error results for every unanswered call of
// the step, partial text per policy), records the synthetic results as
// events, and for an interrupt produces the interrupted reply.
func (l *loop) stopped(ctx context.Context, st *stepState, results []rein.Message) Outcome {
	interrupted := errors.Is(context.Cause(ctx), rein.ErrInterrupted) && l.c.RunContext().Err() == nil
	sctx, cancel := l.stopCtx()
	defer cancel()

	var save []rein.Message
	var evs []rein.Event
	replyText := ""
	if st != nil {
		replyText = st.text
		if st.toolsStarted {
			// The model finished the step and its tools were running.
			save = append(save, rein.Message{Role: rein.RoleAssistant, Text: st.text, ToolCalls: st.calls, RunID: l.t.RunID, Step: st.step})
			answered := map[string]bool{}
			for _, r := range results {
				answered[r.ToolCallID] = true
			}
			save = append(save, results...)
			for _, c := range st.calls {
				if answered[c.ID] {
					continue
				}
				save = append(save, rein.Message{Role: rein.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Text: rein.InterruptedToolOutput, IsError: true, RunID: l.t.RunID, Step: st.step})
				evs = append(evs, rein.NewEvent(rein.EventToolResult, l.t.RunID, rein.ToolResultPayload{
					RunID: l.t.RunID, ToolUseID: c.ID, Output: rein.InterruptedToolOutput, IsError: true}))
			}
		} else if st.text != "" && l.a.cfg.Partial == KeepPartial {
			// Cut short mid-stream: tool calls not yet complete are dropped.
			save = append(save, rein.Message{Role: rein.RoleAssistant, Text: st.text, Partial: true, RunID: l.t.RunID, Step: st.step})
		}
	}
	var saveErr error
	if len(save) > 0 {
		if err := l.t.Transcript.Append(sctx, save...); err != nil {
			saveErr = err
			l.a.cfg.Logger.Error("save transcript after stop", "session", l.t.Session.String(), "run", l.t.RunID, "err", err)
		}
	}
	if len(evs) > 0 {
		if err := l.emit(sctx, evs...); err != nil {
			l.a.cfg.Logger.Error("record synthetic tool results", "session", l.t.Session.String(), "run", l.t.RunID, "err", err)
		}
	}
	if !interrupted {
		if errors.Is(context.Cause(ctx), rein.ErrTimeout) {
			return Outcome{Reason: rein.ReasonTimeout, Err: rein.ErrTimeout, Usage: l.usage}
		}
		return Outcome{Reason: rein.ReasonCancelled, Err: rein.ErrCancelled, Usage: l.usage}
	}
	if saveErr != nil {
		return l.fail(fmt.Errorf("save transcript after interrupt: %w", saveErr))
	}
	if !l.c.Commit() {
		return Outcome{Reason: rein.ReasonCancelled, Err: rein.ErrCancelled, Usage: l.usage}
	}
	return l.reply(sctx, rein.ReasonInterrupted, replyText)
}
