// The self-test's deliberate slowdown (`node scripts/perf-gate.mjs --self-test`); the gate itself never loads it.
//
// The self-test copies packages/core (its package.json and dist) to a temporary directory and patches the copy:
// the guard's `open` runs `perfGateSpin(k)` first, k chosen so that this adds about a fifth to an open. Loaded with
// `node --import <this file>` and PERF_GATE_CORE_COPY=<the copy>, this file registers a resolve hook (module.register)
// that sends every import of packages/core to the copy, the ones from @mrtr/codec-hmac and @mrtr/store-memory
// included, so the process holds one core, the patched one. Nothing in the packages reads a switch for this.
import { cpSync, mkdtempSync, readdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { register } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isMainThread } from 'node:worker_threads';
import { setting } from './harness.mjs';

/** Rounds per operation of the self-test's spin workload (scripts/perf-gate/spin.mjs). */
export const SPIN_ROUNDS = 10_000;

/** The extra work: `n` rounds of FNV-style mixing, kept alive through a property so the JIT cannot drop it. */
export function perfGateSpin(n) {
  let h = 0x811c9dc5;
  for (let i = 0; i < n; i++) h = Math.imul(h ^ i, 16777619);
  perfGateSpin.sink = h;
}

/**
 * Copies `coreDir` (a built packages/core) to a new temporary directory with `perfGateSpin(spins)` at the start of
 * the guard's `open` (the `open: (token, request) => …` of the object `createStateGuard` returns). Returns the copy.
 */
export function patchedCoreCopy(coreDir, spins) {
  const copy = mkdtempSync(join(tmpdir(), 'perf-gate-core-'));
  cpSync(join(coreDir, 'package.json'), join(copy, 'package.json'));
  cpSync(join(coreDir, 'dist'), join(copy, 'dist'), { recursive: true });
  const dist = join(copy, 'dist');
  const files = readdirSync(dist).filter(
    (f) => f.endsWith('.js') && readFileSync(join(dist, f), 'utf8').includes('function createStateGuard('),
  );
  if (files.length !== 1) throw new Error(`perf-gate self-test: expected one dist file defining createStateGuard, found ${files.length}`);
  const file = join(dist, files[0]);
  const text = readFileSync(file, 'utf8');
  const start = text.indexOf('function createStateGuard(');
  // The guard's `open`: an arrow property `open: (token, request) => <call>,`.
  const arrow = /\n([ \t]+)open: \(([\w$]+), ([\w$]+)\) => ([^\n]*),\n/g;
  arrow.lastIndex = start;
  const found = arrow.exec(text);
  if (found === null) {
    throw new Error(`perf-gate self-test: no \`open: (token, request) => …,\` after createStateGuard in ${files[0]}: update the anchor`);
  }
  const line = `\n${found[1]}open: (${found[2]}, ${found[3]}) => (perfGateSpin(${spins}), ${found[4]}),\n`;
  const patched = `${text.slice(0, found.index)}${line}${text.slice(found.index + found[0].length)}\n${perfGateSpin.toString()}\n`;
  writeFileSync(file, patched);
  return copy;
}

// Under `--import`: the resolve hook, registered from the main thread (the hooks run on their own thread, where
// this file is loaded again as the hooks module).
const copyDir = setting('PERF_GATE_CORE_COPY');
if (isMainThread && copyDir) {
  // Resolved URLs are real paths: compare real paths.
  const from = `${pathToFileURL(realpathSync(fileURLToPath(new URL('../../packages/core', import.meta.url)))).href}/`;
  const to = `${pathToFileURL(realpathSync(copyDir)).href}/`;
  register(import.meta.url, { data: { from, to } });
}

let redirect;
export function initialize(data) {
  redirect = data;
}
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (redirect !== undefined && resolved.url.startsWith(redirect.from)) {
    return { ...resolved, url: redirect.to + resolved.url.slice(redirect.from.length) };
  }
  return resolved;
}
