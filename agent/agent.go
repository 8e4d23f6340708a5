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
	"errors"
	"log/slog"
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

// Model returns the agent's model (nil when it has none): what a run uses
// unless its Turn says otherwise.
func (a *Agent) Model() model.Model { return a.cfg.Model }

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
