// Drives Rein's /v1 with the official TypeScript SDK (@anthropic-ai/sdk,
// pinned in package.json): the Go test TestNodeSDK starts a server and
// runs this with REIN_URL and REIN_TOKEN set.
import { test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.REIN_URL, apiKey: process.env.REIN_TOKEN, maxRetries: 0 });

// readUntilIdle reads events until the session goes idle, and returns
// them with the idle event last.
async function readUntilIdle(iter) {
  const seen = [];
  for (;;) {
    const { value, done } = await iter.next();
    assert.equal(done, false, `stream ended early: ${JSON.stringify(seen)}`);
    seen.push(value);
    if (value.type === "session.status_idle") return seen;
  }
}

function texts(events) {
  return events.filter((e) => e.type === "agent.message").map((e) => e.content.map((b) => b.text).join(""));
}

test("sessions.create, events.stream, events.send: one turn", async () => {
  const session = await client.beta.sessions.create({ agent: "default", environment_id: "env_node", title: "from node" });
  assert.equal(session.title, "from node");
  assert.equal(session.status, "idle");
  const stream = await client.beta.sessions.events.stream(session.id, { event_deltas: ["agent.message"] });
  const iter = stream[Symbol.asyncIterator]();
  const sent = await client.beta.sessions.events.send(session.id, {
    events: [{ type: "user.message", content: [{ type: "text", text: "hello from node" }] }],
  });
  assert.equal(sent.data.length, 1);
  assert.equal(sent.data[0].type, "user.message");
  const events = await readUntilIdle(iter);
  assert.deepEqual(texts(events), ["echo: hello from node"]);
  const idle = events.at(-1);
  assert.equal(idle.stop_reason.type, "end_turn");
  // The preview carries the reply's id and adds up to its text.
  const reply = events.find((e) => e.type === "agent.message");
  const deltas = events.filter((e) => e.type === "event_delta" && e.event_id === reply.id);
  assert.equal(deltas.map((d) => d.delta.content.text).join(""), "echo: hello from node");
  stream.controller.abort();
});

test("an approval answered by the agent.tool_use event's id", async () => {
  const session = await client.beta.sessions.create({ agent: "default", environment_id: "" });
  const stream = await client.beta.sessions.events.stream(session.id);
  const iter = stream[Symbol.asyncIterator]();
  await client.beta.sessions.events.send(session.id, {
    events: [{ type: "user.message", content: [{ type: "text", text: "note from node" }] }],
  });
  const asked = await readUntilIdle(iter);
  const idle = asked.at(-1);
  assert.equal(idle.stop_reason.type, "requires_action");
  const [toolUseId] = idle.stop_reason.event_ids;
  assert.ok(asked.some((e) => e.type === "agent.tool_use" && e.id === toolUseId));
  await client.beta.sessions.events.send(session.id, {
    events: [{ type: "user.tool_confirmation", tool_use_id: toolUseId, result: "deny", deny_message: "not from node" }],
  });
  const done = await readUntilIdle(iter);
  const result = done.find((e) => e.type === "agent.tool_result");
  assert.equal(result.tool_use_id, toolUseId);
  assert.match(texts(done).at(-1), /not from node/);
  stream.controller.abort();
});

test("errors: a missing session is NotFoundError; a bad event names its field", async () => {
  await assert.rejects(client.beta.sessions.retrieve("ses_missing"), Anthropic.NotFoundError);
  const session = await client.beta.sessions.create({ agent: "default", environment_id: "" });
  await assert.rejects(
    client.beta.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "image" }] }] }),
    (err) => err instanceof Anthropic.BadRequestError && err.error.error.param === "events[0].content[0].type",
  );
});
