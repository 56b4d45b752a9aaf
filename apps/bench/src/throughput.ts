import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { ReplayStore } from '@mrtr/core';
import type { TaskRecord, TaskStore } from '@mrtr/core/tasks';
import { createRedisTaskStore } from '@mrtr/store-redis';
import { createPostgresStore, createPostgresTaskStore, createSqliteTaskStore } from '@mrtr/store-sql';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { Job } from './harness.js';
import { bareBatcher, replayTables } from './stores.js';

/**
 * Store throughput under load (issue 43), each row beside a bare client doing the same writes with nothing of the
 * store's bookkeeping:
 * - `throughput|pg|claim-record|c128`: `claim` then `record` (300 B) of a fresh id on `createPostgresStore`, against
 *   `throughput|pg|bare-claim-record|c128`: the same two writes as a bare batched `INSERT … FROM unnest` and a bare
 *   batched `UPDATE … FROM unnest` (the least a group commit can be), on the same pool settings; and `claim` alone.
 * - `throughput|task|<backend>|life|c32`: one task's life (`create` working, `update` to completed with a result,
 *   `get`), each task of its own principal, against `…|bare-life|c32`: `INSERT`, `SELECT` + `UPDATE`, `SELECT` of the
 *   same JSON (Redis: `SET NX`, `GET` + `SET`, `GET`).
 * - `throughput|task|postgres|create|c32` against `…|bare-create|c32`: `create` alone against one bare `INSERT`.
 */
export const THROUGHPUT_RECORD_C = 128;
export const THROUGHPUT_TASK_C = 32;

const RUN_TAG = randomBytes(5).toString('hex');
const LIFETIME_MS = 120_000;
const OUTCOME = 'x'.repeat(300);
const FP = randomBytes(32).toString('base64url');
/** Loose per-principal and store bounds: every task life has its own principal, so none is reached. */
const TASK_LIMITS = { maxLivePerPrincipal: 16, maxPerPrincipal: 256, maxTasks: 100_000_000 };

type RecordingStore = ReplayStore & Required<Pick<ReplayStore, 'claim' | 'record'>> & { ensureSchema(): Promise<void> };

export interface ThroughputEnv {
  redisUrl?: string | undefined;
  databaseUrl?: string | undefined;
}

export interface ThroughputSetup {
  jobs: Job[];
  notes: string[];
  close(): Promise<void>;
}

const taskRecord = (taskId: string, principal: string, now: number): TaskRecord => ({
  taskId,
  principal,
  status: 'working',
  createdAt: now,
  lastUpdatedAt: now,
  ttlMs: LIFETIME_MS,
  inputRequests: {},
  askedKeys: [],
});

const completed = (record: TaskRecord): TaskRecord => ({
  ...record,
  status: 'completed',
  lastUpdatedAt: record.lastUpdatedAt + 1,
  result: { content: [{ type: 'text', text: OUTCOME }] },
});

/** A task life on a store: create, update to completed, get. */
function taskLife(store: TaskStore, tag: string): () => Promise<void> {
  let seq = 0;
  return async () => {
    const n = (seq++).toString(36);
    const id = `${tag}t${n}`;
    await store.create(taskRecord(id, `${tag}p${n}`, Date.now()));
    const done = await store.update(id, completed);
    if (done?.status !== 'completed') throw new Error(`${tag}: update did not complete the task`);
    if ((await store.get(id))?.status !== 'completed') throw new Error(`${tag}: get did not read the task back`);
  };
}

/** A bare task life: insert the JSON, read + write it back completed, read it. */
function bareLife(
  tag: string,
  io: {
    insert(id: string, json: string): Promise<unknown> | unknown;
    read(id: string): Promise<string | null | undefined> | string | null | undefined;
    write(id: string, json: string): Promise<unknown> | unknown;
  },
): () => Promise<void> {
  let seq = 0;
  return async () => {
    const n = (seq++).toString(36);
    const id = `${tag}t${n}`;
    await io.insert(id, JSON.stringify(taskRecord(id, `${tag}p${n}`, Date.now())));
    const json = await io.read(id);
    if (typeof json !== 'string') throw new Error(`${tag}: bare read found nothing`);
    await io.write(id, JSON.stringify(completed(JSON.parse(json) as TaskRecord)));
    if (typeof (await io.read(id)) !== 'string') throw new Error(`${tag}: bare read found nothing`);
  };
}

/** PostgreSQL task rows: a task's life and a create, each beside a bare table. */
async function postgresTaskRows(
  pool: pg.Pool,
  connectionString: string,
  tables: { taskTable: string; bareTaskTable: string },
  jobs: Job[],
  closers: (() => Promise<unknown> | unknown)[],
): Promise<void> {
  const { taskTable, bareTaskTable } = tables;
  const tasks = createPostgresTaskStore({ connectionString, table: taskTable, namespace: 'bench', ...TASK_LIMITS });
  await tasks.ensureSchema();
  closers.push(() => tasks.close());
  await pool.query(
    `CREATE TABLE IF NOT EXISTS "${bareTaskTable}" (ns text NOT NULL, task_id text NOT NULL, record text NOT NULL, PRIMARY KEY (ns, task_id))`,
  );
  jobs.push({
    key: `throughput|task|postgres|life|c${THROUGHPUT_TASK_C}`,
    concurrency: THROUGHPUT_TASK_C,
    batchMs: 250,
    op: taskLife(tasks, `${RUN_TAG}l`),
  });
  const bareIo = {
    insert: (id: string, json: string) =>
      pool.query({
        name: `tpb-ins-${RUN_TAG}`,
        text: `INSERT INTO "${bareTaskTable}" (ns, task_id, record) VALUES ('bench', $1, $2)`,
        values: [id, json],
      }),
    read: async (id: string) =>
      (
        (
          await pool.query({
            name: `tpb-get-${RUN_TAG}`,
            text: `SELECT record FROM "${bareTaskTable}" WHERE ns = 'bench' AND task_id = $1`,
            values: [id],
          })
        ).rows[0] as { record?: string } | undefined
      )?.record,
    write: (id: string, json: string) =>
      pool.query({
        name: `tpb-upd-${RUN_TAG}`,
        text: `UPDATE "${bareTaskTable}" SET record = $2 WHERE ns = 'bench' AND task_id = $1`,
        values: [id, json],
      }),
  };
  jobs.push({
    key: `throughput|task|postgres|bare-life|c${THROUGHPUT_TASK_C}`,
    concurrency: THROUGHPUT_TASK_C,
    batchMs: 250,
    op: bareLife(`${RUN_TAG}bl`, bareIo),
  });
  {
    let seq = 0;
    jobs.push({
      key: `throughput|task|postgres|create|c${THROUGHPUT_TASK_C}`,
      concurrency: THROUGHPUT_TASK_C,
      batchMs: 250,
      op: async () => {
        const n = (seq++).toString(36);
        await tasks.create(taskRecord(`${RUN_TAG}c${n}`, `${RUN_TAG}cp${n}`, Date.now()));
      },
    });
  }
  {
    let seq = 0;
    jobs.push({
      key: `throughput|task|postgres|bare-create|c${THROUGHPUT_TASK_C}`,
      concurrency: THROUGHPUT_TASK_C,
      batchMs: 250,
      op: async () => {
        const n = (seq++).toString(36);
        const id = `${RUN_TAG}bc${n}`;
        await bareIo.insert(id, JSON.stringify(taskRecord(id, `${RUN_TAG}bcp${n}`, Date.now())));
      },
    });
  }
}

/** PostgreSQL rows: claim and claim+record beside a bare batched upsert, then the task rows. */
async function postgresRows(connectionString: string, jobs: Job[], closers: (() => Promise<unknown> | unknown)[]): Promise<void> {
  const replayTable = `mrtr_bench_tp_${RUN_TAG}`;
  const bareTable = `mrtr_bench_tpb_${RUN_TAG}`;
  const taskTable = `mrtr_bench_tpt_${RUN_TAG}`;
  const bareTaskTable = `mrtr_bench_tptb_${RUN_TAG}`;
  const pool = new pg.Pool({ connectionString, max: 10 });
  pool.on('error', () => {});
  closers.push(async () => {
    for (const t of [...replayTables(replayTable), ...replayTables(bareTable), taskTable, `${taskTable}_counts`, bareTaskTable])
      await pool.query(`DROP TABLE IF EXISTS "${t}"`).catch(() => {});
    await pool.end();
  });
  const store = createPostgresStore({
    connectionString,
    table: replayTable,
    namespace: 'bench',
    outcomeBudgetBytes: 2 ** 40,
  }) as RecordingStore;
  await store.ensureSchema();
  closers.push(() => store.close());
  const schemaOnly = createPostgresStore({ connectionString, table: bareTable }) as RecordingStore;
  await schemaOnly.ensureSchema();
  await schemaOnly.close();
  let exp = Date.now() + LIFETIME_MS;
  const prepare = () => {
    exp = Date.now() + LIFETIME_MS;
  };
  for (const step of ['claim', 'claim-record'] as const) {
    let seq = 0;
    const tag = `${RUN_TAG}${step === 'claim' ? 'c' : 'r'}`;
    jobs.push({
      key: `throughput|pg|${step}|c${THROUGHPUT_RECORD_C}`,
      concurrency: THROUGHPUT_RECORD_C,
      batchMs: 400,
      prepare,
      op: async () => {
        const id = tag + (seq++).toString(36);
        const claimed = await store.claim(id, exp, FP);
        if (claimed.status !== 'first') throw new Error(`pg: claim → ${claimed.status}`);
        if (step === 'claim-record' && (await store.record(id, FP, OUTCOME)) !== true) throw new Error('pg: record → false');
      },
    });
  }
  const claimBatch = bareBatcher(async (ids, exps) => {
    const result = await pool.query({
      text:
        `INSERT INTO "${bareTable}" (ns, id, expires_at, fp) SELECT 'bench', u.id, u.e, '${FP}' ` +
        'FROM unnest($1::text[], $2::bigint[]) AS u(id, e) ON CONFLICT DO NOTHING RETURNING id',
      values: [ids, exps],
    });
    const won = new Set(result.rows.map((r: { id: string }) => r.id));
    return ids.map((id) => won.has(id));
  }, 'microtask');
  const recordBatch = bareBatcher(async (ids) => {
    const result = await pool.query({
      text: `UPDATE "${bareTable}" AS t SET outcome = $2 FROM unnest($1::text[]) AS u(id) WHERE t.ns = 'bench' AND t.id = u.id AND t.outcome IS NULL RETURNING t.id`,
      values: [ids, OUTCOME],
    });
    const done = new Set(result.rows.map((r: { id: string }) => r.id));
    return ids.map((id) => done.has(id));
  }, 'microtask');
  {
    let seq = 0;
    jobs.push({
      key: `throughput|pg|bare-claim-record|c${THROUGHPUT_RECORD_C}`,
      concurrency: THROUGHPUT_RECORD_C,
      batchMs: 400,
      prepare,
      op: async () => {
        const id = `${RUN_TAG}b${(seq++).toString(36)}`;
        if (!(await claimBatch(id, exp))) throw new Error('pg bare: insert lost');
        if (!(await recordBatch(id, 0))) throw new Error('pg bare: update lost');
      },
    });
  }
  await postgresTaskRows(pool, connectionString, { taskTable, bareTaskTable }, jobs, closers);
}

/** Redis rows: a task's life beside a bare client. */
async function redisRows(redisUrl: string, jobs: Job[], closers: (() => Promise<unknown> | unknown)[]): Promise<void> {
  const tasks = createRedisTaskStore({ url: redisUrl, namespace: `mrtr-bench-tp:${RUN_TAG}`, ...TASK_LIMITS });
  closers.push(() => tasks.close());
  const bare = new Redis(redisUrl, { lazyConnect: true, commandTimeout: 5000, maxRetriesPerRequest: 1 });
  await bare.connect();
  closers.push(() => bare.quit());
  const prefix = `mrtr-bench-tp:${RUN_TAG}:bare:`;
  jobs.push({
    key: `throughput|task|redis|life|c${THROUGHPUT_TASK_C}`,
    concurrency: THROUGHPUT_TASK_C,
    batchMs: 250,
    op: taskLife(tasks, `${RUN_TAG}l`),
  });
  jobs.push({
    key: `throughput|task|redis|bare-life|c${THROUGHPUT_TASK_C}`,
    concurrency: THROUGHPUT_TASK_C,
    batchMs: 250,
    op: bareLife(`${RUN_TAG}bl`, {
      insert: (id, json) => bare.set(prefix + id, json, 'PX', LIFETIME_MS, 'NX'),
      read: (id) => bare.get(prefix + id),
      write: (id, json) => bare.set(prefix + id, json, 'PX', LIFETIME_MS),
    }),
  });
}

export async function setupThroughput(env: ThroughputEnv): Promise<ThroughputSetup> {
  const jobs: Job[] = [];
  const notes: string[] = [];
  const closers: (() => Promise<unknown> | unknown)[] = [];
  const close = async () => {
    for (const closer of closers.reverse()) await Promise.resolve(closer()).catch(() => {});
  };

  if (env.databaseUrl) await postgresRows(env.databaseUrl, jobs, closers);
  else notes.push('DATABASE_URL is not set: PostgreSQL throughput rows skipped.');

  if (env.redisUrl) await redisRows(env.redisUrl, jobs, closers);
  else notes.push('REDIS_URL is not set: Redis throughput rows skipped.');

  {
    const dir = mkdtempSync(path.join(tmpdir(), 'mrtr-bench-tp-'));
    closers.push(() => rmSync(dir, { recursive: true, force: true }));
    const tasks = createSqliteTaskStore({ filename: path.join(dir, 'tasks.db'), namespace: 'bench', ...TASK_LIMITS });
    await tasks.ensureSchema();
    closers.push(() => tasks.close());
    const db = new Database(path.join(dir, 'bare.db'), { timeout: 5000 });
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.exec('CREATE TABLE t (ns TEXT NOT NULL, task_id TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (ns, task_id))');
    closers.push(() => db.close());
    const ins = db.prepare("INSERT INTO t (ns, task_id, record) VALUES ('bench', ?, ?)");
    const get = db.prepare("SELECT record FROM t WHERE ns = 'bench' AND task_id = ?").pluck();
    const upd = db.prepare("UPDATE t SET record = ? WHERE ns = 'bench' AND task_id = ?");
    jobs.push({
      key: `throughput|task|sqlite|life|c${THROUGHPUT_TASK_C}`,
      concurrency: THROUGHPUT_TASK_C,
      batchMs: 250,
      op: taskLife(tasks, `${RUN_TAG}l`),
    });
    jobs.push({
      key: `throughput|task|sqlite|bare-life|c${THROUGHPUT_TASK_C}`,
      concurrency: THROUGHPUT_TASK_C,
      batchMs: 250,
      op: bareLife(`${RUN_TAG}bl`, {
        insert: (id, json) => ins.run(id, json),
        read: (id) => get.get(id) as string | undefined,
        write: (id, json) => upd.run(json, id),
      }),
    });
  }
  return { jobs, notes, close };
}

/** The ratios the issue names, from the job results' median ops/s. */
export function throughputRatios(opsPerSec: (key: string) => number | undefined): string[] {
  const lines: string[] = [];
  const ratio = (label: string, a: string, b: string) => {
    const x = opsPerSec(a);
    const y = opsPerSec(b);
    if (x !== undefined && y !== undefined) lines.push(`${label}: ${Math.round(x)} / ${Math.round(y)} ops/s = ${(x / y).toFixed(2)}×`);
  };
  const r = THROUGHPUT_RECORD_C;
  const t = THROUGHPUT_TASK_C;
  ratio(`pg claim+record ÷ bare batched insert+update, c${r}`, `throughput|pg|claim-record|c${r}`, `throughput|pg|bare-claim-record|c${r}`);
  ratio(`pg claim+record ÷ claim alone, c${r}`, `throughput|pg|claim-record|c${r}`, `throughput|pg|claim|c${r}`);
  for (const b of ['redis', 'postgres', 'sqlite'])
    ratio(`${b} task life ÷ bare, c${t}`, `throughput|task|${b}|life|c${t}`, `throughput|task|${b}|bare-life|c${t}`);
  ratio(`postgres task create ÷ bare INSERT, c${t}`, `throughput|task|postgres|create|c${t}`, `throughput|task|postgres|bare-create|c${t}`);
  return lines;
}
