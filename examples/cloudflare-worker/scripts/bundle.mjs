#!/usr/bin/env node
// Bundles the Worker for workerd as wrangler does (one ES module; the packages' web builds through the `workerd`,
// `worker` and `browser` conditions; `cloudflare:*` and Node built-ins left to the runtime, under nodejs_compat).
//   node scripts/bundle.mjs [--source]   → dist/worker.js   (--source: the workspace packages from ./src, no build needed)
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const source = process.argv.includes('--source');
const outfile = fileURLToPath(new URL('../dist/worker.js', import.meta.url));
const result = await build({
  entryPoints: [fileURLToPath(new URL('../src/worker.ts', import.meta.url))],
  outfile,
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  conditions: [...(source ? ['@mrtr/source'] : []), 'workerd', 'worker', 'browser'],
  external: ['cloudflare:*', 'node:*'],
  minify: true,
  metafile: true,
  logLevel: 'error',
  legalComments: 'none',
});
const bytes = Object.values(result.metafile.outputs).reduce((sum, output) => sum + output.bytes, 0);
console.log(`dist/worker.js: ${(bytes / 1024).toFixed(1)} KiB`);
