// The wire types of Rein's native HTTP API (docs/api.md). What the server
// sends is returned as sent: keys stay snake_case, so an event read from
// this client, from curl or from a log file looks the same.

/** A run's status (docs/api.md "Runs"). */
export type RunStatus = "CREATED" | "QUEUED" | "RUNNING" | "COMPLETED" | "FAILED" | "CANCELLED";

/** Why a run ended: `stop`, `interrupted`, `max_steps`, `budget` end it
 * COMPLETED; `cancelled` and `timeout` CANCELLED; `error` FAILED. */
export type RunReason = "stop" | "interrupted" | "max_steps" | "budget" | "cancelled" | "timeout" | "error";

/** What a `user.message` does when the session's turn is held. */
export type WhenBusy = "reject" | "enqueue" | "interrupt" | "rollback";

/** How a stop ends a running run: `cancel` at once (CANCELLED), or
 * `interrupt` cooperatively (COMPLETED with reason `interrupted`). */
export type StopMode = "cancel" | "interrupt";

/** Any JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** A session as `POST /api/sessions` and `PATCH /api/sessions/{id}` answer it. */
export interface Session {
  id: string;
  /** A name for people: given, set by PATCH, or the first message's first line; null until then. */
  title: string | null;
  created_at: string;
  metadata: { [key: string]: JSONValue };
  agent: string;
  parent_session_id: string | null;
  [key: string]: unknown;
}

/** An item of `GET /api/sessions`: the session and what it is doing. */
export interface SessionSummary extends Session {
  /** `busy` while a run of the session is running or queued. */
  state: "idle" | "busy";
  /** How many tool calls wait for an answer. */
  pending_confirmations: number;
  /** When the session's last event was logged; null for none. */
  last_event_at: string | null;
}

/** A tool call waiting for a person's answer. */
export interface PendingConfirmation {
  tool_use_id: string;
  run_id: string;
  name: string;
  input: JSONValue;
  created_at: string;
}

/** `GET /api/sessions/{id}`: the session with its live state. */
export interface SessionDetail extends Session {
  state: "idle" | "busy";
  current_run_id: string | null;
  queued_run_ids: string[];
  last_seq: number;
  pending_confirmations: PendingConfirmation[];
  /** The session's budget; null when none. */
  budget: Budget | null;
  /** What the session's runs have spent together. */
  usage: Usage;
}

/** Bounds what runs may spend (docs/api.md "Budgets and usage"): set one
 * bound or both. `tokens` counts input and output tokens together;
 * `cost_usd` needs the model's price. */
export interface Budget {
  tokens?: number;
  cost_usd?: number;
}

/** A page of `GET /api/sessions`. `next` is the cursor of the following
 * page (pass it as `after`), null on the last page. */
export interface SessionList {
  sessions: SessionSummary[];
  next: string | null;
}

/** Where a call of the approvals inbox stands. */
export type ConfirmationStatus = "pending" | "answered" | "expired";

/** A tool call in the approvals inbox (`GET /api/confirmations`). */
export interface Confirmation {
  session_id: string;
  /** The session's title, null when it has none. */
  session_title: string | null;
  run_id: string;
  tool_use_id: string;
  /** The tool's name. */
  name: string;
  /** The call's input as the model wrote it (a string when it was not valid JSON). */
  input: JSONValue;
  created_at: string;
  /** When an unanswered call is denied as `expired`; null when it never expires. */
  expires_at: string | null;
  status: ConfirmationStatus;
  /** The answer: null while pending, false for an expired call. */
  allow: boolean | null;
  /** When it was answered or expired; null while pending. */
  answered_at: string | null;
}

/** A page of `GET /api/confirmations`. `next` is the cursor of the
 * following page (pass it as `after`), null on the last page. */
export interface ConfirmationList {
  confirmations: Confirmation[];
  next: string | null;
}

/** A run record (`GET /api/sessions/{id}/runs[/{run_id}]`). */
export interface RunInfo {
  run_id: string;
  status: RunStatus;
  reason: RunReason | null;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  /** The text that started the run, as last edited. */
  input: string;
  /** The client_id its message carried; null when none was given. */
  client_id: string | null;
  /** A queued run's place in the queue (1 = next); null for any other run. */
  position: number | null;
  /** Summed over the run's model requests so far. */
  usage: Usage;
  /** A FAILED run's error message. */
  error?: string;
  [key: string]: unknown;
}

/** An edit of a queued run: a new text and/or a new place in the queue
 * (1 = next; beyond the end, last). */
export interface EditRunOptions {
  text?: string;
  position?: number;
}

/** The result of a `user.message`. */
export interface SendResult {
  run_id: string;
  status: RunStatus;
}

/** The result of a `user.interrupt`: whether this call stopped the run,
 * and which run (null when nothing was stopped, or, for a stop by client
 * id, while its message has not arrived). */
export interface StopResult {
  accepted: boolean;
  run_id: string | null;
}

/** The result of a `user.supplement`. */
export interface NoteResult {
  supplement_id: string;
  status: "queued" | "consumed";
}

/** The result of a `user.tool_confirmation`. */
export interface ConfirmResult {
  tool_use_id: string;
  allow: boolean;
}

/** A page of a session's log (`GET /api/sessions/{id}/events`). `last_seq`
 * is the session's last seq overall: greater than the page's last means more. */
export interface EventPage {
  events: ReinEvent[];
  last_seq: number;
}

/** Token counts of model requests, and their cost in US dollars (null
 * when no request counted had a price). */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cost_usd: number | null;
}

// ---- events -------------------------------------------------------------

/** The payload of each event type (docs/api.md "Events and their payloads").
 * A key with `?` is present only when it applies; the others are always
 * written, as null when they have no value. */
export interface EventPayloads {
  "user.message": { text: string; run_id: string };
  "user.interrupt": {
    run_id: string | null;
    client_id?: string;
    mode: StopMode;
    accepted: boolean;
    message?: string;
  };
  "user.supplement": { supplement_id: string; text: string; source: "user" | "parent" | string };
  "user.tool_confirmation": { tool_use_id: string; allow: boolean; deny_message: string | null };
  "system.message": { text: string };
  "session.run_queued": { run_id: string; position: number };
  "session.run_started": { run_id: string };
  "session.run_completed": {
    run_id: string;
    status: "COMPLETED" | "FAILED" | "CANCELLED";
    reason: RunReason;
    error?: string;
    rolled_back?: boolean;
  };
  "session.tool_confirmation_requested": { run_id: string; tool_use_id: string; name: string; input: JSONValue };
  "agent.message.delta": { run_id: string; step: number; text: string };
  "agent.message": { run_id: string; text: string; reason: RunReason; usage?: Usage };
  "agent.tool_use": { run_id: string; step: number; tool_use_id: string; name: string; input: JSONValue };
  "agent.tool_result": { run_id: string; tool_use_id: string; output: string; is_error: boolean; in_doubt?: boolean };
  "agent.supplement_consumed": { supplement_id: string; run_id: string; step: number };
  "agent.step_restarted": { run_id: string; step: number; attempt: number };
  "agent.model_request": {
    run_id: string;
    step: number;
    model: string;
    usage: Usage;
    duration_ms: number;
    outcome: "ok" | "error" | "stopped";
  };
  "agent.context_compacted": {
    run_id: string;
    step: number;
    summary: string;
    through_seq: number;
    tokens_before: number;
    tokens_after: number;
  };
  "session.run_edited": { run_id: string; text: string };
  "session.queue_changed": { queued: string[] };
  "session.confirmation_expired": { run_id: string; tool_use_id: string };
  "subagent.started": { child_id: string; task_id: string };
  "subagent.completed": {
    child_id: string;
    task_id: string;
    status: RunStatus;
    reason: RunReason;
    output: string | null;
  };
}

/** Every event type this client knows. */
export type EventType = keyof EventPayloads;

/** One event of a session's log, of type T. */
export interface EventOf<T extends EventType> {
  /** Position in the session's log: 1, 2, 3, … with no gaps. */
  seq: number;
  id: string;
  session_id: string;
  /** The run the event concerns; null for notes, system messages and subagent events. */
  run_id: string | null;
  type: T;
  payload: EventPayloads[T];
  created_at: string;
}

/** Any event of a session's log: switch on `type` to narrow `payload`.
 * A server newer than this client may log types not listed here; they are
 * delivered too (reach them in a switch's `default`). */
export type ReinEvent = { [T in EventType]: EventOf<T> }[EventType];

/** Narrows an event to type T. */
export function isEvent<T extends EventType>(ev: ReinEvent, type: T): ev is Extract<ReinEvent, { type: T }> {
  return ev.type === type;
}

/** How a run ended: its `session.run_completed` event. */
export type RunEnd = EventOf<"session.run_completed">;
