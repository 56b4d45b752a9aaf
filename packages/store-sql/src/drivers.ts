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
