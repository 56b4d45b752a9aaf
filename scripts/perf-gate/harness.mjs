// Shared by the perf-gate workloads (scripts/perf-gate.mjs runs each under `valgrind --tool=callgrind`).
//
// A workload measures its paths one after the other in one process. For each path it runs `warmup` operations
// (JIT tiering, inline caches, lazily built tables), then calls `mark()`, runs `iterations` operations, and calls
// `mark()` again. `mark()` calls `os.loadavg()`, that is libuv's `uv_loadavg`, a C function nothing else in these
// programs calls: callgrind runs with `--dump-before=uv_loadavg`, so every mark writes one profile part holding
// the instructions executed since the previous mark. The part that ends at a path's second mark is that path's
// measured interval; the start-up of Node, module loading and the warm-up fall into other parts and never count.
// At exit the workload prints `{ marks, paths: [{ name, iterations, part }] }` on stdout, and the gate checks that
// callgrind wrote exactly `marks` parts before the exit dump (nothing else triggered a dump).
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** A setting of the gate's workloads (not a turbo task, so none of these belong in turbo.json). */
export const setting = (name) => process.env[name];

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

let marks = 0;
/** Ends the current callgrind interval (see the top of this file). Returns the number of the part it ends. */
export function mark() {
  loadavg();
  marks += 1;
  return marks;
}

const results = [];
/** `gc()`, exposed by `--expose-gc` (the gate runs every workload with it). */
const collect = typeof globalThis.gc === 'function' ? globalThis.gc : () => {};

/**
 * Under the gate (PERF_GATE_VGDB=1), callgrind starts with its instrumentation off (`--instr-atstart=no`): Node's
 * start-up, module loading, set-up and warm-ups run at the speed of valgrind without a tool, several times faster.
 * `instrument(true)` turns it on before a measured interval and `instrument(false)` off after it, with valgrind's
 * `vgdb` monitor command `instrumentation on|off`. vgdb runs as a child process; this process keeps running
 * JavaScript (turns of the event loop) until it exits, because valgrind reads vgdb's command while the program
 * runs (every few thousand blocks): vgdb gets `--max-invoke-ms=0`, so it never needs ptrace to wake a blocked
 * process. Outside the gate (a plain `node` run of a workload) it does nothing.
 */
async function instrument(on) {
  if (setting('PERF_GATE_VGDB') !== '1') return;
  const args = [`--pid=${process.pid}`, '--max-invoke-ms=0', 'instrumentation', on ? 'on' : 'off'];
  const child = spawn('vgdb', args, { stdio: ['ignore', 'ignore', 'inherit'] });
  let exit;
  child.on('exit', (code, signal) => (exit = { code, signal }));
  child.on('error', (error) => (exit = { error }));
  while (exit === undefined) await new Promise((resolve) => setImmediate(resolve));
  if (exit.code !== 0) throw new Error(`perf-gate: vgdb instrumentation ${on ? 'on' : 'off'} failed: ${JSON.stringify(exit)}`);
}

/**
 * Runs `op(i)` `warmup` times, then `iterations` times between two marks. `i` counts on across both (0 …
 * warmup + iterations − 1), so an operation that needs a fresh input per call (a single-use token) takes input `i`.
 * A promise is awaited; a synchronous result is not (no microtask is added to a synchronous path).
 */
export async function measure(name, { warmup, iterations }, op) {
  let i = 0;
  for (; i < warmup; i++) {
    const r = op(i);
    if (r !== null && typeof r === 'object' && typeof r.then === 'function') await r;
  }
  await instrument(true);
  // A full collection first, so the interval starts on an empty young generation and a settled old one: what it
  // collects is what its own operations allocated, not garbage left by the warm-up or an earlier path.
  collect();
  mark();
  for (const end = warmup + iterations; i < end; i++) {
    const r = op(i);
    if (r !== null && typeof r === 'object' && typeof r.then === 'function') await r;
  }
  const part = mark();
  await instrument(false);
  results.push({ name, iterations, part });
}

/**
 * A workload's counts for `measure`. PERF_GATE_COUNTS=warmup:iterations replaces every path's counts: for choosing them (per-operation counts that
 * no longer move as either grows), never for the gate itself (scripts/perf-gate.mjs clears it).
 */
export function counts(warmup, iterations) {
  const text = setting('PERF_GATE_COUNTS');
  if (text === undefined || text === '') return { warmup, iterations };
  const [w, n] = text.split(':').map(Number);
  if (!Number.isInteger(w) || !Number.isInteger(n) || w < 0 || n < 1) {
    throw new RangeError(`PERF_GATE_COUNTS must be warmup:iterations (got ${text})`);
  }
  return { warmup: w, iterations: n };
}

/** Prints what the gate reads (call once, last). */
export function report() {
  process.stdout.write(`${JSON.stringify({ marks, paths: results })}\n`);
}

/** The paths a workload should measure: all of them, or those named in PERF_GATE_PATHS (comma-separated). */
export function wanted(name) {
  const only = setting('PERF_GATE_PATHS');
  return only === undefined || only === '' || only.split(',').includes(name);
}

/**
 * The URL of a package's ES module entry as Node resolves it from `fromDir` (the `node`, `import` and `default`
 * conditions of its `exports`, in their order). The workloads live outside the workspace packages, so they resolve
 * each dependency from the package that uses it (the SDK from packages/mcp-server), as that package does.
 */
export function resolveFrom(fromDir, specifier) {
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  const subpath = `.${specifier.slice(name.length)}`;
  const dir = join(ROOT, fromDir, 'node_modules', name);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const pick = (target) => {
    if (typeof target === 'string') return target;
    if (target === null || typeof target !== 'object') return undefined;
    for (const [condition, value] of Object.entries(target)) {
      if (condition === 'node' || condition === 'import' || condition === 'default') {
        const found = pick(value);
        if (found !== undefined) return found;
      }
    }
    return undefined;
  };
  const field = manifest.exports;
  // `exports` is either a map of subpaths ("." …) or, for a package with one entry, that entry's conditions.
  const bySubpath = field !== null && typeof field === 'object' && Object.keys(field).some((key) => key.startsWith('.'));
  const target = pick(bySubpath ? field[subpath] : subpath === '.' ? field : undefined);
  if (target === undefined) throw new Error(`perf-gate: cannot resolve ${specifier} from ${fromDir}`);
  return pathToFileURL(join(dir, target)).href;
}

/** A workspace package's built ES module entry (its `node` build where it has one), e.g. `pkg('core')`. */
export function pkg(name, entry = 'index.js') {
  return pathToFileURL(join(ROOT, 'packages', name, 'dist', entry)).href;
}

/** Fixed inputs: the same key bytes, clock and request in every run, so the work per operation is the same. */
export const FIXED_NOW = Date.UTC(2026, 0, 1);
export const now = () => FIXED_NOW;
export const secret = (label) => new Uint8Array(createHash('sha256').update(`perf-gate ${label}`).digest());
export const AUDIENCE = 'https://files.example/mcp';
export const PRINCIPAL = 'user-7f3a9c2e@example.com';
/** A `delete_files` confirmation round (about 400 bytes of data, 100 of arguments, as the bench's smallest guard row). */
export const REQUEST = {
  method: 'tools/call',
  target: 'delete_files',
  arguments: { paths: ['/srv/app/tmp/cache-1', '/srv/app/tmp/cache-2'], recursive: true, dryRun: false },
  principal: PRINCIPAL,
};
export const DATA = {
  step: 1,
  args: { paths: ['/srv/app/tmp/cache-1', '/srv/app/tmp/cache-2'] },
  answers: { confirm: true, reason: 'cleanup' },
  pad: Array.from({ length: 6 }, (_, i) => `/srv/app/data/project-${String(i).padStart(4, '0')}/build/artifact.bin`),
};
export const ANSWERS = { confirm: { action: 'accept', content: { ok: true } } };
export const OUTCOME = { content: [{ type: 'text', text: 'Deleted /srv/app/tmp/cache-1 and /srv/app/tmp/cache-2' }] };
/** Guard options that keep background work out of the measured intervals (no clock re-measure, no lease renewal). */
export const QUIET = { now, clockCheckMs: 0, leaseMs: 2 ** 31 - 1 };
