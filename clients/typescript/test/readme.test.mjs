// The README's complete example, run as written against a real server:
// the README must not show code that does not work.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { serve } from "./helpers.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));

test("the README's complete example runs", async (t) => {
  const readme = readFileSync(path.join(here, "..", "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## A complete example"));
  const m = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(m, "no ts block under ## A complete example");
  const { proc, dir } = await serve(t);
  const dist = pathToFileURL(path.join(here, "..", "dist", "index.js")).href;
  const code = m[1].replace(`"@reinhq/client"`, JSON.stringify(dist)).replace(`"http://127.0.0.1:8080"`, JSON.stringify(proc.url));
  assert.notEqual(code, m[1]);
  const file = path.join(dir, "example.mjs");
  writeFileSync(file, code);
  const out = await new Promise((resolve, reject) =>
    execFile(process.execPath, [file], { timeout: 60000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stdout}\n${stderr}`)) : resolve(stdout),
    ),
  );
  for (const want of [
    /\[approving write_note \{"text":"trip notes"\}\]/,
    /\[note note-1 read at step 2\]/,
    /Noted \(note saved/,
    /hints: Use metric units\./,
    // The printer and the main flow interleave: no line anchors.
    /first run: COMPLETED \(stop\)/,
    /queued: QUEUED/,
    /busy with run_\w+/,
    /long run: interrupted, queued run: CANCELLED/,
    /stopped by client id: CANCELLED/,
  ]) {
    assert.match(out, want);
  }
});
