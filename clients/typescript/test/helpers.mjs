// Test helpers: a real `rein serve` (the binary in REIN_BIN, with the
// scripted model of testdata/script.yaml and a temporary SQLite store), a
// TCP proxy that cuts event streams, and readers of a session's log.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { ReinClient } from "../dist/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const script = path.join(here, "..", "testdata", "script.yaml");

/** The rein binary under test; the Go test that runs these sets it. */
export function reinBin() {
  const bin = process.env.REIN_BIN;
  if (!bin) {
    throw new Error("REIN_BIN is not set: build rein (go build -o /tmp/rein ./cmd/rein) and run with REIN_BIN=/tmp/rein");
  }
  return bin;
}

/** A temporary directory removed by cleanup(). */
export function tempDir(t) {
  const dir = mkdtempSync(path.join(tmpdir(), "rein-ts-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const listening = /msg="rein serve listening"(?: \S+)*? url=(http:\/\/\S+)/;

/**
 * Starts `rein serve` and resolves once it answers /readyz. The process is
 * killed when the test ends; its log is printed if the test failed.
 * opts: store (an --store value), workspace, addr (default 127.0.0.1:0),
 * args (more flags).
 */
export async function startServe(t, opts) {
  const args = [
    "serve",
    "--addr", opts.addr ?? "127.0.0.1:0",
    "--store", opts.store,
    "--model", "scripted:" + script,
    "--lease-ttl", "1s",
    "--workspace", opts.workspace,
    ...(opts.args ?? []),
  ];
  // A developer's REIN_* settings must not change the server's flags.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("REIN_")));
  const child = spawn(reinBin(), args, { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`rein serve did not listen within 60 s:\n${log}`)), 60000);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (d) => {
      log += d;
      const m = listening.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`rein serve exited (${code ?? signal}) before listening:\n${log}`));
    });
  });
  const proc = {
    url,
    port: Number(new URL(url).port),
    get log() {
      return log;
    },
    exited,
    /** SIGKILL: no drain, no goodbye to the store. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
      }
      await exited;
    },
  };
  t.after(async () => {
    await proc.kill();
  });
  t.after(() => {
    // node:test has no "failed" flag on t: the log goes to the test's
    // diagnostics, shown with its result.
    if (process.env.REIN_TS_SHOW_LOG) t.diagnostic(log);
  });
  for (;;) {
    try {
      const res = await fetch(url + "/readyz");
      if (res.ok) break;
    } catch {
      // Bound before logged; not yet answering.
    }
    if (child.exitCode !== null) throw new Error(`rein serve exited before it was ready:\n${log}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return proc;
}

/** A server on a fresh store (with more flags, args), and a client of it. */
export async function serve(t, clientOpts = {}, args = []) {
  const dir = tempDir(t);
  const proc = await startServe(t, { store: "sqlite:" + path.join(dir, "rein.db"), workspace: path.join(dir, "workspace"), args });
  const client = new ReinClient({ baseUrl: proc.url, reconnect: { initialDelayMs: 20, maxDelayMs: 200 }, ...clientOpts });
  return { proc, client, dir };
}

/** Every event of the session's log, read page by page. */
export async function readLog(client, sessionId) {
  const all = [];
  for (;;) {
    const page = await client.listEvents(sessionId, { after: all.length ? all[all.length - 1].seq : 0, limit: 1000 });
    all.push(...page.events);
    if (page.events.length === 0 || all[all.length - 1].seq >= page.last_seq) return all;
  }
}

/** Reads the stream until pred(event) holds; returns the events read. */
export async function readUntil(stream, pred) {
  const got = [];
  for await (const ev of stream) {
    got.push(ev);
    if (pred(ev)) return got;
  }
  throw new Error("the stream ended");
}

/** Checks that events are seq 1..n (or after+1..) each once, in order. */
export function assertContiguous(assert, events, from = 1) {
  events.forEach((ev, i) => {
    assert.equal(ev.seq, from + i, `event ${i} has seq ${ev.seq}, want ${from + i} (a gap or a duplicate)`);
  });
}

/**
 * A TCP proxy in front of target (host:port) that cuts every event-stream
 * connection after a budget of bytes of the server's answer, half of them
 * with a clean end mid-body and half with a reset. Other requests pass.
 */
export async function cuttingProxy(target, { budget }) {
  const [host, port] = [target.hostname, Number(target.port)];
  const state = { cuts: 0, lastCutAt: 0, lastCutWall: 0, connections: 0, sockets: new Set() };
  const server = net.createServer((down) => {
    state.connections++;
    const up = net.connect(port, host);
    state.sockets.add(down);
    state.sockets.add(up);
    let isStream = false;
    let sent = 0;
    let limit = 0;
    let cut = false;
    const close = () => {
      down.destroy();
      up.destroy();
      state.sockets.delete(down);
      state.sockets.delete(up);
    };
    down.on("data", (d) => {
      if (!isStream && /^GET \S*\/events\/stream/m.test(d.toString("latin1"))) {
        isStream = true;
        sent = 0;
        limit = budget();
      }
      up.write(d);
    });
    up.on("data", (d) => {
      if (cut) return;
      if (!isStream || sent + d.length < limit) {
        sent += d.length;
        down.write(d);
        return;
      }
      cut = true;
      const part = d.subarray(0, limit - sent);
      state.cuts++;
      state.lastCutAt = performance.now();
      state.lastCutWall = Date.now();
      if (state.cuts % 2 === 0) {
        down.end(part, () => close());
      } else {
        down.write(part, () => {
          down.resetAndDestroy();
          close();
        });
      }
    });
    down.on("error", close);
    up.on("error", close);
    down.on("close", close);
    up.on("close", close);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    state,
    async close() {
      for (const s of state.sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** A deterministic PRNG (mulberry32), so a failing cut pattern repeats. */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  if (n === 0) return NaN;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}
