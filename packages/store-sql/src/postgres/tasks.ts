import { createHash } from 'node:crypto';
import { TaskLimitError } from '@mrtr/core/errors';
import { optionsObject } from '@mrtr/core/options';
import { roomFromAtLeast, taskExpiresAt } from '@mrtr/core/tasks';
import type { PgPoolClientLike, PgPoolLike, PgQueryConfigLike, PgQueryResultLike, PostgresConnectionOptions } from '../shared/drivers.js';
import { closeOnce, once, storeCall, toStoreError, whenReady } from '../shared/lifecycle.js';
import { quoteIdentifier } from '../shared/options.js';
import type { SqlTaskStore, SqlTaskStoreCommonOptions, TaskRow } from '../shared/tasks.js';
import { closedTaskStoreError, fromTaskRow, sqlTaskStore, taskIdExistsError, taskSettings } from '../shared/tasks.js';
import {
  deadline,
  holdErrors,
  localTimeoutsSql,
  type PostgresSettings,
  poolHandle,
  postgresBounds,
  postgresTarget,
  qualifier,
  POSTGRES_BOUNDS_OPTIONS,
} from './connection.js';
import { ensurePostgresSchema, taskSchemaPlan } from './schema.js';
import { sqlLiteral } from './statements.js';
import { SQL_TASK_STORE_OPTIONS } from '../shared/tasks.js';

export interface PostgresTaskStoreOptions extends SqlTaskStoreCommonOptions, PostgresConnectionOptions {
  /**
   * Upper bound of one statement in ms, enforced by the server: sent as `statement_timeout` on a pool the store
   * creates, and with `SET LOCAL` in every transaction (each `create`; each write of `update` on an injected
   * pool). The client waits for a reply up to this plus `min(statementTimeoutMs, 1000)`. @default 5000
   */
  statementTimeoutMs?: number;
  /**
   * Server-side `lock_timeout` in ms: how long a `create` waits for its principal's lock (another instance
   * creating a task for the same principal), a write for a row lock, and `ensureSchema()`'s DDL for the table.
   * @default min(2000, statementTimeoutMs)
   */
  lockTimeoutMs?: number;
  /** Upper bound on getting a connection in ms (`connectionTimeoutMillis` of an owned pool; the name `@mrtr/store-redis` uses). @default 5000 */
  connectTimeoutMs?: number;
  /** Size of an owned pool. @default 10 */
  maxConnections?: number;
}

/** Arbitrary 32-bit class ids for `pg_advisory_xact_lock(int, int)`: "mrtk" (a principal's creates), "mrtn" (a count shard's). */
const CREATE_LOCK_CLASS = 0x6d72746b;
const NAMESPACE_LOCK_CLASS = 0x6d72746e;

/** Most shards a namespace's task count is split into (see {@link countShards}). */
export const MAX_COUNT_SHARDS = 8;

/**
 * How many shards, each with a lock and a count of its own, a namespace's tasks are split into: a power of two (so
 * the first byte of a hash spreads evenly), at most {@link MAX_COUNT_SHARDS}, and no more than leaves every shard room
 * for a principal's `maxPerPrincipal` tasks (all of a principal's tasks are in one shard). One shard: the namespace
 * under one lock and one count, as before shards.
 */
export function countShards(maxTasks: number, maxKept: number): number {
  let shards = 1;
  while (shards < MAX_COUNT_SHARDS && Math.floor(maxTasks / (shards * 2)) >= maxKept) shards *= 2;
  return shards;
}

/** Shard `k`'s part of `maxTasks` (the parts add up to `maxTasks`). */
export const shardMaxTasks = (maxTasks: number, shards: number, k: number): number =>
  Math.floor(maxTasks / shards) + (k < maxTasks % shards ? 1 : 0);

/** A principal's shard: the first byte of the MD5 of its UTF-8, modulo `shards` (as {@link shardSql} computes it). */
export const principalShard = (principal: string, shards: number): number =>
  shards === 1 ? 0 : (createHash('md5').update(principal, 'utf8').digest()[0] as number) % shards;

/** The same in SQL, of the `principal` column (md5 and decode exist on every supported PostgreSQL). */
const shardSql = (shards: number): string => `(get_byte(decode(md5(principal), 'hex'), 0) % ${shards})`;

/**
 * The `<table>_counts` key of shard `k` of `shards`: the namespace itself with one shard (the key of a store before
 * shards), else the namespace, U+0001, then `shards:k` (so each layout has keys of its own).
 */
export const countKey = (namespace: string, shards: number, k: number): string =>
  shards === 1 ? namespace : `${namespace}\u0001${shards}:${k}`;

/** Every key of a layout of `shards`. */
const layoutKeys = (namespace: string, shards: number): string[] =>
  Array.from({ length: shards }, (_, k) => countKey(namespace, shards, k));

/** Every key any layout may have left in `<table>_counts` for the namespace. */
const everyLayoutKey = (namespace: string): string[] => {
  const keys: string[] = [];
  for (let shards = 1; shards <= MAX_COUNT_SHARDS; shards *= 2) keys.push(...layoutKeys(namespace, shards));
  return keys;
};

type Query = (config: PgQueryConfigLike) => Promise<PgQueryResultLike>;

/** A refusal that is not a database failure (a bound, a duplicate id, a refused change): rethrown as it is. */
class Refusal {
  readonly error: unknown;
  constructor(error: unknown) {
    this.error = error;
  }
}

/**
 * The task store's statements on the quoted `table` and its quoted `countsTable`, for a namespace split into
 * `shards` count shards: every statement that counts, drops or makes room keeps to the creating principal's shard
 * ($… `k`, see {@link principalShard}); with one shard there is no shard condition at all.
 */
function taskStatements(table: string, countsTable: string, shards: number) {
  const inShard = (k: string): string => (shards === 1 ? '' : ` AND ${shardSql(shards)} = ${k}`);
  const getSql = `SELECT principal, version, record FROM ${table} WHERE ns = $1 AND task_id = $2 AND expires_at > $3`;
  const updateSql =
    `UPDATE ${table} SET record = $4, version = version + 1, live = $5, expires_at = $6 ` +
    'WHERE ns = $1 AND task_id = $2 AND version = $3 AND expires_at > $7';
  // The principal's lock, then its count shard's (always in this order: no deadlock between creates).
  const locksSql = 'SELECT pg_advisory_xact_lock($1, hashtext($2)), pg_advisory_xact_lock($3, hashtext($4))';
  // This principal's expired tasks go, then its live (unfinished) and kept tasks are counted, each count
  // stopping at its bound (bounded work whatever the table holds), and the shard's count ($6: its key) is read
  // (after the shard's lock: see create).
  const countSql =
    `WITH gone AS (DELETE FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at <= $3 RETURNING 1) SELECT ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 AND live LIMIT $4) AS l) AS live, ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 LIMIT $5) AS k) AS kept, ` +
    `(SELECT count(*) FROM gone) AS gone, (SELECT tasks FROM ${countsTable} WHERE ns = $6) AS tasks`;
  // A shard without a count yet (a table of an earlier version, or of another number of shards): counted once.
  const initialCountSql = `SELECT count(*) AS tasks FROM ${table} WHERE ns = $1${inShard('$2')}`;
  // A full shard: its expired rows go first (every one of the shard: at most its part of maxTasks)…
  const dropExpiredSql = `DELETE FROM ${table} WHERE ns = $1 AND expires_at <= $2${inShard('$3')}`;
  // …then the oldest (soonest to expire) final task of the principal of the shard holding the most tasks among those
  // holding a final one and keeping at least $4 (`roomFromAtLeast` of the newcomer's count), or of the newcomer ($3).
  const makeRoomSql =
    `DELETE FROM ${table} WHERE ctid = (SELECT ctid FROM ${table} WHERE ns = $1 AND NOT live AND expires_at > $2 AND principal = ` +
    `(SELECT principal FROM ${table} WHERE ns = $1 AND expires_at > $2${inShard('$5')} GROUP BY principal ` +
    'HAVING bool_or(NOT live) AND (principal = $3 OR count(*) >= $4) ORDER BY count(*) DESC, principal LIMIT 1) ' +
    'ORDER BY expires_at, task_id LIMIT 1)';
  // One statement: a new id is inserted; an expired row of the id (any principal's: it counts for nobody) is taken
  // over; a live one is left alone (`inserted` 0). Then other expired rows of the shard go, a bounded batch (SKIP
  // LOCKED never waits for a row being written; never the id's own row), and the shard's count ($10: its key) is
  // written back: $9 (the count before), minus the purged rows, plus one for a fresh row or for an expired row taken
  // over from another shard (that shard keeps counting it: over-counted, never under, until it is next full and
  // counted again; one of this shard was counted already). Values: ns, task_id, principal, live, expires_at,
  // record, t, purgeBatchSize, tasks, count key[, shard].
  const otherShard = shards === 1 ? 'false' : `get_byte(decode(md5((SELECT principal FROM old)), 'hex'), 0) % ${shards} <> $11`;
  const insertPurgeSql =
    `WITH old AS (SELECT principal FROM ${table} WHERE ns = $1 AND task_id = $2), ` +
    `ins AS (INSERT INTO ${table} AS t (ns, task_id, principal, live, version, expires_at, record) VALUES ($1, $2, $3, $4, 1, $5, $6) ` +
    'ON CONFLICT (ns, task_id) DO UPDATE SET principal = EXCLUDED.principal, live = EXCLUDED.live, version = t.version + 1, ' +
    'expires_at = EXCLUDED.expires_at, record = EXCLUDED.record WHERE t.expires_at <= $7 RETURNING (xmax = 0) AS fresh), ' +
    `d AS (DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE ns = $1 AND expires_at <= $7 AND task_id <> $2${inShard('$11')} ` +
    'ORDER BY expires_at LIMIT $8 FOR UPDATE SKIP LOCKED)) AND expires_at <= $7 RETURNING 1), ' +
    `c AS (INSERT INTO ${countsTable} AS c (ns, tasks) SELECT $10::text, $9::bigint - (SELECT count(*) FROM d) + ` +
    `(SELECT count(*) FROM ins WHERE ins.fresh OR NOT EXISTS (SELECT 1 FROM old) OR ${otherShard}) ` +
    'ON CONFLICT (ns) DO UPDATE SET tasks = EXCLUDED.tasks) ' +
    'SELECT (SELECT count(*) FROM ins) AS inserted';
  // A shard whose count is missing: the namespace's counts of any other layout (another number of shards, or none)
  // are deleted, so that going back to that layout later counts its shards afresh instead of trusting stale counts.
  // $1: the keys of this layout, $2: every key of every layout.
  const staleCountsSql = `DELETE FROM ${countsTable} WHERE ns = ANY($2::text[]) AND ns <> ALL($1::text[])`;

  // The whole common case in one statement (sent with the locks and COMMIT: one round trip): the principal's expired
  // tasks go (never the id's own row: the insert takes that over), the counts are read, and only when the principal's
  // bounds allow it and the shard is below its part ($7) is the task inserted (as insertPurgeSql); the shard's
  // other expired rows go (never the principal's: `gone` has them) and its count is written back. A missing count
  // (`tasks` null) writes nothing but the principal's purge; a full shard, a refusal or a duplicate id inserts
  // nothing (see createIn). Values: ns, principal, t, maxLive, maxKept, count key, the shard's part of maxTasks,
  // task_id, live, expires_at, record, purgeBatchSize[, shard].
  const otherShardFast = shards === 1 ? 'false' : `get_byte(decode(md5((SELECT principal FROM old)), 'hex'), 0) % ${shards} <> $13`;
  const fastCreateSql =
    `WITH gone AS (DELETE FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at <= $3 AND task_id <> $8 RETURNING 1), ` +
    'cnt AS (SELECT ' +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 AND live LIMIT $4) AS l) AS live, ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 LIMIT $5) AS k) AS kept, ` +
    `(SELECT tasks FROM ${countsTable} WHERE ns = $6) - (SELECT count(*) FROM gone) AS tasks), ` +
    'ok AS (SELECT 1 FROM cnt WHERE cnt.tasks IS NOT NULL AND NOT ($9 AND cnt.live >= $4) AND cnt.kept < $5 AND cnt.tasks < $7), ' +
    `old AS (SELECT principal FROM ${table} WHERE ns = $1 AND task_id = $8), ` +
    `ins AS (INSERT INTO ${table} AS t (ns, task_id, principal, live, version, expires_at, record) SELECT $1, $8, $2, $9, 1, $10, $11 FROM ok ` +
    'ON CONFLICT (ns, task_id) DO UPDATE SET principal = EXCLUDED.principal, live = EXCLUDED.live, version = t.version + 1, ' +
    'expires_at = EXCLUDED.expires_at, record = EXCLUDED.record WHERE t.expires_at <= $3 RETURNING (xmax = 0) AS fresh), ' +
    `d AS (DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE ns = $1 AND expires_at <= $3 AND task_id <> $8 AND principal <> $2${inShard('$13')} ` +
    'ORDER BY expires_at LIMIT $12 FOR UPDATE SKIP LOCKED)) AND expires_at <= $3 RETURNING 1), ' +
    `c AS (INSERT INTO ${countsTable} AS c (ns, tasks) SELECT $6::text, cnt.tasks - (SELECT count(*) FROM d) + ` +
    `(SELECT count(*) FROM ins WHERE ins.fresh OR NOT EXISTS (SELECT 1 FROM old) OR ${otherShardFast}) FROM cnt WHERE cnt.tasks IS NOT NULL ` +
    'ON CONFLICT (ns) DO UPDATE SET tasks = EXCLUDED.tasks) ' +
    'SELECT cnt.live, cnt.kept, cnt.tasks, (SELECT count(*) FROM ins) AS inserted FROM cnt';

  return {
    getSql,
    updateSql,
    locksSql,
    countSql,
    initialCountSql,
    dropExpiredSql,
    makeRoomSql,
    insertPurgeSql,
    staleCountsSql,
    fastCreateSql,
  };
}
type TaskStatements = ReturnType<typeof taskStatements>;

/**
 * Runs `work` on a connection of its own, in a transaction with server-side bounds when `transaction` is set
 * (committed when `work` resolves, rolled back when it throws). A connection that failed is destroyed, not
 * returned to the pool.
 */
export async function withClient<T>(
  pool: PgPoolLike,
  settings: PostgresSettings,
  transaction: boolean,
  work: (query: Query) => Promise<T>,
): Promise<T> {
  const client: PgPoolClientLike = await pool.connect();
  const unhold = holdErrors(client);
  const query: Query = (config) => client.query({ ...config, query_timeout: settings.replyWaitMs });
  let failure: unknown;
  try {
    if (!transaction) return await work(query);
    await query({ text: `BEGIN; ${localTimeoutsSql(settings)}` });
    let result: T;
    try {
      result = await work(query);
    } catch (error) {
      // A connection whose ROLLBACK failed is in an unknown state: destroyed below, even after a refusal.
      await query({ text: 'ROLLBACK' }).catch((rollbackError: unknown) => {
        failure = rollbackError;
      });
      throw error;
    }
    await query({ text: 'COMMIT' });
    return result;
  } catch (error) {
    failure ??= error;
    throw error;
  } finally {
    unhold();
    // A refusal (TaskLimitError, a duplicate id, a refused change) leaves the connection healthy; a database error does not.
    const healthy = failure === undefined || failure instanceof Refusal;
    client.release(healthy ? undefined : failure instanceof Error ? failure : true);
  }
}

/** The bounds a create checks, and where. */
interface CreateScope {
  sql: TaskStatements;
  table: string;
  namespace: string;
  t: number;
  maxLive: number;
  maxKept: number;
  maxTasks: number;
  shards: number;
  purgeBatchSize: number;
  settings: PostgresSettings;
}

/**
 * The principal's counts (after its expired tasks went) and its shard's count. A shard without a count yet (a table
 * of an earlier version, or of another number of shards) is counted once.
 */
async function countTasks(
  query: Query,
  scope: CreateScope,
  counts: { live?: unknown; kept?: unknown; gone?: unknown; tasks?: unknown } | undefined,
  shard: number,
): Promise<{ live: number; kept: number; tasks: number }> {
  const { sql, namespace, shards } = scope;
  const live = Number(counts?.live);
  const kept = Number(counts?.kept);
  const gone = Number(counts?.gone);
  if (!Number.isInteger(live) || !Number.isInteger(kept) || !Number.isInteger(gone)) {
    throw new Error('task store: the count query answered no counts');
  }
  let tasks: number;
  if (counts?.tasks === null || counts?.tasks === undefined) {
    await query({ text: sql.staleCountsSql, values: [layoutKeys(namespace, shards), everyLayoutKey(namespace)] });
    tasks = await countShard(query, scope, shard);
  } else tasks = Number(counts.tasks) - gone;
  if (!Number.isSafeInteger(tasks) || tasks < 0) throw new Error('task store: the shard count is not a count');
  return { live, kept, tasks };
}

/** The tasks of a shard, counted from the table (a missing count, or a full shard's, which is then exact again). */
async function countShard(query: Query, scope: CreateScope, shard: number): Promise<number> {
  const values = scope.shards === 1 ? [scope.namespace] : [scope.namespace, shard];
  return Number(((await query({ text: scope.sql.initialCountSql, values })).rows[0] as { tasks?: unknown } | undefined)?.tasks);
}

/** A statement with its values written in as literals (several statements go in one simple query, one round trip). */
const written = (text: string, values: readonly unknown[]): string =>
  text.replace(/\$(\d+)/g, (_, n: string) => {
    const value = values[Number(n) - 1];
    return typeof value === 'boolean' ? String(value) : sqlLiteral(value);
  });

/** The results of a simple query of several statements (pg answers one result per statement). */
const resultsOf = (result: PgQueryResultLike): PgQueryResultLike[] => (Array.isArray(result) ? (result as PgQueryResultLike[]) : [result]);

/**
 * One create. The common case is one round trip: `BEGIN`, the bounds, the principal's lock, then its count shard's
 * (always in this order: no deadlock between creates; creates of principals of other shards never wait for each
 * other), fastCreateSql, `COMMIT`. A full shard or a missing count goes on in {@link createSlow}. A bound or a
 * duplicate id is a {@link Refusal}.
 */
async function createIn(query: Query, scope: CreateScope, row: TaskRow): Promise<void> {
  const { sql, namespace, t, shards } = scope;
  const shard = principalShard(row.principal, shards);
  const key = countKey(namespace, shards, shard);
  const maxTasks = shardMaxTasks(scope.maxTasks, shards, shard);
  const locks = createLocks(scope, row, shard);
  const shardValues = shards === 1 ? [] : [shard];
  // The common case: one request, one round trip (see fastCreateSql); committed whatever it answers.
  const fastValues = [
    namespace,
    row.principal,
    t,
    scope.maxLive,
    scope.maxKept,
    key,
    maxTasks,
    row.taskId,
    row.live,
    row.expiresAt,
    row.json,
    scope.purgeBatchSize,
    ...shardValues,
  ];
  const fast = resultsOf(
    await query({ text: `BEGIN; ${localTimeoutsSql(scope.settings)}; ${locks}; ${written(sql.fastCreateSql, fastValues)}; COMMIT` }),
  );
  const answer = fast[fast.length - 2]?.rows[0] as { live?: unknown; kept?: unknown; tasks?: unknown; inserted?: unknown } | undefined;
  if (Number(answer?.inserted) === 1) return;
  if (answer?.tasks !== null && answer?.tasks !== undefined) {
    if (row.live && Number(answer.live) >= scope.maxLive) throw new Refusal(new TaskLimitError('live', scope.maxLive));
    if (Number(answer.kept) >= scope.maxKept) throw new Refusal(new TaskLimitError('kept', scope.maxKept));
    if (Number(answer.tasks) < maxTasks) throw new Refusal(taskIdExistsError());
  }
  // A full shard (make room) or a missing count (count it): the path below, a transaction of its own.
  await createSlow(query, scope, row, shard, key, maxTasks);
}

/** The locks of a create: its principal's, then its count shard's (written in, for a simple query). */
function createLocks(scope: CreateScope, row: TaskRow, shard: number): string {
  const { sql, namespace, shards } = scope;
  return written(sql.locksSql, [
    CREATE_LOCK_CLASS,
    JSON.stringify([scope.table, namespace, row.principal]),
    NAMESPACE_LOCK_CLASS,
    // One shard: the namespace's lock of a store before shards (same key).
    JSON.stringify(shards === 1 ? [scope.table, namespace] : [scope.table, namespace, shard]),
  ]);
}

/**
 * A create whose shard is full or has no count yet, two round trips and more: `BEGIN`, the bounds, both locks and
 * the counts in one request; the bounds checked (a refusal rolls back; a full shard makes room first, a few more
 * statements); then the insert, a bounded purge of the shard and the shard's count written back, one statement,
 * with `COMMIT`.
 */
async function createSlow(query: Query, scope: CreateScope, row: TaskRow, shard: number, key: string, maxTasks: number): Promise<void> {
  const { sql, namespace, t, shards } = scope;
  const locks = createLocks(scope, row, shard);
  const count = written(sql.countSql, [namespace, row.principal, t, scope.maxLive, scope.maxKept, key]);
  let committed = false;
  try {
    const head = resultsOf(await query({ text: `BEGIN; ${localTimeoutsSql(scope.settings)}; ${locks}; ${count}` }));
    const counts = await countTasks(query, scope, head[head.length - 1]?.rows[0] as Record<string, unknown> | undefined, shard);
    let { tasks } = counts;
    if (row.live && counts.live >= scope.maxLive) throw new Refusal(new TaskLimitError('live', scope.maxLive));
    if (counts.kept >= scope.maxKept) throw new Refusal(new TaskLimitError('kept', scope.maxKept));
    const shardValues = shards === 1 ? [] : [shard];
    if (tasks >= maxTasks) {
      // Full: the shard's expired tasks go and it is counted again (exact: a count over-counted by a take-over, see
      // insertPurgeSql, is set right here), then (still full) a final task of its heaviest holder (or the newcomer).
      await query({ text: sql.dropExpiredSql, values: [namespace, t, ...shardValues] });
      tasks = await countShard(query, scope, shard);
      if (tasks >= maxTasks) {
        // A live task of the id: refused before anything is dropped for it (the insert below would not take its place).
        if (((await query({ text: sql.getSql, values: [namespace, row.taskId, t] })).rowCount ?? 0) > 0)
          throw new Refusal(taskIdExistsError());
        const values = [namespace, t, row.principal, roomFromAtLeast(counts.kept), ...shardValues];
        const made = await query({ text: sql.makeRoomSql, values });
        if (made.rowCount !== 1) throw new Refusal(new TaskLimitError('store', scope.maxTasks));
        tasks--;
      }
    }
    const values = [
      namespace,
      row.taskId,
      row.principal,
      row.live,
      row.expiresAt,
      row.json,
      t,
      scope.purgeBatchSize,
      tasks,
      key,
      ...shardValues,
    ];
    const tail = resultsOf(await query({ text: `${written(sql.insertPurgeSql, values)}; COMMIT` }));
    committed = true;
    // A duplicate id inserted nothing; what was committed (the purge, the count) holds either way.
    if (Number((tail[0]?.rows[0] as { inserted?: unknown } | undefined)?.inserted) !== 1) throw new Refusal(taskIdExistsError());
  } catch (error) {
    // A connection whose ROLLBACK failed is in an unknown state: withClient destroys it (the error is not a refusal).
    if (!committed) await query({ text: 'ROLLBACK' });
    throw error;
  }
}

/**
 * Task store on PostgreSQL (≥ 9.6) through `pg` (loaded only when this factory is used). One row per task:
 * its key columns and the record as JSON text. `create` runs in one transaction under a transaction-scoped
 * advisory lock on (table, namespace, principal), so the per-principal bounds hold across instances; `update`
 * is optimistic (a `version` column, re-read and re-run on a conflict, at most 32 tries).
 */
export function createPostgresTaskStore(options: PostgresTaskStoreOptions): SqlTaskStore {
  const label = 'createPostgresTaskStore';
  options = optionsObject(label, options, { ...SQL_TASK_STORE_OPTIONS, ...POSTGRES_BOUNDS_OPTIONS });
  const target = postgresTarget(label, options);
  const task = taskSettings(label, options);
  const { tableName, namespace, now } = task;
  const quotedTable = quoteIdentifier(`${label}: table`, tableName);
  const { schema, qualify } = qualifier(label, options.schema);
  const table = qualify(quotedTable);
  const settings: PostgresSettings = { ...target, schema, ...postgresBounds(label, options) };
  // A create is several statements (lock, count, insert, purge): each bounded by the server, the whole by this.
  const bounded = deadline('task store', settings.connectTimeoutMs + 4 * settings.replyWaitMs);
  // Tasks held per namespace (≤ 48 + 7 characters), kept in step by every create under the namespace's lock.
  const shards = countShards(task.maxTasks, task.maxKept);
  const sql = taskStatements(table, qualify(`"${tableName}_counts"`), shards);
  const scope: CreateScope = { ...task, sql, table, shards, settings, t: 0 };

  let closed = false;
  const pool = poolHandle(settings, () => closed, closedTaskStoreError);
  const schemaReady = once(async () => ensurePostgresSchema(await pool.get(), taskSchemaPlan(table, tableName, qualify), settings));
  const { ready } = whenReady(pool, task.autoSchema ? schemaReady : undefined);
  const assertOpen = (): void => {
    if (closed) throw closedTaskStoreError();
  };

  return sqlTaskStore(label, task.maxRecordBytes, {
    dialect: 'postgres',
    table,
    assertOpen,
    /** Any failure of the database (or of reaching it) becomes `ERR_STORE_UNAVAILABLE`; refusals keep their own error. */
    async run(work) {
      assertOpen();
      try {
        return await bounded(work());
      } catch (error) {
        if (error instanceof Refusal) throw error.error;
        throw toStoreError(error);
      }
    },
    async insert(row) {
      const on = await ready();
      assertOpen();
      await withClient(on, settings, false, (query) => createIn(query, { ...scope, t: Math.floor(now()) }, row));
    },
    async read(taskId) {
      const values = [namespace, taskId, Math.floor(now())];
      const result = await (await ready()).query({ text: sql.getSql, values, query_timeout: settings.replyWaitMs });
      const row = result.rows[0] as { principal?: unknown; version?: unknown; record?: unknown } | undefined;
      if (row === undefined) return undefined;
      return { record: fromTaskRow(taskId, row.principal, row.record), version: String(row.version) };
    },
    async write(taskId, current, row, next) {
      const on = await ready();
      const values = [namespace, taskId, current.version, row.json, row.live, taskExpiresAt(next), Math.floor(now())];
      const updated =
        pool.owned !== undefined
          ? await on.query({ text: sql.updateSql, values, query_timeout: settings.replyWaitMs })
          : await withClient(on, settings, true, (query) => query({ text: sql.updateSql, values }));
      return updated.rowCount === 1;
    },
    refuse: (error) => new Refusal(error),
    async ensureSchema() {
      assertOpen();
      await storeCall(() => bounded(schemaReady.get()));
    },
    close: closeOnce(() => {
      closed = true;
      return pool.close();
    }),
  });
}
