import type { OptionNames } from '@mrtr/core/options';
/**
 * Minimal structural views of the two drivers. The public types never import `pg` or
 * `better-sqlite3`, so a consumer of one dialect needs neither the other driver nor its `@types`.
 * A `pg.Pool` and a `better-sqlite3` `Database` are assignable to these.
 */

/** The part of a `pg` query result the store reads. */
export interface PgQueryResultLike {
  rows: unknown[];
  rowCount: number | null;
}

/** A `pg` query config object (`text`, `values`, optional statement `name` and client-side `query_timeout`). */
export interface PgQueryConfigLike {
  name?: string;
  text: string;
  values?: unknown[];
  query_timeout?: number;
}

/** A client checked out of a `pg.Pool`. */
export interface PgPoolClientLike {
  query(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
  release(error?: Error | boolean): void;
}

/** A `pg.Pool` (or anything with the same `query`/`connect`/`end`). */
export interface PgPoolLike {
  query(config: PgQueryConfigLike): Promise<PgQueryResultLike>;
  connect(): Promise<PgPoolClientLike>;
  end(): Promise<void>;
}

/** A `better-sqlite3` prepared statement. */
export interface SqliteStatementLike {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
}

/** A `better-sqlite3` `Database` (synchronous API). */
export interface SqliteDatabaseLike {
  prepare(source: string): SqliteStatementLike;
  exec(source: string): unknown;
  close(): unknown;
  readonly open: boolean;
}

/** Structural constructor of `pg.Pool`, as loaded at run time. */
export type PoolConstructor = new (
  config: Record<string, unknown>,
) => PgPoolLike & {
  on(event: 'error', listener: (error: Error) => void): unknown;
};

/** Structural constructor of `better-sqlite3`'s `Database`, as loaded at run time. */
export type DatabaseConstructor = new (
  filename: string,
  options?: Record<string, unknown>,
) => SqliteDatabaseLike & {
  pragma(source: string): unknown;
};

/** Where a PostgreSQL store (replay or task) connects: the options both take alike. */
export interface PostgresConnectionOptions {
  /**
   * An existing `pg.Pool`. The store never ends it; give it an `'error'` listener yourself.
   * @default none (give `pool` or `connectionString`)
   */
  pool?: PgPoolLike;
  /**
   * A `postgres://` URL; the store then creates (and on `close()` ends) its own `pg.Pool`.
   * @default none (give `pool` or `connectionString`)
   */
  connectionString?: string;
  /** Schema that holds the table (must exist). @default the connection's search_path */
  schema?: string;
}

/** Where a SQLite store (replay or task) keeps its table: the options both take alike. */
export interface SqliteConnectionOptions {
  /**
   * An open `better-sqlite3` database. The store never closes it; configure it with `configureSqliteDatabase` (WAL, `busy_timeout`).
   * @default none (give `database` or `filename`)
   */
  database?: SqliteDatabaseLike;
  /**
   * Path of a database file; the store opens it (WAL, `busy_timeout`) and closes it on `close()`.
   * @default none (give `database` or `filename`)
   */
  filename?: string;
  /**
   * How long a statement waits for another connection's write lock before failing with `ERR_STORE_UNAVAILABLE`,
   * in ms (`busy_timeout` of an owned database). better-sqlite3 is synchronous, so this wait blocks the event
   * loop. @default 5000
   */
  busyTimeoutMs?: number;
  /**
   * `synchronous` pragma of an owned database. `'full'` makes every write durable across power loss; `'normal'`
   * (with WAL) survives a process crash but may lose the last commits on an OS crash or power loss (for the replay
   * store, that would re-open those ids). @default "full"
   */
  synchronous?: 'full' | 'normal';
}

/** The names of {@link PostgresConnectionOptions}, for a store's list of known options. */
export const POSTGRES_CONNECTION_OPTIONS: OptionNames<PostgresConnectionOptions> = { pool: true, connectionString: true, schema: true };
/** The names of {@link SqliteConnectionOptions}, for a store's list of known options. */
export const SQLITE_CONNECTION_OPTIONS: OptionNames<SqliteConnectionOptions> = {
  database: true,
  filename: true,
  busyTimeoutMs: true,
  synchronous: true,
};

/**
 * Loads an optional peer driver. Only a module-not-found error for that very package is reported as
 * "not installed"; any other failure (a broken install, a native addon built for another Node ABI, an
 * error thrown while the module initialises, a missing dependency of the driver) says it failed to load
 * and keeps the original error as `cause`.
 */
export async function loadDriver(name: 'pg' | 'better-sqlite3'): Promise<unknown> {
  let mod: unknown;
  try {
    mod = name === 'pg' ? await import('pg') : await import('better-sqlite3');
  } catch (error) {
    if (isNotFound(error, name)) {
      throw new Error(`@mrtr/store-sql: the optional peer dependency "${name}" is not installed`, { cause: error });
    }
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(`@mrtr/store-sql: the peer dependency "${name}" failed to load: ${reason}`, { cause: error });
  }
  const record = mod as { default?: unknown };
  return record.default ?? mod;
}

/** `ERR_MODULE_NOT_FOUND` (ESM) or `MODULE_NOT_FOUND` (CJS) about `name` itself, not about something it imports. */
function isNotFound(error: unknown, name: string): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false;
  if (typeof message !== 'string') return false;
  // Node: "Cannot find package 'pg' imported from …" / "Cannot find module 'pg'". A dependency of the
  // driver that is missing names that dependency instead.
  return message.includes(`'${name}'`) || message.includes(`"${name}"`);
}
