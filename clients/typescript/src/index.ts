// @reinhq/client: a dependency-free TypeScript client of Rein's native
// HTTP API, for Node ≥ 20 and browsers (fetch and web streams only).

export { ReinClient } from "./client.js";
export type {
  CallOptions,
  ClientOptions,
  CreateSessionOptions,
  SendOptions,
  StopOptions,
  SubmittedEvent,
} from "./client.js";
export { ReinError } from "./errors.js";
export type { ErrorCode } from "./errors.js";
export { Run } from "./run.js";
export { EventStream, StreamShapeError } from "./stream.js";
export type { EventStreamOptions, ReconnectOptions } from "./stream.js";
export { readSSE, SSELineTooLongError } from "./sse.js";
export type { SSEFrame, SSEReaderHooks } from "./sse.js";
export { isEvent } from "./types.js";
export type * from "./types.js";
