import type { TaskRecord } from '@mrtr/core';
import { assertTaskChange, intOption, optionsObject, parseTaskStoreLimits, TaskLimitError, taskExpiresAt } from '@mrtr/core/authoring';
import { once, quoteIdentifier, toStoreError } from './common.js';
import {
  type DatabaseConstructor,
  loadDriver,
  type SqliteConnectionOptions,
  type SqliteDatabaseLike,
  type SqliteStatementLike,
} from './drivers.js';
import { configureSqliteDatabase } from './sqlite.js';
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

export interface SqliteTaskStoreOptions extends SqlTaskStoreCommonOptions, SqliteConnectionOptions {}

/**
 * Task store on SQLite through `better-sqlite3` (loaded only when this factory is used). One row per task, as on
 * PostgreSQL. `create` runs in one `BEGIN IMMEDIATE` transaction (SQLite's single writer makes the bounds hold
 * across connections and processes); `update` is optimistic (a `version` column, at most 32 tries). Every
 * operation is synchronous once the database is open: no transaction is ever held across an `await`.
 */
export function createSqliteTaskStore(options: SqliteTaskStoreOptions): SqlTaskStore {
  const label = 'createSqliteTaskStore';
  options = optionsObject(label, options);
  const { database: injected, filename } = options;
  if ((injected === undefined) === (filename === undefined)) {
    throw new TypeError(`${label}: pass exactly one of database or filename`);
  }
  if (injected !== undefined && (injected === null || typeof injected.prepare !== 'function' || typeof injected.exec !== 'function')) {
    throw new TypeError(`${label}: database must be a better-sqlite3 Database`);
  }
  if (filename !== undefined && (typeof filename !== 'string' || filename.length === 0)) {
    throw new TypeError(`${label}: filename must be a non-empty string`);
  }
  const { maxLivePerPrincipal: maxLive, maxPerPrincipal: maxKept, maxTasks } = parseTaskStoreLimits(label, options);
  const { tableName, namespace, autoSchema, now, maxRecordBytes, purgeBatchSize } = taskSettings(label, options, { maxLive, maxKept });
  const table = quoteIdentifier(`${label}: table`, tableName);
  const principalIndex = `${tableName}_principal_idx`;
  const expiryIndex = `${tableName}_expires_at_idx`;
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = options.synchronous;
  if (synchronous !== undefined && synchronous !== 'full' && synchronous !== 'normal') {
    throw new TypeError(`${label}: synchronous must be "full" or "normal"`);
  }

  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns TEXT NOT NULL, task_id TEXT NOT NULL, principal TEXT NOT NULL, live INTEGER NOT NULL, ` +
    'version INTEGER NOT NULL, expires_at INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (ns, task_id))';
  const createPrincipalIndexSql = `CREATE INDEX IF NOT EXISTS "${principalIndex}" ON ${table} (ns, principal, expires_at)`;
  const createExpiryIndexSql = `CREATE INDEX IF NOT EXISTS "${expiryIndex}" ON ${table} (expires_at)`;
  // Tasks held per namespace, kept in step by every create (the write transaction serialises them).
  const countsName = `${tableName}_counts`;
  const countsTable = `"${countsName}"`;
  const createCountsSql = `CREATE TABLE IF NOT EXISTS ${countsTable} (ns TEXT PRIMARY KEY, tasks INTEGER NOT NULL)`;
  const tableSql = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE";
  const indexSql = "SELECT 1 AS found FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE AND tbl_name = ? COLLATE NOCASE";

  const getSql = `SELECT principal, version, record FROM ${table} WHERE ns = ? AND task_id = ? AND expires_at > ?`;
  const updateSql =
    `UPDATE ${table} SET record = ?, version = version + 1, live = ?, expires_at = ? ` +
    'WHERE ns = ? AND task_id = ? AND version = ? AND expires_at > ?';
  const deleteExpiredSql = `DELETE FROM ${table} WHERE ns = ? AND principal = ? AND expires_at <= ?`;
  const countSql =
    `SELECT (SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = @ns AND principal = @principal AND expires_at > @t AND live = 1 LIMIT @maxLive)) AS live, ` +
    `(SELECT count(*) FROM (SELECT 1 FROM ${table} WHERE ns = @ns AND principal = @principal AND expires_at > @t LIMIT @maxKept)) AS kept`;
  const insertSql =
    `INSERT INTO ${table} (ns, task_id, principal, live, version, expires_at, record) VALUES (?, ?, ?, ?, 1, ?, ?) ` +
    'ON CONFLICT (ns, task_id) DO UPDATE SET principal = excluded.principal, live = excluded.live, version = version + 1, ' +
    `expires_at = excluded.expires_at, record = excluded.record WHERE ${table}.expires_at <= ? RETURNING version`;
  // Other expired rows of the namespace, a bounded batch.
  const purgeSql = `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE ns = ? AND expires_at <= ? ORDER BY expires_at LIMIT ?)`;
  const readCountSql = `SELECT tasks FROM ${countsTable} WHERE ns = ?`;
  const initialCountSql = `SELECT count(*) AS tasks FROM ${table} WHERE ns = ?`;
  const writeCountSql = `INSERT INTO ${countsTable} (ns, tasks) VALUES (?, ?) ON CONFLICT (ns) DO UPDATE SET tasks = excluded.tasks`;
  // A full store: its expired rows go first, then the oldest (soonest to expire) final task of the principal holding
  // the most tasks among those holding a final one.
  const dropExpiredSql = `DELETE FROM ${table} WHERE ns = ? AND expires_at <= ?`;
  const makeRoomSql =
    `DELETE FROM ${table} WHERE rowid = (SELECT rowid FROM ${table} WHERE ns = @ns AND live = 0 AND expires_at > @t AND principal = ` +
    `(SELECT principal FROM ${table} WHERE ns = @ns AND expires_at > @t GROUP BY principal HAVING max(live = 0) = 1 ORDER BY count(*) DESC, principal LIMIT 1) ` +
    'ORDER BY expires_at, task_id LIMIT 1)';

  let closed = false;
  let owned: SqliteDatabaseLike | undefined;

  const dbReady = once<SqliteDatabaseLike>(async () => {
    if (injected !== undefined) return injected;
    const Database = (await loadDriver('better-sqlite3')) as DatabaseConstructor;
    if (closed) throw closedTaskStoreError();
    const db = new Database(filename as string, { timeout: busyTimeoutMs });
    try {
      await configureSqliteDatabase(db, { busyTimeoutMs, ...(synchronous === undefined ? {} : { synchronous }) });
    } catch (error) {
      db.close();
      throw error;
    }
    if (closed) {
      db.close();
      throw closedTaskStoreError();
    }
    owned = db;
    return db;
  });

  const complete = (db: SqliteDatabaseLike) => ({
    table: db.prepare(tableSql).get(tableName) !== undefined,
    principalIndex: db.prepare(indexSql).get(principalIndex, tableName) !== undefined,
    expiryIndex: db.prepare(indexSql).get(expiryIndex, tableName) !== undefined,
    counts: db.prepare(tableSql).get(countsName) !== undefined,
  });

  /** Runs `work` in a `BEGIN IMMEDIATE` transaction (the write lock first, waiting up to busy_timeout). */
  const inWriteTransaction = <T>(db: SqliteDatabaseLike, begin: SqliteStatementLike, work: () => T): T => {
    begin.run();
    try {
      const result = work();
      db.exec('COMMIT');
      return result;
    } catch (error) {
      // A failed COMMIT too: never leave the connection inside a transaction.
      try {
        db.exec('ROLLBACK');
      } catch {
        // SQLite rolled back already (or the database is gone)
      }
      throw error;
    }
  };

  const runEnsureSchema = async (): Promise<void> => {
    const db = await dbReady.get();
    // Nothing missing (every start but the first): no DDL and no write lock.
    const found = complete(db);
    if (found.table && found.principalIndex && found.expiryIndex && found.counts) return;
    inWriteTransaction(db, db.prepare('BEGIN IMMEDIATE'), () => {
      // Another process may have finished while this one waited for the lock.
      const catalog = complete(db);
      if (!catalog.table) db.exec(createTableSql);
      if (!catalog.principalIndex) db.exec(createPrincipalIndexSql);
      if (!catalog.expiryIndex) db.exec(createExpiryIndexSql);
      if (!catalog.counts) db.exec(createCountsSql);
    });
  };
  const schemaReady = once(runEnsureSchema);

  interface Statements {
    db: SqliteDatabaseLike;
    get: SqliteStatementLike;
    update: SqliteStatementLike;
    deleteExpired: SqliteStatementLike;
    count: SqliteStatementLike;
    insert: SqliteStatementLike;
    purge: SqliteStatementLike;
    readCount: SqliteStatementLike;
    initialCount: SqliteStatementLike;
    writeCount: SqliteStatementLike;
    dropExpired: SqliteStatementLike;
    makeRoom: SqliteStatementLike;
    begin: SqliteStatementLike;
  }
  let statements: Statements | undefined;
  const ready = async (): Promise<Statements> => {
    if (statements !== undefined) return statements;
    const db = await dbReady.get();
    if (autoSchema) await schemaReady.get();
    statements = {
      db,
      get: db.prepare(getSql),
      update: db.prepare(updateSql),
      deleteExpired: db.prepare(deleteExpiredSql),
      count: db.prepare(countSql),
      insert: db.prepare(insertSql),
      purge: db.prepare(purgeSql),
      readCount: db.prepare(readCountSql),
      initialCount: db.prepare(initialCountSql),
      writeCount: db.prepare(writeCountSql),
      dropExpired: db.prepare(dropExpiredSql),
      makeRoom: db.prepare(makeRoomSql),
      begin: db.prepare('BEGIN IMMEDIATE'),
    };
    return statements;
  };

  const assertOpen = (): void => {
    if (closed) throw closedTaskStoreError();
  };

  /** The statements, or `ERR_STORE_UNAVAILABLE` when the database cannot be opened or the schema made. */
  const prepared = async (): Promise<Statements> => {
    assertOpen();
    try {
      const s = await ready();
      assertOpen();
      return s;
    } catch (error) {
      throw toStoreError(error);
    }
  };

  const read = (s: Statements, taskId: string): { record: TaskRecord; version: number } | undefined => {
    let row: { principal?: unknown; version?: unknown; record?: unknown } | undefined;
    try {
      row = s.get.get(namespace, taskId, Math.floor(now())) as typeof row;
    } catch (error) {
      throw toStoreError(error);
    }
    if (row === undefined) return undefined;
    return { record: fromTaskRow(taskId, row.principal, row.record), version: Number(row.version) };
  };

  let closing: Promise<void> | undefined;
  return {
    dialect: 'sqlite',
    table,

    async create(record) {
      const row = toTaskRow(`${label}: create`, record, maxRecordBytes);
      const s = await prepared();
      let refusal: Error | undefined;
      try {
        inWriteTransaction(s.db, s.begin, () => {
          const t = Math.floor(now());
          const gone = s.deleteExpired.run(namespace, row.principal, t).changes;
          const counts = s.count.get({ ns: namespace, principal: row.principal, t, maxLive, maxKept }) as
            | { live?: unknown; kept?: unknown }
            | undefined;
          const live = Number(counts?.live);
          const kept = Number(counts?.kept);
          if (!Number.isInteger(live) || !Number.isInteger(kept)) throw new Error('task store: the count query answered no counts');
          const stored = (s.readCount.get(namespace) as { tasks?: unknown } | undefined)?.tasks;
          let tasks =
            stored === undefined || stored === null
              ? Number((s.initialCount.get(namespace) as { tasks?: unknown } | undefined)?.tasks)
              : Number(stored) - gone;
          if (!Number.isSafeInteger(tasks) || tasks < 0) throw new Error('task store: the namespace count is not a count');
          if (row.live && live >= maxLive) refusal = new TaskLimitError('live', maxLive);
          else if (kept >= maxKept) refusal = new TaskLimitError('kept', maxKept);
          else {
            if (tasks >= maxTasks) {
              // Full: the namespace's expired tasks go, then (still full) a final task of the heaviest holder.
              tasks -= s.dropExpired.run(namespace, t).changes;
              if (tasks >= maxTasks) {
                if (s.makeRoom.run({ ns: namespace, t }).changes === 1) tasks--;
                else refusal = new TaskLimitError('store', maxTasks);
              }
            }
            if (refusal === undefined) {
              const inserted = s.insert.get(namespace, row.taskId, row.principal, row.live ? 1 : 0, row.expiresAt, row.json, t) as
                | { version?: unknown }
                | undefined;
              if (inserted === undefined) refusal = taskIdExistsError();
              else {
                // A fresh row adds one; an expired row of the id taken over was counted already.
                if (Number(inserted.version) === 1) tasks++;
                if (purgeBatchSize > 0) tasks -= s.purge.run(namespace, t, purgeBatchSize).changes;
              }
            }
          }
          s.writeCount.run(namespace, tasks);
          // A refusal changed nothing but the deletion of expired rows, which is kept (and counted).
        });
      } catch (error) {
        throw toStoreError(error);
      }
      if (refusal !== undefined) throw refusal;
    },

    async get(taskId) {
      if (!isTaskId(taskId)) return undefined;
      return read(await prepared(), taskId)?.record;
    },

    async update(taskId, change) {
      if (typeof change !== 'function') throw new TypeError(`${label}: update: change must be a function`);
      if (!isTaskId(taskId)) return undefined;
      const s = await prepared();
      for (let attempt = 0; attempt < UPDATE_TRIES; attempt++) {
        assertOpen();
        const current = read(s, taskId);
        if (current === undefined) return undefined;
        const next = change(structuredClone(current.record));
        if (next === undefined) return current.record;
        assertTaskChange(`${label}: update`, current.record, next);
        const row = toTaskRow(`${label}: update`, next, maxRecordBytes);
        let changes: number;
        try {
          changes = s.update.run(
            row.json,
            row.live ? 1 : 0,
            taskExpiresAt(next),
            namespace,
            taskId,
            current.version,
            Math.floor(now()),
          ).changes;
        } catch (error) {
          throw toStoreError(error);
        }
        if (changes === 1) return JSON.parse(row.json) as TaskRecord;
      }
      throw unsettledUpdateError();
    },

    async ensureSchema() {
      assertOpen();
      try {
        await schemaReady.get();
      } catch (error) {
        throw toStoreError(error);
      }
    },

    close() {
      if (closing === undefined) {
        closed = true;
        closing = (async () => {
          if (injected !== undefined) return;
          await dbReady.get().catch(() => undefined);
          try {
            owned?.close();
          } catch {
            // already closed
          }
        })();
      }
      return closing;
    },
  };
}
