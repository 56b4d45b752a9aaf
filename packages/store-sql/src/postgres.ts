import { createHash } from 'node:crypto';
import type { ClaimResult } from '@mrtr/core';
import {
  type BackgroundError,
  boolOption,
  fnOption,
  intOption,
  optionsObject,
  renamedOption,
  StoreUnavailableError,
  withDeadline,
} from '@mrtr/core/authoring';
import {
  CLAIM_TRIES,
  checkClaimArgs,
  checkConsumeArgs,
  checkNamespace,
  checkRecordArgs,
  DEFAULT_TABLE,
  FIRST,
  createGroupCommit,
  groupCommitSettings,
  type HeldRow,
  heldStatus,
  isLive,
  maxOutcomeBytesOption,
  once,
  ownerValue,
  ownerValues,
  purgeSettings,
  quoteIdentifier,
  REPLAYED,
  type SqlReplayStore,
  type SqlStoreCommonOptions,
  startPurgeTimer,
  toStoreError,
  unsettledClaimError,
  type Waiter,
} from './common.js';
import {
  loadDriver,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgQueryConfigLike,
  type PgQueryResultLike,
  type PoolConstructor,
  type PostgresConnectionOptions,
} from './drivers.js';

export interface PostgresStoreOptions extends SqlStoreCommonOptions, PostgresConnectionOptions {
  /**
   * Upper bound of one statement in ms, enforced by the server: sent as `statement_timeout` on a pool
   * the store creates; on an injected pool whose connections have no `statement_timeout` of at most this
   * (checked once per connection), each consume runs in a transaction with `SET LOCAL statement_timeout`.
   * The client waits for a reply up to this plus `min(statementTimeoutMs, 1000)` (so the server's own
   * cancel arrives first); when none arrives (or the connection breaks), the store asks once, with a
   * `SELECT` under the same bounds, whether the row holds this call's owner value before it fails. @default 5000
   */
  statementTimeoutMs?: number;
  /**
   * Server-side `lock_timeout` in ms, set with `statementTimeoutMs` on a pool the store creates, on every
   * consume that runs in its own transaction, and around the DDL of `ensureSchema()`: a statement that
   * waits this long for a lock (a row held by another transaction, a table locked by `pg_dump` or an
   * idle transaction) is cancelled by the server instead of queueing. @default min(2000, statementTimeoutMs)
   */
  lockTimeoutMs?: number;
  /**
   * Upper bound on getting a connection in ms (`connectionTimeoutMillis` of an owned pool; the name `@mrtr/store-redis` uses). A consume
   * on any pool rejects after `connectTimeoutMs + statementTimeoutMs` at the latest. @default 5000
   */
  connectTimeoutMs?: number;
  /**
   * Size of an owned pool, and the most consume statements the store has in flight at once (on an
   * injected pool too: give that pool at least this many connections). @default 10
   */
  maxConnections?: number;
  /**
   * Use named prepared statements (parsed once per connection). Turn off behind a connection pooler
   * that does not support them (PgBouncer in transaction mode before 1.21). @default true
   */
  preparedStatements?: boolean;
}

/** An error reply of the server (pg's DatabaseError carries the SQLSTATE and a severity): the statement did not commit. */
export function isServerError(error: unknown): boolean {
  const record = error as { code?: unknown; severity?: unknown } | null;
  return typeof record?.code === 'string' && /^[0-9A-Z]{5}$/.test(record.code) && typeof record.severity === 'string';
}

/** pg's `lock_not_available` (lock_timeout) and `query_canceled` (statement_timeout) SQLSTATEs. */
const LOCK_NOT_AVAILABLE = '55P03';

/** A consume statement that failed before it was sent: nothing can have been written, nothing to ask. */
class Unsent {
  readonly error: unknown;
  constructor(error: unknown) {
    this.error = error;
  }
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

/** Arbitrary 32-bit class id ("mrtr") for `pg_advisory_xact_lock(int, int)`. */
const LOCK_CLASS = 0x6d727472;

/**
 * Replay store on PostgreSQL (≥ 9.5) through `pg` (loaded only when this factory is used).
 * Each consume is one `INSERT … ON CONFLICT (ns, id) DO UPDATE … WHERE expires_at < now` statement
 * that also writes a random owner value only that call knows; a consume whose reply is lost asks once
 * (`SELECT owner`) whether the row is its own before it fails. It records outcomes too (`claim`, `record`):
 * the same upsert keeping a fingerprint, read back in the same statement, and one `UPDATE` of the outcome.
 */
export function createPostgresStore(options: PostgresStoreOptions): SqlReplayStore {
  const label = 'createPostgresStore';
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
  const tableName = options.table ?? DEFAULT_TABLE;
  const quotedTable = quoteIdentifier(`${label}: table`, tableName);
  const quotedSchema = options.schema === undefined ? undefined : quoteIdentifier(`${label}: schema`, options.schema);
  const table = quotedSchema === undefined ? quotedTable : `${quotedSchema}.${quotedTable}`;
  // Derived from the validated table name (≤ 48 + 14 characters, within PostgreSQL's 63).
  const indexName = `"${tableName}_expires_at_idx"`;
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const statementTimeoutMs = intOption(`${label}: statementTimeoutMs`, options.statementTimeoutMs, 5000, 1, 600_000);
  const connectionTimeoutMs = renamedOption(label, options, 'connectTimeoutMs', 'connectionTimeoutMs', (name, value) =>
    intOption(`${label}: ${name}`, value, 5000, 1, 600_000),
  );
  const lockTimeoutMs = intOption(`${label}: lockTimeoutMs`, options.lockTimeoutMs, Math.min(2000, statementTimeoutMs), 1, 600_000);
  const maxConnections = intOption(`${label}: maxConnections`, options.maxConnections, 10, 1, 10_000);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {});
  const prepared = boolOption(`${label}: preparedStatements`, options.preparedStatements, true);
  const maxOutcomeBytes = maxOutcomeBytesOption(label, options);
  const deadlineMs = connectionTimeoutMs + statementTimeoutMs;
  // How long the client waits for the reply to a consume statement it has sent: longer than the
  // server's own statement_timeout, so that by then the server has committed or cancelled it and the
  // owner lookup that follows a missing reply sees the outcome (an abandoned statement cannot commit later).
  const replyWaitMs = statementTimeoutMs + Math.min(statementTimeoutMs, 1000);
  // Numbers validated above, so they can be written into the SQL text.
  const localTimeoutsSql = `SET LOCAL statement_timeout = ${statementTimeoutMs}; SET LOCAL lock_timeout = ${lockTimeoutMs}`;

  // One upsert: a new id is inserted; a row whose expiry has passed is taken over; a live row is
  // left alone. The command tag counts inserted plus updated rows, so rowCount is 1 exactly when
  // this call won. Concurrent consumers of one id serialise on the unique index (a second inserter
  // waits for the first, then takes the conflict path) and on the row lock (the WHERE is re-checked
  // on the newest row version), so exactly one of them gets 1.
  // Trade-off: on a live duplicate (a replay attempt) PostgreSQL still locks the row, which costs a
  // small WAL write; in exchange a fresh id (the common case) does the work of a bare
  // INSERT … ON CONFLICT DO NOTHING. (A CTE of INSERT … DO NOTHING plus UPDATE-if-expired avoids the
  // lock but measured about a quarter slower per fresh id in a CPU-bound ad-hoc run.)
  // Each consume also writes `owner`, a random value only it knows: if its reply is lost, one SELECT
  // tells whether the row is its own (→ true), someone else's (→ false), or still unknown (→ error).
  // Taking over an expired row clears what a `claim` kept with it (fingerprint, outcome): the id is now held
  // by a plain consume, and its old outcome is gone with the old row.
  const takeOver = 'expires_at = EXCLUDED.expires_at, owner = EXCLUDED.owner, fp = NULL, outcome = NULL';
  const consumeSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner) VALUES ($1, $2, $3, $5) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET ${takeOver} WHERE t.expires_at < $4`;
  const ownerSql = `SELECT owner, expires_at FROM ${table} WHERE ns = $1 AND id = $2`;
  // Group commit: the same upsert for a batch of distinct ids (sorted, so two batches of different
  // stores that share ids take their row locks in one order and cannot deadlock). RETURNING lists the
  // ids this statement inserted or took over; ON CONFLICT DO UPDATE may touch a row only once per
  // statement, so the batch never holds an id twice (a repeated id is answered without the database).
  const batchSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner) SELECT $1::text, u.id, u.expires_at, u.owner ` +
    'FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u(id, expires_at, owner) ' +
    `ON CONFLICT (ns, id) DO UPDATE SET ${takeOver} WHERE t.expires_at < $5 ` +
    'RETURNING t.id';
  const ownersSql = `SELECT id, owner, expires_at FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // claim: the consume upsert that also keeps the fingerprint (and clears an expired row's outcome), and in the
  // same statement the row it conflicted with when it took nothing. The SELECT reads the statement's snapshot:
  // a row that a concurrent transaction inserted or took over and committed after the snapshot was taken (the
  // upsert waited for it, then found it live) is missing from it, or still shows the old expired version; the
  // claim then runs the statement again (CLAIM_TRIES at most, then it fails closed), never answering `first`
  // for a row it did not write. One row comes back: `first`, or the fingerprint and outcome of the live row.
  const claimSql =
    `WITH ins AS (INSERT INTO ${table} AS t (ns, id, expires_at, owner, fp) VALUES ($1, $2, $3, $5, $6) ` +
    'ON CONFLICT (ns, id) DO UPDATE SET expires_at = EXCLUDED.expires_at, owner = EXCLUDED.owner, fp = EXCLUDED.fp, outcome = NULL ' +
    'WHERE t.expires_at < $4 RETURNING 1) ' +
    'SELECT true AS first, NULL::text AS fp, NULL::text AS outcome, NULL::bigint AS expires_at FROM ins ' +
    `UNION ALL SELECT false, r.fp, r.outcome, r.expires_at FROM ${table} AS r WHERE r.ns = $1 AND r.id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`;
  // record: only the claim's own fingerprint, only once, only while the id is live.
  const recordSql = `UPDATE ${table} SET outcome = $4 WHERE ns = $1 AND id = $2 AND fp = $3 AND outcome IS NULL AND expires_at >= $5`;
  // What a claim or record whose reply was lost asks.
  const rowSql = `SELECT owner, fp, outcome, expires_at FROM ${table} WHERE ns = $1 AND id = $2`;
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
  const ownerQuery = named(ownerSql);
  const batchQuery = named(batchSql);
  const ownersQuery = named(ownersSql);
  const claimQuery = named(claimSql);
  const recordQuery = named(recordSql);
  const rowQuery = named(rowSql);
  const groupCommit = groupCommitSettings(label, options);
  // What ensureSchema() looks up before it changes anything: reading the catalog takes no lock on the
  // table, whereas ALTER TABLE … IF NOT EXISTS / CREATE INDEX IF NOT EXISTS lock it even when nothing is
  // missing, and a lock request queued behind any reader (pg_dump, an idle transaction) holds up every
  // consume of every instance behind it.
  // Columns added after the first version, in the order they came: `owner` (lost replies), `fp` and `outcome`
  // (outcome recording). All nullable text without a default: adding them is a catalog-only change.
  const addedColumns = ['owner', 'fp', 'outcome'] as const;
  const catalogSql =
    'SELECT c.oid IS NOT NULL AS has_table, ' +
    addedColumns
      .map(
        (column) =>
          `EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = '${column}' AND a.attnum > 0 AND NOT a.attisdropped) AS has_${column}, `,
      )
      .join('') +
    'EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid AND i.relname = $2) AS has_index ' +
    'FROM (SELECT to_regclass($1::text)::oid AS oid) AS c';
  const catalogValues = [table, `${tableName}_expires_at_idx`];
  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, ` +
    'PRIMARY KEY (ns, id))';
  // A table created by an earlier version lacks some of them (PostgreSQL ≥ 9.6): one ALTER TABLE adds
  // exactly the missing ones.
  const addColumnsSql = (missing: readonly string[]) =>
    `ALTER TABLE ${table} ${missing.map((column) => `ADD COLUMN IF NOT EXISTS ${column} text`).join(', ')}`;
  const createIndexSql = `CREATE INDEX IF NOT EXISTS ${indexName} ON ${table} (expires_at)`;

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
      // Server-side bounds: the server cancels a statement (or a lock wait) that runs too long, so a
      // statement the client gave up on cannot commit later.
      statement_timeout: statementTimeoutMs,
      lock_timeout: lockTimeoutMs,
      query_timeout: replyWaitMs,
      idleTimeoutMillis: 30_000,
      allowExitOnIdle: true,
      keepAlive: true,
    });
    // An idle client losing its connection is reported here; the pool drops it and reconnects later.
    owned.on('error', () => {});
    return owned;
  });

  /** Bounds any operation by the overall deadline (the injected pool may have no timeouts of its own). */
  const bounded = <T>(work: Promise<T>): Promise<T> =>
    withDeadline(work, deadlineMs, () => new StoreUnavailableError({ cause: new Error('replay store deadline exceeded') }));

  type Catalog = Record<string, unknown>;
  const readCatalog = async (run: (config: PgQueryConfigLike) => Promise<PgQueryResultLike>): Promise<Catalog> =>
    ((await run({ text: catalogSql, values: catalogValues, query_timeout: replyWaitMs })).rows[0] ?? {}) as Catalog;
  const missingColumns = (catalog: Catalog): string[] => addedColumns.filter((column) => catalog[`has_${column}`] !== true);
  const complete = (catalog: Catalog): boolean =>
    catalog.has_table === true && missingColumns(catalog).length === 0 && catalog.has_index === true;

  const runEnsureSchema = async (): Promise<void> => {
    const pool = await poolReady.get();
    // Nothing missing (every start but the first): no DDL, so no lock on the table at all.
    if (complete(await readCatalog((config) => pool.query(config)))) return;
    let client: PgPoolClientLike | undefined;
    let unhold = () => {};
    let failure: unknown;
    try {
      client = await pool.connect();
      unhold = holdErrors(client);
      const query = (client as PgPoolClientLike).query.bind(client);
      await query({ text: `BEGIN; SET LOCAL statement_timeout = ${statementTimeoutMs}`, query_timeout: replyWaitMs });
      // Two processes running CREATE TABLE IF NOT EXISTS at once can both pass the existence check
      // and one then fails on the type catalog; a transaction-scoped advisory lock serialises them
      // (waiting for another instance's migration is bounded by statement_timeout only).
      await query({
        text: 'SELECT pg_advisory_xact_lock($1, hashtext($2))',
        values: [LOCK_CLASS, `mrtr:${table}`],
        query_timeout: replyWaitMs,
      });
      // lock_timeout: DDL that waits for a lock on the table fails after lockTimeoutMs instead of
      // queueing (and holding up every consume queued behind it) for as long as the holder stays.
      await query({ text: `SET LOCAL lock_timeout = ${lockTimeoutMs}`, query_timeout: replyWaitMs });
      // Another instance may have finished while this one waited for the advisory lock.
      const catalog = await readCatalog(query);
      const missing = missingColumns(catalog);
      if (catalog.has_table !== true) await query({ text: createTableSql, query_timeout: replyWaitMs });
      else if (missing.length > 0) await query({ text: addColumnsSql(missing), query_timeout: replyWaitMs });
      if (catalog.has_index !== true) await query({ text: createIndexSql, query_timeout: replyWaitMs });
      await query({ text: 'COMMIT', query_timeout: replyWaitMs });
    } catch (error) {
      failure = error;
      if (client !== undefined) await client.query({ text: 'ROLLBACK', query_timeout: replyWaitMs }).catch(() => {});
      if ((error as { code?: unknown } | null)?.code === LOCK_NOT_AVAILABLE) {
        throw new StoreUnavailableError({
          cause: new Error(
            `ensureSchema: gave up after lockTimeoutMs (${lockTimeoutMs} ms) waiting for a lock on ${table} held by another session ` +
              '(an open transaction, pg_dump, another migration); nothing was changed. Retry when it ends, or run the schema ' +
              'statements from your migration tool and pass ensureSchema: false',
            { cause: error },
          ),
        });
      }
      throw error;
    } finally {
      // A client that failed mid-transaction is destroyed rather than returned to the pool.
      unhold();
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

  /** Connections of an injected pool, checked once each: does the server bound their statements? */
  const checkedConnections = new WeakMap<object, boolean>();
  const settingsSql = "SELECT name, setting FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout')";

  /**
   * Whether the server cancels this connection's statements and lock waits within statementTimeoutMs by
   * itself (`statement_timeout` and `lock_timeout` both set, neither above it). A pool the store created
   * sends both as startup parameters; an injected pool's connection is asked once.
   */
  const serverBounded = async (client: PgPoolClientLike): Promise<boolean> => {
    const known = checkedConnections.get(client);
    if (known !== undefined) return known;
    const result = await client.query({ text: settingsSql, query_timeout: replyWaitMs });
    const settings = new Map<unknown, number>();
    for (const row of result.rows) {
      const { name, setting } = row as { name?: unknown; setting?: unknown };
      settings.set(name, Number(setting));
    }
    const within = (value: number | undefined) => value !== undefined && value > 0 && value <= statementTimeoutMs;
    const answer = within(settings.get('statement_timeout')) && within(settings.get('lock_timeout'));
    checkedConnections.set(client, answer);
    return answer;
  };

  /**
   * A consume statement on a connection without server-side bounds: in a transaction whose
   * `SET LOCAL statement_timeout` / `lock_timeout` make the server cancel it; one that the client gave
   * up on cannot commit later either, as its COMMIT is never sent.
   */
  const inTransaction = async (client: PgPoolClientLike, config: PgQueryConfigLike): Promise<PgQueryResultLike> => {
    try {
      await client.query({ text: `BEGIN; ${localTimeoutsSql}`, query_timeout: replyWaitMs });
    } catch (error) {
      throw new Unsent(error);
    }
    const result = await client.query({ ...config, query_timeout: replyWaitMs });
    await client.query({ text: 'COMMIT', query_timeout: replyWaitMs });
    return result;
  };

  const replyDeadlineError = () =>
    new StoreUnavailableError({ cause: new Error(`replay store deadline exceeded: no reply within ${replyWaitMs} ms`) });

  /**
   * Sends one consume statement (a single upsert or a batch) on a connection of its own, so a slow
   * statement holds up only its own consumes. Until it is sent (set-up, connection, the settings check)
   * it is bounded by `budgetMs` and a failure is an {@link Unsent}; once sent, the server bounds it
   * (statement_timeout, lock_timeout) and the client waits for the reply at most `replyWaitMs`. A
   * connection that failed is destroyed, not returned to the pool.
   */
  const send = async (config: PgQueryConfigLike, budgetMs: number): Promise<PgQueryResultLike> => {
    const sendBy = performance.now() + budgetMs;
    const left = () => Math.max(1, sendBy - performance.now());
    let client: PgPoolClientLike;
    let unhold = () => {};
    let serverSide: boolean;
    try {
      const pool = readyPool ?? (await withDeadline(ready(), left(), deadlineError));
      assertOpen();
      if (performance.now() >= sendBy) throw deadlineError();
      const connecting = pool.connect();
      try {
        client = await withDeadline(connecting, left(), deadlineError);
        unhold = holdErrors(client);
      } catch (error) {
        // A connection that arrives after the deadline goes back to the pool unused.
        connecting.then(
          (late) => late.release(),
          () => {},
        );
        throw error;
      }
      try {
        assertOpen();
        serverSide = owned !== undefined || (await withDeadline(serverBounded(client), left(), deadlineError));
      } catch (error) {
        unhold();
        client.release(error instanceof Error ? error : true);
        throw error;
      }
    } catch (error) {
      throw new Unsent(error);
    }
    try {
      let result: PgQueryResultLike;
      if (owned !== undefined) {
        // The pool the store created: pg's query_timeout (replyWaitMs) bounds the wait.
        result = await client.query({ ...config, query_timeout: replyWaitMs });
      } else {
        const work = serverSide ? client.query({ ...config, query_timeout: replyWaitMs }) : inTransaction(client, config);
        result = await withDeadline(work, replyWaitMs, replyDeadlineError);
      }
      unhold();
      client.release();
      return result;
    } catch (error) {
      unhold();
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  };

  /**
   * One query on a connection of its own (the owner lookups). A connection of an injected pool is checked
   * on first use, as for a consume, so that a consume sent on it later is the next thing it sends.
   */
  const queryOnConnection = async (config: PgQueryConfigLike): Promise<PgQueryResultLike> => {
    const pool = await poolReady.get();
    const client = await pool.connect();
    const unhold = holdErrors(client);
    try {
      if (owned === undefined) await serverBounded(client);
      const result = await client.query(config);
      unhold();
      client.release();
      return result;
    } catch (error) {
      unhold();
      client.release(error instanceof Error ? error : true);
      throw error;
    }
  };

  const runConsume = async (id: string, expires: number, mine: string, budgetMs: number): Promise<boolean> => {
    const result = await send({ ...consumeQuery, values: [namespace, id, expires, Math.floor(now()), mine] }, budgetMs);
    return result.rowCount === 1;
  };

  /**
   * The INSERT may have committed although its reply never arrived (timeout, connection lost). Ask
   * once: the row holds this call's owner → `true`; a live row of another owner (or of an older
   * version, without one) → `false`; no row, an expired row (this write would have taken it over) or
   * no answer → still unknown → the original failure.
   */
  const resolveLost = async (id: string, mine: string, original: unknown): Promise<boolean> => {
    let row: { owner?: unknown; expires_at?: unknown } | undefined;
    try {
      const result = await bounded(queryOnConnection({ ...ownerQuery, values: [namespace, id], query_timeout: statementTimeoutMs }));
      row = result.rows[0] as typeof row;
    } catch {
      throw toStoreError(original);
    }
    if (row !== undefined && row.owner === mine) return true;
    if (row !== undefined && Number(row.expires_at) >= Math.floor(now())) return false;
    throw toStoreError(original);
  };

  const deadlineError = () => new StoreUnavailableError({ cause: new Error('replay store deadline exceeded') });

  /**
   * One consume, one statement (no group commit, or a batch of one). `budgetMs` is what is left of the
   * deadline of a consume that waited in the group-commit queue.
   */
  const consumeOne = async (id: string, expires: number, mine: string, budgetMs = deadlineMs): Promise<boolean> => {
    try {
      return await runConsume(id, expires, mine, budgetMs);
    } catch (error) {
      // Never sent, or the server answered with an error (the statement did not commit): nothing to
      // ask. Otherwise — no reply in time, a connection lost — the owner lookup tells.
      if (error instanceof Unsent) throw toStoreError(error.error);
      if (isServerError(error) || closed) throw toStoreError(error);
      return resolveLost(id, mine, error);
    }
  };

  /**
   * Runs one batch of queued consumes and settles each waiter. The first waiter of an id goes into the
   * statement; a later waiter of the same id is answered `false` once the statement has run (only one
   * of them can be first), and shares its failure otherwise. A failed statement fails every waiter
   * closed; a lost reply is resolved per id by one `SELECT` of the owners, as for a single consume.
   */
  const runBatch = async (batch: Waiter[]): Promise<void> => {
    if (closed) {
      for (const waiter of batch) waiter.reject(new StoreUnavailableError({ cause: new Error('replay store is closed') }));
      return;
    }
    // The whole wait of a consume, in the queue included, stays within the store's deadline.
    const budget = deadlineMs - (performance.now() - (batch[0] as Waiter).queuedAt);
    if (budget <= 0) {
      for (const waiter of batch) waiter.reject(deadlineError());
      return;
    }
    if (batch.length === 1) {
      const waiter = batch[0] as Waiter;
      try {
        waiter.resolve(await consumeOne(waiter.id, waiter.expires, ownerValue(), budget));
      } catch (error) {
        waiter.reject(toStoreError(error));
      }
      return;
    }
    const first = new Map<string, Waiter>();
    const repeated: Waiter[] = [];
    for (const waiter of batch) {
      if (first.has(waiter.id)) repeated.push(waiter);
      else first.set(waiter.id, waiter);
    }
    const unique = [...first.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const ids = unique.map((waiter) => waiter.id);
    const owners = ownerValues(unique.length);
    let won: Set<unknown>;
    try {
      const result = await send(
        { ...batchQuery, values: [namespace, ids, unique.map((waiter) => waiter.expires), owners, Math.floor(now())] },
        budget,
      );
      won = new Set(result.rows.map((row) => (row as { id: unknown }).id));
    } catch (error) {
      if (error instanceof Unsent || isServerError(error) || closed) {
        const failure = toStoreError(error instanceof Unsent ? error.error : error);
        for (const waiter of batch) waiter.reject(failure);
        return;
      }
      await resolveLostBatch(unique, owners, repeated, error);
      return;
    }
    for (const waiter of unique) waiter.resolve(won.has(waiter.id));
    for (const waiter of repeated) waiter.resolve(false);
  };

  /** {@link resolveLost} for a batch: one `SELECT` of the owners of its ids. */
  const resolveLostBatch = async (unique: Waiter[], owners: string[], repeated: Waiter[], original: unknown): Promise<void> => {
    const failure = toStoreError(original);
    let rows: Map<unknown, { owner?: unknown; expires_at?: unknown }>;
    try {
      const ids = unique.map((waiter) => waiter.id);
      const result = await bounded(queryOnConnection({ ...ownersQuery, values: [namespace, ids], query_timeout: statementTimeoutMs }));
      rows = new Map(result.rows.map((row) => [(row as { id: unknown }).id, row as { owner?: unknown; expires_at?: unknown }]));
    } catch {
      for (const waiter of unique) waiter.reject(failure);
      for (const waiter of repeated) waiter.reject(failure);
      return;
    }
    const t = Math.floor(now());
    unique.forEach((waiter, i) => {
      const row = rows.get(waiter.id);
      if (row !== undefined && row.owner === owners[i]) waiter.resolve(true);
      else if (row !== undefined && Number(row.expires_at) >= t) waiter.resolve(false);
      else waiter.reject(failure);
    });
    // A repeated id: its first waiter was answered (true or false) or failed; either way this one is not first.
    for (const waiter of repeated) {
      const row = rows.get(waiter.id);
      if (row !== undefined && Number(row.expires_at) >= t) waiter.resolve(false);
      else waiter.reject(failure);
    }
  };

  const queue = groupCommit === undefined ? undefined : createGroupCommit(groupCommit, 'microtask', runBatch, maxConnections);

  const consume = (id: string, expiresAtMs: number): Promise<boolean> => {
    let expires: number;
    try {
      expires = checkConsumeArgs(id, expiresAtMs);
      assertOpen();
    } catch (error) {
      return Promise.reject(error);
    }
    // An id is live while now <= expiresAtMs; one already past it cannot be remembered, so it is never a first use.
    if (expires <= now()) return Promise.resolve(false);
    if (queue === undefined) return consumeOne(id, expires, ownerValue());
    return new Promise<boolean>((resolve, reject) => {
      queue.push({ id, expires, queuedAt: performance.now(), resolve, reject });
    });
  };

  /**
   * One claim statement: `first`, how the live row is held, or `undefined` when the statement's snapshot
   * did not show the row its upsert conflicted with (see claimSql: run it again).
   */
  const runClaim = async (id: string, expires: number, fingerprint: string, mine: string): Promise<ClaimResult | undefined> => {
    const t = Math.floor(now());
    const result = await send({ ...claimQuery, values: [namespace, id, expires, t, mine, fingerprint] }, deadlineMs);
    const row = result.rows[0] as (HeldRow & { first?: unknown }) | undefined;
    if (row?.first === true) return FIRST;
    return isLive(row, t) ? heldStatus(row, fingerprint) : undefined;
  };

  /** A row read on a connection of its own, under the same bounds (after a lost reply). */
  const readRow = async (id: string): Promise<HeldRow | undefined> =>
    (await bounded(queryOnConnection({ ...rowQuery, values: [namespace, id], query_timeout: statementTimeoutMs }))).rows[0] as
      | HeldRow
      | undefined;

  /**
   * A claim whose reply was lost, asked once like a consume: the row holds this call's owner → `first`; a live
   * row of another → how it is held; no row, an expired one or no answer → the original failure.
   */
  const resolveLostClaim = async (id: string, fingerprint: string, mine: string, original: unknown): Promise<ClaimResult> => {
    let row: HeldRow | undefined;
    try {
      row = await readRow(id);
    } catch {
      throw toStoreError(original);
    }
    if (row !== undefined && row.owner === mine) return FIRST;
    if (isLive(row, Math.floor(now()))) return heldStatus(row, fingerprint);
    throw toStoreError(original);
  };

  /**
   * A claim whose expiry is not in the future: as for consume, such an id cannot be remembered, so it is never
   * a first use and nothing is written; a live row of the id still answers how it is held (read only).
   */
  const claimExpired = async (id: string, fingerprint: string): Promise<ClaimResult> => {
    try {
      const row = (await send({ ...rowQuery, values: [namespace, id] }, deadlineMs)).rows[0] as HeldRow | undefined;
      return isLive(row, Math.floor(now())) ? heldStatus(row, fingerprint) : REPLAYED;
    } catch (error) {
      throw toStoreError(error instanceof Unsent ? error.error : error);
    }
  };

  /** Not part of group commit (claims are per round, far rarer than consumes): one statement of its own. */
  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
    assertOpen();
    if (expires <= now()) return claimExpired(id, fingerprint);
    for (let attempt = 0; attempt < CLAIM_TRIES; attempt++) {
      const mine = ownerValue();
      let found: ClaimResult | undefined;
      try {
        found = await runClaim(id, expires, fingerprint, mine);
      } catch (error) {
        if (error instanceof Unsent) throw toStoreError(error.error);
        if (isServerError(error) || closed) throw toStoreError(error);
        return resolveLostClaim(id, fingerprint, mine, error);
      }
      if (found !== undefined) return found;
    }
    throw unsettledClaimError();
  };

  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
    assertOpen();
    try {
      const result = await send({ ...recordQuery, values: [namespace, id, fingerprint, stored, Math.floor(now())] }, deadlineMs);
      return result.rowCount === 1 && stored !== '';
    } catch (error) {
      if (error instanceof Unsent) throw toStoreError(error.error);
      if (isServerError(error) || closed) throw toStoreError(error);
      // Lost reply: this outcome on the row → it was stored; a row that this update cannot have changed
      // (another fingerprint, another outcome) → false; anything else is unknown → the original failure.
      let row: HeldRow | undefined;
      try {
        row = await readRow(id);
      } catch {
        throw toStoreError(error);
      }
      if (row !== undefined && row.fp === fingerprint && row.outcome === stored) return stored !== '';
      if (row !== undefined && (row.fp !== fingerprint || (row.outcome !== null && row.outcome !== undefined))) return false;
      throw toStoreError(error);
    }
  };

  const runPurge = async (): Promise<number> => {
    assertOpen();
    const pool = await ready();
    let total = 0;
    for (let batch = 0; batch < purge.maxBatches && !closed; batch++) {
      const result = await bounded(
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
    label,
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
    maxOutcomeBytes,
    consume,
    claim,
    record,
    async ensureSchema() {
      assertOpen();
      try {
        await bounded(schemaReady.get());
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
        // Consumes still queued fail closed; a statement already sent settles its own.
        queue?.failAll(() => new StoreUnavailableError({ cause: new Error('replay store is closed') }));
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
