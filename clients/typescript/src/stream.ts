// The session event stream that survives dropped connections: Rein's log
// is ordered by seq with no gaps, so a reader that remembers the last seq
// it delivered can always resume from there (Last-Event-ID) and drop what
// it has already seen, whichever way the connection ended.

import { ReinError } from "./errors.js";
import { readSSE, SSELineTooLongError } from "./sse.js";
import type { EventPage, ReinEvent } from "./types.js";

/** How the stream waits between failed connection attempts. */
export interface ReconnectOptions {
  /** The first wait after a failed attempt, in ms (default 250). */
  initialDelayMs?: number;
  /** The longest wait, in ms (default 5000). */
  maxDelayMs?: number;
}

/** Options of ReinClient.events. */
export interface EventStreamOptions {
  /** Deliver events with seq > after (default 0: the whole log). */
  after?: number;
  /** Ends the stream: the iteration then throws the signal's reason. */
  signal?: AbortSignal;
}

/** What the stream needs from its client. */
export interface StreamTransport {
  /** Opens GET …/events/stream with the given cursor. */
  openStream(sessionId: string, after: number, lastEventId: number | undefined, signal: AbortSignal): Promise<Response>;
  /** Reads a page of the log. */
  listEvents(sessionId: string, opts: { after: number; limit: number; signal: AbortSignal }): Promise<EventPage>;
  reconnect: Required<ReconnectOptions>;
  /** A connection silent this long (no event, no keepalive) is dropped and made again; 0: never. */
  idleTimeoutMs: number;
}

/**
 * A live, self-resuming stream of a session's events, in seq order, each
 * exactly once. Iterate it with `for await`; leaving the loop (break,
 * return, throw) closes its connection. One iteration at a time.
 *
 * When a connection ends, breaks, or stays silent past the idle timeout,
 * the stream reconnects from the last seq it delivered with
 * `Last-Event-ID`: at once after a connection that delivered events, else
 * after a jittered backoff that doubles per failed attempt. It ends only
 * by the caller (break, abort) or by an answer that retrying cannot
 * change: a 4xx other than 408/429 (a bad token, a deleted session) is
 * thrown as a ReinError. Closing a stream never affects any run.
 */
export class EventStream implements AsyncIterable<ReinEvent> {
  #transport: StreamTransport;
  #sessionId: string;
  #signal: AbortSignal | undefined;
  #last: number;
  #closer = new AbortController();
  #iterating = false;

  /** @internal Made by ReinClient.events. */
  constructor(transport: StreamTransport, sessionId: string, opts: EventStreamOptions = {}) {
    this.#transport = transport;
    this.#sessionId = sessionId;
    this.#signal = opts.signal;
    this.#last = opts.after ?? 0;
    if (!Number.isInteger(this.#last) || this.#last < 0) {
      throw new TypeError(`rein client: after must be a non-negative integer, got ${opts.after}`);
    }
  }

  /** The seq of the last event delivered (the starting cursor before the first):
   * where a new stream would resume. */
  get lastSeq(): number {
    return this.#last;
  }

  /** Ends the stream and its connection: a pending iteration ends without error. */
  close(): void {
    this.#closer.abort();
  }

  [Symbol.asyncIterator](): AsyncIterator<ReinEvent> {
    if (this.#iterating) {
      throw new Error("rein client: an EventStream is iterated by one loop at a time");
    }
    this.#iterating = true;
    const gen = this.#run();
    const release = () => {
      this.#iterating = false;
    };
    return {
      next: () =>
        gen.next().then((r) => {
          if (r.done) release();
          return r;
        }, (e: unknown) => {
          release();
          throw e;
        }),
      return: (v?: unknown) => {
        release();
        return gen.return(v as undefined);
      },
    };
  }

  async *#run(): AsyncGenerator<ReinEvent, void, undefined> {
    const t = this.#transport;
    const user = this.#signal;
    let failures = 0;
    let first = true;
    let retryHintMs = 0;
    let retryAfterMs = 0;
    for (;;) {
      if (user?.aborted) throw user.reason;
      if (this.#closer.signal.aborted) return;
      if (!first) {
        const d = Math.max(backoff(failures, t.reconnect, retryHintMs), retryAfterMs);
        retryAfterMs = 0;
        if (d > 0 && !(await sleep(d, user, this.#closer.signal))) {
          if (user?.aborted) throw user.reason;
          return;
        }
      }
      first = false;

      const conn = new AbortController();
      const unlink = link(conn, user, this.#closer.signal);
      let idle: ReturnType<typeof setTimeout> | undefined;
      const touch = () => {
        if (t.idleTimeoutMs > 0) {
          if (idle !== undefined) clearTimeout(idle);
          idle = setTimeout(() => conn.abort(new Error("rein client: event stream idle")), t.idleTimeoutMs);
        }
      };
      let progressed = false;
      try {
        let res: Response;
        try {
          touch();
          res = await t.openStream(this.#sessionId, this.#last, this.#last > 0 ? this.#last : undefined, conn.signal);
        } catch (e) {
          if (e instanceof ReinError) {
            if (terminal(e.status)) throw e;
            if (e.retryAfter !== undefined) retryAfterMs = e.retryAfter * 1000;
          } else if (e instanceof StreamShapeError) {
            throw e;
          }
          continue;
        }
        if (!res.body) {
          throw new StreamShapeError("the event stream answer has no body");
        }
        for await (const f of readSSE(res.body, {
          onActivity: touch,
          onRetry: (ms) => {
            retryHintMs = ms;
          },
        })) {
          const ev = decode(f.data);
          if (ev === undefined || ev.seq <= this.#last) {
            // Not an event of the log, or one already delivered: the
            // overlap of a reconnection.
            continue;
          }
          if (ev.seq > this.#last + 1) {
            // A hole (a correct server never leaves one): read it from the log.
            const filled = yield* this.#fill(ev.seq, conn.signal);
            progressed ||= filled;
            if (ev.seq > this.#last + 1) {
              break;
            }
          }
          this.#last = ev.seq;
          progressed = true;
          yield ev;
        }
      } catch (e) {
        if (user?.aborted) throw user.reason;
        if (this.#closer.signal.aborted) return;
        if (e instanceof ReinError || e instanceof StreamShapeError || e instanceof SSELineTooLongError) {
          throw e;
        }
        // The connection broke (reset, idle timeout): reconnect.
      } finally {
        if (idle !== undefined) clearTimeout(idle);
        unlink();
        conn.abort();
        failures = progressed ? 0 : failures + 1;
      }
    }
  }

  // Delivers the events between the last delivered seq and upTo (exclusive)
  // from the log's pages; reports whether it delivered any.
  async *#fill(upTo: number, signal: AbortSignal): AsyncGenerator<ReinEvent, boolean, undefined> {
    let any = false;
    while (this.#last < upTo - 1) {
      let page: EventPage;
      try {
        page = await this.#transport.listEvents(this.#sessionId, {
          after: this.#last,
          limit: Math.min(upTo - 1 - this.#last, 1000),
          signal,
        });
      } catch (e) {
        if (e instanceof ReinError && terminal(e.status)) throw e;
        return any;
      }
      let advanced = false;
      for (const ev of page.events) {
        if (ev.seq !== this.#last + 1 || ev.seq >= upTo) break;
        this.#last = ev.seq;
        advanced = any = true;
        yield ev;
      }
      if (!advanced) return any;
    }
    return any;
  }
}

/** A 2xx answer that is not an event stream: retrying will not change it. */
export class StreamShapeError extends Error {
  constructor(message: string) {
    super(`rein client: ${message}`);
    this.name = "StreamShapeError";
  }
}

/** Whether an error status is one retrying cannot change: a 4xx but 408 and 429. */
function terminal(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/** The wait before attempt n+1 after n failures: none for 0, else the
 * initial delay (or the server's retry hint) doubled per failure up to the
 * maximum, jittered into [d/2, d]. */
export function backoff(failures: number, o: Required<ReconnectOptions>, hintMs = 0): number {
  if (failures <= 0) return 0;
  let d = hintMs > 0 ? hintMs : o.initialDelayMs;
  const limit = Math.max(o.maxDelayMs, d);
  for (let i = 1; i < failures && d < limit; i++) d *= 2;
  d = Math.min(d, limit);
  return d / 2 + Math.random() * (d / 2);
}

function decode(data: string): ReinEvent | undefined {
  let v: unknown;
  try {
    v = JSON.parse(data);
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== "object") return undefined;
  const seq = (v as { seq?: unknown }).seq;
  if (typeof seq !== "number" || !Number.isInteger(seq) || seq <= 0) return undefined;
  return v as ReinEvent;
}

/** Waits ms; false when a signal ended the wait. */
function sleep(ms: number, ...signals: (AbortSignal | undefined)[]): Promise<boolean> {
  return new Promise((resolve) => {
    const live = signals.filter((s): s is AbortSignal => s !== undefined);
    if (live.some((s) => s.aborted)) {
      resolve(false);
      return;
    }
    const done = (ok: boolean) => {
      clearTimeout(timer);
      for (const s of live) s.removeEventListener("abort", onAbort);
      resolve(ok);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    for (const s of live) s.addEventListener("abort", onAbort, { once: true });
  });
}

/** Aborts c when any of signals aborts; returns the function that unlinks them. */
export function link(c: AbortController, ...signals: (AbortSignal | undefined)[]): () => void {
  const live = signals.filter((s): s is AbortSignal => s !== undefined);
  const handlers: [AbortSignal, () => void][] = [];
  for (const s of live) {
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    const h = () => c.abort(s.reason);
    s.addEventListener("abort", h, { once: true });
    handlers.push([s, h]);
  }
  return () => {
    for (const [s, h] of handlers) s.removeEventListener("abort", h);
  };
}
