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
}

/** A `better-sqlite3` `Database` (synchronous API). */
export interface SqliteDatabaseLike {
  prepare(source: string): SqliteStatementLike;
  exec(source: string): unknown;
  close(): unknown;
  readonly open: boolean;
}

/** Loads an optional peer driver; a missing package becomes a clear error naming it. */
export async function loadDriver(name: 'pg' | 'better-sqlite3'): Promise<unknown> {
  let mod: unknown;
  try {
    mod = name === 'pg' ? await import('pg') : await import('better-sqlite3');
  } catch (error) {
    throw new Error(`@mrtr/store-sql: the optional peer dependency "${name}" is not installed`, { cause: error });
  }
  const record = mod as { default?: unknown };
  return record.default ?? mod;
}
