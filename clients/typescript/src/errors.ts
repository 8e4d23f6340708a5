// Errors the server answers, as one typed class, so a caller can branch
// on `code` (and read `runId` of a busy session) without parsing bodies.

/** The error codes of Rein's API (docs/api.md "Errors"). A server may add
 * codes; they come through as strings. */
export type ErrorCode =
  | "unauthenticated"
  | "not_found"
  | "invalid_argument"
  | "session_busy"
  | "conflict"
  | "payload_too_large"
  | "too_many_requests"
  | "unavailable"
  | "internal"
  | (string & {});

/**
 * A non-2xx answer of the server. Transport failures (connection refused,
 * DNS) are the `fetch` implementation's own errors, and an aborted call
 * rejects with its signal's reason, as `fetch` does.
 */
export class ReinError extends Error {
  /** The HTTP status (409, 400, …). */
  readonly status: number;
  /** The error code of the body, e.g. `session_busy`. */
  readonly code: ErrorCode;
  /** The offending field of an `invalid_argument`, e.g. `events[0].payload.run_id`. */
  readonly param: string | undefined;
  /** The run holding the turn (`session_busy`), or the run a `conflict` is about. */
  readonly runId: string | undefined;
  /** The status of the run a `conflict` is about, e.g. `RUNNING` for an
   * edit or promote of a run that already started. */
  readonly runStatus: string | undefined;
  /** The server's id of the request: quote it when reporting a problem. */
  readonly requestId: string | undefined;
  /** `Retry-After` in seconds, when the server sent one (429, 503). */
  readonly retryAfter: number | undefined;
  /** For a batch of events: the results of the events applied before the one that failed. */
  readonly results: unknown[] | undefined;
  /** The whole error object of the body, extra keys included. */
  readonly body: { [key: string]: unknown };

  constructor(init: {
    status: number;
    code: ErrorCode;
    message: string;
    param?: string | undefined;
    runId?: string | undefined;
    runStatus?: string | undefined;
    requestId?: string | undefined;
    retryAfter?: number | undefined;
    results?: unknown[] | undefined;
    body?: { [key: string]: unknown };
  }) {
    super(init.message);
    this.name = "ReinError";
    this.status = init.status;
    this.code = init.code;
    this.param = init.param;
    this.runId = init.runId;
    this.runStatus = init.runStatus;
    this.requestId = init.requestId;
    this.retryAfter = init.retryAfter;
    this.results = init.results;
    this.body = init.body ?? {};
  }
}

/** Reads an error answer into a ReinError; a body that is not Rein's
 * error shape (a proxy's HTML page) still gives one, with code `http_<status>`. */
export async function errorFromResponse(res: Response): Promise<ReinError> {
  let text = "";
  try {
    text = await res.text();
  } catch {
    // The body broke off: the status alone still says what happened.
  }
  const ra = res.headers.get("Retry-After");
  const retryAfter = ra !== null && /^\d+$/.test(ra.trim()) ? Number(ra.trim()) : undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const obj = parsed !== null && typeof parsed === "object" ? (parsed as { [k: string]: unknown }) : undefined;
  const err = obj && obj["error"] !== null && typeof obj["error"] === "object" ? (obj["error"] as { [k: string]: unknown }) : undefined;
  if (!err) {
    return new ReinError({
      status: res.status,
      code: `http_${res.status}`,
      message: `the server answered ${res.status} ${res.statusText}`.trim(),
      retryAfter,
    });
  }
  const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
  return new ReinError({
    status: res.status,
    code: str(err["code"]) ?? `http_${res.status}`,
    message: str(err["message"]) ?? `the server answered ${res.status}`,
    param: str(err["param"]),
    runId: str(err["run_id"]),
    runStatus: str(err["status"]),
    requestId: str(err["request_id"]) ?? res.headers.get("X-Request-Id") ?? undefined,
    retryAfter,
    results: Array.isArray(obj?.["results"]) ? (obj?.["results"] as unknown[]) : undefined,
    body: err,
  });
}
