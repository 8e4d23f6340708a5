// A Run is a handle on one run of a session: what a UI holds between the
// message it sent and the run's end. It keeps nothing of the run but its
// ids; its end is read from the session's log, where it is written once.

import type { ReinClient, CallOptions } from "./client.js";
import type { EventStream } from "./stream.js";
import type { ReinEvent, RunEnd, RunInfo, RunStatus, StopMode, StopResult } from "./types.js";

/** A handle on one run. Waiting on it never starts or stops the run. */
export class Run {
  /** The run's id. */
  readonly id: string;
  /** The session the run belongs to. */
  readonly sessionId: string;
  /** The status the server answered when the run was sent (`RUNNING`,
   * `QUEUED`, or a `client_id` repeat's current status); undefined for a
   * handle made by `client.run`. Read `info()` for the current one. */
  readonly status: RunStatus | undefined;
  /** A seq below the run's first event: where `done()` and `events()` start reading. */
  readonly after: number;
  #client: ReinClient;

  /** @internal Made by ReinClient.send and ReinClient.run. */
  constructor(client: ReinClient, sessionId: string, id: string, status?: RunStatus, after = 0) {
    this.#client = client;
    this.sessionId = sessionId;
    this.id = id;
    this.status = status;
    this.after = after;
  }

  /**
   * Waits for the run's end and returns its `session.run_completed` event
   * (`payload.status`, `payload.reason`, `payload.error`), read from the
   * log: the same answer for every caller, however often and whenever it
   * is asked, across reconnections and server restarts. An unknown run is
   * a 404 ReinError.
   */
  async done(opts: CallOptions = {}): Promise<RunEnd> {
    // An unknown run (or another session's) would never end in this log.
    await this.#client.getRun(this.sessionId, this.id, opts);
    for await (const ev of this.#stream(opts.signal)) {
      if (ev.type === "session.run_completed" && ev.payload.run_id === this.id) {
        return ev;
      }
    }
    // The stream ends only by a throw or an abort, never by running out.
    throw new Error("rein client: the event stream ended before the run did");
  }

  /**
   * The run's events (those whose envelope names it), from its first to
   * its `session.run_completed`, after which the iteration ends.
   */
  async *events(opts: CallOptions = {}): AsyncGenerator<ReinEvent, void, undefined> {
    for await (const ev of this.#stream(opts.signal)) {
      if (ev.run_id !== this.id) continue;
      yield ev;
      if (ev.type === "session.run_completed") return;
    }
  }

  /** Stops the run at once (`cancel`, the default) or cooperatively (`interrupt`). */
  stop(opts: CallOptions & { mode?: StopMode; message?: string } = {}): Promise<StopResult> {
    return this.#client.stop(this.sessionId, { ...opts, runId: this.id });
  }

  /** Interrupts the run: its in-flight model request and tools stop and the
   * agent answers with what it has (COMPLETED, reason `interrupted`). */
  interrupt(opts: CallOptions & { message?: string } = {}): Promise<StopResult> {
    return this.stop({ ...opts, mode: "interrupt" });
  }

  /** Reads the run's record (status, reason, times). */
  info(opts: CallOptions = {}): Promise<RunInfo> {
    return this.#client.getRun(this.sessionId, this.id, opts);
  }

  #stream(signal: AbortSignal | undefined): EventStream {
    return this.#client.events(this.sessionId, signal !== undefined ? { after: this.after, signal } : { after: this.after });
  }
}
