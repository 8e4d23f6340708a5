// The event stream's resume guarantee: through 100 forced disconnects, and
// through a kill -9 of the server and its restart on the same store, the
// iterator delivers every event of the log once, in order.

import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";

import { ReinClient } from "../dist/index.js";
import { assertContiguous, cuttingProxy, median, prng, readLog, serve, startServe, tempDir } from "./helpers.mjs";

const cutsWanted = 100;

test(`${cutsWanted} forced disconnects: 0 events lost, 0 duplicated`, async (t) => {
  const { proc, client: direct } = await serve(t);
  const s = await direct.createSession();
  // A backlog first, so that most cuts land where events are waiting and
  // the time to resume is the reconnection's alone.
  const warm = await direct.send(s.id, "many first");
  await warm.done();

  const rand = prng(23);
  // 350 to 1500 bytes of the answer per connection: the headers and one to
  // a few events, cut anywhere, mid-frame included.
  const proxy = await cuttingProxy(new URL(proc.url), { budget: () => 350 + Math.floor(rand() * 1150) });
  t.after(() => proxy.close());
  const client = new ReinClient({ baseUrl: proxy.url, reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });

  const got = [];
  const resume = [];
  const resumeWithBacklog = [];
  let cutsSeen = 0;
  let pending = null;
  let sent = 1;
  for await (const ev of client.events(s.id)) {
    if (proxy.state.cuts > cutsSeen) {
      const took = performance.now() - proxy.state.lastCutAt;
      resume.push(took);
      // The event was in the log before the cut: the wait was the
      // reconnection's, not the model's.
      if (Date.parse(ev.created_at) <= proxy.state.lastCutWall) resumeWithBacklog.push(took);
      cutsSeen = proxy.state.cuts;
    }
    got.push(ev);
    if (ev.type !== "session.run_completed") continue;
    if (pending !== null && ev.payload.run_id !== pending) continue;
    if (proxy.state.cuts >= cutsWanted) break;
    // Live runs while the cuts go on: the seam between replay and live is
    // crossed again and again.
    pending = (await direct.send(s.id, `many more ${sent++}`)).id;
  }

  const log = await readLog(direct, s.id);
  const seqs = got.map((e) => e.seq);
  const dup = seqs.length - new Set(seqs).size;
  const lost = log.filter((e) => e.seq <= got.at(-1).seq && !seqs.includes(e.seq)).length;
  const line =
    `reconnect: ${proxy.state.cuts} forced disconnects, ${got.length} events, lost ${lost}, duplicated ${dup}; ` +
    `time to resume (cut → next event) median ${median(resumeWithBacklog).toFixed(2)} ms over ${resumeWithBacklog.length} cuts with events waiting ` +
    `(all ${resume.length} resumes: median ${median(resume).toFixed(2)} ms)`;
  console.log(line);
  assert.ok(proxy.state.cuts >= cutsWanted, `only ${proxy.state.cuts} cuts`);
  assert.equal(lost, 0);
  assert.equal(dup, 0);
  assertContiguous(assert, got);
  assert.deepEqual(got, log.slice(0, got.length), "what the stream delivered differs from the log");
  assert.ok(resumeWithBacklog.length >= cutsWanted / 4, `only ${resumeWithBacklog.length} cuts had events waiting`);
});

test("kill -9 of the server mid-stream, restart on the same store: the iterator resumes with no gap and no duplicate", async (t) => {
  const dir = tempDir(t);
  const store = "sqlite:" + path.join(dir, "rein.db");
  const workspace = path.join(dir, "workspace");
  const a = await startServe(t, { store, workspace });
  const client = new ReinClient({ baseUrl: a.url, reconnect: { initialDelayMs: 50, maxDelayMs: 250 } });
  const s = await client.createSession();
  const run = await client.send(s.id, "stream through a crash");

  const got = [];
  let restarted = null;
  let deltasBefore = 0;
  for await (const ev of client.events(s.id)) {
    got.push(ev);
    if (restarted === null && ev.type === "agent.message.delta" && ++deltasBefore === 10) {
      // Mid-stream: the model request is in flight, the iterator is
      // waiting on a live connection.
      await a.kill();
      // Same address, so the same client resumes; the new process takes
      // the run over once the killed one's lease (1 s) has expired.
      restarted = await startServe(t, { store, workspace, addr: `127.0.0.1:${a.port}` });
    }
    if (ev.type === "session.run_completed" && ev.payload.run_id === run.id) break;
  }
  assert.ok(restarted, "the run ended before the kill");

  const log = await readLog(client, s.id);
  assertContiguous(assert, got);
  assert.deepEqual(got, log.slice(0, got.length), "what the stream delivered differs from the log");
  assert.equal(got.at(-1).seq, log.at(-1).seq);
  const end = got.at(-1);
  assert.equal(end.payload.status, "COMPLETED", JSON.stringify(end.payload));
  // The step cut by the kill was made again; its deltas after the restart
  // mark spell the final reply.
  const restart = got.findLastIndex((e) => e.type === "agent.step_restarted");
  assert.ok(restart > 0, "no agent.step_restarted");
  const text = got
    .slice(restart)
    .filter((e) => e.type === "agent.message.delta")
    .map((e) => e.payload.text)
    .join("");
  const final = got.find((e) => e.type === "agent.message");
  assert.equal(text, final.payload.text);
  assert.match(final.payload.text, /^stream through a crash: one two/);
  assert.equal((await run.done()).seq, end.seq);
});
