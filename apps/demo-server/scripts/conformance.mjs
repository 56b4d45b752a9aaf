#!/usr/bin/env node
// Runs the official MCP conformance suite (pinned 0.2.0-alpha.12, on Node 22) against the built mrtr-demo:
// - the 14 `input-required-result-*` and the 10 `tasks-*` scenarios, one invocation each, for every codec with the
//   memory store and for one codec each with SQLite, Redis and PostgreSQL; every `Passed: x/y, n failed,
//   w warnings` line must show 0 failed and 0 warnings;
// - the full `--requirements 2026-07-28` run: no scored scenario may have a failure (or a warning).
// Prints every summary line, writes them to conformance-results/summary.txt, exits 1 on any problem.
//
// Usage: node scripts/conformance.mjs [--only codec/store ...] [--skip-requirements]
// Env: REDIS_URL, DATABASE_URL (skipped with a reason when unset; failure with MRTR_REQUIRE_SERVICES=1),
//      MRTR_CONFORMANCE_DIR (install cache, default <tmpdir>/mrtr-conformance-<version>).
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { APP_DIR, CLI, freshKeys, serviceUrl, startDemo, stripAnsi } from './lib.mjs';

const VERSION = '0.2.0-alpha.12';
const SCENARIOS = [
  'basic-elicitation',
  'basic-sampling',
  'basic-list-roots',
  'request-state',
  'multiple-input-requests',
  'multi-round',
  'missing-input-response',
  'non-tool-request',
  'result-type',
  'unsupported-methods',
  'tampered-state',
  'capability-check',
  'ignore-extra-params',
  'validate-input',
].map((s) => `input-required-result-${s}`);
// The tasks extension (io.modelcontextprotocol/tasks; issue 21): unscored by the suite, held to the same rule.
// Tasks live on the --store backend (memory, SQLite, Redis, PostgreSQL task stores).
// tasks-status-notifications is skipped by the suite itself (0/0).
SCENARIOS.push(
  ...[
    'lifecycle',
    'capability-negotiation',
    'wire-fields',
    'request-state-removal',
    'mrtr-input',
    'request-headers',
    'dispatch-and-envelope',
    'status-notifications',
    'required-task-error',
    'mrtr-composition',
  ].map((s) => `tasks-${s}`),
);
const CONCURRENCY = 4;

const { values: flags } = parseArgs({
  options: { only: { type: 'string', multiple: true }, 'skip-requirements': { type: 'boolean' } },
  strict: true,
});

const lines = [];
const problems = [];
const log = (line) => {
  lines.push(line);
  console.log(line);
};

// ------------------------------------------------------------------ the conformance binary (Node 22)
function installSuite() {
  const dir = process.env.MRTR_CONFORMANCE_DIR || join(tmpdir(), `mrtr-conformance-${VERSION}`);
  const entry = join(dir, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
  const node22 = join(dir, 'node_modules', 'node', 'bin', 'node');
  const major = Number(process.versions.node.split('.')[0]);
  const needNode = major < 22;
  if (!existsSync(entry) || (needNode && !existsSync(node22))) {
    console.log(`installing @modelcontextprotocol/conformance@${VERSION}${needNode ? ' and node@22' : ''} into ${dir}`);
    mkdirSync(dir, { recursive: true });
    if (!existsSync(join(dir, 'package.json'))) writeFileSync(join(dir, 'package.json'), '{ "private": true }\n');
    const pkgs = [`@modelcontextprotocol/conformance@${VERSION}`, ...(needNode ? ['node@22'] : [])];
    execFileSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--loglevel=error', ...pkgs], { stdio: 'inherit' });
  }
  const node = needNode ? node22 : process.execPath;
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  if (Number(version.replace(/^v/, '').split('.')[0]) < 22) throw new Error(`conformance needs Node >= 22, found ${version} at ${node}`);
  const suiteVersion = execFileSync(node, [entry, '--version'], { encoding: 'utf8' }).trim();
  if (suiteVersion !== VERSION) throw new Error(`expected conformance ${VERSION}, found ${suiteVersion}`);
  return { node, entry, nodeVersion: version };
}

function runSuite(suite, args) {
  return new Promise((resolve) => {
    execFile(suite.node, [suite.entry, 'server', ...args], { maxBuffer: 64 * 1024 * 1024, timeout: 180_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      resolve({ code, output: stripAnsi(`${stdout}${stderr}`) });
    });
  });
}

async function pool(items, limit, fn) {
  const results = new Array(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  });
  await Promise.all(workers);
  return results;
}

// ------------------------------------------------------------------ one server configuration
async function withServer(codec, store, extraArgs, env, body) {
  const label = `${codec}/${store}`;
  const demo = await startDemo(['--codec', codec, '--store', store, '--fixtures', 'conformance', ...extraArgs], {
    env: { MRTR_KEYS: freshKeys(), MRTR_DEMO_TOKENS: '', ...env },
  });
  log(`[${label}] ${demo.line}`);
  try {
    await body(demo, label);
  } finally {
    const code = await demo.stop();
    if (code !== 0) problems.push(`[${label}] mrtr-demo exited with ${code} on SIGTERM (expected a clean 0)`);
  }
}

async function mrtrScenarios(suite, demo, label) {
  const results = await pool(SCENARIOS, CONCURRENCY, (scenario) => runSuite(suite, ['--url', demo.url, '--scenario', scenario]));
  SCENARIOS.forEach((scenario, i) => {
    const { code, output } = results[i];
    const match = /Passed: (\d+)\/(\d+), (\d+) failed, (\d+) warnings/.exec(output);
    if (match === null) {
      log(`[${label}] ${scenario}: NO SUMMARY LINE (exit ${code})`);
      problems.push(`[${label}] ${scenario}: no "Passed:" line\n${output}`);
      return;
    }
    log(`[${label}] ${scenario}: ${match[0]}`);
    const [, passed, total, failed, warnings] = match.map(Number);
    if (failed !== 0 || warnings !== 0 || passed !== total || code !== 0) {
      problems.push(`[${label}] ${scenario}: ${match[0]} (exit ${code})\n${output}`);
    }
  });
}

async function requirementsRun(suite, demo, label) {
  const outDir = mkdtempSync(join(tmpdir(), 'mrtr-conformance-out-'));
  try {
    const { code, output } = await runSuite(suite, ['--url', demo.url, '--requirements', '2026-07-28', '-o', outDir]);
    const summary = output.slice(output.indexOf('=== SUMMARY ==='));
    const notScored = new Set();
    const block = summary.indexOf('Not scored');
    if (block !== -1) for (const m of summary.slice(block).matchAll(/^\s+[✓✗] (\S+) \(/gm)) notScored.add(m[1]);
    // Per-scenario check statuses (WARNING never changes the exit code, so read them from checks.json).
    const statuses = new Map();
    for (const entry of readdirSync(outDir)) {
      const scenario = entry.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
      const checks = JSON.parse(readFileSync(join(outDir, entry, 'checks.json'), 'utf8'));
      const count = (status) => checks.filter((c) => c.status === status).length;
      statuses.set(scenario, { success: count('SUCCESS'), failure: count('FAILURE'), warning: count('WARNING') });
    }
    let scored = 0;
    let scoredChecks = 0;
    for (const [scenario, s] of [...statuses].sort()) {
      if (notScored.has(scenario)) continue;
      scored += 1;
      scoredChecks += s.success + s.failure + s.warning;
      const line = `[${label}] requirements ${scenario}: ${s.success} passed, ${s.failure} failed, ${s.warning} warnings`;
      log(line);
      if (s.failure > 0 || s.warning > 0) problems.push(line);
    }
    const total = /^Total: .*$/m.exec(summary)?.[0] ?? 'Total: (missing)';
    const unscored = /^Not scored for 2026-07-28: .*$/m.exec(summary)?.[0] ?? '';
    log(`[${label}] requirements 2026-07-28: ${scored} scored scenarios, ${scoredChecks} checks; suite ${total}; exit ${code}`);
    if (unscored) log(`[${label}] ${unscored} (${[...notScored].join(', ')})`);
    if (code !== 0) problems.push(`[${label}] --requirements 2026-07-28 exited ${code}\n${summary}`);
    if (scored < 37) problems.push(`[${label}] expected 37 scored scenarios, saw ${scored}`);
  } finally {
    rmSync(outDir, { recursive: true, force: true });
  }
}

// ------------------------------------------------------------------ main
if (!existsSync(CLI)) {
  console.error(`missing ${CLI}: build first (cd apps/demo-server && npx tsup)`);
  process.exit(1);
}
const started = Date.now();
const suite = installSuite();
log(`conformance ${VERSION} on Node ${suite.nodeVersion}; mrtr-demo ${CLI}`);

const sqliteDir = mkdtempSync(join(tmpdir(), 'mrtr-demo-conformance-'));
const redis = serviceUrl('REDIS_URL');
const postgres = serviceUrl('DATABASE_URL');
const configs = [
  { codec: 'hmac', store: 'memory' },
  { codec: 'jwe', store: 'memory' },
  { codec: 'aead', store: 'memory' },
  { codec: 'jwe', store: 'sqlite', args: ['--sqlite-file', join(sqliteDir, 'replay.sqlite')] },
  { codec: 'aead', store: 'redis', service: redis, env: { REDIS_URL: redis.url } },
  { codec: 'hmac', store: 'postgres', service: postgres, env: { DATABASE_URL: postgres.url } },
];
try {
  for (const config of configs) {
    const label = `${config.codec}/${config.store}`;
    if (flags.only !== undefined && !flags.only.includes(label)) continue;
    if (config.service?.error) {
      log(`[${label}] FAILED: ${config.service.error}`);
      problems.push(`[${label}] ${config.service.error}`);
      continue;
    }
    if (config.service?.skip) {
      log(`[${label}] skipped: ${config.service.skip}`);
      continue;
    }
    await withServer(config.codec, config.store, config.args ?? [], config.env ?? {}, async (demo) => {
      await mrtrScenarios(suite, demo, label);
      if (label === 'hmac/memory' && !flags['skip-requirements']) await requirementsRun(suite, demo, label);
    });
  }
} catch (error) {
  problems.push(`runner error: ${error instanceof Error ? error.message : String(error)}`);
} finally {
  rmSync(sqliteDir, { recursive: true, force: true });
}

log(
  `conformance: ${problems.length === 0 ? 'PASS' : `FAIL (${problems.length} problem(s))`} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
);
const resultsDir = join(APP_DIR, 'conformance-results');
mkdirSync(resultsDir, { recursive: true });
writeFileSync(join(resultsDir, 'summary.txt'), `${lines.join('\n')}\n`);
if (problems.length > 0) {
  console.error('\n=== problems ===');
  for (const p of problems) console.error(p);
  process.exit(1);
}
