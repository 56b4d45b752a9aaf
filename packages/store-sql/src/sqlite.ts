import { type ClaimResult, MrtrError } from '@mrtr/core';
import {
  type BackgroundError,
  boolOption,
  fnOption,
  intOption,
  createBatcher,
  oneOfOption,
  optionsObject,
  StoreUnavailableError,
} from '@mrtr/core/authoring';
import {
  batcherOptions,
  budgetBucket,
  type ClaimWaiter,
  checkClaimArgs,
  checkConsumeArgs,
  checkNamespace,
  checkRecordArgs,
  DEFAULT_TABLE,
  FIRST,
  groupCommitSettings,
  type HeldRow,
  heldStatus,
  isLive,
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
  type DatabaseConstructor,
  loadDriver,
  type SqliteConnectionOptions,
  type SqliteDatabaseLike,
  type SqliteStatementLike,
} from './drivers.js';

export interface SqliteStoreOptions extends SqlStoreCommonOptions, SqliteConnectionOptions {}

type ConsumeOp = Waiter & { readonly kind: 'consume' };
type ClaimOp = ClaimWaiter & { readonly kind: 'claim' };
type RecordOp = RecordWaiter & { readonly kind: 'record' };
/** A call waiting for its batch: consumes, claims and records share one queue and one transaction per batch. */
type Op = ConsumeOp | ClaimOp | RecordOp;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

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
  options = optionsObject(label, options);
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

const synchronousOption = (label: string, value: unknown): 'full' | 'normal' =>
  oneOfOption(`${label}: synchronous`, value, 'full', ['full', 'normal'] as const);

/**
 * Replay store on SQLite (≥ 3.24, bundled with better-sqlite3) through `better-sqlite3` (loaded only
 * when this factory is used). Each consume is one prepared `INSERT … ON CONFLICT DO UPDATE … WHERE
 * expired` statement (with a random owner value, like the PostgreSQL store); its change count is the answer.
 * It records outcomes too (`claim`, `record`), like the PostgreSQL store.
 */
export function createSqliteStore(options: SqliteStoreOptions): SqlReplayStore {
  const label = 'createSqliteStore';
  options = optionsObject(label, options);
  const { database: injected, filename } = options;
  if ((injected === undefined) === (filename === undefined)) {
    throw new TypeError(`${label}: pass exactly one of database or filename`);
  }
  if (injected !== undefined && (injected === null || typeof injected.prepare !== 'function' || typeof injected.exec !== 'function')) {
    throw new TypeError(`${label}: database must be a better-sqlite3 Database`);
  }
  if (filename !== undefined && (typeof filename !== 'string' || filename.length === 0)) {
    throw new TypeError(`${label}: filename must be a non-empty string`);
  }
  const tableName = options.table ?? DEFAULT_TABLE;
  const table = quoteIdentifier(`${label}: table`, tableName);
  // Derived from the validated table name.
  const indexName = `"${tableName}_expires_at_idx"`;
  const namespace = checkNamespace(label, options.namespace);
  const autoSchema = boolOption(`${label}: ensureSchema`, options.ensureSchema, true);
  const busyTimeoutMs = intOption(`${label}: busyTimeoutMs`, options.busyTimeoutMs, 5000, 0, 600_000);
  const synchronous = synchronousOption(label, options.synchronous);
  const purge = purgeSettings(label, options);
  const now = fnOption(`${label}: now`, options.now, Date.now);
  const onError = fnOption<(error: BackgroundError) => void>(`${label}: onError`, options.onError, () => {});
  const groupCommit = groupCommitSettings(label, options);
  const { maxOutcomeBytes, outcomeBudgetBytes } = outcomeLimits(label, options);

  // SQLite runs one write at a time (per database file, across processes), so the upsert is atomic:
  // it inserts a new id, takes over an expired row, or changes nothing (a live duplicate). The
  // change count says which; it is cheaper than RETURNING and needs only SQLite ≥ 3.24.
  // `owner` is a random value only the writing consume knows (see resolveLost). Taking over an expired row
  // clears what a claim kept with it (fingerprint, outcome).
  const consumeSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner) VALUES (?, ?, ?, ?) ` +
    `ON CONFLICT (ns, id) DO UPDATE SET expires_at = excluded.expires_at, owner = excluded.owner, fp = NULL, outcome = NULL ` +
    `WHERE ${table}.expires_at < ?`;
  const ownerSql = `SELECT owner, expires_at FROM ${table} WHERE ns = ? AND id = ?`;
  // claim: the consume upsert that also keeps the fingerprint and always updates the row it meets, so RETURNING
  // hands back the row as it left it (inside the batch's write transaction). An expired row is taken over
  // (fingerprint and owner replaced, outcome and misses cleared); a live one keeps its values, except that a claim
  // with another fingerprint of a row held by a claim counts a miss, the MAX_FINGERPRINT_MISSES-th marking the
  // outcome '' ("done, not kept"). The row holds this call's owner exactly when this claim took the id.
  const old = (column: string) => `${table}.${column}`;
  const expired = `${old('expires_at')} < @now`;
  const miss = `${old('fp')} IS NOT NULL AND ${old('fp')} <> excluded.fp`;
  const claimSql =
    `INSERT INTO ${table} (ns, id, expires_at, owner, fp) VALUES (@ns, @id, @expires, @owner, @fp) ON CONFLICT (ns, id) DO UPDATE SET ` +
    `expires_at = CASE WHEN ${expired} THEN excluded.expires_at ELSE ${old('expires_at')} END, ` +
    `owner = CASE WHEN ${expired} THEN excluded.owner ELSE ${old('owner')} END, ` +
    `fp = CASE WHEN ${expired} THEN excluded.fp ELSE ${old('fp')} END, ` +
    `outcome = CASE WHEN ${expired} THEN NULL WHEN ${miss} AND coalesce(${old('misses')}, 0) + 1 >= ${MAX_FINGERPRINT_MISSES} THEN '' ELSE ${old('outcome')} END, ` +
    `misses = CASE WHEN ${expired} THEN NULL WHEN ${miss} THEN coalesce(${old('misses')}, 0) + 1 ELSE ${old('misses')} END ` +
    'RETURNING owner, fp, outcome, misses, expires_at';
  const rowSql = `SELECT owner, fp, outcome, expires_at FROM ${table} WHERE ns = ? AND id = ?`;
  const recordSql = `UPDATE ${table} SET outcome = ? WHERE ns = ? AND id = ? AND fp = ? AND outcome IS NULL AND expires_at >= ?`;
  // The outcome budget: bytes of kept outcomes per namespace and expiry bucket (see recordIn).
  const budgetTable = `"${tableName}_budget"`;
  const heldSql = `SELECT coalesce(sum(bytes), 0) AS held FROM ${budgetTable} WHERE ns = ? AND bucket >= ?`;
  const bumpSql =
    `INSERT INTO ${budgetTable} (ns, bucket, bytes) VALUES (?, ?, ?) ` +
    `ON CONFLICT (ns, bucket) DO UPDATE SET bytes = ${budgetTable}.bytes + excluded.bytes`;
  const purgeSql = `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`;
  const purgeBudgetSql = `DELETE FROM ${budgetTable} WHERE bucket < ?`;
  const createTableSql =
    `CREATE TABLE IF NOT EXISTS ${table} (ns TEXT NOT NULL, id TEXT NOT NULL, expires_at INTEGER NOT NULL, owner TEXT, fp TEXT, outcome TEXT, ` +
    'misses INTEGER, PRIMARY KEY (ns, id))';
  const createBudgetSql = `CREATE TABLE IF NOT EXISTS ${budgetTable} (ns TEXT NOT NULL, bucket INTEGER NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (ns, bucket))`;
  const createIndexSql = `CREATE INDEX IF NOT EXISTS ${indexName} ON ${table} (expires_at)`;
  // Columns added after the first version (`owner`; `fp` and `outcome` for outcome recording; `misses` for claims
  // with another fingerprint): a table created by an earlier version lacks some. SQLite has no ADD COLUMN IF NOT
  // EXISTS, so the catalog says which.
  const addedColumns = ['owner', 'fp', 'outcome', 'misses'] as const;
  const columnType: Record<(typeof addedColumns)[number], string> = { owner: 'TEXT', fp: 'TEXT', outcome: 'TEXT', misses: 'INTEGER' };
  const tableInfoSql = `PRAGMA table_info(${table})`;
  const indexSql = "SELECT 1 AS found FROM sqlite_master WHERE type = 'index' AND name = ? COLLATE NOCASE AND tbl_name = ? COLLATE NOCASE";
  const addColumnSql = (column: (typeof addedColumns)[number]) => `ALTER TABLE ${table} ADD COLUMN ${column} ${columnType[column]}`;
  const budgetSql = "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE";

  let closed = false;
  let owned: SqliteDatabaseLike | undefined;

  const dbReady = once<SqliteDatabaseLike>(async () => {
    if (injected !== undefined) return injected;
    const Database = (await loadDriver('better-sqlite3')) as DatabaseConstructor;
    if (closed) throw new StoreUnavailableError();
    const db = new Database(filename as string, { timeout: busyTimeoutMs });
    try {
      await configureSqliteDatabase(db, { busyTimeoutMs, synchronous });
    } catch (error) {
      db.close();
      throw error;
    }
    owned = db;
    return db;
  });

  /** What exists of the schema, read from the catalog (no write lock). */
  const readCatalog = (db: SqliteDatabaseLike) => {
    const columns = new Set((db.prepare(tableInfoSql) as unknown as { all(): { name: string }[] }).all().map((column) => column.name));
    return {
      table: columns.size > 0,
      missing: addedColumns.filter((column) => !columns.has(column)),
      index: db.prepare(indexSql).get(`${tableName}_expires_at_idx`, tableName) !== undefined,
      budget: db.prepare(budgetSql).get(`${tableName}_budget`) !== undefined,
    };
  };

  const runEnsureSchema = async (): Promise<void> => {
    const db = await dbReady.get();
    // Nothing missing (every start but the first): no DDL and no write lock.
    const found = readCatalog(db);
    if (found.table && found.missing.length === 0 && found.index && found.budget) return;
    // BEGIN IMMEDIATE takes the write lock up front (waiting up to busy_timeout), so two processes
    // creating the schema at once run one after the other.
    db.exec('BEGIN IMMEDIATE');
    try {
      // Another process may have finished while this one waited for the lock.
      const catalog = readCatalog(db);
      if (!catalog.table) db.exec(createTableSql);
      else for (const column of catalog.missing) db.exec(addColumnSql(column));
      if (!catalog.index) db.exec(createIndexSql);
      if (!catalog.budget) db.exec(createBudgetSql);
      db.exec('COMMIT');
    } catch (error) {
      try {
        db.exec('ROLLBACK');
      } catch {
        // no transaction left to roll back
      }
      throw error;
    }
  };
  const schemaReady = once(runEnsureSchema);

  // Prepared once per database (statements can only be prepared after the table exists).
  interface Statements {
    db: SqliteDatabaseLike;
    consume: SqliteStatementLike;
    purge: SqliteStatementLike;
    owner: SqliteStatementLike;
    claim: SqliteStatementLike;
    row: SqliteStatementLike;
    record: SqliteStatementLike;
    held: SqliteStatementLike;
    bump: SqliteStatementLike;
    purgeBudget: SqliteStatementLike;
    begin: SqliteStatementLike;
    commit: SqliteStatementLike;
    rollback: SqliteStatementLike;
  }
  let statements: Statements | undefined;
  const ready = async () => {
    const db = await dbReady.get();
    if (autoSchema) await schemaReady.get();
    if (statements?.db !== db) {
      statements = {
        db,
        consume: db.prepare(consumeSql),
        purge: db.prepare(purgeSql),
        owner: db.prepare(ownerSql),
        claim: db.prepare(claimSql),
        row: db.prepare(rowSql),
        record: db.prepare(recordSql),
        held: db.prepare(heldSql),
        bump: db.prepare(bumpSql),
        purgeBudget: db.prepare(purgeBudgetSql),
        // BEGIN IMMEDIATE takes the write lock first (waiting up to busy_timeout): the batch cannot
        // fail half-way on a lock held by another process.
        begin: db.prepare('BEGIN IMMEDIATE'),
        commit: db.prepare('COMMIT'),
        rollback: db.prepare('ROLLBACK'),
      };
    }
    return statements;
  };

  /**
   * better-sqlite3 runs the statement inside the call: when `run` throws a SQLite error, the statement
   * did not write, and when it returns, its answer is in hand — no reply can be lost in between. Only a
   * wrapped database (an injected object that adds timeouts, proxies to another thread or process)
   * can fail after writing; for any error that is not SQLite's the store asks once, as the PostgreSQL
   * store does: this call's owner → `true`; a live row of another owner → `false`; else unknown.
   */
  const resolveLost = (statement: SqliteStatementLike, id: string, mine: string, original: unknown): boolean => {
    let row: { owner?: unknown; expires_at?: unknown } | undefined;
    try {
      row = statement.get(namespace, id) as typeof row;
    } catch {
      throw toStoreError(original);
    }
    if (row !== undefined && row.owner === mine) return true;
    if (row !== undefined && Number(row.expires_at) >= Math.floor(now())) return false;
    throw toStoreError(original);
  };
  const isSqliteError = (error: unknown): boolean => {
    const code = (error as { code?: unknown } | null)?.code;
    return typeof code === 'string' && code.startsWith('SQLITE_');
  };

  const assertOpen = (): void => {
    if (closed) throw new StoreUnavailableError({ cause: new Error('replay store is closed') });
  };

  /** One consume, one autocommit statement (no group commit, or a batch of one). */
  const consumeOne = (prepared: Statements, id: string, expires: number, mine: string): boolean => {
    try {
      return prepared.consume.run(namespace, id, expires, mine, Math.floor(now())).changes > 0;
    } catch (error) {
      if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
      return resolveLost(prepared.owner, id, mine, error);
    }
  };

  const closedError = () => new StoreUnavailableError({ cause: new Error('replay store is closed') });

  /** A wrapped database that failed after a write may have written it: rethrown unless it is that case. */
  const surely = (prepared: Statements, error: unknown): void => {
    if (MrtrError.is(error) || isSqliteError(error) || !prepared.db.open) throw error;
  };

  /**
   * One claim, inside the batch's transaction: the upsert (see claimSql) hands back the row as it left it. Its
   * owner is this call's exactly when it took the id. A wrapped database failing after the write is asked once,
   * as for a consume.
   */
  const claimIn = (prepared: Statements, op: ClaimOp, t: number, mine: string): ClaimResult => {
    let row: HeldRow | undefined;
    try {
      row = prepared.claim.get({ ns: namespace, id: op.id, expires: op.expires, owner: mine, fp: op.fp, now: t }) as HeldRow | undefined;
    } catch (error) {
      surely(prepared, error);
      try {
        row = prepared.row.get(namespace, op.id) as HeldRow | undefined;
      } catch {
        throw toStoreError(error);
      }
      if (row !== undefined && row.owner === mine) return FIRST;
      if (isLive(row, Math.floor(now()))) return heldStatus(row, op.fp);
      throw toStoreError(error);
    }
    if (row === undefined) throw toStoreError(new Error('claim: the upsert returned no row'));
    return row.owner === mine ? FIRST : heldStatus(row, op.fp);
  };

  /**
   * One record, inside the batch's transaction (the single writer: nothing else writes in between): the claim's own
   * fingerprint, no outcome yet, live; the outcome is kept when it is not '' and fits in what the namespace's
   * budget has left (its bytes go to the bucket of the id's expiry), else '' is stored.
   */
  const recordIn = (prepared: Statements, op: RecordOp, t: number, budget: { left: number | undefined }): boolean => {
    const row = prepared.row.get(namespace, op.id) as HeldRow | undefined;
    if (row === undefined || row.fp !== op.fp || (row.outcome !== null && row.outcome !== undefined)) return false;
    const expires = Number(row.expires_at);
    if (!(expires >= t)) return false;
    budget.left ??=
      outcomeBudgetBytes - Number((prepared.held.get(namespace, budgetBucket(t)) as { held?: unknown } | undefined)?.held ?? 0);
    const bytes = op.outcome === '' ? 0 : Buffer.byteLength(op.outcome, 'utf8');
    const keep = bytes > 0 && bytes <= budget.left;
    try {
      prepared.record.run(keep ? op.outcome : '', namespace, op.id, op.fp, t);
      if (keep) prepared.bump.run(namespace, budgetBucket(expires), bytes);
    } catch (error) {
      surely(prepared, error);
      // A wrapped database failing after the write: this outcome on the row → stored; else unknown.
      let after: HeldRow | undefined;
      try {
        after = prepared.row.get(namespace, op.id) as HeldRow | undefined;
      } catch {
        throw toStoreError(error);
      }
      if (after !== undefined && after.fp === op.fp && after.outcome === (keep ? op.outcome : '')) return keep;
      throw toStoreError(error);
    }
    if (keep) budget.left -= bytes;
    return keep;
  };

  /**
   * Runs one batch of queued consumes, claims and records, in queue order, in one `BEGIN IMMEDIATE … COMMIT`
   * (one commit, one sync, for the whole batch; a lone consume is one autocommit statement), and settles each once
   * the commit has succeeded. Statements run one after the other, so a later call of an id sees what an earlier
   * one wrote (a repeated consume is `false`, a repeated claim `pending` or a miss). A SQLite error (a busy lock past
   * busy_timeout, a full disk, a failed commit) rolls the batch back and fails every call closed.
   */
  const runBatch = async (batch: Op[]): Promise<void> => {
    let prepared: Statements;
    try {
      prepared = statements ?? (await ready());
      assertOpen();
    } catch (error) {
      const failure = toStoreError(error);
      for (const op of batch) op.reject(failure);
      return;
    }
    const lone = batch[0] as Op;
    if (batch.length === 1 && lone.kind === 'consume') {
      try {
        lone.resolve(consumeOne(prepared, lone.id, lone.expires, ownerValue()));
      } catch (error) {
        lone.reject(toStoreError(error));
      }
      return;
    }
    const answers = new Array<boolean | ClaimResult | MrtrError>(batch.length);
    // One random draw for the batch's owner values (a draw per call costs as much as the statement at high rates).
    const owners = ownerValues(batch.length);
    try {
      prepared.begin.run();
      try {
        const t = Math.floor(now());
        const budget: { left: number | undefined } = { left: undefined };
        // Ids an earlier consume or claim of this batch left live: a later consume of one is false without a statement.
        const held = new Set<string>();
        for (let i = 0; i < batch.length; i++) {
          const op = batch[i] as Op;
          try {
            if (op.kind === 'consume' && held.has(op.id)) {
              answers[i] = false;
              continue;
            }
            if (op.kind !== 'record') held.add(op.id);
            if (op.kind === 'claim') answers[i] = claimIn(prepared, op, t, owners[i] as string);
            else if (op.kind === 'record') answers[i] = recordIn(prepared, op, t, budget);
            else {
              const mine = owners[i] as string;
              try {
                answers[i] = prepared.consume.run(namespace, op.id, op.expires, mine, t).changes > 0;
              } catch (error) {
                surely(prepared, error);
                // A wrapped database failing after the write: asked inside the transaction, like a single consume.
                answers[i] = resolveLost(prepared.owner, op.id, mine, error);
              }
            }
          } catch (error) {
            if (!MrtrError.is(error) || !prepared.db.open) throw error;
            answers[i] = error;
          }
        }
        prepared.commit.run();
      } catch (error) {
        try {
          prepared.rollback.run();
        } catch {
          // SQLite rolled back already (or the database is gone)
        }
        throw error;
      }
    } catch (error) {
      const failure = toStoreError(error);
      for (const op of batch) op.reject(failure);
      return;
    }
    for (let i = 0; i < batch.length; i++) {
      const answer = answers[i] as boolean | ClaimResult | MrtrError;
      const op = batch[i] as Op;
      if (answer instanceof MrtrError) op.reject(answer);
      else (op.resolve as (value: boolean | ClaimResult) => void)(answer);
    }
  };

  const queue =
    groupCommit === undefined
      ? undefined
      : createBatcher<Op, boolean | ClaimResult>({ ...batcherOptions(groupCommit, 1), flush: 'immediate', run: runBatch });

  const consume = async (id: string, expiresAtMs: number): Promise<boolean> => {
    const expires = checkConsumeArgs(id, expiresAtMs);
    assertOpen();
    // An id is live while now <= expiresAtMs; one already past it cannot be remembered, so it is never a first use.
    if (expires <= now()) return false;
    if (queue !== undefined) {
      return new Promise<boolean>((resolve, reject) => {
        queue.push({ kind: 'consume', id, expires, queuedAt: 0, resolve, reject });
      });
    }
    try {
      // After the first successful consume the statement is ready: no await on the hot path.
      const prepared = statements ?? (await ready());
      assertOpen();
      return consumeOne(prepared, id, expires, ownerValue());
    } catch (error) {
      throw toStoreError(error);
    }
  };

  /** Claims ride the group commit with consumes and records (one transaction per batch). */
  const claim = async (id: string, expiresAtMs: number, fingerprint: string): Promise<ClaimResult> => {
    const expires = checkClaimArgs(id, expiresAtMs, fingerprint);
    assertOpen();
    if (expires <= now()) {
      // As for consume: an id already past its expiry cannot be remembered, so it is never a first use and
      // nothing is written; a live row of the id still answers how it is held (read only).
      try {
        const prepared = statements ?? (await ready());
        assertOpen();
        const row = prepared.row.get(namespace, id) as HeldRow | undefined;
        return isLive(row, Math.floor(now())) ? heldStatus(row, fingerprint) : REPLAYED;
      } catch (error) {
        throw toStoreError(error);
      }
    }
    return new Promise<ClaimResult>((resolve, reject) => {
      const op: Op = { kind: 'claim', id, expires, fp: fingerprint, queuedAt: 0, resolve, reject };
      if (queue !== undefined) queue.push(op);
      else runBatch([op]).catch((error: unknown) => reject(toStoreError(error)));
    });
  };

  /** Records ride the group commit with consumes and claims (one transaction per batch). */
  const record = async (id: string, fingerprint: string, outcome: string): Promise<boolean> => {
    const stored = checkRecordArgs(id, fingerprint, outcome, maxOutcomeBytes);
    assertOpen();
    return new Promise<boolean>((resolve, reject) => {
      const op: Op = { kind: 'record', id, fp: fingerprint, outcome: stored, queuedAt: 0, resolve, reject };
      if (queue !== undefined) queue.push(op);
      else runBatch([op]).catch((error: unknown) => reject(toStoreError(error)));
    });
  };

  const runPurge = async (): Promise<number> => {
    assertOpen();
    const { purge: statement, purgeBudget } = await ready();
    let total = 0;
    for (let batch = 0; batch < purge.maxBatches && !closed; batch++) {
      if (batch > 0) await yieldToEventLoop();
      if (closed) break;
      const deleted = statement.run(Math.floor(now()) - purge.graceMs, purge.batchSize).changes;
      total += deleted;
      if (deleted < purge.batchSize) break;
    }
    // Budget buckets the clock has left (a bucket counts while the clock is in it or before it).
    if (!closed) purgeBudget.run(budgetBucket(Math.floor(now()) - purge.graceMs));
    return total;
  };

  const stopPurge = startPurgeTimer(
    label,
    purge.intervalMs,
    async () => {
      if (dbReady.done && (!autoSchema || schemaReady.done)) await runPurge();
    },
    onError,
  );

  let closing: Promise<void> | undefined;
  return {
    dialect: 'sqlite',
    table,
    maxOutcomeBytes,
    outcomeBudgetBytes,
    consume,
    claim,
    record,
    async ensureSchema() {
      assertOpen();
      try {
        await schemaReady.get();
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
        // Consumes still queued fail closed.
        queue?.failAll(closedError);
        closing = (async () => {
          if (injected !== undefined) return;
          await dbReady.get().catch(() => undefined);
          try {
            owned?.close();
          } catch {
            // already closed
          }
        })();
      }
      return closing;
    },
  };
}
