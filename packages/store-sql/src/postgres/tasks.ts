import { optionsObject, roomFromAtLeast, TaskLimitError, taskExpiresAt } from '@mrtr/core/authoring';
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

/** Arbitrary 32-bit class ids for `pg_advisory_xact_lock(int, int)`: "mrtk" (a principal's creates), "mrtn" (a namespace's count). */
const CREATE_LOCK_CLASS = 0x6d72746b;
const NAMESPACE_LOCK_CLASS = 0x6d72746e;

type Query = (config: PgQueryConfigLike) => Promise<PgQueryResultLike>;

/** A refusal that is not a database failure (a bound, a duplicate id, a refused change): rethrown as it is. */
class Refusal {
  readonly error: unknown;
  constructor(error: unknown) {
    this.error = error;
  }
}

/** The task store's statements on the quoted `table` and its quoted `countsTable`. */
function taskStatements(table: string, countsTable: string) {
  const getSql = `SELECT principal, version, record FROM ${table} WHERE ns = $1 AND task_id = $2 AND expires_at > $3`;
  const updateSql =
    `UPDATE ${table} SET record = $4, version = version + 1, live = $5, expires_at = $6 ` +
    'WHERE ns = $1 AND task_id = $2 AND version = $3 AND expires_at > $7';
  // The principal's lock, then the namespace's (always in this order: no deadlock between creates).
  const locksSql = 'SELECT pg_advisory_xact_lock($1, hashtext($2)), pg_advisory_xact_lock($3, hashtext($4))';
  // This principal's expired tasks go, then its live (unfinished) and kept tasks are counted, each count
  // stopping at its bound (bounded work whatever the table holds), and the namespace's count is read (after the
  // namespace's lock: see create).
  const countSql =
    `WITH gone AS (DELETE FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at <= $3 RETURNING 1) SELECT ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 AND live LIMIT $4) AS l) AS live, ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = $1 AND principal = $2 AND expires_at > $3 LIMIT $5) AS k) AS kept, ` +
    `(SELECT count(*) FROM gone) AS gone, (SELECT tasks FROM ${countsTable} WHERE ns = $1) AS tasks`;
  // A namespace without a count yet (a table of an earlier version): counted once.
  const initialCountSql = `SELECT count(*) AS tasks FROM ${table} WHERE ns = $1`;
  // A full store: its expired rows go first (every one of the namespace: at most maxTasks)…
  const dropExpiredSql = `DELETE FROM ${table} WHERE ns = $1 AND expires_at <= $2`;
  // …then the oldest (soonest to expire) final task of the principal holding the most tasks among those holding a final
  // one and keeping at least $4 (`roomFromAtLeast` of the newcomer's count), or of the newcomer ($3) itself.
  const makeRoomSql =
    `DELETE FROM ${table} WHERE ctid = (SELECT ctid FROM ${table} WHERE ns = $1 AND NOT live AND expires_at > $2 AND principal = ` +
    `(SELECT principal FROM ${table} WHERE ns = $1 AND expires_at > $2 GROUP BY principal ` +
    'HAVING bool_or(NOT live) AND (principal = $3 OR count(*) >= $4) ORDER BY count(*) DESC, principal LIMIT 1) ' +
    'ORDER BY expires_at, task_id LIMIT 1)';
  // A new id is inserted; an expired row of the id (any principal's: it counts for nobody) is taken over; a live
  // one is left alone and rowCount is 0.
  const insertSql =
    `INSERT INTO ${table} AS t (ns, task_id, principal, live, version, expires_at, record) VALUES ($1, $2, $3, $4, 1, $5, $6) ` +
    'ON CONFLICT (ns, task_id) DO UPDATE SET principal = EXCLUDED.principal, live = EXCLUDED.live, version = t.version + 1, ' +
    'expires_at = EXCLUDED.expires_at, record = EXCLUDED.record WHERE t.expires_at <= $7 RETURNING (xmax = 0) AS fresh';
  // Other expired rows of the namespace, a bounded batch (SKIP LOCKED never waits for a row being written), and the
  // namespace's count written back.
  const purgeSql =
    `WITH d AS (DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE ns = $1 AND expires_at <= $2 ` +
    'ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED)) AND expires_at <= $2 RETURNING 1) ' +
    `INSERT INTO ${countsTable} AS c (ns, tasks) SELECT $1, $4::bigint - (SELECT count(*) FROM d) ` +
    'ON CONFLICT (ns) DO UPDATE SET tasks = EXCLUDED.tasks';

  return { getSql, updateSql, locksSql, countSql, initialCountSql, dropExpiredSql, makeRoomSql, insertSql, purgeSql };
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
  purgeBatchSize: number;
}

/**
 * The principal's counts (after its expired tasks went) and the namespace's count. A namespace without a count yet
 * (a table of an earlier version) is counted once.
 */
async function countTasks(query: Query, scope: CreateScope, principal: string): Promise<{ live: number; kept: number; tasks: number }> {
  const { sql, namespace, t } = scope;
  const counts = (await query({ text: sql.countSql, values: [namespace, principal, t, scope.maxLive, scope.maxKept] })).rows[0] as
    | { live?: unknown; kept?: unknown; gone?: unknown; tasks?: unknown }
    | undefined;
  const live = Number(counts?.live);
  const kept = Number(counts?.kept);
  const gone = Number(counts?.gone);
  if (!Number.isInteger(live) || !Number.isInteger(kept) || !Number.isInteger(gone)) {
    throw new Error('task store: the count query answered no counts');
  }
  const tasks =
    counts?.tasks === null || counts?.tasks === undefined
      ? Number(((await query({ text: sql.initialCountSql, values: [namespace] })).rows[0] as { tasks?: unknown } | undefined)?.tasks)
      : Number(counts.tasks) - gone;
  if (!Number.isSafeInteger(tasks) || tasks < 0) throw new Error('task store: the namespace count is not a count');
  return { live, kept, tasks };
}

/**
 * One create, inside its transaction: the principal's lock, then the namespace's (always in this order: no deadlock
 * between creates), the bounds (a full store makes room first), the insert, a bounded purge that writes the
 * namespace's count back. A bound or a duplicate id is a {@link Refusal}.
 */
async function createIn(query: Query, scope: CreateScope, row: TaskRow): Promise<void> {
  const { sql, namespace, t, maxTasks } = scope;
  await query({
    text: sql.locksSql,
    values: [
      CREATE_LOCK_CLASS,
      JSON.stringify([scope.table, namespace, row.principal]),
      NAMESPACE_LOCK_CLASS,
      JSON.stringify([scope.table, namespace]),
    ],
  });
  const counts = await countTasks(query, scope, row.principal);
  let { tasks } = counts;
  if (row.live && counts.live >= scope.maxLive) throw new Refusal(new TaskLimitError('live', scope.maxLive));
  if (counts.kept >= scope.maxKept) throw new Refusal(new TaskLimitError('kept', scope.maxKept));
  if (tasks >= maxTasks) {
    // Full: the namespace's expired tasks go, then (still full) a final task of the heaviest holder (or the newcomer).
    tasks -= (await query({ text: sql.dropExpiredSql, values: [namespace, t] })).rowCount ?? 0;
    if (tasks >= maxTasks) {
      const made = await query({ text: sql.makeRoomSql, values: [namespace, t, row.principal, roomFromAtLeast(counts.kept)] });
      if (made.rowCount !== 1) {
        throw new Refusal(new TaskLimitError('store', maxTasks));
      }
      tasks--;
    }
  }
  const inserted = await query({
    text: sql.insertSql,
    values: [namespace, row.taskId, row.principal, row.live, row.expiresAt, row.json, t],
  });
  if (inserted.rowCount !== 1) throw new Refusal(taskIdExistsError());
  // A fresh row adds one; an expired row of the id taken over was counted already.
  if ((inserted.rows[0] as { fresh?: unknown } | undefined)?.fresh === true) tasks++;
  await query({ text: sql.purgeSql, values: [namespace, t, scope.purgeBatchSize, tasks] });
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
  const sql = taskStatements(table, qualify(`"${tableName}_counts"`));
  const scope: CreateScope = { ...task, sql, table, t: 0 };

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
      await withClient(on, settings, true, (query) => createIn(query, { ...scope, t: Math.floor(now()) }, row));
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
