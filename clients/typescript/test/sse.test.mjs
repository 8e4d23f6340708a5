// The SSE reader's parsing, and the stream's handling of what a correct
// Rein server never sends but a network or a proxy can: overlaps, holes,
// non-event frames, error answers, a wrong content type. The answers here
// come from a local HTTP server that plays exact byte sequences.

import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import { ReinClient, ReinError, StreamShapeError, readSSE } from "../dist/index.js";

function bodyOf(chunks) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(typeof ch === "string" ? enc.encode(ch) : ch);
      c.close();
    },
  });
}

async function frames(chunks, hooks) {
  const out = [];
  for await (const f of readSSE(bodyOf(chunks), hooks)) out.push(f);
  return out;
}

test("readSSE: fields, comments, CR/LF/CRLF line ends split across chunks, multi-line data, unfinished frame", async () => {
  const retries = [];
  let activity = 0;
  const got = await frames(
    [
      ": keepalive\n\n",
      "id: 1\nevent: a\ndata: {\"x\":1}\n\n",
      "id: 2\r",
      "\nevent: b\r\ndata: one\r\ndata:two\r\r",
      "retry: 1500\n",
      "data: no event name\n\n",
      "data",
      ": spl",
      "it\n\n",
      // UTF-8 cut inside a character.
      new Uint8Array([0x64, 0x61, 0x74, 0x61, 0x3a, 0x20, 0xc3]),
      new Uint8Array([0xa9, 0x0a, 0x0a]),
      "id: 9\ndata: cut off by the end",
    ],
    { onRetry: (ms) => retries.push(ms), onActivity: () => activity++ },
  );
  assert.deepEqual(got, [
    { id: "1", event: "a", data: '{"x":1}' },
    { id: "2", event: "b", data: "one\ntwo" },
    { id: undefined, event: "message", data: "no event name" },
    { id: undefined, event: "message", data: "split" },
    { id: undefined, event: "message", data: "é" },
  ]);
  assert.deepEqual(retries, [1500]);
  assert.equal(activity, 12);
});

/** A server whose answers to the stream route are played from a list, one per connection. */
async function playServer(t, answers, pages = {}) {
  const requests = [];
  const server = http.createServer((req, res) => {
    const u = new URL(req.url, "http://x");
    requests.push({ path: u.pathname, after: u.searchParams.get("after"), lastEventId: req.headers["last-event-id"] });
    if (u.pathname.endsWith("/events")) {
      const after = Number(u.searchParams.get("after"));
      const limit = Number(u.searchParams.get("limit"));
      const evs = (pages[u.pathname] ?? []).filter((e) => e.seq > after).slice(0, limit);
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ events: evs, last_seq: 100 }));
      return;
    }
    const a = answers.shift() ?? { status: 404, body: JSON.stringify({ error: { code: "not_found", message: "gone" } }) };
    res.writeHead(a.status ?? 200, a.headers ?? { "Content-Type": a.status && a.status !== 200 ? "application/json" : "text/event-stream" });
    res.end(a.body ?? "");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => server.close(r)));
  const client = new ReinClient({ baseUrl: `http://127.0.0.1:${server.address().port}`, reconnect: { initialDelayMs: 1, maxDelayMs: 5 } });
  return { client, requests };
}

const ev = (seq) => ({ seq, id: `evt_${seq}`, session_id: "s", run_id: null, type: "system.message", payload: { text: `t${seq}` }, created_at: "2026-12-03T00:00:00Z" });
const frame = (e) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

test("the stream drops overlaps, fills holes from the log, skips non-event frames, resumes with Last-Event-ID", async (t) => {
  const { client, requests } = await playServer(
    t,
    [
      { body: frame(ev(1)) + frame(ev(2)) + "event: hello\ndata: not json\n\n" },
      // An overlap after the reconnection (1, 2 again), then a hole (5 after 2).
      { body: frame(ev(1)) + frame(ev(2)) + frame(ev(3)) + frame(ev(5)) },
      { status: 503, headers: { "Content-Type": "application/json", "Retry-After": "0" }, body: '{"error":{"code":"unavailable","message":"later"}}' },
      { body: frame(ev(6)) },
    ],
    { "/api/sessions/s/events": [ev(4)] },
  );
  const got = [];
  const stream = client.events("s");
  await assert.rejects(
    (async () => {
      for await (const e of stream) got.push(e);
    })(),
    (e) => e instanceof ReinError && e.status === 404 && e.code === "not_found",
  );
  assert.deepEqual(got.map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
  assert.equal(stream.lastSeq, 6);
  const streams = requests.filter((r) => r.path.endsWith("/stream"));
  assert.deepEqual(
    streams.map((r) => [r.after, r.lastEventId]),
    [["0", undefined], ["2", "2"], ["5", "5"], ["5", "5"], ["6", "6"]],
  );
  assert.deepEqual(requests.filter((r) => r.path.endsWith("/events")).map((r) => r.after), ["3"]);
});

test("the stream stops on a 401 and on an answer that is not an event stream", async (t) => {
  const a = await playServer(t, [{ status: 401, body: '{"error":{"code":"unauthenticated","message":"no"}}' }]);
  await assert.rejects(a.client.events("s")[Symbol.asyncIterator]().next(), (e) => e instanceof ReinError && e.code === "unauthenticated");
  const b = await playServer(t, [{ headers: { "Content-Type": "text/html" }, body: "<html>" }]);
  await assert.rejects(b.client.events("s")[Symbol.asyncIterator]().next(), (e) => e instanceof StreamShapeError);
});

test("an error body that is not Rein's still gives a ReinError", async (t) => {
  const { client } = await playServer(t, [{ status: 502, headers: { "Content-Type": "text/html" }, body: "<html>bad gateway</html>" }]);
  // getSession's answer is the play list's first: a proxy's error page.
  const e = await client.getSession("s").then(() => null, (x) => x);
  assert.ok(e instanceof ReinError);
  assert.equal(e.status, 502);
  assert.equal(e.code, "http_502");
});

test("requests carry only headers a CORS preflight of the server allows", async (t) => {
  const { client: base } = await playServer(t, [{ body: frame(ev(1)) }, { body: frame(ev(2)) }]);
  const sent = new Set();
  const client = new ReinClient({
    baseUrl: base.baseUrl,
    token: "tok",
    reconnect: { initialDelayMs: 1, maxDelayMs: 5 },
    fetch: (url, init) => {
      for (const k of Object.keys(init?.headers ?? {})) sent.add(k.toLowerCase());
      return fetch(url, init);
    },
  });
  const got = [];
  for await (const e of client.events("s")) {
    got.push(e.seq);
    if (e.seq === 2) break;
  }
  await client.note("s", "n").catch(() => {});
  assert.deepEqual(got, [1, 2]);
  // Accept needs no preflight; the others are in the server's
  // Access-Control-Allow-Headers (docs/api.md, CORS).
  const allowed = new Set(["accept", "authorization", "content-type", "last-event-id", "x-request-id"]);
  for (const h of sent) assert.ok(allowed.has(h), `the client sends ${h}, which a browser would preflight and the server does not allow`);
  assert.ok(sent.has("last-event-id") && sent.has("authorization") && sent.has("content-type"));
});

test("a connection silent past the idle timeout is made again from the last event", async (t) => {
  const held = [];
  let n = 0;
  const server = http.createServer((req, res) => {
    n++;
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    if (n === 1) {
      // One event, then silence: no event, no keepalive, no end.
      res.write(frame(ev(1)));
      held.push(res);
      return;
    }
    res.end(frame(ev(2)));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => {
    for (const r of held) r.destroy();
    return new Promise((r) => server.close(r));
  });
  const client = new ReinClient({ baseUrl: `http://127.0.0.1:${server.address().port}`, idleTimeoutMs: 200 });
  const got = [];
  for await (const e of client.events("s")) {
    got.push(e.seq);
    if (e.seq === 2) break;
  }
  assert.deepEqual(got, [1, 2]);
  assert.equal(n, 2);
});
