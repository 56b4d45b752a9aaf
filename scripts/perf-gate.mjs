#!/usr/bin/env node
// Performance gate: instructions per operation of the hot paths, counted by callgrind, against a committed baseline.
//
//   node scripts/perf-gate.mjs                          measure, compare with scripts/perf-gate.baseline.json; exit 1
//                                                       when a path costs more than 10 % over its baseline
//   node scripts/perf-gate.mjs --update --reason "…"    measure and rewrite the baseline (commit it with the change)
//   node scripts/perf-gate.mjs --self-test              prove the gate bites: a copy of the built core with a ~20 %
//                                                       slowdown in the guard's open must fail it
//   --only a,b   only these paths (comparison only; --update needs them all)    --jobs N   parallel valgrinds (default 2)
//
// Needs `pnpm build` first (the workloads load the packages' dist) and valgrind on PATH.
//
// How a path is measured (see scripts/perf-gate/harness.mjs): each workload (scripts/perf-gate/*.mjs) runs under
// `valgrind --tool=callgrind --dump-before=uv_loadavg` in one Node process, measuring its paths one after the other:
// per path a warm-up, then `iterations` operations between two marks (`os.loadavg()`), each mark writing a callgrind
// part. Instructions per operation = the instructions of the part between the marks / iterations. Node's start-up,
// module loading and the warm-ups fall outside those parts, so they cancel instead of being subtracted.
//
// Why the counts repeat: instruction counts do not depend on the machine's load, and Node runs with
// `--single-threaded --predictable` (V8's background compiler and GC threads off: TurboFan still optimises, on the
// main thread, at the same points of every run), with fixed keys, clock and inputs (harness.mjs). The warm-ups are
// long enough that the measured operations run the optimised code (the per-operation counts no longer move when the
// warm-up or the iterations double; see docs/performance.md). Every workload runs twice (`RUNS`); a path whose two
// counts differ by more than MAX_SPREAD fails the run, since then the comparison would mean nothing.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { patchedCoreCopy, SPIN_ROUNDS } from './perf-gate/slowdown.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BASELINE = join(ROOT, 'scripts', 'perf-gate.baseline.json');
const WORKLOADS = ['guard.mjs', 'codecs.mjs', 'e2e.mjs'];
/** A path regresses when it costs more than 1 + TOLERANCE times its baseline; 1 − TOLERANCE or less is a note. */
const TOLERANCE = 0.1;
/** Largest (max − min) / min of one path's counts across the runs; past it the measurement is not repeatable. */
const MAX_SPREAD = 0.05;
const RUNS = 2;
/** The share of the guard's open the self-test adds. */
const SELF_TEST_SLOWDOWN = 0.2;
const NODE_FLAGS = ['--single-threaded', '--predictable', '--predictable-gc-schedule', '--expose-gc', '--random-seed=1'];

function parseArgs(argv) {
  const options = { update: false, selfTest: false, reason: undefined, only: undefined, jobs: Math.min(2, availableParallelism()) };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new TypeError(`perf-gate: ${arg} needs a value`);
      return next;
    };
    if (arg === '--update') options.update = true;
    else if (arg === '--self-test') options.selfTest = true;
    else if (arg === '--reason') options.reason = value();
    else if (arg === '--only') options.only = value().split(',');
    else if (arg === '--jobs') options.jobs = Number(value());
    else throw new TypeError(`perf-gate: unknown argument ${arg} (see the top of scripts/perf-gate.mjs)`);
  }
  if (!Number.isInteger(options.jobs) || options.jobs < 1) throw new RangeError('perf-gate: --jobs must be a positive integer');
  if (options.update && (options.reason === undefined || options.reason.trim() === '')) {
    throw new TypeError('perf-gate: --update needs --reason "why the counts moved" (it is written into the baseline)');
  }
  if (options.update && options.only !== undefined) throw new TypeError('perf-gate: --update measures every path (no --only)');
  if (options.selfTest && (options.update || options.only !== undefined)) throw new TypeError('perf-gate: --self-test runs alone');
  return options;
}

function tool(command, args) {
  const result = spawnSync(command, args, { encoding: 'utf8' });
  if (result.error !== undefined || result.status !== 0) return undefined;
  return result.stdout.trim();
}

/**
 * V8's compilers, entered from the interval's code: bytecode for a function run the first time, Sparkplug, TurboFan
 * (synchronous on the main thread under --single-threaded). Their cost is a one-off of the process, not of an
 * operation, and where it lands depends on tiering, so a path's count leaves out what these calls cost.
 */
const COMPILERS = [
  'v8::internal::Runtime_CompileLazy(',
  'v8::internal::Runtime_CompileBaseline(',
  'v8::internal::Runtime_InstallBaselineCode(',
  'v8::internal::Runtime_CompileOptimized(',
  'v8::internal::Runtime_CompileOptimizedOSR(',
  'v8::internal::baseline::BaselineBatchCompiler::EnqueueFunction(',
];

/**
 * The instructions of one callgrind part (uncompressed names), less the inclusive cost of the calls into COMPILERS
 * (none of them calls another, so nothing is subtracted twice). `undefined` without a `totals:` line.
 */
function instructions(file) {
  const lines = readFileSync(file, 'utf8').split('\n');
  let totals;
  let compile = 0;
  let callee;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith('cfn=')) callee = line.slice(4);
    else if (line.startsWith('calls=')) {
      // The next line is the inclusive cost of these calls: `<position> <Ir>`.
      if (callee !== undefined && COMPILERS.some((name) => callee.startsWith(name))) compile += Number(lines[i + 1].split(' ')[1]);
      i++;
    } else if (line.startsWith('totals: ')) totals = Number(line.slice(8));
  }
  return totals === undefined ? undefined : totals - compile;
}

/**
 * Runs one workload under callgrind. `env` is added to the environment (PERF_GATE_PATHS, PERF_GATE_CORE_COPY);
 * `nodeArgs` go before the workload (the self-test's `--import`). Resolves `{ [path]: instructions per operation }`.
 */
function runWorkload(file, { env = {}, nodeArgs = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'perf-gate-'));
  const out = join(dir, 'callgrind.out');
  const args = [
    '--tool=callgrind',
    '--dump-before=uv_loadavg',
    `--callgrind-out-file=${out}`,
    `--log-file=${join(dir, 'valgrind.log')}`,
    '--instr-atstart=no',
    '--dump-line=no',
    '--compress-strings=no',
    '--compress-pos=no',
    process.execPath,
    ...NODE_FLAGS,
    ...nodeArgs,
    join(ROOT, 'scripts', 'perf-gate', file),
  ];
  const childEnv = { ...process.env, ...env, PERF_GATE_VGDB: '1' };
  delete childEnv.PERF_GATE_COUNTS; // the committed counts only
  delete childEnv.NODE_OPTIONS;
  return new Promise((resolve, reject) => {
    const child = spawn('valgrind', args, { cwd: ROOT, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        if (code !== 0) {
          const log = existsSync(join(dir, 'valgrind.log')) ? readFileSync(join(dir, 'valgrind.log'), 'utf8') : '';
          throw new Error(`perf-gate: ${file} exited ${code}\n${stderr.slice(-4000)}\n${log.slice(-2000)}`);
        }
        const lines = stdout.trim().split('\n');
        const { marks, paths } = JSON.parse(lines[lines.length - 1]);
        // One part per mark, and no other: a dump triggered by anything but the marks would shift every interval.
        // (A workload with none of `--only`'s paths makes no mark and so no part.)
        if ((marks > 0 && !existsSync(`${out}.${marks}`)) || existsSync(`${out}.${marks + 1}`)) {
          throw new Error(`perf-gate: ${file} made ${marks} marks but callgrind wrote another number of parts`);
        }
        const perOp = {};
        for (const { name, iterations, part } of paths) perOp[name] = (instructions(`${out}.${part}`) ?? NaN) / iterations;
        const broken = Object.keys(perOp).filter((name) => !Number.isFinite(perOp[name]));
        if (broken.length > 0) throw new Error(`perf-gate: no totals for ${broken.join(', ')} in ${file}'s parts`);
        resolve(perOp);
      } catch (error) {
        reject(error);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

/** Runs `tasks` (functions returning promises) at most `jobs` at a time; resolves their results in order. */
async function pool(tasks, jobs) {
  const results = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, tasks.length) }, worker));
  return results;
}

/** Every run of every workload: `{ [path]: { perOp (mean of the runs), runs: [..], spread } }`. */
async function measureAll({ jobs, only, runs = RUNS }) {
  const env = only === undefined ? {} : { PERF_GATE_PATHS: only.join(',') };
  const tasks = [];
  for (const file of WORKLOADS) for (let r = 0; r < runs; r++) tasks.push(() => runWorkload(file, { env }));
  return combine(await pool(tasks, jobs));
}

function combine(results) {
  const byPath = {};
  for (const result of results) for (const [name, value] of Object.entries(result)) (byPath[name] ??= []).push(value);
  const paths = {};
  for (const [name, runs] of Object.entries(byPath)) {
    const min = Math.min(...runs);
    const max = Math.max(...runs);
    paths[name] = { perOp: runs.reduce((a, b) => a + b, 0) / runs.length, runs, spread: (max - min) / min };
  }
  return paths;
}

const fmt = (n) => Math.round(n).toLocaleString('en-US');
const pct = (x) => `${(x * 100).toFixed(2)} %`;

function table(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The gate's verdict on `measured` against `baseline.paths` (`{ [path]: { instructionsPerOp } }`): prints the table
 * and the notes, returns `{ ok, rows }`. Fails on a regression past TOLERANCE, an unrepeatable measurement, or a
 * baseline path that was not measured (unless `only` leaves it out).
 */
export function compare(baseline, measured, { only } = {}) {
  const rows = [];
  const failures = [];
  const notes = [];
  const names = new Set([...Object.keys(baseline.paths), ...Object.keys(measured)]);
  for (const name of [...names].sort()) {
    if (only !== undefined && !only.includes(name)) continue;
    const base = baseline.paths[name]?.instructionsPerOp;
    const now = measured[name];
    if (now === undefined) {
      failures.push(`${name}: in the baseline but not measured (a workload lost it?)`);
      rows.push([name, fmt(base), '-', '-', '-', 'MISSING']);
      continue;
    }
    if (now.spread > MAX_SPREAD) failures.push(`${name}: its runs differ by ${pct(now.spread)} (over ${pct(MAX_SPREAD)}): not repeatable`);
    if (base === undefined) {
      notes.push(`${name}: not in the baseline (a new path): add it with --update --reason "…"`);
      rows.push([name, '-', fmt(now.perOp), '-', pct(now.spread), 'NEW']);
      continue;
    }
    const ratio = now.perOp / base;
    let verdict = 'ok';
    if (ratio > 1 + TOLERANCE) {
      verdict = 'REGRESSED';
      failures.push(`${name}: ${ratio.toFixed(3)}× its baseline (over ${(1 + TOLERANCE).toFixed(2)}×)`);
    } else if (ratio < 1 - TOLERANCE) {
      verdict = 'improved';
      notes.push(`${name}: ${ratio.toFixed(3)}× its baseline: update the baseline (--update --reason "…") so that the gain is kept`);
    }
    rows.push([name, fmt(base), fmt(now.perOp), ratio.toFixed(3), pct(now.spread), verdict]);
  }
  console.log(table(['path', 'baseline instr/op', 'now instr/op', 'ratio', 'spread', 'verdict'], rows));
  for (const note of notes) console.log(`note: ${note}`);
  for (const failure of failures) console.log(`FAIL: ${failure}`);
  return { ok: failures.length === 0, rows };
}

function environment() {
  return { node: process.version, v8: process.versions.v8, valgrind: tool('valgrind', ['--version']) ?? 'unknown' };
}

function readBaseline() {
  if (!existsSync(BASELINE)) return undefined;
  return JSON.parse(readFileSync(BASELINE, 'utf8'));
}

async function gate(options) {
  const baseline = readBaseline();
  if (baseline === undefined && !options.update) {
    throw new Error(`perf-gate: no baseline at ${BASELINE}: create it with --update --reason "…"`);
  }
  const env = environment();
  console.log(
    `perf-gate: ${WORKLOADS.length} workloads × ${RUNS} runs under callgrind, ${options.jobs} at a time (${env.node}, ${env.valgrind})`,
  );
  const started = Date.now();
  const measured = await measureAll(options);
  console.log(`perf-gate: measured in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  if (baseline !== undefined && (baseline.node !== env.node || baseline.valgrind !== env.valgrind)) {
    console.log(
      `note: the baseline was measured with ${baseline.node} and ${baseline.valgrind}, this run with ${env.node} and ${env.valgrind}: ` +
        'instruction counts move with Node and valgrind versions; regenerate the baseline on the CI image when they change',
    );
  }
  const verdict = compare(baseline ?? { paths: {} }, measured, options);
  if (options.update) {
    const unstable = Object.entries(measured).filter(([, m]) => m.spread > MAX_SPREAD);
    if (unstable.length > 0) throw new Error(`perf-gate: not writing the baseline: ${unstable.map(([n]) => n).join(', ')} not repeatable`);
    const paths = {};
    for (const name of Object.keys(measured).sort()) paths[name] = { instructionsPerOp: Math.round(measured[name].perOp) };
    const next = { reason: options.reason.trim(), date: new Date().toISOString().slice(0, 10), ...env, tolerance: TOLERANCE, paths };
    writeFileSync(BASELINE, `${JSON.stringify(next, null, 2)}\n`);
    console.log(`perf-gate: wrote ${BASELINE} (${Object.keys(paths).length} paths): commit it with the change it measures`);
    return 0;
  }
  console.log(
    verdict.ok ? 'perf-gate: ok' : 'perf-gate: FAILED (see docs/performance.md: fix it, or --update --reason "…" if the cost is meant)',
  );
  return verdict.ok ? 0 : 1;
}

/**
 * Proves the gate bites. 1. The guard's open on the built core, twice, and the cost of one round of the slowdown.
 * 2. The same open on a copy of the core whose `open` first spins k rounds, k sized to add SELF_TEST_SLOWDOWN.
 * 3. The gate's own comparison must pass the second unpatched run against the first (no false alarm) and fail the
 * patched run against the unpatched mean. Exit 0 when both hold.
 */
async function selfTest(options) {
  const env = { PERF_GATE_PATHS: 'guard.open' };
  console.log("perf-gate self-test: guard.open on the built core (twice) and the slowdown's cost per round, under callgrind");
  const [first, second, spin] = await pool(
    [() => runWorkload('guard.mjs', { env }), () => runWorkload('guard.mjs', { env }), () => runWorkload('spin.mjs')],
    options.jobs,
  );
  const unpatched = combine([first, second]);
  const perRound = spin.spin / SPIN_ROUNDS;
  const open = unpatched['guard.open'].perOp;
  const rounds = Math.max(1, Math.round((SELF_TEST_SLOWDOWN * open) / perRound));
  console.log(
    `guard.open costs ${fmt(open)} instr/op; one round of the slowdown ${perRound.toFixed(2)}: injecting ${fmt(rounds)} rounds per open`,
  );
  const copy = patchedCoreCopy(join(ROOT, 'packages', 'core'), rounds);
  let patched;
  try {
    patched = await runWorkload('guard.mjs', {
      env: { ...env, PERF_GATE_CORE_COPY: copy },
      nodeArgs: ['--import', join(ROOT, 'scripts', 'perf-gate', 'slowdown.mjs')],
    });
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
  const asBaseline = (m) => ({ paths: { 'guard.open': { instructionsPerOp: m['guard.open'].perOp } } });
  console.log('\n1. the second unpatched run against the first (must pass):');
  const clean = compare(asBaseline(combine([first])), combine([second]));
  console.log('\n2. the patched core against the unpatched runs (must fail):');
  const slowed = compare(asBaseline(unpatched), combine([patched]));
  const ratio = patched['guard.open'] / open;
  const ok = clean.ok && !slowed.ok;
  console.log(
    `\nperf-gate self-test: ${ok ? 'ok' : 'FAILED'}: the injected slowdown made guard.open ${ratio.toFixed(3)}× (aimed at ` +
      `${(1 + SELF_TEST_SLOWDOWN).toFixed(2)}×); the gate ${slowed.ok ? 'PASSED it (it does not bite)' : 'failed it'}, and ` +
      `${clean.ok ? 'passed' : 'FAILED'} the unpatched rerun`,
  );
  return ok ? 0 : 1;
}

const options = parseArgs(process.argv.slice(2));
if (tool('valgrind', ['--version']) === undefined) {
  console.error('perf-gate: valgrind is not on PATH (apt-get install valgrind)');
  process.exit(1);
}
if (!existsSync(join(ROOT, 'packages', 'core', 'dist', 'index.js'))) {
  console.error('perf-gate: packages are not built: run `pnpm build` first');
  process.exit(1);
}
process.exitCode = options.selfTest ? await selfTest(options) : await gate(options);
