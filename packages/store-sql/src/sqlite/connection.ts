import { intOption, oneOfOption, optionsObject } from '@mrtr/core/options';
import { type DatabaseConstructor, loadDriver, type SqliteConnectionOptions, type SqliteDatabaseLike } from '../shared/drivers.js';
import { type ResourceHandle, resourceHandle } from '../shared/lifecycle.js';
import { checkConnectionChoice } from '../shared/options.js';

/** Options of {@link configureSqliteDatabase}. */
export interface ConfigureSqliteOptions {
  /** `busy_timeout` in ms: how long a statement waits for another connection's write lock. @default 5000 */
  busyTimeoutMs?: number;
  /** `synchronous` pragma (see {@link SqliteStoreOptions.synchronous}). @default "full" */
  synchronous?: 'full' | 'normal';
}

/**
 * Configures a `better-sqlite3` database the way the store configures a file it opens itself:
 * `busy_timeout`, WAL and `synchronous`. Use it when the store shares a database with your own tables
 * (pass the result as `database`).
 *
 * `PRAGMA journal_mode = WAL` can answer SQLITE_BUSY at once, without the busy handler, while another
 * process creates or converts the same new file; this retries it until the busy timeout has passed,
 * so several processes may open one new file at the same moment.
 */
export async function configureSqliteDatabase<T extends { pragma(source: string): unknown }>(
  db: T,
  options: ConfigureSqliteOptions = {},
): Promise<T> {
  const label = 'configureSqliteDatabase';
  if (db === null || typeof db !== 'object' || typeof db.pragma !== 'function') {
    throw new TypeError(`${label}: db must be a better-sqlite3 Database`);
  }
  options = optionsObject(label, options, { busyTimeoutMs: true, synchronous: true });
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = synchronousOption(label, options.synchronous);
  db.pragma(`busy_timeout = ${busyTimeoutMs}`);
  const deadline = Date.now() + busyTimeoutMs;
  for (;;) {
    try {
      db.pragma('journal_mode = WAL');
      break;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (typeof code !== 'string' || !code.startsWith('SQLITE_BUSY') || Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
  db.pragma(`synchronous = ${synchronous.toUpperCase()}`);
  return db;
}

export const synchronousOption = (label: string, value: unknown): 'full' | 'normal' =>
  oneOfOption(`${label}: synchronous`, value, 'full', ['full', 'normal'] as const);

/** Where a SQLite store keeps its table: an injected database or a file it opens. */
export interface SqliteTarget {
  database: SqliteDatabaseLike | undefined;
  filename: string | undefined;
}

const DATABASE_CHOICE = {
  injected: 'database',
  opener: 'filename',
  methods: ['prepare', 'exec'],
  kind: 'better-sqlite3 Database',
} as const;

/** Exactly one of `database` and `filename`. */
export function sqliteTarget(label: string, options: SqliteConnectionOptions): SqliteTarget {
  const { database, filename } = options;
  checkConnectionChoice(label, database, filename, DATABASE_CHOICE);
  return { database, filename };
}

/** The database of a store: the injected one, or the file opened (and configured) on first use. */
export type DatabaseHandle = ResourceHandle<SqliteDatabaseLike>;

/**
 * Opens `filename` with better-sqlite3 (loaded on first use) configured by {@link configureSqliteDatabase}, or
 * hands back the injected `database`. A store closed meanwhile gets `closedError` (and the file is closed again).
 */
export function databaseHandle(
  target: SqliteTarget,
  configure: ConfigureSqliteOptions,
  isClosed: () => boolean,
  closedError: () => Error,
): DatabaseHandle {
  const open = async (): Promise<SqliteDatabaseLike> => {
    const Database = (await loadDriver('better-sqlite3')) as DatabaseConstructor;
    if (isClosed()) throw closedError();
    const db = new Database(target.filename as string, { timeout: configure.busyTimeoutMs });
    try {
      await configureSqliteDatabase(db, configure);
    } catch (error) {
      db.close();
      throw error;
    }
    if (isClosed()) {
      db.close();
      throw closedError();
    }
    return db;
  };
  const release = async (owned: SqliteDatabaseLike) => {
    try {
      owned.close();
    } catch {
      // already closed
    }
  };
  return resourceHandle(target.database, open, release);
}

/** Runs `work` in a `BEGIN IMMEDIATE` transaction (the write lock first, waiting up to busy_timeout). */
export function inWriteTransaction<T>(db: SqliteDatabaseLike, begin: () => unknown, work: () => T): T {
  begin();
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
}
