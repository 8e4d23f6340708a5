// node --test: the LangGraph.js peer runs every workload of the harness to
// its checks (replies, tool calls, the abort ending each stopped run) at
// small sizes, and prints one result line like the Go peers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const main = fileURLToPath(new URL("./main.mjs", import.meta.url));
const run = (workload) =>
  JSON.parse(execFileSync(process.execPath, ["--expose-gc", main, "-workload", workload, "-n", "6", "-round", "2", "-wait-timeout", "1m0s"], { encoding: "utf8" }));

for (const workload of ["instant", "tool_stream", "cancel_stream", "blocked"]) {
  test(workload, () => {
    const r = run(workload);
    assert.equal(r.peer, "langgraph");
    assert.equal(r.workload, workload);
    assert.equal(r.n, 6);
    assert.equal(r.round, 2);
    assert.match(r.version, /^1\.7\.3 /);
    assert.equal(r.unsupported, undefined);
    const keys = workload === "blocked" ? ["heap_stack_per_run_b", "start_per_run_us"] : ["p50_us", "p99_us"];
    for (const k of keys) assert.ok(r.metrics[k] > 0, `${k} = ${r.metrics[k]}`);
  });
}

for (const workload of ["stop_blocked", "durable_stream"]) {
  test(`${workload} is reported unsupported`, () => {
    const r = run(workload);
    assert.match(r.unsupported, /^not supported: /);
    assert.equal(r.metrics, undefined);
  });
}

test("an unknown workload fails", () => {
  assert.throws(() => run("nap"), /unknown workload "nap"/);
});
