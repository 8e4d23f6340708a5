// The LangGraph.js peer of Rein's peer comparison (bench/peers): a
// createReactAgent graph (no checkpointer) with the echo tool, streamed with
// streamMode "messages", a fake BaseChatModel playing the harness script.
// Its only stop of a running graph from outside is the AbortSignal given to
// stream(); it has no cooperative stop and no durable event log.
//
// This is a port of bench/peers/harness/harness.go to Node: the same
// workloads, flags, script and JSON line (one per process), so the driver
// treats it like the Go peers. Differences: no allocation count (V8 does
// not expose one), memory is V8's heap (no goroutine stacks; "goroutines"
// is absent), and one event loop means procs = 1.
//
// Run: node --expose-gc main.mjs -workload instant -n 1000
import { readFileSync } from "node:fs";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, AIMessageChunk } from "@langchain/core/messages";
import { ChatGenerationChunk } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";

// ---- the script (as in harness.go) ----
const INSTANT_REPLY = "ok";
const ANSWER_CHUNKS = 20;
const TICK_EVERY_MS = 10;
const ECHO_TOOL = "echo";
const ECHO_DESCRIPTION = "Returns its text argument unchanged.";
const ECHO_SCHEMA = { type: "object", properties: { text: { type: "string" } }, required: ["text"] };
const ECHO_CALL_ID = "call_echo_1";
const answerChunk = (i) => `tok${String(i).padStart(2, "0")} `;
const ANSWER = Array.from({ length: ANSWER_CHUNKS }, (_, i) => answerChunk(i)).join("");
const tickChunk = (i) => `tick${i} `;

const WORKLOADS = ["instant", "tool_stream", "cancel_stream", "stop_blocked", "blocked", "durable_stream"];
const DEFAULT_N = { instant: 2000, tool_stream: 1000, cancel_stream: 200, stop_blocked: 100, blocked: 1000, durable_stream: 10000 };
const MODEL_OF = {
  instant: "instant", tool_stream: "tool_then_answer", cancel_stream: "ticking",
  stop_blocked: "blocked", blocked: "blocked", durable_stream: "stamped",
};

// Env connects the fake model and the tool to the harness.
class Env {
  constructor() {
    this.waiting = new Map();
    this.toolCalls = 0;
  }
  entered(input) {
    const w = this.waiting.get(input);
    if (w) {
      this.waiting.delete(input);
      w();
    }
  }
  expect(input) {
    return new Promise((resolve) => this.waiting.set(input, resolve));
  }
  echo(text) {
    this.toolCalls++;
    return text;
  }
}

const firstUserText = (messages) => {
  for (const m of messages) {
    if (m._getType() === "human") return typeof m.content === "string" ? m.content : "";
  }
  return "";
};

const abortError = (signal) => signal?.reason ?? new Error("aborted");

// FakeModel is a BaseChatModel playing the harness script; it streams
// through runManager.handleLLMNewToken as LangChain's providers do.
class FakeModel extends BaseChatModel {
  constructor(behaviour, env) {
    super({});
    this.behaviour = behaviour;
    this.env = env;
  }

  _llmType() {
    return "bench-fake";
  }

  bindTools() {
    return this;
  }

  async _generate(messages, options, runManager) {
    let agg;
    for await (const c of this._streamResponseChunks(messages, options, runManager)) agg = agg ? agg.concat(c) : c;
    const m = agg.message;
    return { generations: [{ text: agg.text, message: new AIMessage({ content: m.content, tool_calls: m.tool_calls }) }] };
  }

  async *chunk(text, runManager, fields = {}) {
    const cg = new ChatGenerationChunk({ message: new AIMessageChunk({ content: text, ...fields }), text });
    yield cg;
    await runManager?.handleLLMNewToken(text, undefined, undefined, undefined, undefined, { chunk: cg });
  }

  async *_streamResponseChunks(messages, options, runManager) {
    const signal = options.signal;
    switch (this.behaviour) {
      case "instant":
        yield* this.chunk(INSTANT_REPLY, runManager);
        return;
      case "tool_then_answer": {
        const last = messages[messages.length - 1];
        if (last && last._getType() === "tool") {
          for (let i = 0; i < ANSWER_CHUNKS; i++) yield* this.chunk(answerChunk(i), runManager);
          return;
        }
        const args = JSON.stringify({ text: firstUserText(messages) });
        yield* this.chunk("", runManager, { tool_call_chunks: [{ name: ECHO_TOOL, args, id: ECHO_CALL_ID, index: 0, type: "tool_call_chunk" }] });
        return;
      }
      case "ticking": {
        const input = firstUserText(messages);
        for (let i = 0; ; i++) {
          if (i > 0) {
            await new Promise((resolve, reject) => {
              const t = setTimeout(() => {
                signal?.removeEventListener("abort", onAbort);
                resolve();
              }, TICK_EVERY_MS);
              const onAbort = () => {
                clearTimeout(t);
                reject(abortError(signal));
              };
              if (signal?.aborted) onAbort();
              else signal?.addEventListener("abort", onAbort, { once: true });
            });
          }
          yield* this.chunk(tickChunk(i), runManager);
          if (i === 0) this.env.entered(input);
        }
      }
      case "blocked": {
        this.env.entered(firstUserText(messages));
        await new Promise((_, reject) => {
          if (!signal) return; // never ends: the workload's timeout reports it
          if (signal.aborted) reject(abortError(signal));
          else signal.addEventListener("abort", () => reject(abortError(signal)), { once: true });
        });
        return;
      }
      default:
        throw new Error(`model behaviour ${this.behaviour} not supported`);
    }
  }
}

class Peer {
  constructor(behaviour, env) {
    const echo = tool(async ({ text }) => env.echo(text), { name: ECHO_TOOL, description: ECHO_DESCRIPTION, schema: ECHO_SCHEMA });
    this.agent = createReactAgent({ llm: new FakeModel(behaviour, env), tools: [echo] });
  }

  // consume reads a run's stream as a caller does and returns the agent's
  // streamed text.
  async consume(input, signal) {
    const stream = await this.agent.stream({ messages: [{ role: "user", content: input }] }, { streamMode: "messages", signal });
    let text = "";
    for await (const [chunk, meta] of stream) {
      if (meta?.langgraph_node === "agent" && typeof chunk.content === "string") text += chunk.content;
    }
    return text;
  }

  run(input) {
    return this.consume(input, undefined);
  }

  // start starts one run; it progresses as its stream is consumed, so the
  // consumer starts with it.
  start(input) {
    const ac = new AbortController();
    const done = this.consume(input, ac.signal).then(
      () => new Error("the run ended without being stopped"),
      (err) => (ac.signal.aborted ? null : err),
    );
    return {
      cancel: () => ac.abort(),
      wait: () => done,
    };
  }
}

// ---- measurement (as in harness.go) ----
const nowNs = () => process.hrtime.bigint();
const usSince = (t0) => Number(nowNs() - t0) / 1e3;

function percentile(xs, p) {
  if (xs.length === 0) return 0;
  xs.sort((a, b) => a - b);
  const k = Math.ceil((xs.length * p) / 100) - 1;
  return xs[Math.min(Math.max(k, 0), xs.length - 1)];
}

function withTimeout(promise, ms, what) {
  let t;
  const timeout = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(t));
}

function gc() {
  if (typeof globalThis.gc === "function") globalThis.gc();
}

async function sequential(o, op) {
  for (let i = 0; i < o.warmup; i++) await op(`warm-${i}`);
  const lat = [];
  gc();
  for (let i = 0; i < o.n; i++) lat.push(await op(`run-${i}`));
  return { p50_us: percentile(lat, 50), p99_us: percentile(lat, 99) };
}

async function whole(o, peer, input, want) {
  const t0 = nowNs();
  const reply = await withTimeout(peer.run(input), o.waitTimeoutMs, "the run did not end");
  const d = usSince(t0);
  if (reply !== want) throw new Error(`reply ${JSON.stringify(reply)}, want ${JSON.stringify(want)}`);
  return d;
}

async function stopOne(o, env, peer, input) {
  const entered = env.expect(input);
  const h = peer.start(input);
  await withTimeout(entered, o.waitTimeoutMs, "the run did not reach its model");
  const t0 = nowNs();
  h.cancel();
  const err = await withTimeout(h.wait(), o.waitTimeoutMs, "the run did not end after the stop");
  const d = usSince(t0);
  if (err) throw new Error(`after the stop: ${err.stack ?? err}`);
  return d;
}

async function blocked(o, env, peer) {
  const inputs = Array.from({ length: o.n }, (_, i) => `run-${i}`);
  const entered = inputs.map((i) => env.expect(i));
  gc();
  const m0 = process.memoryUsage();
  const t0 = nowNs();
  const hs = inputs.map((i) => peer.start(i));
  await withTimeout(Promise.all(entered), o.waitTimeoutMs, "the runs did not all reach their model");
  const start = usSince(t0);
  gc();
  const m1 = process.memoryUsage();
  const metrics = {
    heap_stack_per_run_b: (m1.heapUsed - m0.heapUsed) / o.n,
    rss_per_run_b: (m1.rss - m0.rss) / o.n,
    start_per_run_us: start / o.n,
  };
  for (const h of hs) h.cancel();
  const errs = await withTimeout(Promise.all(hs.map((h) => h.wait())), o.waitTimeoutMs, "the runs did not end after the cancel");
  const bad = errs.find((e) => e);
  if (bad) throw new Error(`after the cancel: ${bad.stack ?? bad}`);
  return metrics;
}

// parseDuration takes Go's time.Duration syntax ("100ms", "9m0s", "1.5s")
// and returns milliseconds.
function parseDuration(s) {
  const unit = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;
  let ms = 0;
  let end = 0;
  for (let m; (m = re.exec(s)); end = re.lastIndex) ms += Number(m[1]) * unit[m[2]];
  if (s === "" || end !== s.length) throw new Error(`bad duration ${s}`);
  return ms;
}

// parseFlags takes Go-style flags: -name value, -name=value, --name value.
function parseFlags(argv) {
  const f = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i].replace(/^--?/, "");
    const eq = a.indexOf("=");
    if (eq >= 0) f[a.slice(0, eq)] = a.slice(eq + 1);
    else f[a] = argv[++i];
  }
  return f;
}

function version() {
  const v = (p) => JSON.parse(readFileSync(new URL(`./node_modules/${p}/package.json`, import.meta.url))).version;
  return `${v("@langchain/langgraph")} (@langchain/core ${v("@langchain/core")})`;
}

async function main() {
  const f = parseFlags(process.argv.slice(2));
  const workload = f.workload ?? "";
  if (!WORKLOADS.includes(workload)) throw new Error(`unknown workload "${workload}" (want one of ${WORKLOADS.join(", ")})`);
  const o = { n: Number(f.n ?? 0) || DEFAULT_N[workload], warmup: Number(f.warmup ?? 0), waitTimeoutMs: f["wait-timeout"] ? parseDuration(f["wait-timeout"]) : 60000 };
  o.warmup = o.warmup === 0 ? Math.max(1, Math.floor(o.n / 10)) : Math.max(0, o.warmup);
  if (typeof globalThis.gc !== "function" && workload === "blocked") throw new Error("run node with --expose-gc");
  const res = {
    peer: "langgraph", version: version(), workload, n: o.n, round: Number(f.round ?? 0),
    runtime: `node ${process.version}`, procs: 1, wall_s: 0,
  };
  const env = new Env();
  const peer = new Peer(MODEL_OF[workload], env);
  const t0 = nowNs();
  switch (workload) {
    case "instant":
      res.metrics = await sequential(o, (i) => whole(o, peer, i, INSTANT_REPLY));
      break;
    case "tool_stream":
      res.metrics = await sequential(o, (i) => whole(o, peer, i, ANSWER));
      if (env.toolCalls !== o.n + o.warmup) throw new Error(`the echo tool ran ${env.toolCalls} times for ${o.n + o.warmup} runs`);
      break;
    case "cancel_stream":
      res.metrics = await sequential(o, (i) => stopOne(o, env, peer, i));
      break;
    case "stop_blocked":
      res.unsupported = "not supported: LangGraph.js has no cooperative stop of a running graph from outside (only the AbortSignal; interrupt() is called from inside a node)";
      break;
    case "blocked":
      res.metrics = await blocked(o, env, peer);
      break;
    case "durable_stream":
      res.unsupported = "not supported: no durable session store comparable to Rein's";
      break;
  }
  res.wall_s = Number(nowNs() - t0) / 1e9;
  process.stdout.write(JSON.stringify(res) + "\n");
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`langgraph: ${err.stack ?? err}\n`);
    process.exit(1);
  },
);
