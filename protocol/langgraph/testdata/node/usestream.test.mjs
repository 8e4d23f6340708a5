// Drives Rein's /langgraph with useStream's own core: the SDK's
// framework-agnostic StreamOrchestrator (@langchain/langgraph-sdk/ui),
// which the React hook (and the Vue, Svelte and Angular ones) wrap — the
// calls useStream makes, without a browser: submit and stream, an
// interrupt approved, stop, a message queued while busy, and a page
// "reloaded" mid-run that rejoins without duplicated text.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";
import { StreamOrchestrator } from "@langchain/langgraph-sdk/ui";

const client = new Client({ apiUrl: `${process.env.REIN_URL}/langgraph`, apiKey: process.env.REIN_TOKEN });
const STREAM_TEXT = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

// The orchestrator keeps a run's id for reconnect-on-mount only where
// there is a window; a Map stands in for sessionStorage.
globalThis.window ??= {};
function storage() {
  const m = new Map();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, v), removeItem: (k) => m.delete(k), map: m };
}

function orchestrator(store) {
  return new StreamOrchestrator(
    { assistantId: "default", reconnectOnMount: store ? () => store : undefined },
    { getClient: () => client, getAssistantId: () => "default", getMessagesKey: () => "messages" },
  );
}

const human = (content) => ({ messages: [{ type: "human", content }] });
const text = (o) => o.messages.map((m) => `${m.type ?? m.getType?.()}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`);

async function until(o, pred, what) {
  const deadline = Date.now() + 20000;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(text(o))}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("useStream core: submit, stream, interrupt approved, queued message", async () => {
  const o = orchestrator();
  await o.submit(human("stream it"));
  assert.ok(o.threadId);
  assert.deepEqual(text(o), ["human: stream it", `ai: ${STREAM_TEXT}`]);

  await o.submit(human("note the cake"));
  assert.equal(o.interrupt?.value?.action_requests?.[0]?.name, "write_note");
  await o.submit(undefined, { command: { resume: { decisions: [{ type: "approve" }] } } });
  assert.equal(o.interrupt, undefined);
  assert.match(o.messages.at(-1).content, /^note result: note saved/);

  // A message while busy is queued on the server and streamed after.
  const first = o.submit(human("stream first"));
  await until(o, () => o.isLoading, "the first run");
  await o.submit(human("queued second"));
  await first;
  await until(o, () => !o.isLoading && o.queueSize === 0 && o.messages.at(-1)?.content === "echo: queued second", "the queued run");
  const t = text(o);
  assert.deepEqual(t.slice(-4), ["human: stream first", `ai: ${STREAM_TEXT}`, "human: queued second", "ai: echo: queued second"]);
  o.dispose();
});

test("useStream core: stop cancels the run on the server; a reload rejoins without duplicated text", async () => {
  const store = storage();
  const o = orchestrator(store);
  const done = o.submit(human("long stop me"));
  await until(o, () => o.messages.some((m) => m.content === "sleeping for an hour"), "the long run's text");
  const runId = [...store.map.values()][0];
  assert.ok(runId, "the run's id kept for reconnect");
  await o.stop();
  await done;
  const run = await client.runs.join(o.threadId, runId);
  assert.ok(run.messages.length >= 2);
  assert.equal((await client.runs.get(o.threadId, runId)).status, "interrupted");
  o.dispose();

  // A page reloaded mid-run: a new orchestrator on the same thread and
  // storage rejoins the run from its first event, shown once.
  const first = orchestrator(store);
  const running = first.submit(human("stream after reload"));
  await until(first, () => first.isLoading && [...store.map.values()].length > 0, "the run's start");
  const threadId = first.threadId;
  // (A reload runs no stop: the old page is simply gone; this one is left
  // to finish on its own.)
  const reloaded = orchestrator(store);
  reloaded.initThreadId?.(threadId);
  if (reloaded.threadId !== threadId) reloaded.switchThread(threadId);
  assert.ok(reloaded.tryReconnect(), "reconnect on mount");
  await until(reloaded, () => !reloaded.isLoading && reloaded.messages.at(-1)?.content === STREAM_TEXT, "the rejoined run's end");
  const shown = text(reloaded).filter((s) => s === `ai: ${STREAM_TEXT}`);
  assert.equal(shown.length, 1, JSON.stringify(text(reloaded)));
  await running;
  reloaded.dispose();
});
