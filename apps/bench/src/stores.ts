import { randomBytes } from 'node:crypto';
import { rmSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { ReplayStore } from '@mrtr/core';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { Job } from './harness.js';
import { loadFunction } from './load.js';
import { CheckFailure, type SkippedRow } from './codecs.js';

/**
 * A PostgreSQL replay table and the side tables its `ensureSchema` creates beside it (outcome budget, ledger epoch,
 * key fingerprints): what a run drops at its end.
 */
export const replayTables = (table: string): string[] => [table, `${table}_budget`, `${table}_epoch`, `${table}_keys`];

export type Backend = 'memory' | 'redis' | 'postgres' | 'sqlite';

export interface StoreRow {
  /** e.g. `memory`, `memory-bare`, `redis`, `redis-bare`, `redis-bare-batch`. */
  id: string;
  label: string;
  backend: Backend;
  /** `bare`: one command per consume; `bare-batch`: the same command coalesced by a minimal batcher. */
  kind: 'bare' | 'bare-batch' | 'mrtr';
  /** One single-use consume of a fresh id; resolves true the first time. */
  consume(id: string, expiresAtMs: number): Promise<boolean> | boolean;
  /** Runs before each round (outside timing), e.g. a fresh memory store. */
  prepare?: () => Promise<void> | void;
}

export interface StoreSetup {
  rows: StoreRow[];
  skipped: SkippedRow[];
  notes: string[];
  close(): Promise<void>;
}

export const CONCURRENCY = [1, 32, 128] as const;

/**
 * The bare batched twin's batcher, the least a group commit can be: consumes wait in a queue; one that
 * finds nothing running starts a batch at the end of the tick (`microtask`) or after the pending I/O
 * callbacks (`immediate`, for a synchronous driver); the ones that arrive while a batch runs go into the
 * next batch, started as soon as it ends; at most `max` per batch. No option checks, bounds or recovery.
 */
export function bareBatcher(
  run: (ids: string[], exps: number[]) => Promise<boolean[]> | boolean[],
  mode: 'microtask' | 'immediate',
  max = 256,
): (id: string, expiresAtMs: number) => Promise<boolean> {
  let queue: { id: string; exp: number; resolve: (v: boolean) => void; reject: (e: unknown) => void }[] = [];
  let running = false;
  let scheduled = false;
  const drain = async (): Promise<void> => {
    scheduled = false;
    if (running || queue.length === 0) return;
    running = true;
    const batch = queue.length <= max ? queue : queue.slice(0, max);
    queue = queue.length <= max ? [] : queue.slice(max);
    try {
      const answers = await run(
        batch.map((w) => w.id),
        batch.map((w) => w.exp),
      );
      for (let i = 0; i < batch.length; i++) batch[i]?.resolve(answers[i] === true);
    } catch (error) {
      for (const w of batch) w.reject(error);
    } finally {
      running = false;
    }
    if (queue.length > 0) schedule(true);
  };
  const schedule = (now = false): void => {
    if (running || scheduled) return;
    scheduled = true;
    if (now && mode === 'microtask') void drain();
    else if (mode === 'microtask') queueMicrotask(() => void drain());
    else setImmediate(() => void drain());
  };
  return (id, exp) =>
    new Promise<boolean>((resolve, reject) => {
      queue.push({ id, exp, resolve, reject });
      schedule();
    });
}

/** Random run tag so ids, keys and tables of concurrent or repeated runs never collide. */
const RUN_TAG = randomBytes(6).toString('hex');

type MemoryFactory = (options: { maxEntries?: number; namespace?: string }) => ReplayStore;
type RedisFactory = (options: { url: string; namespace?: string }) => ReplayStore;
type PostgresFactory = (options: {
  connectionString: string;
  table?: string;
  namespace?: string;
}) => ReplayStore & { ensureSchema(): Promise<void> };
type SqliteFactory = (options: { filename: string; table?: string; namespace?: string }) => ReplayStore & { ensureSchema(): Promise<void> };

/** Ids held by one memory store per round: more than any round consumes at ≥ 1M/s. */
const MEMORY_MAX_ENTRIES = 8_000_000;
const SQL_TABLE_STORE = `mrtr_bench_store_${RUN_TAG}`;
const SQL_TABLE_BARE = `mrtr_bench_bare_${RUN_TAG}`;
const SQL_TABLE_BARE_BATCH = `mrtr_bench_bbatch_${RUN_TAG}`;
/** Matches the store's own pool: 10 connections, 5 s statement and connection timeouts. */
const PG_POOL = {
  max: 10,
  connectionTimeoutMillis: 5000,
  statement_timeout: 5000,
  query_timeout: 5000,
  idleTimeoutMillis: 30_000,
  allowExitOnIdle: true,
  keepAlive: true,
};

export interface StoreEnv {
  redisUrl?: string | undefined;
  databaseUrl?: string | undefined;
  /** Skip SQLite (it needs a writable temp dir). */
  sqlite?: boolean;
}

type Closer = () => Promise<unknown> | unknown;

/** What the backends of {@link setupStores} add to: their rows, the rows they skip, notes, and what to close at the end. */
interface StoreBuild {
  rows: StoreRow[];
  skipped: SkippedRow[];
  notes: string[];
  closers: Closer[];
}

/** The backends of {@link setupStores}, in the order of their rows: each adds its bare twins and its store's row. */
const BACKENDS: readonly ((build: StoreBuild, env: StoreEnv) => Promise<void>)[] = [memoryRows, redisRows, postgresRows, sqliteRows];

/**
 * Builds every store row plus its bare-client twin. Redis and PostgreSQL rows need `REDIS_URL` /
 * `DATABASE_URL`; without them they are skipped with a note.
 */
export async function setupStores(env: StoreEnv): Promise<StoreSetup> {
  const build: StoreBuild = { rows: [], skipped: [], notes: [], closers: [] };
  for (const add of BACKENDS) await add(build, env);
  const { rows, skipped, notes, closers } = build;
  return {
    rows,
    skipped,
    notes,
    async close() {
      for (const close of closers) {
        try {
          await close();
        } catch {
          // best effort: the bench is ending
        }
      }
    },
  };
}

/** The URL a backend needs, or undefined after a note that its rows are skipped. */
function given(build: StoreBuild, url: string | undefined, note: string): string | undefined {
  if (url !== undefined && url !== '') return url;
  build.notes.push(note);
  return undefined;
}

/** A store package's factory, or undefined after its row is listed as skipped (with why). */
async function factoryOf<T extends (...args: never[]) => unknown>(
  build: StoreBuild,
  specifier: string,
  name: string,
  skip: { id: string; label: string },
): Promise<T | undefined> {
  const loaded = await loadFunction<T>(specifier, name);
  if (loaded.ok) return loaded.value;
  build.skipped.push({ ...skip, reason: loaded.reason });
  return undefined;
}

/** The row of a store of the package (kind `mrtr`): its own consume. */
const storeRow = (store: ReplayStore, id: string, label: string, backend: Backend): StoreRow => ({
  id,
  label,
  backend,
  kind: 'mrtr',
  consume: (key, expiresAtMs) => store.consume(key, expiresAtMs),
});

/** Makes a SQL table or file with the store's own schema, by a store opened for that alone. */
async function ensureSchemaWith(store: ReplayStore & { ensureSchema(): Promise<void> }): Promise<void> {
  await store.ensureSchema();
  await store.close();
}

async function memoryRows(build: StoreBuild): Promise<void> {
  const bareMap = new Map<string, number>();
  build.rows.push({
    id: 'memory-bare',
    label: 'bare Map get+set (same semantics, no bound, no sweep)',
    backend: 'memory',
    kind: 'bare',
    prepare: () => bareMap.clear(),
    consume(id, expiresAtMs) {
      const held = bareMap.get(id);
      if (held !== undefined && held >= Date.now()) return Promise.resolve(false);
      bareMap.set(id, expiresAtMs);
      return Promise.resolve(true);
    },
  });
  const create = await factoryOf<MemoryFactory>(build, '@mrtr/store-memory', 'createMemoryStore', {
    id: 'memory',
    label: '@mrtr/store-memory',
  });
  if (create === undefined) return;
  let store = create({ maxEntries: MEMORY_MAX_ENTRIES, namespace: 'bench' });
  build.rows.push({
    id: 'memory',
    label: `@mrtr/store-memory (maxEntries ${MEMORY_MAX_ENTRIES.toLocaleString('en-US')}, fresh store per round)`,
    backend: 'memory',
    kind: 'mrtr',
    async prepare() {
      await store.close();
      store = create({ maxEntries: MEMORY_MAX_ENTRIES, namespace: 'bench' });
    },
    consume: (id, expiresAtMs) => store.consume(id, expiresAtMs),
  });
  build.closers.push(() => store.close());
}

async function redisRows(build: StoreBuild, env: StoreEnv): Promise<void> {
  const url = given(build, env.redisUrl, 'REDIS_URL is not set: Redis rows skipped.');
  if (url === undefined) return;
  const bare = new Redis(url, { lazyConnect: true, commandTimeout: 5000, maxRetriesPerRequest: 1 });
  await bare.connect();
  build.closers.push(() => bare.quit());
  const prefix = `mrtr-bench:${RUN_TAG}:bare:`;
  build.rows.push({
    id: 'redis-bare',
    label: 'bare ioredis SET key 1 NX PXAT',
    backend: 'redis',
    kind: 'bare',
    consume: async (id, expiresAtMs) => (await bare.set(prefix + id, '1', 'PXAT', expiresAtMs, 'NX')) === 'OK',
  });
  // Bare batched: the multi-key script of the issue (SET NX PXAT per key, 1/0 per key), one EVAL per batch.
  const script =
    "local r = {} for i = 1, #KEYS do if redis.call('SET', KEYS[i], '1', 'PXAT', ARGV[i], 'NX') then r[i] = 1 else r[i] = 0 end end return r";
  const batchPrefix = `mrtr-bench:${RUN_TAG}:bare-batch:`;
  build.rows.push({
    id: 'redis-bare-batch',
    label: 'bare ioredis, waiting consumes as one EVAL of a SET NX PXAT-per-key script',
    backend: 'redis',
    kind: 'bare-batch',
    consume: bareBatcher(async (ids, exps) => {
      const reply = (await bare.eval(script, ids.length, ...ids.map((id) => batchPrefix + id), ...exps)) as number[];
      return reply.map((r) => r === 1);
    }, 'microtask'),
  });
  const create = await factoryOf<RedisFactory>(build, '@mrtr/store-redis', 'createRedisStore', { id: 'redis', label: '@mrtr/store-redis' });
  if (create === undefined) return;
  const store = create({ url, namespace: `mrtr-bench:${RUN_TAG}` });
  build.closers.push(() => store.close());
  build.rows.push(storeRow(store, 'redis', '@mrtr/store-redis (from URL, batching)', 'redis'));
}

async function postgresRows(build: StoreBuild, env: StoreEnv): Promise<void> {
  const connectionString = given(build, env.databaseUrl, 'DATABASE_URL is not set: PostgreSQL rows skipped.');
  if (connectionString === undefined) return;
  const create = await factoryOf<PostgresFactory>(build, '@mrtr/store-sql', 'createPostgresStore', {
    id: 'postgres',
    label: '@mrtr/store-sql (postgres)',
  });
  if (create === undefined) return;
  // The bare client writes to its own table with the store's own schema (created by the store).
  for (const table of [SQL_TABLE_BARE, SQL_TABLE_BARE_BATCH]) await ensureSchemaWith(create({ connectionString, table }));
  const store = create({ connectionString, table: SQL_TABLE_STORE, namespace: 'bench' });
  await store.ensureSchema();
  const pool = new pg.Pool({ connectionString, ...PG_POOL });
  pool.on('error', () => {});
  build.closers.push(async () => {
    await store.close();
    for (const table of [SQL_TABLE_STORE, SQL_TABLE_BARE, SQL_TABLE_BARE_BATCH].flatMap(replayTables))
      await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => {});
    await pool.end();
  });
  const insert = {
    name: `mrtr-bench-insert-${RUN_TAG}`,
    text: `INSERT INTO "${SQL_TABLE_BARE}" (ns, id, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
  };
  build.rows.push({
    id: 'postgres-bare',
    label: 'bare pg.Pool INSERT … ON CONFLICT DO NOTHING (named prepared statement, same pool settings)',
    backend: 'postgres',
    kind: 'bare',
    consume: async (id, expiresAtMs) => (await pool.query({ ...insert, values: ['bench', id, expiresAtMs] })).rowCount === 1,
  });
  const batchInsert = {
    name: `mrtr-bench-batch-${RUN_TAG}`,
    text:
      `INSERT INTO "${SQL_TABLE_BARE_BATCH}" (ns, id, expires_at) SELECT 'bench', u.id, u.e ` +
      'FROM unnest($1::text[], $2::bigint[]) AS u(id, e) ON CONFLICT DO NOTHING RETURNING id',
  };
  build.rows.push({
    id: 'postgres-bare-batch',
    label: 'bare pg.Pool, waiting consumes as one INSERT … SELECT FROM unnest … ON CONFLICT DO NOTHING RETURNING id',
    backend: 'postgres',
    kind: 'bare-batch',
    consume: bareBatcher(async (ids, exps) => {
      const result = await pool.query({ ...batchInsert, values: [ids, exps] });
      const won = new Set(result.rows.map((r: { id: string }) => r.id));
      const seen = new Set<string>();
      return ids.map((id) => {
        const first = !seen.has(id);
        seen.add(id);
        return first && won.has(id);
      });
    }, 'microtask'),
  });
  build.rows.push(
    storeRow(store, 'postgres', '@mrtr/store-sql createPostgresStore (from URL, default pool of 10, group commit)', 'postgres'),
  );
}

/** A bare SQLite file with the store's schema, opened with the settings the store applies: WAL, synchronous=FULL, busy_timeout. */
async function bareSqlite(create: SqliteFactory, filename: string): Promise<Database.Database> {
  await ensureSchemaWith(create({ filename }));
  const db = new Database(filename, { timeout: 5000 });
  db.pragma('busy_timeout = 5000');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  return db;
}

async function sqliteRows(build: StoreBuild, env: StoreEnv): Promise<void> {
  if (env.sqlite === false) return;
  const create = await factoryOf<SqliteFactory>(build, '@mrtr/store-sql', 'createSqliteStore', {
    id: 'sqlite',
    label: '@mrtr/store-sql (sqlite)',
  });
  if (create === undefined) return;
  const dir = mkdtempSync(path.join(tmpdir(), 'mrtr-bench-'));
  build.closers.push(() => rmSync(dir, { recursive: true, force: true }));
  const db = await bareSqlite(create, path.join(dir, 'bare.db'));
  const insert = db.prepare('INSERT INTO "mrtr_replay" (ns, id, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING');
  // Bare batched: its own file, same pragmas, one BEGIN IMMEDIATE … COMMIT per batch.
  const batchDb = await bareSqlite(create, path.join(dir, 'bare-batch.db'));
  const batchInsert = batchDb.prepare('INSERT INTO "mrtr_replay" (ns, id, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING');
  const runBatch = batchDb.transaction((ids: string[], exps: number[]) =>
    ids.map((id, i) => batchInsert.run('bench', id, exps[i]).changes === 1),
  );
  const store = create({ filename: path.join(dir, 'store.db'), namespace: 'bench' });
  await store.ensureSchema();
  build.closers.unshift(async () => {
    await store.close();
    db.close();
    batchDb.close();
  });
  build.rows.push({
    id: 'sqlite-bare',
    label: 'bare better-sqlite3 prepared INSERT … ON CONFLICT DO NOTHING (WAL, synchronous=FULL)',
    backend: 'sqlite',
    kind: 'bare',
    consume: (id, expiresAtMs) => insert.run('bench', id, expiresAtMs).changes === 1,
  });
  build.rows.push({
    id: 'sqlite-bare-batch',
    label: 'bare better-sqlite3, waiting consumes as one transaction (BEGIN IMMEDIATE … COMMIT) of prepared inserts',
    backend: 'sqlite',
    kind: 'bare-batch',
    consume: bareBatcher((ids, exps) => runBatch.immediate(ids, exps), 'immediate'),
  });
  build.rows.push(
    storeRow(store, 'sqlite', '@mrtr/store-sql createSqliteStore (own file, defaults: WAL, synchronous=FULL, group commit)', 'sqlite'),
  );
}

/** Every row: a fresh id consumes once (`true`), a second time not (`false`). Throws on failure. */
export async function checkStores(setup: StoreSetup): Promise<string[]> {
  const checks: string[] = [];
  const exp = Date.now() + 60_000;
  for (const row of setup.rows) {
    const id = `check-${RUN_TAG}-${row.id}`;
    await row.prepare?.();
    const first = await row.consume(id, exp);
    const second = await row.consume(id, exp);
    if (first !== true || second !== false) {
      throw new CheckFailure(
        `store ${row.id} (${row.label}): expected consume → true then false, got ${String(first)} then ${String(second)}`,
      );
    }
    checks.push(`${row.id}: first consume true, second false`);
  }
  return checks;
}

/**
 * Ids for the memory rows: 2^21 distinct 22-character base64url strings of 16 random bytes, made
 * before timing (a jti reaches `consume` as an existing flat string). Building an id per call by
 * string concatenation costs ~0.4 µs here, as much as the consume itself, and would be measured
 * as store time. Each memory round starts with an empty ledger (fresh store / cleared map), so the
 * same list is reused every round; a round never needs more than ~1M of them.
 */
export const MEMORY_ID_COUNT = 1 << 21;
let memoryIds: string[] | undefined;
export function getMemoryIds(): string[] {
  if (memoryIds === undefined) {
    const bytes = randomBytes(16 * MEMORY_ID_COUNT);
    memoryIds = new Array<string>(MEMORY_ID_COUNT);
    for (let i = 0; i < MEMORY_ID_COUNT; i++) memoryIds[i] = bytes.toString('base64url', i * 16, i * 16 + 16);
  }
  return memoryIds;
}

/**
 * Consume jobs at every concurrency; each op consumes a fresh 22-character id: pre-made for the
 * memory rows, built per call (`tag` + counter) for the network stores, whose ids must stay unique
 * across rounds and where the ~0.4 µs is lost in the round trip.
 */
export function storeJobs(setup: StoreSetup): Job[] {
  const jobs: Job[] = [];
  for (const c of CONCURRENCY) {
    for (const row of setup.rows) {
      // Concurrency 128 is for the network and SQL stores (group commit); a memory consume never waits.
      if (c === 128 && row.backend === 'memory') continue;
      let seq = 0;
      // Live from the start (each round's prepare moves it on): a store on its own clock refuses a past expiry.
      let exp = Date.now() + 10 * 60_000;
      let op: () => unknown;
      if (row.backend === 'memory') {
        const ids = getMemoryIds();
        op = () => {
          const id = ids[seq++];
          if (id === undefined) throw new Error(`memory bench ran out of its ${MEMORY_ID_COUNT} pre-made ids in one round`);
          return row.consume(id, exp);
        };
      } else {
        const tag = `${RUN_TAG.slice(0, 6)}${row.id.slice(0, 2)}${row.kind.slice(0, 6)}c${String(c).padStart(2, '0')}`;
        op = () => row.consume(tag + (seq++).toString(36).padStart(10, '0'), exp);
      }
      jobs.push({
        key: `store|${row.id}|c${c}`,
        concurrency: c,
        batchMs: row.backend === 'memory' ? 3 : 15,
        prepare: async () => {
          exp = Date.now() + 10 * 60_000;
          if (row.backend === 'memory') seq = 0;
          await row.prepare?.();
        },
        op,
      });
    }
  }
  return jobs;
}
