// Bundles page.jsx for the browser (run by TestUseStreamBrowser after npm ci).
import { build } from "esbuild";
await build({ entryPoints: ["page.jsx"], bundle: true, outfile: "dist/page.js", format: "iife", jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' }, logLevel: "warning" });
