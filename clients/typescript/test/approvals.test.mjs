// The approvals inbox through the client: the caller's calls waiting for
// an answer across sessions, newest first and a page at a time; a call
// left unanswered past --confirmation-ttl is denied as expired, logged,
// listed as expired, and a late answer is a 409.

import assert from "node:assert/strict";
import { test } from "node:test";

import { ReinError } from "../dist/index.js";
import { readUntil, serve } from "./helpers.mjs";

test("listConfirmations pages the inbox; an unanswered call expires", async (t) => {
  const { client } = await serve(t, {}, ["--confirmation-ttl", "1500ms"]);
  const calls = [];
  for (const title of ["first", "second"]) {
    const s = await client.createSession({ title });
    const stream = client.events(s.id);
    const run = await client.send(s.id, "approve this");
    const [req] = (await readUntil(stream, (ev) => ev.type === "session.tool_confirmation_requested")).slice(-1);
    calls.push({ session: s.id, run: run.id, id: req.payload.tool_use_id, stream });
  }

  const page = await client.listConfirmations({ limit: 1 });
  assert.equal(page.confirmations.length, 1);
  assert.ok(page.next);
  const [newest] = page.confirmations;
  assert.equal(newest.tool_use_id, calls[1].id);
  assert.equal(newest.session_id, calls[1].session);
  assert.equal(newest.session_title, "second");
  assert.equal(newest.status, "pending");
  assert.equal(newest.allow, null);
  assert.equal(newest.name, "write_note");
  assert.ok(Date.parse(newest.expires_at) > Date.parse(newest.created_at));
  const rest = await client.listConfirmations({ limit: 1, after: page.next });
  assert.deepEqual(rest.confirmations.map((c) => c.tool_use_id), [calls[0].id]);
  assert.equal(rest.next, null);

  // Nobody answers: both expire, their runs go on with the denial.
  for (const c of calls) {
    const evs = await readUntil(c.stream, (ev) => ev.type === "session.run_completed" && ev.payload.run_id === c.run);
    const expired = evs.filter((e) => e.type === "session.confirmation_expired");
    assert.deepEqual(expired.map((e) => e.payload), [{ run_id: c.run, tool_use_id: c.id }]);
    assert.match(evs.find((e) => e.type === "agent.message").payload.text, /expired/);
  }
  const expired = await client.listConfirmations({ status: "expired" });
  assert.deepEqual(expired.confirmations.map((c) => [c.tool_use_id, c.status, c.allow]), [
    [calls[1].id, "expired", false],
    [calls[0].id, "expired", false],
  ]);
  assert.deepEqual((await client.listConfirmations()).confirmations, []);

  const late = await client.approve(calls[0].session, calls[0].id).then(() => null, (e) => e);
  assert.ok(late instanceof ReinError);
  assert.equal(late.status, 409);

  const bad = await client.listConfirmations({ status: "later" }).then(() => null, (e) => e);
  assert.ok(bad instanceof ReinError);
  assert.equal(bad.status, 400);
  assert.equal(bad.param, "status");
});
