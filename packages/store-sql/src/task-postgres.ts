import type { TaskRecord } from '@mrtr/core';
import {
  assertTaskChange,
  intOption,
  optionsObject,
  parseTaskStoreLimits,
  StoreUnavailableError,
  TaskLimitError,
  taskExpiresAt,
  withDeadline,
} from '@mrtr/core/authoring';
import { once, quoteIdentifier, toStoreError } from './common.js';
import {
  loadDriver,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgQueryConfigLike,
  type PgQueryResultLike,
  type PoolConstructor,
  type PostgresConnectionOptions,
} from './drivers.js';
import { holdErrors } from './postgres.js';
import {
  closedTaskStoreError,
  fromTaskRow,
  isTaskId,
  type SqlTaskStore,
  type SqlTaskStoreCommonOptions,
  taskIdExistsError,
  taskSettings,
  toTaskRow,
  UPDATE_TRIES,
  unsettledUpdateError,
} from './task-common.js';

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

/** Arbitrary 32-bit class ids for `pg_advisory_xact_lock(int, int)`: "mrtr" (schema, as the replay store) and "mrtk" (a principal's creates). */
const SCHEMA_LOCK_CLASS = 0x6d727472;
const CREATE_LOCK_CLASS = 0x6d72746b;
const NAMESPACE_LOCK_CLASS = 0x6d72746e;
const LOCK_NOT_AVAILABLE = '55P03';

type Query = (config: PgQueryConfigLike) => Promise<PgQueryResultLike>;

/**
 * Task store on PostgreSQL (≥ 9.6) through `pg` (loaded only when this factory is used). One row per task:
 * its key columns and the record as JSON text. `create` runs in one transaction under a transaction-scoped
 * advisory lock on (table, namespace, principal), so the per-principal bounds hold across instances; `update`
 * is optimistic (a `version` column, re-read and re-run on a conflict, at most 32 tries).
 */
export function createPostgresTaskStore(options: PostgresTaskStoreOptions): SqlTaskStore {
  const label = 'createPostgresTaskStore';
  options = optionsObject(label, options);
  const { pool: injected, connectionString } = options;
  if ((injected === undefined) === (connectionString === undefined)) {
    throw new TypeError(`${label}: pass exactly one of pool or connectionString`);
  }
  if (injected !== undefined && (injected === null || typeof injected.query !== 'function' || typeof injected.connect !== 'function')) {
    throw new TypeError(`${label}: pool must be a pg.Pool`);
  }
  if (connectionString !== undefined && (typeof connectionString !== 'string' || connectionString.length === 0)) {
    throw new TypeError(`${label}: connectionString must be a non-empty string`);
  }
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(label, options);
  const settings = taskSettings(label, options, { maxLive, maxKept });
  const { tableName, namespace, autoSchema, now, maxRecordBytes, purgeBatchSize } = settings;
  const quotedTable = quoteIdentifier(`${label}: table`, tableName);
  const quotedSchema = options.schema === undefined ? undefined : quoteIdentifier(`${label}: schema`, options.schema);
  const table = quotedSchema === undefined ? quotedTable : `${quotedSchema}.${quotedTable}`;
  // Derived from the validated table name (≤ 48 + 14 characters, within PostgreSQL's 63).
  const principalIndex = `${tableName}_principal_idx`;
  // Tasks held per namespace (≤ 48 + 7 characters), kept in step by every create under the namespace's lock.
  const quotedCounts = `"${tableName}_counts"`;
  const countsTable = quotedSchema === undefined ? quotedCounts : `${quotedSchema}.${quotedCounts}`;
  const expiryIndex = `${tableName}_expires_at_idx`;
  const statementTimeoutMs = intOption(`${label}: statementTimeoutMs`, options.statementTimeoutMs, 5000, 1, 600_000);
  const connectionTimeoutMs = intOption(`${label}: connectTimeoutMs`, options.connectTimeoutMs, 5000, 1, 600_000);
  const lockTimeoutMs = intOption(`${label}: lockTimeoutMs`, options.lockTimeoutMs, Math.min(2000, statementTimeoutMs), 1, 600_000);
  const maxConnections = intOption(`${label}: maxConnections`, options.maxConnections, 10, 1, 10_000);
  const replyWaitMs = statementTimeoutMs + Math.min(statementTimeoutMs, 1000);
  // A create is several statements (lock, count, insert, purge): each bounded by the server, the whole by this.
  const deadlineMs = connectionTimeoutMs + 4 * replyWaitMs;
  // Numbers validated above, so they can be written into the SQL text.
  const beginSql = `BEGIN; SET LOCAL statement_timeout = ${statementTimeoutMs}; SET LOCAL lock_timeout = ${lockTimeoutMs}`;

  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns text NOT NULL, task_id text NOT NULL, principal text NOT NULL, live boolean NOT NULL, ` +
    'version bigint NOT NULL, expires_at bigint NOT NULL, record text NOT NULL, PRIMARY KEY (ns, task_id))';
  const createPrincipalIndexSql = `CREATE INDEX IF NOT EXISTS "${principalIndex}" ON ${table} (ns, principal, expires_at)`;
  const createExpiryIndexSql = `CREATE INDEX IF NOT EXISTS "${expiryIndex}" ON ${table} (expires_at)`;
  const createCountsSql = `CREATE TABLE IF NOT EXISTS ${countsTable} (ns text PRIMARY KEY, tasks bigint NOT NULL)`;
  // Read from the catalog before anything is changed: no lock on the table when nothing is missing.
  const hasIndex = (n: number) =>
    `EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid AND i.relname = $${n})`;
  const catalogSql =
    `SELECT c.oid IS NOT NULL AS has_table, ${hasIndex(2)} AS has_principal_index, ${hasIndex(3)} AS has_expiry_index, ` +
    'to_regclass($4::text) IS NOT NULL AS has_counts FROM (SELECT to_regclass($1::text)::oid AS oid) AS c';
  const catalogValues = [table, principalIndex, expiryIndex, countsTable];

  const getSql = `SELECT principal, version, record FROM ${table} WHERE ns = $1 AND task_id = $2 AND expires_at > $3`;
  const updateSql =
    `UPDATE ${table} SET record = $4, version = version + 1, live = $5, expires_at = $6 ` +
    'WHERE ns = $1 AND task_id = $2 AND version = $3 AND expires_at > $7';
  const lockSql = 'SELECT pg_advisory_xact_lock($1, hashtext($2))';
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
  // …then the oldest (soonest to expire) final task of the principal holding the most tasks among those holding a final one.
  const makeRoomSql =
    `DELETE FROM ${table} WHERE ctid = (SELECT ctid FROM ${table} WHERE ns = $1 AND NOT live AND expires_at > $2 AND principal = ` +
    `(SELECT principal FROM ${table} WHERE ns = $1 AND expires_at > $2 GROUP BY principal HAVING bool_or(NOT live) ORDER BY count(*) DESC, principal LIMIT 1) ` +
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
  // A namespace's tasks are counted under this lock (class "mrtn"), taken after the principal's.
  const namespaceKey = JSON.stringify([table, namespace]);

  let closed = false;
  let closing: Promise<void> | undefined;
  let owned: (PgPoolLike & { on(event: 'error', listener: (error: Error) => void): unknown }) | undefined;

  const poolReady = once<PgPoolLike>(async () => {
    if (injected !== undefined) return injected;
    const pg = (await loadDriver('pg')) as { Pool: PoolConstructor };
    if (closed) throw closedTaskStoreError();
    owned = new pg.Pool({
      connectionString,
      max: maxConnections,
      connectionTimeoutMillis: connectionTimeoutMs,
      statement_timeout: statementTimeoutMs,
      lock_timeout: lockTimeoutMs,
      query_timeout: replyWaitMs,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    owned.on('error', () => {});
    return owned;
  });

  const deadlineError = () => new StoreUnavailableError({ cause: new Error('task store deadline exceeded') });
  const bounded = <T>(work: Promise<T>): Promise<T> => withDeadline(work, deadlineMs, deadlineError);
  const assertOpen = (): void => {
    if (closed) throw closedTaskStoreError();
  };

  /**
   * Runs `work` on a connection of its own, in a transaction with server-side bounds when `transaction` is set
   * (committed when `work` resolves, rolled back when it throws). A connection that failed is destroyed, not
   * returned to the pool.
   */
  const withClient = async <T>(pool: PgPoolLike, transaction: boolean, work: (query: Query) => Promise<T>): Promise<T> => {
    const client: PgPoolClientLike = await pool.connect();
    const unhold = holdErrors(client);
    const query: Query = (config) => client.query({ ...config, query_timeout: replyWaitMs });
    let failure: unknown;
    try {
      if (!transaction) return await work(query);
      await query({ text: beginSql });
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
  };

  const runEnsureSchema = async (): Promise<void> => {
    const pool = await poolReady.get();
    const catalog = (await pool.query({ text: catalogSql, values: catalogValues, query_timeout: replyWaitMs })).rows[0] as
      | Record<string, unknown>
      | undefined;
    if (
      catalog?.has_table === true &&
      catalog.has_principal_index === true &&
      catalog.has_expiry_index === true &&
      catalog.has_counts === true
    ) {
      return;
    }
    try {
      await withClient(pool, true, async (query) => {
        // Two processes running CREATE TABLE IF NOT EXISTS at once can both pass the existence check and one then
        // fails on the type catalog: a transaction-scoped advisory lock serialises them.
        await query({ text: lockSql, values: [SCHEMA_LOCK_CLASS, `mrtr:${table}`] });
        const found = ((await query({ text: catalogSql, values: catalogValues })).rows[0] ?? {}) as Record<string, unknown>;
        if (found.has_table !== true) await query({ text: createTableSql });
        if (found.has_principal_index !== true) await query({ text: createPrincipalIndexSql });
        if (found.has_expiry_index !== true) await query({ text: createExpiryIndexSql });
        if (found.has_counts !== true) await query({ text: createCountsSql });
      });
    } catch (error) {
      if ((error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) {
        throw new StoreUnavailableError({
          cause: new Error(
            `ensureSchema: gave up after lockTimeoutMs (${lockTimeoutMs} ms) waiting for a lock on ${table} held by another session; ` +
              'nothing was changed. Retry when it ends, or run the schema statements from your migration tool and pass ensureSchema: false',
            { cause: error },
          ),
        });
      }
      throw error;
    }
  };
  const schemaReady = once(runEnsureSchema);

  let readyPool: PgPoolLike | undefined;
  const ready = async (): Promise<PgPoolLike> => {
    if (readyPool !== undefined) return readyPool;
    const pool = await poolReady.get();
    if (autoSchema) await schemaReady.get();
    readyPool = pool;
    return pool;
  };

  /** Any failure of the database (or of reaching it) becomes `ERR_STORE_UNAVAILABLE`; refusals keep their own error. */
  const guarded = async <T>(work: () => Promise<T>): Promise<T> => {
    assertOpen();
    try {
      return await bounded(work());
    } catch (error) {
      if (error instanceof Refusal) throw error.error;
      throw toStoreError(error);
    }
  };

  const read = async (pool: PgPoolLike, taskId: string): Promise<{ record: TaskRecord; version: string } | undefined> => {
    const result = await pool.query({ text: getSql, values: [namespace, taskId, Math.floor(now())], query_timeout: replyWaitMs });
    const row = result.rows[0] as { principal?: unknown; version?: unknown; record?: unknown } | undefined;
    if (row === undefined) return undefined;
    return { record: fromTaskRow(taskId, row.principal, row.record), version: String(row.version) };
  };

  return {
    dialect: 'postgres',
    table,

    async create(record) {
      const row = toTaskRow(`${label}: create`, record, maxRecordBytes);
      await guarded(async () => {
        const pool = await ready();
        assertOpen();
        await withClient(pool, true, async (query) => {
          const t = Math.floor(now());
          await query({
            text: locksSql,
            values: [CREATE_LOCK_CLASS, JSON.stringify([table, namespace, row.principal]), NAMESPACE_LOCK_CLASS, namespaceKey],
          });
          const counts = (await query({ text: countSql, values: [namespace, row.principal, t, maxLive, maxKept] })).rows[0] as
            | { live?: unknown; kept?: unknown; gone?: unknown; tasks?: unknown }
            | undefined;
          const live = Number(counts?.live);
          const kept = Number(counts?.kept);
          const gone = Number(counts?.gone);
          if (!Number.isInteger(live) || !Number.isInteger(kept) || !Number.isInteger(gone)) {
            throw new Error('task store: the count query answered no counts');
          }
          let tasks =
            counts?.tasks === null || counts?.tasks === undefined
              ? Number(((await query({ text: initialCountSql, values: [namespace] })).rows[0] as { tasks?: unknown } | undefined)?.tasks)
              : Number(counts.tasks) - gone;
          if (!Number.isSafeInteger(tasks) || tasks < 0) throw new Error('task store: the namespace count is not a count');
          if (row.live && live >= maxLive) throw new Refusal(new TaskLimitError('live', maxLive));
          if (kept >= maxKept) throw new Refusal(new TaskLimitError('kept', maxKept));
          if (tasks >= maxTasks) {
            // Full: the namespace's expired tasks go, then (still full) a final task of the heaviest holder.
            tasks -= (await query({ text: dropExpiredSql, values: [namespace, t] })).rowCount ?? 0;
            if (tasks >= maxTasks) {
              if ((await query({ text: makeRoomSql, values: [namespace, t] })).rowCount !== 1) {
                throw new Refusal(new TaskLimitError('store', maxTasks));
              }
              tasks--;
            }
          }
          const inserted = await query({
            text: insertSql,
            values: [namespace, row.taskId, row.principal, row.live, row.expiresAt, row.json, t],
          });
          if (inserted.rowCount !== 1) throw new Refusal(taskIdExistsError());
          // A fresh row adds one; an expired row of the id taken over was counted already.
          if ((inserted.rows[0] as { fresh?: unknown } | undefined)?.fresh === true) tasks++;
          await query({ text: purgeSql, values: [namespace, t, purgeBatchSize, tasks] });
        });
      });
    },

    async get(taskId) {
      if (!isTaskId(taskId)) return undefined;
      return guarded(async () => (await read(await ready(), taskId))?.record);
    },

    async update(taskId, change) {
      if (typeof change !== 'function') throw new TypeError(`${label}: update: change must be a function`);
      if (!isTaskId(taskId)) return undefined;
      return guarded(async () => {
        const pool = await ready();
        for (let attempt = 0; attempt < UPDATE_TRIES; attempt++) {
          assertOpen();
          const current = await read(pool, taskId);
          if (current === undefined) return undefined;
          let next: TaskRecord | undefined;
          let row: ReturnType<typeof toTaskRow>;
          try {
            next = change(structuredClone(current.record));
            if (next === undefined) return current.record;
            assertTaskChange(`${label}: update`, current.record, next);
            row = toTaskRow(`${label}: update`, next, maxRecordBytes);
          } catch (error) {
            throw new Refusal(error);
          }
          const values = [namespace, taskId, current.version, row.json, row.live, taskExpiresAt(next), Math.floor(now())];
          const updated =
            owned !== undefined
              ? await pool.query({ text: updateSql, values, query_timeout: replyWaitMs })
              : await withClient(pool, true, (query) => query({ text: updateSql, values }));
          if (updated.rowCount === 1) return JSON.parse(row.json) as TaskRecord;
        }
        throw unsettledUpdateError();
      });
    },

    async ensureSchema() {
      assertOpen();
      try {
        await bounded(schemaReady.get());
      } catch (error) {
        throw toStoreError(error);
      }
    },

    close() {
      if (closing === undefined) {
        closed = true;
        closing = (async () => {
          if (injected !== undefined) return;
          await poolReady.get().catch(() => undefined);
          await owned?.end().catch(() => {});
        })();
      }
      return closing;
    },
  };
}

/** A refusal that is not a database failure (a bound, a duplicate id, a refused change): rethrown as it is. */
class Refusal {
  readonly error: unknown;
  constructor(error: unknown) {
    this.error = error;
  }
}
