import { TaskLimitError } from '@mrtr/core/errors';
import { intOption, optionsObject } from '@mrtr/core/options';
import { roomFromAtLeast, taskExpiresAt } from '@mrtr/core/tasks';
import type { SqliteConnectionOptions, SqliteDatabaseLike, SqliteStatementLike } from '../shared/drivers.js';
import { closeOnce, once, storeCall, toStoreError } from '../shared/lifecycle.js';
import { quoteIdentifier } from '../shared/options.js';
import type { SqlTaskStore, SqlTaskStoreCommonOptions, TaskRow } from '../shared/tasks.js';
import { closedTaskStoreError, fromTaskRow, sqlTaskStore, taskIdExistsError, taskSettings } from '../shared/tasks.js';
import { databaseHandle, inWriteTransaction, sqliteTarget } from './connection.js';
import { ensureSqliteSchema } from './schema.js';
import { schemaPlan } from '../shared/schema.js';
import { SQL_TASK_STORE_OPTIONS } from '../shared/tasks.js';
import { SQLITE_CONNECTION_OPTIONS } from '../shared/drivers.js';

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

/** Prepares the task store's statements on the quoted `table` (and its count table `<tableName>_counts`). */
function prepareStatements(db: SqliteDatabaseLike, table: string, tableName: string): Statements {
  // Tasks held per namespace, kept in step by every create (the write transaction serialises them).
  const countsTable = `"${tableName}_counts"`;
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
  // the most tasks among those holding a final one and keeping at least @least (`roomFromAtLeast` of the newcomer's
  // count), or of the newcomer (@principal) itself.
  const dropExpiredSql = `DELETE FROM ${table} WHERE ns = ? AND expires_at <= ?`;
  const makeRoomSql =
    `DELETE FROM ${table} WHERE rowid = (SELECT rowid FROM ${table} WHERE ns = @ns AND live = 0 AND expires_at > @t AND principal = ` +
    `(SELECT principal FROM ${table} WHERE ns = @ns AND expires_at > @t GROUP BY principal ` +
    'HAVING max(live = 0) = 1 AND (principal = @principal OR count(*) >= @least) ORDER BY count(*) DESC, principal LIMIT 1) ' +
    'ORDER BY expires_at, task_id LIMIT 1)';

  return {
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
}

/** The bounds a create checks, and where. */
interface CreateScope {
  namespace: string;
  now: () => number;
  maxLive: number;
  maxKept: number;
  maxTasks: number;
  purgeBatchSize: number;
}

/** The principal's counts (after its expired tasks went) and the namespace's count (counted once when it has none yet). */
function countTasks(s: Statements, scope: CreateScope, principal: string, t: number): { live: number; kept: number; tasks: number } {
  const { namespace, maxLive, maxKept } = scope;
  const gone = s.deleteExpired.run(namespace, principal, t).changes;
  const counts = s.count.get({ ns: namespace, principal, t, maxLive, maxKept }) as { live?: unknown; kept?: unknown } | undefined;
  const live = Number(counts?.live);
  const kept = Number(counts?.kept);
  if (!Number.isInteger(live) || !Number.isInteger(kept)) throw new Error('task store: the count query answered no counts');
  const stored = (s.readCount.get(namespace) as { tasks?: unknown } | undefined)?.tasks;
  const tasks =
    stored === undefined || stored === null
      ? Number((s.initialCount.get(namespace) as { tasks?: unknown } | undefined)?.tasks)
      : Number(stored) - gone;
  if (!Number.isSafeInteger(tasks) || tasks < 0) throw new Error('task store: the namespace count is not a count');
  return { live, kept, tasks };
}

/**
 * One create, inside its write transaction: the bounds (a full store makes room first), the insert, a bounded
 * purge, the namespace's count written back. Returns the refusal, if any: a refusal changed nothing but the
 * deletion of expired rows, which is kept (and counted).
 */
function createIn(s: Statements, scope: CreateScope, row: TaskRow): Error | undefined {
  const { namespace, maxLive, maxKept, maxTasks, purgeBatchSize } = scope;
  const t = Math.floor(scope.now());
  const counts = countTasks(s, scope, row.principal, t);
  let { tasks } = counts;
  let refusal: Error | undefined;
  if (row.live && counts.live >= maxLive) refusal = new TaskLimitError('live', maxLive);
  else if (counts.kept >= maxKept) refusal = new TaskLimitError('kept', maxKept);
  else {
    if (tasks >= maxTasks) {
      // Full: the namespace's expired tasks go, then (still full) a final task of the heaviest holder.
      tasks -= s.dropExpired.run(namespace, t).changes;
      if (tasks >= maxTasks) {
        if (s.makeRoom.run({ ns: namespace, t, principal: row.principal, least: roomFromAtLeast(counts.kept) }).changes === 1) tasks--;
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
  return refusal;
}

export interface SqliteTaskStoreOptions extends SqlTaskStoreCommonOptions, SqliteConnectionOptions {}

/**
 * Task store on SQLite through `better-sqlite3` (loaded only when this factory is used). One row per task, as on
 * PostgreSQL. `create` runs in one `BEGIN IMMEDIATE` transaction (SQLite's single writer makes the bounds hold
 * across connections and processes); `update` is optimistic (a `version` column, at most 32 tries). Every
 * operation is synchronous once the database is open: no transaction is ever held across an `await`.
 */
export function createSqliteTaskStore(options: SqliteTaskStoreOptions): SqlTaskStore {
  const label = 'createSqliteTaskStore';
  options = optionsObject(label, options, { ...SQL_TASK_STORE_OPTIONS, ...SQLITE_CONNECTION_OPTIONS });
  const target = sqliteTarget(label, options);
  const { tableName, namespace, autoSchema, now, maxRecordBytes, purgeBatchSize, maxLive, maxKept, maxTasks } = taskSettings(
    label,
    options,
  );
  const table = quoteIdentifier(`${label}: table`, tableName);
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = options.synchronous;
  if (synchronous !== undefined && synchronous !== 'full' && synchronous !== 'normal') {
    throw new TypeError(`${label}: synchronous must be "full" or "normal"`);
  }
  const scope: CreateScope = { namespace, now, maxLive, maxKept, maxTasks, purgeBatchSize };

  let closed = false;
  const configure = { busyTimeoutMs, ...(synchronous === undefined ? {} : { synchronous }) };
  const database = databaseHandle(target, configure, () => closed, closedTaskStoreError);
  const plan = schemaPlan('sqlite', 'task', table, tableName);
  const schemaReady = once(async () => ensureSqliteSchema(await database.get(), plan));

  let statements: Statements | undefined;
  const ready = async (): Promise<Statements> => {
    if (statements !== undefined) return statements;
    const db = await database.get();
    if (autoSchema) await schemaReady.get();
    statements = prepareStatements(db, table, tableName);
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

  return sqlTaskStore(label, maxRecordBytes, {
    dialect: 'sqlite',
    table,
    assertOpen,
    // Every statement maps its own failures (and nothing is held across an await).
    run: (work) => work(),
    async insert(row) {
      const s = await prepared();
      let refusal: Error | undefined;
      try {
        refusal = inWriteTransaction(
          s.db,
          () => s.begin.run(),
          () => createIn(s, scope, row),
        );
      } catch (error) {
        throw toStoreError(error);
      }
      if (refusal !== undefined) throw refusal;
    },
    async read(taskId) {
      const s = await prepared();
      let row: { principal?: unknown; version?: unknown; record?: unknown } | undefined;
      try {
        row = s.get.get(namespace, taskId, Math.floor(now())) as typeof row;
      } catch (error) {
        throw toStoreError(error);
      }
      if (row === undefined) return undefined;
      return { record: fromTaskRow(taskId, row.principal, row.record), version: Number(row.version) };
    },
    async write(taskId, current, row, next) {
      const s = await prepared();
      const t = Math.floor(now());
      try {
        return s.update.run(row.json, row.live ? 1 : 0, taskExpiresAt(next), namespace, taskId, current.version, t).changes === 1;
      } catch (error) {
        throw toStoreError(error);
      }
    },
    refuse: (error) => error,
    async ensureSchema() {
      assertOpen();
      await storeCall(() => schemaReady.get());
    },
    close: closeOnce(() => {
      closed = true;
      return database.close();
    }),
  });
}
