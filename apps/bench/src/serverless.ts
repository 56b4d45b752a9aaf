// The serverless stores beside their raw clients (issue 43): Upstash through the repo's REST shim in front of the
// local Redis, DynamoDB on dynalite, the Durable Object store under local workerd. Each backend runs in a child
// process of its own (started here, stopped on close), each start bounded in time; one that cannot start is skipped
// with a printed reason.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SkippedRow } from './codecs.js';
import type { Job } from './harness.js';
import type { BenchResult, ServerlessSection, TargetResult } from './result.js';

export type { ServerlessSection } from './result.js';

const RUN_TAG = randomBytes(5).toString('hex');
const APP_DIR = fileURLToPath(new URL('..', import.meta.url));
const REPO_DIR = path.resolve(APP_DIR, '..', '..');
/** Longest wait for a backend to start (then its rows are skipped). */
const START_MS = 20_000;
/** Consumes one Durable Object request runs inside the Worker (the harness times requests). */
const DO_OPS_PER_REQUEST = 256;
/**
 * In this process, a job at concurrency c > 1 is one harness op that runs `POOL_WAVES × c` operations from a pool of
 * c loops (the harness sizes batches by time, and on a loaded machine a batch of slow operations would otherwise hold
 * fewer than c, so never reach the concurrency asked for).
 */
const POOL_WAVES = 4;
/** The outcome a DynamoDB record writes (about a sealed small outcome). */
const OUTCOME = 'o'.repeat(200);

export const SERVERLESS_CONCURRENCY = [1, 32] as const;

/** One serverless row: an operation at one concurrency (`inner`: loops inside the Worker, the harness runs one). */
export interface ServerlessRow {
  id: string;
  backend: 'upstash' | 'dynamodb' | 'durable-object';
  kind: 'raw' | 'mrtr';
  label: string;
  /** What one op is. */
  op: 'consume' | 'claim+record';
  /** Concurrency inside the Worker (Durable Objects), else undefined: the harness's. */
  inner?: number;
  run(id: string, expiresAtMs: number): Promise<unknown>;
  /** A fresh id is first, a second use of it is not: true when right. */
  check(): Promise<boolean>;
}

export interface ServerlessSetup {
  rows: ServerlessRow[];
  skipped: SkippedRow[];
  close(): Promise<void>;
}

/** Starts `args` with node or a binary, waits for a stdout line matching `ready` (bounded): the match. */
async function startChild(
  command: string,
  args: string[],
  ready: RegExp,
  env?: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
  let out = '';
  let err = '';
  const match = await new Promise<RegExpMatchArray>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`did not start within ${START_MS / 1000} s${err ? `: ${err.trim().slice(0, 200)}` : ''}`)),
      START_MS,
    );
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = ready.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      err += chunk.toString('utf8');
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited with code ${String(code)}${err ? `: ${err.trim().slice(0, 200)}` : ''}`));
    });
  }).catch((error: unknown) => {
    child.kill('SIGKILL');
    throw error;
  });
  child.stdout?.removeAllListeners('data');
  child.stdout?.resume();
  child.stderr?.resume();
  return { child, match };
}

const stop = (child: ChildProcess): void => {
  if (child.exitCode === null) child.kill('SIGTERM');
};
const reasonOf = (error: unknown): string => (error instanceof Error ? (error.message.split('\n')[0] ?? '') : String(error));

async function upstashRows(redisUrl: string | undefined, rows: ServerlessRow[], skipped: SkippedRow[], closers: (() => unknown)[]) {
  if (redisUrl === undefined || redisUrl === '') {
    skipped.push({ id: 'upstash', label: 'Upstash (REST shim)', reason: 'REDIS_URL is not set (the REST shim fronts a local Redis)' });
    return;
  }
  let shim: Awaited<ReturnType<typeof startChild>>;
  try {
    shim = await startChild(
      process.execPath,
      [path.join(REPO_DIR, 'scripts', 'upstash-rest-shim.mjs'), redisUrl],
      /UPSTASH_REDIS_REST_URL=(\S+)\nUPSTASH_REDIS_REST_TOKEN=(\S+)/,
    );
  } catch (error) {
    skipped.push({ id: 'upstash', label: 'Upstash (REST shim)', reason: `the REST shim ${reasonOf(error)}` });
    return;
  }
  closers.push(() => stop(shim.child));
  const [, url, token] = shim.match as unknown as [string, string, string];
  const { Redis } = await import('@upstash/redis');
  const { createUpstashStore } = await import('@mrtr/store-upstash');
  // The raw client as its README has it: defaults (auto-pipelining on, retries on), telemetry off.
  const raw = new Redis({ url, token, enableTelemetry: false });
  const store = createUpstashStore({ url, token, namespace: `bench-${RUN_TAG}` });
  const rawPrefix = `mrtr-bench:${RUN_TAG}:upstash-raw:`;
  const rawConsume = async (id: string, exp: number) => (await raw.set(rawPrefix + id, '1', { nx: true, pxat: exp })) === 'OK';
  rows.push({
    id: 'upstash-raw',
    backend: 'upstash',
    kind: 'raw',
    label: '@upstash/redis default client (auto-pipelining), SET key 1 NX PXAT',
    op: 'consume',
    run: rawConsume,
    check: async () => {
      const id = `check-${RUN_TAG}`;
      const exp = Date.now() + 60_000;
      return (await rawConsume(id, exp)) === true && (await rawConsume(id, exp)) === false;
    },
  });
  rows.push({
    id: 'upstash',
    backend: 'upstash',
    kind: 'mrtr',
    label: '@mrtr/store-upstash consume (url + token: its own client, pipelined scripts)',
    op: 'consume',
    run: (id, exp) => store.consume(id, exp),
    check: async () => {
      const id = `check-${RUN_TAG}`;
      const exp = Date.now() + 60_000;
      return (await store.consume(id, exp)) === true && (await store.consume(id, exp)) === false;
    },
  });
  closers.unshift(() => store.close());
}

async function dynamoRows(rows: ServerlessRow[], skipped: SkippedRow[], closers: (() => unknown)[]) {
  let dynalite: Awaited<ReturnType<typeof startChild>>;
  try {
    dynalite = await startChild(process.execPath, [path.join(APP_DIR, 'workers', 'dynalite.mjs')], /DYNALITE_ENDPOINT=(\S+)/);
  } catch (error) {
    skipped.push({ id: 'dynamodb', label: 'DynamoDB (dynalite)', reason: `dynalite ${reasonOf(error)}` });
    return;
  }
  closers.push(() => stop(dynalite.child));
  const endpoint = dynalite.match[1] as string;
  const { DynamoDBClient, PutItemCommand, UpdateItemCommand } = await import('@aws-sdk/client-dynamodb');
  const { createDynamoStore, createTable } = await import('@mrtr/store-dynamodb');
  const client = new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' } });
  closers.push(() => client.destroy());
  const tableName = `mrtr-bench-${RUN_TAG}`;
  await createTable(client, tableName, { timeToLive: false });
  const store = createDynamoStore({ client, tableName, namespace: 'bench' });
  // The raw conditional pair: a claim as a PutItem conditioned on the id being free (or expired), then the record as
  // an UpdateItem conditioned on the claim being pending with this fingerprint.
  const rawPair = async (id: string, exp: number): Promise<boolean> => {
    const key = { pk: { S: `raw#${id}` } };
    try {
      await client.send(
        new PutItemCommand({
          TableName: tableName,
          Item: { ...key, exp: { N: String(exp) }, k: { S: 'p' }, fp: { S: 'fp' } },
          ConditionExpression: 'attribute_not_exists(pk) OR #exp < :now',
          ExpressionAttributeNames: { '#exp': 'exp' },
          ExpressionAttributeValues: { ':now': { N: String(Date.now()) } },
        }),
      );
    } catch (error) {
      if ((error as { name?: string }).name === 'ConditionalCheckFailedException') return false;
      throw error;
    }
    await client.send(
      new UpdateItemCommand({
        TableName: tableName,
        Key: key,
        UpdateExpression: 'SET #k = :d, #out = :out',
        ConditionExpression: '#k = :p AND #fp = :fp',
        ExpressionAttributeNames: { '#k': 'k', '#out': 'out', '#fp': 'fp' },
        ExpressionAttributeValues: { ':d': { S: 'd' }, ':p': { S: 'p' }, ':fp': { S: 'fp' }, ':out': { S: OUTCOME } },
      }),
    );
    return true;
  };
  const claimRecord = async (id: string, exp: number): Promise<boolean> => {
    const claimed = await store.claim(id, exp, 'fp');
    return claimed.status === 'first' && (await store.record(id, 'fp', OUTCOME));
  };
  rows.push({
    id: 'dynamodb-raw',
    backend: 'dynamodb',
    kind: 'raw',
    label: 'DynamoDBClient: PutItem (condition: free) + UpdateItem (condition: pending, fingerprint)',
    op: 'claim+record',
    run: rawPair,
    check: async () => {
      const id = `check-${RUN_TAG}`;
      return (await rawPair(id, Date.now() + 60_000)) === true && (await rawPair(id, Date.now() + 60_000)) === false;
    },
  });
  rows.push({
    id: 'dynamodb',
    backend: 'dynamodb',
    kind: 'mrtr',
    label: '@mrtr/store-dynamodb claim + record (default budget: record from the instance allowance)',
    op: 'claim+record',
    run: claimRecord,
    check: async () => {
      const id = `check-${RUN_TAG}`;
      const exp = Date.now() + 60_000;
      return (await claimRecord(id, exp)) === true && (await store.claim(id, exp, 'fp')).status === 'recorded';
    },
  });
}

async function durableObjectRows(rows: ServerlessRow[], skipped: SkippedRow[], closers: (() => unknown)[]) {
  const label = 'Durable Objects (workerd)';
  let bin: string;
  let build: typeof import('esbuild').build;
  try {
    bin = (createRequire(import.meta.url)('workerd') as { default: string }).default;
    if (!existsSync(bin)) throw new Error(`no workerd binary at ${bin}`);
    ({ build } = await import('esbuild'));
  } catch (error) {
    skipped.push({ id: 'durable-object', label, reason: `workerd or esbuild unavailable: ${reasonOf(error)}` });
    return;
  }
  // In memory when /dev/shm exists: the objects' SQLite files without an fsync per commit, for both rows alike.
  const dir = mkdtempSync(path.join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'mrtr-bench-do-'));
  closers.push(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(path.join(dir, 'objects'));
  try {
    await build({
      entryPoints: [path.join(APP_DIR, 'workers', 'durable-object.mjs')],
      outfile: path.join(dir, 'worker.js'),
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      conditions: ['workerd', 'worker', 'browser'],
      logLevel: 'error',
    });
  } catch (error) {
    skipped.push({ id: 'durable-object', label, reason: `bundling the Worker failed: ${reasonOf(error)}` });
    return;
  }
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  writeFileSync(
    path.join(dir, 'config.capnp'),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "w", worker = .w), (name = "disk", disk = (path = ${JSON.stringify(path.join(dir, 'objects'))}, writable = true))],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "w")],
);
const w :Workerd.Worker = (
  modules = [(name = "worker", esModule = embed "worker.js")],
  compatibilityDate = "2025-09-01",
  durableObjectNamespaces = [
    (className = "MrtrStoreObject", uniqueKey = "bench-store", enableSql = true),
    (className = "RawObject", uniqueKey = "bench-raw", enableSql = true),
  ],
  durableObjectStorage = (localDisk = "disk"),
  bindings = [(name = "STORE", durableObjectNamespace = "MrtrStoreObject"), (name = "RAW", durableObjectNamespace = "RawObject")],
);
`,
  );
  const child = spawn(bin, ['serve', path.join(dir, 'config.capnp')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  closers.unshift(() => stop(child));
  const base = `http://127.0.0.1:${port}/`;
  const ask = async (query: string): Promise<{ n: number; wrong: number; again: boolean }> => {
    const response = await fetch(`${base}?${query}`, { signal: AbortSignal.timeout(30_000) });
    if (response.status !== 200) throw new Error(`the Worker answered ${response.status}: ${(await response.text()).slice(0, 200)}`);
    return (await response.json()) as { n: number; wrong: number; again: boolean };
  };
  const started = Date.now();
  for (;;) {
    try {
      await ask(`op=raw&c=1&n=1&tag=start-${RUN_TAG}`);
      break;
    } catch (error) {
      if (child.exitCode !== null || Date.now() - started > START_MS) {
        stop(child);
        skipped.push({
          id: 'durable-object',
          label,
          reason: `workerd did not serve within ${START_MS / 1000} s: ${reasonOf(error)} ${stderr.trim().slice(0, 200)}`,
        });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  let request = 0;
  for (const [kind, op] of [
    ['raw', 'raw'],
    ['mrtr', 'store'],
  ] as const) {
    for (const inner of SERVERLESS_CONCURRENCY) {
      const id = `durable-object${kind === 'raw' ? '-raw' : ''}`;
      rows.push({
        id,
        backend: 'durable-object',
        kind,
        label:
          kind === 'raw'
            ? 'bare Durable Object class: INSERT … ON CONFLICT DO NOTHING (8 objects, stub.fetch + JSON)'
            : '@mrtr/store-cloudflare consume (MrtrStoreObject, 8 objects)',
        op: 'consume',
        inner,
        run: async () => {
          const answer = await ask(`op=${op}&c=${inner}&n=${DO_OPS_PER_REQUEST}&tag=${RUN_TAG}-${op}-${request++}`);
          if (answer.wrong !== 0) throw new Error(`${id}: ${answer.wrong} consumes of fresh ids were not first`);
        },
        check: async () => {
          const answer = await ask(`op=${op}&c=2&n=4&check=1&tag=check-${RUN_TAG}-${op}-${inner}`);
          return answer.wrong === 0 && answer.again === false;
        },
      });
    }
  }
}

/** Starts what the rows need (Upstash needs `REDIS_URL`); a backend that cannot start is skipped with its reason. */
export async function setupServerless(env: { redisUrl?: string | undefined }): Promise<ServerlessSetup> {
  const rows: ServerlessRow[] = [];
  const skipped: SkippedRow[] = [];
  const closers: (() => unknown)[] = [];
  const close = async () => {
    for (const closer of closers) {
      try {
        await closer();
      } catch {
        // best effort: the bench is ending
      }
    }
  };
  try {
    await upstashRows(env.redisUrl, rows, skipped, closers);
    await dynamoRows(rows, skipped, closers).catch((error: unknown) => {
      skipped.push({ id: 'dynamodb', label: 'DynamoDB (dynalite)', reason: reasonOf(error) });
    });
    await durableObjectRows(rows, skipped, closers);
  } catch (error) {
    await close();
    throw error;
  }
  return { rows, skipped, close };
}

/** Every row answers a fresh id first and its second use not: the checks that ran. */
export async function checkServerless(setup: ServerlessSetup): Promise<string[]> {
  const checks: string[] = [];
  const seen = new Set<string>();
  for (const row of setup.rows) {
    if (seen.has(row.id)) continue;
    seen.add(row.id);
    if (!(await row.check())) throw new Error(`serverless row ${row.id} (${row.label}): a fresh id was not first, or its second use was`);
    checks.push(`${row.id}: first use first, second not`);
  }
  return checks;
}

export const serverlessKey = (row: { id: string }, c: number): string => `serverless|${row.id}|c${c}`;

/** One job of a row at concurrency c: what one harness op is, and how many operations it stands for. */
interface ServerlessJob {
  row: ServerlessRow;
  c: number;
  opsPerCall: number;
}

function jobsOf(setup: ServerlessSetup): ServerlessJob[] {
  return setup.rows.flatMap((row) =>
    row.inner !== undefined
      ? [{ row, c: row.inner, opsPerCall: DO_OPS_PER_REQUEST }]
      : SERVERLESS_CONCURRENCY.map((c) => ({ row, c, opsPerCall: c === 1 ? 1 : POOL_WAVES * c })),
  );
}

/**
 * The jobs: Upstash and DynamoDB at concurrency 1 and 32 in this process (at 32, one op is a pool of 32 loops running
 * 128 operations), Durable Objects one Worker request at a time (256 consumes from 1 or 32 loops inside the Worker).
 */
export function serverlessJobs(setup: ServerlessSetup): Job[] {
  return jobsOf(setup).map(({ row, c, opsPerCall }) => {
    let seq = 0;
    let exp = Date.now() + 10 * 60_000;
    const tag = `${RUN_TAG}${row.id.slice(0, 3)}${row.kind}c${c}-`;
    const one = () => row.run(tag + (seq++).toString(36), exp);
    const pool = async (): Promise<void> => {
      let left = opsPerCall;
      const loop = async (): Promise<void> => {
        while (left > 0) {
          left--;
          await one();
        }
      };
      await Promise.all(Array.from({ length: c }, loop));
    };
    return {
      key: serverlessKey(row, c),
      concurrency: 1,
      batchMs: 200,
      prepare: () => {
        exp = Date.now() + 10 * 60_000;
      },
      op: row.inner !== undefined || c === 1 ? one : pool,
    };
  });
}

export function serverlessSection(setup: ServerlessSetup, checks: string[]): ServerlessSection {
  const rows = jobsOf(setup).map(({ row, c, opsPerCall }) => ({
    key: serverlessKey(row, c),
    id: row.id,
    backend: row.backend,
    kind: row.kind,
    label: row.label,
    op: row.op,
    concurrency: c,
    opsPerCall,
  }));
  return { rows, skipped: setup.skipped, checks };
}

/** The targets of issue 43, each store ÷ its raw client at concurrency 32. */
const SERVERLESS_TARGETS = [
  {
    backend: 'upstash',
    pkg: 'store-upstash',
    threshold: 0.7,
    what: 'Upstash consume ÷ default @upstash/redis SET NX PXAT (REST shim), c32',
  },
  { backend: 'dynamodb', pkg: 'store-dynamodb', threshold: 0.8, what: 'DynamoDB claim+record ÷ raw PutItem + UpdateItem (dynalite), c32' },
  {
    backend: 'durable-object',
    pkg: 'store-cloudflare',
    threshold: 0.85,
    what: 'Durable Object consume ÷ raw object SQL insert (workerd), c32 in the Worker',
  },
] as const;

export function serverlessTargets(result: BenchResult): TargetResult[] {
  if (result.serverless === undefined) return [];
  return SERVERLESS_TARGETS.map(({ backend, pkg, threshold, what }) => {
    const a = `serverless|${backend}|c32`;
    const b = `serverless|${backend}-raw|c32`;
    const va = result.jobs[a]?.opsPerSec;
    const vb = result.jobs[b]?.opsPerSec;
    const value = va === undefined || vb === undefined ? null : va / vb;
    const ra = result.jobs[a]?.rounds;
    const rb = result.jobs[b]?.rounds;
    const ratios =
      ra !== undefined && rb !== undefined && ra.length === rb.length
        ? ra.map((m, i) => m.opsPerSec / (rb[i]?.opsPerSec ?? Number.NaN))
        : [];
    const per = result.serverless?.rows.find((r) => r.key === a)?.opsPerCall ?? 1;
    const fmt = (v: number) => (v * per).toFixed(0);
    const target: TargetResult = {
      id: `serverless.${backend}.c32`,
      pkg,
      label: what,
      value,
      op: '>=',
      threshold,
      unit: 'x',
      pass: value === null ? null : value >= threshold,
      detail: value === null ? `not measured (${va === undefined ? a : b} missing)` : `${fmt(va as number)} vs ${fmt(vb as number)} ops/s`,
    };
    if (ratios.length > 0 && ratios.every(Number.isFinite)) target.roundRange = [Math.min(...ratios), Math.max(...ratios)];
    return target;
  });
}

/** The serverless rows as a table: ops/s at each concurrency and each row ÷ its raw twin. */
export function serverlessBlock(result: BenchResult): string {
  const section = result.serverless;
  if (section === undefined) return '';
  const lines = ['| row | operation | concurrency | ops/s | ÷ raw |', '| --- | --- | ---: | ---: | ---: |'];
  for (const row of section.rows) {
    const ops = result.jobs[row.key]?.opsPerSec;
    const raw = result.jobs[`serverless|${row.backend}-raw|c${row.concurrency}`]?.opsPerSec;
    const ratio = row.kind === 'mrtr' && ops !== undefined && raw !== undefined ? `${(ops / raw).toFixed(2)}×` : '';
    const measured = ops === undefined ? 'n/a' : (ops * row.opsPerCall).toFixed(0);
    lines.push(`| ${row.id}: ${row.label} | ${row.op} | ${row.concurrency} | ${measured} | ${ratio} |`);
  }
  for (const s of section.skipped) lines.push('', `note: ${s.id} skipped: ${s.reason}`);
  return lines.join('\n');
}
