#!/usr/bin/env node
// Throwaway bench: consumes/s and claim+record/s of the Durable Object store under local workerd (npm `workerd`),
// at concurrency 1 and 32, timed from outside (workerd's clock stands still while a request computes).
//   node bench/run.mjs   (from packages/store-cloudflare)
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const bin = createRequire(import.meta.url)('workerd').default;
// BENCH_DIR=/dev/shm keeps the objects' SQLite files in memory (no fsync per commit).
const dir = mkdtempSync(join(process.env.BENCH_DIR ?? tmpdir(), 'mrtr-bench-'));
mkdirSync(join(dir, 'objects'));
await build({
  entryPoints: [fileURLToPath(new URL('./worker.ts', import.meta.url))],
  outfile: join(dir, 'worker.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  conditions: ['@mrtr/source', 'workerd', 'worker', 'browser'],
  logLevel: 'error',
});
const port = 18000 + Math.floor(Math.random() * 2000);
writeFileSync(
  join(dir, 'config.capnp'),
  `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "w", worker = .w), (name = "disk", disk = (path = ${JSON.stringify(join(dir, 'objects'))}, writable = true))],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "w")],
);
const w :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "worker.js")],
  compatibilityDate = "2025-09-01",
  durableObjectNamespaces = [(className = "MrtrStoreObject", uniqueKey = "bench", enableSql = true)],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [(name = "STORE", durableObjectNamespace = "MrtrStoreObject")],
);
`,
);
const child = spawn(bin, ['serve', join(dir, 'config.capnp')], { stdio: 'inherit', detached: true });
const base = `http://127.0.0.1:${port}/`;
try {
  for (let i = 0; i < 100; i++) {
    try {
      await (await fetch(`${base}?n=10`)).text();
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const rows = [];
  for (const op of ['consume', 'claim-record']) {
    for (const c of [1, 32]) {
      const n = Number(process.env.BENCH_N ?? (c === 1 ? 300 : 2_000));
      await (await fetch(`${base}?op=${op}&c=${c}&n=${Math.min(n, 500)}`)).json(); // warm-up
      const rates = [];
      for (let round = 0; round < 3; round++) {
        const t0 = performance.now();
        const result = await (await fetch(`${base}?op=${op}&c=${c}&n=${n}`)).json();
        const ms = performance.now() - t0;
        if (result.wrong !== 0) throw new Error(`${op} c${c}: ${result.wrong} wrong answers`);
        rates.push((n / ms) * 1000);
        console.error(`${op} c${c} round ${round}: ${Math.round((n / ms) * 1000)} ops/s`);
      }
      rates.sort((x, y) => x - y);
      rows.push(
        `| ${op === 'consume' ? 'consume' : 'claim + record'} | ${c} | ${Math.round(rates[1])} | ${Math.round(rates[0])}–${Math.round(rates[2])} |`,
      );
    }
  }
  console.log('| operation | concurrency | ops/s (median of 3) | range |\n| --- | ---: | ---: | --- |');
  console.log(rows.join('\n'));
} finally {
  process.kill(-child.pid, 'SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
