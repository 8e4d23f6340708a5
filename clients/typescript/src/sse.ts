// A small Server-Sent Events reader over a fetch body (a ReadableStream of
// bytes), so the client needs neither EventSource (which cannot send an
// Authorization header) nor a dependency. It follows the WHATWG event
// stream format: lines end in LF, CR or CRLF; "id", "event", "data" and
// "retry" fields; lines starting with ":" are comments; a blank line ends
// a frame.

/** One dispatched frame of an event stream. */
export interface SSEFrame {
  /** The frame's `id:` field, when it had one. */
  id: string | undefined;
  /** The `event:` field, "message" when absent. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
}

/** What a reader found besides frames. */
export interface SSEReaderHooks {
  /** Called on every chunk read, comments (keepalives) included. */
  onActivity?: () => void;
  /** Called with the server's `retry:` value in milliseconds. */
  onRetry?: (ms: number) => void;
}

/** The longest line the reader buffers before giving up on the stream. */
export const maxLineLength = 16 * 1024 * 1024;

/** Thrown when a line exceeds maxLineLength: not a stream this reader can follow. */
export class SSELineTooLongError extends Error {
  constructor() {
    super(`rein client: an event stream line exceeds ${maxLineLength} bytes`);
    this.name = "SSELineTooLongError";
  }
}

/**
 * Reads frames from body until it ends. Cancelling the iteration (break,
 * return) cancels the body's reader. A frame cut by the end of the body is
 * not dispatched, as the format requires.
 */
export async function* readSSE(body: ReadableStream<Uint8Array>, hooks: SSEReaderHooks = {}): AsyncGenerator<SSEFrame> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  // A CR that ended the previous chunk: an LF starting the next one
  // belongs to it.
  let pendingCR = false;
  let data: string[] = [];
  let event = "";
  let id: string | undefined;
  let sawData = false;
  let done = false;
  try {
    while (!done) {
      const r = await reader.read();
      let chunk: string;
      if (r.done) {
        done = true;
        chunk = decoder.decode();
      } else {
        chunk = decoder.decode(r.value, { stream: true });
        hooks.onActivity?.();
      }
      if (pendingCR && chunk.startsWith("\n")) {
        chunk = chunk.slice(1);
      }
      pendingCR = false;
      buf += chunk;
      let start = 0;
      for (;;) {
        let end = -1;
        for (let i = start; i < buf.length; i++) {
          const c = buf.charCodeAt(i);
          if (c === 10 || c === 13) {
            end = i;
            break;
          }
        }
        if (end < 0) {
          break;
        }
        const line = buf.slice(start, end);
        if (buf.charCodeAt(end) === 13) {
          if (end + 1 < buf.length) {
            start = buf.charCodeAt(end + 1) === 10 ? end + 2 : end + 1;
          } else {
            pendingCR = true;
            start = end + 1;
          }
        } else {
          start = end + 1;
        }
        if (line === "") {
          if (sawData) {
            yield { id, event: event === "" ? "message" : event, data: data.join("\n") };
          }
          data = [];
          event = "";
          id = undefined;
          sawData = false;
          continue;
        }
        if (line.startsWith(":")) {
          continue;
        }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) {
          value = value.slice(1);
        }
        switch (field) {
          case "data":
            data.push(value);
            sawData = true;
            break;
          case "event":
            event = value;
            break;
          case "id":
            if (!value.includes("\0")) {
              id = value;
            }
            break;
          case "retry":
            if (/^\d+$/.test(value)) {
              hooks.onRetry?.(Number(value));
            }
            break;
          default:
          // Unknown fields are ignored.
        }
      }
      buf = buf.slice(start);
      if (buf.length > maxLineLength) {
        throw new SSELineTooLongError();
      }
    }
  } finally {
    if (!done) {
      await reader.cancel().catch(() => {});
    }
    reader.releaseLock();
  }
}
