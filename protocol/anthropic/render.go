package anthropic

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/sessions"
)

// Rendering the log (docs/protocols.md has the table).
//
// One Rein event becomes zero or more protocol events, all carrying the
// Rein event's seq (the stream's id: line, the list's cursor). Their ids are
// derived from Rein event ids only, so a list, a stream and a stream
// resumed at any cursor give every rendered event the same id:
//   - a rendering of the event itself keeps the event's id;
//   - a span.model_request_start takes the id of the step's first event
//     plus "_span", its span.model_request_end the id of the event that
//     closed it plus "_span_end"; session.error the run_completed's id
//     plus "_error"; a session.status_running after the last answered
//     confirmation the confirmation's id plus "_running";
//   - a step's agent.message takes the id of the step's first
//     agent.message.delta, which is also its preview's id (event_start),
//     so the final event replaces its preview.
//
// What a rendering needs beyond its event — the text the step streamed so
// far, the agent.tool_use event a result or confirmation refers to — is
// state built from the events before it. A reader that starts at a cursor
// primes that state by reading the log back to the start of the step in
// progress, and renders those events without writing them.

// rendered is one protocol event.
type rendered struct {
	seq  int64
	typ  string
	data []byte
}

// runState is what the renderer knows of a run from the events so far.
type runState struct {
	started bool
	step    int
	// span is the id of the open span.model_request_start ("": none).
	span string
	// closed is true once the step's model request has ended (its tool
	// calls were logged).
	closed bool
	// preview is the id of the step's message: its first delta's id.
	preview string
	text    strings.Builder
	// shown is the text of the last agent.message shown for the run.
	shown string
	// tools maps Rein's call ids to their agent.tool_use event ids.
	tools map[string]string
	// pending are the agent.tool_use event ids waiting for an answer.
	pending []string
	// usage is the open span's request's usage, from its
	// agent.model_request (logged in the write that ends the step, before
	// its tool calls).
	usage usageJSON
}

// renderer turns a session's events into protocol events.
type renderer struct {
	svc    *sessions.Service
	key    rein.SessionKey
	deltas bool // previews of agent.message (event_deltas)
	runs   map[string]*runState
	// emit is false while priming: state is built, nothing is kept.
	emit bool
	out  []rendered
}

func newRenderer(svc *sessions.Service, key rein.SessionKey, deltas bool) *renderer {
	return &renderer{svc: svc, key: key, deltas: deltas, runs: map[string]*runState{}}
}

// primeLimit bounds how far back priming reads: a step's events (its
// coalesced deltas, its tool calls and results) are far fewer.
const primeLimit = 20000

// prime builds the state a reader starting after seq needs: it reads back
// from seq to the start of the step in progress (or of its run), and
// renders that without output.
func (r *renderer) prime(ctx context.Context, after int64) error {
	if after <= 0 {
		return nil
	}
	var back []rein.Event // newest first
	step := 0
	done := false
	for hi := after; hi > 0 && !done && int(after-hi) < primeLimit; hi -= backPage {
		lo := max(0, hi-backPage)
		evs, _, err := r.svc.ReadEvents(ctx, r.key, lo, int(hi-lo))
		if err != nil {
			return err
		}
		for i := len(evs) - 1; i >= 0 && !done; i-- {
			e := evs[i]
			if e.Seq > hi {
				continue
			}
			if e.Type == rein.EventRunCompleted {
				done = true
				break
			}
			if s := stepOf(e); s > 0 {
				if step == 0 {
					step = s
				} else if s < step {
					done = true
					break
				}
			}
			back = append(back, e)
			if e.Type == rein.EventRunStarted {
				done = true
			}
		}
	}
	fwd := make([]rein.Event, len(back))
	for i, e := range back {
		fwd[len(back)-1-i] = e
	}
	r.emit = false
	_, err := r.page(ctx, fwd, false)
	return err
}

// stepOf is the step an event names (0: none).
func stepOf(e rein.Event) int {
	switch e.Type {
	case rein.EventMessageDelta, rein.EventToolUse, rein.EventStepRestarted, rein.EventSupplementConsumed:
		var p struct {
			Step int `json:"step"`
		}
		_ = json.Unmarshal(e.Payload, &p)
		return p.Step
	}
	return 0
}

// page renders evs, in order; a decision that needs the events after the
// page (is the run waiting for answers, does the session go idle) reads
// them from the store. emit false only builds state.
func (r *renderer) page(ctx context.Context, evs []rein.Event, emit bool) ([]rendered, error) {
	r.emit, r.out = emit, nil
	for i := range evs {
		if err := r.event(ctx, evs[i], evs[i+1:]); err != nil {
			return nil, err
		}
	}
	return r.out, nil
}

func (r *renderer) add(seq int64, typ string, v any) {
	if !r.emit {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	r.out = append(r.out, rendered{seq: seq, typ: typ, data: b})
}

func (r *renderer) run(id string) *runState {
	st := r.runs[id]
	if st == nil {
		st = &runState{tools: map[string]string{}}
		r.runs[id] = st
	}
	return st
}

// Protocol event shapes.
type (
	baseJSON struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		ProcessedAt string `json:"processed_at"`
		// Seq is Rein's extension: the seq of the log event rendered,
		// the cursor a stream resumes after (?after=SEQ).
		Seq int64 `json:"seq"`
	}
	messageJSON struct {
		baseJSON
		Content []textBlock `json:"content"`
		RunID   string      `json:"run_id,omitempty"`
	}
	interruptJSON struct {
		baseJSON
		RunID    *string `json:"run_id"`
		Accepted bool    `json:"accepted"`
	}
	confirmationJSON struct {
		baseJSON
		ToolUseID   string  `json:"tool_use_id"`
		Result      string  `json:"result"`
		DenyMessage *string `json:"deny_message"`
	}
	supplementJSON struct {
		baseJSON
		Content      []textBlock `json:"content"`
		SupplementID string      `json:"supplement_id"`
	}
	toolUseJSON struct {
		baseJSON
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	toolResultJSON struct {
		baseJSON
		ToolUseID string      `json:"tool_use_id"`
		Content   []textBlock `json:"content"`
		IsError   bool        `json:"is_error"`
		InDoubt   bool        `json:"in_doubt,omitempty"`
	}
	threadEventJSON struct {
		baseJSON
		SessionThreadID string `json:"session_thread_id"`
		AgentName       string `json:"agent_name"`
	}
	threadCreatedJSON struct {
		threadEventJSON
		WorkflowRunID *string `json:"workflow_run_id"`
	}
	threadIdleJSON struct {
		threadEventJSON
		StopReason  stopReasonJSON `json:"stop_reason"`
		StopDetails *struct{}      `json:"stop_details"`
	}
	idleJSON struct {
		baseJSON
		StopReason  stopReasonJSON `json:"stop_reason"`
		StopDetails *struct{}      `json:"stop_details"`
	}
	stopReasonJSON struct {
		Type     string   `json:"type"`
		EventIDs []string `json:"event_ids,omitempty"`
	}
	spanEndJSON struct {
		baseJSON
		ModelRequestStartID string    `json:"model_request_start_id"`
		ModelUsage          usageJSON `json:"model_usage"`
		IsError             bool      `json:"is_error"`
	}
	usageJSON struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	}
	sessionErrorJSON struct {
		baseJSON
		Error struct {
			Type        string `json:"type"`
			Message     string `json:"message"`
			RetryStatus struct {
				Type string `json:"type"`
			} `json:"retry_status"`
		} `json:"error"`
	}
	eventStartJSON struct {
		Type  string `json:"type"`
		Seq   int64  `json:"seq"`
		Event struct {
			Type string `json:"type"`
			ID   string `json:"id"`
		} `json:"event"`
	}
	eventDeltaJSON struct {
		Type    string `json:"type"`
		Seq     int64  `json:"seq"`
		EventID string `json:"event_id"`
		Delta   struct {
			Type    string    `json:"type"`
			Index   int       `json:"index"`
			Content textBlock `json:"content"`
		} `json:"delta"`
	}
)

func base(id, typ string, e rein.Event) baseJSON {
	return baseJSON{ID: id, Type: typ, ProcessedAt: rein.FormatTime(e.CreatedAt), Seq: e.Seq}
}

// event renders one event; rest are the events after it in the page.
func (r *renderer) event(ctx context.Context, e rein.Event, rest []rein.Event) error {
	switch e.Type {
	case rein.EventUserMessage:
		var p rein.UserMessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		r.add(e.Seq, typeUserMessage, messageJSON{baseJSON: base(e.ID, typeUserMessage, e), Content: textBlocks(p.Text), RunID: e.RunID})
	case rein.EventUserInterrupt:
		var p rein.UserInterruptPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.add(e.Seq, typeUserInterrupt, interruptJSON{baseJSON: base(e.ID, typeUserInterrupt, e), RunID: p.RunID, Accepted: p.Accepted})
	case rein.EventSystemMessage:
		var p rein.SystemMessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		r.add(e.Seq, typeSystemMessage, messageJSON{baseJSON: base(e.ID, typeSystemMessage, e), Content: textBlocks(p.Text)})
	case rein.EventUserSupplement:
		var p rein.SupplementPayload
		_ = json.Unmarshal(e.Payload, &p)
		r.add(e.Seq, typeUserSupplement, supplementJSON{baseJSON: base(e.ID, typeUserSupplement, e), Content: textBlocks(p.Text), SupplementID: p.SupplementID})
	case rein.EventUserToolConfirmation:
		var p rein.UserToolConfirmationPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		ref, err := r.toolUseRef(ctx, st, p.ToolUseID, e.Seq)
		if err != nil {
			return err
		}
		out := confirmationJSON{baseJSON: base(e.ID, typeToolConfirmation, e), ToolUseID: ref, Result: "deny", DenyMessage: p.DenyMessage}
		if p.Allow {
			out.Result, out.DenyMessage = "allow", nil
		}
		r.add(e.Seq, typeToolConfirmation, out)
		if st.answered(ref) && len(st.pending) == 0 {
			// Every question of the step is answered: the run goes on.
			r.add(e.Seq, "session.status_running", base(e.ID+"_running", "session.status_running", e))
		}
	case rein.EventRunStarted:
		r.run(e.RunID).started = true
		r.add(e.Seq, "session.status_running", base(e.ID, "session.status_running", e))
	case rein.EventMessageDelta:
		var p rein.MessageDeltaPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		st.started = true
		r.enterStep(st, p.Step, e)
		st.text.WriteString(p.Text)
		if st.preview == "" {
			st.preview = e.ID
			if r.deltas {
				var v eventStartJSON
				v.Type, v.Seq, v.Event.Type, v.Event.ID = "event_start", e.Seq, "agent.message", st.preview
				r.add(e.Seq, "event_start", v)
			}
		}
		if r.deltas {
			var v eventDeltaJSON
			v.Type, v.Seq, v.EventID = "event_delta", e.Seq, st.preview
			v.Delta.Type, v.Delta.Content = "content_delta", textBlock{Type: "text", Text: p.Text}
			r.add(e.Seq, "event_delta", v)
		}
	case rein.EventStepRestarted:
		st := r.run(e.RunID)
		if st.span != "" {
			// The cut request's span ends in error: a preview without its
			// final event is dropped by the client, so the redone step's
			// text is never shown twice.
			r.add(e.Seq, "span.model_request_end", spanEndJSON{baseJSON: base(e.ID+"_span_end", "span.model_request_end", e), ModelRequestStartID: st.span, IsError: true})
		}
		st.span, st.preview, st.closed = "", "", false
		st.text.Reset()
	case rein.EventToolUse:
		var p rein.ToolUsePayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		st.started = true
		r.enterStep(st, p.Step, e)
		if !st.closed {
			r.showStepText(st, e)
			r.endSpan(st, e, false)
			st.closed = true
		}
		input := p.Input
		if !json.Valid(input) {
			input, _ = json.Marshal(string(p.Input))
		}
		r.add(e.Seq, "agent.tool_use", toolUseJSON{baseJSON: base(e.ID, "agent.tool_use", e), Name: p.Name, Input: input})
		st.tools[p.ToolUseID] = e.ID
	case rein.EventToolConfirmationRequested:
		var p rein.ToolConfirmationRequestedPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		ref, err := r.toolUseRef(ctx, st, p.ToolUseID, e.Seq)
		if err != nil {
			return err
		}
		st.pending = append(st.pending, ref)
		if !r.emit {
			return nil
		}
		// The step's questions are logged together: the run waits for
		// answers once the last of them is in.
		next, err := r.next(ctx, e, rest, 1)
		if err != nil {
			return err
		}
		if len(next) == 0 || next[0].Type != rein.EventToolConfirmationRequested || next[0].RunID != e.RunID {
			r.add(e.Seq, "session.status_idle", idleJSON{baseJSON: base(e.ID, "session.status_idle", e),
				StopReason: stopReasonJSON{Type: "requires_action", EventIDs: append([]string(nil), st.pending...)}})
		}
	case rein.EventToolResult:
		var p rein.ToolResultPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		ref, err := r.toolUseRef(ctx, st, p.ToolUseID, e.Seq)
		if err != nil {
			return err
		}
		st.answered(ref)
		r.add(e.Seq, "agent.tool_result", toolResultJSON{baseJSON: base(e.ID, "agent.tool_result", e), ToolUseID: ref,
			Content: textBlocks(p.Output), IsError: p.IsError, InDoubt: p.InDoubt})
	case rein.EventMessage:
		var p rein.MessagePayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		if st.span != "" {
			// The final step's request: its text is the reply.
			if p.Text != "" && p.Text != st.shown {
				id := st.preview
				if id == "" {
					id = e.ID
				}
				r.add(e.Seq, "agent.message", messageJSON{baseJSON: base(id, "agent.message", e), Content: textBlocks(p.Text)})
				st.shown = p.Text
			}
			r.endSpan(st, e, p.Reason != rein.ReasonStop)
		} else if p.Text != "" && p.Text != st.shown {
			// A reply made after the last request (a stop during tool
			// calls, the step limit): shown unless it is the text the
			// last step already showed.
			r.add(e.Seq, "agent.message", messageJSON{baseJSON: base(e.ID, "agent.message", e), Content: textBlocks(p.Text)})
			st.shown = p.Text
		}
	case rein.EventRunCompleted:
		var p rein.RunCompletedPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		delete(r.runs, e.RunID)
		if st.span != "" {
			r.endSpan(st, e, true)
		}
		if p.Status == rein.StatusFailed {
			v := sessionErrorJSON{baseJSON: base(e.ID+"_error", "session.error", e)}
			v.Error.Type, v.Error.Message, v.Error.RetryStatus.Type = "unknown_error", p.Error, "terminal"
			if v.Error.Message == "" {
				v.Error.Message = "the run failed"
			}
			r.add(e.Seq, "session.error", v)
		}
		if !st.started || !r.emit {
			return nil
		}
		idle, err := r.idleAfter(ctx, e, rest)
		if err != nil {
			return err
		}
		if idle {
			r.add(e.Seq, "session.status_idle", idleJSON{baseJSON: base(e.ID, "session.status_idle", e), StopReason: stopReasonJSON{Type: "end_turn"}})
		}
	case rein.EventModelRequest:
		// The request's usage goes on the span it ends.
		var p rein.ModelRequestPayload
		_ = json.Unmarshal(e.Payload, &p)
		st := r.run(e.RunID)
		st.usage = usageJSON{InputTokens: p.Usage.InputTokens, OutputTokens: p.Usage.OutputTokens}
	case rein.EventSubagentStarted:
		// A child's activation: its first is the thread's creation (threads.go).
		var p rein.SubagentStartedPayload
		_ = json.Unmarshal(e.Payload, &p)
		th, first, err := r.thread(ctx, p.ChildID, p.TaskID)
		if err != nil {
			return err
		}
		if first {
			r.add(e.Seq, "session.thread_created", threadCreatedJSON{threadEventJSON: th.at(e.ID, "session.thread_created", e)})
		}
		r.add(e.Seq, "session.thread_status_running", th.at(e.ID+"_running", "session.thread_status_running", e))
	case rein.EventSubagentCompleted:
		// Rein's children stay continuable, so an ended activation is an
		// idle thread, whatever its status.
		var p rein.SubagentCompletedPayload
		_ = json.Unmarshal(e.Payload, &p)
		th, _, err := r.thread(ctx, p.ChildID, "")
		if err != nil {
			return err
		}
		r.add(e.Seq, "session.thread_status_idle", threadIdleJSON{threadEventJSON: th.at(e.ID, "session.thread_status_idle", e), StopReason: stopReasonJSON{Type: "end_turn"}})
	}
	// session.run_queued and agent.supplement_consumed have no counterpart
	// in the protocol; event types this adapter does not know yet are left
	// out the same way.
	return nil
}

// enterStep moves st to step, opening the step's span at its first event.
func (r *renderer) enterStep(st *runState, step int, e rein.Event) {
	if step != st.step {
		st.step, st.closed, st.preview, st.span = step, false, "", ""
		st.text.Reset()
	}
	if st.span == "" && !st.closed {
		st.span = e.ID + "_span"
		r.add(e.Seq, "span.model_request_start", base(st.span, "span.model_request_start", e))
	}
}

// showStepText shows the text a step streamed before its tool calls.
func (r *renderer) showStepText(st *runState, e rein.Event) {
	text := st.text.String()
	if text == "" || st.preview == "" {
		return
	}
	r.add(e.Seq, "agent.message", messageJSON{baseJSON: base(st.preview, "agent.message", e), Content: textBlocks(text)})
	st.shown = text
}

// endSpan closes the open span. Usage is not in the log yet (each model
// request's usage arrives with agent.model_request): it is zero.
func (r *renderer) endSpan(st *runState, e rein.Event, isError bool) {
	if st.span == "" {
		return
	}
	r.add(e.Seq, "span.model_request_end", spanEndJSON{baseJSON: base(e.ID+"_span_end", "span.model_request_end", e), ModelRequestStartID: st.span, ModelUsage: st.usage, IsError: isError})
	st.span, st.usage = "", usageJSON{}
}

// answered takes ref out of the pending questions; it reports whether ref
// was pending.
func (st *runState) answered(ref string) bool {
	for i, p := range st.pending {
		if p == ref {
			st.pending = append(st.pending[:i], st.pending[i+1:]...)
			return true
		}
	}
	return false
}

// toolUseRef is the id of the agent.tool_use event of Rein's call id:
// known from the events rendered, else read back from the log.
func (r *renderer) toolUseRef(ctx context.Context, st *runState, callID string, before int64) (string, error) {
	if ref, ok := st.tools[callID]; ok {
		return ref, nil
	}
	e, err := findBack(ctx, r.svc, r.key, before, func(e rein.Event) bool {
		if e.Type != rein.EventToolUse {
			return false
		}
		var p rein.ToolUsePayload
		return json.Unmarshal(e.Payload, &p) == nil && p.ToolUseID == callID
	})
	if err != nil {
		return "", err
	}
	if e == nil {
		return callID, nil
	}
	st.tools[callID] = e.ID
	return e.ID, nil
}

// next returns up to n events after e: from the page when it has them,
// else from the store.
func (r *renderer) next(ctx context.Context, e rein.Event, rest []rein.Event, n int) ([]rein.Event, error) {
	if len(rest) >= n {
		return rest[:n], nil
	}
	evs, _, err := r.svc.ReadEvents(ctx, r.key, e.Seq, n)
	return evs, err
}

// idleAfter decides whether the session goes idle when the run of e ends:
// not when the session's next run starts right after it (it was queued).
// The log decides when it goes on; at its end, the session's queue does
// (read before the log is read again, so the two agree).
func (r *renderer) idleAfter(ctx context.Context, e rein.Event, rest []rein.Event) (bool, error) {
	decide := func(evs []rein.Event) (bool, bool) {
		for _, n := range evs {
			switch n.Type {
			case rein.EventRunStarted:
				return false, true
			case rein.EventUserMessage, rein.EventRunQueued, rein.EventRunCompleted:
				return true, true
			}
		}
		return false, false
	}
	if idle, ok := decide(rest); ok {
		return idle, nil
	}
	info, err := r.svc.GetSession(ctx, r.key)
	if err != nil {
		return false, err
	}
	after, _, err := r.svc.ReadEvents(ctx, r.key, e.Seq, 64)
	if err != nil {
		return false, err
	}
	if idle, ok := decide(after); ok {
		return idle, nil
	}
	return len(info.QueuedRunIDs) == 0 && info.CurrentRunID == "", nil
}

// threadRef is a child thread as its events in the parent's log name it.
type threadRef struct{ id, agent string }

func (t threadRef) at(id, typ string, e rein.Event) threadEventJSON {
	return threadEventJSON{baseJSON: base(id, typ, e), SessionThreadID: t.id, AgentName: t.agent}
}

// thread reads the child session a subagent event names: its agent, and
// whether task is its first activation (the thread's creation). A child
// deleted since is shown by its id alone.
func (r *renderer) thread(ctx context.Context, child, task string) (threadRef, bool, error) {
	key := rein.SessionKey{Owner: r.key.Owner, ID: child}
	ref := threadRef{id: child, agent: sessions.DefaultAgent}
	s, err := r.svc.Session(ctx, key)
	if rein.CodeOf(err) == rein.CodeNotFound {
		return ref, task != "", nil
	}
	if err != nil {
		return ref, false, err
	}
	if s.Agent != "" {
		ref.agent = s.Agent
	}
	if task == "" {
		return ref, false, nil
	}
	runs, err := r.svc.ListRuns(ctx, key)
	if err != nil {
		return ref, false, err
	}
	// Runs are newest first: the last is the child's first activation.
	return ref, len(runs) == 0 || runs[len(runs)-1].ID == task, nil
}
