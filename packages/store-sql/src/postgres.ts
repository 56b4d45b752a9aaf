import { createHash } from 'node:crypto';
import { StoreUnavailableError } from '@mrtr/core';
import {
  boolOption,
  checkConsumeArgs,
  checkNamespace,
  DEFAULT_TABLE,
  fnOption,
  intOption,
  once,
  purgeSettings,
  quoteIdentifier,
  type SqlReplayStore,
  type SqlStoreCommonOptions,
  startPurgeTimer,
  toStoreError,
} from './common.js';
import { loadDriver, type PgPoolClientLike, type PgPoolLike } from './drivers.js';

export interface PostgresStoreOptions extends SqlStoreCommonOptions {
  /** An existing `pg.Pool`. The store never ends it; give it an `'error'` listener yourself. */
  pool?: PgPoolLike;
  /** A `postgres://` URL; the store then creates (and on `close()` ends) its own `pg.Pool`. */
  connectionString?: string;
  /** Schema that holds the table (must exist). @default the connection's search_path */
  schema?: string;
  /**
   * Upper bound of one statement in ms: sent as `statement_timeout` on a pool the store creates
   * and as the client-side `query_timeout` of every query. @default 5000
   */
  statementTimeoutMs?: number;
  /**
   * Upper bound on getting a connection in ms (`connectionTimeoutMillis` of an owned pool). A consume
   * on any pool rejects after `connectionTimeoutMs + statementTimeoutMs` at the latest. @default 5000
   */
  connectionTimeoutMs?: number;
  /** Size of an owned pool. @default 10 */
  maxConnections?: number;
  /**
   * Use named prepared statements (parsed once per connection). Turn off behind a connection pooler
   * that does not support them (PgBouncer in transaction mode before 1.21). @default true
   */
  preparedStatements?: boolean;
}

/** Structural constructor of `pg.Pool`, as loaded at run time. */
type PoolConstructor = new (config: Record<string, unknown>) => PgPoolLike & {
  on(event: 'error', listener: (error: Error) => void): unknown;
};

/** Arbitrary 32-bit class id ("mrtr") for `pg_advisory_xact_lock(int, int)`. */
const LOCK_CLASS = 0x6d727472;

/**
 * Replay store on PostgreSQL (≥ 9.5) through `pg` (loaded only when this factory is used).
 * Each consume is one `INSERT … ON CONFLICT (ns, id) DO UPDATE … WHERE expires_at < now` statement.
 */
export function createPostgresStore(options: PostgresStoreOptions): SqlReplayStore {
  const label = 'createPostgresStore';
  if (options === null || typeof options !== 'object') throw new TypeError(`${label}: options must be an object`);
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
  const tableName = options.table ?? DEFAULT_TABLE;
  const quotedTable = quoteIdentifier(`${label}: table`, tableName);
  const quotedSchema = options.schema === undefined ? undefined : quoteIdentifier(`${label}: schema`, options.schema);
  const table = quotedSchema === undefined ? quotedTable : `${quotedSchema}.${quotedTable}`;
  // Derived from the validated table name (≤ 48 + 14 characters, within PostgreSQL's 63).
  const indexName = `"${tableName}_expires_at_idx"`;
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const statementTimeoutMs = intOption(`${label}: statementTimeoutMs`, options.statementTimeoutMs, 5000, 1, 600_000);
  const connectionTimeoutMs = intOption(`${label}: connectionTimeoutMs`, options.connectionTimeoutMs, 5000, 1, 600_000);
  const maxConnections = intOption(`${label}: maxConnections`, options.maxConnections, 10, 1, 10_000);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: unknown) => void>(`${label}: onError`, options.onError, () => {});
  const prepared = boolOption(`${label}: preparedStatements`, options.preparedStatements, true);
  const deadlineMs = connectionTimeoutMs + statementTimeoutMs;

  // One upsert: a new id is inserted; a row whose expiry has passed is taken over; a live row is
  // left alone. The command tag counts inserted plus updated rows, so rowCount is 1 exactly when
  // this call won. Concurrent consumers of one id serialise on the unique index (a second inserter
  // waits for the first, then takes the conflict path) and on the row lock (the WHERE is re-checked
  // on the newest row version), so exactly one of them gets 1.
  // Trade-off: on a live duplicate (a replay attempt) PostgreSQL still locks the row, which costs a
  // small WAL write; in exchange a fresh id (the common case) does the work of a bare
  // INSERT … ON CONFLICT DO NOTHING. (A CTE of INSERT … DO NOTHING plus UPDATE-if-expired avoids the
  // lock but measured about a quarter slower per fresh id in a CPU-bound ad-hoc run.)
  const consumeSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at) VALUES ($1, $2, $3) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE t.expires_at < $4`;
  // SKIP LOCKED: never wait for (or make a consume wait on) a row another transaction holds;
  // FOR UPDATE re-checks the expiry on a row a concurrent consume has just renewed.
  const purgeSql =
    `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE expires_at < $1 ` +
    `ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND expires_at < $1`;
  // A statement name is derived from its text, so stores on different tables can share a pool.
  const named = (text: string) =>
    prepared ? { name: `mrtr_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`, text } : { text };
  const consumeQuery = named(consumeSql);
  const purgeQuery = named(purgeSql);
  const schemaSql = [
    `CREATE TABLE IF NOT EXISTS ${table} (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, PRIMARY KEY (ns, id))`,
    `CREATE INDEX IF NOT EXISTS ${indexName} ON ${table} (expires_at)`,
  ];

  let closed = false;
  let closing: Promise<void> | undefined;
  let owned: (PgPoolLike & { on(event: 'error', listener: (error: Error) => void): unknown }) | undefined;

  const poolReady = once<PgPoolLike>(async () => {
    if (injected !== undefined) return injected;
    const pg = (await loadDriver('pg')) as { Pool: PoolConstructor };
    if (closed) throw new StoreUnavailableError();
    owned = new pg.Pool({
      connectionString,
      max: maxConnections,
      connectionTimeoutMillis: connectionTimeoutMs,
      statement_timeout: statementTimeoutMs,
      query_timeout: statementTimeoutMs,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    // An idle client losing its connection is reported here; the pool drops it and reconnects later.
    owned.on('error', () => {});
    return owned;
  });

  /** Bounds any operation by the overall deadline (the injected pool may have no timeouts of its own). */
  const withDeadline = <T>(work: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new StoreUnavailableError({ cause: new Error('replay store deadline exceeded') })), deadlineMs);
      work.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });

  const runEnsureSchema = async (): Promise<void> => {
    const pool = await poolReady.get();
    let client: PgPoolClientLike | undefined;
    let failure: unknown;
    try {
      client = await pool.connect();
      await client.query({ text: 'BEGIN', query_timeout: statementTimeoutMs });
      // Two processes running CREATE TABLE IF NOT EXISTS at once can both pass the existence check
      // and one then fails on the type catalog; a transaction-scoped advisory lock serialises them.
      await client.query({
        text: 'SELECT pg_advisory_xact_lock($1, hashtext($2))',
        values: [LOCK_CLASS, `mrtr:${table}`],
        query_timeout: statementTimeoutMs,
      });
      for (const text of schemaSql) await client.query({ text, query_timeout: statementTimeoutMs });
      await client.query({ text: 'COMMIT', query_timeout: statementTimeoutMs });
    } catch (error) {
      failure = error;
      if (client !== undefined) await client.query({ text: 'ROLLBACK', query_timeout: statementTimeoutMs }).catch(() => {});
      throw error;
    } finally {
      // A client that failed mid-transaction is destroyed rather than returned to the pool.
      client?.release(failure instanceof Error ? failure : failure !== undefined);
    }
  };

  const schemaReady = once(runEnsureSchema);

  /** Set once the pool exists and the schema is ensured: consumes then skip the set-up awaits. */
  let readyPool: PgPoolLike | undefined;
  const ready = async (): Promise<PgPoolLike> => {
    const pool = await poolReady.get();
    if (autoSchema) await schemaReady.get();
    readyPool = pool;
    return pool;
  };

  const assertOpen = (): void => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('replay store is closed') });
  };

  const runConsume = async (id: string, expires: number): Promise<boolean> => {
    const pool = readyPool ?? (await ready());
    assertOpen();
    const result = await pool.query({
      ...consumeQuery,
      values: [namespace, id, expires, Math.floor(now())],
      query_timeout: statementTimeoutMs,
    });
    return result.rowCount === 1;
  };

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    const expires = checkConsumeArgs(id, expiresAtMs);
    assertOpen();
    // An id is live while now <= expiresAtMs; one already past it cannot be remembered, so it is never a first use.
    if (expires <= now()) return false;
    try {
      // A pool the store created bounds both the connection wait (connectionTimeoutMillis) and the
      // query (query_timeout); an injected pool may bound neither, so the store adds its own timer.
      const work = runConsume(id, expires);
      return await (owned !== undefined && readyPool !== undefined ? work : withDeadline(work));
    } catch (error) {
      throw toStoreError(error);
    }
  };

  const runPurge = async (): Promise<number> => {
    assertOpen();
    const pool = await ready();
    let total = 0;
    for (let batch = 0; batch < purge.maxBatches && !closed; batch++) {
      const result = await withDeadline(
        pool.query({
          ...purgeQuery,
          values: [Math.floor(now()) - purge.graceMs, purge.batchSize],
          query_timeout: statementTimeoutMs,
        }),
      );
      const deleted = result.rowCount ?? 0;
      total += deleted;
      if (deleted < purge.batchSize) break;
    }
    return total;
  };

  const stopPurge = startPurgeTimer(
    purge.intervalMs,
    async () => {
      // Only purge once the store has been used (so an idle store opens no connection).
      if (poolReady.done && (!autoSchema || schemaReady.done)) await runPurge();
    },
    onError,
  );

  return {
    dialect: 'postgres',
    table,
    consume,
    async ensureSchema() {
      assertOpen();
      try {
        await withDeadline(schemaReady.get());
      } catch (error) {
        throw toStoreError(error);
      }
    },
    async purge() {
      try {
        return await runPurge();
      } catch (error) {
        throw toStoreError(error);
      }
    },
    close() {
      if (closing === undefined) {
        closed = true;
        stopPurge();
        closing = (async () => {
          if (injected !== undefined) return;
          // Wait for a pool that is still being created, then end it (never twice).
          await poolReady.get().catch(() => undefined);
          await owned?.end().catch(() => {});
        })();
      }
      return closing;
    },
  };
}
