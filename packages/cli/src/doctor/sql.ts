// The SQL backends (PostgreSQL, SQLite): the store's schema checks before and after the probes, the database clock.
import { existsSync } from 'node:fs';
import { redactUrl } from '@mrtr/core/store';
import { loadOptional, STORE_PACKAGES } from '../optional.js';
import type { Backend, Settings, TaskSession } from './backend.js';
import { type Add, afterCreation, bestEffort, type Check, DOCTOR_NAMESPACE, withTimeout } from './common.js';
import { noTaskStore } from './task-probe.js';

type StoreSql = typeof import('@mrtr/store-sql');
type SchemaName = 'sql schema' | 'task schema';

interface PgPool {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}

interface SqliteDb {
  prepare(sql: string): { all(...params: unknown[]): Record<string, unknown>[]; run(...params: unknown[]): unknown };
  pragma(source: string, options?: { simple?: boolean }): unknown;
  close(): unknown;
}

/**
 * A schema check of `@mrtr/store-sql` (the store's own, from the schema it creates tables from) as a doctor line;
 * `undefined` when the table does not exist.
 */
function schemaLine(name: SchemaName, table: string, found: import('@mrtr/store-sql').SqlSchemaCheck | undefined): Check | undefined {
  if (found === undefined) return undefined;
  if (found.problems.length > 0) return { name, status: 'fail', detail: `table "${table}": ${found.problems.join('; ')}` };
  if (found.warnings.length > 0) return { name, status: 'warn', detail: `table "${table}": ${found.warnings.join('; ')}` };
  return { name, status: 'ok', detail: `table "${table}": ${found.summary}` };
}

/**
 * The schema line before a probe (the table as found, or the warning that it is missing), and the one after: a table
 * the store created is checked again, and what it found is folded into the first line.
 */
function schemaStep(name: SchemaName, read: () => Promise<Check | undefined>, missing: string) {
  let schema: Check | undefined;
  let existed = false;
  const load = async (): Promise<Check> => {
    if (schema !== undefined) return schema;
    const found = await read();
    existed = found !== undefined;
    schema = found ?? { name, status: 'warn', detail: missing };
    return schema;
  };
  return {
    /** Reads the table as it is now (before a store that creates it is opened); `before` adds that line. */
    load,
    async before(add: Add): Promise<void> {
      add(await load());
    },
    async after(recheck = true): Promise<void> {
      if (!existed && recheck && schema !== undefined) afterCreation(schema, await read());
    },
  };
}

// ── PostgreSQL ──

function postgresTasks(mod: StoreSql, pool: PgPool, s: Settings): TaskSession {
  const name = 'postgres tasks';
  const table = s.tasksTable;
  const read = async () =>
    schemaLine('task schema', table, await withTimeout(mod.checkPostgresTaskSchema(pool as never, { table }), s.timeoutMs, 'postgres'));
  const missing = `table "${table}" was missing: the task store creates it at start (ensureSchema, the default), so the server's role needs CREATE on the schema (or create it in a migration)`;
  const schema = schemaStep('task schema', read, missing);
  let store: import('@mrtr/store-sql').SqlTaskStore | undefined;
  return {
    name,
    where: `at ${redactUrl(s.databaseUrl!)}`,
    place: redactUrl(s.databaseUrl!),
    async open(add) {
      if (typeof mod.createPostgresTaskStore !== 'function') {
        add(noTaskStore(name, '@mrtr/store-sql', 'createPostgresTaskStore'));
        return undefined;
      }
      await schema.before(add);
      const options = {
        table,
        namespace: DOCTOR_NAMESPACE,
        statementTimeoutMs: s.timeoutMs,
        connectTimeoutMs: s.timeoutMs,
        purgeBatchSize: 0,
      };
      store = mod.createPostgresTaskStore({ pool: pool as never, ...options });
      return store;
    },
    forget: (taskId) => pool.query(`DELETE FROM "${table}" WHERE ns = $1 AND task_id = $2`, [DOCTOR_NAMESPACE, taskId]),
    after: () => schema.after(),
    close: async () => store?.close(),
  };
}

type PgModule = { default: { Pool: new (config: Record<string, unknown>) => PgPool } };

export const postgres: Backend = {
  packages: STORE_PACKAGES.postgres,
  byDefault: (s) => s.databaseUrl !== undefined,
  unconfigured: (s) => (s.databaseUrl === undefined ? 'DATABASE_URL is not set' : undefined),
  place: (s) => redactUrl(s.databaseUrl!),
  async open(s) {
    const what = 'doctor --store postgres';
    const pg = ((await loadOptional(() => import('pg'), STORE_PACKAGES.postgres, what)) as unknown as PgModule).default;
    const sql = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.postgres, what);
    const { table, timeoutMs } = s;
    const pool = new pg.Pool({ connectionString: s.databaseUrl, connectionTimeoutMillis: timeoutMs, statement_timeout: timeoutMs, max: 2 });
    pool.on('error', () => {});
    const options = { table, namespace: DOCTOR_NAMESPACE, purgeIntervalMs: 0, statementTimeoutMs: timeoutMs };
    const store = sql.createPostgresStore({ pool: pool as never, ...options });
    const read = async () =>
      schemaLine('sql schema', table, await withTimeout(sql.checkPostgresSchema(pool as never, { table }), timeoutMs, 'postgres'));
    const missing = `table "${table}" was missing: the store creates it on its first consume (ensureSchema, the default), so the server's role needs CREATE on the schema (or create it in a migration)`;
    const schema = schemaStep('sql schema', read, missing);
    const clockQuery = 'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now';
    return {
      store,
      where: `at ${redactUrl(s.databaseUrl!)}`,
      before: (add) => schema.before(add),
      forget: (id) => pool.query(`DELETE FROM "${table}" WHERE ns = $1 AND id = $2`, [DOCTOR_NAMESPACE, id]),
      after: () => schema.after(),
      clock: {
        name: 'sql clock',
        note: "the SQL store judges expiry by the servers' clocks, so this host or the database is off: fix NTP",
        read: async () => Number((await pool.query(clockQuery)).rows[0]!.now),
      },
      tasks: postgresTasks(sql, pool, s),
      close: async () => {
        await store.close().catch(() => {});
        await pool.end().catch(() => {});
      },
    };
  },
};

// ── SQLite ──

/** The place named in SQLite's lines: the file, or the in-memory database checked instead of a missing one. */
const sqlitePlace = (file: string): string => (file === ':memory:' ? 'an in-memory database' : file);
const fileExists = (file: string): boolean => file === ':memory:' || existsSync(file);

function sqliteTasks(mod: StoreSql, db: SqliteDb, s: Settings): TaskSession {
  const name = 'sqlite tasks';
  const file = s.sqliteFile!;
  const table = s.tasksTable;
  const exists = fileExists(file);
  const read = async () => schemaLine('task schema', table, mod.checkSqliteTaskSchema(db as never, { table }));
  const missing = exists
    ? `table "${table}" was missing: the task store creates it at start (ensureSchema, the default), which needs write access to the database file`
    : `${file} does not exist (see sql schema): the task store was checked on an in-memory database instead`;
  const schema = schemaStep('task schema', read, missing);
  let store: import('@mrtr/store-sql').SqlTaskStore | undefined;
  const where = exists ? sqlitePlace(file) : 'an in-memory database';
  return {
    name,
    where: `in ${where}`,
    place: where,
    async open(add) {
      if (typeof mod.createSqliteTaskStore !== 'function') {
        add(noTaskStore(name, '@mrtr/store-sql', 'createSqliteTaskStore'));
        return undefined;
      }
      await schema.before(add);
      store = mod.createSqliteTaskStore({ database: db as never, table, namespace: DOCTOR_NAMESPACE, purgeBatchSize: 0 });
      return store;
    },
    forget: async (taskId) => db.prepare(`DELETE FROM "${table}" WHERE ns = ? AND task_id = ?`).run(DOCTOR_NAMESPACE, taskId),
    after: () => schema.after(exists),
    close: async () => store?.close(),
  };
}

/** SQLite's journal: the store switches a file it opens to WAL; one the server opened itself may not be. */
function journalLine(db: SqliteDb, file: string, add: Add): void {
  const mode = String(db.pragma('journal_mode', { simple: true }) ?? '');
  if (!fileExists(file) || file === ':memory:' || mode.toLowerCase() === 'wal') return;
  add({
    name: 'sqlite mode',
    status: 'warn',
    detail: `journal_mode ${mode}: the store switches a file it opens to WAL; a database you pass it should go through configureSqliteDatabase(db)`,
  });
}

type SqliteModule = new (file: string, options?: Record<string, unknown>) => SqliteDb;

/**
 * The SQLite store on the server's database file, opened here with the driver the server uses. A file that does
 * not exist yet is not created: the driver and a consume are checked on an in-memory database instead.
 */
export const sqlite: Backend = {
  packages: STORE_PACKAGES.sqlite,
  byDefault: (s) => s.sqliteFile !== undefined,
  unconfigured: (s) => (s.sqliteFile === undefined ? 'no database file: pass --sqlite-file PATH (or set MRTR_SQLITE_FILE)' : undefined),
  place: (s) => sqlitePlace(s.sqliteFile!),
  async open(s) {
    const what = 'doctor --store sqlite';
    const driver = await loadOptional(() => import('better-sqlite3'), STORE_PACKAGES.sqlite, what);
    const sql = await loadOptional(() => import('@mrtr/store-sql'), STORE_PACKAGES.sqlite, what);
    // better-sqlite3 is CommonJS (`export =`): under ESM its constructor is the default export.
    const Database = ((driver as { default?: unknown }).default ?? driver) as unknown as SqliteModule;
    const { table, timeoutMs } = s;
    const file = s.sqliteFile!;
    const exists = fileExists(file);
    const db = new Database(exists ? file : ':memory:', { timeout: timeoutMs });
    let store: import('@mrtr/store-sql').SqlReplayStore | undefined;
    const close = async () => {
      await store?.close().catch(() => {});
      await bestEffort(() => db.close());
    };
    try {
      db.pragma(`busy_timeout = ${timeoutMs}`);
      const read = async () => schemaLine('sql schema', table, sql.checkSqliteSchema(db as never, { table }));
      const missing = exists
        ? `table "${table}" was missing: the store creates it on its first consume (ensureSchema, the default)`
        : `${file} does not exist: the store creates the file and the table when the server starts (check the path); the driver and a consume were checked on an in-memory database instead`;
      const schema = schemaStep('sql schema', read, missing);
      await schema.load(); // before the store, which may create the table
      store = sql.createSqliteStore({ database: db as never, table, namespace: DOCTOR_NAMESPACE, purgeIntervalMs: 0 });
      return {
        store,
        where: `in ${exists ? sqlitePlace(file) : 'an in-memory database'}`,
        before: (add) => schema.before(add),
        forget: async (id) => db.prepare(`DELETE FROM "${table}" WHERE ns = ? AND id = ?`).run(DOCTOR_NAMESPACE, id),
        after: async (add) => {
          await schema.after(exists);
          journalLine(db, file, add);
        },
        tasks: sqliteTasks(sql, db, s),
        close,
      };
    } catch (error) {
      await close();
      throw error;
    }
  },
};
