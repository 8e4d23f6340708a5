// The library runs in browsers as it is: its modules import only each
// other (no Node built-in, no package), and its sources compile without
// Node's type declarations (tsconfig "types": []), so `process`, `Buffer`
// or `require` in src/ fail the build.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");

test("dist imports only its own modules, and the build uses no Node types", () => {
  const dist = path.join(root, "dist");
  const files = readdirSync(dist).filter((f) => f.endsWith(".js"));
  assert.ok(files.includes("index.js"));
  for (const f of files) {
    const src = readFileSync(path.join(dist, f), "utf8");
    for (const m of src.matchAll(/\b(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']|\bimport\s*\(\s*["']([^"']+)["']/g)) {
      const spec = m[1] ?? m[2];
      assert.match(spec, /^\.\/[\w.-]+\.js$/, `${f} imports ${spec}`);
    }
  }
  const tsconfig = JSON.parse(readFileSync(path.join(root, "tsconfig.json"), "utf8"));
  assert.deepEqual(tsconfig.compilerOptions.types, []);
  const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
  assert.equal(pkg.dependencies, undefined, "the client has no runtime dependencies");
  assert.deepEqual(Object.keys(pkg.devDependencies), ["typescript"]);
  assert.match(pkg.devDependencies.typescript, /^\d+\.\d+\.\d+$/, "typescript is pinned exactly");
});
