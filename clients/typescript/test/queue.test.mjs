// The editable queue: a queued run's text replaced, its place moved, the
// run sent now — and the race-honest conflict once it has started.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ReinError } from "../dist/index.js";
import { readLog, serve } from "./helpers.mjs";

test("a queued run is edited, moved and promoted; a started one answers a conflict with its status", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const running = await client.send(s.id, "slow running");
  const first = await client.send(s.id, "hello first", { whenBusy: "enqueue", clientId: "tab-1" });
  const second = await client.send(s.id, "hello second", { whenBusy: "enqueue" });

  const info = await first.info();
  assert.equal(info.input, "hello first");
  assert.equal(info.client_id, "tab-1");
  assert.equal(info.position, 1);
  assert.equal((await running.info()).position, null);

  const edited = await client.editRun(s.id, second.id, { text: "hello edited", position: 1 });
  assert.equal(edited.input, "hello edited");
  assert.equal(edited.position, 1);
  assert.equal((await first.info()).position, 2);

  const bad = await client.editRun(s.id, second.id, { position: 0 }).then(() => null, (e) => e);
  assert.ok(bad instanceof ReinError);
  assert.equal(bad.status, 400);
  assert.equal(bad.param, "position");

  const promoted = await client.promoteRun(s.id, first.id);
  assert.equal(promoted.position, 1);
  const end = await running.done();
  assert.equal(end.payload.reason, "interrupted");
  await first.done();
  await second.done();

  const log = await readLog(client, s.id);
  const edits = log.filter((e) => e.type === "session.run_edited");
  assert.deepEqual(edits.map((e) => e.payload), [{ run_id: second.id, text: "hello edited" }]);
  const queues = log.filter((e) => e.type === "session.queue_changed").map((e) => e.payload.queued);
  assert.deepEqual(queues.at(-1), []);
  assert.ok(queues.some((q) => q[0] === first.id && q[1] === second.id), `the promote's order is logged: ${JSON.stringify(queues)}`);
  const starts = log.filter((e) => e.type === "session.run_started").map((e) => e.run_id);
  assert.deepEqual(starts, [running.id, first.id, second.id]);
  const reply = log.find((e) => e.type === "agent.message" && e.run_id === second.id);
  assert.match(reply.payload.text, /hello edited/);

  const late = await client.editRun(s.id, second.id, { text: "too late" }).then(() => null, (e) => e);
  assert.ok(late instanceof ReinError);
  assert.equal(late.status, 409);
  assert.equal(late.code, "conflict");
  assert.equal(late.runId, second.id);
  assert.equal(late.runStatus, "COMPLETED");
  const latePromote = await client.promoteRun(s.id, second.id, { mode: "rollback" }).then(() => null, (e) => e);
  assert.equal(latePromote?.runStatus, "COMPLETED");
});
