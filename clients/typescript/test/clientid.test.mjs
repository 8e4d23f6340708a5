// A stop by the client id of a message: the stop a UI sends when its user
// presses stop before the message's run id is known.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ReinError } from "../dist/index.js";
import { readLog, serve } from "./helpers.mjs";

test("a stop by client id before its message arrives ends that message's run as it arrives", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const early = await client.stop(s.id, { clientId: "msg-early" });
  assert.deepEqual(early, { accepted: true, run_id: null });

  const run = await client.send(s.id, "hello, stopped in advance", { clientId: "msg-early" });
  assert.equal(run.status, "CANCELLED");
  const end = await run.done();
  assert.equal(end.payload.status, "CANCELLED");
  assert.equal(end.payload.reason, "cancelled");
  const log = await readLog(client, s.id);
  const mine = log.filter((e) => e.run_id === run.id).map((e) => e.type);
  assert.deepEqual(mine, ["user.message", "session.run_completed"]);
  const ui = log.find((e) => e.type === "user.interrupt");
  assert.equal(ui.payload.client_id, "msg-early");
  assert.equal(ui.payload.run_id, null);
});

test("a stop by client id stops that message's run, running or queued, and nothing else", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const running = await client.send(s.id, "slow running", { clientId: "msg-1" });
  const queued = await client.send(s.id, "hello queued", { clientId: "msg-2", whenBusy: "enqueue" });
  assert.equal(queued.status, "QUEUED");

  assert.deepEqual(await client.stop(s.id, { clientId: "msg-2" }), { accepted: true, run_id: queued.id });
  assert.equal((await queued.done()).payload.status, "CANCELLED");
  assert.equal((await running.info()).status, "RUNNING");

  assert.deepEqual(await client.stop(s.id, { clientId: "msg-1", mode: "interrupt" }), { accepted: true, run_id: running.id });
  const end = await running.done();
  assert.equal(end.payload.reason, "interrupted");
  // An ended run's client id: nothing to stop.
  assert.equal((await client.stop(s.id, { clientId: "msg-1" })).accepted, false);

  const both = await client.stop(s.id, { clientId: "msg-1", runId: running.id }).then(() => null, (e) => e);
  assert.ok(both instanceof ReinError);
  assert.equal(both.status, 400);
  assert.match(both.param ?? "", /^events\[0\]\.payload\.(client_id|run_id)$/);
});
