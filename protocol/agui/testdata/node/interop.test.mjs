// Drives Rein's /ag-ui with the official AG-UI client (@ag-ui/client,
// pinned in package.json): HttpAgent.runAgent, whose event verifier checks
// every stream. The Go test TestNodeSDK starts a server and runs this with
// REIN_URL and REIN_TOKEN set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent, verifyEvents } from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";

const base = process.env.REIN_URL;
const headers = { Authorization: `Bearer ${process.env.REIN_TOKEN}` };

function agent(threadId = `thread-${randomUUID()}`) {
  return new HttpAgent({ url: `${base}/ag-ui/default`, headers, threadId });
}

// run runs the agent once and returns the events it saw, and its result.
async function run(a, params = {}, text) {
  if (text !== undefined) a.addMessage({ id: randomUUID(), role: "user", content: text });
  const events = [];
  const res = await a.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  return { events, ...res };
}

function types(events) {
  return events.map((e) => e.type);
}

// frames reads an SSE answer whole: [{id, event}].
async function frames(res) {
  assert.equal(res.status, 200, await res.clone().text());
  const body = await res.text();
  return body.split("\n\n").filter((f) => f.includes("data: ")).map((f) => {
    const id = f.split("\n").find((l) => l.startsWith("id: "))?.slice(4);
    const data = f.split("\n").find((l) => l.startsWith("data: ")).slice(6);
    return { id, event: JSON.parse(data) };
  });
}

test("runAgent: a run's events, verified, and its reply in the messages", async () => {
  const a = agent();
  const { events, newMessages } = await run(a, {}, "hello from ag-ui");
  const t = types(events);
  assert.equal(t[0], "RUN_STARTED");
  assert.equal(t.at(-1), "RUN_FINISHED");
  assert.equal(events.at(-1).outcome.type, "success");
  assert.ok(t.includes("STEP_STARTED") && t.includes("STEP_FINISHED") && t.includes("TEXT_MESSAGE_CONTENT"), t.join(","));
  const reply = newMessages.filter((m) => m.role === "assistant").map((m) => m.content);
  assert.deepEqual(reply, ["echo: hello from ag-ui"]);
});

test("an interrupt for a confirmation, answered with resume[]", async () => {
  const a = agent();
  const first = await run(a, {}, "note this from node");
  const fin = first.events.at(-1);
  assert.equal(fin.type, "RUN_FINISHED");
  assert.equal(fin.outcome.type, "interrupt");
  assert.equal(fin.outcome.interrupts.length, 1);
  const intr = fin.outcome.interrupts[0];
  assert.ok(intr.toolCallId, JSON.stringify(intr));
  assert.ok(first.events.some((e) => e.type === "TOOL_CALL_START" && e.toolCallId === intr.toolCallId));
  // The client refuses to go on without answering it.
  await assert.rejects(a.runAgent({}), /pending interrupt/);
  const second = await run(a, { resume: [{ interruptId: intr.id, status: "resolved", payload: { approved: true } }] });
  const t = types(second.events);
  assert.equal(t[0], "RUN_STARTED");
  assert.equal(second.events.at(-1).outcome.type, "success");
  assert.ok(second.events.some((e) => e.type === "TOOL_CALL_RESULT" && e.toolCallId === intr.toolCallId), t.join(","));
  const texts = second.newMessages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content);
  assert.ok(texts.some((s) => s.startsWith("note result: ")), JSON.stringify(texts));
});

test("the cancel route by runId lands even sent before the run's POST", async () => {
  const a = agent();
  const runId = randomUUID();
  const res = await fetch(`${base}/ag-ui/default/threads/${a.threadId}/runs/${runId}/cancel`, { method: "POST", headers });
  assert.equal(res.status, 200);
  const ack = await res.json();
  assert.equal(ack.accepted, true);
  assert.equal(ack.reinRunId, null);
  const { events } = await run(a, { runId }, "long sleep that never starts");
  assert.deepEqual(types(events), ["RUN_STARTED", "RUN_FINISHED"]);
  assert.equal(events[1].outcome.type, "cancelled");
  assert.equal(events[1].runId, runId);
});

test("the thread stream: every run, resumed by Last-Event-ID with no gap and no repeat", async () => {
  const a = agent();
  await run(a, {}, "stream one");
  await run(a, {}, "two");
  const url = `${base}/ag-ui/default/threads/${a.threadId}/stream?follow=false`;
  const all = await frames(await fetch(url, { headers }));
  assert.equal(all.filter((f) => f.event.type === "RUN_STARTED").length, 2);
  await lastValueFrom(from(all.map((f) => f.event)).pipe(verifyEvents(false), toArray()));
  // Resume from inside the first run's text.
  const cut = all.findIndex((f) => f.event.type === "TEXT_MESSAGE_CONTENT") + 2;
  const id = all[cut].id;
  const tail = await frames(await fetch(url, { headers: { ...headers, "Last-Event-ID": id } }));
  // The resumed stream reopens what the cursor is inside of, then goes on.
  await lastValueFrom(from(tail.map((f) => f.event)).pipe(verifyEvents(false), toArray()));
  const fresh = tail.filter((f) => !f.event.metadata?.reinReopened);
  const want = all.filter((f) => Number(f.id) > Number(id));
  assert.deepEqual(fresh, want);
});
