// ReinClient puts Rein's native HTTP API (docs/api.md) behind typed calls.
// It holds no state of a run or a session: everything it answers is read
// from the server, so two clients (or a client and the web console) never
// disagree about what happened.

import { errorFromResponse } from "./errors.js";
import { Run } from "./run.js";
import { EventStream, StreamShapeError, type EventStreamOptions, type ReconnectOptions, type StreamTransport } from "./stream.js";
import type {
  Budget,
  ConfirmResult,
  EditRunOptions,
  ConfirmationList,
  ConfirmationStatus,
  EventPage,
  JSONValue,
  NoteResult,
  RunInfo,
  SendResult,
  Session,
  SessionDetail,
  SessionList,
  SessionSummary,
  StopMode,
  StopResult,
  WhenBusy,
} from "./types.js";

/** Options of a ReinClient. */
export interface ClientOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:8080` (without `/api`). */
  baseUrl: string;
  /** A bearer token from the server's tokens file; none in single-user mode. */
  token?: string;
  /** Headers sent with every request (e.g. a proxy's). */
  headers?: Record<string, string>;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** How event streams wait between failed connection attempts. */
  reconnect?: ReconnectOptions;
  /** An event stream silent this long (no event, no keepalive) is made
   * again; the server sends a keepalive every 15 s (default 45000; 0: never). */
  idleTimeoutMs?: number;
}

/** Every call takes an AbortSignal: aborting it rejects the call with the
 * signal's reason, as fetch does. Aborting never stops a run on the
 * server; a stop is a request of its own (`stop`). */
export interface CallOptions {
  signal?: AbortSignal;
}

/** Options of createSession. */
export interface CreateSessionOptions extends CallOptions {
  /** A caller-chosen id (1–128 of `A-Z a-z 0-9 . _ : -`): creating it again
   * answers the same session unchanged (another owner's id is a 409 `conflict`). */
  id?: string;
  /** A name for people. */
  title?: string;
  metadata?: { [key: string]: JSONValue };
  /** A configured agent's name (default `default`). */
  agent?: string;
  /** The session's system prompt override. */
  system?: string;
  /** Bounds what the session's runs may spend together; a session over it
   * refuses new messages (409 `conflict`) until it is raised. */
  budget?: Budget;
}

/** Options of send. */
export interface SendOptions extends CallOptions {
  /** What to do when the session is busy (default `reject`: a 409 `session_busy`). */
  whenBusy?: WhenBusy;
  /** An idempotency key per session: a repeat answers the first run and starts nothing. */
  clientId?: string;
  /** The run's deadline in seconds, queue time included. */
  timeoutS?: number;
  /** Bounds what the run may spend: once reached it ends with reason `budget`. */
  budget?: Budget;
}

/** Options of stop. Name the run by `runId` or by the `clientId` of the
 * message that starts it (not both); with neither, the session's running
 * run is stopped. */
export interface StopOptions extends CallOptions {
  runId?: string;
  clientId?: string;
  /** `cancel` (default) or `interrupt` (cooperative: the agent answers with what it has). */
  mode?: StopMode;
  /** Recorded on the `user.interrupt` event; never treated as user input. */
  message?: string;
}

/** One event to submit with postEvents. */
export interface SubmittedEvent {
  type: string;
  payload: { [key: string]: JSONValue | undefined };
}

/** A client of one Rein server. Safe to share between concurrent calls. */
export class ReinClient {
  readonly baseUrl: string;
  #token: string | undefined;
  #headers: Record<string, string>;
  #fetch: typeof fetch;
  #transport: StreamTransport;

  constructor(opts: ClientOptions) {
    if (!opts || typeof opts.baseUrl !== "string" || opts.baseUrl === "") {
      throw new TypeError("rein client: baseUrl is required");
    }
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.#token = opts.token;
    this.#headers = { ...(opts.headers ?? {}) };
    // Called unbound: a browser's fetch refuses another `this`.
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") {
      throw new TypeError("rein client: no fetch: pass one in the options");
    }
    this.#fetch = (input, init) => f(input, init);
    this.#transport = {
      openStream: (sessionId, after, lastEventId, signal) => this.#openStream(sessionId, after, lastEventId, signal),
      listEvents: (sessionId, o) => this.listEvents(sessionId, o),
      reconnect: {
        initialDelayMs: opts.reconnect?.initialDelayMs ?? 250,
        maxDelayMs: opts.reconnect?.maxDelayMs ?? 5000,
      },
      idleTimeoutMs: opts.idleTimeoutMs ?? 45000,
    };
  }

  // ---- sessions ---------------------------------------------------------

  /** Creates a session (`POST /api/sessions`). */
  async createSession(opts: CreateSessionOptions = {}): Promise<Session> {
    const body: { [k: string]: unknown } = {};
    if (opts.id !== undefined) body["id"] = opts.id;
    if (opts.title !== undefined) body["title"] = opts.title;
    if (opts.metadata !== undefined) body["metadata"] = opts.metadata;
    if (opts.agent !== undefined) body["agent"] = opts.agent;
    if (opts.system !== undefined) body["system"] = opts.system;
    if (opts.budget !== undefined) body["budget"] = opts.budget;
    return (await this.#call("POST", "/api/sessions", { body, signal: opts.signal })) as Session;
  }

  /** Reads a session with its live state (`GET /api/sessions/{id}`). */
  async getSession(sessionId: string, opts: CallOptions = {}): Promise<SessionDetail> {
    return (await this.#call("GET", sessionPath(sessionId), opts)) as SessionDetail;
  }

  /** Changes a session's title, metadata or budget (`PATCH
   * /api/sessions/{id}`): a field left out stays; `metadata` replaces the
   * whole object; a title of `""` leaves the session untitled for good; a
   * `budget` of null removes it. Answers the session as `getSession`. */
  async updateSession(
    sessionId: string,
    change: { title?: string; metadata?: { [key: string]: JSONValue }; budget?: Budget | null },
    opts: CallOptions = {},
  ): Promise<SessionDetail> {
    const body: { [k: string]: unknown } = {};
    if (change.title !== undefined) body["title"] = change.title;
    if (change.metadata !== undefined) body["metadata"] = change.metadata;
    if (change.budget !== undefined) body["budget"] = change.budget;
    return (await this.#call("PATCH", sessionPath(sessionId), { body, signal: opts.signal })) as SessionDetail;
  }

  /** Reads one page of the caller's sessions, newest first (`GET
   * /api/sessions`); `after` is the previous page's `next`. */
  async listSessions(opts: CallOptions & { limit?: number; after?: string } = {}): Promise<SessionList> {
    const query: Record<string, string> = {};
    if (opts.limit !== undefined) query["limit"] = String(opts.limit);
    if (opts.after !== undefined) query["after"] = opts.after;
    return (await this.#call("GET", "/api/sessions", { query, signal: opts.signal })) as SessionList;
  }

  /** Every session of the caller, newest first, page by page (the cursor
   * is a position: sessions created meanwhile never shift the pages). */
  async *sessions(opts: CallOptions & { pageSize?: number } = {}): AsyncGenerator<SessionSummary, void, undefined> {
    let after: string | undefined;
    for (;;) {
      const page = await this.listSessions({
        ...(opts.signal !== undefined ? { signal: opts.signal } : {}),
        ...(opts.pageSize !== undefined ? { limit: opts.pageSize } : {}),
        ...(after !== undefined ? { after } : {}),
      });
      yield* page.sessions;
      if (page.next === null || page.next === undefined || page.next === "") return;
      after = page.next;
    }
  }

  /**
   * The approvals inbox (`GET /api/confirmations`): a page of the caller's
   * tool calls across all their sessions, newest first — `pending` (the
   * default), `answered` or `expired`. Answer one with `approve`/`deny` in
   * its `session_id`. The cursor is a position: calls made meanwhile never
   * shift the pages that follow.
   */
  async listConfirmations(
    opts: CallOptions & { status?: ConfirmationStatus; limit?: number; after?: string } = {},
  ): Promise<ConfirmationList> {
    const query: Record<string, string> = {};
    if (opts.status !== undefined) query["status"] = opts.status;
    if (opts.limit !== undefined) query["limit"] = String(opts.limit);
    if (opts.after !== undefined) query["after"] = opts.after;
    return (await this.#call("GET", "/api/confirmations", { query, signal: opts.signal })) as ConfirmationList;
  }

  /** Deletes a session and everything below it (`DELETE /api/sessions/{id}`);
   * a busy one is a 409 `session_busy` naming a run. */
  async deleteSession(sessionId: string, opts: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", sessionPath(sessionId), opts);
  }

  // ---- events in --------------------------------------------------------

  /**
   * Submits a batch of events (`POST /api/sessions/{id}/events`) and
   * returns one result per event. When one fails, the ReinError's
   * `results` holds those of the events applied before it.
   */
  async postEvents(sessionId: string, events: SubmittedEvent[], opts: CallOptions = {}): Promise<unknown[]> {
    const body = { events: events.map((e) => ({ type: e.type, payload: dropUndefined(e.payload) })) };
    const res = (await this.#call("POST", sessionPath(sessionId, "events"), { body, signal: opts.signal })) as { results: unknown[] };
    return res.results;
  }

  /** Sends a `user.message`, which starts a run, and returns the run's handle. */
  async send(sessionId: string, text: string, opts: SendOptions = {}): Promise<Run> {
    const r = (await this.#one(sessionId, "user.message", {
      text,
      when_busy: opts.whenBusy,
      client_id: opts.clientId,
      timeout_s: opts.timeoutS,
      budget: opts.budget && budgetJSON(opts.budget),
    }, opts)) as SendResult;
    return new Run(this, sessionId, r.run_id, r.status);
  }

  /**
   * Stops a run (`user.interrupt`): the one named by `runId`, or the one
   * the message with `clientId` starts (even before that message arrives),
   * or else the session's running run. `accepted` says whether this call
   * stopped it.
   */
  async stop(sessionId: string, opts: StopOptions = {}): Promise<StopResult> {
    return (await this.#one(sessionId, "user.interrupt", {
      run_id: opts.runId,
      client_id: opts.clientId,
      mode: opts.mode,
      message: opts.message,
    }, opts)) as StopResult;
  }

  /** Pushes a note (`user.supplement`) that the running run reads at its
   * next step (or the next run at its first). `id` makes it idempotent. */
  async note(sessionId: string, text: string, opts: CallOptions & { id?: string } = {}): Promise<NoteResult> {
    return (await this.#one(sessionId, "user.supplement", { text, id: opts.id }, opts)) as NoteResult;
  }

  /** Answers a pending tool confirmation (`user.tool_confirmation`). */
  async confirm(
    sessionId: string,
    toolUseId: string,
    allow: boolean,
    opts: CallOptions & { denyMessage?: string } = {},
  ): Promise<ConfirmResult> {
    return (await this.#one(sessionId, "user.tool_confirmation", {
      tool_use_id: toolUseId,
      allow,
      deny_message: opts.denyMessage,
    }, opts)) as ConfirmResult;
  }

  /** Allows a pending tool call. */
  approve(sessionId: string, toolUseId: string, opts: CallOptions = {}): Promise<ConfirmResult> {
    return this.confirm(sessionId, toolUseId, true, opts);
  }

  /** Denies a pending tool call; the model reads `message` as the tool's error. */
  deny(sessionId: string, toolUseId: string, message?: string, opts: CallOptions = {}): Promise<ConfirmResult> {
    return this.confirm(sessionId, toolUseId, false, { ...opts, ...(message !== undefined ? { denyMessage: message } : {}) });
  }

  /** Replaces the session's system prompt for later runs (`system.message`). */
  async setSystem(sessionId: string, text: string, opts: CallOptions = {}): Promise<void> {
    await this.#one(sessionId, "system.message", { text }, opts);
  }

  // ---- runs -------------------------------------------------------------

  /** Lists a session's runs, newest first. */
  async listRuns(sessionId: string, opts: CallOptions = {}): Promise<RunInfo[]> {
    const r = (await this.#call("GET", sessionPath(sessionId, "runs"), opts)) as { runs: RunInfo[] };
    return r.runs;
  }

  /** Reads one run's record. */
  async getRun(sessionId: string, runId: string, opts: CallOptions = {}): Promise<RunInfo> {
    return (await this.#call("GET", sessionPath(sessionId, "runs", runId), opts)) as RunInfo;
  }

  /**
   * Edits a queued run: `text` replaces its input, `position` moves it in
   * the queue (1 = next). A run that already started (or ended) rejects
   * with a `conflict` ReinError whose `runId` and `runStatus` say where it
   * is — the edit then changed nothing.
   */
  async editRun(sessionId: string, runId: string, edit: EditRunOptions, opts: CallOptions = {}): Promise<RunInfo> {
    const body = { text: edit.text, position: edit.position };
    return (await this.#call("PATCH", sessionPath(sessionId, "runs", runId), { body, signal: opts.signal })) as RunInfo;
  }

  /**
   * Sends a queued run now: the session's current run is stopped as a
   * message with `when_busy` of `mode` would stop it (`interrupt`, the
   * default, or `rollback`) and this run runs next. Rejects with a
   * `conflict` (with `runStatus`) when the run is no longer queued.
   */
  async promoteRun(sessionId: string, runId: string, opts: CallOptions & { mode?: "interrupt" | "rollback" } = {}): Promise<RunInfo> {
    const body = { mode: opts.mode };
    return (await this.#call("POST", sessionPath(sessionId, "runs", runId, "promote"), { body, signal: opts.signal })) as RunInfo;
  }

  /** A handle of a run already known by id (started by another client,
   * or read from the log). `after`: a seq below the run's first event, so
   * that `done()` reads less of the log. */
  run(sessionId: string, runId: string, opts: { after?: number } = {}): Run {
    return new Run(this, sessionId, runId, undefined, opts.after);
  }

  // ---- events out -------------------------------------------------------

  /** Reads a page of the log: events with seq > after, at most limit (≤ 1000). */
  async listEvents(sessionId: string, opts: CallOptions & { after?: number; limit?: number } = {}): Promise<EventPage> {
    const query: Record<string, string> = {};
    if (opts.after !== undefined) query["after"] = String(opts.after);
    if (opts.limit !== undefined) query["limit"] = String(opts.limit);
    return (await this.#call("GET", sessionPath(sessionId, "events"), { query, signal: opts.signal })) as EventPage;
  }

  /**
   * Follows the session's log live: `for await (const ev of
   * client.events(id, { after }))` yields the stored events after the
   * cursor, then new ones as they are appended, each exactly once and in
   * seq order, across any number of dropped connections and server
   * restarts. It connects on the first iteration.
   */
  events(sessionId: string, opts: EventStreamOptions = {}): EventStream {
    return new EventStream(this.#transport, sessionId, opts);
  }

  // ---- plumbing ---------------------------------------------------------

  async #one(sessionId: string, type: string, payload: SubmittedEvent["payload"], opts: CallOptions): Promise<unknown> {
    const results = await this.postEvents(sessionId, [{ type, payload }], opts);
    return results[0];
  }

  #requestHeaders(extra: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { ...this.#headers, ...extra };
    if (this.#token !== undefined && this.#token !== "") h["Authorization"] = `Bearer ${this.#token}`;
    return h;
  }

  async #call(
    method: string,
    path: string,
    opts: { query?: Record<string, string>; body?: unknown; signal?: AbortSignal | undefined },
  ): Promise<unknown> {
    const headers: Record<string, string> = { Accept: "application/json" };
    let body: string | undefined;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    const init: RequestInit = { method, headers: this.#requestHeaders(headers) };
    if (body !== undefined) init.body = body;
    if (opts.signal !== undefined) init.signal = opts.signal;
    const res = await this.#fetch(this.#url(path, opts.query), init);
    if (!res.ok) {
      throw await errorFromResponse(res);
    }
    if (res.status === 204) {
      return undefined;
    }
    const text = await res.text();
    return text === "" ? undefined : JSON.parse(text);
  }

  async #openStream(sessionId: string, after: number, lastEventId: number | undefined, signal: AbortSignal): Promise<Response> {
    // Only headers the server's CORS answer allows (Authorization,
    // Content-Type, Last-Event-ID, X-Request-Id) or that need no preflight:
    // a browser on another origin refuses the request otherwise.
    const extra: Record<string, string> = { Accept: "text/event-stream" };
    if (lastEventId !== undefined) extra["Last-Event-ID"] = String(lastEventId);
    const res = await this.#fetch(this.#url(sessionPath(sessionId, "events", "stream"), { after: String(after) }), {
      method: "GET",
      headers: this.#requestHeaders(extra),
      signal,
    });
    if (!res.ok) {
      throw await errorFromResponse(res);
    }
    const ct = (res.headers.get("Content-Type") ?? "").split(";")[0]?.trim().toLowerCase();
    if (ct !== "text/event-stream") {
      await res.body?.cancel().catch(() => {});
      throw new StreamShapeError(`the server answered ${JSON.stringify(res.headers.get("Content-Type"))}, not an event stream`);
    }
    return res;
  }

  #url(path: string, query?: Record<string, string>): string {
    let u = this.baseUrl + path;
    if (query) {
      const q = new URLSearchParams(query).toString();
      if (q !== "") u += "?" + q;
    }
    return u;
  }
}

function sessionPath(sessionId: string, ...rest: string[]): string {
  if (typeof sessionId !== "string" || sessionId === "") {
    throw new TypeError("rein client: a session id is required");
  }
  return ["/api/sessions", sessionId, ...rest].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join("/");
}

function dropUndefined(o: SubmittedEvent["payload"]): { [key: string]: JSONValue } {
  const out: { [key: string]: JSONValue } = {};
  for (const [k, v] of Object.entries(o)) {
    if (v !== undefined) out[k] = v;
  }
  return out;
}


/** The budget as the request's JSON: only the bounds given. */
function budgetJSON(b: Budget): { [key: string]: JSONValue } {
  const out: { [key: string]: JSONValue } = {};
  if (b.tokens !== undefined) out.tokens = b.tokens;
  if (b.cost_usd !== undefined) out.cost_usd = b.cost_usd;
  return out;
}
