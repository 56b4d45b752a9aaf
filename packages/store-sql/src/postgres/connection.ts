import { StoreUnavailableError } from '@mrtr/core/errors';
import { intOption, type OptionNames } from '@mrtr/core/options';
import { withDeadline } from '@mrtr/core/store';
import type { PgPoolClientLike, PgPoolLike, PoolConstructor, PostgresConnectionOptions } from '../shared/drivers.js';
import { loadDriver } from '../shared/drivers.js';
import { type ResourceHandle, resourceHandle } from '../shared/lifecycle.js';
import { checkConnectionChoice, quoteIdentifier } from '../shared/options.js';
import { POSTGRES_CONNECTION_OPTIONS } from '../shared/drivers.js';

/** pg's `lock_not_available` (lock_timeout) and `query_canceled` (statement_timeout) SQLSTATEs. */
export const LOCK_NOT_AVAILABLE = '55P03';
export const QUERY_CANCELED = '57014';

/** The bounds both PostgreSQL stores take (each documents them on its own options). */
export interface PostgresBoundsOptions extends PostgresConnectionOptions {
  statementTimeoutMs?: number;
  lockTimeoutMs?: number;
  connectTimeoutMs?: number;
  maxConnections?: number;
}

/** The names of {@link PostgresBoundsOptions}, for a store's list of known options. */
export const POSTGRES_BOUNDS_OPTIONS: OptionNames<PostgresBoundsOptions> = {
  ...POSTGRES_CONNECTION_OPTIONS,
  statementTimeoutMs: true,
  lockTimeoutMs: true,
  connectTimeoutMs: true,
  maxConnections: true,
};

/** Where and how a PostgreSQL store connects, validated. */
export interface PostgresSettings {
  injected: PgPoolLike | undefined;
  connectionString: string | undefined;
  /** The quoted schema, when one is given. */
  schema: string | undefined;
  statementTimeoutMs: number;
  connectTimeoutMs: number;
  lockTimeoutMs: number;
  maxConnections: number;
  /**
   * How long the client waits for the reply to a statement it has sent: longer than the server's own
   * statement_timeout, so that by then the server has committed or cancelled it (an abandoned statement cannot
   * commit later).
   */
  replyWaitMs: number;
}

const POOL_CHOICE = { injected: 'pool', opener: 'connectionString', methods: ['query', 'connect'], kind: 'pg.Pool' } as const;

/** Exactly one of `pool` and `connectionString`. */
export function postgresTarget(label: string, options: PostgresBoundsOptions): Pick<PostgresSettings, 'injected' | 'connectionString'> {
  const { pool: injected, connectionString } = options;
  checkConnectionChoice(label, injected, connectionString, POOL_CHOICE);
  return { injected, connectionString };
}

/** The quoted schema (when given) and a name qualified with it. */
export function qualifier(label: string, schema: unknown): { schema: string | undefined; qualify(quotedName: string): string } {
  const quotedSchema = schema === undefined ? undefined : quoteIdentifier(`${label}: schema`, schema);
  return { schema: quotedSchema, qualify: (name) => (quotedSchema === undefined ? name : `${quotedSchema}.${name}`) };
}

/** The timeouts and pool size, validated (in this order, so the first bad option is the one reported). */
export function postgresBounds(
  label: string,
  options: PostgresBoundsOptions,
): Pick<PostgresSettings, 'statementTimeoutMs' | 'connectTimeoutMs' | 'lockTimeoutMs' | 'maxConnections' | 'replyWaitMs'> {
  const statementTimeoutMs = intOption(`${label}: statementTimeoutMs`, options.statementTimeoutMs, 5000, 1, 600_000);
  const connectTimeoutMs = intOption(`${label}: connectTimeoutMs`, options.connectTimeoutMs, 5000, 1, 600_000);
  const lockTimeoutMs = intOption(`${label}: lockTimeoutMs`, options.lockTimeoutMs, Math.min(2000, statementTimeoutMs), 1, 600_000);
  const maxConnections = intOption(`${label}: maxConnections`, options.maxConnections, 10, 1, 10_000);
  const replyWaitMs = statementTimeoutMs + Math.min(statementTimeoutMs, 1000);
  return { statementTimeoutMs, connectTimeoutMs, lockTimeoutMs, maxConnections, replyWaitMs };
}

/** `SET LOCAL` of both server-side bounds (numbers validated, so they can be written into the SQL text). */
export const localTimeoutsSql = (settings: Pick<PostgresSettings, 'statementTimeoutMs' | 'lockTimeoutMs'>): string =>
  `SET LOCAL statement_timeout = ${settings.statementTimeoutMs}; SET LOCAL lock_timeout = ${settings.lockTimeoutMs}`;

/** The pool of a store: the injected one, or one created on first use (and ended by `close`). */
export type PoolHandle = ResourceHandle<PgPoolLike>;

/**
 * The pool a store uses. A pool it creates sends the server-side bounds as startup parameters, so the server
 * cancels a statement (or a lock wait) that runs too long and a statement the client gave up on cannot commit
 * later. `closedError` is thrown when the store was closed while `pg` loaded.
 */
export function poolHandle(settings: PostgresSettings, isClosed: () => boolean, closedError: () => Error): PoolHandle {
  const open = async (): Promise<PgPoolLike> => {
    const pg = (await loadDriver('pg')) as { Pool: PoolConstructor };
    if (isClosed()) throw closedError();
    const owned = new pg.Pool({
      connectionString: settings.connectionString,
      max: settings.maxConnections,
      connectionTimeoutMillis: settings.connectTimeoutMs,
      statement_timeout: settings.statementTimeoutMs,
      lock_timeout: settings.lockTimeoutMs,
      query_timeout: settings.replyWaitMs,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    // An idle client losing its connection is reported here; the pool drops it and reconnects later.
    owned.on('error', () => {});
    return owned;
  };
  return resourceHandle(settings.injected, open, (owned) => owned.end().catch(() => {}));
}

/**
 * While a connection is checked out, an error it emits between queries (the server or the network ends
 * it) must not crash the process: pg.Pool listens only on idle clients. The next query on it fails and
 * the store releases it with that error (destroyed). Returns the function that removes the listener.
 */
export function holdErrors(client: PgPoolClientLike): () => void {
  const emitter = client as {
    on?: (event: 'error', listener: () => void) => unknown;
    removeListener?: (event: 'error', listener: () => void) => unknown;
  };
  const ignore = () => {};
  if (typeof emitter.on !== 'function') return () => {};
  emitter.on('error', ignore);
  return () => {
    emitter.removeListener?.('error', ignore);
  };
}

/** An error reply of the server (pg's DatabaseError carries the SQLSTATE and a severity): the statement did not commit. */
export function isServerError(error: unknown): boolean {
  const record = error as { code?: unknown; severity?: unknown } | null;
  return typeof record?.code === 'string' && /^[0-9A-Z]{5}$/.test(record.code) && typeof record.severity === 'string';
}

/** Bounds `work` by `ms`, failing with `ERR_STORE_UNAVAILABLE` ("`what` deadline exceeded"). */
export const deadline =
  (what: 'replay store' | 'task store', ms: number) =>
  <T>(work: Promise<T>): Promise<T> =>
    withDeadline(work, ms, () => new StoreUnavailableError({ cause: new Error(`${what} deadline exceeded`) }));
