import { createHash } from 'node:crypto';
import type { ClaimResult } from '@mrtr/core';
import {
  type BackgroundError,
  boolOption,
  fnOption,
  intOption,
  optionsObject,
  createBatcher,
  StoreUnavailableError,
  withDeadline,
} from '@mrtr/core/authoring';
import {
  BUDGET_BUCKET_MS,
  batcherOptions,
  budgetBucket,
  byId,
  type ClaimWaiter,
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
  laterClaims,
  lockKey,
  MAX_FINGERPRINT_MISSES,
  once,
  outcomeLimits,
  ownerValue,
  ownerValues,
  purgeSettings,
  quoteIdentifier,
  type RecordWaiter,
  REPLAYED,
  type SqlReplayStore,
  type SqlStoreCommonOptions,
  startPurgeTimer,
  toStoreError,
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

/**
 * A value written into SQL text: a string as an escape-string literal (quotes doubled, backslashes escaped, whatever
 * `standard_conforming_strings` says; the store's strings hold no NUL), an array of strings as `ARRAY[…]::text[]`, a
 * safe integer as itself.
 */
export function sqlLiteral(value: unknown): string {
  if (typeof value === 'string') return `E'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
  if (typeof value === 'number' && Number.isSafeInteger(value)) return String(value);
  if (Array.isArray(value)) return `ARRAY[${value.map(sqlLiteral).join(', ')}]::text[]`;
  throw new TypeError('sqlLiteral: not a string, safe integer or array of strings');
}

/** An error reply of the server (pg's DatabaseError carries the SQLSTATE and a severity): the statement did not commit. */
export function isServerError(error: unknown): boolean {
  const record = error as { code?: unknown; severity?: unknown } | null;
  return typeof record?.code === 'string' && /^[0-9A-Z]{5}$/.test(record.code) && typeof record.severity === 'string';
}

/** pg's `lock_not_available` (lock_timeout) and `query_canceled` (statement_timeout) SQLSTATEs. */
const LOCK_NOT_AVAILABLE = '55P03';
const QUERY_CANCELED = '57014';

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
/** Class id ("mrtb") of the namespace's outcome-budget lock (see recordHead). */
const BUDGET_LOCK_CLASS = 0x6d727462;

/**
 * Replay store on PostgreSQL (≥ 9.5) through `pg` (loaded only when this factory is used).
 * Each consume is one `INSERT … ON CONFLICT (ns, id) DO UPDATE … WHERE expires_at < now` statement
 * that also writes a random owner value only that call knows; a consume whose reply is lost asks once
 * (`SELECT owner`) whether the row is its own before it fails. It records outcomes too (`claim`, `record`), both
 * batched: the same upsert keeping a fingerprint and returning the row, and an `UPDATE` of the outcomes under the
 * namespace's outcome-budget lock.
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
  // The outcome budget's table (≤ 48 + 7 characters).
  const quotedBudget = `"${tableName}_budget"`;
  const budgetTable = quotedSchema === undefined ? quotedBudget : `${quotedSchema}.${quotedBudget}`;
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const statementTimeoutMs = intOption(`${label}: statementTimeoutMs`, options.statementTimeoutMs, 5000, 1, 600_000);
  const connectionTimeoutMs = intOption(`${label}: connectTimeoutMs`, options.connectTimeoutMs, 5000, 1, 600_000);
  const lockTimeoutMs = intOption(`${label}: lockTimeoutMs`, options.lockTimeoutMs, Math.min(2000, statementTimeoutMs), 1, 600_000);
  const maxConnections = intOption(`${label}: maxConnections`, options.maxConnections, 10, 1, 10_000);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {});
  const prepared = boolOption(`${label}: preparedStatements`, options.preparedStatements, true);
  const { maxOutcomeBytes, outcomeBudgetBytes } = outcomeLimits(label, options);
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
  // claim, for a batch of distinct ids (sorted, like consumes): the consume upsert that also keeps the fingerprint,
  // and that always updates the row it meets, so that RETURNING hands back every id's row as this statement left it
  // (the newest version, locked by the statement: no snapshot can hide a row a concurrent transaction committed). A
  // row whose expiry has passed is taken over (fingerprint and owner replaced, outcome and misses cleared); a live
  // one keeps its values, except that a claim with another fingerprint of a row held by a claim counts a miss, and
  // the MAX_FINGERPRINT_MISSES-th marks the outcome '' ("done, not kept"). The row holds this call's owner exactly
  // when this claim took the id (inserted it or took it over).
  const miss = 't.fp IS NOT NULL AND t.fp <> EXCLUDED.fp';
  const claimBatchSql =
    `INSERT INTO ${table} AS t (ns, id, expires_at, owner, fp) SELECT $1::text, u.id, u.expires_at, u.owner, u.fp ` +
    'FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[]) AS u(id, expires_at, owner, fp) ' +
    'ON CONFLICT (ns, id) DO UPDATE SET ' +
    'expires_at = CASE WHEN t.expires_at < $6 THEN EXCLUDED.expires_at ELSE t.expires_at END, ' +
    'owner = CASE WHEN t.expires_at < $6 THEN EXCLUDED.owner ELSE t.owner END, ' +
    'fp = CASE WHEN t.expires_at < $6 THEN EXCLUDED.fp ELSE t.fp END, ' +
    `outcome = CASE WHEN t.expires_at < $6 THEN NULL WHEN ${miss} AND coalesce(t.misses, 0) + 1 >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END, ` +
    `misses = CASE WHEN t.expires_at < $6 THEN NULL WHEN ${miss} THEN coalesce(t.misses, 0) + 1 ELSE t.misses END ` +
    'RETURNING t.id, t.owner, t.fp, t.outcome, t.misses, t.expires_at';
  // The misses of later claims of an id in the same batch (see laterClaims), on the row incarnation they met.
  const missesSql =
    `UPDATE ${table} AS t SET misses = coalesce(t.misses, 0) + u.k, ` +
    `outcome = CASE WHEN coalesce(t.misses, 0) + u.k >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE t.outcome END ` +
    'FROM unnest($2::text[], $3::text[], $4::int[]) AS u(id, owner, k) WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = u.id AND t.owner = u.owner';
  // record, for a batch of distinct (id, fingerprint) pairs, run under the namespace's budget lock (see recordBatch):
  // only the claim's own fingerprint, only once, only while the id is live. An outcome is kept when it is not '' and
  // the outcomes before it in the batch and it fit in what the budget has left (outcomeBudgetBytes minus the bytes of
  // the buckets not yet past); else '' is stored. The kept bytes are added to the bucket of their id's expiry. The
  // `id = ANY(ids)` conditions keep the table's side an index scan whatever join the planner picks (with a batch
  // of literal values it knows the batch's size, and would otherwise hash-join a sequential scan of the table).
  const recordBatchSql =
    'WITH u AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, fp, outcome, ord)), ' +
    'c AS (SELECT u.id, u.outcome, r.owner, sum(octet_length(u.outcome)) OVER (ORDER BY u.ord) AS run ' +
    `FROM u JOIN ${table} AS r ON r.ns = $1 AND r.id = ANY($2::text[]) AND r.id = u.id AND r.fp = u.fp AND r.outcome IS NULL AND r.expires_at >= $5), ` +
    `room AS (SELECT $6::bigint - coalesce(sum(b.bytes), 0) AS left_bytes FROM ${budgetTable} AS b WHERE b.ns = $1 AND b.bucket >= $7), ` +
    `upd AS (UPDATE ${table} AS t SET outcome = CASE WHEN c.outcome <> '' AND c.run <= (SELECT left_bytes FROM room) THEN c.outcome ELSE '' END ` +
    'FROM c WHERE t.ns = $1 AND t.id = ANY($2::text[]) AND t.id = c.id AND t.owner IS NOT DISTINCT FROM c.owner AND t.outcome IS NULL AND t.expires_at >= $5 ' +
    'RETURNING t.id, t.outcome, t.expires_at), ' +
    `bump AS (INSERT INTO ${budgetTable} AS b (ns, bucket, bytes) SELECT $1::text, upd.expires_at / ${BUDGET_BUCKET_MS}, sum(octet_length(upd.outcome)) ` +
    `FROM upd WHERE upd.outcome <> '' GROUP BY upd.expires_at / ${BUDGET_BUCKET_MS} ` +
    'ON CONFLICT (ns, bucket) DO UPDATE SET bytes = b.bytes + EXCLUDED.bytes) ' +
    "SELECT upd.id, upd.outcome <> '' AS kept FROM upd";
  // What a claim or record whose reply was lost asks, and what a claim of an already expired id reads.
  const rowSql = `SELECT owner, fp, outcome, expires_at FROM ${table} WHERE ns = $1 AND id = $2`;
  const rowsSql = `SELECT id, owner, fp, outcome, expires_at FROM ${table} WHERE ns = $1 AND id = ANY($2::text[])`;
  // After a batch statement gave up on a lock: which of its ids' rows another transaction holds locked (SKIP LOCKED
  // takes the free ones and waits for none; autocommit releases them at once).
  const lockedSql =
    `WITH free AS (SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) FOR UPDATE SKIP LOCKED) ` +
    `SELECT id FROM ${table} WHERE ns = $1 AND id = ANY($2::text[]) AND id NOT IN (SELECT id FROM free)`;
  // SKIP LOCKED: never wait for (or make a consume wait on) a row another transaction holds;
  // FOR UPDATE re-checks the expiry on a row a concurrent consume has just renewed.
  const purgeSql =
    `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ${table} WHERE expires_at < $1 ` +
    `ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)) AND expires_at < $1`;
  // Budget buckets the clock has left (every namespace): they no longer count; a small table.
  const purgeBudgetSql = `DELETE FROM ${budgetTable} WHERE bucket < $1`;
  // A statement name is derived from its text, so stores on different tables can share a pool.
  const named = (text: string) =>
    prepared ? { name: `mrtr_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`, text } : { text };
  const consumeQuery = named(consumeSql);
  const purgeQuery = named(purgeSql);
  const purgeBudgetQuery = named(purgeBudgetSql);
  const ownerQuery = named(ownerSql);
  const batchQuery = named(batchSql);
  const ownersQuery = named(ownersSql);
  const claimBatchQuery = named(claimBatchSql);
  const missesQuery = named(missesSql);
  const rowQuery = named(rowSql);
  const rowsQuery = named(rowsSql);
  const lockedQuery = named(lockedSql);
  const groupCommit = groupCommitSettings(label, options);
  // What ensureSchema() looks up before it changes anything: reading the catalog takes no lock on the
  // table, whereas ALTER TABLE … IF NOT EXISTS / CREATE INDEX IF NOT EXISTS lock it even when nothing is
  // missing, and a lock request queued behind any reader (pg_dump, an idle transaction) holds up every
  // consume of every instance behind it.
  // Columns added after the first version, in the order they came: `owner` (lost replies), `fp` and `outcome`
  // (outcome recording), `misses` (claims with another fingerprint). All nullable without a default: adding them is
  // a catalog-only change.
  const addedColumns = ['owner', 'fp', 'outcome', 'misses'] as const;
  const columnType: Record<(typeof addedColumns)[number], string> = { owner: 'text', fp: 'text', outcome: 'text', misses: 'integer' };
  const catalogSql =
    'SELECT c.oid IS NOT NULL AS has_table, ' +
    addedColumns
      .map(
        (column) =>
          `EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = '${column}' AND a.attnum > 0 AND NOT a.attisdropped) AS has_${column}, `,
      )
      .join('') +
    'EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = c.oid AND i.relname = $2) AS has_index, ' +
    'to_regclass($3::text) IS NOT NULL AS has_budget ' +
    'FROM (SELECT to_regclass($1::text)::oid AS oid) AS c';
  const catalogValues = [table, `${tableName}_expires_at_idx`, budgetTable];
  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns text NOT NULL, id text NOT NULL, expires_at bigint NOT NULL, owner text, fp text, outcome text, ` +
    'misses integer, PRIMARY KEY (ns, id))';
  // The outcome budget: bytes of kept outcomes per namespace and expiry bucket.
  const createBudgetSql = `CREATE TABLE IF NOT EXISTS ${budgetTable} (ns text NOT NULL, bucket bigint NOT NULL, bytes bigint NOT NULL, PRIMARY KEY (ns, bucket))`;
  // A table created by an earlier version lacks some of them (PostgreSQL ≥ 9.6): one ALTER TABLE adds
  // exactly the missing ones.
  const addColumnsSql = (missing: readonly (typeof addedColumns)[number][]) =>
    `ALTER TABLE ${table} ${missing.map((column) => `ADD COLUMN IF NOT EXISTS ${column} ${columnType[column]}`).join(', ')}`;
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
  const missingColumns = (catalog: Catalog) => addedColumns.filter((column) => catalog[`has_${column}`] !== true);
  const complete = (catalog: Catalog): boolean =>
    catalog.has_table === true && missingColumns(catalog).length === 0 && catalog.has_index === true && catalog.has_budget === true;

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
      if (catalog.has_budget !== true) await query({ text: createBudgetSql, query_timeout: replyWaitMs });
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
  const send = async (config: PgQueryConfigLike, budgetMs: number, whole = false): Promise<PgQueryResultLike> => {
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
      if (whole) {
        // A whole transaction in one simple query (the record batch: its own bounds, its lock, its statement).
        result = await withDeadline(client.query({ ...config, query_timeout: replyWaitMs }), replyWaitMs, replyDeadlineError);
      } else if (owned !== undefined) {
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

  /** What is left of the deadline of the batch's oldest waiter (a waiter's whole wait stays within it). */
  const budgetOf = (batch: readonly { queuedAt: number }[]): number => deadlineMs - (performance.now() - (batch[0] as Waiter).queuedAt);

  /** Splits a batch by id: the first waiter of each id (sorted by id: the order rows are locked in) and the later ones. */
  const splitById = <W extends { id: string }>(batch: readonly W[]): { unique: W[]; later: Map<string, W[]> } => {
    const later = new Map<string, W[]>();
    const first = new Map<string, W>();
    for (const waiter of batch) {
      if (!first.has(waiter.id)) first.set(waiter.id, waiter);
      else {
        const list = later.get(waiter.id);
        if (list === undefined) later.set(waiter.id, [waiter]);
        else list.push(waiter);
      }
    }
    return { unique: [...first.values()].sort(byId), later };
  };

  /**
   * A batch statement the server cancelled while it waited for a lock (`lock_timeout`, or `statement_timeout`):
   * another transaction holds some of its ids' rows. Which ones is asked once (SKIP LOCKED: waits for nothing); when
   * that names some but not all, their waiters fail closed (nothing of the statement committed) and the batch runs
   * once more without them, so that unrelated calls are not failed by a slow id. Returns the waiters to run again,
   * or `undefined` when the whole batch fails as it is.
   */
  const withoutLocked = async <W extends { id: string; reject(error: unknown): void }>(
    unique: readonly W[],
    later: Map<string, W[]>,
    error: unknown,
  ): Promise<W[] | undefined> => {
    const code = (error as { code?: unknown } | null)?.code;
    if (unique.length < 2 || closed || (code !== LOCK_NOT_AVAILABLE && code !== QUERY_CANCELED)) return undefined;
    let locked: Set<unknown>;
    try {
      const ids = unique.map((waiter) => waiter.id);
      const result = await bounded(queryOnConnection({ ...lockedQuery, values: [namespace, ids], query_timeout: statementTimeoutMs }));
      locked = new Set(result.rows.map((row) => (row as { id: unknown }).id));
    } catch {
      return undefined;
    }
    const rest = unique.filter((waiter) => !locked.has(waiter.id));
    if (rest.length === 0 || rest.length === unique.length) return undefined;
    const failure = toStoreError(error);
    for (const waiter of unique) {
      if (!locked.has(waiter.id)) continue;
      waiter.reject(failure);
      for (const other of later.get(waiter.id) ?? []) other.reject(failure);
      later.delete(waiter.id);
    }
    return rest;
  };

  /**
   * Runs one batch of queued consumes and settles each waiter. The first waiter of an id goes into the
   * statement; a later waiter of the same id is answered `false` once the statement has run (only one
   * of them can be first), and shares its failure otherwise. A failed statement fails every waiter
   * closed (but a lock wait: see withoutLocked); a lost reply is resolved per id by one `SELECT` of the owners,
   * as for a single consume.
   */
  const runBatch = async (batch: Waiter[]): Promise<void> => {
    if (closed) {
      for (const waiter of batch) waiter.reject(new StoreUnavailableError({ cause: new Error('replay store is closed') }));
      return;
    }
    if (budgetOf(batch) <= 0) {
      for (const waiter of batch) waiter.reject(deadlineError());
      return;
    }
    if (batch.length === 1) {
      const waiter = batch[0] as Waiter;
      try {
        waiter.resolve(await consumeOne(waiter.id, waiter.expires, ownerValue(), budgetOf(batch)));
      } catch (error) {
        waiter.reject(toStoreError(error));
      }
      return;
    }
    const { unique: all, later } = splitById(batch);
    let unique = all;
    for (let pass = 0; pass < 2; pass++) {
      const ids = unique.map((waiter) => waiter.id);
      const owners = ownerValues(unique.length);
      let won: Set<unknown>;
      try {
        const budget = budgetOf(batch);
        if (budget <= 0) throw new Unsent(deadlineError());
        const result = await send(
          { ...batchQuery, values: [namespace, ids, unique.map((waiter) => waiter.expires), owners, Math.floor(now())] },
          budget,
        );
        won = new Set(result.rows.map((row) => (row as { id: unknown }).id));
      } catch (error) {
        if (error instanceof Unsent || isServerError(error) || closed) {
          const rest = pass === 0 && isServerError(error) ? await withoutLocked(unique, later, error) : undefined;
          if (rest !== undefined) {
            unique = rest;
            continue;
          }
          const failure = toStoreError(error instanceof Unsent ? error.error : error);
          for (const waiter of unique) waiter.reject(failure);
          for (const list of later.values()) for (const waiter of list) waiter.reject(failure);
          return;
        }
        await resolveLostBatch(unique, owners, [...later.values()].flat(), error);
        return;
      }
      for (const waiter of unique) waiter.resolve(won.has(waiter.id));
      for (const list of later.values()) for (const waiter of list) waiter.resolve(false);
      return;
    }
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

  /** Rows of some ids, read on a connection of its own under the same bounds (after a lost reply). */
  const readRows = async (ids: string[]): Promise<Map<unknown, HeldRow>> => {
    const result = await bounded(queryOnConnection({ ...rowsQuery, values: [namespace, ids], query_timeout: statementTimeoutMs }));
    return new Map(result.rows.map((row) => [(row as HeldRow).id, row as HeldRow]));
  };

  /**
   * Runs one batch of claims (distinct ids in one statement, see claimBatchSql) and settles each. The later claims of
   * an id in the batch are answered from the row the first one left (laterClaims); the misses they count are written
   * by one more statement before they are answered (it failing fails them closed). A statement that failed fails
   * every claim closed (a lock wait: see withoutLocked); a lost reply is resolved per id by reading the rows: this
   * claim's owner → `first`, a live row → how it is held; anything else, and the later claims, fail closed.
   */
  const runClaimBatch = async (batch: ClaimWaiter[]): Promise<void> => {
    if (closed) {
      for (const waiter of batch) waiter.reject(new StoreUnavailableError({ cause: new Error('replay store is closed') }));
      return;
    }
    const { unique: all, later } = splitById(batch);
    let unique = all;
    for (let pass = 0; pass < 2; pass++) {
      const owners = ownerValues(unique.length);
      const t = Math.floor(now());
      let rows: Map<unknown, HeldRow>;
      try {
        const budget = budgetOf(batch);
        if (budget <= 0) throw new Unsent(deadlineError());
        const result = await send(
          {
            ...claimBatchQuery,
            values: [
              namespace,
              unique.map((waiter) => waiter.id),
              unique.map((waiter) => waiter.expires),
              owners,
              unique.map((waiter) => waiter.fp),
              t,
            ],
          },
          budget,
        );
        rows = new Map(result.rows.map((row) => [(row as HeldRow).id, row as HeldRow]));
      } catch (error) {
        if (error instanceof Unsent || isServerError(error) || closed) {
          const rest = pass === 0 && isServerError(error) ? await withoutLocked(unique, later, error) : undefined;
          if (rest !== undefined) {
            unique = rest;
            continue;
          }
          const failure = toStoreError(error instanceof Unsent ? error.error : error);
          for (const waiter of batch) waiter.reject(failure);
          return;
        }
        await resolveLostClaims(unique, owners, later, error);
        return;
      }
      const followUps: { waiters: ClaimWaiter[]; answers: ClaimResult[]; owner: unknown; misses: number; id: string }[] = [];
      unique.forEach((waiter, i) => {
        const row = rows.get(waiter.id);
        // Every id comes back (the upsert always writes); a missing one is a broken reply: fail closed.
        if (row === undefined) {
          const failure = toStoreError(new Error('claim: the statement returned no row for an id'));
          waiter.reject(failure);
          for (const other of later.get(waiter.id) ?? []) other.reject(failure);
          return;
        }
        waiter.resolve(row.owner === owners[i] ? FIRST : heldStatus(row, waiter.fp));
        const rest = later.get(waiter.id);
        if (rest === undefined) return;
        const { answers, misses } = laterClaims(row, rest);
        if (misses === 0) {
          rest.forEach((other, j) => {
            other.resolve(answers[j] as ClaimResult);
          });
        } else followUps.push({ waiters: rest, answers, owner: row.owner, misses, id: waiter.id });
      });
      if (followUps.length > 0) await writeMisses(followUps, budgetOf(batch));
      return;
    }
  };

  /** Writes the misses of later claims in a batch (one statement), then answers them; a failure fails them closed. */
  const writeMisses = async (
    followUps: { waiters: ClaimWaiter[]; answers: ClaimResult[]; owner: unknown; misses: number; id: string }[],
    budget: number,
  ): Promise<void> => {
    try {
      if (budget <= 0) throw deadlineError();
      await send(
        {
          ...missesQuery,
          values: [namespace, followUps.map((f) => f.id), followUps.map((f) => f.owner), followUps.map((f) => f.misses)],
        },
        budget,
      );
    } catch (error) {
      const failure = toStoreError(error instanceof Unsent ? error.error : error);
      for (const f of followUps) for (const waiter of f.waiters) waiter.reject(failure);
      return;
    }
    for (const f of followUps) {
      f.waiters.forEach((waiter, j) => {
        waiter.resolve(f.answers[j] as ClaimResult);
      });
    }
  };

  /** A claim batch whose reply was lost: each first claim answered by its row; later claims fail closed. */
  const resolveLostClaims = async (
    unique: ClaimWaiter[],
    owners: string[],
    later: Map<string, ClaimWaiter[]>,
    original: unknown,
  ): Promise<void> => {
    const failure = toStoreError(original);
    for (const list of later.values()) for (const waiter of list) waiter.reject(failure);
    let rows: Map<unknown, HeldRow>;
    try {
      rows = await readRows(unique.map((waiter) => waiter.id));
    } catch {
      for (const waiter of unique) waiter.reject(failure);
      return;
    }
    const t = Math.floor(now());
    unique.forEach((waiter, i) => {
      const row = rows.get(waiter.id);
      if (row !== undefined && row.owner === owners[i]) waiter.resolve(FIRST);
      else if (isLive(row, t)) waiter.resolve(heldStatus(row, waiter.fp));
      else waiter.reject(failure);
    });
  };

  /**
   * A record batch as one request: `BEGIN`, the transaction's own bounds, the namespace's outcome-budget lock (record
   * batches of one namespace run one at a time, on every instance, so the budget the statement reads includes every
   * record committed before it), the statement with its values written in as literals (a simple query takes no
   * parameters), `COMMIT`. One round trip; a reply lost after it is resolved by reading the rows.
   */
  const recordHead =
    `BEGIN; ${localTimeoutsSql}; SET LOCAL idle_in_transaction_session_timeout = ${replyWaitMs}; ` +
    `SELECT pg_advisory_xact_lock(${BUDGET_LOCK_CLASS}, ${lockKey(`${table}\u0000${namespace}`)}); `;
  const recordText = (values: readonly unknown[]): string =>
    `${recordHead}${recordBatchSql.replace(/\$(\d)/g, (_, n: string) => sqlLiteral(values[Number(n) - 1]))}; COMMIT`;

  /**
   * Runs one batch of records in one transaction under the namespace's budget lock (so the budget read by the
   * statement includes every record committed before it, on any instance), settles each. A repeated (id,
   * fingerprint) in the batch is answered `false` (an outcome is recorded once). A failed statement fails every
   * record closed (a lock wait: see withoutLocked); a lost reply is resolved per id by reading the rows: this outcome
   * on the row → as kept; `''`, another fingerprint or another outcome → `false`; else unknown → fails closed.
   */
  const runRecordBatch = async (batch: RecordWaiter[]): Promise<void> => {
    if (closed) {
      for (const waiter of batch) waiter.reject(new StoreUnavailableError({ cause: new Error('replay store is closed') }));
      return;
    }
    const seen = new Set<string>();
    const first: RecordWaiter[] = [];
    const repeated: RecordWaiter[] = [];
    for (const waiter of batch) {
      const key = `${waiter.id}\u0000${waiter.fp}`;
      if (seen.has(key)) repeated.push(waiter);
      else {
        seen.add(key);
        first.push(waiter);
      }
    }
    first.sort(byId);
    const t = Math.floor(now());
    let kept: Map<unknown, boolean>;
    const config = {
      text: recordText([
        namespace,
        first.map((waiter) => waiter.id),
        first.map((waiter) => waiter.fp),
        first.map((waiter) => waiter.outcome),
        t,
        outcomeBudgetBytes,
        budgetBucket(t),
      ]),
    };
    try {
      let result: PgQueryResultLike | undefined;
      // A failure before the request was sent (no connection) wrote nothing: the batch is sent once more, with a
      // deadline of its own (a record waits at most twice the store's deadline).
      for (let attempt = 0; result === undefined; attempt++) {
        const budget = attempt === 0 ? budgetOf(batch) : deadlineMs;
        if (budget <= 0) throw new Unsent(deadlineError());
        try {
          result = await send(config, budget, true);
        } catch (error) {
          if (!(error instanceof Unsent) || attempt > 0 || closed) throw error;
        }
      }
      // pg answers a simple query of several statements with one result each: the statement's is the one before COMMIT.
      const results = result as unknown as PgQueryResultLike[];
      const rows = Array.isArray(results) ? (results[results.length - 2]?.rows ?? []) : [];
      kept = new Map(rows.map((row) => [(row as { id: unknown }).id, (row as { kept: unknown }).kept === true]));
    } catch (error) {
      const failure = toStoreError(error instanceof Unsent ? error.error : error);
      for (const waiter of repeated) waiter.reject(failure);
      if (error instanceof Unsent || isServerError(error) || closed) {
        for (const waiter of first) waiter.reject(failure);
        return;
      }
      let rows: Map<unknown, HeldRow>;
      try {
        rows = await readRows(first.map((waiter) => waiter.id));
      } catch {
        for (const waiter of first) waiter.reject(failure);
        return;
      }
      for (const waiter of first) {
        const row = rows.get(waiter.id);
        if (row !== undefined && row.fp === waiter.fp && row.outcome === waiter.outcome) waiter.resolve(waiter.outcome !== '');
        else if (row !== undefined && (row.fp !== waiter.fp || (row.outcome !== null && row.outcome !== undefined))) waiter.resolve(false);
        else waiter.reject(failure);
      }
      return;
    }
    // An id missing from the reply was not updated: another fingerprint, recorded already, or expired.
    for (const waiter of first) waiter.resolve(kept.get(waiter.id) === true);
    for (const waiter of repeated) waiter.resolve(false);
  };

  const claimQueue =
    groupCommit === undefined
      ? undefined
      : createBatcher<ClaimWaiter, ClaimResult>({ ...batcherOptions(groupCommit, maxConnections), run: runClaimBatch });
  // Two record batches in flight per store at most: record batches of a namespace take turns under its budget lock,
  // the second waiting for it on the server (no round trip lost between them); more would only hold connections
  // (that claims and consumes need) while they wait for it.
  const recordQueue =
    groupCommit === undefined
      ? undefined
      : createBatcher<RecordWaiter, boolean>({ ...batcherOptions(groupCommit, 2), run: runRecordBatch });

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

  /** Claims ride the group commit as consumes do (a queue of their own: one statement per batch of claims). */
  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
    assertOpen();
    if (expires <= now()) return claimExpired(id, fingerprint);
    return new Promise<ClaimResult>((resolve, reject) => {
      const waiter: ClaimWaiter = { id, expires, fp: fingerprint, queuedAt: performance.now(), resolve, reject };
      if (claimQueue === undefined) runClaimBatch([waiter]).catch((error: unknown) => reject(toStoreError(error)));
      else claimQueue.push(waiter);
    });
  };

  /** Records ride the group commit too (a queue of their own: one transaction per batch of records). */
  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
    assertOpen();
    return new Promise<boolean>((resolve, reject) => {
      const waiter: RecordWaiter = { id, fp: fingerprint, outcome: stored, queuedAt: performance.now(), resolve, reject };
      if (recordQueue === undefined) runRecordBatch([waiter]).catch((error: unknown) => reject(toStoreError(error)));
      else recordQueue.push(waiter);
    });
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
    // Budget buckets the clock has left (a bucket counts while the clock is in it or before it).
    await bounded(
      pool.query({
        ...purgeBudgetQuery,
        values: [budgetBucket(Math.floor(now()) - purge.graceMs)],
        query_timeout: statementTimeoutMs,
      }),
    );
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
    outcomeBudgetBytes,
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
        const closedError = () => new StoreUnavailableError({ cause: new Error('replay store is closed') });
        queue?.failAll(closedError);
        claimQueue?.failAll(closedError);
        recordQueue?.failAll(closedError);
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
