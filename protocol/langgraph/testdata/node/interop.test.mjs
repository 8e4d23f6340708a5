// Drives Rein's /langgraph with the official LangGraph SDK
// (@langchain/langgraph-sdk, pinned in package.json): its Client, as
// useStream and agent-chat-ui call it. The Go test TestNodeSDK starts a
// server and runs this with REIN_URL and REIN_TOKEN set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@langchain/langgraph-sdk";

const apiUrl = `${process.env.REIN_URL}/langgraph`;
const client = new Client({ apiUrl, apiKey: process.env.REIN_TOKEN });
const human = (content) => ({ messages: [{ type: "human", content }] });
const STREAM_TEXT = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

async function collect(iter) {
  const out = [];
  for await (const part of iter) out.push(part);
  return out;
}

async function rejects(promise, status) {
  await assert.rejects(promise, (err) => {
    assert.equal(err.status, status, String(err));
    assert.ok(JSON.parse(err.text).detail, err.text);
    return true;
  });
}

test("info, assistants and threads", async () => {
  const info = await fetch(`${apiUrl}/info`, { headers: { "x-api-key": process.env.REIN_TOKEN } }).then((r) => r.json());
  assert.equal(info.flags.assistants, true);
  const assistants = await client.assistants.search({ graphId: "default" });
  assert.deepEqual(assistants.map((a) => a.assistant_id), ["default"]);
  assert.equal((await client.assistants.get("default")).graph_id, "default");
  const schemas = await client.assistants.getSchemas("default");
  assert.ok(schemas.state_schema.properties.messages);
  await rejects(client.assistants.get("nobody"), 404);

  const id = randomUUID();
  const t = await client.threads.create({ threadId: id, metadata: { topic: "milk" }, graphId: "default" });
  assert.equal(t.thread_id, id);
  assert.equal(t.status, "idle");
  assert.deepEqual(t.values, { messages: [] });
  await rejects(client.threads.create({ threadId: id }), 409);
  assert.equal((await client.threads.create({ threadId: id, ifExists: "do_nothing" })).thread_id, id);
  const updated = await client.threads.update(id, { metadata: { color: "blue" } });
  assert.equal(updated.metadata.topic, "milk");
  assert.equal(updated.metadata.color, "blue");
  const found = await client.threads.search({ metadata: { color: "blue" } });
  assert.deepEqual(found.map((x) => x.thread_id), [id]);
  const made = await client.threads.create();
  assert.match(made.thread_id, /^[0-9a-f-]{36}$/);
  await client.threads.delete(made.thread_id);
  await rejects(client.threads.get(made.thread_id), 404);
});

test("runs.stream: values, updates and messages-tuple; state and history read back the same", async () => {
  const { thread_id } = await client.threads.create();
  let created;
  const parts = await collect(client.runs.stream(thread_id, "default", {
    input: human("stream it"), streamMode: ["values", "updates", "messages-tuple"],
    onRunCreated: (m) => { created = m; },
  }));
  assert.equal(parts[0].event, "metadata");
  const runId = parts[0].data.run_id;
  assert.equal(created.run_id, runId);
  assert.equal(created.thread_id, thread_id);
  const text = parts.filter((p) => p.event === "messages").map((p) => p.data[0].content).join("");
  assert.equal(text, STREAM_TEXT);
  for (const p of parts.filter((p) => p.event === "messages")) {
    assert.equal(p.data[0].type, "AIMessageChunk");
    assert.equal(p.data[1].langgraph_node, "model");
  }
  const updates = parts.filter((p) => p.event === "updates").map((p) => Object.keys(p.data)[0]);
  assert.deepEqual(updates, ["__start__", "model"]);
  const last = parts.filter((p) => p.event === "values").at(-1).data;
  assert.deepEqual(last.messages.map((m) => [m.type, m.content]), [["human", "stream it"], ["ai", STREAM_TEXT]]);

  const state = await client.threads.getState(thread_id);
  assert.deepEqual(state.values, last);
  assert.deepEqual(state.next, []);
  assert.deepEqual(state.tasks, []);
  const run = await client.runs.get(thread_id, runId);
  assert.equal(run.status, "success");
  assert.equal(run.assistant_id, "default");

  // One state per ended step, newest first, paged by before.
  const history = await client.threads.getHistory(thread_id, { limit: 2 });
  assert.equal(history.length, 2);
  assert.deepEqual(history[0].values, last);
  const older = await client.threads.getHistory(thread_id, { limit: 10, before: history[1].checkpoint });
  assert.ok(older.length >= 1);
  assert.deepEqual(older[0].checkpoint, history[1].parent_checkpoint);
  assert.deepEqual(older.at(-1).values.messages.map((m) => m.type), ["human"]);
});

test("an interrupt ends the stream; command.resume answers it and streams the run on", async () => {
  const { thread_id } = await client.threads.create();
  const first = await collect(client.runs.stream(thread_id, "default", { input: human("note the milk"), streamMode: ["values", "updates"] }));
  const runId = first[0].data.run_id;
  const intr = first.filter((p) => p.event === "updates" && p.data.__interrupt__).at(-1).data.__interrupt__;
  assert.equal(intr.length, 1);
  assert.equal(intr[0].value.action_requests[0].name, "write_note");
  assert.equal((await client.runs.get(thread_id, runId)).status, "interrupted");
  const thread = await client.threads.get(thread_id);
  assert.equal(thread.status, "interrupted");
  const state = await client.threads.getState(thread_id);
  assert.deepEqual(state.next, ["tools"]);
  assert.equal(state.tasks[0].interrupts[0].id, intr[0].id);
  const ai = state.values.messages.at(-1);
  assert.equal(ai.type, "ai");
  assert.equal(ai.tool_calls[0].id, intr[0].id);

  // The resume must not queue behind the waiting run.
  const rest = await collect(client.runs.stream(thread_id, "default", {
    command: { resume: { [intr[0].id]: { allow: false, deny_message: "not today" } } }, streamMode: ["values"],
  }));
  assert.equal(rest[0].data.run_id, runId);
  const msgs = rest.at(-1).data.messages;
  assert.deepEqual(msgs.map((m) => m.type), ["human", "ai", "tool", "ai"]);
  assert.equal(msgs[2].status, "error");
  assert.match(msgs[3].content, /not today/);
  assert.equal((await client.runs.get(thread_id, runId)).status, "success");

  // runs.wait returns at an interrupt too, and a resume for all (one decision).
  const waited = await client.runs.wait(thread_id, "default", { input: human("note again") });
  assert.equal(waited.__interrupt__.length, 1);
  const done = await client.runs.wait(thread_id, "default", { command: { resume: { type: "approve" } } });
  assert.match(done.messages.at(-1).content, /^note result: note saved/);
});

test("background run: joinStream from the start and from any event, multitask strategies, cancel", async () => {
  const { thread_id } = await client.threads.create();
  const run = await client.runs.create(thread_id, "default", { input: human("stream in the background") });
  assert.ok(["pending", "running"].includes(run.status));
  const all = await collect(client.runs.joinStream(thread_id, run.run_id, { lastEventId: "-1", streamMode: ["messages-tuple", "values"] }));
  const text = (parts) => parts.filter((p) => p.event === "messages").map((p) => p.data[0].content).join("");
  assert.equal(text(all), STREAM_TEXT);
  // Rejoined after any event, at any age: exactly the rest.
  // The parts of one event share its id: cut after the last of them.
  let i = Math.floor(all.length / 2);
  while (i + 1 < all.length && all[i + 1].id === all[i].id) i++;
  const mid = all[i];
  const tail = await collect(client.runs.joinStream(thread_id, run.run_id, { lastEventId: mid.id, streamMode: ["messages-tuple", "values"] }));
  const after = all.slice(i + 1);
  assert.deepEqual(tail.map((p) => [p.event, p.id]), after.map((p) => [p.event, p.id]));
  assert.equal((await client.runs.join(thread_id, run.run_id)).messages.at(-1).content, STREAM_TEXT);

  const long = await client.runs.create(thread_id, "default", { input: human("long wait") });
  await rejects(client.runs.create(thread_id, "default", { input: human("refused"), multitaskStrategy: "reject" }), 409);
  const queued = await client.runs.create(thread_id, "default", { input: human("queued") });
  assert.equal(queued.status, "pending");
  const listed = await client.runs.list(thread_id);
  assert.deepEqual(listed.slice(0, 2).map((r) => r.run_id), [queued.run_id, long.run_id]);
  await client.runs.cancel(thread_id, long.run_id, true);
  assert.equal((await client.runs.get(thread_id, long.run_id)).status, "interrupted");
  const q = await client.runs.join(thread_id, queued.run_id);
  assert.equal(q.messages.at(-1).content, "echo: queued");
  // Nothing of the refused message reached the thread.
  const state = await client.threads.getState(thread_id);
  assert.ok(!state.values.messages.some((m) => m.content === "refused"));
  await rejects(client.runs.get(thread_id, "run_nope"), 404);
});

test("notes: input.inject and the notes route reach the next step", async () => {
  const { thread_id } = await client.threads.create();
  await collect(client.runs.stream(thread_id, "default", { input: human("note the bread"), streamMode: ["updates"] }));
  const ts = client.threads.stream(thread_id, { assistantId: "default" });
  await ts.input.inject({ namespace: [], message: { role: "user", content: "whole grain" } });
  await ts.close();
  const res = await fetch(`${apiUrl}/threads/${thread_id}/notes`, {
    method: "POST", headers: { "x-api-key": process.env.REIN_TOKEN, "content-type": "application/json" },
    body: JSON.stringify({ text: "two loaves" }),
  });
  assert.equal(res.status, 200);
  const done = await client.runs.wait(thread_id, "default", { command: { resume: true } });
  assert.match(done.messages.at(-1).content, /hints=\[whole grain; two loaves\]/);
  const notes = done.messages.filter((m) => m.name === "note").map((m) => m.content);
  assert.deepEqual(notes, ["whole grain", "two loaves"]);
});

test("bad input: the SDK's error shapes, nothing applied", async () => {
  const { thread_id } = await client.threads.create();
  await rejects(client.threads.get(randomUUID()), 404);
  await rejects(client.runs.create(thread_id, "nobody", { input: human("x") }), 404);
  await rejects(client.runs.create(randomUUID(), "default", { input: human("x") }), 404);
  await rejects(client.runs.create(thread_id, "default", { input: { messages: [] } }), 422);
  await rejects(client.runs.create(thread_id, "default", { input: human("x"), multitaskStrategy: "sometimes" }), 422);
  await rejects(client.runs.create(thread_id, "default", { command: { resume: true } }), 409);
  await rejects(client.runs.create(thread_id, "default", { input: human("x"), streamMode: ["debug"] }), 422);
  const state = await client.threads.getState(thread_id);
  assert.deepEqual(state.values.messages, []);
  assert.deepEqual(await client.runs.list(thread_id), []);
});
