import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { CheckFailure, checkCodecs, codecJobs, makePayloads, setupCodecs } from './codecs.js';
import { checkEvents, eventJobs, setupEvents } from './events.js';
import { FULL, type HarnessOptions, type JobResult, QUICK, runInterleaved } from './harness.js';
import { PAYLOADS } from './payload.js';
import { packageFacts } from './facts.js';
import { OUTCOMES_MARKERS, updateReadme } from './readme.js';
import { renderChart } from './chart.js';
import {
  type BenchResult,
  CHART_PATH,
  evaluateTargets,
  fmtOps,
  outcomesBlock,
  type PackageName,
  printableReport,
  readmeBlock,
  rootBlock,
} from './report.js';
import { checkStores, setupStores, storeJobs } from './stores.js';
import { checkGuards, GUARD_ARGS, GUARD_DATA, guardJobs, makeGuardArgs, makeGuardData, setupGuards } from './guard.js';
import { checkE2e, e2eJobs, setupE2e } from './e2e.js';
import { checkOutcomes, OUTCOME_CONCURRENCY, outcomeJobs, setupOutcomes } from './outcomes.js';
import { setupThroughput, throughputRatios } from './throughput.js';
import { checkKeys, keyJobs, setupKeys } from './keys.js';
import { checkServerless, serverlessJobs, serverlessSection, setupServerless } from './serverless.js';

const HELP = `Usage: node dist/main.js [options]   (or: pnpm --filter @mrtr/bench bench [options])

  --quick              3 short rounds (about a minute) instead of the full run
  --rounds <n>         interleaved rounds (default 5, quick 3; at least 3)
  --only <parts>       comma-separated: codecs, stores, guard, e2e, events, keys, outcomes, serverless, throughput
                       (default: all but outcomes, serverless and throughput, which are asked for by name);
                       keys = a keyed first-round call ÷ an unkeyed one, in process, c16;
                       outcomes = the cost of outcome recording, about 8 more minutes, 2 with --quick;
                       serverless = Upstash (REST shim, needs REDIS_URL), DynamoDB (dynalite) and Durable
                       Objects (workerd), each ÷ its raw client, about 3 more minutes;
                       throughput = record and task-store rows beside bare clients (issue 43)
  --output <file>      write the results as JSON
  --from <file>        do not measure: re-read a JSON written by --output (for --update-readmes)
  --update-readmes     rewrite the bench block of packages/{codec,store}-*/README.md, apps/bench/README.md and the
                       root README.md (codec and store tables), and draw apps/bench/results/chart.svg; when the
                       run measured outcomes, also the outcome section of apps/bench/README.md
  --update-outcomes-readme
                       rewrite only the outcome-recording section of apps/bench/README.md from a run
                       (or --from file) that measured outcomes, e.g. after --only outcomes; nothing else is touched
  --strict             exit with code 2 when a target is missed
  --help

Redis and PostgreSQL rows run when REDIS_URL / DATABASE_URL are set, and are skipped with a note otherwise.`;

/** apps/bench/ (this file is apps/bench/dist/main.js or apps/bench/src/main.ts). */
const APP_DIR = fileURLToPath(new URL('..', import.meta.url));
const REPO_DIR = path.resolve(APP_DIR, '..', '..');

const README_TARGETS: readonly (PackageName | 'bench')[] = [
  'codec-hmac',
  'codec-jwe',
  'codec-aead',
  'store-memory',
  'store-redis',
  'store-sql',
  'bench',
];

const log = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

const PARTS = ['codecs', 'stores', 'guard', 'e2e', 'events', 'keys', 'outcomes', 'serverless', 'throughput'] as const;
type Part = (typeof PARTS)[number];
/**
 * What a run without `--only` measures. The outcome-recording rows (56 jobs, about 8 minutes of a full
 * run) are asked for by name, so the default run keeps its length and the README blocks it writes.
 */
const DEFAULT_PARTS: readonly Part[] = ['codecs', 'stores', 'guard', 'e2e', 'events', 'keys'];

/** What every part's measurement writes to and reports with. */
interface PartRun {
  result: BenchResult;
  options: HarnessOptions;
  payloads: ReturnType<typeof makePayloads>;
  /** Keeps a part's job results in the run's result. */
  store(jobs: Map<string, JobResult>): void;
  progress(label: string): (round: number, index: number, total: number, job: { key: string }, m: { opsPerSec: number }) => void;
}

async function measureCodecs({ result, options, payloads, store, progress }: PartRun): Promise<void> {
  const setup = await setupCodecs();
  for (const s of setup.skipped) log(`note: codec ${s.id} skipped: ${s.reason}`);
  log('checking codecs (round trip, tamper, expiry, confidentiality, wrong key, 1 MiB) …');
  const report = await checkCodecs(setup, payloads);
  for (const line of report.checks) log(`  ok ${line}`);
  result.codecs = {
    rows: setup.rows.map((r) => ({
      id: r.id,
      label: r.label,
      family: r.family,
      kind: r.kind,
      confidential: r.confidential,
      tokenBytes: Object.fromEntries(PAYLOADS.map((p) => [p, report.tokenBytes[r.id]![p]])) as Record<(typeof PAYLOADS)[number], number>,
    })),
    skipped: setup.skipped,
    checks: report.checks,
  };
  store(await runInterleaved(codecJobs(setup, payloads, report), options, progress('codecs')));
}

async function measureStores({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupStores({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
  try {
    for (const n of setup.notes) log(`note: ${n}`);
    for (const s of setup.skipped) log(`note: store ${s.id} skipped: ${s.reason}`);
    log('checking stores (first consume true, second false) …');
    const checks = await checkStores(setup);
    for (const line of checks) log(`  ok ${line}`);
    result.stores = {
      rows: setup.rows.map((r) => ({ id: r.id, label: r.label, backend: r.backend, kind: r.kind })),
      skipped: setup.skipped,
      notes: setup.notes,
      checks,
    };
    store(await runInterleaved(storeJobs(setup), options, progress('stores')));
  } finally {
    await setup.close();
  }
}

async function measureGuard({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupGuards();
  for (const s of setup.skipped) log(`note: guard ${s.id} skipped: ${s.reason}`);
  log('checking guards (round trip, principal, binding, tamper, replay; canonical JSON) …');
  const report = await checkGuards(setup);
  for (const line of report.checks) log(`  ok ${line}`);
  result.guard = {
    codecs: setup.rows.map((r) => r.id),
    skipped: setup.skipped,
    sizes: {
      data: Object.fromEntries(GUARD_DATA.map((d) => [d, Buffer.byteLength(JSON.stringify(makeGuardData(d)))])),
      args: Object.fromEntries(GUARD_ARGS.map((a) => [a, Buffer.byteLength(JSON.stringify(makeGuardArgs(a)))])),
      claims: report.claimsBytes,
    },
    checks: report.checks,
  };
  store(await runInterleaved(guardJobs(setup, report), options, progress('guard')));
}

async function measureE2e({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupE2e({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
  try {
    for (const n of setup.notes) log(`note: ${n}`);
    for (const s of setup.skipped) log(`note: e2e ${s.id} skipped: ${s.reason}`);
    log('checking end-to-end flows …');
    const checks = await checkE2e(setup);
    for (const line of checks) log(`  ok ${line}`);
    result.e2e = {
      rows: setup.rows.map((r) => ({ letter: r.letter, id: r.id, label: r.label, kind: r.kind, store: r.store, baseline: r.baseline })),
      skipped: setup.skipped,
      notes: setup.notes,
      checks,
    };
    store(await runInterleaved(e2eJobs(setup), options, progress('e2e')));
  } finally {
    await setup.close();
  }
}

async function measureEvents({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupEvents();
  try {
    log('checking the guard with and without event hooks (open, mint, events seen) …');
    const checks = await checkEvents(setup.rows);
    for (const line of checks) log(`  ok ${line}`);
    result.events = { rows: setup.rows.map((r) => ({ id: r.id, label: r.label })), checks };
    store(await runInterleaved(eventJobs(setup.rows), options, progress('events')));
  } finally {
    await setup.close();
  }
}

async function measureKeys({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupKeys();
  if ('skipped' in setup) {
    log(`note: keys skipped: ${setup.skipped}`);
  } else {
    try {
      log('checking idempotency keys (a keyed retry replayed and marked, an unkeyed call run every time) …');
      const checks = await checkKeys(setup);
      for (const line of checks) log(`  ok ${line}`);
      result.keys = { checks };
      store(await runInterleaved(keyJobs(setup), options, progress('keys')));
    } finally {
      await setup.close();
    }
  }
}

async function measureOutcomes({ result, options, store, progress }: PartRun): Promise<void> {
  const loadStart = loadavg();
  const setup = await setupOutcomes({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
  try {
    for (const n of setup.notes) log(`note: ${n}`);
    for (const s of setup.skipped) log(`note: outcome rows ${s.id} skipped: ${s.reason}`);
    log('checking outcome recording (single use, claim/record, identical retry, other answers; e2e store calls) …');
    const report = await checkOutcomes(setup);
    for (const line of report.checks) log(`  ok ${line}`);
    result.outcomes = {
      stores: setup.stores.map((r) => ({ backend: r.backend, label: r.label, concurrency: [...OUTCOME_CONCURRENCY[r.backend]] })),
      e2e: setup.e2e.map((r) => ({ id: r.id, store: r.store, recordOutcomes: r.recordOutcomes, label: r.label })),
      skipped: setup.skipped,
      notes: setup.notes,
      checks: report.checks,
      sizes: {
        outcomeJson: Buffer.byteLength(JSON.stringify(setup.outcome)),
        sealedOutcome: report.sealedOutcome.length,
        ...(report.e2eSealedOutcomeChars === undefined ? {} : { e2eSealedOutcome: report.e2eSealedOutcomeChars }),
        data: Buffer.byteLength(JSON.stringify(setup.data)),
        args: Buffer.byteLength(JSON.stringify(setup.request.arguments)),
      },
    };
    store(await runInterleaved(outcomeJobs(setup, report), options, progress('outcomes')));
    result.outcomes.loadavg = { start: loadStart, end: loadavg() };
  } finally {
    await setup.close();
  }
}

async function measureServerless({ result, options, store, progress }: PartRun): Promise<void> {
  const setup = await setupServerless({ redisUrl: process.env['REDIS_URL'] });
  try {
    for (const s of setup.skipped) log(`note: serverless ${s.id} skipped: ${s.reason}`);
    log('checking serverless stores (first use first, second not) …');
    const checks = await checkServerless(setup);
    for (const line of checks) log(`  ok ${line}`);
    result.serverless = serverlessSection(setup, checks);
    store(await runInterleaved(serverlessJobs(setup), options, progress('serverless')));
  } finally {
    await setup.close();
  }
}

async function measureThroughput({ result, options, store, progress }: PartRun): Promise<void> {
  const loadStart = loadavg();
  const setup = await setupThroughput({ redisUrl: process.env['REDIS_URL'], databaseUrl: process.env['DATABASE_URL'] });
  try {
    for (const n of setup.notes) log(`note: ${n}`);
    store(await runInterleaved(setup.jobs, options, progress('throughput')));
    const lines = throughputRatios((key) => result.jobs[key]?.opsPerSec);
    for (const line of lines) log(`  ${line}`);
    log(
      `  load average ${loadStart.map((x) => x.toFixed(2)).join(' ')} → ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
    );
  } finally {
    await setup.close();
  }
}

/** Each part's measurement, run in the order of PARTS. */
const MEASURE: Record<Part, (run: PartRun) => Promise<void>> = {
  codecs: measureCodecs,
  stores: measureStores,
  guard: measureGuard,
  e2e: measureE2e,
  events: measureEvents,
  keys: measureKeys,
  outcomes: measureOutcomes,
  serverless: measureServerless,
  throughput: measureThroughput,
};

async function measureAll(options: HarnessOptions, quick: boolean, parts: ReadonlySet<Part>): Promise<BenchResult> {
  const started = Date.now();
  const payloads = makePayloads();
  const result: BenchResult = {
    schema: 1,
    startedAt: new Date(started).toISOString(),
    finishedAt: '',
    durationMs: 0,
    quick,
    env: {
      node: process.version,
      v8: process.versions.v8,
      openssl: process.versions.openssl,
      platform: process.platform,
      arch: process.arch,
      cpu: cpus()[0]?.model.trim() ?? 'unknown',
      cpus: cpus().length,
      loadavg: [loadavg()[0]!, 0],
    },
    harness: options,
    payloads: {
      small: { jsonBytes: Buffer.byteLength(JSON.stringify(payloads.small)) },
      '4k': { jsonBytes: Buffer.byteLength(JSON.stringify(payloads['4k'])) },
    },
    jobs: {},
    targets: [],
  };
  const progress = (label: string) => (round: number, index: number, total: number, job: { key: string }, m: { opsPerSec: number }) =>
    log(
      `[${label} round ${round + 1}/${options.rounds}] ${String(index + 1).padStart(3)}/${total} ${job.key.padEnd(28)} ${fmtOps(m.opsPerSec)} ops/s`,
    );
  const store = (jobs: Map<string, JobResult>) => {
    for (const [key, value] of jobs) result.jobs[key] = value;
  };

  const run: PartRun = { result, options, payloads, store, progress };
  for (const part of PARTS) if (parts.has(part)) await MEASURE[part](run);

  result.env.loadavg = [result.env.loadavg![0], loadavg()[0]!];
  result.finishedAt = new Date().toISOString();
  result.durationMs = Date.now() - started;
  return result;
}

async function main(): Promise<number> {
  // `pnpm bench -- --quick` hands the script a literal `--` first; accept both spellings.
  const argv = process.argv.slice(2);
  if (argv[0] === '--') argv.shift();
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      rounds: { type: 'string' },
      only: { type: 'string' },
      output: { type: 'string' },
      from: { type: 'string' },
      'update-readmes': { type: 'boolean', default: false },
      'update-outcomes-readme': { type: 'boolean', default: false },
      strict: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const parts = new Set<Part>(DEFAULT_PARTS);
  if (values.only !== undefined) {
    parts.clear();
    for (const part of values.only.split(',')) {
      if (!(PARTS as readonly string[]).includes(part)) {
        log(`--only takes a comma-separated list of ${PARTS.join(', ')}`);
        return 64;
      }
      parts.add(part as Part);
    }
  }
  const options: HarnessOptions = { ...(values.quick ? QUICK : FULL) };
  if (values.rounds !== undefined) {
    const rounds = Number(values.rounds);
    if (!Number.isInteger(rounds) || rounds < 3 || rounds > 20) {
      log('--rounds must be an integer from 3 to 20');
      return 64;
    }
    options.rounds = rounds;
  }

  let result: BenchResult;
  if (values.from !== undefined) {
    result = JSON.parse(readFileSync(values.from, 'utf8')) as BenchResult;
    if (result.schema !== 1) throw new Error(`${values.from}: not a bench result (schema ${String(result.schema)})`);
  } else {
    // Hard bound on the whole run, whatever a backend does; the outcome rows get a budget of their own on top.
    const budgetMs =
      ((values.quick ? 8 : 20) +
        (parts.has('outcomes') ? (values.quick ? 5 : 12) : 0) +
        (parts.has('serverless') ? (values.quick ? 3 : 6) : 0)) *
      60_000;
    setTimeout(() => {
      log(`bench: exceeded its ${budgetMs / 60_000} min budget, aborting`);
      process.exit(3);
    }, budgetMs).unref();
    result = await measureAll(options, values.quick, parts);
  }
  result.targets = evaluateTargets(result);
  result.packages = Object.fromEntries(
    ['codec-hmac', 'codec-jwe', 'codec-aead', 'store-memory', 'store-redis', 'store-sql', 'core'].map((pkg) => [
      pkg,
      packageFacts(REPO_DIR, pkg),
    ]),
  );

  console.log(printableReport(result));

  if (values.output !== undefined) {
    const file = path.resolve(values.output);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote ${file}`);
  }
  if (values['update-readmes']) {
    for (const pkg of README_TARGETS) {
      const file = pkg === 'bench' ? path.join(APP_DIR, 'README.md') : path.join(REPO_DIR, 'packages', pkg, 'README.md');
      const outcome = updateReadme(file, readmeBlock(result, pkg));
      log(`${outcome.startsWith('skipped') ? 'note' : 'readme'}: ${path.relative(REPO_DIR, file)}: ${outcome}`);
    }
    const chart = path.join(APP_DIR, CHART_PATH);
    writeFileSync(chart, renderChart(result));
    log(`chart: ${path.relative(REPO_DIR, chart)}`);
    const root = path.join(REPO_DIR, 'README.md');
    log(`readme: README.md: ${updateReadme(root, rootBlock(result))}`);
  }
  if (values['update-outcomes-readme'] || (values['update-readmes'] && result.outcomes !== undefined)) {
    const file = path.join(APP_DIR, 'README.md');
    if (result.outcomes === undefined) {
      log('note: --update-outcomes-readme: this run did not measure outcomes (--only outcomes); README not touched');
    } else {
      const outcome = updateReadme(file, outcomesBlock(result), OUTCOMES_MARKERS);
      log(`${outcome.startsWith('skipped') ? 'note' : 'readme'}: ${path.relative(REPO_DIR, file)} (outcome section): ${outcome}`);
    }
  }
  const missed = result.targets.filter((t) => t.pass === false).length;
  return values.strict && missed > 0 ? 2 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof CheckFailure) log(`correctness check failed, nothing was timed: ${error.message}`);
    else log(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exitCode = 1;
  },
);
