// The client against a real `rein serve`: sessions, a run streamed to its
// end, a queued message, stops, a note, a confirmation, errors, aborts,
// caller-chosen ids, titles and the paged list.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { ReinClient, ReinError } from "../dist/index.js";
import { assertContiguous, readLog, readUntil, serve, tempDir } from "./helpers.mjs";

const completedOf = (runId) => (ev) => ev.type === "session.run_completed" && ev.payload.run_id === runId;

test("create, send, stream a run to its end, read it back, delete", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession({ metadata: { project: "ts" }, system: "be brief", title: "first" });
  assert.match(s.id, /^ses_/);
  assert.equal(s.title, "first");
  assert.deepEqual(s.metadata, { project: "ts" });
  assert.equal(s.agent, "default");

  const stream = client.events(s.id);
  const run = await client.send(s.id, "hello typescript");
  assert.match(run.id, /^run_/);
  assert.ok(["RUNNING", "QUEUED"].includes(run.status), run.status);

  const evs = await readUntil(stream, completedOf(run.id));
  assertContiguous(assert, evs);
  assert.equal(stream.lastSeq, evs.at(-1).seq);
  const types = evs.map((e) => e.type);
  assert.equal(types[0], "user.message");
  assert.ok(types.includes("session.run_started"), types.join(","));
  const deltas = evs.filter((e) => e.type === "agent.message.delta").map((e) => e.payload.text).join("");
  const final = evs.find((e) => e.type === "agent.message");
  assert.equal(final.payload.text, "hi there, hello typescript");
  assert.equal(deltas, final.payload.text);

  const end = await run.done();
  assert.equal(end.type, "session.run_completed");
  assert.equal(end.payload.status, "COMPLETED");
  assert.equal(end.payload.reason, "stop");
  assert.equal(end.seq, evs.at(-1).seq);

  const info = await run.info();
  assert.equal(info.status, "COMPLETED");
  const runs = await client.listRuns(s.id);
  assert.deepEqual(runs.map((r) => r.run_id), [run.id]);
  assert.deepEqual((await client.getRun(s.id, run.id)).run_id, run.id);

  const page = await client.listEvents(s.id, { after: 1, limit: 2 });
  assert.deepEqual(page.events.map((e) => e.seq), [2, 3]);
  assert.equal(page.last_seq, evs.at(-1).seq);
  assert.deepEqual(await readLog(client, s.id), evs);

  const detail = await client.getSession(s.id);
  assert.equal(detail.state, "idle");
  assert.equal(detail.current_run_id, null);
  assert.deepEqual(detail.pending_confirmations, []);
  assert.equal(detail.last_seq, evs.at(-1).seq);
  const list = await client.listSessions();
  assert.ok(list.sessions.some((x) => x.id === s.id));

  await client.setSystem(s.id, "be verbose");
  const sys = (await readLog(client, s.id)).at(-1);
  assert.equal(sys.type, "system.message");
  assert.equal(sys.payload.text, "be verbose");

  await client.deleteSession(s.id);
  await assert.rejects(client.getSession(s.id), (e) => e instanceof ReinError && e.status === 404 && e.code === "not_found");
});

test("a second message queues; reject names the busy run; stop by run id; interrupt", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const first = await client.send(s.id, "slow one");
  assert.equal(first.status, "RUNNING");

  const busy = await client.send(s.id, "hello again").then(
    () => assert.fail("a second message with when_busy reject was accepted"),
    (e) => e,
  );
  assert.ok(busy instanceof ReinError, String(busy));
  assert.equal(busy.status, 409);
  assert.equal(busy.code, "session_busy");
  assert.equal(busy.runId, first.id);

  const second = await client.send(s.id, "hello queued", { whenBusy: "enqueue", clientId: "msg-2" });
  assert.equal(second.status, "QUEUED");
  // A repeat of the client id starts nothing and answers the same run.
  const again = await client.send(s.id, "hello queued", { whenBusy: "enqueue", clientId: "msg-2" });
  assert.equal(again.id, second.id);

  const detail = await client.getSession(s.id);
  assert.equal(detail.current_run_id, first.id);
  assert.deepEqual(detail.queued_run_ids, [second.id]);

  const stopped = await first.stop();
  assert.deepEqual(stopped, { accepted: true, run_id: first.id });
  const end1 = await first.done();
  assert.equal(end1.payload.status, "CANCELLED");
  assert.equal(end1.payload.reason, "cancelled");
  // A second stop of an ended run touches nothing.
  assert.equal((await first.stop()).accepted, false);

  const end2 = await second.done();
  assert.equal(end2.payload.status, "COMPLETED");
  assert.ok(end2.seq > end1.seq);
  const runEvents = [];
  for await (const ev of second.events()) runEvents.push(ev);
  assert.equal(runEvents.at(-1).seq, end2.seq);
  assert.ok(runEvents.every((e) => e.run_id === second.id));
  assert.equal(runEvents.find((e) => e.type === "agent.message").payload.text, "hi there, hello queued");

  const third = await client.send(s.id, "slow three");
  const stream = client.events(s.id, { after: end2.seq });
  await readUntil(stream, (ev) => ev.type === "agent.message.delta" && ev.run_id === third.id);
  const intr = await third.interrupt({ message: "enough" });
  assert.equal(intr.accepted, true);
  const end3 = await third.done();
  assert.equal(end3.payload.status, "COMPLETED");
  assert.equal(end3.payload.reason, "interrupted");
  const log = await readLog(client, s.id);
  const ui = log.filter((e) => e.type === "user.interrupt" && e.payload.run_id === third.id);
  assert.equal(ui.length, 1);
  assert.equal(ui[0].payload.mode, "interrupt");
  assert.equal(ui[0].payload.message, "enough");
});

test("a note pushed during step 1 is consumed by step 2's request", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const stream = client.events(s.id);
  const run = await client.send(s.id, "note the units");
  await readUntil(stream, (ev) => ev.type === "agent.message.delta" && ev.payload.step === 1);
  const note = await client.note(s.id, "use metric units", { id: "note-1" });
  assert.deepEqual(note, { supplement_id: "note-1", status: "queued" });

  const evs = await readUntil(stream, completedOf(run.id));
  const consumed = evs.find((e) => e.type === "agent.supplement_consumed");
  assert.ok(consumed, "no agent.supplement_consumed");
  assert.equal(consumed.payload.supplement_id, "note-1");
  assert.equal(consumed.payload.run_id, run.id);
  assert.equal(consumed.payload.step, 2);
  assert.equal(evs.find((e) => e.type === "agent.message").payload.text, "hints: use metric units");
  // A repeat of the note's id adds nothing and answers its status.
  assert.deepEqual(await client.note(s.id, "use metric units", { id: "note-1" }), { supplement_id: "note-1", status: "consumed" });
  const log = await readLog(client, s.id);
  assert.equal(log.filter((e) => e.type === "user.supplement").length, 1);
});

test("a tool call waits for its confirmation; allowed, it runs once", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const stream = client.events(s.id);
  const run = await client.send(s.id, "approve this");
  const [req] = (await readUntil(stream, (ev) => ev.type === "session.tool_confirmation_requested")).slice(-1);
  assert.equal(req.payload.name, "write_note");
  assert.equal(req.payload.run_id, run.id);
  const detail = await client.getSession(s.id);
  assert.equal(detail.state, "busy");
  assert.deepEqual(detail.pending_confirmations.map((p) => p.tool_use_id), [req.payload.tool_use_id]);

  assert.deepEqual(await client.approve(s.id, req.payload.tool_use_id), { tool_use_id: req.payload.tool_use_id, allow: true });
  const end = await run.done();
  assert.equal(end.payload.status, "COMPLETED");
  const evs = await readUntil(stream, completedOf(run.id));
  const results = evs.filter((e) => e.type === "agent.tool_result");
  assert.equal(results.length, 1);
  assert.equal(results[0].payload.is_error, false);
  assert.match(evs.find((e) => e.type === "agent.message").payload.text, /^after the note: note saved/);

  const twice = await client.approve(s.id, req.payload.tool_use_id).then(() => null, (e) => e);
  assert.ok(twice instanceof ReinError);
  assert.equal(twice.status, 409);
  assert.equal(twice.code, "conflict");
  const unknown = await client.deny(s.id, "call_nope", "no").then(() => null, (e) => e);
  assert.equal(unknown?.status, 404);
});

test("bad input is a 400 naming the field; nothing is applied", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const e1 = await client.send(s.id, "hello", { timeoutS: -1 }).then(() => null, (e) => e);
  assert.ok(e1 instanceof ReinError);
  assert.equal(e1.status, 400);
  assert.equal(e1.code, "invalid_argument");
  assert.equal(e1.param, "events[0].payload.timeout_s");
  assert.ok(e1.requestId);

  const e2 = await client.stop(s.id, { runId: "" }).then(() => null, (e) => e);
  assert.equal(e2?.param, "events[0].payload.run_id");
  const e3 = await client.send(s.id, "").then(() => null, (e) => e);
  assert.equal(e3?.param, "events[0].payload.text");
  const e4 = await client.createSession({ agent: "nobody" }).then(() => null, (e) => e);
  assert.equal(e4?.param, "agent");
  const e5 = await client.listEvents(s.id, { limit: 0 }).then(() => null, (e) => e);
  assert.equal(e5?.status, 400);

  // A batch that fails on its second event carries the first's result.
  const e6 = await client
    .postEvents(s.id, [
      { type: "user.supplement", payload: { text: "first", id: "n-batch" } },
      { type: "user.tool_confirmation", payload: { tool_use_id: "call_unknown", allow: true } },
    ])
    .then(() => null, (e) => e);
  assert.equal(e6?.status, 404);
  assert.deepEqual(e6?.results, [{ supplement_id: "n-batch", status: "queued" }]);

  assert.deepEqual((await client.getSession(s.id)).last_seq, 1, "only the batch's applied supplement is logged");
  await assert.rejects(client.getSession("ses_missing"), (e) => e.status === 404);
  const bad = new ReinClient({ baseUrl: "http://127.0.0.1:1" });
  await assert.rejects(bad.getSession("x"), (e) => !(e instanceof ReinError));
});

test("an AbortSignal ends a call and an event stream; aborting stops no run", async (t) => {
  const { client } = await serve(t);
  const s = await client.createSession();
  const aborted = AbortSignal.abort();
  await assert.rejects(client.getSession(s.id, { signal: aborted }), (e) => e.name === "AbortError");
  await assert.rejects(client.send(s.id, "hello", { signal: aborted }), (e) => e.name === "AbortError");

  const ac = new AbortController();
  const run = await client.send(s.id, "slow but not stopped");
  const seen = [];
  const loop = (async () => {
    for await (const ev of client.events(s.id, { signal: ac.signal })) {
      seen.push(ev);
      if (ev.type === "agent.message.delta") ac.abort();
    }
  })();
  await assert.rejects(loop, (e) => e.name === "AbortError");
  assert.ok(seen.some((e) => e.type === "agent.message.delta"));
  // The run goes on: a stream is an observer.
  assert.equal((await run.info()).status, "RUNNING");

  // close() ends an iteration without an error.
  const stream = client.events(s.id);
  const closed = (async () => {
    let n = 0;
    for await (const ev of stream) {
      n++;
      if (ev.type === "agent.message.delta") stream.close();
    }
    return n;
  })();
  assert.ok((await closed) > 0);
  assert.equal((await run.stop()).accepted, true);
  // done() of an unknown run is a 404, not a wait forever.
  await assert.rejects(client.run(s.id, "run_unknown").done(), (e) => e.status === 404);
});

test("caller-chosen ids are idempotent per owner; titles; PATCH; the paged list", async (t) => {
  const tokens = path.join(tempDir(t), "tokens");
  writeFileSync(tokens, "tok-alice-123456 alice\ntok-bob-12345678 bob\n");
  const { proc, client: alice } = await serve(t, { token: "tok-alice-123456" }, ["--tokens", tokens]);
  const bob = new ReinClient({ baseUrl: proc.url, token: "tok-bob-12345678" });

  const s = await alice.createSession({ id: "ticket:4711", title: "Refund for order 4711", metadata: { customer: "c_93" } });
  assert.equal(s.id, "ticket:4711");
  assert.equal(s.title, "Refund for order 4711");
  // Again: the same session, unchanged (the other fields are not applied).
  const again = await alice.createSession({ id: "ticket:4711", title: "other" });
  assert.equal(again.created_at, s.created_at);
  assert.equal(again.title, "Refund for order 4711");
  // Another owner's id: a conflict that says nothing else; the session stays invisible to bob.
  const clash = await bob.createSession({ id: "ticket:4711" }).then(() => null, (e) => e);
  assert.equal(clash?.status, 409);
  assert.equal(clash?.code, "conflict");
  await assert.rejects(bob.getSession("ticket:4711"), (e) => e.status === 404);
  const bad = await alice.createSession({ id: "no spaces" }).then(() => null, (e) => e);
  assert.equal(bad?.param, "id");

  const patched = await alice.updateSession(s.id, { title: "Refund approved", metadata: { customer: "c_93", stage: "done" } });
  assert.equal(patched.title, "Refund approved");
  assert.deepEqual(patched.metadata, { customer: "c_93", stage: "done" });
  assert.equal(patched.state, "idle");

  // Untitled: the first message's first line names it.
  const u = await alice.createSession();
  assert.equal(u.title, null);
  await (await alice.send(u.id, "hello from a list\nsecond line")).done();
  assert.equal((await alice.getSession(u.id)).title, "hello from a list");

  const third = await alice.createSession({ id: "third" });
  const first = await alice.listSessions({ limit: 2 });
  assert.deepEqual(first.sessions.map((x) => x.id), [third.id, u.id]);
  assert.ok(first.next);
  const second = await alice.listSessions({ limit: 2, after: first.next });
  assert.deepEqual(second.sessions.map((x) => x.id), [s.id]);
  assert.equal(second.next, null);
  const item = first.sessions[1];
  assert.equal(item.state, "idle");
  assert.equal(item.pending_confirmations, 0);
  assert.ok(item.last_event_at);
  const all = [];
  for await (const x of alice.sessions({ pageSize: 1 })) all.push(x.id);
  assert.deepEqual(all, [third.id, u.id, s.id]);
  assert.deepEqual((await bob.listSessions()).sessions, []);
});
